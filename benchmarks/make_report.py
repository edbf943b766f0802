"""docs/PERFORMANCE.md from the JSON of benchmarks/bench_retrieval.py.

    python benchmarks/make_report.py [--results docs/results/performance.json]
                                     [--out docs/PERFORMANCE.md]
                                     [--gpu_results docs/results/performance-gpu.json]
    python benchmarks/make_report.py --results docs/results/performance-gpu.json
                                     # docs/PERFORMANCE-GPU.md

The GPU results are the same benchmark run on a machine with one GPU
(`python benchmarks/bench_retrieval.py --out docs/results/performance-gpu.json` there); where
they exist, the CPU report sets them beside its own numbers.

Only the results of a full run (and by default only the committed ones) become
docs/PERFORMANCE.md; the report of a quick or partial run goes next to its JSON (e.g.
work/bench/performance.md) and says in its first line what kind of run it shows.
"""
import json
import os

from absl import app
from absl import flags

from colt_jax.util import outputs
from colt_jax.util import cli
from colt_jax.benchmarking import perf_devices
from colt_jax.benchmarking import perf_report
from colt_jax.benchmarking import suite_settings
from colt_jax.benchmarking import perf_suite

flags.DEFINE_string('results', suite_settings.COMMITTED_RESULTS,
                    'the JSON written by bench_retrieval.py')
flags.DEFINE_string('out', None, 'the markdown to write (default: '
                    f'{suite_settings.COMMITTED_REPORT} for the committed full-run results, '
                    'else the results\' path with .md)')
flags.DEFINE_string('gpu_results', perf_devices.GPU_RESULTS,
                    'a full GPU run of the same benchmark (same settings), set beside a full '
                    'CPU run\'s results where the file exists (empty: none)')
FLAGS = flags.FLAGS


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
  """The results JSON at `path`; UsageError naming `flag` when missing or of another schema."""
  if not os.path.isfile(path):
    raise app.UsageError(f'{flag} {path} does not exist: run benchmarks/bench_retrieval.py')
  with open(path) as f:
    try:
      result = json.load(f)
    except json.JSONDecodeError as e:
      raise app.UsageError(f'{flag} {path}: not JSON ({e})') from None
  if not isinstance(result, dict) or result.get('schema') != perf_suite.SCHEMA:
    schema = result.get('schema') if isinstance(result, dict) else None
    raise app.UsageError(f'{flag} {path}: schema {schema!r}, expected {perf_suite.SCHEMA!r}')
  return result


def gpu_run(result: dict, out: str):
  """The GPU run (--gpu_results) the CPU report at `out` sets beside `result`, or None: none
  for a GPU run's own report, for a CPU run that is not full, or when the default file is
  absent. A named file that is missing, not a GPU run, not full or of other settings is a
  UsageError naming the flag."""
  path, named = FLAGS.gpu_results, FLAGS['gpu_results'].present and FLAGS.gpu_results
  if not path or result['machine'].get('backend') != 'cpu':
    return None
  if not named:
    path = suite_settings.in_repo(path)
    if (not os.path.isfile(path)
        or result.get('run_kind', suite_settings.FULL) != suite_settings.FULL):
      return None
  gpu = load(path, '--gpu_results')
  kind = gpu.get('run_kind', suite_settings.FULL)
  if gpu['machine'].get('backend') == 'cpu' or kind != suite_settings.FULL:
    raise app.UsageError(f'--gpu_results {path}: a {kind} run on backend '
                         f'{gpu["machine"].get("backend")}, not a full GPU run')
  differ = sorted(k for k in set(result['settings']) | set(gpu['settings'])
                  if k != 'synthetic_dir' and result['settings'].get(k) != gpu['settings'].get(k))
  if differ:
    raise app.UsageError(f'--gpu_results {path}: other settings than --results ({differ[0]}: '
                         f'{gpu["settings"].get(differ[0])!r} against '
                         f'{result["settings"].get(differ[0])!r})')
  report = report_path(path, gpu, '')
  return perf_devices.GpuRun(gpu, FLAGS.gpu_results if named else perf_devices.GPU_RESULTS,
                             report, os.path.relpath(report, os.path.dirname(out) or '.'))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  result = load(FLAGS.results, '--results')
  try:
    out = report_path(FLAGS.results, result, FLAGS.out)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  text = perf_report.markdown(result, FLAGS.results, gpu_run(result, out))
  outputs.write_owned_text(out, text, 'the performance report', flag='--out')
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
