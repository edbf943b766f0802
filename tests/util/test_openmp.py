"""colt_jax/util/openmp.py: libgomp's idle threads sleep soon, unless the environment says
otherwise; in force only when set before libgomp loads."""
import os
import subprocess
import sys

import pytest
from checkout import REPO  # pylint: disable=g-bad-import-order

# A fresh process: what sleep_when_idle() returns before and after scikit-learn loads libgomp,
# and the policy it leaves in the environment.
_PROBE = """
import os
from colt_jax.util import openmp
before = openmp.sleep_when_idle()
import sklearn.cluster  # links libgomp
print(before, openmp.libgomp_loaded(), openmp.sleep_when_idle(), os.environ['OMP_WAIT_POLICY'],
      os.environ['GOMP_SPINCOUNT'])
"""


def _probe(env_policy=None) -> list:
  env = {k: v for k, v in os.environ.items() if k not in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}
  if env_policy is not None:
    env['OMP_WAIT_POLICY'] = env_policy
  out = subprocess.run([sys.executable, '-c', _PROBE], capture_output=True, text=True,
                       check=True, env=env)
  return out.stdout.split()


@pytest.mark.skipif(not os.path.exists('/proc/self/maps'), reason='needs /proc (Linux)')
def test_passive_before_libgomp_loads_and_too_late_after():
  assert _probe() == ['True', 'True', 'False', 'PASSIVE', '20000']


@pytest.mark.skipif(not os.path.exists('/proc/self/maps'), reason='needs /proc (Linux)')
def test_a_policy_the_environment_sets_is_kept():
  assert _probe('ACTIVE') == ['True', 'True', 'False', 'ACTIVE', '20000']


def test_the_scripts_that_serve_and_search_set_it_before_their_imports():
  """serve.py, search.py and the service benchmarks call sleep_when_idle() before importing
  anything but the standard library (a colt_jax module may load scikit-learn, hence
  libgomp)."""
  root = REPO
  allowed = {'from __future__ import annotations', 'import json', 'import os', 'import signal',
             'import socket', 'import subprocess', 'import sys', 'import tempfile',
             'from colt_jax.util import openmp'}
  for script in ('experiments/serve.py', 'experiments/search.py',
                 'benchmarks/bench_service.py', 'benchmarks/bench_batch_cost.py'):
    with open(os.path.join(root, script), encoding='utf-8') as f:
      lines = [l.strip() for l in f]
    call = next(i for i, l in enumerate(lines) if l.startswith('openmp.sleep_when_idle()'))
    before = {l for l in lines[:call] if l.startswith(('import ', 'from '))}
    assert before <= allowed, (script, sorted(before - allowed))
