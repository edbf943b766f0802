"""Running the benchmark scripts in tests (bench_script) and a fake result of one (fake_result)."""
import os
import sys
import preloaded


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_result(ttc_ratio, mmr_ms, search_ms, compiles):
  """A minimal results dict in the JSON's layout (numbers made up for the report test)."""
  from colt_jax.benchmarking import perf_suite
  def timing(b1, batched, batch):
    return {'batch1': {'batch': 1, 'per_query': {'median_ms': b1, 'p99_ms': b1 * 1.2,
                                                 'min_ms': b1, 'per_s': 1e3 / b1}},
            'batched': {'batch': batch, 'per_query': {'median_ms': batched,
                                                      'p99_ms': batched * 1.1,
                                                      'min_ms': batched,
                                                      'per_s': 1e3 / batched}}}
  phi = timing(90.0, 80.0, 16)
  phi.update(flops_per_query=1.1e10, params=25_000_000)
  phi['batched'].update(flops_per_s=1.1e10 / 0.08, matmul_ratio=ttc_ratio)
  phi['batch1'].update(flops_per_s=1.1e10 / 0.09, matmul_ratio=ttc_ratio * 80 / 90)
  search_row = {'photos': 1_000_000, 'collection_bytes': 2_048_000_000, 'chunk_rows': 125000,
                'bandwidth_bound_ms': 80.0, **timing(search_ms, 9.0, 64),
                'memory_batch1': {'temp_bytes': 1000}, 'memory_batched': {'temp_bytes': 2000}}
  return {
      'schema': perf_suite.SCHEMA,
      'settings': {'num_layers': 8, 'num_images': 200, 'dim': 512, 'k': 20,
                   'collection': 40000, 'num_clusters': 1000, 'num_heads': 8,
                   'num_categories': 160, 'batch': 64, 'ttc_batch': 16, 'warmup': 2,
                   'repeats': 30, 'batched_repeats': 5, 'max_seconds': 6.0},
      'machine': {'cpu': 'Test CPU', 'cpu_count': 2, 'usable_cpus': 2, 'memory_bytes': 2**34,
                  'jax': '0.0', 'jaxlib': '0.0', 'flax': '0.0', 'backend': 'cpu',
                  'devices': ['cpu:cpu'], 'device_count': 1, 'xla_flags': '',
                  'python': '3.11', 'platform': 'Linux', 'time': 'now',
                  'load_average': [3.5, 3.0, 2.0]},
      'load_average_end': [3.9, 3.1, 2.1], 'elapsed_s': 600.0,
      'paper_rtx3090_ms': {'f': 18.06, 'g': 0.37, 'phi': 11.8, 'topk': 18.06, 'mmr': 24.1,
                           'umons': 22.65, 'vmig': 86.77, 'colt': 30.23},
      'paper_phi_layers_ms': {'8': 11.8},
      'components': {'mmr': timing(mmr_ms, 0.5, 64), 'umons': timing(0.3, 0.2, 64),
                     'phi': timing(90.0, 80.0, 16)},
      'ttc': {'layers': {'8': phi}, 'matmul_flops_per_s': 2e11},
      'scaling': {'search': {'rows': [search_row], 'dim': 512, 'n': 200, 'batch': 64,
                             'growth_batch1': 1.0, 'growth_batched': 0.9}},
      'compiles_after_warmup': {'total': compiles,
                                'per_measurement': {'phi b1': compiles, 'mmr b1': 0}},
  }


def bench_script(name, *args, timeout=600, cwd=ROOT):
  env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=ROOT)  # colt_jax, as installed
  env.pop('XLA_FLAGS', None)  # one CPU device, as a user's run
  return preloaded.run([sys.executable, os.path.join(ROOT, 'benchmarks', name), *args],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
