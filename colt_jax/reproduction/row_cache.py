"""The row cache of the reproduction (`RowCache`): every finished row and choice is a JSON file
keyed by its configuration, the versions of the baselines it runs (`row_versions`) and
`ROWS_CODE_VERSION`, so that a rerun skips finished rows; the
copy committed with the repository (`committed_rows_dir`) lets a fresh clone resume from them.
`digest` names a configuration (the trainings' folders), `read_json` reads a cached record.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Callable, Mapping, Optional

import jax

from colt_jax.reproduction import row_versions
from colt_jax.util import atomic
from colt_jax.util import outputs

# Rows computed between two drops of JAX's compiled executables (`RowCache.cached`).
RELEASE_COMPILED_EVERY = 10
# Part of every row's cache key: raise it when a change of code (not of configuration) changes
# what a row computes, so that cached rows (committed ones included) are computed anew.
ROWS_CODE_VERSION = 1


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


class RowCache:
  """The rows and choices finished under `rows_root`, one JSON file each per kind (a fold's
  tag, 'official') and name, keyed by the configuration that computed it."""

  def __init__(self, rows_root: str, own_folder: bool):
    """`own_folder`: `rows_root` is a folder of its own (reproduce.py's --rows_dir), claimed
    here and recording each kind in its manifest (else it lies in the work folder)."""
    self.rows_root = rows_root
    self._own_folder = own_folder
    if own_folder:
      outputs.claim_dir(rows_root, 'reproduce\'s row cache', flag='--rows_dir')
    self._computed = 0  # rows computed (not read from rows/) by this process

  def row_path(self, kind: str, name: str) -> str:
    """Where the row cache keeps the row or choice `name` of `kind` (a fold's tag, 'official')."""
    safe = name.replace(' ', '_').replace('(', '').replace(')', '').replace('/', '-')
    return os.path.join(self.rows_root, kind, safe + '.json')

  def saved_row(self, kind: str, name: str) -> Optional[dict]:
    """The cached record of a row or choice, whatever its key (None when there is none)."""
    return read_json(self.row_path(kind, name))

  def cached(self, kind: str, name: str, key: Mapping, compute: Callable[[], dict]) -> dict:
    """A row's result from `rows/`, or computed and saved (keyed by its configuration; a row
    cached before versions is found by `row_versions.legacy_match`)."""
    path = self.row_path(kind, name)
    key = dict(key, code=ROWS_CODE_VERSION)
    old = read_json(path)
    want = json.loads(json.dumps(key, default=str, allow_nan=False))
    if old is not None and (old.get('key') == want
                            or row_versions.legacy_match(old.get('key'), want)):
      return old
    t0 = time.perf_counter()
    record = dict(compute(), key=key)
    record['seconds'] = time.perf_counter() - t0  # training included, when this row trained
    if self._own_folder:  # a folder of its own: each kind recorded in its manifest
      outputs.record(self.rows_root, trees=(kind,))
    atomic.write_json(path, record, indent=None)  # compact: the committed cache stays small
    # Every row compiles its own models: drop the compiled executables every few rows, or a
    # run of hours accumulates JIT memory until LLVM cannot map more (seen: 'Cannot allocate
    # memory'); not after every row, which made each row trace and lower everything anew.
    self._computed += 1
    if self._computed % RELEASE_COMPILED_EVERY == 0:
      jax.clear_caches()
    return json.loads(json.dumps(record, default=atomic.json_default, allow_nan=False))
