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

import asyncio
import gc
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Mapping, Optional

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
import service_tools  # benchmarks/service_tools.py: the script's folder is on sys.path
import timing

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

THROUGHPUT_TARGET = 0.9  # service q/s at the most clients over the in-process batched path
LATENCY_TARGET = 1.2  # service p50 at 1 client over the in-process batch-1 p50


# ------------------------------------------------------------------------------ data


def request_body(query: np.ndarray, k: int, per_category: int, list_length: int) -> bytes:
  """The JSON body of `POST /search` for a query vector: each float32 in its shortest
  round-trip text, so the service reads exactly the in-process path's query."""
  vector = ','.join(str(v) for v in np.asarray(query, np.float32))
  return (f'{{"vector":[{vector}],"k":{k},"per_category":{per_category},'
          f'"list_length":{list_length},"method":"colt"}}').encode()


def _http_request(port: int, body: bytes) -> bytes:
  return (f'POST /search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n'
          f'Content-Type: application/json\r\nAccept: application/json\r\n'
          f'Content-Length: {len(body)}\r\n\r\n').encode() + body


# ------------------------------------------------------------------------ the clients


class _Load:
  """What one load run saw: latencies, errors, answers that differ, the service's figures.
  The clients keep each answer's body (`bodies`: (query index, body)); `check` reads them
  after the timed run, so the load generator does no JSON work while it drives the load."""

  def __init__(self):
    self.latencies = []
    self.errors = []
    self.bodies = []
    self.differs = 0
    self.batch_sizes = []
    self.stages = {}  # stage -> [ms]
    self.client_cpu_s = None  # CPU seconds of this process while it drove the load
    self.server_cpu_s = None  # CPU seconds of the service's process meanwhile
    self.server_threads_s = None  # ... by its threads (`THREAD_KINDS`)

  def check(self, expected: list) -> None:
    """Reads every kept answer: a search answer with the photo ids of `expected` (an answer
    that differs is counted), its batch size and stage times."""
    for j, body in self.bodies:
      try:
        answer = json.loads(body)
        ids = tuple(r['photo_id'] for r in answer['results'])
        self.batch_sizes.append(int(answer['batch_size']))
        for stage, ms in answer['timing_ms'].items():
          self.stages.setdefault(stage, []).append(float(ms))
      except (ValueError, KeyError, TypeError) as e:
        self.errors.append(f'query {j}: not a search answer ({type(e).__name__}: {e})')
        continue
      if ids != expected[j]:
        self.differs += 1
    self.bodies = []


async def _read_response(reader) -> tuple:
  """(status, body, close) of one HTTP/1.1 response with a Content-Length (or chunked)
  body; the head is read in one call."""
  head = await reader.readuntil(b'\r\n\r\n')
  lines = head.split(b'\r\n')
  status = int(lines[0].split(None, 2)[1])
  length, chunked, close = None, False, False
  for line in lines[1:]:
    name, _, value = line.partition(b':')
    name = name.strip().lower()
    if name == b'content-length':
      length = int(value)
    elif name == b'transfer-encoding' and b'chunked' in value.lower():
      chunked = True
    elif name == b'connection' and b'close' in value.lower():
      close = True
  if chunked:
    body = b''
    while True:
      size = int((await reader.readline()).split(b';')[0], 16)
      chunk = await reader.readexactly(size + 2)
      if size == 0:
        break
      body += chunk[:-2]
  else:
    body = await reader.readexactly(length or 0)
  return status, body, close


async def _client(port: int, requests: list, counter, total: int, load: _Load) -> None:
  reader = writer = None
  while True:
    i = next(counter)
    if i >= total:
      break
    j = i % len(requests)
    try:
      if writer is None:
        reader, writer = await asyncio.open_connection(service_tools.HOST, port)
      t0 = time.perf_counter()
      writer.write(requests[j])
      status, body, close = await _read_response(reader)
      load.latencies.append(time.perf_counter() - t0)
      if close:
        writer.close()
        reader = writer = None
    except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
            ValueError, IndexError) as e:
      load.errors.append(f'request {i}: {type(e).__name__}: {e}')
      if writer is not None:
        writer.close()
      reader = writer = None
      continue
    if status != 200:
      load.errors.append(f'request {i}: HTTP {status}: {body[:200].decode(errors="replace")}')
      continue
    load.bodies.append((j, body))
  if writer is not None:
    writer.close()


def pooled(loads: list) -> tuple:
  """One (`_Load`, wall seconds) of several runs (`drive`'s): their answers, errors and
  CPU seconds together, their walls summed."""
  out = _Load()
  out.client_cpu_s, out.server_cpu_s = 0.0, 0.0
  out.server_threads_s = dict.fromkeys(THREAD_KINDS, 0.0)
  for load, _ in loads:
    out.latencies += load.latencies
    out.errors += load.errors
    out.differs += load.differs
    out.batch_sizes += load.batch_sizes
    for stage, ms in load.stages.items():
      out.stages.setdefault(stage, []).extend(ms)
    out.client_cpu_s += load.client_cpu_s
    out.server_cpu_s = (None if out.server_cpu_s is None or load.server_cpu_s is None
                        else out.server_cpu_s + load.server_cpu_s)
    out.server_threads_s = (None if out.server_threads_s is None or load.server_threads_s is None
                            else {k: out.server_threads_s[k] + load.server_threads_s[k]
                                  for k in THREAD_KINDS})
  return out, sum(wall for _, wall in loads)


