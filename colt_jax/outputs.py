"""Ownership of what colt_jax writes: a manifest per folder, and all-or-nothing result sets.

Rule: colt_jax writes into, replaces or cleans a folder only when the folder does not exist,
is empty, or carries colt_jax's manifest (`.colt_jax-manifest.json`) and holds nothing that
the manifest does not list. The manifest records, when colt_jax writes (never guessed from
names), exactly

* `files`: the files colt_jax wrote there (relative paths),
* `dirs`: the folders it made there, whose entries are checked one by one, and
* `trees`: folders whose whole content is written by a library on colt_jax's behalf (orbax
  checkpoints, TensorBoard event files, a nested colt_jax folder with its own manifest).

Anything else in the folder (a user's file or subfolder) is *foreign*: colt_jax refuses with
one line naming it, before any work, and never deletes or overwrites it. A folder that is not
empty and has no manifest is refused whatever names it holds. Replacing or cleaning a folder
removes only what its manifest lists. The only unlisted names colt_jax treats as its own are
the temporaries of its atomic writes of a listed file (`.<name>.<random>.tmp`, see
`colt_jax.atomic`), left behind only by a kill in the middle of a write.

Single files follow the same rule: colt_jax overwrites an existing file only when the
manifest of its folder lists it (`check_writable_file`, then `record_file` once written).

`ResultSet` writes a set of results (run files, JSON) into a temporary sibling folder and
renames it into place, so an interrupted or failed command leaves the previous complete set
or none.
"""
from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from typing import Iterable, List, Optional, Sequence

from colt_jax.errors import InputError

MANIFEST = '.colt_jax-manifest.json'
FORMAT = 'colt_jax.manifest/1'


def umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def usual_mode(path: str, directory: bool = False) -> None:
  """Gives `path` the mode a plain open()/mkdir() would (0666/0777 minus the umask), instead
  of mkstemp's 0600 / mkdtemp's 0700."""
  os.chmod(path, (0o777 if directory else 0o666) & ~umask())


# ----------------------------------------------------------------------------- the manifest


