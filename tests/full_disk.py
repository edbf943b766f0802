"""A full disk without root: a command line run with the files under one folder out of space.

    python tests/full_disk.py FOLDER BUDGET FAILING_SAVE SCRIPT ARGS...

runs SCRIPT as `__main__` (as `python SCRIPT ARGS` would) after patching Python's file opening
(`open`, `io.open`, `os.fdopen`: numpy's, json's, tensorboardX's writes) so that the files under
FOLDER share BUDGET bytes: a write past them raises OSError(ENOSPC) naming no file, as write(2)
on a full filesystem does. orbax writes a checkpoint's arrays through tensorstore, which Python
does not see: from the FAILING_SAVE-th save on (0: never), those writes fail in orbax's threads
as tensorstore's do on a full disk (a ValueError naming the OS error, logged by each thread with
its traceback). The test machine's disk stays as it is; CI needs no mount.

BUDGET `devfull:N` fills the disk as numpy meets it. The bytes written to the files under
FOLDER spend N (those written through Python as they are, those written through a file's
descriptor by its growth, counted when it is closed); no write fails while any are left. A
binary file opened for writing under FOLDER is a real buffered file (io.BufferedWriter over
io.FileIO), so numpy saves an array into it with `ndarray.tofile`, through its descriptor. One
opened once the bytes are spent is on the full disk: what Python writes still reaches it (the
.npy header numpy writes first, as on a disk with a few KiB left), but its descriptor
(`fileno()`, which numpy's tofile duplicates) is a real handle on /dev/full, so numpy's write
fails as on a real full disk, a short write: OSError('N requested and 0 written'), with no
errno (under stdio's 4 KiB buffer the write is lost silently: numpy ignores fclose's error).
`os.fsync` of that descriptor fails with ENOSPC, as on a disk that allocates at write-back.
"""
from __future__ import annotations

import builtins
import errno
import io
import os
import runpy
import sys


class _Budget:
  """The bytes left to the files under `folder`."""

  def __init__(self, folder: str, budget: int, strict: bool = True):
    self.folder = os.path.realpath(folder) + os.sep
    self.left = budget
    self.strict = strict  # a write past the budget fails (devfull: no write fails)

  def covers(self, file) -> bool:
    if isinstance(file, int):
      try:
        file = os.readlink(f'/proc/self/fd/{file}')
      except OSError:
        return False
    if not isinstance(file, (str, bytes, os.PathLike)):
      return False
    path = os.path.realpath(os.path.abspath(os.fsdecode(os.fspath(file))))
    return (path + os.sep).startswith(self.folder)

  def spend(self, n: int) -> None:
    if n > self.left and self.strict:
      self.left = 0
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    self.left = max(0, self.left - n)


class _Counted:
  """A file object whose writes spend the budget."""

  def __init__(self, f, budget: _Budget):
    self._f, self._budget = f, budget

  def write(self, data):
    self._budget.spend(len(data))
    return self._f.write(data)

  def writelines(self, lines):
    for line in lines:
      self.write(line)

  def __enter__(self):
    self._f.__enter__()
    return self

  def __exit__(self, *exc):
    return self._f.__exit__(*exc)

  def __iter__(self):
    return iter(self._f)

  def __getattr__(self, name):
    return getattr(self._f, name)


class _Raw(io.FileIO):
  """devfull: the raw file of a binary file opened for writing; its growth spends the budget
  when it is closed, and its descriptor is /dev/full's when it was opened on the full disk."""

  devfull = None  # the descriptor of /dev/full, opened once

  def __init__(self, file, mode, budget: _Budget, closefd=True, opener=None):
    super().__init__(file, mode, closefd, opener)
    self._budget, self._full = budget, budget.left <= 0
    self._start = os.fstat(super().fileno()).st_size

  def fileno(self):
    if not self._full:
      return super().fileno()
    if _Raw.devfull is None:
      _Raw.devfull = os.open('/dev/full', os.O_WRONLY)
    return _Raw.devfull

  def close(self):
    if not self.closed:
      self._budget.spend(max(0, os.fstat(super().fileno()).st_size - self._start))
    super().close()


def _writing(mode) -> bool:
  return any(c in str(mode) for c in 'wax+')


def install(folder: str, budget: str, failing_save: int = 0) -> None:
  """Patches the file openers (and orbax's array writes when `failing_save`); `budget` is N
  or devfull:N (the module docstring)."""
  devfull = str(budget).startswith('devfull:')
  state = _Budget(folder, int(str(budget).split(':')[-1]), strict=not devfull)
  real_open, real_fdopen, real_fsync = builtins.open, os.fdopen, os.fsync

  def counted_open(file, mode='r', buffering=-1, *args, **kwargs):
    if not (_writing(mode) and state.covers(file)):
      return real_open(file, mode, buffering, *args, **kwargs)
    if devfull and 'b' in mode and '+' not in mode and buffering != 0:
      return io.BufferedWriter(_Raw(file, mode, state, kwargs.get('closefd', True),
                                    kwargs.get('opener')))
    return _Counted(real_open(file, mode, buffering, *args, **kwargs), state)

  def counted_fdopen(fd, mode='r', *args, **kwargs):
    f = real_fdopen(fd, mode, *args, **kwargs)  # through io.open: counted_open's in devfull
    return (_Counted(f, state) if not devfull and _writing(mode) and state.covers(fd)
            else f)

  def fsync(fd):
    fd = fd.fileno() if hasattr(fd, 'fileno') else fd
    if fd == _Raw.devfull:  # the descriptor of a file on the full disk
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_fsync(fd)

  builtins.open = io.open = counted_open
  os.fdopen = counted_fdopen
  if devfull:
    os.fsync = fsync
  if failing_save:
    _fail_checkpoints(state, failing_save)


def _fail_checkpoints(state: _Budget, failing_save: int) -> None:
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from orbax.checkpoint._src.serialization import type_handlers  # pylint: disable=g-import-not-at-top
  saves = []
  save, write = ocp.CheckpointManager.save, type_handlers.NumpyHandler._open_and_write

  def counted_save(self, step, *args, **kwargs):
    saves.append(step)
    return save(self, step, *args, **kwargs)

  async def failing_write(self, value, tspec, ts_context):
    where = tspec['kvstore']['base']['path']
    if len(saves) >= failing_save and state.covers(where):
      raise ValueError(f'RESOURCE_EXHAUSTED: Error writing local file "{where}d/0": Failed '
                       f'to write 1014 bytes to file 20: No space left on device '
                       f"[os_error_code='28']")
    return await write(self, value, tspec, ts_context)

  ocp.CheckpointManager.save = counted_save
  type_handlers.NumpyHandler._open_and_write = failing_write  # pylint: disable=protected-access


def main() -> None:
  folder, budget, failing_save, script = sys.argv[1:5]
  install(folder, budget, int(failing_save))
  sys.argv = sys.argv[4:]
  sys.path[0] = os.path.dirname(os.path.abspath(script))
  runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
  main()
