"""Candidate engines at scale (`benchmarks/bench_engines.py`; `run(config, command)` returns the
JSON report): time per query and recall of the top-n against exact search.

Synthetic photos: `dim`-d unit vectors around `centres` random centres (clustered, as image
features are), generated chunk by chunk from fixed seeds; queries lie near the centres. For
each collection size and engine it prints the build time, the median and p99 time per query at
batch 1, and recall@n (the share of the exact top-n the engine returns). The exact reference
top-n comes from `colt_jax.engines.exact.ExactIndex` when the collection fits in memory, else
(`stream`) from a NumPy scan over the regenerated chunks. A streamed IVF engine gets the cells
of the whole collection (4 sqrt(M), at most one per 39 training rows) and its build time
includes generating the rows. An IVF engine is built once and measured at each of `nprobes`;
with `target_recall`, `colt_jax.engines.nprobe_tuning.tune_nprobe` also picks the fewest cells whose
recall@n reaches it on `tune_queries` other queries, and that setting is measured too.

Interleaved with the measured work, the same run measures the machine's references (memory
read bandwidth and matmul FLOP/s, `timing.py`) before and after each engine; phi's time on one
[1 + n]-token sequence (a random phi of this repo's `colt` width) is the ratio that says
whether search or phi dominates CoLT's path. `engine_report.py` renders the reports.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.benchmarking import timing
from colt_jax.engines import approximate as engines
from colt_jax.engines import saved_engines
from colt_jax.engines import nprobe_tuning as engine_tuning
from colt_jax.pairs.pairs_phi import PairsTokenClassifier
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError


@dataclasses.dataclass(frozen=True)
class ScaleConfig:
  """The collections, engines and settings a run measures (bench_engines.py's flags of the
  same names; `nprobes` is --nprobe, sorted)."""
  sizes: tuple = (1_000_000,)
  engine_names: tuple = ('exact', 'faiss-ivf', 'faiss-ivfpq', 'faiss-hnsw')  # --engines
  nprobes: tuple = (32,)
  dim: int = 512
  centres: int = 2000
  queries: int = 100
  n: int = 200
  target_recall: float = 0.0  # 0: no tuned nprobe
  tune_queries: int = 100
  nlist: int = 0
  train_rows: int = engines.EngineSpec.train_rows
  ef_construction: int = 40
  stream: bool = False
  chunk: int = 250_000


def chunk_rows(start: int, rows: int, dim: int, centres: np.ndarray) -> np.ndarray:
  rng = np.random.default_rng(1000 + start)
  x = centres[rng.integers(0, len(centres), rows)] + 0.5 * rng.standard_normal(
      (rows, dim), np.float32)
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def chunks(size: int, dim: int, centres: np.ndarray, chunk: int):
  for start in range(0, size, chunk):
    yield start, chunk_rows(start, min(chunk, size - start), dim, centres)


def queries_near(dim, centres, count, seed=7):
  """Queries near the photos' centres (a query is not itself a photo)."""
  rng = np.random.default_rng(seed)
  q = centres[rng.integers(0, len(centres), count)] + 0.6 * rng.standard_normal(
      (count, dim), np.float32)
  return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def stream_exact(size, dim, centres, chunk, queries, n):
  best_s = np.full((len(queries), n), -np.inf, np.float32)
  best_i = np.zeros((len(queries), n), np.int64)
  for start, x in chunks(size, dim, centres, chunk):
    s = queries @ x.T
    idx = np.arange(start, start + len(x))
    all_s = np.concatenate([best_s, s], 1)
    all_i = np.concatenate([best_i, np.broadcast_to(idx, s.shape)], 1)
    top = np.argsort(-all_s, axis=1, kind='stable')[:, :n]
    best_s = np.take_along_axis(all_s, top, 1)
    best_i = np.take_along_axis(all_i, top, 1)
  return best_i


