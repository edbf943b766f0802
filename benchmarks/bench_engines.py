r"""Candidate engines at scale: time per query and recall of the top-n against exact search.

  python benchmarks/bench_engines.py --sizes 1000000 --out docs/results/engines/engines-1M.json
  python benchmarks/bench_engines.py --sizes 10000000 --engines faiss-ivfsq --stream \
      --nprobe 4,8,16,32 --target_recall 0.95 --out docs/results/engines/engines-10M.json \
      --doc docs/ENGINES.md --doc_also docs/results/engines/engines-1M.json

Synthetic photos: `--dim`-d unit vectors around `--centres` random centres (clustered, as
image features are), generated chunk by chunk from fixed seeds; queries lie near the centres.
For each collection size and engine it prints the build time, the median and p99 time per
query at batch 1, and recall@n (the share of the exact top-n the engine returns). The exact
reference top-n comes from `colt_jax.engines.exact.ExactIndex` when the collection fits in memory,
else (`--stream`) from a NumPy scan over the regenerated chunks. A streamed IVF engine gets
the cells of the whole collection (4 sqrt(M), at most one per 39 training rows) and its build
time includes generating the rows.

An IVF engine is built once and measured at each of `--nprobe` (cells searched per query).
With `--target_recall`, `colt_jax.engines.tuning.tune_nprobe` also picks the fewest cells whose
recall@n reaches it on `--tune_queries` other queries (their exact top-n from the same scan),
as an engine built with `EngineSpec(target_recall=...)` does on sample rows of its collection;
that setting is measured too and marked in the report.

Each JSON report keeps the command that wrote it; `--doc` renders this run's report after
the earlier ones named by `--doc_also`, each section naming its own command, and
`--doc_only` re-renders a doc from saved reports without measuring anything.

Interleaved with the measured work, the same run measures the machine's references: memory
read bandwidth and matmul FLOP/s (benchmarks/timing.py) before and after each engine; the
exact engine's time is also given as a ratio to one read of the collection at the measured
bandwidth, and phi's time on one [1 + N]-token sequence (a random phi of this repo's `colt`
width at --dim) as the ratio that says whether search or phi dominates CoLT's path.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.util import cli
from colt_jax.engines import approximate as engines
from colt_jax.engines import tuning as engine_tuning
from colt_jax.engines import saved_engines
from colt_jax.util import flagcheck
from colt_jax.model import phi as phi_lib
from colt_jax.util import outputs
import timing  # benchmarks/timing.py: the script's folder is on sys.path

_SIZES = flags.DEFINE_list('sizes', ['1000000'], 'Collection sizes.')
_BOUNDS = dict(lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
_DIM = flags.DEFINE_integer('dim', 512, 'Feature dimension (CLIP ViT-B/32: 512).', **_BOUNDS)
_CENTRES = flags.DEFINE_integer('centres', 2000, 'Clusters of the synthetic photos.', **_BOUNDS)
_QUERIES = flags.DEFINE_integer('queries', 100, 'Queries timed (batch 1) and scored.',
                                **_BOUNDS)
_N = flags.DEFINE_integer('n', 200, 'Candidates per query (phi\'s N; at most the smallest '
                          'size).', **_BOUNDS)
_ENGINES = flags.DEFINE_list('engines', ['exact', 'faiss-ivf', 'faiss-ivfpq', 'faiss-hnsw'],
                             f'Engines, some of {engines.ENGINES}.')
_NPROBE = flags.DEFINE_list('nprobe', ['32'], 'IVF cells searched per query: one value, or '
                            'several (4,8,16,32) measured on one build of each IVF engine.')
_TARGET_RECALL = flags.DEFINE_float('target_recall', 0.0, 'IVF engines: also measure the '
                                    'nprobe that engines.tune_nprobe picks for this recall@n '
                                    'on --tune_queries other queries; 0: none.',
                                    lower_bound=0.0, upper_bound=1.0)
_TUNE_QUERIES = flags.DEFINE_integer('tune_queries', 100, 'Queries (not the timed ones) that '
                                     '--target_recall tunes on.', **_BOUNDS)
_NLIST = flags.DEFINE_integer('nlist', 0, 'IVF cells (0: 4 sqrt(M)); at most one per 39 of '
                              '--train_rows.', lower_bound=0, upper_bound=flagcheck.MAX_COUNT)
_TRAIN_ROWS = flags.DEFINE_integer('train_rows', engines.EngineSpec.train_rows, 'IVF: rows the '
                                   'k-means (and PQ) are trained on.', **_BOUNDS)
_EF_CONSTRUCTION = flags.DEFINE_integer('ef_construction', 40, 'HNSW build beam.', **_BOUNDS)
_STREAM = flags.DEFINE_bool('stream', False, 'Never hold the whole collection: IVF engines '
                            'are filled chunk by chunk, the exact reference is a NumPy scan.')
_CHUNK = flags.DEFINE_integer('chunk', 250_000, 'Rows generated at a time.', **_BOUNDS)
_OUT = flags.DEFINE_string('out', '', 'Also write the figures as JSON here.')
_DOC = flags.DEFINE_string('doc', '', 'Also write them as a markdown report here.')
_DOC_ALSO = flags.DEFINE_list('doc_also', [], 'Earlier JSON reports (--out of other runs) '
                              'whose sections come first in --doc.')
_DOC_ONLY = flags.DEFINE_bool('doc_only', False, 'Measure nothing: write --doc from the '
                              '--doc_also reports.')


def _chunk(start: int, rows: int, dim: int, centres: np.ndarray) -> np.ndarray:
  rng = np.random.default_rng(1000 + start)
  x = centres[rng.integers(0, len(centres), rows)] + 0.5 * rng.standard_normal(
      (rows, dim), np.float32)
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def _chunks(size: int, dim: int, centres: np.ndarray, chunk: int):
  for start in range(0, size, chunk):
    yield start, _chunk(start, min(chunk, size - start), dim, centres)


def _queries(dim, centres, count, seed=7):
  """Queries near the photos' centres (a query is not itself a photo)."""
  rng = np.random.default_rng(seed)
  q = centres[rng.integers(0, len(centres), count)] + 0.6 * rng.standard_normal(
      (count, dim), np.float32)
  return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def _stream_exact(size, dim, centres, chunk, queries, n):
  best_s = np.full((len(queries), n), -np.inf, np.float32)
  best_i = np.zeros((len(queries), n), np.int64)
  for start, x in _chunks(size, dim, centres, chunk):
    s = queries @ x.T
    idx = np.arange(start, start + len(x))
    all_s = np.concatenate([best_s, s], 1)
    all_i = np.concatenate([best_i, np.broadcast_to(idx, s.shape)], 1)
    top = np.argsort(-all_s, axis=1, kind='stable')[:, :n]
    best_s = np.take_along_axis(all_s, top, 1)
    best_i = np.take_along_axis(all_i, top, 1)
  return best_i


