"""benchmarks/bench_methods.py's machinery (colt_jax/benchmarking/method_speed.py) on a tiny
collection: every method answered through the service's batched path, nothing compiled while
timed, the rounds interleaved and DPP's ratio over MMR computed from them, and the section of
docs/SERVICE.md. Its figures are printed by the benchmark, never asserted here."""
import pytest

from colt_jax.benchmarking import method_speed
from colt_jax.benchmarking import service_report
from colt_jax.util.errors import InputError


def test_bad_configurations_are_one_line():
  with pytest.raises(InputError, match='--methods: unknown mrr'):
    method_speed.MethodConfig(methods=('mmr', 'mrr'))
  with pytest.raises(InputError, match='unknown engine'):
    method_speed.MethodConfig(engines=('faiss-ivff',))
  with pytest.raises(InputError, match='--load_batch must be in'):
    method_speed.MethodConfig(load_batch=65)


def test_ratio_is_per_round_and_pooled():
  rows = {'dpp': {'batch1_p50_ms': 3.0, 'rerank_ms': 2.0, 'load_qps': 100.0,
                  'batch1_cpu_ms': 4.0, 'load_cpu_ms_per_query': 1.0,
                  'rounds_batch1_p50_ms': [3.0, 6.0], 'rounds_rerank_ms': [2.0, 2.0],
                  'rounds_load_qps': [100.0, 50.0], 'rounds_batch1_cpu_ms': [4.0, 4.0],
                  'rounds_load_cpu_ms': [1.0, 3.0]},
          'mmr': {'batch1_p50_ms': 1.5, 'rerank_ms': 1.0, 'load_qps': 200.0,
                  'batch1_cpu_ms': 2.0, 'load_cpu_ms_per_query': 0.5,
                  'rounds_batch1_p50_ms': [1.5, 2.0], 'rounds_rerank_ms': [1.0, 4.0],
                  'rounds_load_qps': [200.0, 200.0], 'rounds_batch1_cpu_ms': [2.0, 8.0],
                  'rounds_load_cpu_ms': [0.5, 1.0]}}
  r = method_speed.ratio(rows, 'dpp', 'mmr')
  assert (r['batch1'], r['rerank'], r['load'], r['batch1_cpu'], r['load_cpu']) == (
      2.0, 2.0, 2.0, 2.0, 2.0)  # exact: powers of two
  assert r['rounds_batch1'] == [2.0, 3.0] and r['rounds_rerank'] == [2.0, 0.5]
  assert r['rounds_load'] == [2.0, 4.0]  # time per query: the inverse of q/s
  assert r['rounds_load_cpu'] == [2.0, 3.0] and r['rounds_batch1_cpu'] == [2.0, 0.5]
  assert method_speed.ratio(rows, 'dpp', 'msd') is None


@pytest.mark.slow
def test_every_method_is_timed_through_the_service_path_and_rendered(tmp_path):
  config = method_speed.MethodConfig(
      sizes=(300,), engines=('exact',), methods=('colt', 'mmr', 'dpp'), dim=16, centres=8,
      queries=16, batch1_requests=2, load_batches=1, load_batch=4, rounds=2, num_images=50,
      categories=8, workdir=str(tmp_path))
  report = method_speed.run(config, 'benchmarks/bench_methods.py --tiny')
  entry = report['sizes']['300']['engines']['exact']
  assert entry['compiles_timed'] == 0  # compiled before the timed rounds
  assert entry['num_candidates'] == 200
  assert list(entry['rows']) == ['colt', 'mmr', 'dpp']
  for row in entry['rows'].values():
    assert len(row['rounds_batch1_p50_ms']) == len(row['rounds_load_qps']) == 2
    assert row['batch1_p99_ms'] >= row['batch1_p50_ms'] > 0 and row['load_qps'] > 0
  assert len(entry['dpp_over_mmr']['rounds_rerank']) == 2
  text = service_report.markdown([report])
  assert '## Every method, per collection size and engine' in text
  assert '### 300 photos, exact' in text and '`python benchmarks/bench_methods.py --tiny`' in text
  assert all(f'| {m} | ' in text for m in ('colt', 'mmr', 'dpp'))
  assert '- DPP over MMR (200 candidates; target <= 2x)' in text
