"""Tiny trainer configurations for the training tests (`scl_config`, `ttc_config`) and a check that
two parameter trees agree (`assert_trees_close`)."""
import jax
import numpy as np

from colt_jax.train import configs
from colt_jax.pairs.config import PairsTTCConfig


def scl_config(root, workdir, **kw):
  base = dict(dataset='synthetic', data_dir=root, workdir=str(workdir), batch_size=8,
              images_per_query=16, num_steps=4, checkpoint_every=2, log_every=1,
              learning_rate=1e-3, beta=0.5)
  base.update(kw)
  return configs.SCLConfig(**base)


def ttc_config(root, workdir, **kw):
  base = dict(dataset='synthetic', data_dir=root, workdir=str(workdir), batch_size=8,
              num_images=24, num_layers=1, num_heads=2, model_dim=16, num_steps=4,
              checkpoint_every=2, log_every=1, learning_rate=1e-3)
  base.update(kw)
  return PairsTTCConfig(**base)


def assert_trees_close(a, b, atol, skip=()):
  leaves_b = jax.tree_util.tree_leaves(b)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), leaves_b):
    name = jax.tree_util.keystr(path)
    if any(s in name for s in skip):
      continue
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-4, err_msg=name)

