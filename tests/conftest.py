"""Shared pytest fixtures.

Four host CPU devices are configured before JAX is imported, so pmap tests can compare one
device with four (`XLA_FLAGS=--xla_force_host_platform_device_count=4`).
"""
import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=4')

import pytest  # pylint: disable=g-import-not-at-top,g-bad-import-order


@pytest.fixture(scope='session')
def div400_root():
  """The real Div400 copy (`DIV400_ROOT`); tests that need it skip when it is unset."""
  root = os.environ.get('DIV400_ROOT')
  if not root:
    pytest.skip('DIV400_ROOT is unset: the real Div400 copy is not available')
  if not os.path.isdir(root):
    pytest.skip(f'DIV400_ROOT={root} is not a directory')
  return root


@pytest.fixture(scope='session')
def tiny_synthetic(tmp_path_factory):
  """A small synthetic dataset (8 dev + 6 test topics, 50-90 photos, dim 16)."""
  from colt_jax.datasets import synthetic  # pylint: disable=g-import-not-at-top
  cfg = synthetic.SyntheticConfig(dim=16, num_vocabulary=40, dev_topics=8, test_topics=6,
                                  min_photos=50, max_photos=90, mean_clusters=6)
  return synthetic.generate(str(tmp_path_factory.mktemp('data') / 'tiny'), seed=3, config=cfg)


@pytest.fixture(scope='session')
def tiny_clip_dir(tmp_path_factory):
  """A tiny random FlaxCLIPModel with tokenizer and image processor, saved to disk."""
  from tiny_clip import write_tiny_clip  # pylint: disable=g-import-not-at-top
  return write_tiny_clip(str(tmp_path_factory.mktemp('clip') / 'tiny'))
