r"""Every method of the service (colt, topk, mmr, msd, dpp, umons) at each collection size and
engine, at batch 1 and under load, and DPP's time over MMR's, measured in the same run.

  python benchmarks/bench_methods.py --out docs/results/service/methods.json

measures `colt_jax/benchmarking/method_speed.py` (it says how) at 10,000 and 1,000,000
synthetic photos of small dimension (d=64), exact search and faiss-ivf; about 15 minutes on 2
busy cores. docs/SERVICE.md shows the report: `benchmarks/bench_service.py --doc_only --doc
docs/SERVICE.md --doc_also ...,docs/results/service/methods.json`.
"""
from __future__ import annotations

from colt_jax.util import openmp

openmp.sleep_when_idle()  # as serve.py, before faiss loads libgomp

import sys  # pylint: disable=wrong-import-position

from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position

from colt_jax.benchmarking import method_speed  # pylint: disable=wrong-import-position
from colt_jax.util import cli  # pylint: disable=wrong-import-position
from colt_jax.util import flagcheck  # pylint: disable=wrong-import-position
from colt_jax.util import outputs  # pylint: disable=wrong-import-position

_D = method_speed.MethodConfig()
_BOUNDS = dict(lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
_SIZES = flags.DEFINE_list('sizes', [str(s) for s in _D.sizes], 'Collection sizes (photos).')
_ENGINES = flags.DEFINE_list('engines', list(_D.engines), 'Candidate engines.')
_METHODS = flags.DEFINE_list('methods', list(_D.methods), 'The methods timed.')
_DIM = flags.DEFINE_integer('dim', _D.dim, 'Feature dimension.', **_BOUNDS)
_CENTRES = flags.DEFINE_integer('centres', _D.centres, 'Clusters of the photos.', **_BOUNDS)
_NPROBE = flags.DEFINE_integer('nprobe', _D.nprobe, 'faiss-ivf: cells searched.', **_BOUNDS)
_QUERIES = flags.DEFINE_integer('queries', _D.queries, 'Distinct queries (cycled).', **_BOUNDS)
_BATCH1 = flags.DEFINE_integer('batch1_requests', _D.batch1_requests, 'Batch-1 requests per '
                               'method and round.', **_BOUNDS)
_LOAD_BATCHES = flags.DEFINE_integer('load_batches', _D.load_batches, 'Batches of '
                                     '--load_batch requests per method and round.', **_BOUNDS)
_LOAD_BATCH = flags.DEFINE_integer('load_batch', _D.load_batch, 'Requests per batch under '
                                   'load (serve.py --max_batch_size).', lower_bound=1,
                                   upper_bound=64)
_ROUNDS = flags.DEFINE_integer('rounds', _D.rounds, 'Rounds, each timing every method.',
                               **_BOUNDS)
_WORKDIR = flags.DEFINE_string('workdir', '', 'Where the models go (default: a temporary '
                               'folder, removed afterwards).')
_OUT = flags.DEFINE_string('out', '', 'Write the figures as JSON here.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = method_speed.MethodConfig(
      sizes=tuple(flagcheck.parse_ints('--sizes', _SIZES.value, low=1)),
      engines=tuple(_ENGINES.value), methods=tuple(_METHODS.value), dim=_DIM.value,
      centres=_CENTRES.value, nprobe=_NPROBE.value, queries=_QUERIES.value,
      batch1_requests=_BATCH1.value, load_batches=_LOAD_BATCHES.value,
      load_batch=_LOAD_BATCH.value, rounds=_ROUNDS.value, workdir=_WORKDIR.value)
  if _OUT.value:
    outputs.check_writable_file(_OUT.value, 'the benchmark report', flag='--out')
  report = method_speed.run(config, ' '.join(['benchmarks/bench_methods.py'] + sys.argv[1:]))
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, report, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')


if __name__ == '__main__':
  cli.run(main)
