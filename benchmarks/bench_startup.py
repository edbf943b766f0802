r"""`experiments/serve.py`'s start-up (cold and warm compilation cache) and first requests with
the defaults a user gets, without and with a model.

  python benchmarks/bench_startup.py --out docs/results/service/startup.json

measures `colt_jax/benchmarking/startup.py` (it says how) over the demo collection (or
--store and --model); docs/SERVICE.md shows the report: `benchmarks/bench_service.py
--doc_only --doc docs/SERVICE.md --doc_also ...,docs/results/service/startup.json`.
"""
from __future__ import annotations

import sys

from absl import app
from absl import flags

from colt_jax.benchmarking import startup
from colt_jax.util import cli
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

_STORE = flags.DEFINE_string('store', '', 'A feature store to serve (with --model); default: '
                             'the demo collection.')
_MODEL = flags.DEFINE_string('model', '', 'The CoLT model directory for --store.')
_SERVE_ARGS = flags.DEFINE_list('serve_args', [], 'More flags for experiments/serve.py.')
_START_TIMEOUT = flags.DEFINE_float('start_timeout', 900.0, 'Seconds a start may take.',
                                    lower_bound=1.0, upper_bound=86400.0)
_WORKDIR = flags.DEFINE_string('workdir', '', 'Where the demo collection, the caches and the '
                               'logs go (default: a temporary folder, removed afterwards).')
_OUT = flags.DEFINE_string('out', '', 'Write the figures as JSON here.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if bool(_STORE.value) != bool(_MODEL.value):
    raise InputError('--store and --model go together (default: the demo collection)')
  if _OUT.value:
    outputs.check_writable_file(_OUT.value, 'the benchmark report', flag='--out')
  report = startup.run(startup.StartupConfig(
      store=_STORE.value, model=_MODEL.value, serve_args=tuple(_SERVE_ARGS.value),
      start_timeout=_START_TIMEOUT.value, workdir=_WORKDIR.value),
                       ' '.join(['benchmarks/bench_startup.py'] + sys.argv[1:]))
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, report, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')


if __name__ == '__main__':
  cli.run(main)
