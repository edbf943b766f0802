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
from absl import app
from absl import flags

from colt_jax.benchmarking import perf_devices
from colt_jax.benchmarking import perf_files
from colt_jax.benchmarking import perf_report
from colt_jax.benchmarking import suite_settings
from colt_jax.util import cli
from colt_jax.util import outputs

flags.DEFINE_string('results', suite_settings.COMMITTED_RESULTS,
                    'the JSON written by bench_retrieval.py')
flags.DEFINE_string('out', None, 'the markdown to write (default: '
                    f'{suite_settings.COMMITTED_REPORT} for the committed full-run results, '
                    'else the results\' path with .md)')
flags.DEFINE_string('gpu_results', perf_devices.GPU_RESULTS,
                    'a full GPU run of the same benchmark (same settings), set beside a full '
                    'CPU run\'s results where the file exists (empty: none)')
FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  result = perf_files.load(FLAGS.results, '--results')
  try:
    out = perf_files.report_path(FLAGS.results, result, FLAGS.out)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  gpu = perf_files.gpu_run(result, out, FLAGS.gpu_results,
                           bool(FLAGS['gpu_results'].present and FLAGS.gpu_results))
  text = perf_report.markdown(result, FLAGS.results, gpu)
  outputs.write_owned_text(out, text, 'the performance report', flag='--out')
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
