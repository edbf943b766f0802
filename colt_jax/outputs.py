"""Output folders that never destroy what colt_jax did not create, and all-or-nothing sets.

Rule: colt_jax writes into, replaces or deletes a folder only when the folder does not exist,
is empty, or was created by colt_jax (it holds the marker file `.colt_jax`, or, for folders
written before the marker existed, a file that only colt_jax writes there: `legacy`). Anything
else is refused with an `InputError` that says what to do.

`ResultSet` writes a set of results (run files, JSON) into a temporary sibling folder and
renames it into place, so an interrupted or failed command leaves the previous complete set
or none.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from typing import Optional, Sequence

from colt_jax.errors import InputError

MARKER = '.colt_jax'


def umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def usual_mode(path: str, directory: bool = False) -> None:
  """Gives `path` the mode a plain open()/mkdir() would (0666/0777 minus the umask), instead
  of mkstemp's 0600 / mkdtemp's 0700."""
  os.chmod(path, (0o777 if directory else 0o666) & ~umask())


def is_owned(path: str, legacy: Sequence[str] = ()) -> bool:
  """Whether `path` (an existing folder) is empty or was created by colt_jax."""
  entries = os.listdir(path)
  return (not entries or MARKER in entries or
          any(os.path.exists(os.path.join(path, name)) for name in legacy))


def check_writable_dir(path: str, what: str, *, legacy: Sequence[str] = (),
                       flag: str = '') -> str:
  """Raises `InputError` unless colt_jax may write `what` at `path` (see the module rule).

  Returns the absolute path. Nothing is created."""
  path = os.path.abspath(os.fspath(path))
  hint = f' ({flag})' if flag else ''
  if os.path.exists(path) and not os.path.isdir(path):
    raise InputError(f'{path}{hint}: exists and is not a folder; cannot write {what} there')
  if os.path.isdir(path) and not is_owned(path, legacy):
    first = sorted(os.listdir(path))[0]
    raise InputError(
        f'{path}{hint}: refusing to write {what} into a folder colt_jax did not create (it '
        f'holds {first!r} and no {MARKER} marker); choose a new or empty folder')
  parent = _existing_ancestor(path)
  if not os.access(parent, os.W_OK | os.X_OK):
    raise InputError(f'{path}{hint}: cannot write {what}: {parent} is not writable')
  return path


def check_writable_file(path: str, what: str, *, flag: str = '') -> str:
  """Raises `InputError` unless the file `path` can be (re)written: its folder, or the first
  existing ancestor, is writable and `path` is not a folder. Returns the absolute path."""
  path = os.path.abspath(os.fspath(path))
  hint = f' ({flag})' if flag else ''
  if os.path.isdir(path):
    raise InputError(f'{path}{hint}: is a folder; cannot write {what} there')
  parent = _existing_ancestor(path)
  if not os.access(parent, os.W_OK | os.X_OK):
    raise InputError(f'{path}{hint}: cannot write {what}: {parent} is not writable')
  return path


def claim_dir(path: str, what: str, *, legacy: Sequence[str] = (), flag: str = '') -> str:
  """`check_writable_dir`, then creates the folder (if needed) and marks it as colt_jax's."""
  path = check_writable_dir(path, what, legacy=legacy, flag=flag)
  os.makedirs(path, exist_ok=True)
  mark(path)
  return path


def mark(path: str) -> None:
  marker = os.path.join(path, MARKER)
  if not os.path.exists(marker):
    with open(marker, 'w') as f:
      f.write('Written by colt_jax: this folder may be replaced by colt_jax commands.\n')


def _existing_ancestor(path: str) -> str:
  parent = os.path.dirname(path)
  while parent and not os.path.exists(parent):
    up = os.path.dirname(parent)
    if up == parent:
      break
    parent = up
  return parent or '.'


def staging_dir(path: str) -> str:
  """A new, marked, empty sibling of `path` (usual mode) to build its replacement in."""
  parent = os.path.dirname(path)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.tmp-', dir=parent)
  usual_mode(tmp, directory=True)
  mark(tmp)
  return tmp


def replace_dir(tmp: str, path: str) -> None:
  """Moves the finished folder `tmp` to `path`, replacing (and then deleting) an old one that
  colt_jax owns. Between the two renames `path` is briefly absent, never half-written."""
  if os.path.exists(path):
    old = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.old-', dir=os.path.dirname(path))
    os.rmdir(old)
    os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old, ignore_errors=True)
  else:
    os.rename(tmp, path)


class ResultSet:
  """A folder of results written whole or not at all.

      with ResultSet('work/runs/div400-test', 'evaluation results') as out:
        write_run(out.path('topk-pool.txt'), ...)
        atomic.write_json(out.path('results.json'), ...)

  The constructor checks (before any long computation) that the folder may be written; files
  go into a temporary sibling, which replaces the folder when the block ends without an
  exception and is removed otherwise. `keep_old`: names of entries of the previous set that
  (glob patterns) are carried over unless the new set writes them (files other commands
  put there).
  """

  def __init__(self, path: str, what: str = 'results', *, legacy: Sequence[str] = (),
               keep_old: Optional[Sequence[str]] = None, flag: str = ''):
    self.final = check_writable_dir(path, what, legacy=legacy, flag=flag)
    self.keep_old = tuple(keep_old or ())
    self._tmp: Optional[str] = None

  def __enter__(self) -> 'ResultSet':
    self._tmp = staging_dir(self.final)
    return self

  def path(self, relative: str) -> str:
    """Where to write `relative` (a path inside the set); its folder is created."""
    if self._tmp is None:
      raise RuntimeError('ResultSet.path outside its `with` block')
    out = os.path.join(self._tmp, relative)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    return out

  def __exit__(self, exc_type, exc, tb) -> None:
    tmp, self._tmp = self._tmp, None
    if exc_type is not None:
      shutil.rmtree(tmp, ignore_errors=True)
      return
    try:
      names = os.listdir(self.final) if os.path.isdir(self.final) else []
      for name in names:
        old, new = os.path.join(self.final, name), os.path.join(tmp, name)
        if (any(fnmatch.fnmatch(name, p) for p in self.keep_old)
            and not os.path.exists(new)):
          (shutil.copytree if os.path.isdir(old) else shutil.copy2)(old, new)
      replace_dir(tmp, self.final)
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
