"""A full disk as a fault the user fixes: one line naming the path being written and the space.

A write that fails for want of space (ENOSPC) or of quota (EDQUOT), whether from Python, numpy
or tensorstore (orbax's checkpoints), is no bug of colt_jax: every command reports it as bad
input (status 2, `colt_jax.util.cli`) in one line,

    <program>: error: no space left on device writing PATH (12 KiB free on /mnt/data)

PATH is what the caller says it was writing (a checkpoint's step, metrics.jsonl), else the
file the failed write names, unless that is a temporary (an atomic write's `.name.xxxx.tmp`, a
staging folder's `.name.tmp-xxxx/...`, orbax's `*.orbax-checkpoint-tmp*`), which the clean-up
removes: then it is the output the command is writing, the one it checked last
(`note_output`, which `colt_jax.util.outputs` calls for every folder or file it checks before
writing there). A write deep in a library (numpy's, a run file's lines) names no file, and is
named the same way. The free space is measured when the message is shown, after the command's
clean-up: what the next run has.

numpy writes an array into a real file with `ndarray.tofile`, whose short write raises
OSError('N requested and M written') with no errno: a short write to a regular file is a full
disk (or quota), so that error is one too. The project's own .npy files are written with
`save_npy` instead, through Python's file write, whose error has its errno.
"""
from __future__ import annotations

import errno
import os
import re
from typing import Optional

import numpy as np

from colt_jax.util.errors import InputError
from colt_jax.util.flagcheck import human_bytes

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_REASONS = {errno.ENOSPC: 'no space left on device', errno.EDQUOT: 'disk quota exceeded'}
# tensorstore names the OS error of a failed write: "... [os_error_code='28']".
_OS_CODE = re.compile(r"os_error_code='?(\d+)")
_TS_FILE = re.compile(r'(?:local file|Failed writing:) "([^"]+)"')
# numpy's ndarray.tofile on a short write: OSError without errno.
_SHORT_WRITE = re.compile(r'^\d+ requested and \d+ written$')
# The temporaries of atomic writes and staging folders (colt_jax.util.atomic, .outputs), and
# orbax's of a checkpoint being saved.
_TEMPORARY = re.compile(r'^\..+\.tmp(-\w+)?$|orbax-checkpoint-tmp')

_output: Optional[str] = None  # the output this process is writing (`note_output`)


def note_output(path: str) -> None:
  """Records `path` (a folder or a file) as the output being written, the one a full disk
  names when the failed write names no file. Temporaries are not recorded."""
  global _output
  path = os.path.abspath(os.fspath(path))
  if not is_temporary(path):
    _output = path


def is_temporary(path: str) -> bool:
  """Whether `path` is, or lies inside, a temporary that colt_jax or orbax removes."""
  return any(_TEMPORARY.search(part) for part in path.split(os.sep) if part)


def _code(e: BaseException) -> Optional[int]:
  """ENOSPC or EDQUOT when `e` is a full disk's error, else None."""
  if isinstance(e, DiskFullError):
    return e.code
  if isinstance(e, OSError):
    if e.errno is None and len(e.args) == 1 and _SHORT_WRITE.match(str(e.args[0])):
      return errno.ENOSPC  # numpy's tofile: a short write to a file
    return e.errno if e.errno in FULL_ERRNOS else None
  if isinstance(e, (ValueError, RuntimeError)):  # tensorstore's, through orbax
    text = str(e)
    codes = [int(c) for c in _OS_CODE.findall(text) if int(c) in FULL_ERRNOS]
    if codes:
      return codes[0]
    if 'No space left on device' in text:
      return errno.ENOSPC
  return None


class _Writes:
  """A file seen by numpy as having only `write`: numpy then writes in chunks (16 MiB) through
  it, not with `ndarray.tofile` through the file's descriptor."""

  def __init__(self, f):
    self.write = f.write


def save_npy(f, array: np.ndarray) -> None:
  """`np.save(f, array)` into the open binary file `f` through Python's file write, so that a
  full disk's error is OSError(ENOSPC), not numpy's short write without errno (memory: one
  chunk more than the array)."""
  np.save(_Writes(f), array, allow_pickle=False)


def is_full(e: Optional[BaseException]) -> bool:
  """Whether `e` is the error of a write to a full disk or past a quota."""
  return e is not None and _code(e) is not None


def free_space(path: str) -> tuple:
  """(bytes free to an unprivileged writer, the mount point) of the filesystem of `path`, or of
  its first existing ancestor."""
  path = os.path.abspath(path)
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  try:
    st = os.statvfs(path)
  except OSError:
    return None, path
  mount = path
  while not os.path.ismount(mount):
    mount = os.path.dirname(mount)
  return st.f_bavail * st.f_frsize, mount


def _named_path(e: BaseException) -> Optional[str]:
  """The file the error names: OSError's filename, or tensorstore's last named file."""
  if isinstance(e, OSError):
    name = e.filename2 if e.filename2 is not None else e.filename
    return os.fsdecode(name) if isinstance(name, (str, bytes)) else None
  found = _TS_FILE.findall(str(e))
  return found[-1] if found else None


class DiskFullError(InputError):
  """A write failed for want of space or quota; `str()` is the one line of the module
  docstring (the free space measured then), followed by `detail` (what became of the work)."""

  def __init__(self, path: str, detail: str = '', code: int = errno.ENOSPC):
    super().__init__(path, detail)
    self.path, self.detail, self.code = path, detail, code

  def __str__(self) -> str:
    free, mount = free_space(self.path)
    space = f'{human_bytes(free)} free on {mount}' if free is not None else 'free space unknown'
    return f'{_REASONS[self.code]} writing {self.path} ({space}){self.detail}'


def error(e: BaseException, path: Optional[str] = None, detail: str = '') -> DiskFullError:
  """The `DiskFullError` of the full disk's error `e`, naming `path` when the caller knows what
  it was writing, else the file `e` names unless a temporary, else the output being written
  (`note_output`); `detail` is appended."""
  if isinstance(e, DiskFullError):
    return DiskFullError(e.path, e.detail + detail, e.code)
  named = path or _named_path(e)
  if named is None or is_temporary(os.path.abspath(named)):
    named = _output
  return DiskFullError(os.path.abspath(named) if named else '(a file of this command)', detail,
                       _code(e) or errno.ENOSPC)
