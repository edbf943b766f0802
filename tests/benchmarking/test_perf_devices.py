"""Tests for colt_jax/benchmarking/perf_devices.py (a GPU run's report and the CPU-GPU
comparison) and make_report.py's --gpu_results (perf_files.py)."""
import copy
import json
import os
import subprocess
import sys

from colt_jax.benchmarking import perf_devices
from colt_jax.benchmarking import perf_report
from colt_jax.benchmarking import perf_targets
from colt_jax.benchmarking import perf_suite
from bench_run import fake_result
from bench_run import bench_script
from bench_run import ROOT


def _pair():
  """(cpu, gpu) results of the same benchmark; the GPU's phi 10x faster, its MMR 4x slower."""
  cpu = dict(fake_result(ttc_ratio=0.56, mmr_ms=1.0, search_ms=120.0, compiles=0),
             schema=perf_suite.SCHEMA, run_kind='full')
  gpu = copy.deepcopy(cpu)
  gpu['machine'].update(backend='gpu', devices=['gpu:NVIDIA Test'], transformers='4.0')
  gpu['encoder'] = {'model': 'minilm (a float16 copy)'}
  for which in ('batch1', 'batched'):
    gpu['components']['phi'][which]['per_query']['median_ms'] /= 10
    gpu['components']['mmr'][which]['per_query']['median_ms'] *= 4
  gpu['ttc']['layers']['8']['batched']['per_query']['median_ms'] = 0.125
  gpu['ttc']['layers']['8']['batch1']['per_query']['median_ms'] = 1.0
  return cpu, gpu


def test_comparison_sets_each_stage_beside_the_gpu_with_its_ratio():
  cpu, gpu = _pair()
  text = '\n'.join(perf_devices.comparison(cpu, perf_devices.GpuRun(gpu)))
  assert '## The same tables on a GPU' in text and 'NVIDIA Test' in text
  assert '| phi (TTC) | 90 | 9 | 10.0 | 80 | 8 | 10.0 | 16 |' in text
  assert '| MMR | 1 | 4 | 0.2 | 0.5 | 2 | 0.2 | 64 |' in text  # CPU over GPU time
  assert '| search over 1,000,000 photos | 120 | 120 | 1.0 | 9 | 9 | 1.0 | 64 |' in text
  assert 'Slower on the GPU at batch 1: MMR (MMR is k dependent' in text  # only those that are
  assert "The GPU's largest lead: phi (TTC) at batch 1, 10x." in text
  assert perf_devices.GPU_RESULTS in text and '(PERFORMANCE-GPU.md)' in text


def test_targets_and_report_of_each_run():
  cpu, gpu = _pair()
  by_name = {t['name']: t for t in perf_targets.targets(cpu, perf_devices.GpuRun(gpu))}
  row = by_name['the same tables on a GPU']
  assert row['met'] is True and 'NVIDIA Test' in row['measured']
  assert perf_devices.GPU_REPORT in row['measured']
  assert perf_devices.ttc_bounds(cpu) == ('', '')
  flops, batch1 = perf_devices.ttc_bounds(gpu)
  assert '2.00 ms' in flops and '1.00 ms against 2.00 ms for 16' in batch1
  text = perf_report.markdown(gpu, perf_devices.GPU_RESULTS)
  assert f'--out {perf_devices.GPU_RESULTS}` on that machine' in text
  assert 'Accelerator: 1 x NVIDIA Test' in text and 'transformers 4.0' in text
  assert "f's weights: `minilm (a float16 copy)`" in text
  assert 'No GPU in this run' not in text
  assert 'No GPU in this run' in perf_report.markdown(cpu, 'x.json')
  assert '## The same tables on a GPU' in perf_report.markdown(cpu, 'x.json',
                                                               perf_devices.GpuRun(gpu))


