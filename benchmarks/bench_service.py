r"""The HTTP service under load, against the in-process Retriever measured in the same run.

  python benchmarks/bench_service.py --out docs/results/service/service-100k.json
  python benchmarks/bench_service.py --sizes 1000000 --engine faiss-ivf \
      --out docs/results/service/service-1M.json \
      --doc docs/SERVICE.md --doc_also docs/results/service/service-100k.json
  python benchmarks/bench_service.py --doc_only --doc docs/SERVICE.md \
      --doc_also docs/results/service/service-100k.json,docs/results/service/service-1M.json

For each collection size (--sizes) it writes a synthetic collection and a model directory with
a randomly initialised phi of the given shape (default: this repo's `colt` width, L=2, 2
heads, width 64, N=200, query-relative; `--num_layers 8 --num_heads 8 --model_dim 0` is the
paper's size), starts `experiments/serve.py` on a free 127.0.0.1 port as a child process, and
loads the same model and store in this process. Then, for each number of clients (--clients),
--rounds timed rounds of the service driven by that many concurrent clients, interleaved with
the in-process batched path at that batch; printed: queries/s, p50/p99 latency, errors, the
service's stage times, CPU per query and the targets' ratios
(colt_jax/benchmarking/service_under_load.py says how each is measured).

Each JSON report keeps the command that wrote it; `--doc` renders docs/SERVICE.md (how to
start the service, its endpoints, the screenshot, then every report after those named by
`--doc_also`, each table naming its command); `--doc_only` re-renders it without measuring.
"""
from __future__ import annotations

from colt_jax.util import openmp

# As serve.py: before faiss or scikit-learn loads libgomp, so that the in-process reference
# runs under the service's OpenMP setting.
openmp.sleep_when_idle()

import sys

from absl import app
from absl import flags

from colt_jax.benchmarking import service_report
from colt_jax.benchmarking import service_under_load
from colt_jax.engines import approximate as engines
from colt_jax.inference import settings as settings_lib
from colt_jax.util import cli
from colt_jax.util import flagcheck
from colt_jax.util import outputs

_BOUNDS = dict(lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
_SIZES = flags.DEFINE_list('sizes', ['100000'], 'Collection sizes (photos).')
_DIM = flags.DEFINE_integer('dim', 512, 'Feature dimension (CLIP ViT-B/32: 512).', **_BOUNDS)
_CENTRES = flags.DEFINE_integer('centres', 1000, 'Clusters of the synthetic photos.', **_BOUNDS)
_ENGINE = flags.DEFINE_enum('engine', 'exact', engines.ENGINES, 'The candidate engine of the '
                            'service and of the in-process reference.')
_NPROBE = flags.DEFINE_integer('nprobe', 32, 'faiss-ivf/ivfsq/ivfpq: cells searched.', **_BOUNDS)
_CLIENTS = flags.DEFINE_list('clients', ['1', '8', '32'], 'Concurrent clients (and the '
                             'in-process batch sizes they are compared with).')
_REQUESTS = flags.DEFINE_integer(
    'requests', 0, 'Requests per number of clients and timed round (the in-process path '
    'answers as many queries each time); 0: requests_per_row(clients), at least 384 and 64 '
    'rounds of every client.', lower_bound=0, upper_bound=flagcheck.MAX_COUNT)
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Untimed rounds of requests per number of clients '
                               '(each as many requests as clients, at least 4).',
                               lower_bound=0, upper_bound=flagcheck.MAX_COUNT)
_ROUNDS = flags.DEFINE_integer(
    'rounds', 3, 'Timed rounds per number of clients, interleaved with the in-process path '
    '(in-process, service, in-process, service, ..., in-process): the service\'s figures pool '
    'every round, the reference is the mean of the in-process runs.', **_BOUNDS)
_QUERIES = flags.DEFINE_integer('queries', 256, 'Distinct query vectors (cycled).', **_BOUNDS)
_K = flags.DEFINE_integer('k', 20, 'Eq. 6\'s k (the request\'s k).', lower_bound=1,
                          upper_bound=settings_lib.LIST_LENGTH)
_PER_CATEGORY = flags.DEFINE_integer('per_category', 1, 'X of Eq. 6 (the request\'s '
                                     'per_category).', **_BOUNDS)
_LIST_LENGTH = flags.DEFINE_integer('list_length', settings_lib.LIST_LENGTH, 'Photos per answer '
                                    '(the request\'s list_length: Eq. 6\'s k, then its '
                                    'continuation).', lower_bound=1,
                                    upper_bound=settings_lib.LIST_LENGTH)
