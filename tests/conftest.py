"""Shared pytest fixtures.

Four host CPU devices are configured before JAX is imported, so pmap tests can compare one
device with four (`XLA_FLAGS=--xla_force_host_platform_device_count=4`).

XLA compilation, not computation, is most of the suite's time (tiny models, many shapes), so
this process and the command lines its tests start compile more cheaply (each xdist worker
of `make test` imports this file, so each has its own settings):
- XLA's CPU backend without LLVM's optimisation passes (xla_env.COMPILE_FAST; tests that
  start a command line with another device count use xla_env.xla_flags).
- JAX's persistent compilation cache in a fresh folder per pytest run, made by
  pytest's process (xdist's controller, whose workers share it) and removed at its exit (or,
  after a run stopped by a signal, by the next run, by the owner file it records): a
  program compiled again (each trainer call builds its step anew, each command line starts
  cold, the other worker compiled it) is read back instead. An explicit
  JAX_COMPILATION_CACHE_DIR is left as it is.
- numba's cache (UMAP and pynndescent, experiments/visualize.py) stays where numba keeps it,
  beside the installed packages: they are compiled once per environment, not once per run
  (a private folder made every run compile them again: about 36 s of pynndescent's import).
"""
import atexit
import json
import os
import shutil
import sys
import tempfile

from xla_env import COMPILE_FAST, xla_flags  # pylint: disable=g-bad-import-order

os.environ.setdefault('XLA_FLAGS', xla_flags(4))
# On GPUs, float32 matrix products default to TF32 (a 10-bit mantissa): the tests compare
# float32 outputs at float32's rounding (float_compare), so they ask for full float32 products
# here and in the command lines they start (no change on CPUs, whose products are float32).
os.environ.setdefault('JAX_DEFAULT_MATMUL_PRECISION', 'highest')
if COMPILE_FAST.split('=')[0] not in os.environ['XLA_FLAGS']:
  os.environ['XLA_FLAGS'] += ' ' + COMPILE_FAST


CACHE_PREFIX = 'colt_jax_test_xla_cache_'
CACHE_OWNER = 'owner.json'  # in each cache folder: the pytest process that made it


def _process_start(pid: int):
  """The start time of process `pid` (Linux: /proc/<pid>/stat), None when it is not running;
  where /proc is absent (macOS), 0 for a running process."""
  if os.path.exists('/proc/self/stat'):
    try:
      with open(f'/proc/{pid}/stat', encoding='ascii', errors='replace') as f:
        return int(f.read().rsplit(')', 1)[1].split()[19])
    except FileNotFoundError:
      return None
    except (OSError, ValueError, IndexError):
      pass
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return None
  except OSError:  # someone else's process: it runs
    pass
  return 0


def _remove_stale_caches() -> None:
  """Removes the cache folders of earlier runs whose pytest process is gone without removing
  its own (stopped by SIGTERM or SIGKILL, where atexit does not run): only folders whose
  owner file says they are a test run's, and that process no longer runs."""
  base = tempfile.gettempdir()
  for name in os.listdir(base):
    path = os.path.join(base, name)
    if not name.startswith(CACHE_PREFIX) or not os.path.isdir(path):
      continue
    try:
      with open(os.path.join(path, CACHE_OWNER), encoding='utf-8') as f:
        owner = json.load(f)
      pid, started = int(owner['pid']), owner['started']
    except (OSError, ValueError, KeyError, TypeError):
      continue  # not recorded as a test run's: left alone
    if _process_start(pid) != started:
      shutil.rmtree(path, ignore_errors=True)


def _private_compilation_cache():
  """The compilation cache folder of this pytest run, shared by its xdist workers."""
  owner = os.environ.get('COLT_JAX_TEST_CACHE_PID')
  if owner == str(os.getpid()) or (owner is None and 'JAX_COMPILATION_CACHE_DIR' in os.environ):
    return
  if owner is not None and os.environ.get('PYTEST_XDIST_WORKER'):
    # An xdist worker shares its controller's folder: a program one worker compiled is read
    # back by the other (the controller removes the folder at exit).
    return
  _remove_stale_caches()
  path = tempfile.mkdtemp(prefix=CACHE_PREFIX)
  pid = os.getpid()
  with open(os.path.join(path, CACHE_OWNER), 'w', encoding='utf-8') as f:
    json.dump({'pid': pid, 'started': _process_start(pid)}, f)
  atexit.register(lambda: os.getpid() == pid and shutil.rmtree(path, ignore_errors=True))
  os.environ.update(JAX_COMPILATION_CACHE_DIR=path, COLT_JAX_TEST_CACHE_PID=str(pid),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
  if 'jax' in sys.modules:  # imported before this file (a plugin): its flags are read already
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update('jax_compilation_cache_dir', path)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)


_private_compilation_cache()

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
  from colt_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  cfg = synthetic.SyntheticConfig(dim=16, num_vocabulary=40, dev_topics=8, test_topics=6,
                                  min_photos=50, max_photos=90, mean_clusters=6)
  return synthetic.generate(str(tmp_path_factory.mktemp('data') / 'tiny'), seed=3, config=cfg)


@pytest.fixture(scope='session')
def tiny_colt(tiny_synthetic, tmp_path_factory):
  """The paper's g and phi trained for 3 steps on `tiny_synthetic`'s dev split: (SCLConfig,
  TTCConfig), method `colt` (colt-pairs' tests train theirs from it, e.g. test_retriever's
  tiny_pairs).

  phi sees N=64 candidates, more than the 50 photos of a full ranked list."""
  from colt_jax.train import configs  # pylint: disable=g-import-not-at-top
  from colt_jax.data import splits as data
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


@pytest.fixture
def dataset_copy(tiny_synthetic, tmp_path):
  """A private copy of the tiny synthetic dataset (official layout + feature stores)."""
  dst = tmp_path / 'data'
  shutil.copytree(tiny_synthetic, dst)
  return dst


@pytest.fixture(scope='session')
def dev_data(tiny_synthetic):
  """The tiny synthetic dataset's dev split, loaded."""
  from colt_jax.data import splits  # pylint: disable=g-import-not-at-top
  return splits.load('synthetic', 'dev', tiny_synthetic)
