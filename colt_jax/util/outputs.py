"""Ownership of what colt_jax writes: a manifest per folder, and all-or-nothing result sets.

Rule: colt_jax writes into, replaces or cleans a folder only when the folder does not exist,
is empty, or carries colt_jax's manifest (`.colt_jax-manifest.json`) and holds nothing that
the manifest does not list. The manifest records, when colt_jax writes (never guessed from
names), exactly

* `files`: the files colt_jax wrote there (relative paths),
* `dirs`: the folders it made there, whose entries are checked one by one, and
* `trees`: folders whose whole content is written by a library on colt_jax's behalf (orbax
  checkpoints, TensorBoard event files, a nested colt_jax folder with its own manifest).

A tree that carries its own manifest (a nested colt_jax folder) is checked by it, entry by
entry. The manifest also records `what` colt_jax wrote there (set by `claim_dir` and
`replace_dir`), and a folder is written or replaced only by the same kind (`_check_kind`).
`exclusive` lets one command at a time write a folder.

Anything else in the folder (a user's file or subfolder) is *foreign*: colt_jax refuses with
one line naming it, before any work, and never deletes or overwrites it. A folder that is not
empty and has no manifest is refused whatever names it holds. Replacing or cleaning a folder
removes only what its manifest lists. The only unlisted names colt_jax treats as its own are
the temporaries of its atomic writes of a listed file (`.<name>.<random>.tmp`, see
`colt_jax.util.atomic`), left behind only by a kill in the middle of a write.

Single files follow the same rule: colt_jax overwrites an existing file only when the
manifest of its folder lists it (`check_writable_file`, then `record_file` once written).

`ResultSet` writes a set of results (run files, JSON) into a temporary sibling folder and
renames it into place, so an interrupted or failed command leaves the previous complete set
or none.
"""
from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import os
import shutil
import tempfile
from typing import List, Optional, Sequence

from colt_jax.util import atomic
from colt_jax.util import diskspace
from colt_jax.util.errors import InputError
from colt_jax.util.manifest import MANIFEST, Manifest, foreign_entries, manifest_of_tree  # pylint: disable=unused-import

# Re-exported for the callers of `outputs.usual_mode` / `outputs.umask`.
usual_mode, umask = atomic.usual_mode, atomic.umask


def _refusal(path: str, what: str, hint: str, manifest: Optional[Manifest],
             foreign: Sequence[str]) -> InputError:
  more = f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''
  if manifest is None:
    why = (f'it holds {foreign[0]!r}{more} and no {MANIFEST}, so colt_jax did not create it; '
           'choose a new or empty folder')
  else:
    why = (f'it holds {foreign[0]!r}{more}, which colt_jax did not write (not in its '
           f'{MANIFEST}); move it out or choose another folder')
  return InputError(f'{path}{hint}: refusing to write {what} there: {why}')


def _check_kind(path: str, what: str, hint: str, manifest: Optional[Manifest]) -> None:
  """A folder colt_jax wrote is replaced only by the same kind of content (its manifest's
  `what`): a feature store does not replace a model or a workdir holding the command's
  own inputs."""
  if manifest is not None and manifest.what is not None and manifest.what != what:
    raise InputError(f'{path}{hint}: refusing to write {what} there: it holds '
                     f'{manifest.what}, written by colt_jax; choose another folder')


# ----------------------------------------------------------------------------- folders


def check_writable_dir(path: str, what: str, *, flag: str = '') -> str:
  """Raises `InputError` unless colt_jax may write (or replace) `what` at `path`: the folder
  is new, empty, or carries a manifest listing everything in it. Returns the absolute path;
  nothing is created."""
  path = os.path.abspath(os.fspath(path))
  hint = f' ({flag})' if flag else ''
  if os.path.lexists(path) and not os.path.isdir(path):
    raise InputError(f'{path}{hint}: exists and is not a folder; cannot write {what} there')
  if os.path.isdir(path) and os.listdir(path):
    manifest = Manifest.load(path)
    _check_kind(path, what, hint, manifest)
    foreign = foreign_entries(path, manifest)
    if foreign:
      raise _refusal(path, what, hint, manifest, foreign)
  parent = _existing_ancestor(path)
  if not os.access(parent, os.W_OK | os.X_OK):
    raise InputError(f'{path}{hint}: cannot write {what}: {parent} is not writable')
  diskspace.note_output(path)  # what a full disk names when the write names no file
  return path


def claim_dir(path: str, what: str, *, files: Sequence[str] = (), trees: Sequence[str] = (),
              flag: str = '') -> str:
  """`check_writable_dir`, then creates the folder (if needed) and records in its manifest,
  before anything is written, the `files` and `trees` the caller will write there."""
  path = check_writable_dir(path, what, flag=flag)
  made = not os.path.isdir(path)
  os.makedirs(path, exist_ok=True)
  manifest = Manifest.load(path) or Manifest()
  manifest.what = what
  for f in files:
    manifest.add_file(f)
  for t in trees:
    manifest.add_tree(t)
  try:
    manifest.save(path)
  except BaseException:
    if made and not os.listdir(path):  # a full disk: no empty folder left behind
      os.rmdir(path)
    raise
  return path


