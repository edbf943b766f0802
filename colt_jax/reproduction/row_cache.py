"""The row cache of the reproduction: every finished row and choice is a JSON file keyed by
its configuration, so that a rerun skips finished rows; the copy committed with the
repository (`committed_rows_dir`) lets a fresh clone resume from them. `digest` names a
configuration (the trainings' folders), `read_json` reads a cached record.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Optional


def committed_rows_dir(dataset: str) -> str:
  """The row cache committed with the repository for `dataset` (relative to the repo root):
  every finished row and choice of the reproduction, so a fresh clone resumes from them."""
  return f'row-cache/{dataset}'


def digest(obj: Any) -> str:
  text = json.dumps(obj, sort_keys=True, default=str, allow_nan=False)
  return hashlib.sha256(text.encode()).hexdigest()[:12]


def read_json(path: str) -> Optional[Any]:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)
