"""Which results a performance report reads and where it goes (`benchmarks/make_report.py`).

`load` reads a results JSON of `bench_retrieval.py`; `report_path` is where its report is
written (the committed docs/PERFORMANCE.md only from the committed full run's results, the
committed GPU report only from the committed GPU results, else beside the results); `gpu_run`
is the full GPU run of the same settings a CPU report sets beside its own numbers, or None.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from colt_jax.benchmarking import perf_devices
from colt_jax.benchmarking import perf_suite
from colt_jax.benchmarking import suite_settings
from colt_jax.util.errors import InputError


def report_path(results_path: str, result: dict, out: str) -> str:
  """--out, or its default; never the committed report from a run that is not full."""
  kind = result.get('run_kind', suite_settings.FULL)  # results before run_kind were full runs
  if not out and kind == suite_settings.FULL and suite_settings.is_committed(
      results_path, perf_devices.GPU_RESULTS):
    return perf_devices.GPU_REPORT
  if out and kind != suite_settings.FULL and suite_settings.is_committed(
      out, perf_devices.GPU_REPORT):
    raise ValueError(f'--out {out}: that is the committed GPU report, written only from a full '
                     f'run\'s results; this is a {kind} run: leave --out out or name another file')
  beside = os.path.splitext(results_path)[0] + '.md'
  if os.path.realpath(beside) == os.path.realpath(results_path):
    beside += '.md'
  if not out and not (kind == suite_settings.FULL and suite_settings.is_committed(
      results_path, suite_settings.COMMITTED_RESULTS)):
    out = beside
  return suite_settings.output_path(out, kind, suite_settings.COMMITTED_REPORT, beside,
                                    '--out')


def load(path: str, flag: str) -> dict:
  """The results JSON at `path`; InputError naming `flag` when missing or of another schema."""
  if not os.path.isfile(path):
    raise InputError(f'{flag} {path} does not exist: run benchmarks/bench_retrieval.py')
  with open(path) as f:
    try:
      result = json.load(f)
    except json.JSONDecodeError as e:
      raise InputError(f'{flag} {path}: not JSON ({e})') from None
  if not isinstance(result, dict) or result.get('schema') != perf_suite.SCHEMA:
    schema = result.get('schema') if isinstance(result, dict) else None
    raise InputError(f'{flag} {path}: schema {schema!r}, expected {perf_suite.SCHEMA!r}')
  return result


def gpu_run(result: dict, out: str, path: str,
            named: bool) -> Optional[perf_devices.GpuRun]:
  """The GPU run at `path` (--gpu_results; `named`: given on the command line) that the CPU
  report at `out` sets beside `result`, or None: none for a GPU run's own report, for a CPU run
  that is not full, or when the default file is absent. A named file that is missing, not a
  GPU run, not full or of other settings is an InputError naming the flag."""
  if not path or result['machine'].get('backend') != 'cpu':
    return None
  if not named:
    if (not os.path.isfile(path)
        or result.get('run_kind', suite_settings.FULL) != suite_settings.FULL):
      return None
  gpu = load(path, '--gpu_results')
  kind = gpu.get('run_kind', suite_settings.FULL)
  if gpu['machine'].get('backend') == 'cpu' or kind != suite_settings.FULL:
    raise InputError(f'--gpu_results {path}: a {kind} run on backend '
                     f'{gpu["machine"].get("backend")}, not a full GPU run')
  differ = sorted(k for k in set(result['settings']) | set(gpu['settings'])
                  if k != 'synthetic_dir' and result['settings'].get(k) != gpu['settings'].get(k))
  if differ:
    raise InputError(f'--gpu_results {path}: other settings than --results ({differ[0]}: '
                     f'{gpu["settings"].get(differ[0])!r} against '
                     f'{result["settings"].get(differ[0])!r})')
  report = report_path(path, gpu, '')
  return perf_devices.GpuRun(
      gpu, path if named else perf_devices.GPU_RESULTS, report,
      os.path.relpath(report, os.path.dirname(out) or '.'))
