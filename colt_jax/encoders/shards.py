"""Resumable shards: the partial directory an interrupted extraction resumes from.

Each finished shard is saved as `<out>.partial/<kind>-<index>.npy` (`shard_path`; written to
a temporary name, then `os.replace`, so a shard file is always complete: `save_shard`). The
run's settings are saved as `<out>.partial/settings.json` (`check_or_record_settings`); a
later run with the same settings reuses the finished shards (`load_shard`: None for a missing
or damaged one, which is then recomputed) and computes only the rest, while a run with other
settings is refused (`ResumeMismatchError`) rather than mixing features. A full disk keeps
the finished shards for the next run, and says so (`kept_on_full_disk`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from typing import Any, Mapping, Optional, Sequence

from absl import logging
import numpy as np

from colt_jax.util import atomic
from colt_jax.util import diskspace
from colt_jax.util import distributed
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

SETTINGS_FILE = 'settings.json'
_SHARD = re.compile(r'^[a-z]+-\d{5}\.npy$')  # `shard_path`'s names


class ResumeMismatchError(InputError):
  """`<out>.partial` holds shards made with other settings than the current run's."""


class ExtractionInterrupted(RuntimeError):
  """Raised by the `stop_after_shards` test hook (stands in for a killed run)."""


def digest(lines: Sequence[str]) -> str:
  """sha256 of the lines (each NUL-terminated): the resume settings' digest of inputs."""
  h = hashlib.sha256()
  for s in lines:
    h.update(s.encode('utf-8', 'surrogatepass'))
    h.update(b'\0')
  return h.hexdigest()


def save_shard(path: str, array: np.ndarray) -> None:
  """Saves a shard at `path` whole or not at all (temporary file, fsync, rename)."""
  tmp = os.path.join(os.path.dirname(path), f'.{os.path.basename(path)}.{os.getpid()}.tmp')
  try:
    with open(tmp, 'wb') as f:
      diskspace.save_npy(f, array)  # a full disk's error with its errno
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    if os.path.exists(tmp):
      os.unlink(tmp)
    if isinstance(e, OSError) and e.filename is None:
      e.filename = path  # a full disk's error names no file
    raise


@contextlib.contextmanager
def kept_on_full_disk(partial_dir: str):
  """Reports a full disk met in the block (the shards or the store being written) in one line
  (`diskspace.DiskFullError`) that says what the next run reuses: the finished shards stay in
  `partial_dir`. A folder holding none is removed (what its manifest lists: the settings and
  the plan), so a run that failed before its first shard leaves nothing behind."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    if not diskspace.is_full(e):
      raise
    finished = ([n for n in os.listdir(partial_dir) if _SHARD.match(n)]
                if os.path.isdir(partial_dir) else [])
    detail = ''
    if finished:
      detail = (f'; the {len(finished)} finished shard(s) in {partial_dir} are kept, and '
                'the next run resumes from them')
    elif os.path.isdir(partial_dir) and not distributed.is_multiprocess():
      outputs.remove_owned(partial_dir)
    raise diskspace.error(e, detail=detail) from e


def _differences(old: Mapping, new: Mapping, prefix: str = '') -> list:
  out = []
  for k in sorted(set(old) | set(new)):
    a, b = old.get(k), new.get(k)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += _differences(a, b, f'{prefix}{k}.')
    elif a != b:
      out.append(f'{prefix}{k}: {a!r} -> {b!r}')
  return out


def check_or_record_settings(partial_dir: str, settings: Mapping[str, Any],
                             shard_files: Sequence[str] = ()) -> bool:
  """Records `settings` in a new partial dir, or checks them against a resumed one; the
  chief passes `shard_files` (the names of every shard the run will write there), which are
  recorded in the folder's manifest before any is written (`colt_jax.util.outputs`).

  Returns True when resuming. Raises `ResumeMismatchError` naming what differs.
  """
  settings = json.loads(json.dumps(settings, allow_nan=False))
  path = os.path.join(partial_dir, SETTINGS_FILE)
  if shard_files:
    outputs.claim_dir(partial_dir, 'extraction shards', files=(SETTINGS_FILE, *shard_files))
  if os.path.isfile(path):
    try:
      with open(path) as f:
        old = json.load(f)
    except json.JSONDecodeError as e:
      raise ResumeMismatchError(f'{path}: unreadable settings ({e.msg}); delete {partial_dir} '
                                'to start over') from None
    if old != settings:
      diff = _differences(old, settings)
      raise ResumeMismatchError(
          f'{partial_dir} holds shards of a run with different settings ('
          + '; '.join(diff[:6]) + (f'; ... {len(diff) - 6} more' if len(diff) > 6 else '')
          + f'). Rerun with the same settings to resume, or delete {partial_dir} to start over.')
    return True
  os.makedirs(partial_dir, exist_ok=True)
  atomic.write_json(path, settings)
  return False


def shard_path(partial_dir: str, kind: str, index: int) -> str:
  return os.path.join(partial_dir, f'{kind}-{index:05d}.npy')


def load_shard(path: str, rows: int, dim: int) -> Optional[np.ndarray]:
  """The shard at `path` when it is there, readable, [rows, dim] float32 and finite, else None
  (a damaged shard is logged and recomputed)."""
  if not os.path.isfile(path):
    return None
  try:
    arr = np.load(path, allow_pickle=False)
  except (ValueError, OSError) as e:
    logging.warning('%s: unreadable shard (%s); recomputing it', path, e)
    return None
  if arr.shape != (rows, dim) or arr.dtype != np.float32 or not np.isfinite(arr).all():
    logging.warning('%s: shard has shape %s %s, expected (%d, %d) float32; recomputing it',
                    path, arr.shape, arr.dtype, rows, dim)
    return None
  return arr
