"""pmap's layout helpers (colt_jax/devices.py)."""
import jax
import numpy as np
import pytest

from colt_jax import devices


def test_replicate_then_unreplicate_is_the_tree_as_numpy():
  devs = jax.local_devices()[:4]
  tree = {'w': np.arange(6, dtype=np.float32).reshape(2, 3), 'step': np.int32(7)}
  rtree = devices.replicate(tree, devs)
  assert rtree['w'].shape == (len(devs), 2, 3)
  step = jax.pmap(lambda t: jax.tree_util.tree_map(lambda v: v + 1, t), axis_name=devices.AXIS)
  back = devices.unreplicate(step(rtree))
  assert isinstance(back['w'], np.ndarray) and back['w'].shape == (2, 3)
  np.testing.assert_array_equal(back['w'], tree['w'] + 1)
  assert int(back['step']) == 8


def test_shard_keeps_the_global_order_and_names_a_bad_batch():
  batch = devices.shard({'x': np.arange(8)}, 4)
  np.testing.assert_array_equal(batch['x'], np.arange(8).reshape(4, 2))
  with pytest.raises(ValueError, match='not divisible by 4'):
    devices.shard({'x': np.arange(6)}, 4)
