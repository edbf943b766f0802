"""The engine benchmark's library (benchmarks/bench_engines.py): synthetic clustered collections
streamed in chunks, exact references, engines built over them, their per-query time, recall and
memory, and docs/ENGINES.md's sections."""
from __future__ import annotations

import dataclasses
import json
import time

from absl import app
import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.benchmarking import timing
from colt_jax.engines import approximate as engines
from colt_jax.engines import tuning as engine_tuning
from colt_jax.model import phi as phi_lib


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
  module = phi_lib.TokenClassifier(num_classes=34, num_layers=2, num_heads=2, model_dim=64,
                                  query_relative=True)
  tokens = jnp.asarray(np.random.default_rng(0).standard_normal((1, 1 + n, dim)), jnp.float32)
  mask = jnp.ones((1, 1 + n), bool)
  params = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  fn = jax.jit(lambda p, t, m: module.apply({'params': p}, t, m))
  return timing.time_calls(fn, params, tokens, mask, warmup=2, repeats=30)


def read_report(path: str) -> dict:
  try:
    with open(path) as f:
      report = json.load(f)
  except (OSError, ValueError) as e:
    raise app.UsageError(f'--doc_also: {path}: not a JSON report of this benchmark ({e})')
  if not isinstance(report, dict) or 'sizes' not in report or 'command' not in report:
    raise app.UsageError(f'--doc_also: {path}: not a report of this benchmark (no "sizes" or '
                         '"command"; rerun the command that wrote it)')
  sizes = report['sizes']
  if not (isinstance(sizes, dict) and isinstance(report['command'], str)
          and isinstance(report.get('machine'), dict)
          and all(isinstance(e, dict) and isinstance(e.get('engines'), dict)
                  for e in sizes.values())):
    raise app.UsageError(f'--doc_also: {path}: not a report of this benchmark (its "sizes", '
                         '"command" or "machine" are not what it writes)')
  return report


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


def settings_text(report: dict, name: str, entry: dict) -> list:
  """An engine's measured settings; a report written before --nprobe took a list holds one,
  at its IVF engines' nprobe then (32, the flag's default: its commands name no --nprobe)."""
  if 'settings' in entry:
    return entry['settings']
  nprobe = report.get('nprobe', 32) if name in engine_tuning.IVF_ENGINES else None
  return [{'nprobe': nprobe, 'timing': entry['timing'], 'recall': entry['recall'],
           'search_over_phi': entry['search_over_phi']}]


def fastest(report: dict, entry: dict, target: float):
  """(engine, setting) of the least median time per query whose recall reaches `target`."""
  reached = [(name, row) for name, e in entry['engines'].items()
             for row in settings_text(report, name, e) if row['recall'] >= target]
  return min(reached, key=lambda r: r[1]['timing']['median_ms'], default=None)


def ivf_cells(name: str, entry: dict, size: int, dim: int):
  """An IVF engine's cells ('-' for others); a report written before they were recorded was
  built with `engines.fit`'s choice at the defaults then (4 sqrt(M), 200,000 training rows)."""
  if name not in engine_tuning.IVF_ENGINES:
    return '-'
  if 'params' in entry:
    return entry['params']['nlist']
  return engines.fit(engines.EngineSpec(name, train_rows=200_000), size, dim)['nlist']


def markdown(reports: list) -> str:
  """The figures of one or more reports as markdown, each section naming its command."""
  first = reports[0]
  m = first['machine']
  lines = [
      '# Candidate engines at scale', '',
      f'Measured by benchmarks/bench_engines.py on {m.get("cpu", "this CPU")}, '
      f'{m.get("cpu_count", "?")} cores, no GPU; each section names the command that produced '
      'it (the same command with --out writes its JSON). Synthetic clustered photos; queries '
      'at batch 1; recall@n against exact search. "nprobe": IVF cells searched per query, '
      'each value measured on the same build; "cells": the IVF engine\'s k-means cells. '
      '"vs 1 read": time per query over one read '
      'of the collection (float32) at the bandwidth measured around that engine; '
      '"search/phi": time per query over phi\'s time on one [1 + n]-token sequence (this '
      'repo\'s `colt` width), measured in the same run. References (bandwidth, matmul rate) '
      'were measured before and after each engine, interleaved with it. With --stream the '
      'collection is never held whole: an IVF engine is filled chunk by chunk and its build '
      'time includes generating the rows. "load": the machine\'s load average when the run '
      'began (other jobs share its cores). "(picked)": the nprobe `engines.tune_nprobe` '
      'chose for --target_recall on other queries (--tune_queries) than the timed ones, as '
      'an IVF engine built with `EngineSpec(target_recall=...)` or `data_prep/'
      'index_collection.py --target_recall` picks it on sample photos of its collection.', '']
  for report in reports:
    load = report['machine'].get('load_average')
    for size, entry in report['sizes'].items():
      lines += [f'## {int(size):,} photos', '',
                f'`python {report["command"]}`: {report["centres"]} centres, '
                f'd={report["dim"]}, {report["queries"]} queries, n={report["n"]}, phi '
                f'{report["phi_ms"]:.2f} ms'
                + (f', load {load[0]:.1f}' if load else '') + '.', '',
                '| engine | cells | nprobe | build s | ms/query (median) | p99 ms | recall | '
                'vs 1 read | search/phi | bandwidth ref GB/s | matmul ref GFLOP/s |',
                '|---|---|---|---|---|---|---|---|---|---|---|']
      notes = []
      for name, e in entry['engines'].items():
        before, after = e['references_before'], e['references_after']
        bw = (before['bytes_per_s'] + after['bytes_per_s']) / 2
        flops = (before['flops_per_s'] + after['flops_per_s']) / 2
        tuning = e.get('tuning')
        cells = ivf_cells(name, e, int(size), report['dim'])
        for row in settings_text(report, name, e):
          picked = ' (picked)' if tuning and tuning['nprobe'] == row['nprobe'] else ''
          t = row['timing']
          lines.append(f'| {name} | {cells} | {row["nprobe"] or "-"}{picked} | '
                       f'{e["build_s"]:.1f} | {t["median_ms"]:.2f} | {t["p99_ms"]:.2f} | '
                       f'{row["recall"]:.3f} | {t["median_ms"] / e["exact_read_ms"]:.2f}x | '
                       f'{row["search_over_phi"]:.2f}x | {bw / 1e9:.1f} | {flops / 1e9:.0f} |')
        if tuning:
          notes.append(
              f'{name}: nprobe {tuning["nprobe"]} picked by `engines.tune_nprobe` for '
              f'recall@{tuning["n"]} >= {tuning["target_recall"]} on {tuning["queries"]} other '
              f'queries (recall {tuning["recall"]:.3f} there'
              + ('' if tuning['reached'] else ', short of the target') + '; tried '
              + ', '.join(f'{p}: {r:.3f}' for p, r in tuning['tried']) + ').')
      lines.append('')
      target = report.get('target_recall')
      if target:
        best = fastest(report, entry, target)
        notes.append(f'Fastest at recall@{report["n"]} >= {target}: ' + (
            f'{best[0]}' + (f' at nprobe {best[1]["nprobe"]}' if best[1]['nprobe'] else '')
            + f', {best[1]["timing"]["median_ms"]:.2f} '
            f'ms/query (median), recall {best[1]["recall"]:.3f}.' if best else 'none.'))
      if notes:
        lines += notes + ['']
  return '\n'.join(lines) + '\n'
