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
With `--target_recall`, `colt_jax.engines.nprobe_tuning.tune_nprobe` also picks the fewest cells
whose recall@n reaches it on `--tune_queries` other queries (their exact top-n from the same scan),
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

from absl import app
from absl import flags

from colt_jax.benchmarking import engine_report
from colt_jax.benchmarking import engine_sizes
from colt_jax.engines import approximate as engines
from colt_jax.util import cli
from colt_jax.util import flagcheck
from colt_jax.util import outputs

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



def config_from_flags() -> engine_sizes.ScaleConfig:
  """The flags parsed and bounded (sizes, engines and nprobes: lists of them)."""
  return engine_sizes.ScaleConfig(
      sizes=tuple(flagcheck.parse_ints('--sizes', _SIZES.value, low=1)),
      engine_names=tuple(flagcheck.parse_names('--engines', _ENGINES.value, engines.ENGINES)),
      nprobes=tuple(sorted(flagcheck.parse_ints('--nprobe', _NPROBE.value, low=1))),
      dim=_DIM.value, centres=_CENTRES.value, queries=_QUERIES.value, n=_N.value,
      target_recall=_TARGET_RECALL.value, tune_queries=_TUNE_QUERIES.value, nlist=_NLIST.value,
      train_rows=_TRAIN_ROWS.value, ef_construction=_EF_CONSTRUCTION.value,
      stream=_STREAM.value, chunk=_CHUNK.value)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = config_from_flags()
  if not _DOC_ONLY.value:
    engine_sizes.check(config)
  earlier = [engine_report.read_report(p) for p in _DOC_ALSO.value]
  if _DOC_ONLY.value:
    if not (_DOC.value and earlier):
      raise app.UsageError('--doc_only needs --doc and at least one --doc_also report')
    outputs.write_owned_text(_DOC.value, engine_report.markdown(earlier), 'the report',
                             flag='--doc')
    print(f'wrote {_DOC.value}')
    return
  report = engine_sizes.run(
      config, ' '.join(['benchmarks/bench_engines.py'] + sys.argv[1:]))
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, report, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')
  if _DOC.value:
    outputs.write_owned_text(_DOC.value, engine_report.markdown(earlier + [report]),
                             'the report', flag='--doc')
    print(f'wrote {_DOC.value}')


if __name__ == '__main__':
  cli.run(main)