def round_ratios(loads: list, refs: list, clients: int, total: int) -> list:
  """Each timed round's service queries/s over the mean of the in-process runs just before
  and after it (`refs` has one run more than `loads`, interleaved around them)."""
  return [_service_figures(load, wall, clients, total)['per_s'] / ((a['per_s'] + b['per_s']) / 2)
          for (load, wall), a, b in zip(loads, refs, refs[1:])]


def _stat_cpu_seconds(path: str) -> Optional[float]:
  """User + system CPU seconds of a /proc `stat` file (a process's or a thread's); None when
  it cannot be read."""
  try:
    with open(path, encoding='ascii', errors='replace') as f:
      fields = f.read().rpartition(')')[2].split()
  except OSError:
    return None
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def process_cpu_seconds(pid: int) -> Optional[float]:
  """CPU time (user + system, all threads) a process has used, from /proc (None where
  there is no /proc)."""
  return _stat_cpu_seconds(f'/proc/{pid}/stat')


# The service process's threads, by what they run: its main thread (uvicorn's event loop: the
# HTTP requests, their parsing, the answers), XLA's CPU thread pool (the model's computation:
# threads named tf_*), and the others (the batcher's thread, which calls the model and waits
# for it, and the libraries').
THREAD_KINDS = ('event loop', 'XLA', 'other')


def thread_cpu_seconds(pid: int) -> Optional[dict]:
  """CPU time (user + system) of a process's threads by `THREAD_KINDS`, from
  /proc/<pid>/task (None where there is none). A thread that ended is no longer counted."""
  out = dict.fromkeys(THREAD_KINDS, 0.0)
  try:
    tids = os.listdir(f'/proc/{pid}/task')
  except OSError:
    return None
  for tid in tids:
    try:
      with open(f'/proc/{pid}/task/{tid}/comm', encoding='utf-8', errors='replace') as f:
        name = f.read().strip()
    except OSError:  # the thread ended meanwhile
      continue
    seconds = _stat_cpu_seconds(f'/proc/{pid}/task/{tid}/stat')
    if seconds is not None:
      kind = 'event loop' if tid == str(pid) else 'XLA' if name.startswith('tf_') else 'other'
      out[kind] += seconds
  return out


def drive(port: int, requests: list, expected: list, clients: int, total: int,
          server_pid: Optional[int] = None) -> tuple:
  """(`_Load`, wall seconds) of `total` requests sent by `clients` concurrent clients; the
  load also records the CPU seconds this process (the clients) and the server used."""
  load = _Load()
  counter = itertools.count()

  async def run():
    await asyncio.gather(*(_client(port, requests, counter, total, load)
                           for _ in range(clients)))

  gc.collect()
  gc.freeze()  # this process's JAX and model objects: no full collection scans them mid-run
  with asyncio.Runner(loop_factory=_loop_factory()) as runner:
    threads0 = thread_cpu_seconds(server_pid) if server_pid else None
    server0 = process_cpu_seconds(server_pid) if server_pid else None
    cpu0, t0 = time.process_time(), time.perf_counter()
    runner.run(run())
    wall = time.perf_counter() - t0
    load.client_cpu_s = time.process_time() - cpu0
    server1 = process_cpu_seconds(server_pid) if server_pid else None
    threads1 = thread_cpu_seconds(server_pid) if server_pid else None
  load.server_cpu_s = None if server0 is None or server1 is None else server1 - server0
  if threads0 is not None and threads1 is not None:
    load.server_threads_s = {k: threads1[k] - threads0[k] for k in THREAD_KINDS}
  load.check(expected)
  return load, wall


def _loop_factory():
  """uvloop's event loop for the clients when installed (requirements.txt; the service's
  loop too): less of the load generator's CPU on the cores it shares with the service."""
  try:
    import uvloop  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return uvloop.new_event_loop


# ---------------------------------------------------------------------- in-process path


def requests_per_row(clients: int, requests: Optional[int] = None) -> int:
  """`requests` (default --requests) when > 0, else the default for a row of `clients`: at
  least 384 requests and 64 rounds of every client. A closed-loop row ends with its last
  round draining (clients finishing one by one, the service's last batches part full), which
  the in-process path does not pay: over 12 rounds (384 requests at 32 clients, 1.2 s) that
  tail is about 1/12 of the row, over 64 about 1/64."""
  requests = _REQUESTS.value if requests is None else requests
  return requests or max(384, 64 * clients)


