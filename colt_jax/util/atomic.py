"""Atomic file writes: a temporary sibling in the same directory, then `os.replace`.

Readers, and runs killed half-way, never see half a file; a failed write leaves the old file
as it was and no temporary behind, and its OSError names the file (a full disk's would not).
Files get the usual mode (0666 minus the umask), not mkstemp's private 0600.
`signals_deferred` holds Ctrl-C and SIGTERM back while several renames must happen together
(`outputs.replace_dir`).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import tempfile
import threading
from typing import Any

import numpy as np


def umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def usual_mode(path: str, directory: bool = False) -> None:
  """Gives `path` the mode a plain open()/mkdir() would (0666/0777 minus the umask), instead
  of mkstemp's 0600 / mkdtemp's 0700."""
  os.chmod(path, (0o777 if directory else 0o666) & ~umask())


@contextlib.contextmanager
def signals_deferred():
  """Holds SIGINT and SIGTERM back while the block runs: one that arrives then takes effect
  (its handler, as it was) when the block ends, not between two renames that replace a
  folder. Python runs signal handlers in the main thread whichever thread the kernel picked
  (a thread mask would not do: numpy's and XLA's threads leave them unblocked), so this holds
  them by handlers that only record them. Outside the main thread the block just runs."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  held = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not None]
  previous = {s: signal.getsignal(s) for s in held}
  pending = []
  for s in held:
    signal.signal(s, lambda number, frame: pending.append(number))
  try:
    yield
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
    for number in pending:
      signal.raise_signal(number)


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
    usual_mode(tmp)
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException as e:
    if os.path.exists(tmp):
      os.unlink(tmp)
    if isinstance(e, OSError) and e.filename is None:
      e.filename = path  # write(2)'s error names no file (a full disk's, say)
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


def nonfinite_key(obj: Any, prefix: str = '') -> str | None:
  """Where `obj` holds a NaN or infinite float ('results.x.mean[2]'), or None."""
  if isinstance(obj, (float, np.floating)):
    return None if math.isfinite(obj) else (prefix or '(the value)')
  if isinstance(obj, np.ndarray) and obj.dtype.kind in 'fc':
    bad = np.argwhere(~np.isfinite(obj))
    return f'{prefix}{[int(i) for i in bad[0]]}' if bad.size else None
  if isinstance(obj, dict):
    items = ((f'{prefix}.{k}' if prefix else str(k), v) for k, v in obj.items())
  elif isinstance(obj, (list, tuple)):
    items = ((f'{prefix}[{i}]', v) for i, v in enumerate(obj))
  else:
    return None
  for key, value in items:
    found = nonfinite_key(value, key)
    if found:
      return found
  return None


def write_json(path: str | os.PathLike, obj: Any, **dump_kwargs) -> None:
  """Writes `obj` as JSON atomically: indent 1, sorted keys, NumPy values as numbers, a final
  newline; `dump_kwargs` override json.dumps's arguments. A NaN or infinite number is a
  ValueError naming its key (JSON has none: `allow_nan=False`), and nothing is written."""
  kwargs = dict(indent=1, sort_keys=True, default=json_default)
  kwargs.update(dump_kwargs)
  kwargs['allow_nan'] = False
  try:
    text = json.dumps(obj, **kwargs)
  except ValueError as e:
    key = nonfinite_key(obj)
    if key is None:
      raise
    raise ValueError(f'{os.fspath(path)}: {key} is not a finite number; JSON holds no NaN '
                     'or infinity') from e
  write_text(path, text + '\n')
