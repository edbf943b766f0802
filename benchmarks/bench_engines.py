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
read bandwidth and matmul FLOP/s (colt_jax/benchmarking/timing.py) before and after each engine; the
exact engine's time is also given as a ratio to one read of the collection at the measured
bandwidth, and phi's time on one [1 + N]-token sequence (a random phi of this repo's `colt`
width at --dim) as the ratio that says whether search or phi dominates CoLT's path.
"""
from __future__ import annotations

import sys
import time

from absl import app
from absl import flags
import numpy as np

from colt_jax.util import cli
from colt_jax.engines import approximate as engines
from colt_jax.engines import tuning as engine_tuning
from colt_jax.engines import saved_engines
from colt_jax.util import flagcheck
from colt_jax.util import outputs
from colt_jax.benchmarking import timing
from colt_jax.benchmarking import engine_sizes

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
        flagcheck.flags_text({
            'sizes': size,
            'dim': _DIM.value,
            'n': _N.value,
            'queries': queries,
            'chunk': _CHUNK.value,
            'train_rows': _TRAIN_ROWS.value
        }),
        engine_sizes.measured_bytes(size, _DIM.value, _CENTRES.value, queries, _N.value,
                                    _CHUNK.value, _STREAM.value, _TRAIN_ROWS.value if ivf else 0),
        f'{size:,} photos' + (' streamed' if _STREAM.value else ' (add --stream to never '
                              'hold them whole)'))
  return sizes, names, nprobes


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  sizes, names, nprobes = _check_flags()
  earlier = [engine_sizes.read_report(p) for p in _DOC_ALSO.value]
  if _DOC_ONLY.value:
    if not (_DOC.value and earlier):
      raise app.UsageError('--doc_only needs --doc and at least one --doc_also report')
    outputs.write_owned_text(_DOC.value, engine_sizes.markdown(earlier), 'the report', flag='--doc')
    print(f'wrote {_DOC.value}')
    return
  dim, n, target = _DIM.value, _N.value, _TARGET_RECALL.value
  centres = np.random.default_rng(0).standard_normal((_CENTRES.value, dim)).astype(np.float32)
  report = {'machine': timing.machine_info(), 'dim': dim, 'n': n, 'queries': _QUERIES.value,
            'centres': _CENTRES.value, 'sizes': {}, 'stream': _STREAM.value,
            'nprobe': list(nprobes), 'target_recall': target,
            'tune_queries': _TUNE_QUERIES.value if target else 0,
            'command': ' '.join(['benchmarks/bench_engines.py'] + sys.argv[1:])}
  phi = engine_sizes.phi_time(dim, n)
  report['phi_ms'] = phi.median_ms
  print(f'phi on 1 + {n} tokens (d={dim}): {phi.median_ms:.2f} ms median')
  queries = engine_sizes.queries_near(dim, centres, _QUERIES.value)
  tune_queries = engine_sizes.queries_near(dim, centres, _TUNE_QUERIES.value,
                                           seed=8) if target else queries[:0]
  both = np.concatenate([queries, tune_queries])
  for size in sizes:
    t0 = time.perf_counter()
    if _STREAM.value:
      exact_both = engine_sizes.stream_exact(size, dim, centres, _CHUNK.value, both, n)
      photos = None
    else:
      photos = np.concatenate([x for _, x in engine_sizes.chunks(size, dim, centres, _CHUNK.value)])
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
      before = engine_sizes.references()
      spec = engines.EngineSpec(name, nprobe=nprobes[-1], nlist=_NLIST.value,
                                train_rows=_TRAIN_ROWS.value,
                                ef_construction=_EF_CONSTRUCTION.value, ef_search=n)
      t0 = time.perf_counter()
      if _STREAM.value:
        engine = engine_sizes.build_streamed(spec, size, dim, centres, _CHUNK.value)
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
        entry['settings'].append(
            dict(nprobe=nprobe,
                 **engine_sizes.measure(engine, queries, exact_rows, n, phi.median_ms)))
      after = engine_sizes.references()
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
    outputs.write_owned_text(_DOC.value, engine_sizes.markdown(earlier + [report]), 'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')


if __name__ == '__main__':
  cli.run(main)
