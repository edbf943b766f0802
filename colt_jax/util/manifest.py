"""The manifest: what colt_jax wrote in one folder, recorded when it writes (`outputs` applies
the rules). `files` are the files colt_jax wrote, `dirs` the folders it made (checked entry by
entry), `trees` folders whose whole content a library wrote on colt_jax's behalf (orbax
checkpoints, TensorBoard events) or nested colt_jax folders with their own manifest (checked
by it, entry by entry), and `what` what colt_jax wrote there (`outputs`: a folder is
replaced only by the same kind of content). The
only unlisted names counted as colt_jax's are the temporaries of its atomic writes of a
listed file (`.<name>.<random>.tmp`, `colt_jax.util.atomic`).
"""
from __future__ import annotations

import fnmatch
import json
import os
from typing import Iterable, List, Optional

from colt_jax.util import atomic
from colt_jax.util.errors import InputError

MANIFEST = '.colt_jax-manifest.json'
FORMAT = 'colt_jax.manifest/1'


class Manifest:
  """What colt_jax wrote in one folder (see the module docstring)."""

  def __init__(self, files: Iterable[str] = (), dirs: Iterable[str] = (),
               trees: Iterable[str] = (), what: Optional[str] = None):
    self.files, self.dirs, self.trees = set(files), set(dirs), set(trees)
    self.what = what  # what colt_jax wrote here ('a feature store'); None: not recorded

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
      for entry in (x for l in lists for x in l):  # nothing outside the folder: never deleted
        if not entry or entry == '.' or _normal(entry) != entry:
          raise ValueError(f'not a normal path inside the folder: {entry!r}')
      what = data.get('what')
      if what is not None and not isinstance(what, str):
        raise ValueError('what must be a string')
    except (OSError, ValueError, AttributeError) as e:
      raise InputError(f'{path}: not a colt_jax manifest ({e}); colt_jax will not write into '
                       f'{folder}') from None
    return cls(*lists, what=what)

  def save(self, folder: str) -> None:
    """Writes the manifest atomically (a temporary sibling, then rename)."""
    data = {'format': FORMAT,
            'about': 'Written by colt_jax: what it wrote in this folder. colt_jax replaces or '
                     'deletes only what is listed here; anything else stops it.',
            'files': sorted(self.files), 'dirs': sorted(self.dirs), 'trees': sorted(self.trees)}
    if self.what is not None:
      data['what'] = self.what
    atomic.write_text(os.path.join(folder, MANIFEST), json.dumps(data, indent=1) + '\n')

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
        nested = os.path.join(root, d)
        if not os.path.islink(nested) and os.path.isfile(os.path.join(nested, MANIFEST)):
          # a colt_jax folder of its own: what its manifest does not list is foreign too
          out += [f'{rel}/{e}' for e in foreign_entries(nested, Manifest.load(nested))]
      elif rel not in manifest.dirs or os.path.islink(os.path.join(root, d)):
        dirs.remove(d)
        out.append(rel + '/')
    for name in files:
      rel = f'{rel_root}/{name}' if rel_root else name
      if rel == MANIFEST or rel in manifest.files or manifest.is_temporary(rel):
        continue
      out.append(rel)
  return sorted(out)


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
