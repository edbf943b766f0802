"""docs/PERFORMANCE.md from the JSON of benchmarks/bench_retrieval.py.

    python benchmarks/make_report.py [--results docs/results/performance.json]
                                     [--out docs/PERFORMANCE.md]

Only the results of a full run (and by default only the committed ones) become
docs/PERFORMANCE.md; the report of a quick or partial run goes next to its JSON (e.g.
work/bench/performance.md) and says in its first line what kind of run it shows.
"""
import json
import os

from absl import app
from absl import flags

from colt_jax import outputs
from colt_jax import cli
import perf_report
import suite_settings
import suites

flags.DEFINE_string('results', suite_settings.COMMITTED_RESULTS,
                    'the JSON written by bench_retrieval.py')
flags.DEFINE_string('out', None, 'the markdown to write (default: '
                    f'{suite_settings.COMMITTED_REPORT} for the committed full-run results, '
                    'else the results\' path with .md)')
FLAGS = flags.FLAGS


def report_path(results_path: str, result: dict, out: str) -> str:
  """--out, or its default; never the committed report from a run that is not full."""
  kind = result.get('run_kind', suite_settings.FULL)  # results before run_kind were full runs
  beside = os.path.splitext(results_path)[0] + '.md'
  if os.path.realpath(beside) == os.path.realpath(results_path):
    beside += '.md'
  if not out and not (kind == suite_settings.FULL and suite_settings.is_committed(
      results_path, suite_settings.COMMITTED_RESULTS)):
    out = beside
  return suite_settings.output_path(out, kind, suite_settings.COMMITTED_REPORT, beside,
                                    '--out')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not os.path.isfile(FLAGS.results):
    raise app.UsageError(f'{FLAGS.results} does not exist: run benchmarks/bench_retrieval.py')
  with open(FLAGS.results) as f:
    result = json.load(f)
  if result.get('schema') != suites.SCHEMA:
    raise app.UsageError(f'{FLAGS.results}: schema {result.get("schema")!r}, expected '
                         f'{suites.SCHEMA!r}')
  try:
    out = report_path(FLAGS.results, result, FLAGS.out)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  text = perf_report.markdown(result, FLAGS.results)
  outputs.write_owned_text(out, text, 'the performance report', flag='--out')
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
