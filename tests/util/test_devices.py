"""pmap's layout helpers (colt_jax/util/devices.py)."""
import jax
import numpy as np
import pytest

from colt_jax.util import devices


def test_replicate_then_unreplicate_is_the_tree_as_numpy():
  devs = jax.local_devices()[:4]
  tree = {'w': np.arange(6, dtype=np.float32).reshape(2, 3), 'step': np.int32(7)}
  rtree = devices.replicate(tree, devs)
  assert rtree['w'].shape == (len(devs), 2, 3)
  step = jax.pmap(lambda t: jax.tree_util.tree_map(lambda v: v + 1, t), axis_name=devices.AXIS)
  back = devices.unreplicate(step(rtree))
  assert isinstance(back['w'], np.ndarray) and back['w'].shape == (2, 3)
  np.testing.assert_array_equal(back['w'], tree['w'] + 1)  # small integers: exact anywhere
  assert int(back['step']) == 8


def test_shard_keeps_the_global_order_and_names_a_bad_batch():
  batch = devices.shard({'x': np.arange(8)}, 4)
  np.testing.assert_array_equal(batch['x'], np.arange(8).reshape(4, 2))
  with pytest.raises(ValueError, match='not divisible by 4'):
    devices.shard({'x': np.arange(6)}, 4)



def _cache_probe(tmp_path, **env):
  """Runs use_compilation_cache(<tmp>/cache) and one jitted program in a fresh process (the
  setting is process-wide); returns the folder it reports."""
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ('import sys, jax, jax.numpy as jnp\n'
          'from colt_jax.util import devices\n'
          'print(devices.use_compilation_cache(sys.argv[1], min_compile_secs=0))\n'
          'jax.jit(lambda x: jnp.sin(x) * 3)(jnp.ones(7)).block_until_ready()\n')
  base = {k: v for k, v in os.environ.items() if k != 'JAX_COMPILATION_CACHE_DIR'}
  return subprocess.run([sys.executable, '-c', code, str(tmp_path / 'cache')],
                        env=dict(base, **env), capture_output=True, text=True, timeout=120,
                        check=True).stdout.strip()


def test_compilation_cache_keeps_compiled_programs(tmp_path):
  import os  # pylint: disable=g-import-not-at-top
  assert _cache_probe(tmp_path) == str(tmp_path / 'cache')
  assert os.listdir(tmp_path / 'cache')  # the jitted program was written there
  # An explicit JAX_COMPILATION_CACHE_DIR wins, and the given folder is not made.
  other = tmp_path / 'explicit'
  assert _cache_probe(tmp_path / 'b', JAX_COMPILATION_CACHE_DIR=str(other)) == str(other)
  assert not (tmp_path / 'b' / 'cache').exists()
