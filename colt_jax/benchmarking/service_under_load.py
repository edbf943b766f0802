"""The HTTP service under load, against the in-process Retriever measured in the same run
(`benchmarks/bench_service.py`; `run(config, command)` returns the JSON report).

For each collection size it writes a synthetic collection (`dim`-d unit vectors around
`centres` random centres) as a feature store, and a model directory with a randomly
initialised phi of the given shape (`synthetic_collection.py`), starts `experiments/serve.py`
on a free 127.0.0.1 port as a child process (`service_process.py`), and loads the same model
and store in this process (`Retriever.from_pretrained(...).index(store, engine)`).

Then, for each number of clients, interleaved: the in-process batched path
(`service_load.in_process`: `Retriever.search_batch` at a batch of that many queries), then
`rounds` times the service driven by that many concurrent clients (`service_load.drive`: each a
keep-alive HTTP/1.1 connection sending `POST /search` with a query vector, the next request as
soon as the answer is in; `service_load.requests_per_row` requests in all per round) followed by the
in-process path again. The service's figures pool its rounds; the reference is the mean of the
in-process runs; each round's own ratio is kept, to show the spread. Every answer is checked:
status 200, and the same photo ids as the in-process path returns for that query (an answer
that differs is counted, not an error); errors must be 0. The clients (on uvloop, as the
service) only keep each answer's body while they drive the load; the bodies are read and
compared after the timed run. The batch-1 in-process latency is measured the same way.
Printed: queries/s, p50/p99 latency, errors, the service's own stage times and batch sizes, the
CPU time per query of the service's process, of the clients and of the in-process path (user +
system, all threads: /proc and time.process_time, robust to a busy machine), and the ratios of
the targets (`service_report.targets`): at the most clients the service's throughput over the
in-process batched path (>= 0.9; met or not by the pooled figure, and whether the 95%
t-interval of the rounds' mean ratio settles it), at 1 client its p50 over the in-process
batch-1 p50 (<= 1.2). The child gets SIGTERM at the end; its exit status is recorded.

The load generator runs in this process on the same cores as the service (a machine of 2
cores here), so the service's figures include the cost of being driven; the in-process
reference has no such cost. The machine's load average is recorded before and after.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from typing import Optional

import numpy as np

from colt_jax.benchmarking import service_load
from colt_jax.benchmarking import service_process
from colt_jax.benchmarking import service_report
from colt_jax.benchmarking import synthetic_collection
from colt_jax.benchmarking import timing
from colt_jax.data import features
from colt_jax.engines import approximate as engines
from colt_jax.inference import retriever
from colt_jax.inference import settings as settings_lib
from colt_jax.service import searcher as service_searcher
from colt_jax.util import flagcheck
from colt_jax.util import outputs
from colt_jax.util.errors import InputError


@dataclasses.dataclass(frozen=True)
class LoadConfig:
  """What a run measures (bench_service.py's flags of the same names)."""
  sizes: tuple = (100_000,)  # collection sizes (photos)
  clients: tuple = (1, 8, 32)  # concurrent clients, and the in-process batch sizes
  dim: int = 512
  centres: int = 1000
  engine: str = 'exact'
  nprobe: int = 32
  nprobe_given: bool = False  # --nprobe was given: passed on to serve.py
  requests: int = 0  # per clients and timed round (0: `service_load.requests_per_row`'s)
  warmup: int = 2
  rounds: int = 3
  queries: int = 256
  k: int = 20
  per_category: int = 1
  list_length: int = settings_lib.LIST_LENGTH
  num_layers: int = 2
  num_heads: int = 2
  model_dim: int = 64  # 0: dim
  num_images: int = 200
  categories: int = 160
  max_batch_size: Optional[int] = None
  max_wait_ms: Optional[float] = None
  serve_args: tuple = ()
  start_timeout: float = 900.0
  workdir: str = ''  # '' = a temporary folder, removed afterwards


def check(config: LoadConfig) -> None:
  """InputError, naming the flags, for settings that cannot run or do not fit in memory."""
  sizes = config.sizes
  if config.per_category > config.k:
    raise InputError(f'--per_category ({config.per_category}) must be <= --k ({config.k})')
  flagcheck.check_range('--num_images', config.num_images, 1, min(sizes),
                        why='the smallest of --sizes')
  if config.k > min(sizes):
    raise InputError(f'--k ({config.k}) must be <= the smallest of --sizes ({min(sizes)})')
  width = config.model_dim or config.dim
  if width % config.num_heads:
    raise InputError(f'--num_heads ({config.num_heads}) must divide phi\'s width '
                     f'({width}: --model_dim, or --dim when it is 0)')
  if config.nprobe_given and not config.engine.startswith('faiss-ivf'):
    raise InputError(f'--nprobe applies to --engine faiss-ivf, faiss-ivfsq or faiss-ivfpq, '
                     f'not {config.engine}')
  for size in sizes:
    flagcheck.check_memory(flagcheck.flags_text({'sizes': size, 'dim': config.dim}),
                           service_load.memory_bytes(size, config.dim, config.engine),
                           f'{size:,} photos in this process and the service\'s')


def max_batch(config: LoadConfig) -> int:
  """serve.py --max_batch_size: the config's, else the most clients (at most the service's
  largest batch)."""
  return config.max_batch_size or min(max(config.clients), service_searcher.MAX_BATCH_SIZE)


def _serve_args(config: LoadConfig) -> list:
  args = ['--engine', config.engine,
          '--max_batch_size', str(max_batch(config)), '--methods', 'colt',
          '--warm_settings', f'{config.k}:{config.per_category}:{config.list_length}']
  if config.nprobe_given:
    args += ['--nprobe', str(config.nprobe)]
  if config.max_wait_ms is not None:
    args += ['--max_wait_ms', f'{config.max_wait_ms:g}']
  return args + list(config.serve_args)


def _measure_clients(config: LoadConfig, c: int, service: service_process.Service,
                     colt: retriever.Retriever, queries: np.ndarray, requests: list,
                     expected: list, batch1: Optional[dict]) -> tuple:
  """One row: the in-process path and the service's timed rounds at `c` clients; (the row,
  the in-process batch-1 latency: measured at 1 client, else `batch1` as given)."""
  total = service_load.requests_per_row(c, config.requests)
  for _ in range(config.warmup):  # the service's batch shapes and this process's
    service_load.drive(service.port, requests, expected, c, max(c, 4))
    colt.search_batch(queries[:c])
  refs, loads = [service_load.in_process(colt, queries, c, total)], []
  for _ in range(config.rounds):
    loads.append(service_load.drive(service.port, requests, expected, c, total,
                                 service.process.pid))
    refs.append(service_load.in_process(colt, queries, c, total))
  load, wall = service_load.pooled(loads)
  svc = service_load.service_figures(load, wall, c, total * len(loads))
  ref_per_s = float(np.mean([r['per_s'] for r in refs]))
  ref_p50 = float(np.mean([r['p50_ms'] for r in refs]))
  ref_cpu = float(np.mean([r['cpu_ms_per_query'] for r in refs]))
  level = {'service': svc, 'in_process_before': refs[0], 'in_process_after': refs[-1],
           'in_process_runs': refs, 'rounds': len(loads),
           'round_ratios': service_load.round_ratios(loads, refs, c, total),
           'in_process_per_s': ref_per_s, 'in_process_p50_ms': ref_p50,
           'in_process_cpu_ms_per_query': ref_cpu,
           'throughput_ratio': svc['per_s'] / ref_per_s}
  if c == 1:
    batch1 = {'p50_ms': ref_p50, 'p99_ms': max(r['p99_ms'] for r in refs)}
  if batch1:
    level['p50_over_batch1'] = (svc['p50_ms'] or float('nan')) / batch1['p50_ms']
  server_cpu = service_report.fmt_value(svc['server_cpu_ms_per_request'])
  print(f'{c:7d} {svc["per_s"]:11.1f} {svc["p50_ms"] or float("nan"):8.2f} '
        f'{svc["p99_ms"] or float("nan"):8.2f} {svc["errors"]:6d} {svc["differs"]:6d} '
        f'{svc["batch_size_mean"]:10.1f} {ref_per_s:11.1f} {ref_p50:10.2f} '
        f'{level["throughput_ratio"]:10.2f}x {server_cpu:>16} '
        f'{svc["client_cpu_ms_per_request"]:6.2f} {ref_cpu:7.2f}')
  for e in svc['first_errors']:
    print(f'        error: {e}')
  return level, batch1


def measure_size(config: LoadConfig, size: int, centres: np.ndarray, workdir: str) -> dict:
  """One collection size: its store and model written, the service started, every row."""
  dim, k = config.dim, config.k
  print(f'\n{size:,} photos x {dim} dims, engine {config.engine}: writing the store and model')
  t0 = time.perf_counter()
  photos = synthetic_collection.synthetic_photos(size, dim, centres)
  store_dir = synthetic_collection.synthetic_store(os.path.join(workdir, f'store-{size}'),
                                                   photos)
  del photos
  settings = settings_lib.InferenceSettings(k=k, per_category=config.per_category,
                                            list_length=config.list_length)
  model_dir = synthetic_collection.synthetic_model(
      os.path.join(workdir, f'model-{size}'), dim=dim, num_layers=config.num_layers,
      num_heads=config.num_heads, model_dim=config.model_dim, num_images=config.num_images,
      categories=config.categories, settings=settings)
  prepare_s = time.perf_counter() - t0
  serve_args = _serve_args(config)
  service = service_process.Service(store_dir, model_dir,
                                    os.path.join(workdir, f'serve-{size}.log'), serve_args)
  out = {'prepare_s': prepare_s, 'serve_args': serve_args, 'levels': {}}
  with service:
    t0 = time.perf_counter()
    health = service.start(config.start_timeout)
    out['service_start_s'] = time.perf_counter() - t0
    out['healthz'] = health
    print(f'service on {service.url} after {out["service_start_s"]:.1f} s: {health}')
    t0 = time.perf_counter()
    spec = engines.EngineSpec(config.engine, nprobe=config.nprobe)
    colt = retriever.Retriever.from_pretrained(model_dir).with_settings(
        k=k, per_category=config.per_category, list_length=config.list_length).index(
            features.load(store_dir), spec)
    out['in_process_index_s'] = time.perf_counter() - t0
    queries = synthetic_collection.synthetic_queries(config.queries, dim, centres)
    expected = [r.photo_ids for r in colt.search_batch(queries)]
    requests = [service_load.http_request(service.port, service_load.request_body(
        q, k, config.per_category, config.list_length)) for q in queries]
    out['request_bytes'] = int(np.mean([len(r) for r in requests]))
    batch1 = None
    print(f'{"clients":>7} {"service q/s":>11} {"p50 ms":>8} {"p99 ms":>8} {"errors":>6} '
          f'{"differ":>6} {"mean batch":>10} {"in-proc q/s":>11} {"b-call p50":>10} '
          f'{"svc/in-proc":>11} {"CPU ms/q: server":>16} {"client":>6} {"in-proc":>7}')
    for c in config.clients:
      out['levels'][str(c)], batch1 = _measure_clients(config, c, service, colt, queries,
                                                       requests, expected, batch1)
    status = service.stop()
  out['batch1'] = batch1
  out['service_exit_status'] = status
  out['service_stop_s'] = service.stop_seconds
  out['service_log_tail'] = service.log_tail(8)
  out['targets'] = service_report.targets(out, config.clients)
  for line in service_report.target_lines(out['targets'],
                                           service_report.entry_round_ratios(out)):
    print(line)
  print(f'service stopped by SIGTERM: exit status {status} after {service.stop_seconds:.1f} s')
  return out


def run(config: LoadConfig, command: str) -> dict:
  """Every size of `config` measured (module docstring); the JSON report, which keeps
  `command`, the command line that wrote it."""
  if not os.path.isfile(service_process.SERVE):
    raise InputError(f'{service_process.SERVE}: no such file (the service this benchmark '
                     'starts, relative to the working folder: run from the checkout\'s root)')
  centres = synthetic_collection.synthetic_centres(config.centres, config.dim)
  clients = list(config.clients)
  report = {'machine': timing.machine_info(), 'command': command,
            'dim': config.dim, 'centres': config.centres, 'engine': config.engine,
            'nprobe': config.nprobe if config.engine.startswith('faiss-ivf') else None,
            'clients': clients,
            'requests': {str(c): service_load.requests_per_row(c, config.requests)
                         for c in clients},
            'rounds': config.rounds, 'queries': config.queries,
            'k': config.k, 'per_category': config.per_category,
            'list_length': config.list_length,
            'phi': {'num_layers': config.num_layers, 'num_heads': config.num_heads,
                    'model_dim': config.model_dim or config.dim,
                    'num_images': config.num_images, 'categories': config.categories},
            'max_batch_size': max_batch(config), 'max_wait_ms': config.max_wait_ms,
            'sizes': {}}
  workdir = config.workdir or tempfile.mkdtemp(prefix='colt_jax_bench_service_')
  if config.workdir:  # recorded as the benchmark's, so that a later run may replace them
    outputs.claim_dir(workdir, 'the benchmark\'s stores and models', flag='--workdir',
                      trees=[f'{kind}-{size}' for size in config.sizes
                             for kind in ('store', 'model')],
                      files=[f'serve-{size}.log' for size in config.sizes])
  try:
    for size in config.sizes:
      report['sizes'][str(size)] = measure_size(config, size, centres, workdir)
  finally:
    if not config.workdir:
      shutil.rmtree(workdir, ignore_errors=True)
  report['load_average_end'] = timing.load_average()
  return report
