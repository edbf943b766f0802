"""The entry points through which the paper's code finds methods beyond it (util.plugins)."""
import sys
import types

import pytest

from colt_jax.util import plugins
from colt_jax.util.errors import InputError


class _EntryPoint:

  def __init__(self, name, value):
    self.name, self.value = name, value

  def load(self):
    __import__(self.value)
    return sys.modules[self.value]


def test_each_group_is_imported_once_and_a_moved_module_says_to_reinstall(monkeypatch):
  """A group's modules are imported the first time the group is read, not again; an entry
  point naming a module that no longer exists (an install older than the checkout) is one line
  saying to reinstall, not an internal error."""
  loads = []
  module = types.ModuleType('colt_jax_test_plugin')
  sys.modules['colt_jax_test_plugin'] = module
  groups = {'colt_jax.test_ok': [_EntryPoint('ok', 'colt_jax_test_plugin')],
            'colt_jax.test_moved': [_EntryPoint('colt-pairs', 'colt_jax.pairs.no_such_module')]}

  def entry_points(group):
    loads.append(group)
    return groups[group]

  monkeypatch.setattr(plugins.metadata, 'entry_points', entry_points)
  monkeypatch.setattr(plugins, '_loaded', set())
  plugins.load_group('colt_jax.test_ok')
  plugins.load_group('colt_jax.test_ok')
  assert loads == ['colt_jax.test_ok']
  with pytest.raises(InputError, match=r'the installed entry point colt-pairs = '
                     r'colt_jax.pairs.no_such_module \(group colt_jax.test_moved\) cannot be '
                     r'imported .*run make install \(pip install -e .\)'):
    plugins.load_group('colt_jax.test_moved')
  del sys.modules['colt_jax_test_plugin']


def test_the_installed_groups_name_modules_that_exist():
  """pyproject.toml's entry points, as installed (make test installs them), import."""
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  for group in ('colt_jax.recipes', 'colt_jax.inference'):
    points = metadata.entry_points(group=group)
    assert points, f'no entry point of {group} installed: pip install -e .'
    for point in points:
      point.load()
