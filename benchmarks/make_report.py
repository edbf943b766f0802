"""docs/PERFORMANCE.md from the JSON of benchmarks/bench_retrieval.py.

    python benchmarks/make_report.py [--results docs/results/performance.json]
                                     [--out docs/PERFORMANCE.md]
"""
import json
import os

from absl import app
from absl import flags

from colt_jax import outputs
from colt_jax import cli
import perf_report
import suites

flags.DEFINE_string('results', os.path.join('docs', 'results', 'performance.json'),
                    'the JSON written by bench_retrieval.py')
flags.DEFINE_string('out', os.path.join('docs', 'PERFORMANCE.md'), 'the markdown to write')
FLAGS = flags.FLAGS


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
  text = perf_report.markdown(result, FLAGS.results)
  outputs.write_owned_text(FLAGS.out, text, 'the performance report', flag='--out')
  print(f'wrote {FLAGS.out}')


if __name__ == '__main__':
  cli.run(main)