def record(folder: str, *, files: Sequence[str] = (), trees: Sequence[str] = ()) -> None:
  """Adds `files` / `trees` (relative to `folder`) to its manifest: call before writing them."""
  manifest = Manifest.load(folder) or Manifest()
  before = (len(manifest.files), len(manifest.trees))
  for f in files:
    manifest.add_file(f)
  for t in trees:
    manifest.add_tree(t)
  if (len(manifest.files), len(manifest.trees)) != before or not os.path.exists(
      os.path.join(folder, MANIFEST)):
    manifest.save(folder)


def remove_owned(folder: str) -> List[str]:
  """Deletes what the manifest of `folder` lists, then the manifest and the folder if nothing
  else is left. Returns what was left (foreign entries, never touched)."""
  manifest = Manifest.load(folder)
  if manifest is None:
    return foreign_entries(folder, None) if os.path.isdir(folder) else []
  foreign = set(foreign_entries(folder, manifest))
  real = os.path.realpath(folder)

  def inside(p: str) -> bool:  # through no link of a parent folder to elsewhere
    return os.path.commonpath([real, os.path.realpath(os.path.dirname(p))]) == real

  for rel in sorted(manifest.trees, key=len, reverse=True):
    p = os.path.join(folder, rel)
    if not inside(p):
      continue
    if os.path.isdir(p) and not os.path.islink(p):
      if os.path.isfile(os.path.join(p, MANIFEST)):  # a colt_jax folder: its own rule
        remove_owned(p)
      else:
        shutil.rmtree(p)
    elif os.path.lexists(p):
      os.unlink(p)
  for rel in manifest.files:
    p = os.path.join(folder, rel)
    if inside(p) and os.path.lexists(p) and not os.path.isdir(p):
      os.unlink(p)
  for root, _, names in os.walk(folder):  # temporaries of listed files
    for name in names:
      rel = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, '/')
      if manifest.is_temporary(rel) and rel not in foreign:
        os.unlink(os.path.join(root, name))
  for rel in sorted(manifest.dirs, key=lambda r: r.count('/'), reverse=True):
    p = os.path.join(folder, rel)
    if inside(p) and os.path.isdir(p) and not os.path.islink(p) and not os.listdir(p):
      os.rmdir(p)
  left = sorted(foreign)
  if not left:
    os.unlink(os.path.join(folder, MANIFEST))
    if not os.listdir(folder):
      if os.path.islink(folder):  # a link to the folder: the link goes, its target stays
        os.unlink(folder)
      else:
        os.rmdir(folder)
  return left


def _existing_ancestor(path: str) -> str:
  parent = os.path.dirname(path)
  while parent and not os.path.exists(parent):
    up = os.path.dirname(parent)
    if up == parent:
      break
    parent = up
  return parent or '.'


def staging_dir(path: str) -> str:
  """A new, empty sibling of `path` (usual mode) to build its replacement in."""
  parent = os.path.dirname(path)
  diskspace.note_output(path)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.tmp-', dir=parent)
  usual_mode(tmp, directory=True)
  return tmp


def replace_dir(tmp: str, path: str, what: str = 'results', *, flag: str = '') -> None:
  """Moves the finished folder `tmp` (written whole by colt_jax) to `path`, writing its
  manifest first. An old `path` is replaced only when it holds nothing foreign (checked
  again now: a file added while the work ran stops it, and the finished set stays in `tmp`,
  named in the error). Only what the old manifest lists is deleted."""
  staged = manifest_of_tree(tmp)
  staged.what = what
  staged.save(tmp)
  if os.path.exists(path):
    hint = f' ({flag})' if flag else ''
    manifest = Manifest.load(path) if os.listdir(path) else Manifest()
    _check_kind(path, what, hint, manifest)
    foreign = foreign_entries(path, manifest)
    if foreign:
      error = _refusal(path, what, hint, manifest, foreign)
      raise InputError(f'{error} (what this run finished is kept in {tmp})')
    old = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.old-', dir=os.path.dirname(path))
    os.rmdir(old)
    with atomic.signals_deferred():  # a Ctrl-C or SIGTERM waits for the swap and clean-up
      os.rename(path, old)
      os.rename(tmp, path)
      if os.path.exists(os.path.join(old, MANIFEST)):
        remove_owned(old)
      elif not os.listdir(old):
        os.rmdir(old)
  else:
    os.rename(tmp, path)


# ----------------------------------------------------------------------------- single files