def in_process(colt: retriever.Retriever, queries: np.ndarray, batch: int, total: int) -> dict:
  """`total` queries answered by `colt.search_batch` in batches of `batch`: queries/s and the
  time of each call (a batch's latency), with compilations during the timed calls."""
  seconds = []
  with timing.CompileCounter() as compiles:
    cpu0, t0 = time.process_time(), time.perf_counter()
    for start in range(0, total, batch):
      idx = np.arange(start, min(start + batch, total)) % len(queries)
      c0 = time.perf_counter()
      colt.search_batch(queries[idx])
      seconds.append(time.perf_counter() - c0)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
  t = timing.summarise(seconds)
  return {'batch': batch, 'queries': total, 'seconds': wall, 'per_s': total / wall,
          'cpu_ms_per_query': cpu * 1e3 / total,
          'p50_ms': t.median_ms, 'p99_ms': t.p99_ms, 'mean_ms': t.mean_ms,
          'compiles': compiles.count}


def _service_figures(load: _Load, wall: float, clients: int, total: int) -> dict:
  """Queries/s counts the good answers only; latencies are those of every answer."""
  ms = np.asarray(load.latencies) * 1e3
  answered = len(load.latencies)
  sizes = np.asarray(load.batch_sizes or [0])
  return {'clients': clients, 'requests': total, 'answered': answered, 'seconds': wall,
          'per_s': len(load.batch_sizes) / wall,
          'p50_ms': float(np.percentile(ms, 50)) if answered else None,
          'p99_ms': float(np.percentile(ms, 99)) if answered else None,
          'mean_ms': float(ms.mean()) if answered else None,
          'errors': len(load.errors), 'first_errors': load.errors[:5],
          'server_cpu_ms_per_request': (None if load.server_cpu_s is None
                                        else load.server_cpu_s * 1e3 / total),
          'client_cpu_ms_per_request': load.client_cpu_s * 1e3 / total,
          'server_thread_cpu_ms_per_request': (
              None if load.server_threads_s is None
              else {k: v * 1e3 / total for k, v in load.server_threads_s.items()}),
          'differs': load.differs,
          'batch_size_mean': float(sizes.mean()), 'batch_size_max': int(sizes.max()),
          'server_ms': {s: float(np.mean(v)) for s, v in load.stages.items()}}


# ------------------------------------------------------------------------------ run


def _memory_bytes(size: int, dim: int, engine: str) -> int:
  """At least what one size holds in this process and the service's: the generated rows,
  the store written and read back, each process's index (and an engine's copy)."""
  rows = size * dim * 4
  copies = 5 + (2 if engine != 'exact' else 0)
  return copies * rows


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
                           _memory_bytes(size, _DIM.value, _ENGINE.value),
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
  photos = service_tools.synthetic_photos(size, dim, centres)
  store_dir = service_tools.synthetic_store(os.path.join(workdir, f'store-{size}'), photos)
  del photos
  settings = settings_lib.InferenceSettings(k=k, per_category=_PER_CATEGORY.value,
                                         list_length=_LIST_LENGTH.value)
  model_dir = service_tools.synthetic_model(
      os.path.join(workdir, f'model-{size}'), dim=dim, num_layers=_NUM_LAYERS.value,
      num_heads=_NUM_HEADS.value, model_dim=_MODEL_DIM.value, num_images=_NUM_IMAGES.value,
      categories=_CATEGORIES.value, settings=settings)
  prepare_s = time.perf_counter() - t0
  serve_args = _serve_args(clients)
  service = service_tools.Service(store_dir, model_dir, os.path.join(workdir, f'serve-{size}.log'),
                                  serve_args)
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
    queries = service_tools.synthetic_queries(_QUERIES.value, dim, centres)
    expected = [r.photo_ids for r in colt.search_batch(queries)]
    requests = [_http_request(service.port, request_body(q, k, _PER_CATEGORY.value,
                                                         _LIST_LENGTH.value))
                for q in queries]
    out['request_bytes'] = int(np.mean([len(r) for r in requests]))
    batch1 = None
    print(f'{"clients":>7} {"service q/s":>11} {"p50 ms":>8} {"p99 ms":>8} {"errors":>6} '
          f'{"differ":>6} {"mean batch":>10} {"in-proc q/s":>11} {"b-call p50":>10} '
          f'{"svc/in-proc":>11} {"CPU ms/q: server":>16} {"client":>6} {"in-proc":>7}')
    for c in clients:
      total = requests_per_row(c)
      for _ in range(_WARMUP.value):  # the service's batch shapes and this process's
        drive(service.port, requests, expected, c, max(c, 4))
        colt.search_batch(queries[:c])
      refs, loads = [in_process(colt, queries, c, total)], []
      for _ in range(_ROUNDS.value):
        loads.append(drive(service.port, requests, expected, c, total, service.process.pid))
        refs.append(in_process(colt, queries, c, total))
      load, wall = pooled(loads)
      svc = _service_figures(load, wall, c, total * len(loads))
      ref_per_s = float(np.mean([r['per_s'] for r in refs]))
      ref_p50 = float(np.mean([r['p50_ms'] for r in refs]))
      ref_cpu = float(np.mean([r['cpu_ms_per_query'] for r in refs]))
      if c == 1:
        batch1 = {'p50_ms': ref_p50, 'p99_ms': max(r['p99_ms'] for r in refs)}
      level = {'service': svc, 'in_process_before': refs[0], 'in_process_after': refs[-1],
               'in_process_runs': refs, 'rounds': len(loads),
               'round_ratios': round_ratios(loads, refs, c, total),
               'in_process_per_s': ref_per_s, 'in_process_p50_ms': ref_p50,
               'in_process_cpu_ms_per_query': ref_cpu,
               'throughput_ratio': svc['per_s'] / ref_per_s}
      if batch1:
        level['p50_over_batch1'] = (svc['p50_ms'] or float('nan')) / batch1['p50_ms']
      out['levels'][str(c)] = level
      print(f'{c:7d} {svc["per_s"]:11.1f} {svc["p50_ms"] or float("nan"):8.2f} '
            f'{svc["p99_ms"] or float("nan"):8.2f} {svc["errors"]:6d} {svc["differs"]:6d} '
            f'{svc["batch_size_mean"]:10.1f} {ref_per_s:11.1f} {ref_p50:10.2f} '
            f'{level["throughput_ratio"]:10.2f}x {_fmt(svc["server_cpu_ms_per_request"]):>16} '
            f'{svc["client_cpu_ms_per_request"]:6.2f} {ref_cpu:7.2f}')
      for e in svc['first_errors']:
        print(f'        error: {e}')
    status = service.stop()
  out['batch1'] = batch1
  out['service_exit_status'] = status
  out['service_stop_s'] = service.stop_seconds
  out['service_log_tail'] = service.log_tail(8)
  out['targets'] = targets(out, clients)
  for line in target_lines(out['targets'], _round_ratios(out)):
    print(line)
  print(f'service stopped by SIGTERM: exit status {status} after {service.stop_seconds:.1f} s')
  return out