def test_make_report_sets_the_gpu_run_beside_the_cpu_run(tmp_path):
  cpu, gpu = _pair()
  (tmp_path / 'cpu.json').write_text(json.dumps(cpu))
  (tmp_path / 'runs').mkdir()
  (tmp_path / 'runs' / 'gpu.json').write_text(json.dumps(gpu))
  doc = tmp_path / 'PERFORMANCE.md'
  report = lambda *flags: bench_script('make_report.py', f'--results={tmp_path / "cpu.json"}',
                                  f'--out={doc}', *flags)
  run = report(f'--gpu_results={tmp_path / "runs" / "gpu.json"}')
  assert run.returncode == 0, run.stderr[-3000:]
  text = doc.read_text()
  assert '| phi (TTC) | 90 | 9 | 10.0 |' in text
  assert f'wrote `{tmp_path / "runs" / "gpu.json"}`' in text  # the file named, not the default
  assert '(runs/gpu.md)' in text  # its report, linked from the CPU report's folder
  assert report('--gpu_results=').returncode == 0  # empty: none
  assert '## The same tables on a GPU' not in doc.read_text()
  run = report(f'--gpu_results={tmp_path / "none.json"}')
  assert run.returncode == 2 and '--gpu_results' in run.stderr and 'does not exist' in run.stderr
  run = report(f'--gpu_results={tmp_path / "cpu.json"}')
  assert run.returncode == 2 and 'not a full GPU run' in run.stderr
  for change, message in (({'run_kind': 'quick'}, 'a quick run'),
                          ({'settings': dict(gpu['settings'], batch=8)}, 'other settings')):
    (tmp_path / 'other.json').write_text(json.dumps(dict(gpu, **change)))
    run = report(f'--gpu_results={tmp_path / "other.json"}')
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]
  (tmp_path / 'bad.json').write_text('{"schema": ')
  run = report(f'--gpu_results={tmp_path / "bad.json"}')
  assert run.returncode == 2 and 'bad.json: not JSON' in run.stderr
  # A quick run never writes the committed GPU files.
  (tmp_path / 'quick.json').write_text(json.dumps(dict(gpu, run_kind='quick')))
  run = bench_script('make_report.py', f'--results={tmp_path / "quick.json"}',
                f'--out={os.path.join(ROOT, perf_devices.GPU_REPORT)}')
  assert run.returncode == 2 and 'the committed GPU report' in run.stderr
  run = bench_script('bench_retrieval.py', '--quick', '--sections=reference',
                f'--out={os.path.join(ROOT, perf_devices.GPU_RESULTS)}')
  assert run.returncode == 2 and 'the committed GPU results' in run.stderr


def test_the_committed_gpu_results_default_to_their_own_report():
  code = ('from colt_jax.benchmarking import perf_files; print(perf_files.report_path('
          f'{perf_devices.GPU_RESULTS!r}, {{"run_kind": "full"}}, None))')
  run = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.strip() == perf_devices.GPU_REPORT


def test_growth_sentences_follow_the_measured_slopes():
  assert 'bounded by memory bandwidth' in perf_devices.search_growth_text(0.95)
  assert 'a fixed cost per call' in perf_devices.search_growth_text(0.3)
  slow = perf_devices.phi_growth_text({'growth_flops': 1.4, 'growth_batch1': 0.2})
  assert 'Batch-1 time grows slower than the FLOPs' in slow
  assert 'slower' not in perf_devices.phi_growth_text({'growth_flops': 1.06,
                                                       'growth_batch1': 0.87})


def test_flops_counted_by_a_gpu_backend_are_not_reported():
  """A GPU machine's compiled cost analysis undercounts (cuBLAS products): such a run's FLOP
  rates, shares and the FLOP target are left out with the reason, also when the count came from
  a CPU lowering made on that machine; counted on the lowered program ('hlo'), they are kept."""
  cpu, gpu = _pair()
  assert 'flops_counted_on' not in cpu['ttc'] and cpu['machine']['backend'] == 'cpu'
  assert perf_devices.counted_flops(cpu) is cpu  # a CPU run from before the field: kept
  text = perf_report.markdown(gpu, perf_devices.GPU_RESULTS)
  assert perf_devices.FLOPS_NOTE in text
  assert '| batched TTC FLOP/s vs same-run matmul FLOP/s | >= 70% | not measured | - |' in text
  assert '| 8 | 1.00 | 108 | 0.125 | n/a | n/a | n/a | n/a | n/a |' in text  # no FLOP column
  assert gpu['ttc']['layers']['8']['flops_per_query'] == 1.1e10  # the input is left alone
  on_host = dict(gpu, ttc=dict(gpu['ttc'], flops_counted_on='cpu'))
  assert perf_devices.FLOPS_NOTE in perf_report.markdown(on_host, perf_devices.GPU_RESULTS)
  counted = dict(gpu, ttc=dict(gpu['ttc'], flops_counted_on='hlo'))
  assert perf_devices.counted_flops(counted) is counted
  text = perf_report.markdown(counted, perf_devices.GPU_RESULTS)
  assert perf_devices.FLOPS_NOTE not in text and '| 8 | 1.00 | 108 | 0.125 | 11.00 |' in text
  assert perf_devices.flops_source_text(counted) in text and 'as lowered' in text
  counted['ttc']['flops_counted_on'] = 'jaxpr-products'
  assert 'counted from its jaxpr' in perf_report.markdown(counted, perf_devices.GPU_RESULTS)