def check_writable_file(path: str, what: str, *, flag: str = '') -> str:
  """Raises `InputError` unless colt_jax may (over)write the file `path`: it does not exist,
  or the manifest of its folder lists it; its folder (or first existing ancestor) is
  writable. Returns the absolute path."""
  path = os.path.abspath(os.fspath(path))
  hint = f' ({flag})' if flag else ''
  if os.path.isdir(path):
    raise InputError(f'{path}{hint}: is a folder; cannot write {what} there')
  if os.path.lexists(path):
    folder, name = os.path.split(path)
    manifest = Manifest.load(folder)
    if manifest is None or name not in manifest.files:
      raise InputError(f'{path}{hint}: refusing to overwrite a file colt_jax did not write '
                       f'(not listed in {os.path.join(folder, MANIFEST)}); choose another '
                       f'path for {what}')
  parent = _existing_ancestor(path)
  if not os.access(parent, os.W_OK | os.X_OK):
    raise InputError(f'{path}{hint}: cannot write {what}: {parent} is not writable')
  diskspace.note_output(path)  # what a full disk names when the write names no file
  return path


def record_file(path: str) -> None:
  """Records the file `path` in its folder's manifest (call it before writing the file)."""
  path = os.path.abspath(os.fspath(path))
  folder = os.path.dirname(path)
  os.makedirs(folder, exist_ok=True)
  record(folder, files=(os.path.basename(path),))


def write_owned_text(path: str, text: str, what: str, *, flag: str = '') -> str:
  """Writes a single file under the file rule: refuses a file colt_jax did not write,
  records the file, then writes it atomically. Returns the absolute path."""
  path = check_writable_file(path, what, flag=flag)
  record_file(path)
  atomic.write_text(path, text)
  return path


def write_owned_json(path: str, obj, what: str, *, flag: str = '') -> str:
  """`write_owned_text` of `obj` as JSON (`colt_jax.util.atomic.write_json`'s format)."""
  path = check_writable_file(path, what, flag=flag)
  record_file(path)
  atomic.write_json(path, obj)
  return path


# ----------------------------------------------------------------------------- one writer


@contextlib.contextmanager
def exclusive(path: str, what: str, *, flag: str = ''):
  """Holds, for the block, the one writer's lock of the folder `path`: a second colt_jax
  command writing there meanwhile (a second terminal, a script run twice) stops at once
  with one line instead of resuming the first one's half-written work. The lock is an
  advisory `flock` on a file of the system's temporary folder named after the path's digest
  (nothing is created beside `path`); the kernel releases it when the process ends."""
  real = os.path.realpath(os.fspath(path))
  name = 'colt_jax-' + hashlib.sha256(real.encode()).hexdigest()[:24] + '.lock'
  lock = os.path.join(tempfile.gettempdir(), name)
  writable = True
  try:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
      os.fchmod(fd, 0o666)  # other users' commands lock the same folder through it too
    except OSError:
      pass  # another user's lock file
  except PermissionError:  # another user's lock file without write permission: flock works
    writable = False  # on a read-only descriptor; only the holder's pid is not recorded
    try:
      fd = os.open(lock, os.O_RDONLY)
    except OSError as e:
      raise InputError(f'{real}{f" ({flag})" if flag else ""}: cannot open the lock file '
                       f'{lock} ({e.strerror})') from None
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.pread(fd, 32, 0).decode(errors='replace').strip() or '?'
      hint = f' ({flag})' if flag else ''
      raise InputError(f'{real}{hint}: another colt_jax command (pid {holder}) is writing '
                       f'{what} there now; wait for it to end or choose another folder') from None
    if writable:
      os.ftruncate(fd, 0)
      os.pwrite(fd, str(os.getpid()).encode(), 0)
    yield
  finally:
    os.close(fd)  # releases the lock


# ----------------------------------------------------------------------------- result sets


class ResultSet:
  """A folder of results written whole or not at all, with a manifest of what it holds.

      with ResultSet('work/runs/div400-test', 'evaluation results') as out:
        write_run(out.path('topk-pool.txt'), ...)
        atomic.write_json(out.path('results.json'), ...)

  The constructor checks (before any long computation) that the folder may be written; files
  go into a temporary sibling, which replaces the folder when the block ends without an
  exception and is removed otherwise. `keep_old`: glob patterns of entries of the previous
  set that are carried over unless the new set writes them (results of other commands).
  """

  def __init__(self, path: str, what: str = 'results', *,
               keep_old: Optional[Sequence[str]] = None, flag: str = ''):
    self.final = check_writable_dir(path, what, flag=flag)
    self.what, self.flag = what, flag
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
      manifest = Manifest.load(self.final) if os.path.isdir(self.final) else None
      written = set(os.listdir(tmp))
      for rel in sorted((manifest.files | manifest.trees) if manifest else ()):
        top = rel.split('/')[0]
        old, new = os.path.join(self.final, rel), os.path.join(tmp, rel)
        if (top not in written and any(fnmatch.fnmatch(top, p) for p in self.keep_old)
            and os.path.lexists(old) and not os.path.lexists(new)):
          os.makedirs(os.path.dirname(new), exist_ok=True)
          (shutil.copytree if os.path.isdir(old) else shutil.copy2)(old, new)
      replace_dir(tmp, self.final, self.what, flag=self.flag)
    except InputError:
      raise  # the finished set stays in tmp, named in the message
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
