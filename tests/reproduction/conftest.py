"""Fixtures of the tests in reproduction/ (once per session: they build what several
modules read and none changes)."""
import pytest
from colt_jax.reproduction import pipeline as reproduce
from colt_jax.reproduction import reproduce_config


# The tiny schedules the reproduction's tests train (two steps each).
TINY_SCL = """--dataset=synthetic
--beta=0.5
--learning_rate=1e-3
--batch_size=4
--images_per_query=8
--num_steps=2
--checkpoint_every=100
"""

TINY_TTC = """--dataset=synthetic
--num_layers=1
--num_heads=2
--model_dim=16
--num_images=40
--learning_rate=1e-3
--batch_size=4
--query_relative
--num_steps=2
--checkpoint_every=100
"""


@pytest.fixture(scope='session')
def repro_data(tmp_path_factory):
  """`tiny_synthetic`'s sizes with 5 category names, each a cluster of every topic: every
  fold's and inner fold's training vocabulary is the same size, so their trainings share
  compiled programs (with 40 names, each fold had its own SCL bank and phi class head: 23
  train-step compilations, about 40 s of this file)."""
  from colt_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  config = synthetic.SyntheticConfig(dim=16, num_vocabulary=5, dev_topics=8, test_topics=6,
                                     min_photos=50, max_photos=90, mean_clusters=5,
                                     min_clusters=5, max_clusters=5)
  return synthetic.generate(str(tmp_path_factory.mktemp('data') / 'repro'), seed=3,
                            config=config)


@pytest.fixture(scope='session')
def cfg(repro_data, tmp_path_factory):
  root = tmp_path_factory.mktemp('reproduce')
  flags_dir = root / 'configs'
  flags_dir.mkdir()
  (flags_dir / 'tiny_scl.flags').write_text(TINY_SCL)
  (flags_dir / 'tiny_ttc.flags').write_text(TINY_TTC)
  # "Paper" values: other learning rates, L=2, no query_relative, 8 heads, 4 steps.
  (flags_dir / 'paper_scl.flags').write_text(TINY_SCL.replace('1e-3', '1e-5') + '--beta=0.02\n')
  (flags_dir / 'paper_ttc.flags').write_text(
      TINY_TTC.replace('--query_relative\n', '').replace('--num_layers=1', '--num_layers=2')
      .replace('1e-3', '1e-4').replace('--num_heads=2', '--num_heads=8')
      .replace('--num_steps=2', '--num_steps=4'))
  return reproduce_config.ReproduceConfig(
      dataset='synthetic', data_dir=repro_data, workdir=str(root / 'work'),
      results_dir=str(root / 'results'), doc=str(root / 'RESULTS.md'), seeds=(0, 1), folds=2,
      protocols=('pool', 'global'),
      variants=('colt', 'colt-paper', 'SCL + top-k', 'X=2', 'without SCL'),
      config_dir=str(flags_dir), paper_config_dir=str(flags_dir), colt_flags='tiny',
      paper_flags='paper', progress=False,
      inner_folds=2, choice_steps=(1, 2), pairs_steps=0,
      cv_scl_grid=(('beta', (0.1, 0.5)), ('learning_rate', (1e-3,))))


@pytest.fixture(scope='session')
def payload(cfg):
  return reproduce.run(cfg, log=lambda *_: None)
