"""Methods beyond the paper, found through the entry points installed packages declare.

A module named in an entry point group registers what it adds (a recipe, a settings class)
when imported; the paper's code imports the group's modules before reading a saved file that
names fields beyond its own (`train.recipes`, `inference.settings`), never the modules by name.
"""
from importlib import metadata

from colt_jax.util.errors import InputError

_loaded = set()


def load_group(group: str) -> None:
  """Imports, once per process, each module of the entry point `group`. One that cannot be
  imported (an install older than the checkout: the metadata names a moved module) is one
  line saying to reinstall."""
  if group in _loaded:
    return
  _loaded.add(group)
  for entry_point in metadata.entry_points(group=group):
    try:
      entry_point.load()
    except ImportError as e:
      raise InputError(f'the installed entry point {entry_point.name} = {entry_point.value} '
                       f'(group {group}) cannot be imported ({e}); the installed colt_jax is '
                       'older than this checkout: run make install (pip install -e .)') from None
