r"""The HTTP service under load, against the in-process Retriever measured in the same run.

  python benchmarks/bench_service.py --out docs/results/service/service-100k.json
  python benchmarks/bench_service.py --sizes 1000000 --engine faiss-ivf \
      --out docs/results/service/service-1M.json \
      --doc docs/SERVICE.md --doc_also docs/results/service/service-100k.json
  python benchmarks/bench_service.py --doc_only --doc docs/SERVICE.md \
      --doc_also docs/results/service/service-100k.json,docs/results/service/service-1M.json

For each collection size (--sizes) it writes a synthetic collection (`--dim`-d unit vectors
around `--centres` random centres) as a feature store, and a model directory with a randomly
initialised phi of the given shape (default: this repo's `colt` width, L=2, 2 heads, width 64,
N=200, query-relative; `--num_layers 8 --num_heads 8 --model_dim 0` is the paper's size),
starts `experiments/serve.py` on a free 127.0.0.1 port as a child process, and loads the
same model and store in this process (`Retriever.from_pretrained(...).index(store, engine)`).

Then, for each number of clients (--clients, default 1,8,32), interleaved: the in-process
batched path (`Retriever.search_batch` at a batch of that many queries), then --rounds times
(default 3) the service driven by that many concurrent clients (each a keep-alive HTTP/1.1
connection sending `POST /search` with a query vector, the next request as soon as the answer
is in; --requests in all per round) followed by the in-process path again. The service's
figures pool its rounds; the reference is the mean of the in-process runs; each round's own
ratio is kept, to show the spread. Every answer is checked: status 200, and the same photo
ids as the in-process path returns for that query (an answer that differs is counted, not an
error); errors must be 0. The clients (on uvloop, as the service) only keep each answer's
body while they drive the load; the bodies are read and compared after the timed run. The
batch-1 in-process latency is measured the same way. Printed: queries/s, p50/p99 latency,
errors, the service's own stage times and batch sizes, the CPU time per query of the
service's process, of the clients and of the in-process path (user + system, all
threads: /proc and time.process_time, robust to a busy machine), and the ratios of the
targets: at 32 clients the service's throughput over the in-process batched path (>= 0.9;
met or not by the pooled figure, and whether the 95% t-interval of the rounds' mean ratio
settles it), at 1 client its p50 over the in-process batch-1 p50 (<= 1.2). The child gets
SIGTERM at the end; its exit status is recorded.

The load generator runs in this process on the same cores as the service (a machine of 2
cores here), so the service's figures include the cost of being driven; the in-process
reference has no such cost. The machine's load average is recorded before and after.

Each JSON report keeps the command that wrote it; `--doc` renders docs/SERVICE.md (how to
start the service, its endpoints, the screenshot, then every report after those named by
`--doc_also`, each table naming its command); `--doc_only` re-renders it without measuring.
"""
from __future__ import annotations

from colt_jax.util import openmp

# As serve.py: before faiss or scikit-learn loads libgomp, so that the in-process reference
# runs under the service's OpenMP setting.
openmp.sleep_when_idle()

import json
import os
import shutil
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from colt_jax.util import cli
from colt_jax.engines import approximate as engines
from colt_jax.data import features
from colt_jax.util import flagcheck
from colt_jax.util import outputs
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError
from colt_jax.service import searcher as service_searcher
from colt_jax.inference import settings as settings_lib
from colt_jax.benchmarking import service_process
from colt_jax.benchmarking import synthetic_collection
from colt_jax.benchmarking import timing
from colt_jax.benchmarking import service_report
from colt_jax.benchmarking import service_load

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


# ------------------------------------------------------------------------------ data


# ------------------------------------------------------------------------ the clients


# ---------------------------------------------------------------------- in-process path


# ------------------------------------------------------------------------------ run


def _check_flags() -> tuple:
  sizes = flagcheck.parse_ints('--sizes', _SIZES.value, low=1)
  clients = flagcheck.parse_ints('--clients', _CLIENTS.value, low=1, high=1024)
  if _DOC_ONLY.value:
    return sizes, clients
  if _PER_CATEGORY.value > _K.value:
    raise app.UsageError(f'--per_category ({_PER_CATEGORY.value}) must be <= --k ({_K.value})')
  flagcheck.check_range('--num_images', _NUM_IMAGES.value, 1, min(sizes),
                        why='the smallest of --sizes')
  if _K.value > min(sizes):
    raise app.UsageError(f'--k ({_K.value}) must be <= the smallest of --sizes ({min(sizes)})')
  width = _MODEL_DIM.value or _DIM.value
  if width % _NUM_HEADS.value:
    raise app.UsageError(f'--num_heads ({_NUM_HEADS.value}) must divide phi\'s width '
                         f'({width}: --model_dim, or --dim when it is 0)')
  if _NPROBE.present and not _ENGINE.value.startswith('faiss-ivf'):
    raise app.UsageError(f'--nprobe applies to --engine faiss-ivf, faiss-ivfsq or faiss-ivfpq, '
                         f'not {_ENGINE.value}')
  for size in sizes:
    flagcheck.check_memory(flagcheck.flags_text({'sizes': size, 'dim': _DIM.value}),
                           service_load.memory_bytes(size, _DIM.value, _ENGINE.value),
                           f'{size:,} photos in this process and the service\'s')
  return sizes, clients


