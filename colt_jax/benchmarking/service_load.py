"""The service benchmark's load and its reference: closed-loop HTTP clients over one connection
each (`drive`, `Load`), the process's and each thread kind's CPU seconds, and the same queries
answered in-process by the Retriever's batched path (`in_process`), interleaved round by round."""
from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import time
from typing import Optional

import numpy as np

from colt_jax.benchmarking import service_process
from colt_jax.benchmarking import timing
from colt_jax.inference import retriever


def request_body(query: np.ndarray, k: int, per_category: int, list_length: int) -> bytes:
  """The JSON body of `POST /search` for a query vector: each float32 in its shortest
  round-trip text, so the service reads exactly the in-process path's query."""
  vector = ','.join(str(v) for v in np.asarray(query, np.float32))
  return (f'{{"vector":[{vector}],"k":{k},"per_category":{per_category},'
          f'"list_length":{list_length},"method":"colt"}}').encode()


def http_request(port: int, body: bytes) -> bytes:
  return (f'POST /search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n'
          f'Content-Type: application/json\r\nAccept: application/json\r\n'
          f'Content-Length: {len(body)}\r\n\r\n').encode() + body


class Load:
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


async def _client(port: int, requests: list, counter, total: int, load: Load) -> None:
  reader = writer = None
  while True:
    i = next(counter)
    if i >= total:
      break
    j = i % len(requests)
    try:
      if writer is None:
        reader, writer = await asyncio.open_connection(service_process.HOST, port)
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
  """One (`Load`, wall seconds) of several runs (`drive`'s): their answers, errors and
  CPU seconds together, their walls summed."""
  out = Load()
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
  return [service_figures(load, wall, clients, total)['per_s'] / ((a['per_s'] + b['per_s']) / 2)
          for (load, wall), a, b in zip(loads, refs, refs[1:])]


def stat_cpu_seconds(path: str) -> Optional[float]:
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
  return stat_cpu_seconds(f'/proc/{pid}/stat')


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
    seconds = stat_cpu_seconds(f'/proc/{pid}/task/{tid}/stat')
    if seconds is not None:
      kind = 'event loop' if tid == str(pid) else 'XLA' if name.startswith('tf_') else 'other'
      out[kind] += seconds
  return out


def drive(port: int, requests: list, expected: list, clients: int, total: int,
          server_pid: Optional[int] = None) -> tuple:
  """(`Load`, wall seconds) of `total` requests sent by `clients` concurrent clients; the
  load also records the CPU seconds this process (the clients) and the server used."""
  load = Load()
  counter = itertools.count()

  async def run():
    await asyncio.gather(*(_client(port, requests, counter, total, load)
                           for _ in range(clients)))

  gc.collect()
  gc.freeze()  # this process's JAX and model objects: no full collection scans them mid-run
  with asyncio.Runner(loop_factory=loop_factory()) as runner:
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


def loop_factory():
  """uvloop's event loop for the clients when installed (requirements.txt; the service's
  loop too): less of the load generator's CPU on the cores it shares with the service."""
  try:
    import uvloop  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return uvloop.new_event_loop


def requests_per_row(clients: int, requests: int = 0) -> int:
  """`requests` (--requests) when > 0, else the default for a row of `clients`: at
  least 384 requests and 64 rounds of every client. A closed-loop row ends with its last
  round draining (clients finishing one by one, the service's last batches part full), which
  the in-process path does not pay: over 12 rounds (384 requests at 32 clients, 1.2 s) that
  tail is about 1/12 of the row, over 64 about 1/64."""
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


def service_figures(load: Load, wall: float, clients: int, total: int) -> dict:
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


def memory_bytes(size: int, dim: int, engine: str) -> int:
  """At least what one size holds in this process and the service's: the generated rows,
  the store written and read back, each process's index (and an engine's copy)."""
  rows = size * dim * 4
  copies = 5 + (2 if engine != 'exact' else 0)
  return copies * rows
