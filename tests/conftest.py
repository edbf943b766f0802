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
def tiny_colt(tiny_synthetic, tmp_path_factory):
  """g and phi trained for 3 steps on `tiny_synthetic`'s dev split: (SCLConfig, TTCConfig).

  phi sees N=64 candidates, more than the 50 photos of a full ranked list."""
  from colt_jax import configs, data  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  work = tmp_path_factory.mktemp('colt')
  dev = data.load('synthetic', 'dev', tiny_synthetic)
  scl = configs.SCLConfig(dataset='synthetic', data_dir=tiny_synthetic, workdir=str(work / 'scl'),
                          num_steps=3, batch_size=4, images_per_query=8, beta=0.5,
                          learning_rate=1e-3)
  ttc = configs.TTCConfig(dataset='synthetic', data_dir=tiny_synthetic,
                          workdir=str(work / 'ttc'), scl_checkpoint=scl.workdir, num_steps=3,
                          batch_size=4, num_images=64, num_layers=1, num_heads=2,
                          model_dim=16)
  trainers.train_scl(scl, progress=False, split_data=dev)
  trainers.train_ttc(ttc, progress=False, split_data=dev)
  return scl, ttc


@pytest.fixture(scope='session')
def tiny_clip_dir(tmp_path_factory):
  """A tiny random FlaxCLIPModel with tokenizer and image processor, saved to disk."""
  from tiny_clip import write_tiny_clip  # pylint: disable=g-import-not-at-top
  return write_tiny_clip(str(tmp_path_factory.mktemp('clip') / 'tiny'))
