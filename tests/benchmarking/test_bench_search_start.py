"""benchmarks/bench_search_start.py and colt_jax/benchmarking/library_start.py: medians, the
table, and the main's flags."""
import os
import sys

import numpy as np
import pytest

from colt_jax.benchmarking import library_start
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

MAIN = os.path.join(REPO, 'benchmarks', 'bench_search_start.py')


def _run(*args, cwd):
  return preloaded.run([sys.executable, MAIN, *map(str, args)], capture_output=True, text=True,
                       timeout=300, cwd=cwd,
                       env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu'))


def test_medians_and_the_table():
  runs = [{'helpshort_s': t, 'helpshort_cpu_s': t / 2, 'modules': m, 'colt_jax_modules': 70,
           'research_modules': r, 'first_search_s': 2 * t, 'first_search_cpu_s': t}
          for t, m, r in ((1.0, 900, 0), (3.0, 1100, 0), (2.0, 1000, 0))]
  median = library_start.summary(runs)
  assert median['modules'] == 1000 and median['research_modules'] == 0  # ints: exact
  np.testing.assert_allclose([median['helpshort_s'], median['first_search_s']], [2.0, 4.0])
  table = library_start.table({'trees': {'after': {'median': median}}}).splitlines()
  assert len(table) == 3 and table[2] == '| after | 2.00 (1.00) | 1000 | 70 | 0 | 4.00 (2.00) |', (
      table)


def test_a_missing_folder_is_one_line_naming_its_flag(tmp_path):
  done = _run('--before', tmp_path / 'none', cwd=tmp_path)
  assert done.returncode == 2, done.stderr[-2000:]
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and '--before: no such folder' in lines[0], lines
  assert os.listdir(tmp_path) == []  # refused before any store is written


@pytest.mark.slow
def test_one_repetition_measures_both_checkouts(tmp_path):
  """This checkout as both 'before' and 'after': the same imports, no research module, and a
  first search that ran (a model-free query over a 16-d MiniLM store)."""
  store = library_start.minilm_store(str(tmp_path / 'store'), 40)
  result = library_start.measure({'before': REPO, 'after': REPO}, store, reps=1,
                                 log=lambda *_: None)
  before, after = (result['trees'][k]['runs'][0] for k in ('before', 'after'))
  assert before['modules'] == after['modules'] and after['research_modules'] == 0
  assert after['first_search_s'] > 0 and after['helpshort_cpu_s'] > 0