def _round_ratios(entry: dict) -> Optional[list]:
  """The round ratios at the most clients of a size's entry (None in older reports)."""
  level = entry['levels'].get(str(entry['targets']['clients']), {})
  return level.get('round_ratios')


def targets(entry: dict, clients: list) -> dict:
  """The issue's targets for one size: throughput at the most clients, p50 at 1 client."""
  most = str(max(clients))
  level = entry['levels'][most]
  out = {'clients': int(most), 'throughput_ratio': level['throughput_ratio'],
         'throughput_met': level['throughput_ratio'] >= THROUGHPUT_TARGET,
         'errors': sum(l['service']['errors'] for l in entry['levels'].values())}
  if '1' in entry['levels'] and entry.get('batch1'):
    ratio = entry['levels']['1']['p50_over_batch1']
    out.update(latency_ratio=ratio, latency_met=ratio <= LATENCY_TARGET)
  return out


def round_interval(ratios) -> Optional[tuple]:
  """(mean, low, high): the 95% t-interval of the mean of the rounds' ratios; None with fewer
  than 2 rounds."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  r = np.asarray(ratios or [], float)
  if r.size < 2:
    return None
  half = stats.t.ppf(0.975, r.size - 1) * r.std(ddof=1) / np.sqrt(r.size)
  return float(r.mean()), float(r.mean() - half), float(r.mean() + half)


def throughput_verdict(ratio: float, rounds=None) -> str:
  """'met' or 'NOT met' by the pooled ratio; when the rounds' interval (`round_interval`) holds
  the target on the other side, that the rounds do not settle it."""
  met = ratio >= THROUGHPUT_TARGET
  verdict = 'met' if met else 'NOT met'
  interval = round_interval(rounds)
  if interval is None:
    return verdict
  mean, low, high = interval
  text = (f'the rounds\' mean {mean:.3f}, 95% interval [{low:.3f}, {high:.3f}] over '
          f'{len(rounds)} rounds')
  if (low >= THROUGHPUT_TARGET) if met else (high < THROUGHPUT_TARGET):
    return f'{verdict} ({text})'
  return (f'{verdict} by the pooled figure, not settled by the rounds ({text}, which holds '
          f'{THROUGHPUT_TARGET})')


def target_lines(t: dict, rounds=None) -> list:
  """The target lines of `targets`; `rounds`: the round ratios at its most clients."""
  lines = [f'target: at {t["clients"]} clients the service answers '
           f'{t["throughput_ratio"]:.3f}x the in-process batched path\'s queries/s '
           f'(>= {THROUGHPUT_TARGET}): {throughput_verdict(t["throughput_ratio"], rounds)}']
  if 'latency_ratio' in t:
    lines.append(f'target: at 1 client the service\'s p50 is {t["latency_ratio"]:.2f}x the '
                 f'in-process batch-1 p50 (<= {LATENCY_TARGET}): '
                 f'{"met" if t["latency_met"] else "NOT met"}')
  lines.append(f'errors: {t["errors"]} (must be 0)')
  return lines


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  sizes, clients = _check_flags()
  earlier = [_read_report(p) for p in _DOC_ALSO.value]
  if _DOC_ONLY.value:
    if not (_DOC.value and earlier):
      raise app.UsageError('--doc_only needs --doc and at least one --doc_also report')
    outputs.write_owned_text(_DOC.value, markdown(earlier), 'the report', flag='--doc')
    print(f'wrote {_DOC.value}')
    return
  for path, flag in ((_OUT.value, '--out'), (_DOC.value, '--doc')):
    if path:
      outputs.check_writable_file(path, 'the benchmark report', flag=flag)
  if not os.path.isfile(service_tools.SERVE):
    raise InputError(f'{service_tools.SERVE}: no such file (the service this benchmark starts)')
  centres = service_tools.synthetic_centres(_CENTRES.value, _DIM.value)
  report = {'machine': timing.machine_info(),
            'command': ' '.join(['benchmarks/bench_service.py'] + sys.argv[1:]),
            'dim': _DIM.value, 'centres': _CENTRES.value, 'engine': _ENGINE.value,
            'nprobe': _NPROBE.value if _ENGINE.value.startswith('faiss-ivf') else None,
            'clients': clients,
            'requests': {str(c): requests_per_row(c) for c in clients}, 'rounds': _ROUNDS.value,
            'queries': _QUERIES.value,
            'k': _K.value, 'per_category': _PER_CATEGORY.value, 'list_length': _LIST_LENGTH.value,
            'phi': {'num_layers': _NUM_LAYERS.value, 'num_heads': _NUM_HEADS.value,
                    'model_dim': _MODEL_DIM.value or _DIM.value,
                    'num_images': _NUM_IMAGES.value, 'categories': _CATEGORIES.value},
            'max_batch_size': _max_batch(clients), 'max_wait_ms': _MAX_WAIT.value,
            'sizes': {}}
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
    outputs.write_owned_text(_DOC.value, markdown(earlier + [report]), 'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')


# ----------------------------------------------------------------------------- report


def markdown(reports: list) -> str:
  """docs/SERVICE.md: how to run the service, then the figures of the reports."""
  lines = usage_sections()
  first = reports[0]
  m = first['machine']
  lines += [
      '## Under load', '',
      f'Measured by benchmarks/bench_service.py on {m.get("cpu", "this CPU")}, '
      f'{m.get("cpu_count", "?")} cores, {m.get("backend", "cpu")} backend (JAX '
      f'{m.get("jax", "?")}); each table names the command that produced it (with --out it '
      'writes the JSON the table is made from; `--doc_only` re-renders this file from the '
      'JSON). The service is `experiments/serve.py` on 127.0.0.1, a child process of the '
      'benchmark; the clients are keep-alive HTTP/1.1 connections in the benchmark\'s '
      'process (on uvloop), each sending `POST /search` with a query vector as soon as its '
      'previous answer is in; they keep the answers\' bodies, read and compared after the '
      'timed run. They share the machine\'s cores with the service, so the service\'s '
      'figures include the cost of being driven. "in-process" is `Retriever.search_batch` in '
      'the benchmark\'s process over the same model and store, at a batch of as many queries '
      'as there are clients, measured before, between and after the service\'s timed rounds '
      '(their mean): the batched path the service calls, without HTTP. The service\'s '
      'figures pool its rounds; "each round" is each round\'s ratio over the mean of the '
      'in-process runs just before and after it: the spread of the measurement. "b-call '
      'p50" is the median time of one in-process call (a batch). "differ": answers whose '
      'photo ids are not the in-process answer to the same query (not counted as errors). '
      'The service\'s own stage times (`timing_ms` of its answers) are means. "CPU ms per '
      'query": the CPU time (all threads, user + system) the service\'s process, the '
      'clients\' process and the in-process path used per query while it was measured: less '
      'sensitive than times to '
      'other processes on the machine; on a quiet machine of C cores the service can answer '
      'at most 1000 C / (service + clients) queries/s.', '']
  for report in reports:
    for size, entry in report['sizes'].items():
      lines += _size_section(report, int(size), entry)
  return '\n'.join(lines).rstrip() + '\n'


def usage_sections() -> list:
  """The parts of docs/SERVICE.md that no measurement makes: starting the service, its
  endpoints, the page and its screenshot."""
  return USAGE.strip('\n').split('\n') + ['']


USAGE = r"""
# Diverse search as a service