_NUM_LAYERS = flags.DEFINE_integer('num_layers', 2, 'phi\'s layers (L).', **_BOUNDS)
_NUM_HEADS = flags.DEFINE_integer('num_heads', 2, 'phi\'s attention heads.', **_BOUNDS)
_MODEL_DIM = flags.DEFINE_integer('model_dim', 64, 'phi\'s width (0 = --dim).', lower_bound=0,
                                  upper_bound=flagcheck.MAX_COUNT)
_NUM_IMAGES = flags.DEFINE_integer('num_images', 200, 'phi\'s N: candidates per query.',
                                   **_BOUNDS)
_CATEGORIES = flags.DEFINE_integer('categories', 160, 'phi\'s categories.', **_BOUNDS)
_MAX_BATCH = flags.DEFINE_integer('max_batch_size', None, 'serve.py --max_batch_size (default: '
                                  'the largest of --clients, at most 64).', lower_bound=1,
                                  upper_bound=64)
_MAX_WAIT = flags.DEFINE_float('max_wait_ms', None, 'serve.py --max_wait_ms (default: '
                               'serve.py\'s).', lower_bound=0.0, upper_bound=60_000.0)
_SERVE_ARGS = flags.DEFINE_list('serve_args', [], 'More flags for experiments/serve.py, e.g. '
                                '--serve_args=--request_timeout_s=30.')
_START_TIMEOUT = flags.DEFINE_float('start_timeout', 900.0, 'Seconds the service may take to '
                                    'start (load, index, build the engine, warm up).',
                                    lower_bound=1.0, upper_bound=86400.0)
_WORKDIR = flags.DEFINE_string('workdir', '', 'Where the stores, models and the service\'s log '
                               'go (default: a temporary folder, removed afterwards).')
_OUT = flags.DEFINE_string('out', '', 'Write the figures as JSON here.')
_DOC = flags.DEFINE_string('doc', '', 'Also write docs/SERVICE.md (this run\'s report after '
                           'the --doc_also ones) here.')
_DOC_ALSO = flags.DEFINE_list('doc_also', [], 'Earlier JSON reports (--out of other runs) '
                              'whose sections come first in --doc.')
_DOC_ONLY = flags.DEFINE_bool('doc_only', False, 'Measure nothing: write --doc from the '
                              '--doc_also reports.')


def config_from_flags() -> service_under_load.LoadConfig:
  return service_under_load.LoadConfig(
      sizes=tuple(flagcheck.parse_ints('--sizes', _SIZES.value, low=1)),
      clients=tuple(flagcheck.parse_ints('--clients', _CLIENTS.value, low=1, high=1024)),
      dim=_DIM.value, centres=_CENTRES.value, engine=_ENGINE.value, nprobe=_NPROBE.value,
      nprobe_given=_NPROBE.present, requests=_REQUESTS.value, warmup=_WARMUP.value,
      rounds=_ROUNDS.value, queries=_QUERIES.value, k=_K.value,
      per_category=_PER_CATEGORY.value, list_length=_LIST_LENGTH.value,
      num_layers=_NUM_LAYERS.value, num_heads=_NUM_HEADS.value, model_dim=_MODEL_DIM.value,
      num_images=_NUM_IMAGES.value, categories=_CATEGORIES.value,
      max_batch_size=_MAX_BATCH.value, max_wait_ms=_MAX_WAIT.value,
      serve_args=tuple(_SERVE_ARGS.value), start_timeout=_START_TIMEOUT.value,
      workdir=_WORKDIR.value)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = config_from_flags()
  if not _DOC_ONLY.value:
    service_under_load.check(config)
  earlier = [service_report.read_report(p) for p in _DOC_ALSO.value]
  if _DOC_ONLY.value:
    if not (_DOC.value and earlier):
      raise app.UsageError('--doc_only needs --doc and at least one --doc_also report')
    outputs.write_owned_text(_DOC.value, service_report.markdown(earlier), 'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')
    return
  for path, flag in ((_OUT.value, '--out'), (_DOC.value, '--doc')):
    if path:
      outputs.check_writable_file(path, 'the benchmark report', flag=flag)
  report = service_under_load.run(
      config, ' '.join(['benchmarks/bench_service.py'] + sys.argv[1:]))
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, report, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')
  if _DOC.value:
    outputs.write_owned_text(_DOC.value, service_report.markdown(earlier + [report]),
                             'the report', flag='--doc')
    print(f'wrote {_DOC.value}')


if __name__ == '__main__':
  cli.run(main)