def _read_report(path: str) -> dict:
  try:
    with open(path, encoding='utf-8') as f:
      report = json.load(f)
  except (OSError, ValueError) as e:
    raise app.UsageError(f'--doc_also: {path}: not a JSON report of this benchmark ({e})')
  if not isinstance(report, dict) or 'sizes' not in report or 'command' not in report:
    raise app.UsageError(f'--doc_also: {path}: not a report of bench_service.py (no "sizes" '
                         'or "command"; rerun the command that wrote it)')
  return report


def _max_batch(clients: list) -> int:
  """serve.py --max_batch_size: the flag, else the most clients (at most the service's
  largest batch)."""
  return _MAX_BATCH.value or min(max(clients), service_searcher.MAX_BATCH_SIZE)


def _serve_args(clients: list) -> list:
  args = ['--engine', _ENGINE.value,
          '--max_batch_size', str(_max_batch(clients)), '--methods', 'colt',
          '--warm_settings', f'{_K.value}:{_PER_CATEGORY.value}:{_LIST_LENGTH.value}']
  if _NPROBE.present:
    args += ['--nprobe', str(_NPROBE.value)]
  if _MAX_WAIT.value is not None:
    args += ['--max_wait_ms', f'{_MAX_WAIT.value:g}']
  return args + list(_SERVE_ARGS.value)