<!-- Generated by benchmarks/bench_service.py --doc (the text below and the tables from the
JSON reports); do not edit by hand: change the script and re-render with --doc_only. -->

## Start it

    python experiments/serve.py --store STORE --model MODEL_DIR --host 127.0.0.1 --port 8000
    python experiments/serve.py --store STORE --model MODEL_DIR --engine faiss-ivf   # large collections

STORE is a feature store (`data_prep/index_collection.py` for a folder of photos, or
`extract_features.py`), MODEL_DIR a CoLT model directory (`Retriever.save_pretrained`,
`experiments/make_model.py`). The service is FastAPI on uvicorn; it binds to 127.0.0.1
unless told otherwise. Concurrent requests are gathered into batches (`--max_batch_size`,
`--max_wait_ms`) and answered by the one inference path, `Retriever`'s batched jitted call.
Behind a reverse proxy on the same machine, `--proxy_headers` takes the client's address and
scheme from its X-Forwarded-For/-Proto headers (off by default: each request skips the check).
`python experiments/serve.py --helpshort` lists every flag.

To try it offline in about a minute, without a trained model:

    python benchmarks/service_screenshot.py --workdir work/demo-service --out work/demo-service/page.png
    python experiments/serve.py --store work/demo-service/store --model work/demo-service/model