class Manifest:
  """What colt_jax wrote in one folder (see the module docstring)."""

  def __init__(self, files: Iterable[str] = (), dirs: Iterable[str] = (),
               trees: Iterable[str] = ()):
    self.files, self.dirs, self.trees = set(files), set(dirs), set(trees)

  @classmethod
  def load(cls, folder: str) -> Optional['Manifest']:
    """The folder's manifest, or None when it has none; a malformed one is an InputError."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
      return None
    try:
      with open(path, encoding='utf-8') as f:
        data = json.load(f)
      if data.get('format') != FORMAT:
        raise ValueError(f'format {data.get("format")!r}, expected {FORMAT!r}')
      lists = [data.get(k, []) for k in ('files', 'dirs', 'trees')]
      if not all(isinstance(l, list) and all(isinstance(x, str) for x in l) for l in lists):
        raise ValueError('files, dirs and trees must be lists of relative paths')
    except (OSError, ValueError, AttributeError) as e:
      raise InputError(f'{path}: not a colt_jax manifest ({e}); colt_jax will not write into '
                       f'{folder}') from None
    return cls(*lists)

  def save(self, folder: str) -> None:
    """Writes the manifest atomically (a temporary sibling, then rename)."""
    data = {'format': FORMAT,
            'about': 'Written by colt_jax: what it wrote in this folder. colt_jax replaces or '
                     'deletes only what is listed here; anything else stops it.',
            'files': sorted(self.files), 'dirs': sorted(self.dirs), 'trees': sorted(self.trees)}
    text = json.dumps(data, indent=1) + '\n'
    fd, tmp = tempfile.mkstemp(prefix=f'{MANIFEST}.', suffix='.tmp', dir=folder)
    try:
      usual_mode(tmp)
      with os.fdopen(fd, 'w', encoding='utf-8') as f:
        f.write(text)
      os.replace(tmp, os.path.join(folder, MANIFEST))
    except BaseException:
      if os.path.exists(tmp):
        os.unlink(tmp)
      raise

  def add_file(self, rel: str) -> None:
    rel = _normal(rel)
    self.files.add(rel)
    self._add_parents(rel)

  def add_tree(self, rel: str) -> None:
    rel = _normal(rel)
    self.trees.add(rel)
    self._add_parents(rel)

  def _add_parents(self, rel: str) -> None:
    parent = os.path.dirname(rel)
    while parent:
      self.dirs.add(parent)
      parent = os.path.dirname(parent)

  def lists(self, rel: str) -> bool:
    """Whether the manifest lists `rel` (a file, folder or tree, or inside a tree)."""
    rel = _normal(rel)
    if rel in self.files or rel in self.dirs or rel in self.trees:
      return True
    return any(rel.startswith(t + '/') for t in self.trees)

  def is_temporary(self, rel: str) -> bool:
    """`rel` is the temporary of an atomic write of a listed file (or of the manifest)."""
    head, name = os.path.split(rel)
    for listed in list(self.files) + [MANIFEST]:
      lhead, lname = os.path.split(listed)
      if lhead == head and (fnmatch.fnmatchcase(name, f'.{lname}.*.tmp')
                            or fnmatch.fnmatchcase(name, f'{lname}.*.tmp')):
        return True
    return False


def _normal(rel: str) -> str:
  rel = os.path.normpath(os.fspath(rel)).replace(os.sep, '/')
  if rel.startswith('../') or rel == '..' or os.path.isabs(rel):
    raise ValueError(f'not a path inside the folder: {rel!r}')
  return rel


def foreign_entries(folder: str, manifest: Optional[Manifest]) -> List[str]:
  """The entries of `folder` that colt_jax did not write (folders end with '/'), sorted.

  Without a manifest every entry is foreign."""
  manifest = manifest or Manifest()
  out = []
  for root, dirs, files in os.walk(folder):
    rel_root = os.path.relpath(root, folder)
    rel_root = '' if rel_root == '.' else rel_root.replace(os.sep, '/')
    for d in sorted(dirs):
      rel = f'{rel_root}/{d}' if rel_root else d
      if rel in manifest.trees:
        dirs.remove(d)
      elif rel not in manifest.dirs or os.path.islink(os.path.join(root, d)):
        dirs.remove(d)
        out.append(rel + '/')
    for name in files:
      rel = f'{rel_root}/{name}' if rel_root else name
      if rel == MANIFEST or rel in manifest.files or manifest.is_temporary(rel):
        continue
      out.append(rel)
  return sorted(out)


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
    foreign = foreign_entries(path, manifest)
    if foreign:
      raise _refusal(path, what, hint, manifest, foreign)
  parent = _existing_ancestor(path)
  if not os.access(parent, os.W_OK | os.X_OK):
    raise InputError(f'{path}{hint}: cannot write {what}: {parent} is not writable')
  return path


def claim_dir(path: str, what: str, *, files: Sequence[str] = (), trees: Sequence[str] = (),
              flag: str = '') -> str:
  """`check_writable_dir`, then creates the folder (if needed) and records in its manifest,
  before anything is written, the `files` and `trees` the caller will write there."""
  path = check_writable_dir(path, what, flag=flag)
  os.makedirs(path, exist_ok=True)
  manifest = Manifest.load(path) or Manifest()
  for f in files:
    manifest.add_file(f)
  for t in trees:
    manifest.add_tree(t)
  manifest.save(path)
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


def manifest_of_tree(folder: str) -> Manifest:
  """A manifest listing every file and folder under `folder` (one colt_jax just wrote whole,
  e.g. a staging folder); nested folders with their own manifest are listed as trees."""
  manifest = Manifest()
  for root, dirs, files in os.walk(folder):
    rel_root = os.path.relpath(root, folder)
    rel_root = '' if rel_root == '.' else rel_root.replace(os.sep, '/')
    for d in list(dirs):
      rel = f'{rel_root}/{d}' if rel_root else d
      if os.path.isfile(os.path.join(root, d, MANIFEST)):
        manifest.add_tree(rel)
        dirs.remove(d)
      else:
        manifest.dirs.add(rel)
    for name in files:
      rel = f'{rel_root}/{name}' if rel_root else name
      if rel != MANIFEST:
        manifest.add_file(rel)
  return manifest


def remove_owned(folder: str) -> List[str]:
  """Deletes what the manifest of `folder` lists, then the manifest and the folder if nothing
  else is left. Returns what was left (foreign entries, never touched)."""
  manifest = Manifest.load(folder)
  if manifest is None:
    return foreign_entries(folder, None) if os.path.isdir(folder) else []
  foreign = set(foreign_entries(folder, manifest))
  for rel in sorted(manifest.trees, key=len, reverse=True):
    p = os.path.join(folder, rel)
    if os.path.isdir(p) and not os.path.islink(p):
      shutil.rmtree(p)
    elif os.path.lexists(p):
      os.unlink(p)
  for rel in manifest.files:
    p = os.path.join(folder, rel)
    if os.path.lexists(p) and not os.path.isdir(p):
      os.unlink(p)
  for root, _, names in os.walk(folder):  # temporaries of listed files
    for name in names:
      rel = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, '/')
      if manifest.is_temporary(rel) and rel not in foreign:
        os.unlink(os.path.join(root, name))
  for rel in sorted(manifest.dirs, key=lambda r: r.count('/'), reverse=True):
    p = os.path.join(folder, rel)
    if os.path.isdir(p) and not os.listdir(p):
      os.rmdir(p)
  left = sorted(foreign)
  if not left:
    os.unlink(os.path.join(folder, MANIFEST))
    if not os.listdir(folder):
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
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.tmp-', dir=parent)
  usual_mode(tmp, directory=True)
  return tmp


def replace_dir(tmp: str, path: str, what: str = 'results', *, flag: str = '') -> None:
  """Moves the finished folder `tmp` (written whole by colt_jax) to `path`, writing its
  manifest first. An old `path` is replaced only when it holds nothing foreign (checked
  again now: a file added while the work ran stops it, and the finished set stays in `tmp`,
  named in the error). Only what the old manifest lists is deleted."""
  manifest_of_tree(tmp).save(tmp)
  if os.path.exists(path):
    hint = f' ({flag})' if flag else ''
    manifest = Manifest.load(path) if os.listdir(path) else Manifest()
    foreign = foreign_entries(path, manifest)
    if foreign:
      error = _refusal(path, what, hint, manifest, foreign)
      raise InputError(f'{error} (the finished {what} are kept in {tmp})')
    old = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.old-', dir=os.path.dirname(path))
    os.rmdir(old)
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
  from colt_jax import atomic  # pylint: disable=import-outside-toplevel
  path = check_writable_file(path, what, flag=flag)
  record_file(path)
  atomic.write_text(path, text)
  return path


def write_owned_json(path: str, obj, what: str, *, flag: str = '') -> str:
  """`write_owned_text` of `obj` as JSON (`colt_jax.atomic.write_json`'s format)."""
  from colt_jax import atomic  # pylint: disable=import-outside-toplevel
  path = check_writable_file(path, what, flag=flag)
  record_file(path)
  atomic.write_json(path, obj)
  return path


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
