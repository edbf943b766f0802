"""Shared pytest fixtures."""
import os

import pytest


@pytest.fixture(scope='session')
def div400_root():
  """The real Div400 copy (`DIV400_ROOT`); tests that need it skip when it is unset."""
  root = os.environ.get('DIV400_ROOT')
  if not root:
    pytest.skip('DIV400_ROOT is unset: the real Div400 copy is not available')
  if not os.path.isdir(root):
    pytest.skip(f'DIV400_ROOT={root} is not a directory')
  return root
