"""Atomic file writes: a temporary sibling in the same directory, then `os.replace`.

Readers, and runs killed half-way, never see half a file; a failed write leaves the old file
as it was and no temporary behind. Files get the usual mode (0666 minus the umask), not
mkstemp's private 0600.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from colt_jax import outputs


def write_text(path: str | os.PathLike, text: str) -> None:
  """Writes `text` (UTF-8) to `path` atomically, creating its directory."""
  write_bytes(path, text.encode('utf-8'))


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` atomically, creating its directory."""
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.', suffix='.tmp', dir=directory)
  try:
    outputs.usual_mode(tmp)
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def json_default(x: Any) -> Any:
  """NumPy scalars and arrays as JSON numbers and lists (json.dump's `default`)."""
  if isinstance(x, np.integer):
    return int(x)
  if isinstance(x, np.floating):
    return float(x)
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f'not JSON serialisable: {type(x)}')


def write_json(path: str | os.PathLike, obj: Any, **dump_kwargs) -> None:
  """Writes `obj` as JSON atomically: indent 1, sorted keys, NumPy values as numbers, a final
  newline; `dump_kwargs` override json.dumps's arguments."""
  kwargs = dict(indent=1, sort_keys=True, default=json_default)
  kwargs.update(dump_kwargs)
  write_text(path, json.dumps(obj, **kwargs) + '\n')