The first command builds a demo collection of 48 captioned pictures. It indexes them with
the packaged MiniLM-L6 text encoder and writes a CoLT model whose phi is randomly
initialised, so the photos follow the query but the groups are arbitrary. For a trained
model of MiniLM stores, run `make model` (docs/COLLECTIONS.md, "Your own photos").

## Endpoints

- `POST /search`: `{"query": "big ben", "k": 20, "per_category": 1, "list_length": 50,
  "method": "colt", "params": {}}`; `"vector": [...]` (a query feature of the store's
  dimension) instead of `"query"`; `"method"` one of `colt`, `topk`, `mmr`, `umons`, with
  their parameters in `"params"`. The answer:
  `{"query", "method", "k", "results": [{"rank", "photo_id", "score", "group", "category",
  "title", "has_image"}], "timing_ms": {"queue", "encode", "candidates", "rerank", "total"},
  "batch_size"}`. `k` is Eq. 6's diverse head. `results` holds `list_length` photos (fewer
  when the store has fewer): the diverse head, then the list's continuation. The search page
  sends `list_length` = k. `group` is phi's predicted category or group. `category` is
  that group's name. A photo that phi labels irrelevant, or with the query token's own
  class, has group -1 and a null category. Otherwise the photos, their order, scores and
  groups are what `Retriever.search_text` (or `Retriever.search` for a vector) returns.
  A bad request (no query, k or X out of range, a vector of the wrong dimension, a body too
  large, malformed JSON, an unknown method) is answered 4xx with `{"error": "..."}` naming
  the field; a request that takes longer than the timeout, 503. A list shape (colt's k, X
  and list length; mmr's list length) not in `--warm_settings` compiles on first use, while
  every batch waits (about 1.6 s), and stays compiled: at most `--max_new_shapes` (8) such
  shapes are admitted, another is a 422 naming them.
- Connections: a request must arrive whole within `--read_timeout_s` (10 s) of its first
  byte (or of the connection's opening), else 408 and the connection is closed; a request
  head over `--max_header_bytes` (64 KiB) is a 431; a connection beyond `--max_connections`
  (1000) is a 503; a request uvicorn cannot parse is a 400; all of them JSON
  `{"error": ...}`, counted in `/metrics`, and written after the answers owed to the
  requests before them on their connection. A search whose client disconnects before its
  batch starts is dropped from the batch. SIGTERM answers what is in flight and exits 0,
  within `--request_timeout_s` + `--read_timeout_s` + 5 s at most.
- `GET /photos/{photo_id}`: the photo's file, for stores indexed from a folder or a list of
  files; 404 otherwise.
- `GET /healthz`: `{"status": "ok", "photos": N, ...}`.
- `GET /metrics`: Prometheus text (request counts, latency histogram, batch sizes, errors).
- `GET /docs`: the OpenAPI documentation FastAPI generates (Swagger UI). The service serves
  its script and style itself, so the page works without the internet.
- `GET /`: the live search page (below).

    curl -s localhost:8000/search -H 'Content-Type: application/json' \
         -d '{"query": "big ben", "k": 10, "per_category": 2, "list_length": 10}'

## The live search page

Open `http://127.0.0.1:8000/` in a browser: a search box (it searches as you type, or on
Enter), the number of photos k, X (photos per predicted category), the method and its
parameters (JSON). The answer is a grid grouped by predicted category or group, groups in
the order of their best photo; each tile shows the thumbnail (`/photos/{id}`; the photo's
title or id when the store has no image files), its rank, group and score; the line above
the grid gives the service's time per stage and the round trip. Errors are shown as text.
The page is one file, `colt_jax/service/static/index.html`, with no external scripts, fonts
or CDNs; `tests/test_service_page.py` drives it in headless Chromium.

![The live search page](figures/service.png)

Made by `python benchmarks/service_screenshot.py --out docs/figures/service.png`: the demo
collection it builds (48 drawn pictures of four landmarks at four times of day, indexed by
their captions with the packaged MiniLM-L6 text encoder) served by `experiments/serve.py`,
the query "bridge at night", k = 12, X = 1, CoLT. Its phi is randomly initialised, so the
photos follow the query but the groups are arbitrary; `--store STORE --model MODEL_DIR`
(or `--url` of a running service) screenshots your own. It needs Playwright
(`requirements.txt`) and Debian's Chromium (`apt-get install -y chromium`).
"""


def _requests_text(requests) -> str:
  """'384 requests per row' (older reports: one count) or '384, 512, 2048 requests at 1, 8,
  32 clients'."""
  if not isinstance(requests, dict):
    return f'{requests} requests per row'
  clients = sorted(requests, key=int)
  return (f'{", ".join(str(requests[c]) for c in clients)} requests at '
          f'{", ".join(clients)} clients')


def _rounds_text(rounds) -> str:
  """'in each of 3 timed rounds ' (older reports: one round, '')."""
  return f'in each of {rounds} timed rounds ' if rounds and rounds > 1 else ''


def gap_line(entry: dict) -> Optional[str]:
  """Where the service's time per batch goes beyond the in-process path's, at the most
  clients, from the report's own figures (None when the throughput target is met and its
  rounds settle it, `throughput_verdict`, or a figure is missing): the same queries' time in
  each, the server's stages, the model's idle time
  between batches, the CPU per query of the service's process and the clients, and the ratio
  as the product of CPU per query and how busy the cores were (`_ratio_factors`)."""
  t = entry.get('targets') or {}
  level = entry['levels'].get(str(t.get('clients')))
  if level is None:
    return None
  interval = round_interval(level.get('round_ratios'))
  if t.get('throughput_met', True) and (interval is None or interval[1] >= THROUGHPUT_TARGET):
    return None
  s = level['service']
  server_cpu, clients_cpu = s.get('server_cpu_ms_per_request'), s.get('client_cpu_ms_per_request')
  reference_cpu = level.get('in_process_cpu_ms_per_query')
  stages = s.get('server_ms') or {}
  needed = (server_cpu, clients_cpu, reference_cpu, stages.get('rerank'), stages.get('queue'),
            stages.get('total'), s.get('mean_ms'))
  if None in needed or not (s['per_s'] and level['in_process_per_s']):
    return None
  batch, clients = s['batch_size_mean'], t['clients']
  service_ms = batch / s['per_s'] * 1e3
  same_in_process_ms = batch / level['in_process_per_s'] * 1e3
  call_ms = clients / level['in_process_per_s'] * 1e3
  rerank, queue, total = stages['rerank'], stages['queue'], stages['total']
  extra = server_cpu - reference_cpu
  factors = _ratio_factors(s['per_s'], server_cpu + clients_cpu, level['in_process_per_s'],
                           reference_cpu)
  cpu = (f'The service\'s process used {extra:.2f} ms more CPU per query than the in-process '
         f'path ({server_cpu:.2f} against {reference_cpu:.2f}; {extra * batch:.1f} ms per '
         f'{batch:.1f} queries)' if extra > 0 else
         f'The service\'s process used no more CPU per query than the in-process path '
         f'({server_cpu:.2f} against {reference_cpu:.2f})')
  return (f'Where the difference goes, at {clients} clients: {batch:.1f} queries (the mean '
          f'batch) took {service_ms:.1f} ms in the service (mean batch / service q/s) against '
          f'{same_in_process_ms:.1f} ms at the in-process rate, '
          f'{service_ms - same_in_process_ms:.1f} ms more. The model\'s call (server rerank, '
          f'padded to {clients} rows) took {rerank:.1f} ms against {call_ms:.1f} ms in-process '
          f'(clients / in-process q/s); requests waited {queue:.1f} ms on average for their '
          f'batch to start (server queue), the rest of the server\'s time took '
          f'{total - queue - rerank:.1f} ms (server total - queue - rerank), and '
          f'{s["mean_ms"] - total:.1f} ms of a request\'s {s["mean_ms"]:.1f} ms mean latency lies '
          'outside the server\'s timing (reading and parsing the request, writing the answer, '
          'the clients). With closed-loop clients all in each batch, that HTTP work falls '
          f'between two batches, while the model is idle ({service_ms - rerank:.1f} ms per '
          f'batch: time per batch - rerank). {cpu}, and the clients {clients_cpu:.2f} ms per '
          f'query ({clients_cpu * batch:.1f} ms). {_thread_split(s, batch)}'
          + (f' {factors}' if factors else ''))


def _thread_split(service: Mapping, batch: float) -> str:
  """The service's CPU per query by its threads (`THREAD_KINDS`), or that it was not split."""
  by = service.get('server_thread_cpu_ms_per_request')
  if not by:
    return 'CPU times, which these figures do not split between the HTTP layer and the model.'
  loop = by['event loop']
  return (f'By the service\'s threads, per query: the event loop (its main thread: the HTTP '
          f'requests, their parsing, the answers) {loop:.2f} ms ({loop * batch:.1f} ms per '
          f'batch, on one core, while the model waits for the batch\'s next requests), XLA\'s '
          f'threads (the model\'s computation) {by["XLA"]:.2f} ms, the other threads (the '
          f'batcher) {by["other"]:.2f} ms.')


def _ratio_factors(per_s: float, cpu: float, reference_per_s: float,
                   reference_cpu: float) -> str:
  """The throughput ratio as the product of two factors of the measured figures (an
  identity): CPU per query (the service's process and the clients together against the
  in-process path) and how busy the cores were (queries/s x CPU ms per query / 1000: cores in
  use on average). '' when a CPU figure is not positive."""
  if cpu <= 0 or reference_cpu <= 0 or reference_per_s <= 0:
    return ''
  cpu_factor = reference_cpu / cpu
  busy, reference_busy = per_s * cpu / 1e3, reference_per_s * reference_cpu / 1e3
  text = (f'The ratio ({per_s / reference_per_s:.2f}) is the product of two factors of these '
          f'figures: CPU per query, {reference_cpu:.2f} ms in-process against {cpu:.2f} ms for '
          f'the service and its clients ({cpu_factor:.2f}), and how busy the cores were, '
          f'{busy:.2f} cores in use on average (q/s x CPU ms per query / 1000) against '
          f'{reference_busy:.2f} in-process ({busy / reference_busy:.2f})')
  if cpu_factor < THROUGHPUT_TARGET:
    needed = THROUGHPUT_TARGET * reference_per_s * cpu / 1e3
    return (text + f': at its CPU per query the service stays below {THROUGHPUT_TARGET}x with '
            f'the cores as busy as in-process; reaching it would take less CPU per query, or '
            f'{needed:.2f} cores in use on average.')
  return text + '.'


def _fmt(v, spec='.2f') -> str:
  return '-' if v is None else format(v, spec)


def _size_section(report: dict, size: int, entry: dict) -> list:
  phi = report['phi']
  engine = report['engine'] + (f' (nprobe {report["nprobe"]})' if report.get('nprobe') else '')
  m = report['machine']
  lines = [f'### {size:,} photos, {engine}', '',
           f'`python {report["command"]}`: d={report["dim"]}, {report["centres"]} centres; '
           f'phi L={phi["num_layers"]}, {phi["num_heads"]} heads, width {phi["model_dim"]}, '
           f'N={phi["num_images"]}, {phi["categories"]} categories (randomly initialised); '
           f'k={report["k"]}, X={report["per_category"]}, lists of '
           f'{report.get("list_length", report["k"])}; {_requests_text(report["requests"])} '
           f'{_rounds_text(report.get("rounds"))}over {report["queries"]} distinct queries; '
           f'serve.py '
           f'{" ".join(entry["serve_args"])}. Load average at the start '
           f'{m.get("load_average")}, at the end {report.get("load_average_end")}.', '',
           '| clients | service q/s | p50 ms | p99 ms | errors | differ | mean batch | '
           'server total ms | server queue ms | in-process q/s (batch = clients) | '
           'b-call p50 ms | service / in-process | each round | CPU ms per query: service | '
           'clients | in-process |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for c, level in sorted(entry['levels'].items(), key=lambda item: int(item[0])):
    s = level['service']
    server = s.get('server_ms', {})
    lines.append(f'| {c} | {s["per_s"]:.1f} | {_fmt(s["p50_ms"])} | {_fmt(s["p99_ms"])} | '
                 f'{s["errors"]} | {s["differs"]} | {s["batch_size_mean"]:.1f} | '
                 f'{_fmt(server.get("total"))} | {_fmt(server.get("queue"))} | '
                 f'{level["in_process_per_s"]:.1f} | {level["in_process_p50_ms"]:.2f} | '
                 f'{level["throughput_ratio"]:.2f}x | '
                 f'{", ".join(f"{r:.2f}" for r in level.get("round_ratios", [])) or "-"} | '
                 f'{_fmt(s.get("server_cpu_ms_per_request"))} | '
                 f'{_fmt(s.get("client_cpu_ms_per_request"))} | '
                 f'{_fmt(level.get("in_process_cpu_ms_per_query"))} |')
  lines.append('')
  if entry.get('batch1'):
    lines.append(f'In-process batch-1 latency: p50 {entry["batch1"]["p50_ms"]:.2f} ms, p99 '
                 f'{entry["batch1"]["p99_ms"]:.2f} ms.')
    lines.append('')
  lines += [f'- {line[len("target: "):] if line.startswith("target: ") else line}'
            for line in target_lines(entry['targets'], _round_ratios(entry))]
  gap = gap_line(entry)
  if gap:
    lines.append(f'- {gap}')
  lines += [f'- The service started (load, index, warm-up) in {entry["service_start_s"]:.1f} s; '
            f'SIGTERM at the end: exit status {entry["service_exit_status"]} after '
            f'{_fmt(entry.get("service_stop_s"), ".1f")} s.', '']
  return lines


if __name__ == '__main__':
  cli.run(main)
