"""Per-query cost of CoLT and the baselines, scaling, and training throughput.

    python benchmarks/bench_retrieval.py        # the full run (~4 min on 2 CPU cores): writes
                                                # docs/results/performance.json
    python benchmarks/make_report.py            # docs/PERFORMANCE.md from that JSON
    python benchmarks/bench_retrieval.py --quick     # smoke run (< 1 min): writes
                                                     # work/bench/performance.json
    python benchmarks/make_report.py --results work/bench/performance.json

Runs on JAX's default device (CPU here; any accelerator JAX sees). Prints every measurement
and writes them as JSON (atomically) to --out; colt_jax/benchmarking/perf_suite.py says what
is measured. Only the full run (no --quick, size or --sections flags) writes the committed
results: any other run writes work/bench/performance.json unless --out names another file, and
its report says in its first line that it is not the full run.
"""
import dataclasses
import os

from absl import app
from absl import flags
from absl import logging

from colt_jax.util import outputs
from colt_jax.util import cli
from colt_jax.util import flagcheck
from colt_jax.benchmarking import perf_report
from colt_jax.benchmarking import suite_settings
from colt_jax.benchmarking import perf_suite

flags.DEFINE_boolean('quick', False,
                     'tiny sizes: a smoke run (under a minute), not a measurement')
flags.DEFINE_string('out', None, 'where to write the JSON results (default: '
                    f'{suite_settings.COMMITTED_RESULTS} for the full run, '
                    f'{suite_settings.SCRATCH_RESULTS} for any other)')
flags.DEFINE_list('sections', list(perf_suite.SECTIONS), f'some of {list(perf_suite.SECTIONS)}')
flags.DEFINE_list('search_sizes', None, 'collection sizes of the search scaling (default '
                  '10000,100000,1000000)')
flags.DEFINE_list('ttc_sizes', None, 'N of the phi scaling (default 100,200,400)')
flags.DEFINE_integer('batch', None, 'batch of the batched measurements (default 64)',
                     lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
flags.DEFINE_integer('ttc_batch', None, 'batch of batched phi and colt (default 16)',
                     lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
flags.DEFINE_integer('repeats', None, 'timed calls at batch 1, at most (default 30)',
                     lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
flags.DEFINE_float('max_seconds', None, 'time budget of one measurement (default 6)',
                   lower_bound=0.1, upper_bound=86400.0)
flags.DEFINE_string('synthetic_dir', None, 'synthetic dataset for the training section '
                    '(default: the synthetic default, work/synthetic-seed0)')
flags.DEFINE_string('workdir', None, 'where training checkpoints go (default: a temporary '
                    'directory, removed afterwards)')
flags.DEFINE_string('config_dir', None, 'folder of synthetic_{scl,ttc}.flags, the training '
                    f'section\'s configuration (default {suite_settings.CONFIG_DIR}; every '
                    'default path is relative to the working folder: run from the checkout\'s '
                    'root)')

FLAGS = flags.FLAGS


def _ints(name, values):
  return flagcheck.parse_ints(f'--{name}', values, low=1)


def check_memory(settings: perf_suite.Settings) -> None:
  """What the largest measurements need against the machine's memory, naming the flags."""
  for fields, nbytes, what in perf_suite.memory_needs(settings):
    flagcheck.check_memory(flagcheck.flags_text(
        {f: ','.join(map(str, v)) if isinstance(v, tuple) else v
         for f in fields for v in (getattr(settings, f),)}), nbytes, what)


def settings_from_flags() -> perf_suite.Settings:
  settings = perf_suite.quick() if FLAGS.quick else perf_suite.Settings()
  changes = {}
  if FLAGS.search_sizes is not None:
    changes['search_sizes'] = _ints('search_sizes', FLAGS.search_sizes)
  if FLAGS.ttc_sizes is not None:
    changes['ttc_sizes'] = _ints('ttc_sizes', FLAGS.ttc_sizes)
  for name in ('batch', 'ttc_batch', 'repeats', 'max_seconds', 'synthetic_dir'):
    if getattr(FLAGS, name) is not None:
      changes[name] = getattr(FLAGS, name)
  if FLAGS.config_dir is not None:
    changes.update({f'{part}_flags': os.path.join(FLAGS.config_dir, f'synthetic_{part}.flags')
                    for part in ('scl', 'ttc')})
  return dataclasses.replace(settings, **changes)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  sections = flagcheck.parse_names('--sections', FLAGS.sections, perf_suite.SECTIONS)
  settings = settings_from_flags()
  kind = perf_suite.run_kind(settings, sections)
  try:
    perf_suite.check(settings, sections)
    out = suite_settings.output_path(FLAGS.out, kind, suite_settings.COMMITTED_RESULTS,
                                     suite_settings.SCRATCH_RESULTS, '--out')
    if kind != suite_settings.FULL and suite_settings.is_committed(
        out, suite_settings.COMMITTED_GPU_RESULTS):
      raise ValueError(f'--out {out}: that is the committed GPU results, written only from a '
                       f'full run on a GPU; this is a {kind} run: name another file')
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  check_memory(settings)
  outputs.check_writable_file(out, 'the benchmark results', flag='--out')
  result = perf_suite.run(settings, sections, workdir=FLAGS.workdir)
  outputs.write_owned_json(out, result, 'the benchmark results', flag='--out')
  print()
  print(perf_report.summary(result))
  print(f'wrote {out}')
  if not suite_settings.is_committed(out, suite_settings.COMMITTED_RESULTS):
    print(f'its report: {perf_report.REPORT_COMMAND} --results {out}')


if __name__ == '__main__':
  cli.run(main)