def _build_streamed(spec, size, dim, centres, chunk):
  """An IVF engine filled chunk by chunk (its quantiser trained on the first `train_rows`
  rows), with the cells of the whole collection (`engines.FaissIndex.build` caps them by the
  sample)."""
  if not spec.nlist:
    spec = dataclasses.replace(spec, nlist=max(1, int(4 * np.sqrt(size))))
  train = min(size, spec.train_rows)
  cover = min(size, -(-train // chunk) * chunk)  # whole chunks: the collection's first rows
  sample = np.concatenate([x for _, x in _chunks(cover, dim, centres, chunk)])[:train]
  small = engines.FaissIndex.build(sample, spec)
  del sample
  index = small.index
  index.reset()
  for _, x in _chunks(size, dim, centres, chunk):
    index.add(x)
  return engines.FaissIndex(index, spec)


def _per_query(search, queries, n):
  seconds = []
  for q in queries:
    t0 = time.perf_counter()
    jax.block_until_ready(search(q[None], n))
    seconds.append(time.perf_counter() - t0)
  return timing.summarise(seconds)


def _references() -> dict:
  return {'bytes_per_s': timing.memory_bandwidth(1 << 28, repeats=5)['bytes_per_s'],
          'flops_per_s': timing.matmul_rate(1024, repeats=5)['flops_per_s']}


def _phi_time(dim: int, n: int) -> timing.Timing:
  """phi (this repo's `colt` shape: L=2, 2 heads, width 64, query-relative) on 1 + n tokens."""
  module = phi_lib.TokenClassifier(num_classes=34, num_layers=2, num_heads=2, model_dim=64,
                                  query_relative=True)
  tokens = jnp.asarray(np.random.default_rng(0).standard_normal((1, 1 + n, dim)), jnp.float32)
  mask = jnp.ones((1, 1 + n), bool)
  params = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  fn = jax.jit(lambda p, t, m: module.apply({'params': p}, t, m))
  return timing.time_calls(fn, params, tokens, mask, warmup=2, repeats=30)


def _read_report(path: str) -> dict:
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


def _check_flags() -> tuple:
  """(sizes, engines, nprobes): every flag parsed and bounded, and the memory each size
  needs."""
  sizes = flagcheck.parse_ints('--sizes', _SIZES.value, low=1)
  names = flagcheck.parse_names('--engines', _ENGINES.value, engines.ENGINES)
  nprobes = sorted(flagcheck.parse_ints('--nprobe', _NPROBE.value, low=1))
  if _DOC_ONLY.value:
    return sizes, names, nprobes
  ivf = [e for e in names if e in engine_tuning.IVF_ENGINES]
  if _TARGET_RECALL.value and not ivf:
    raise app.UsageError(f'--target_recall applies to IVF engines ('
                         f'{", ".join(engine_tuning.IVF_ENGINES)}); --engines names none')
  flagcheck.check_range('--n', _N.value, 1, min(sizes), why='the smallest of --sizes')
  queries = _QUERIES.value + (_TUNE_QUERIES.value if _TARGET_RECALL.value else 0)
  for size in sizes:
    flagcheck.check_memory(
        flagcheck.flags_text({'sizes': size, 'dim': _DIM.value, 'n': _N.value,
                              'queries': queries, 'chunk': _CHUNK.value,
                              'train_rows': _TRAIN_ROWS.value}),
        measured_bytes(size, _DIM.value, _CENTRES.value, queries, _N.value, _CHUNK.value,
                       _STREAM.value, _TRAIN_ROWS.value if ivf else 0),
        f'{size:,} photos' + (' streamed' if _STREAM.value else ' (add --stream to never '
                                                               'hold them whole)'))
  return sizes, names, nprobes


def _measure(engine, queries, exact_rows, n, phi_ms) -> dict:
  """One setting of a built engine: time per query at batch 1, and recall@n."""
  engine.search(queries[:1], n)  # warm-up (compilation for exact)
  t = _per_query(engine.search, queries, n)
  rows = np.asarray(engine.search(queries, n)[1])
  return {'timing': t.as_dict(), 'recall': engine_tuning.recall(rows, exact_rows),
          'search_over_phi': t.median_ms / phi_ms}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  sizes, names, nprobes = _check_flags()
  earlier = [_read_report(p) for p in _DOC_ALSO.value]
  if _DOC_ONLY.value:
    if not (_DOC.value and earlier):
      raise app.UsageError('--doc_only needs --doc and at least one --doc_also report')
    outputs.write_owned_text(_DOC.value, markdown(earlier), 'the report', flag='--doc')
    print(f'wrote {_DOC.value}')
    return
  dim, n, target = _DIM.value, _N.value, _TARGET_RECALL.value
  centres = np.random.default_rng(0).standard_normal((_CENTRES.value, dim)).astype(np.float32)
  report = {'machine': timing.machine_info(), 'dim': dim, 'n': n, 'queries': _QUERIES.value,
            'centres': _CENTRES.value, 'sizes': {}, 'stream': _STREAM.value,
            'nprobe': list(nprobes), 'target_recall': target,
            'tune_queries': _TUNE_QUERIES.value if target else 0,
            'command': ' '.join(['benchmarks/bench_engines.py'] + sys.argv[1:])}
  phi = _phi_time(dim, n)
  report['phi_ms'] = phi.median_ms
  print(f'phi on 1 + {n} tokens (d={dim}): {phi.median_ms:.2f} ms median')
  queries = _queries(dim, centres, _QUERIES.value)
  tune_queries = _queries(dim, centres, _TUNE_QUERIES.value, seed=8) if target else queries[:0]
  both = np.concatenate([queries, tune_queries])
  for size in sizes:
    t0 = time.perf_counter()
    if _STREAM.value:
      exact_both = _stream_exact(size, dim, centres, _CHUNK.value, both, n)
      photos = None
    else:
      photos = np.concatenate([x for _, x in _chunks(size, dim, centres, _CHUNK.value)])
      exact_both = np.asarray(saved_engines.build(engines.EngineSpec(), photos).search(both, n)[1])
    exact_rows, exact_tune = exact_both[:len(queries)], exact_both[len(queries):]
    out = report['sizes'][str(size)] = {'generate_s': time.perf_counter() - t0, 'engines': {}}
    print(f'\n{size:,} photos x {dim} dims ({size * dim * 4 / 2**30:.1f} GiB as float32)')
    print(f'{"engine":<12} {"nprobe":>6} {"build s":>8} {"ms/query":>9} {"p99 ms":>8} '
          f'{"recall@" + str(n):>10} {"vs 1 read":>9} {"search/phi":>10} {"GB/s ref":>9}')
    for name in names:
      if _STREAM.value and name in ('exact', 'faiss-hnsw', 'qdrant'):
        print(f'{name:<12} skipped: needs the whole collection in memory (--stream)')
        continue
      ivf = name in engine_tuning.IVF_ENGINES
      before = _references()
      spec = engines.EngineSpec(name, nprobe=nprobes[-1], nlist=_NLIST.value,
                                train_rows=_TRAIN_ROWS.value,
                                ef_construction=_EF_CONSTRUCTION.value, ef_search=n)
      t0 = time.perf_counter()
      if _STREAM.value:
        engine = _build_streamed(spec, size, dim, centres, _CHUNK.value)
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
        entry['settings'].append(dict(nprobe=nprobe, **_measure(engine, queries, exact_rows, n,
                                                               phi.median_ms)))
      after = _references()
      bandwidth = (before['bytes_per_s'] + after['bytes_per_s']) / 2
      entry.update(references_before=before, references_after=after,
                   exact_read_ms=size * dim * 4 / bandwidth * 1e3)
      out['engines'][name] = entry
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
      del engine
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, report, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')
  if _DOC.value:
    outputs.write_owned_text(_DOC.value, markdown(earlier + [report]), 'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')


def _settings(report: dict, name: str, entry: dict) -> list:
  """An engine's measured settings; a report written before --nprobe took a list holds one,
  at its IVF engines' nprobe then (32, the flag's default: its commands name no --nprobe)."""
  if 'settings' in entry:
    return entry['settings']
  nprobe = report.get('nprobe', 32) if name in engine_tuning.IVF_ENGINES else None
  return [{'nprobe': nprobe, 'timing': entry['timing'], 'recall': entry['recall'],
           'search_over_phi': entry['search_over_phi']}]


def _fastest(report: dict, entry: dict, target: float):
  """(engine, setting) of the least median time per query whose recall reaches `target`."""
  reached = [(name, row) for name, e in entry['engines'].items()
             for row in _settings(report, name, e) if row['recall'] >= target]
  return min(reached, key=lambda r: r[1]['timing']['median_ms'], default=None)


def _cells(name: str, entry: dict, size: int, dim: int):
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
        cells = _cells(name, e, int(size), report['dim'])
        for row in _settings(report, name, e):
          picked = ' (picked)' if tuning and tuning['nprobe'] == row['nprobe'] else ''
          t = row['timing']
          lines.append(f'| {name} | {cells} | {row["nprobe"] or "-"}{picked} | '
                       f'{e["build_s"]:.1f} | {t["median_ms"]:.2f} | {t["p99_ms"]:.2f} | '
                       f'{row["recall"]:.3f} | {t["median_ms"] / e["exact_read_ms"]:.2f}x | '
                       f'{row["search_over_phi"]:.2f}x | {bw / 1e9:.1f} | {flops / 1e9:.0f} |')
        if tuning:
          notes.append(
              f'{name}: nprobe {tuning["nprobe"]} picked by `engine_tuning.tune_nprobe` for '
              f'recall@{tuning["n"]} >= {tuning["target_recall"]} on {tuning["queries"]} other '
              f'queries (recall {tuning["recall"]:.3f} there'
              + ('' if tuning['reached'] else ', short of the target') + '; tried '
              + ', '.join(f'{p}: {r:.3f}' for p, r in tuning['tried']) + ').')
      lines.append('')
      target = report.get('target_recall')
      if target:
        best = _fastest(report, entry, target)
        notes.append(f'Fastest at recall@{report["n"]} >= {target}: ' + (
            f'{best[0]}' + (f' at nprobe {best[1]["nprobe"]}' if best[1]['nprobe'] else '')
            + f', {best[1]["timing"]["median_ms"]:.2f} '
            f'ms/query (median), recall {best[1]["recall"]:.3f}.' if best else 'none.'))
      if notes:
        lines += notes + ['']
  return '\n'.join(lines) + '\n'


if __name__ == '__main__':
  cli.run(main)