def build_streamed(spec, size, dim, centres, chunk):
  """An IVF engine filled chunk by chunk (its quantiser trained on the first `train_rows`
  rows), with the cells of the whole collection (`engines.FaissIndex.build` caps them by the
  sample)."""
  if not spec.nlist:
    spec = dataclasses.replace(spec, nlist=max(1, int(4 * np.sqrt(size))))
  train = min(size, spec.train_rows)
  cover = min(size, -(-train // chunk) * chunk)  # whole chunks: the collection's first rows
  sample = np.concatenate([x for _, x in chunks(cover, dim, centres, chunk)])[:train]
  small = engines.FaissIndex.build(sample, spec)
  del sample
  index = small.index
  index.reset()
  for _, x in chunks(size, dim, centres, chunk):
    index.add(x)
  return engines.FaissIndex(index, spec)


def per_query_ms(search, queries, n):
  seconds = []
  for q in queries:
    t0 = time.perf_counter()
    jax.block_until_ready(search(q[None], n))
    seconds.append(time.perf_counter() - t0)
  return timing.summarise(seconds)


def references() -> dict:
  return {'bytes_per_s': timing.memory_bandwidth(1 << 28, repeats=5)['bytes_per_s'],
          'flops_per_s': timing.matmul_rate(1024, repeats=5)['flops_per_s']}


def phi_time(dim: int, n: int) -> timing.Timing:
  """phi (this repo's `colt` shape: L=2, 2 heads, width 64, query-relative) on 1 + n tokens."""
  module = PairsTokenClassifier(num_classes=34, num_layers=2, num_heads=2, model_dim=64,
                               query_relative=True)
  tokens = jnp.asarray(np.random.default_rng(0).standard_normal((1, 1 + n, dim)), jnp.float32)
  mask = jnp.ones((1, 1 + n), bool)
  params = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  fn = jax.jit(lambda p, t, m: module.apply({'params': p}, t, m))
  return timing.time_calls(fn, params, tokens, mask, warmup=2, repeats=30)


def measured_bytes(size: int, dim: int, centres: int, queries: int, n: int, chunk: int,
                   stream: bool, train_rows: int = 0) -> int:
  """At least what measuring one collection size holds: the centres, queries and phi's
  [1 + n]-token sequence with its attention weights (2 layers, 2 heads), and the collection
  (generated chunks and their concatenation) or, streamed, a chunk, the running top-n and an
  IVF engine's training sample (`train_rows`, generated in whole chunks)."""
  f32 = 4
  base = (centres + queries) * dim * f32 + (1 + n) * (dim * f32 + 2 * 2 * (1 + n) * f32)
  rows = min(chunk, size)
  if stream:
    train = min(size, train_rows + chunk) if train_rows else 0
    return (base + 3 * rows * dim * f32 + queries * (n + rows) * (f32 + 8) * 2
            + 2 * train * dim * f32)
  return base + 2 * size * dim * f32 + queries * n * 8


def measure(engine, queries, exact_rows, n, phi_ms) -> dict:
  """One setting of a built engine: time per query at batch 1, and recall@n."""
  engine.search(queries[:1], n)  # warm-up (compilation for exact)
  t = per_query_ms(engine.search, queries, n)
  rows = np.asarray(engine.search(queries, n)[1])
  return {'timing': t.as_dict(), 'recall': engine_tuning.recall(rows, exact_rows),
          'search_over_phi': t.median_ms / phi_ms}


def check(config: ScaleConfig) -> None:
  """InputError, naming the flags, for settings that cannot run, and the memory each size
  needs."""
  ivf = [e for e in config.engine_names if e in engine_tuning.IVF_ENGINES]
  if config.target_recall and not ivf:
    raise InputError(f'--target_recall applies to IVF engines ('
                     f'{", ".join(engine_tuning.IVF_ENGINES)}); --engines names none')
  flagcheck.check_range('--n', config.n, 1, min(config.sizes), why='the smallest of --sizes')
  queries = config.queries + (config.tune_queries if config.target_recall else 0)
  for size in config.sizes:
    flagcheck.check_memory(
        flagcheck.flags_text({'sizes': size, 'dim': config.dim, 'n': config.n,
                              'queries': queries, 'chunk': config.chunk,
                              'train_rows': config.train_rows}),
        measured_bytes(size, config.dim, config.centres, queries, config.n, config.chunk,
                       config.stream, config.train_rows if ivf else 0),
        f'{size:,} photos' + (' streamed' if config.stream else ' (add --stream to never '
                                                                'hold them whole)'))


def _measure_engine(config: ScaleConfig, name: str, size: int, centres: np.ndarray,
                    photos, queries: np.ndarray, exact_rows: np.ndarray,
                    tune_queries: np.ndarray, exact_tune: np.ndarray, phi_ms: float) -> dict:
  """One engine built over one collection and measured at each of its settings."""
  dim, n, target, nprobes = config.dim, config.n, config.target_recall, config.nprobes
  ivf = name in engine_tuning.IVF_ENGINES
  before = references()
  spec = engines.EngineSpec(name, nprobe=nprobes[-1], nlist=config.nlist,
                            train_rows=config.train_rows,
                            ef_construction=config.ef_construction, ef_search=n)
  t0 = time.perf_counter()
  if config.stream:
    engine = build_streamed(spec, size, dim, centres, config.chunk)
  else:
    engine = saved_engines.build(spec, photos)
  build_s = time.perf_counter() - t0
  entry = {'build_s': build_s, 'params': dict(getattr(engine, 'params', {})),
           'settings': []}
  settings = list(nprobes) if ivf else [None]
  if ivf and target:
    t0 = time.perf_counter()
    entry['tuning'] = engine_tuning.tune_nprobe(engine, tune_queries, exact_tune, target)
    entry['tuning']['seconds'] = time.perf_counter() - t0
    settings = sorted(set(settings) | {entry['tuning']['nprobe']})
  for nprobe in settings:
    if nprobe is not None:
      engine.set_nprobe(nprobe)
    entry['settings'].append(dict(nprobe=nprobe, **measure(engine, queries, exact_rows, n,
                                                           phi_ms)))
  after = references()
  bandwidth = (before['bytes_per_s'] + after['bytes_per_s']) / 2
  entry.update(references_before=before, references_after=after,
               exact_read_ms=size * dim * 4 / bandwidth * 1e3)
  for row in entry['settings']:
    t = row['timing']
    mark = '*' if entry.get('tuning', {}).get('nprobe', -1) == row['nprobe'] else ''
    print(f'{name:<12} {str(row["nprobe"] or "-") + mark:>6} {build_s:8.1f} '
          f'{t["median_ms"]:9.2f} {t["p99_ms"]:8.2f} {row["recall"]:10.3f} '
          f'{t["median_ms"] / entry["exact_read_ms"]:8.2f}x '
          f'{row["search_over_phi"]:9.2f}x {bandwidth / 1e9:9.1f}')
  if 'tuning' in entry:
    tu = entry['tuning']
    print(f'{name:<12} * nprobe {tu["nprobe"]} picked for recall@{n} >= {target} on '
          f'{tu["queries"]} other queries (recall {tu["recall"]:.3f} there'
          + ('' if tu['reached'] else ', short of the target') + ')')
  return entry


def run(config: ScaleConfig, command: str) -> dict:
  """Every size and engine of `config` measured (module docstring); the JSON report, which
  keeps `command`, the command line that wrote it."""
  dim, n, target = config.dim, config.n, config.target_recall
  centres = np.random.default_rng(0).standard_normal((config.centres, dim)).astype(np.float32)
  report = {'machine': timing.machine_info(), 'dim': dim, 'n': n, 'queries': config.queries,
            'centres': config.centres, 'sizes': {}, 'stream': config.stream,
            'nprobe': list(config.nprobes), 'target_recall': target,
            'tune_queries': config.tune_queries if target else 0, 'command': command}
  phi = phi_time(dim, n)
  report['phi_ms'] = phi.median_ms
  print(f'phi on 1 + {n} tokens (d={dim}): {phi.median_ms:.2f} ms median')
  queries = queries_near(dim, centres, config.queries)
  tune_queries = (queries_near(dim, centres, config.tune_queries, seed=8) if target
                  else queries[:0])
  both = np.concatenate([queries, tune_queries])
  for size in config.sizes:
    t0 = time.perf_counter()
    if config.stream:
      exact_both = stream_exact(size, dim, centres, config.chunk, both, n)
      photos = None
    else:
      photos = np.concatenate([x for _, x in chunks(size, dim, centres, config.chunk)])
      exact_both = np.asarray(
          saved_engines.build(engines.EngineSpec(), photos).search(both, n)[1])
    exact_rows, exact_tune = exact_both[:len(queries)], exact_both[len(queries):]
    out = report['sizes'][str(size)] = {'generate_s': time.perf_counter() - t0, 'engines': {}}
    print(f'\n{size:,} photos x {dim} dims ({size * dim * 4 / 2**30:.1f} GiB as float32)')
    print(f'{"engine":<12} {"nprobe":>6} {"build s":>8} {"ms/query":>9} {"p99 ms":>8} '
          f'{"recall@" + str(n):>10} {"vs 1 read":>9} {"search/phi":>10} {"GB/s ref":>9}')
    for name in config.engine_names:
      if config.stream and name in ('exact', 'faiss-hnsw', 'qdrant'):
        print(f'{name:<12} skipped: needs the whole collection in memory (--stream)')
        continue
      out['engines'][name] = _measure_engine(config, name, size, centres, photos, queries,
                                             exact_rows, tune_queries, exact_tune,
                                             phi.median_ms)
  return report
