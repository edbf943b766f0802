"""The settings of a `benchmarks/bench_retrieval.py` run: sizes, repetitions and sections.

`Settings()` is the full run (the one whose results are committed), `quick()` a smoke run;
`check` refuses unusable settings, `memory_needs` says what the largest measurements hold,
`run_kind` tells a full run from a quick or partial one, and `output_path` says where a run of
each kind writes: only a full run replaces the committed results and report, any other run
writes under work/bench/ (and refuses the committed paths even when named).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

from colt_jax.evaluation import methods as evaluation

SECTIONS = ('reference', 'components', 'paths', 'ttc', 'scaling', 'training')
METHODS = ('topk', 'mmr', 'umons', 'colt')

# What a run is: only a 'full' run is a measurement to commit (`run_kind`).
FULL, QUICK, PARTIAL = 'full', 'quick', 'partial'

# The committed results and report (relative to the working folder: the checkout's root, where
# and where every other run writes them by default.
COMMITTED_RESULTS = os.path.join('docs', 'results', 'performance.json')
COMMITTED_REPORT = os.path.join('docs', 'PERFORMANCE.md')
SCRATCH_RESULTS = os.path.join('work', 'bench', 'performance.json')
# The same benchmark's full run on a machine with a GPU, and its report.
COMMITTED_GPU_RESULTS = os.path.join('docs', 'results', 'performance-gpu.json')
COMMITTED_GPU_REPORT = os.path.join('docs', 'PERFORMANCE-GPU.md')
FULL_COMMAND = 'python benchmarks/bench_retrieval.py'
# The training section's flagfiles (bench_retrieval.py --config_dir), relative to the working
# folder like every default path here.
CONFIG_DIR = os.path.join('experiments', 'configs', 'tuned')


@dataclasses.dataclass(frozen=True)
class Settings:
  """Sizes and repetitions of a benchmark run (`quick()` for a smoke run)."""
  dim: int = 512  # feature dimension (CLIP ViT-B/32)
  num_images: int = 200  # N, candidates per query
  k: int = 20  # list length
  collection: int = 40_000  # photos searched by the whole paths (Div400 test split: ~38k)
  num_categories: int = 160  # semantic categories V (the synthetic default's vocabulary)
  num_layers: int = 8  # phi's L for the components and paths
  num_heads: int = 8
  layers: tuple = (6, 8, 10)  # phi depths of the paper's Table 8
  batch: int = 64  # batch of the batched measurements
  ttc_batch: int = 16  # batch of batched phi and the batched colt path
  search_sizes: tuple = (10_000, 100_000, 1_000_000)
  ttc_sizes: tuple = (100, 200, 400)
  num_clusters: int = 1000  # cluster centres of the synthetic features
  repeats: int = 30  # timed calls at batch 1 (at most)
  batched_repeats: int = 5  # timed calls of batched measurements (at most)
  max_seconds: float = 6.0  # stop a measurement's timed calls after this long (>= 3 calls)
  warmup: int = 2
  matmul_size: int = 2048
  bandwidth_bytes: int = 1 << 30
  diversity: float = evaluation.MethodParams.diversity
  umons_threshold: float = evaluation.MethodParams.umons_threshold
  umons_eps: float = evaluation.MethodParams.umons_eps
  umons_min_samples: int = evaluation.MethodParams.umons_min_samples
  encoder: str = 'minilm'  # the query encoder f: minilm (real weights)
  train_warmup: int = 10  # training steps before timing (compilation included)
  train_steps: int = 40  # timed training steps (rounded up to a multiple of train_warmup)
  synthetic_dir: str = ''  # '' = the synthetic default (work/synthetic-seed0)
  synthetic_quick: bool = False  # a tiny synthetic dataset instead of the default
  scl_flags: str = os.path.join(CONFIG_DIR, 'synthetic_scl.flags')
  ttc_flags: str = os.path.join(CONFIG_DIR, 'synthetic_ttc.flags')
  train_overrides: tuple = ()  # (name, value) pairs applied to both training configs
  seed: int = 0
  quick: bool = False  # `quick()`'s tiny sizes: a smoke run, not a measurement


def quick() -> Settings:
  """Tiny sizes: every section runs in seconds (a smoke test, not a measurement)."""
  return Settings(dim=384, num_images=40, k=10, collection=3000, num_categories=20,
                  num_layers=1, num_heads=2, layers=(1,), batch=8, ttc_batch=4,
                  search_sizes=(1000, 4000), ttc_sizes=(20, 40), num_clusters=50, repeats=3,
                  batched_repeats=2, max_seconds=1.0, warmup=1, matmul_size=256,
                  bandwidth_bytes=1 << 22, train_warmup=1, train_steps=1,
                  synthetic_quick=True, quick=True,
                  train_overrides=(('batch_size', 4), ('images_per_query', 8),
                                   ('num_images', 40), ('num_layers', 1)))


def check(settings: Settings, sections: Sequence[str]) -> None:
  """Clear errors for unusable settings or unknown sections."""
  unknown = sorted(set(sections) - set(SECTIONS))
  if unknown:
    raise ValueError(f'unknown sections {unknown}; expected some of {list(SECTIONS)}')
  positive = ('dim', 'num_images', 'k', 'collection', 'num_categories', 'num_layers',
              'num_heads', 'batch', 'ttc_batch', 'num_clusters', 'repeats', 'batched_repeats',
              'matmul_size', 'bandwidth_bytes', 'train_warmup', 'train_steps')
  for name in positive:
    if getattr(settings, name) < 1:
      raise ValueError(f'{name} must be >= 1, got {getattr(settings, name)}')
  for name in ('layers', 'search_sizes', 'ttc_sizes'):
    values = getattr(settings, name)
    if not values or any(int(v) < 1 for v in values):
      raise ValueError(f'{name} must be a non-empty list of positive sizes, got {values}')
  if settings.dim % settings.num_heads:
    raise ValueError(f'dim {settings.dim} is not divisible by num_heads {settings.num_heads}')
  if settings.k > settings.num_images:
    raise ValueError(f'k {settings.k} exceeds num_images {settings.num_images}')
  if settings.num_images > min(settings.collection, *settings.search_sizes):
    raise ValueError('num_images exceeds the smallest collection')
  if settings.encoder != 'minilm':
    raise ValueError(f'unknown encoder {settings.encoder!r}; expected minilm')


def memory_needs(settings: Settings) -> list:
  """[(settings fields, bytes, what)]: at least what the largest measurements hold, for a
  check against the machine's memory before anything runs. Search scaling: the largest
  collection, its index copy and the batch's scores; phi scaling: the largest N's batched
  tokens and one layer's attention weights; the whole paths: the collection."""
  f32 = 4
  largest = max(int(m) for m in settings.search_sizes)
  n = max(int(m) for m in settings.ttc_sizes)
  return [
      (('search_sizes', 'batch'), largest * settings.dim * f32 * 2 + settings.batch * largest
       * f32, f'search scaling over {largest:,} photos'),
      (('ttc_sizes', 'ttc_batch'), settings.ttc_batch * (1 + n) * settings.dim * f32 * 2
       + settings.ttc_batch * settings.num_heads * (1 + n)**2 * f32,
       f'phi scaling at N={n:,}'),
      (('batch',), settings.collection * settings.dim * f32 + settings.batch
       * settings.collection * f32, f'the whole paths over {settings.collection:,} photos'),
  ]


