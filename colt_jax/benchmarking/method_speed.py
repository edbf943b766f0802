"""Every method of the service per collection size and engine, at batch 1 and under load
(`benchmarks/bench_methods.py`; `run(config, command)` returns the JSON report).

For each size, a synthetic collection (`dim`-d unit vectors around `centres` centres: small
dimensions, so that a million photos fit in memory and minutes on 2 cores) in memory, and a
CoLT model with a randomly initialised phi of the given shape (`synthetic_collection.py`;
timing does not depend on what phi learned). For each engine, the model indexed over the
collection (`Retriever.index`) and the service's own batched path over it
(`service.searcher.Searcher.run`, what `experiments/serve.py` runs for a batch, without HTTP:
the HTTP service's own overhead is docs/SERVICE.md's "Under load"): the request a client sends
(`vector`, k, X, list length 50, the method's default parameters of model_free.json, its
default candidate count: 200).

* batch 1: one request at a time; the median and p99 of its time (the whole of `run`:
  candidates, the method, the answer's columns) and the mean of its `rerank` stage (the
  method's own time after the candidate search; for colt, its one call of search and phi);
* under load: batches of `load_batch` requests (the service's --max_batch_size, 32): queries
  per second over the batches;
* CPU: this process's CPU time (all threads, user + system) per batch-1 request and per query
  under load: less sensitive than times to the other processes of a busy machine.

Rounds (`rounds`) interleave the methods (each round times every method in turn), so the
ratios of two methods (DPP over MMR: `ratio`) are measured in the same run, per round, with
the reference interleaved; the figures pool the rounds. Compilation happens before the timed
rounds (one untimed call of each method at each batch), and the count of compilations during
them is recorded (it should be 0).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
import tempfile
import time
from typing import Optional

import numpy as np

from colt_jax.benchmarking import synthetic_collection
from colt_jax.benchmarking import timing
from colt_jax.data import features
from colt_jax.engines import approximate as engines
from colt_jax.evaluation import model_free
from colt_jax.inference import retriever
from colt_jax.service import request_batching
from colt_jax.service import schemas
from colt_jax.service import searcher as searcher_lib
from colt_jax.util.errors import InputError

METHODS = ('colt',) + tuple(model_free.METHODS)  # colt, topk, mmr, msd, dpp, umons


@dataclasses.dataclass(frozen=True)
class MethodConfig:
  """What `run` measures (benchmarks/bench_methods.py's flags of the same names)."""
  sizes: tuple = (10_000, 1_000_000)
  engines: tuple = ('exact', 'faiss-ivf')
  methods: tuple = METHODS
  dim: int = 64
  centres: int = 1000
  nprobe: int = 32
  queries: int = 64  # distinct query vectors, cycled
  batch1_requests: int = 16  # per method and round
  load_batches: int = 2  # per method and round
  load_batch: int = 32
  rounds: int = 3
  list_length: int = 50
  num_layers: int = 2
  num_heads: int = 2
  model_dim: int = 64
  num_images: int = 200
  categories: int = 160
  workdir: str = ''

  def __post_init__(self):
    unknown = [m for m in self.methods if m not in METHODS]
    if unknown:
      raise InputError(f'--methods: unknown {", ".join(unknown)}; expected any of '
                       f'{", ".join(METHODS)}')
    for name in self.engines:
      engines.EngineSpec(name)  # an unknown engine: one line naming it
    if not 1 <= self.load_batch <= searcher_lib.MAX_BATCH_SIZE:
      raise InputError(f'--load_batch must be in [1, {searcher_lib.MAX_BATCH_SIZE}], got '
                       f'{self.load_batch}')


def _pending(request) -> request_batching.Pending:
  return request_batching.Pending(request, time.perf_counter(), concurrent.futures.Future())


def _request(config: MethodConfig, method: str, query: np.ndarray) -> schemas.SearchRequest:
  return schemas.SearchRequest(vector=query.tolist(), method=method, k=20, per_category=1,
                               list_length=config.list_length)


def _run(searcher: searcher_lib.Searcher, requests: list) -> tuple:
  """(seconds, CPU seconds of this process, answers) of one batch through `Searcher.run`; a
  failed request raises."""
  batch = [_pending(r) for r in requests]
  t0, c0 = time.perf_counter(), time.process_time()
  searcher.run(batch)
  seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
  return seconds, cpu, [p.future.result(0) for p in batch]


def _round(config: MethodConfig, searcher, method: str, queries: np.ndarray, start: int) -> dict:
  """One round of one method: batch-1 times, its rerank stage, and the load batches' times."""
  q = len(queries)
  ones, rerank, cpu1 = [], [], []
  for i in range(config.batch1_requests):
    seconds, cpu, answers = _run(searcher, [_request(config, method, queries[(start + i) % q])])
    ones.append(seconds)
    cpu1.append(cpu)
    rerank.append(answers[0]['timing_ms']['rerank'] / 1e3)
  loads, cpus = [], []
  for j in range(config.load_batches):
    first = start + config.batch1_requests + j * config.load_batch
    seconds, cpu, _ = _run(searcher, [_request(config, method, queries[(first + i) % q])
                                      for i in range(config.load_batch)])
    loads.append(seconds)
    cpus.append(cpu)
  return {'batch1_s': ones, 'rerank_s': rerank, 'load_s': loads, 'batch1_cpu_s': cpu1,
          'load_cpu_s': cpus}


def _summary(config: MethodConfig, rounds: list) -> dict:
  ones = [s for r in rounds for s in r['batch1_s']]
  loads = [s for r in rounds for s in r['load_s']]
  return {
      'batch1_p50_ms': 1e3 * float(np.median(ones)),
      'batch1_p99_ms': 1e3 * float(np.percentile(ones, 99)),
      'rerank_ms': 1e3 * float(np.mean([s for r in rounds for s in r['rerank_s']])),
      'batch1_cpu_ms': 1e3 * float(np.mean([s for r in rounds for s in r['batch1_cpu_s']])),
      'load_cpu_ms_per_query': 1e3 * float(np.sum([s for r in rounds for s in r['load_cpu_s']]))
                               / (config.load_batch * len(loads)),
      'load_qps': config.load_batch * len(loads) / float(np.sum(loads)),
      'rounds_batch1_p50_ms': [1e3 * float(np.median(r['batch1_s'])) for r in rounds],
      'rounds_load_qps': [config.load_batch * len(r['load_s']) / float(np.sum(r['load_s']))
                          for r in rounds],
      'rounds_rerank_ms': [1e3 * float(np.mean(r['rerank_s'])) for r in rounds],
      'rounds_batch1_cpu_ms': [1e3 * float(np.mean(r['batch1_cpu_s'])) for r in rounds],
      'rounds_load_cpu_ms': [1e3 * float(np.sum(r['load_cpu_s'])) for r in rounds],
  }


def ratio(rows: dict, method: str, reference: str) -> Optional[dict]:
  """`method` over `reference` in one (size, engine)'s rows, per round and pooled: batch-1
  p50, its rerank stage, and time per query under load (the inverse of q/s)."""
  if method not in rows or reference not in rows:
    return None
  a, b = rows[method], rows[reference]
  per_round = lambda key, inv=False: [
      (y / x if inv else x / y) for x, y in zip(a[key], b[key])]
  return {'method': method, 'reference': reference,
          'batch1': a['batch1_p50_ms'] / b['batch1_p50_ms'],
          'rerank': a['rerank_ms'] / b['rerank_ms'],
          'load': b['load_qps'] / a['load_qps'],
          'batch1_cpu': a['batch1_cpu_ms'] / b['batch1_cpu_ms'],
          'load_cpu': a['load_cpu_ms_per_query'] / b['load_cpu_ms_per_query'],
          'rounds_batch1_cpu': per_round('rounds_batch1_cpu_ms'),
          'rounds_load_cpu': per_round('rounds_load_cpu_ms'),
          'rounds_batch1': per_round('rounds_batch1_p50_ms'),
          'rounds_rerank': per_round('rounds_rerank_ms'),
          'rounds_load': per_round('rounds_load_qps', inv=True)}


def measure_engine(config: MethodConfig, model_dir: str, store, engine: str,
                   queries: np.ndarray) -> dict:
  """Every method of one (size, engine): the index built, warmed, then interleaved rounds."""
  t0 = time.perf_counter()
  spec = engines.EngineSpec(engine, nprobe=config.nprobe)
  colt = retriever.Retriever.from_pretrained(model_dir).index(store, spec)
  index_s = time.perf_counter() - t0
  searcher = searcher_lib.Searcher(colt, max_batch_size=config.load_batch)
  t0 = time.perf_counter()
  for method in config.methods:  # compiles each method at the two padded sizes timed
    _run(searcher, [_request(config, method, queries[0])])
    _run(searcher, [_request(config, method, q) for q in queries[:config.load_batch]])
    _run(searcher, [_request(config, method, q) for q in queries[:config.load_batch]])
  warm_s = time.perf_counter() - t0
  rounds = {m: [] for m in config.methods}
  with timing.CompileCounter() as counter:
    for r in range(config.rounds):
      for method in config.methods:
        start = r * (config.batch1_requests + config.load_batches * config.load_batch)
        rounds[method].append(_round(config, searcher, method, queries, start))
  rows = {m: _summary(config, rounds[m]) for m in config.methods}
  out = {'index_s': index_s, 'warm_s': warm_s, 'compiles_timed': counter.count,
         'num_candidates': searcher.num_candidates, 'rows': rows,
         'dpp_over_mmr': ratio(rows, 'dpp', 'mmr')}
  print(f'  {engine}: indexed in {index_s:.1f} s, warmed in {warm_s:.1f} s, '
        f'{counter.count} compilations while timed')
  for m, row in rows.items():
    print(f'    {m:6s} batch 1 p50 {row["batch1_p50_ms"]:8.2f} ms  p99 '
          f'{row["batch1_p99_ms"]:8.2f} ms  rerank {row["rerank_ms"]:7.2f} ms  CPU '
          f'{row["batch1_cpu_ms"]:7.2f} ms  batch {config.load_batch}: {row["load_qps"]:8.1f} '
          f'q/s, CPU {row["load_cpu_ms_per_query"]:6.2f} ms/q')
  if out['dpp_over_mmr']:
    d = out['dpp_over_mmr']
    print(f'    dpp / mmr: batch 1 {d["batch1"]:.2f}x (CPU {d["batch1_cpu"]:.2f}x), rerank '
          f'{d["rerank"]:.2f}x (rounds {_rounds(d["rounds_rerank"])}), under load '
          f'{d["load"]:.2f}x (CPU {d["load_cpu"]:.2f}x)')
  return out


def measure_size(config: MethodConfig, size: int, centres: np.ndarray, workdir: str) -> dict:
  print(f'\n{size:,} photos x {config.dim} dims: the collection and model')
  t0 = time.perf_counter()
  photos = synthetic_collection.synthetic_photos(size, config.dim, centres)
  store = features.make_store(
      photos=photos, photo_ids=[str(i) for i in range(size)],
      queries=np.zeros((0, config.dim), np.float32), query_ids=[],
      categories=np.zeros((0, config.dim), np.float32), category_names=[],
      encoder='synthetic', dataset='synthetic', split='all',
      source='generated by colt_jax/benchmarking/method_speed.py')
  model_dir = synthetic_collection.synthetic_model(
      os.path.join(workdir, f'model-{size}'), dim=config.dim, num_layers=config.num_layers,
      num_heads=config.num_heads, model_dim=config.model_dim, num_images=config.num_images,
      categories=config.categories)
  queries = synthetic_collection.synthetic_queries(config.queries, config.dim, centres)
  out = {'prepare_s': time.perf_counter() - t0, 'engines': {}}
  for engine in config.engines:
    out['engines'][engine] = measure_engine(config, model_dir, store, engine, queries)
  return out


def run(config: MethodConfig, command: str) -> dict:
  """Every size and engine of `config` (module docstring); the JSON report, which keeps
  `command`, the command line that wrote it."""
  centres = synthetic_collection.synthetic_centres(config.centres, config.dim)
  workdir = config.workdir or tempfile.mkdtemp(prefix='bench-methods-')
  os.makedirs(workdir, exist_ok=True)
  report = {'benchmark': 'methods', 'command': command, 'machine': timing.machine_info(),
            'config': dataclasses.asdict(config), 'sizes': {}}
  try:
    for size in config.sizes:
      report['sizes'][str(size)] = measure_size(config, size, centres, workdir)
  finally:
    if not config.workdir:
      shutil.rmtree(workdir, ignore_errors=True)
  report['load_average_end'] = timing.load_average()
  return report



def _rounds(values: list) -> str:
  return ', '.join(f'{v:.2f}' for v in values)


def section(report: dict) -> list:
  """docs/SERVICE.md's lines of a report of `run`: a table per size and engine, and DPP's
  time over MMR's."""
  c, m = report['config'], report['machine']
  lines = [
      '## Every method, per collection size and engine', '',
      f'`python {report["command"]}` on {m.get("cpu", "this CPU")}, {m.get("cpu_count", "?")} '
      f'cores, {m.get("backend", "cpu")} backend (JAX {m.get("jax", "?")}); load average at the '
      f'start {m.get("load_average")}, at the end {report.get("load_average_end")}. '
      'The service\'s batched path in the benchmark\'s process (`Searcher.run`, what '
      '`serve.py` runs for a batch, without HTTP: the HTTP service\'s own overhead is "Under '
      'load" above) over a synthetic collection of small '
      f'dimension (d={c["dim"]}, {c["centres"]} centres, in memory: so that a million photos '
      f'take minutes on 2 cores) and a randomly initialised phi (L={c["num_layers"]}, '
      f'{c["num_heads"]} heads, width {c["model_dim"]}, N={c["num_images"]}, '
      f'{c["categories"]} categories). Requests: a query vector, k=20, X=1, lists of '
      f'{c["list_length"]}, each method\'s default parameters and candidate count '
      '(colt_jax/evaluation/model_free.json). "batch 1": one request at a time, '
      f'{c["batch1_requests"]} per method and round; "own ms": the mean of its `rerank` stage '
      '(the method after the candidate search; for colt its one call of search and phi); '
      f'"under load": batches of {c["load_batch"]} requests ({c["load_batches"]} per method '
      f'and round), queries/s; "CPU": the benchmark process\'s CPU time (all threads), per '
      'request at batch 1 and per query under load (less sensitive than times to the other '
      f'processes of a busy machine). {c["rounds"]} rounds, each timing every method in turn (the '
      'ratios of two methods are measured in the same run, interleaved); the figures pool the '
      'rounds. faiss-ivf searches {nprobe} cells.'.replace('{nprobe}', str(c['nprobe'])), '']
  for size, entry in report['sizes'].items():
    for engine, e in entry['engines'].items():
      lines += [f'### {int(size):,} photos, {engine}', '',
                f'Indexed in {e["index_s"]:.1f} s; {e["num_candidates"]} candidates for the '
                f'model-free methods; compilations while timed: {e["compiles_timed"]}.', '',
                '| method | batch 1 p50 ms | batch 1 p99 ms | own ms | batch 1 CPU ms | under '
                'load q/s | under load CPU ms per query |', '|---|---|---|---|---|---|---|']
      for method in [m for m in c['methods'] if m in e['rows']]:  # the JSON sorts its keys
        row = e['rows'][method]
        lines.append(f'| {method} | {row["batch1_p50_ms"]:.2f} | {row["batch1_p99_ms"]:.2f} | '
                     f'{row["rerank_ms"]:.2f} | {row["batch1_cpu_ms"]:.2f} | '
                     f'{row["load_qps"]:.1f} | {row["load_cpu_ms_per_query"]:.2f} |')
      lines.append('')
      d = e.get('dpp_over_mmr')
      if d:
        met = 'met' if max(d['rerank'], d['batch1'], d['load']) <= 2.0 else 'NOT met'
        lines += [f'- DPP over MMR ({e["num_candidates"]} candidates; target <= 2x): its own '
                  f'time {d["rerank"]:.2f}x (rounds {_rounds(d["rounds_rerank"])}), batch 1 '
                  f'{d["batch1"]:.2f}x (rounds {_rounds(d["rounds_batch1"])}; CPU '
                  f'{d["batch1_cpu"]:.2f}x, rounds {_rounds(d["rounds_batch1_cpu"])}), under '
                  f'load {d["load"]:.2f}x (rounds {_rounds(d["rounds_load"])}; CPU '
                  f'{d["load_cpu"]:.2f}x, rounds {_rounds(d["rounds_load_cpu"])}): {met} by '
                  'the pooled times.', '']
  return lines