def measure_size(size: int, clients: list, centres: np.ndarray, workdir: str) -> dict:
  dim, k = _DIM.value, _K.value
  print(f'\n{size:,} photos x {dim} dims, engine {_ENGINE.value}: writing the store and model')
  t0 = time.perf_counter()
  photos = synthetic_collection.synthetic_photos(size, dim, centres)
  store_dir = synthetic_collection.synthetic_store(os.path.join(workdir, f'store-{size}'), photos)
  del photos
  settings = settings_lib.InferenceSettings(k=k, per_category=_PER_CATEGORY.value,
                                         list_length=_LIST_LENGTH.value)
  model_dir = synthetic_collection.synthetic_model(
      os.path.join(workdir, f'model-{size}'), dim=dim, num_layers=_NUM_LAYERS.value,
      num_heads=_NUM_HEADS.value, model_dim=_MODEL_DIM.value, num_images=_NUM_IMAGES.value,
      categories=_CATEGORIES.value, settings=settings)
  prepare_s = time.perf_counter() - t0
  serve_args = _serve_args(clients)
  service = service_process.Service(store_dir, model_dir,
                                    os.path.join(workdir, f'serve-{size}.log'), serve_args)
  out = {'prepare_s': prepare_s, 'serve_args': serve_args, 'levels': {}}
  with service:
    t0 = time.perf_counter()
    health = service.start(_START_TIMEOUT.value)
    out['service_start_s'] = time.perf_counter() - t0
    out['healthz'] = health
    print(f'service on {service.url} after {out["service_start_s"]:.1f} s: {health}')
    t0 = time.perf_counter()
    spec = engines.EngineSpec(_ENGINE.value, nprobe=_NPROBE.value)
    colt = retriever.Retriever.from_pretrained(model_dir).with_settings(
        k=k, per_category=_PER_CATEGORY.value, list_length=_LIST_LENGTH.value).index(
            features.load(store_dir), spec)
    out['in_process_index_s'] = time.perf_counter() - t0
    queries = synthetic_collection.synthetic_queries(_QUERIES.value, dim, centres)
    expected = [r.photo_ids for r in colt.search_batch(queries)]
    requests = [
        service_load.http_request(
            service.port, service_load.request_body(q, k, _PER_CATEGORY.value, _LIST_LENGTH.value))
        for q in queries
    ]
    out['request_bytes'] = int(np.mean([len(r) for r in requests]))
    batch1 = None
    print(f'{"clients":>7} {"service q/s":>11} {"p50 ms":>8} {"p99 ms":>8} {"errors":>6} '
          f'{"differ":>6} {"mean batch":>10} {"in-proc q/s":>11} {"b-call p50":>10} '
          f'{"svc/in-proc":>11} {"CPU ms/q: server":>16} {"client":>6} {"in-proc":>7}')
    for c in clients:
      total = service_load.requests_per_row(c, _REQUESTS.value)
      for _ in range(_WARMUP.value):  # the service's batch shapes and this process's
        service_load.drive(service.port, requests, expected, c, max(c, 4))
        colt.search_batch(queries[:c])
      refs, loads = [service_load.in_process(colt, queries, c, total)], []
      for _ in range(_ROUNDS.value):
        loads.append(
            service_load.drive(service.port, requests, expected, c, total, service.process.pid))
        refs.append(service_load.in_process(colt, queries, c, total))
      load, wall = service_load.pooled(loads)
      svc = service_load.service_figures(load, wall, c, total * len(loads))
      ref_per_s = float(np.mean([r['per_s'] for r in refs]))
      ref_p50 = float(np.mean([r['p50_ms'] for r in refs]))
      ref_cpu = float(np.mean([r['cpu_ms_per_query'] for r in refs]))
      if c == 1:
        batch1 = {'p50_ms': ref_p50, 'p99_ms': max(r['p99_ms'] for r in refs)}
      level = {'service': svc, 'in_process_before': refs[0], 'in_process_after': refs[-1],
               'in_process_runs': refs, 'rounds': len(loads),
               'round_ratios': service_load.round_ratios(loads, refs, c, total),
               'in_process_per_s': ref_per_s, 'in_process_p50_ms': ref_p50,
               'in_process_cpu_ms_per_query': ref_cpu,
               'throughput_ratio': svc['per_s'] / ref_per_s}
      if batch1:
        level['p50_over_batch1'] = (svc['p50_ms'] or float('nan')) / batch1['p50_ms']
      out['levels'][str(c)] = level
      print(
          f'{c:7d} {svc["per_s"]:11.1f} {svc["p50_ms"] or float("nan"):8.2f} '
          f'{svc["p99_ms"] or float("nan"):8.2f} {svc["errors"]:6d} {svc["differs"]:6d} '
          f'{svc["batch_size_mean"]:10.1f} {ref_per_s:11.1f} {ref_p50:10.2f} '
          f'{level["throughput_ratio"]:10.2f}x {service_report.fmt_value(svc["server_cpu_ms_per_request"]):>16} '
          f'{svc["client_cpu_ms_per_request"]:6.2f} {ref_cpu:7.2f}')
      for e in svc['first_errors']:
        print(f'        error: {e}')
    status = service.stop()
  out['batch1'] = batch1
  out['service_exit_status'] = status
  out['service_stop_s'] = service.stop_seconds
  out['service_log_tail'] = service.log_tail(8)
  out['targets'] = service_report.targets(out, clients)
  for line in service_report.target_lines(out['targets'], service_report.entry_round_ratios(out)):
    print(line)
  print(f'service stopped by SIGTERM: exit status {status} after {service.stop_seconds:.1f} s')
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  sizes, clients = _check_flags()
  earlier = [_read_report(p) for p in _DOC_ALSO.value]
  if _DOC_ONLY.value:
    if not (_DOC.value and earlier):
      raise app.UsageError('--doc_only needs --doc and at least one --doc_also report')
    outputs.write_owned_text(_DOC.value,
                             service_report.markdown(earlier),
                             'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')
    return
  for path, flag in ((_OUT.value, '--out'), (_DOC.value, '--doc')):
    if path:
      outputs.check_writable_file(path, 'the benchmark report', flag=flag)
  if not os.path.isfile(service_process.SERVE):
    raise InputError(f'{service_process.SERVE}: no such file (the service this benchmark starts)')
  centres = synthetic_collection.synthetic_centres(_CENTRES.value, _DIM.value)
  report = {
      'machine': timing.machine_info(),
      'command': ' '.join(['benchmarks/bench_service.py'] + sys.argv[1:]),
      'dim': _DIM.value,
      'centres': _CENTRES.value,
      'engine': _ENGINE.value,
      'nprobe': _NPROBE.value if _ENGINE.value.startswith('faiss-ivf') else None,
      'clients': clients,
      'requests': {
          str(c): service_load.requests_per_row(c, _REQUESTS.value) for c in clients
      },
      'rounds': _ROUNDS.value,
      'queries': _QUERIES.value,
      'k': _K.value,
      'per_category': _PER_CATEGORY.value,
      'list_length': _LIST_LENGTH.value,
      'phi': {
          'num_layers': _NUM_LAYERS.value,
          'num_heads': _NUM_HEADS.value,
          'model_dim': _MODEL_DIM.value or _DIM.value,
          'num_images': _NUM_IMAGES.value,
          'categories': _CATEGORIES.value
      },
      'max_batch_size': _max_batch(clients),
      'max_wait_ms': _MAX_WAIT.value,
      'sizes': {}
  }
  workdir = _WORKDIR.value or tempfile.mkdtemp(prefix='colt_jax_bench_service_')
  if _WORKDIR.value:  # recorded as the benchmark's, so that a later run may replace them
    outputs.claim_dir(workdir, 'the benchmark\'s stores and models', flag='--workdir',
                      trees=[f'{kind}-{size}' for size in sizes for kind in ('store', 'model')],
                      files=[f'serve-{size}.log' for size in sizes])
  try:
    for size in sizes:
      report['sizes'][str(size)] = measure_size(size, clients, centres, workdir)
  finally:
    if not _WORKDIR.value:
      shutil.rmtree(workdir, ignore_errors=True)
  report['load_average_end'] = timing.load_average()
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, report, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')
  if _DOC.value:
    outputs.write_owned_text(_DOC.value, service_report.markdown(earlier + [report]), 'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')


# ----------------------------------------------------------------------------- report


if __name__ == '__main__':
  cli.run(main)