def run_kind(settings: Settings, sections: Sequence[str]) -> str:
  """FULL for the documented run (every section at the default sizes; the synthetic dataset
  may live elsewhere), QUICK for `quick()`'s sizes, else PARTIAL (some sections or sizes
  changed): only a full run's results and report replace the committed ones."""
  if settings.quick:
    return QUICK
  default = dataclasses.replace(Settings(), synthetic_dir=settings.synthetic_dir)
  if settings == default and set(sections) == set(SECTIONS):
    return FULL
  return PARTIAL


def is_committed(path: str, committed: str) -> bool:
  """Whether `path` is the committed file `committed` (relative to the working folder, the
  checkout's root where the benchmarks run)."""
  return os.path.realpath(path) == os.path.realpath(committed)


def output_path(path: Optional[str], kind: str, committed: str, scratch: str,
                flag: str) -> str:
  """Where a run of `kind` writes: `path` when given, else `committed` for a full run and
  `scratch` for any other. Raises ValueError when a run that is not full would write the
  committed file: it is replaced only by the full run (`FULL_COMMAND`, then
  `python benchmarks/make_report.py`)."""
  if not path:
    return committed if kind == FULL else scratch
  if kind != FULL and is_committed(path, committed):
    raise ValueError(
        f'{flag} {path}: that is the committed file, written only from a full run '
        f'(`{FULL_COMMAND}` with no size or section flags); this is a {kind} run: leave '
        f'{flag} out (it then writes {scratch}) or name another file')
  return path
