"""Tests for benchmarks/perf_devices.py (a GPU run's report and the CPU-GPU comparison) and
make_report.py's --gpu_results."""
import copy
import json
import os
import subprocess
import sys

import perf_devices
import perf_report
import suites
from test_benchmark import _fake_result
from test_benchmark import _script
from test_benchmark import ROOT


def _pair():
  """(cpu, gpu) results of the same benchmark; the GPU's phi 10x faster, its MMR 4x slower."""
  cpu = dict(_fake_result(ttc_ratio=0.56, mmr_ms=1.0, search_ms=120.0, compiles=0),
             schema=suites.SCHEMA, run_kind='full')
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
  text = '\n'.join(perf_devices.comparison(cpu, gpu))
  assert '## The same tables on a GPU' in text and 'NVIDIA Test' in text
  assert '| phi (TTC) | 90 | 9 | 10.0 | 80 | 8 | 10.0 | 16 |' in text
  assert '| MMR | 1 | 4 | 0.2 | 0.5 | 2 | 0.2 | 64 |' in text  # CPU over GPU time
  assert '| search over 1,000,000 photos | 120 | 120 | 1.0 | 9 | 9 | 1.0 | 64 |' in text
  assert 'Slower on the GPU at batch 1: MMR.' in text  # only the stages that are
  assert perf_devices.GPU_RESULTS in text and 'PERFORMANCE-GPU.md' in text


def test_targets_and_report_of_each_run():
  cpu, gpu = _pair()
  by_name = {t['name']: t for t in perf_report.targets(cpu, gpu)}
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
  assert '## The same tables on a GPU' in perf_report.markdown(cpu, 'x.json', gpu)


def test_make_report_sets_the_gpu_run_beside_the_cpu_run(tmp_path):
  cpu, gpu = _pair()
  (tmp_path / 'cpu.json').write_text(json.dumps(cpu))
  (tmp_path / 'gpu.json').write_text(json.dumps(gpu))
  doc = tmp_path / 'PERFORMANCE.md'
  run = _script('make_report.py', f'--results={tmp_path / "cpu.json"}',
                f'--gpu_results={tmp_path / "gpu.json"}', f'--out={doc}')
  assert run.returncode == 0, run.stderr[-3000:]
  assert '| phi (TTC) | 90 | 9 | 10.0 |' in doc.read_text()
  run = _script('make_report.py', f'--results={tmp_path / "cpu.json"}',
                f'--gpu_results={tmp_path / "none.json"}', f'--out={doc}')
  assert run.returncode == 2 and '--gpu_results' in run.stderr and 'does not exist' in run.stderr
  run = _script('make_report.py', f'--results={tmp_path / "cpu.json"}',
                f'--gpu_results={tmp_path / "cpu.json"}', f'--out={doc}')
  assert run.returncode == 2 and 'backend cpu, not a GPU' in run.stderr
  (tmp_path / 'bad.json').write_text('{"schema": ')
  run = _script('make_report.py', f'--results={tmp_path / "cpu.json"}',
                f'--gpu_results={tmp_path / "bad.json"}', f'--out={doc}')
  assert run.returncode == 2 and 'bad.json: not JSON' in run.stderr


def test_the_committed_gpu_results_default_to_their_own_report():
  code = ('import make_report; print(make_report.report_path('
          f'{perf_devices.GPU_RESULTS!r}, {{"run_kind": "full"}}, None))')
  run = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, 'benchmarks')),
                       timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.strip() == perf_devices.GPU_REPORT
