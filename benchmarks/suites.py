"""What `benchmarks/bench_retrieval.py` measures (issue 5): per-query cost of every stage and
method, as in the paper's Tables 7-8, how it scales, and training throughput.

`run(settings, sections)` returns one JSON-able dict; `benchmarks/perf_report.py` renders it. The
sections:

* reference: the FLOP/s of a large float32 matmul and the streaming read bandwidth of this
  machine, measured in the same run as what is compared with them.
* components: per query at batch 1 (median, p99) and batched (per query, queries/s): the query
  encoder f (the real MiniLM-L6 text encoder; CLIP's text tower, the paper's f, cannot be
  downloaded here), exact candidate search over the collection, g over the N candidates, the
  TTC phi (paper size: d = 512 as CLIP ViT-B/32, L = 8, 8 heads, N = 200), the
  post-processing t, MMR and UMONS over the N candidates.
* paths: the whole path from query text to a list of k photos for topk, mmr, umons and colt.
  f's 384-d output is zero-padded to the 512-d feature space (cosine similarities unchanged).
  CoLT searches the re-encoded collection h^ (the Retriever computes h^ once, offline), so g
  is not in its per-query path; the components table gives g's per-query cost when applied to
  the N candidates online, as the paper counts it.
* ttc: phi at L = 6/8/10; its FLOPs per query (XLA cost analysis), achieved FLOP/s and their
  ratio to the matmul's; one encoder layer against its attention core (where the time goes).
* scaling: candidate search over collections of increasing size (time and memory; the
  bandwidth bound of batch 1), half-precision storage checked for speed and exactness; phi at
  N = 100/200/400.
* training: steps/s and examples/s of train_scl and train_ttc on the synthetic default.

Features are synthetic: unit vectors around random cluster centres (so UMONS and MMR see
clustered candidates). Every timed call is preceded by warm-up calls and waited for with
`jax.block_until_ready`; compilations during the timed calls are counted.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax import baselines
from colt_jax import configs
from colt_jax import evaluation
from colt_jax import postprocess
from colt_jax import retriever
from colt_jax import search
from colt_jax.inputs.labels import LabelSpace
from colt_jax.train import restore
import timing

SCHEMA = 'benchmarks/suites.pyormance/1'
SECTIONS = ('reference', 'components', 'paths', 'ttc', 'scaling', 'training')
METHODS = ('topk', 'mmr', 'umons', 'colt')

# The paper's per-query times on an RTX 3090 (Zhao et al., SIGIR 2023, Tables 7-8), in ms.
PAPER_RTX3090_MS = {'f': 18.06, 'g': 0.37, 'phi': 11.80, 'topk': 18.06, 'mmr': 24.10,
                    'umons': 22.65, 'vmig': 86.77, 'colt': 30.23}
PAPER_PHI_LAYERS_MS = {6: 8.93, 8: 11.80, 10: 18.56}

# Keyword queries like Div400's (location names): the texts f encodes.
QUERY_TEXTS = ('Big Ben', 'Eiffel Tower', 'Colosseum', 'Sagrada Familia', 'Tower Bridge',
               'Brandenburg Gate', 'Notre Dame de Paris', 'Acropolis of Athens',
               'Golden Gate Bridge', 'Taj Mahal', 'Angkor Wat', 'Neuschwanstein Castle',
               'Hagia Sophia', 'Charles Bridge', 'Mont Saint Michel', 'St Peters Basilica')


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
  scl_flags: str = 'experiments/configs/synthetic_scl.flags'
  ttc_flags: str = 'experiments/configs/synthetic_ttc.flags'
  train_overrides: tuple = ()  # (name, value) pairs applied to both training configs
  seed: int = 0


def quick() -> Settings:
  """Tiny sizes: every section runs in seconds (a smoke test, not a measurement)."""
  return Settings(dim=384, num_images=40, k=10, collection=3000, num_categories=20,
                  num_layers=1, num_heads=2, layers=(1,), batch=8, ttc_batch=4,
                  search_sizes=(1000, 4000), ttc_sizes=(20, 40), num_clusters=50, repeats=3,
                  batched_repeats=2, max_seconds=1.0, warmup=1, matmul_size=256,
                  bandwidth_bytes=1 << 22, train_warmup=1, train_steps=1,
                  synthetic_quick=True,
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


# ----------------------------------------------------------------------------- data


def clustered_units(rng: np.random.Generator, n: int, dim: int, centres: np.ndarray,
                    spread: float = 0.6, block: int = 65536) -> np.ndarray:
  """[n, dim] float32 unit vectors: a random centre plus isotropic noise of norm ~`spread`."""
  out = np.empty((n, dim), np.float32)
  for s in range(0, n, block):
    m = min(block, n - s)
    x = rng.standard_normal((m, dim), dtype=np.float32) * np.float32(spread / np.sqrt(dim))
    x += centres[rng.integers(0, len(centres), m)]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out[s:s + m] = x
  return out


def unit_rows(x: np.ndarray) -> np.ndarray:
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


class World:
  """The synthetic feature space: cluster centres, queries near them, collections."""

  def __init__(self, settings: Settings):
    self.settings = settings
    self.rng = np.random.default_rng(settings.seed)
    self.centres = unit_rows(self.rng.standard_normal((settings.num_clusters, settings.dim),
                                                      dtype=np.float32))

  def queries(self, n: int) -> np.ndarray:
    """Queries between a few cluster centres (each sees several clusters among its top N)."""
    mix = self.centres[self.rng.integers(0, len(self.centres), (n, 3))].sum(1)
    return unit_rows(mix + 0.3 * self.rng.standard_normal(mix.shape, dtype=np.float32)
                     / np.sqrt(self.settings.dim))

  def collection(self, n: int) -> np.ndarray:
    return clustered_units(self.rng, n, self.settings.dim, self.centres)


# ------------------------------------------------------------------------- modules


def ttc_config(settings: Settings, num_layers: Optional[int] = None,
               num_images: Optional[int] = None) -> configs.TTCConfig:
  return configs.TTCConfig(num_layers=num_layers or settings.num_layers,
                           num_heads=settings.num_heads,
                           num_images=num_images or settings.num_images)


def make_phi(settings: Settings, num_layers: Optional[int] = None,
             num_images: Optional[int] = None):
  """(jitted labels function (params, tokens, mask) -> [B, T] argmax of phi, params, module);
  built once per (settings, L, N), so equal shapes are compiled once."""
  return _make_phi(settings, num_layers or settings.num_layers,
                   num_images or settings.num_images)


@functools.lru_cache(maxsize=8)
def _make_phi(settings: Settings, num_layers: int, num_images: int):
  cfg = ttc_config(settings, num_layers, num_images)
  space = LabelSpace(settings.num_categories)
  module = restore.classifier_module(cfg, space)
  n = cfg.num_images + 1
  params = module.init(jax.random.PRNGKey(settings.seed), jnp.zeros((1, n, settings.dim)),
                       jnp.ones((1, n), bool))['params']

  @jax.jit
  def labels(p, tokens, mask):
    return jnp.argmax(module.apply({'params': p}, tokens, mask, deterministic=True), -1)

  return labels, params, module


def make_g(settings: Settings):
  """(jitted g: (params, features [..., d]) -> h^, params): the paper-size re-encoder."""
  module = restore.reencoder_module(configs.SCLConfig())
  params = module.init(jax.random.PRNGKey(settings.seed + 1),
                       jnp.zeros((1, settings.dim)))['params']
  return jax.jit(lambda p, x: module.apply({'params': p}, x)), params


def make_encoder(settings: Settings):
  """f: texts -> [B, dim] float32 unit vectors (MiniLM, zero-padded to `dim`)."""
  from colt_jax.encoders import minilm  # pylint: disable=g-import-not-at-top
  encoder = minilm.MiniLMEncoder()
  if encoder.dim > settings.dim:
    raise ValueError(f'the encoder gives {encoder.dim}-d features; dim must be >= that, '
                     f'got {settings.dim}')

  def encode(texts: Sequence[str]) -> np.ndarray:
    out = np.zeros((len(texts), settings.dim), np.float32)
    out[:, :encoder.dim] = encoder.encode(texts)
    return out

  return encode, encoder


def texts(n: int) -> list:
  return [QUERY_TEXTS[i % len(QUERY_TEXTS)] for i in range(n)]


# ---------------------------------------------------------------------- measuring


class Recorder:
  """Runs the timings, keeps their compile counts, and logs progress."""

  def __init__(self, settings: Settings, log: Callable[[str], None] = print):
    self.settings = settings
    self.log = log
    self.compiles = {}  # measurement name -> compilations during timed calls

  def time(self, name: str, fn: Callable, *args, items: int = 1,
           batched: bool = False) -> dict:
    s = self.settings
    measured = timing.time_calls(fn, *args, warmup=s.warmup,
                                    repeats=s.batched_repeats if batched else s.repeats,
                                    max_seconds=s.max_seconds)
    self.compiles[name] = measured.compiles_timed
    out = {'batch': items, **measured.as_dict(), 'per_query': measured.per_item(items)}
    per = out['per_query']
    self.log(f'  {name:<34} {per["median_ms"]:9.3f} ms/query (p99 {per["p99_ms"]:.3f}, '
             f'{per["per_s"]:.1f} q/s, batch {items}, {measured.repeats} calls)')
    return out

  def pair(self, name: str, one: Callable, many: Callable, batch: int) -> dict:
    """Batch 1 and batched timings of a stage."""
    return {'batch1': self.time(f'{name} b1', one),
            'batched': self.time(f'{name} b{batch}', many, items=batch, batched=True)}


# -------------------------------------------------------------------------- sections


def reference(rec: Recorder) -> dict:
  s = rec.settings
  rec.log(f'reference: {s.matmul_size}^3 matmul, {s.bandwidth_bytes / 2**20:.0f} MiB read')
  matmul = timing.matmul_rate(s.matmul_size, repeats=max(3, s.batched_repeats * 2))
  bandwidth = timing.memory_bandwidth(s.bandwidth_bytes, repeats=max(3, s.batched_repeats))
  rec.log(f'  matmul {matmul["flops_per_s"] / 1e9:.1f} GFLOP/s (best '
          f'{matmul["best_flops_per_s"] / 1e9:.1f}); read {bandwidth["bytes_per_s"] / 1e9:.1f} '
          f'GB/s (best {bandwidth["best_bytes_per_s"] / 1e9:.1f})')
  return {'matmul': matmul, 'bandwidth': bandwidth}


class Stages:
  """Everything the components and paths need, built once."""

  def __init__(self, settings: Settings, world: World, log: Callable[[str], None]):
    s = settings
    log(f'setup: collection of {s.collection} x {s.dim}, phi L={s.num_layers}, '
        f'N={s.num_images}, f={s.encoder}')
    self.settings = s
    self.queries = world.queries(max(s.batch, s.ttc_batch))
    self.encode, self.encoder = make_encoder(s)
    self.phi, self.phi_params, self.phi_module = make_phi(s)
    # CoLT after f is the Retriever users call (g is applied to the collection offline, when
    # it is indexed: the index holds h^; here the synthetic collection stands for h^).
    classifier = restore.ClassifierBundle(self.phi_module, self.phi_params,
                                          LabelSpace(s.num_categories), ttc_config(s))
    collection = world.collection(s.collection)
    self.colt = retriever.Retriever(classifier, None, retriever.InferenceSettings(k=s.k))
    self.colt.index_features(collection, [str(i) for i in range(collection.shape[0])])
    self.index = self.colt.collection_index
    self.g, self.g_params = make_g(s)
    n = s.num_images
    _, idx = self.index.search(self.queries, n)
    self.candidates = np.asarray(self.index.rows(idx))  # [B, N, d]
    self.cand_scores = np.einsum('bnd,bd->bn', self.candidates, self.queries)
    tokens = np.concatenate([self.queries[:, None], self.candidates], 1)
    self.tokens = jnp.asarray(tokens)
    self.mask = jnp.ones(tokens.shape[:2], bool)
    # phi's labels of ttc_batch sequences, repeated up to the batch (inputs of t's timing).
    labels = np.asarray(self.phi(self.phi_params, self.tokens[:s.ttc_batch],
                                 self.mask[:s.ttc_batch]))
    self.labels = np.resize(labels, (len(self.queries), labels.shape[1]))

  def post(self, labels, scores, valid):
    s = self.settings
    return postprocess.select_per_category_batch(labels, scores, valid, k=s.k, per_category=1,
                                                 num_categories=s.num_categories)

  def mmr_one(self, q, cand):
    s = self.settings
    return baselines.mmr(q, cand, s.k, s.diversity, num_candidates=s.num_images)

  def mmr_many(self, q, cand):
    s = self.settings
    return baselines.mmr_batch(q, cand, k=s.k, diversity=s.diversity,
                               num_candidates=s.num_images)

  def umons_one(self, q, cand):
    s = self.settings
    return baselines.umons(q, cand, s.k, s.umons_threshold, s.umons_eps, s.umons_min_samples,
                           num_candidates=s.num_images)

  def colt_core(self, queries):
    """CoLT after f: `Retriever.search_rows` (search h^, tokens [h_q, top N], phi labels, t
    (Eq. 6 and its continuation)) -> rows [B, 50]."""
    return self.colt.search_rows(queries)[0]


def components(rec: Recorder, st: Stages) -> dict:
  s = rec.settings
  b, tb = s.batch, s.ttc_batch
  q1, qb = st.queries[:1], st.queries[:b]
  c1, cb = st.candidates[0], st.candidates[:b]
  t_one, t_many = texts(1), texts(b)
  rec.log('components (per query)')
  out = {}
  out['f'] = rec.pair('f (MiniLM, text -> feature)', lambda: st.encode(t_one),
                      lambda: st.encode(t_many), b)
  out['search'] = rec.pair(f'search top-{s.num_images} of {s.collection}',
                           lambda: st.index.search(q1, s.num_images),
                           lambda: st.index.search(qb, s.num_images), b)
  g1, gb = jnp.asarray(st.candidates[:1]), jnp.asarray(st.candidates[:b])
  out['g'] = rec.pair(f'g over {s.num_images} candidates', lambda: st.g(st.g_params, g1),
                      lambda: st.g(st.g_params, gb), b)
  tok1, m1 = st.tokens[:1], st.mask[:1]
  tokb, mb = st.tokens[:tb], st.mask[:tb]
  out['phi'] = rec.pair(f'phi L={s.num_layers} N={s.num_images}',
                        lambda: st.phi(st.phi_params, tok1, m1),
                        lambda: st.phi(st.phi_params, tokb, mb), tb)
  lab = jnp.asarray(st.labels[:, 1:])
  sc, valid = jnp.asarray(st.cand_scores), jnp.ones(st.cand_scores.shape, bool)
  out['post'] = rec.pair('post-processing t', lambda: st.post(lab[:1], sc[:1], valid[:1]),
                         lambda: st.post(lab[:b], sc[:b], valid[:b]), b)
  out['mmr'] = rec.pair(f'MMR over {s.num_images}', lambda: st.mmr_one(q1[0], c1),
                        lambda: st.mmr_many(qb, cb), b)
  out['umons'] = rec.pair(f'UMONS over {s.num_images}', lambda: st.umons_one(q1[0], c1),
                          lambda: [st.umons_one(q, c) for q, c in zip(qb, cb)], b)
  return out


def paths(rec: Recorder, st: Stages) -> dict:
  """Text -> k photo indices, per method, at batch 1 and batched."""
  s = rec.settings
  n, k = s.num_images, s.k

  def topk(t):
    _, idx = st.index.search(st.encode(t), k)
    return np.asarray(idx)

  def candidates(t):
    q = st.encode(t)
    _, idx = st.index.search(q, n)
    return q, np.asarray(idx), np.asarray(st.index.rows(idx))

  def mmr(t):
    q, idx, cand = candidates(t)
    if len(t) == 1:
      return idx[0, st.mmr_one(q[0], cand[0]).indices]
    picks = st.mmr_many(q, cand).indices
    return np.take_along_axis(idx, np.maximum(picks, 0), 1)

  def umons(t):
    q, idx, cand = candidates(t)
    return [idx[i, st.umons_one(q[i], cand[i]).indices] for i in range(len(t))]

  def colt(t):
    return np.asarray(st.colt_core(st.encode(t)))

  fns = {'topk': topk, 'mmr': mmr, 'umons': umons, 'colt': colt}
  rec.log(f'whole paths: text -> {k} photos of {s.collection}')
  out = {}
  for name, fn in fns.items():
    batch = s.ttc_batch if name == 'colt' else s.batch
    one, many = texts(1), texts(batch)
    out[name] = rec.pair(f'path {name}', lambda fn=fn: fn(one), lambda fn=fn: fn(many), batch)
  return out


def ttc(rec: Recorder, st: Stages, matmul_flops_per_s: Optional[float]) -> dict:
  s = rec.settings
  rec.log(f'phi at L={list(s.layers)} (N={s.num_images}, d={s.dim})')
  out = {'layers': {}}
  tb = s.ttc_batch
  for layers in s.layers:
    phi, params, _ = make_phi(s, num_layers=layers)
    tok1, m1, tokb, mb = st.tokens[:1], st.mask[:1], st.tokens[:tb], st.mask[:tb]
    entry = rec.pair(f'phi L={layers}', lambda: phi(params, tok1, m1),
                     lambda: phi(params, tokb, mb), tb)
    cost1 = timing.compiled_cost(phi, params, tok1, m1)
    costb = timing.compiled_cost(phi, params, tokb, mb)
    entry['flops_per_query'] = costb['flops'] / tb if costb['flops'] else None
    entry['flops_per_query_batch1'] = cost1['flops']
    entry['memory_batch1'] = cost1
    entry['memory_batched'] = costb
    entry['params'] = timing.tree_bytes(params) // 4
    for key in ('batch1', 'batched'):
      fl = entry['flops_per_query']
      ms = entry[key]['per_query']['median_ms']
      entry[key]['flops_per_s'] = fl / (ms / 1e3) if fl else None
      if matmul_flops_per_s and fl:
        entry[key]['matmul_ratio'] = entry[key]['flops_per_s'] / matmul_flops_per_s
    out['layers'][str(layers)] = entry
  out['matmul_flops_per_s'] = matmul_flops_per_s
  out['breakdown'] = layer_breakdown(rec, st)
  return out


def layer_breakdown(rec: Recorder, st: Stages) -> dict:
  """One encoder layer of phi against its attention core (scores, softmax, weighted sum), the
  core as the layer runs it (`models.padded_attention` with a key-padding mask)."""
  from colt_jax import models  # pylint: disable=g-import-not-at-top
  s = rec.settings
  tb = s.ttc_batch
  x = jnp.asarray(st.tokens[:tb])
  mask = st.mask[:tb]
  layer = models.EncoderLayer(num_heads=s.num_heads)
  params = layer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)['params']
  layer_fn = jax.jit(lambda p, x, m: layer.apply({'params': p}, x, m, deterministic=True))
  head = s.dim // s.num_heads
  q = jnp.asarray(np.random.default_rng(0).standard_normal(
      (tb, x.shape[1], s.num_heads, head), dtype=np.float32))
  attn_mask = jnp.asarray(mask, bool)[:, None, None, :]
  core_fn = jax.jit(lambda q, k, v, m: models.padded_attention(q, k, v, mask=m,
                                                               deterministic=True))
  rec.log('phi layer breakdown')
  layer_t = rec.time(f'one layer b{tb}', layer_fn, params, x, mask, items=tb, batched=True)
  core_t = rec.time(f'attention core b{tb}', core_fn, q, q, q, attn_mask, items=tb,
                    batched=True)
  layer_flops = timing.compiled_cost(layer_fn, params, x, mask)['flops']
  core_flops = timing.compiled_cost(core_fn, q, q, q, attn_mask)['flops']
  lt, ct = layer_t['per_query']['median_ms'], core_t['per_query']['median_ms']
  rest_ms = max(lt - ct, 1e-9)
  return {'layer': layer_t, 'attention_core': core_t,
          'layer_flops_per_query': layer_flops / tb, 'core_flops_per_query': core_flops / tb,
          'core_time_share': ct / lt, 'core_flop_share': core_flops / layer_flops,
          'core_flops_per_s': core_flops / tb / (ct / 1e3),
          'rest_flops_per_s': (layer_flops - core_flops) / tb / (rest_ms / 1e3)}


def search_scaling(rec: Recorder, world: World, bandwidth: Optional[float]) -> dict:
  s = rec.settings
  sizes = sorted(int(m) for m in s.search_sizes)
  rec.log(f'search scaling over {sizes} photos (d={s.dim}, top {s.num_images})')
  full = world.collection(sizes[-1])
  q = world.queries(s.batch)
  rows = []
  index = None
  for m in sizes:
    del index
    index = search.ExactIndex(full[:m])
    one = lambda index=index: index.search(q[:1], s.num_images)
    many = lambda index=index: index.search(q, s.num_images)
    entry = {'photos': m, 'collection_bytes': index.nbytes, 'chunk_rows': index.chunk_rows,
             **rec.pair(f'search {m}', one, many, s.batch)}
    entry['memory_batch1'] = timing.compiled_cost(
        search.search_chunks, jnp.asarray(q[:1]), index.chunks, n=s.num_images,
        num_rows=index.num_rows)
    entry['memory_batched'] = timing.compiled_cost(
        search.search_chunks, jnp.asarray(q), index.chunks, n=s.num_images,
        num_rows=index.num_rows)
    if bandwidth:
      entry['bandwidth_bound_ms'] = index.nbytes / bandwidth * 1e3
    rows.append(entry)
  del full
  out = {'rows': rows, 'dim': s.dim, 'n': s.num_images, 'batch': s.batch}
  out['growth_batch1'] = timing.growth_exponent(
      sizes, [r['batch1']['per_query']['median_ms'] for r in rows])
  out['growth_batched'] = timing.growth_exponent(
      sizes, [r['batched']['per_query']['median_ms'] for r in rows])
  out['half_precision'] = half_precision(rec, index, q)
  return out


def half_precision(rec: Recorder, index: search.ExactIndex, queries: np.ndarray) -> dict:
  """The collection stored as bfloat16 / float16 (scored in float32): batch-1 search time
  against float32 storage, and whether the top-N sets equal float32's."""
  s = rec.settings
  n = s.num_images
  _, ref = index.search(queries, n)
  ref = np.asarray(ref)
  q1 = jnp.asarray(queries[:1])
  out = {'photos': index.num_rows}
  fn = functools.partial(search.search_chunks, n=n, num_rows=index.num_rows)
  out['float32'] = rec.time(f'search float32 {index.num_rows}', fn, q1, index.chunks)
  for name, dtype in (('bfloat16', jnp.bfloat16), ('float16', jnp.float16)):
    half = index.chunks.astype(dtype)
    entry = rec.time(f'search {name} {index.num_rows}', fn, q1, half)
    idx = np.asarray(fn(jnp.asarray(queries), half)[1])
    entry['same_top_n_sets'] = float(np.mean([set(a) == set(b) for a, b in zip(idx, ref)]))
    entry['top_n_overlap'] = float(np.mean([len(set(a) & set(b)) / n
                                            for a, b in zip(idx, ref)]))
    entry['speedup'] = out['float32']['median_ms'] / entry['median_ms']
    out[name] = entry
    del half
  return out


def ttc_scaling(rec: Recorder, world: World) -> dict:
  s = rec.settings
  sizes = sorted(int(n) for n in s.ttc_sizes)
  rec.log(f'phi scaling over N={sizes} (L={s.num_layers}, d={s.dim})')
  tb = s.ttc_batch
  rows = []
  for n in sizes:
    phi, params, _ = make_phi(s, num_images=n)
    tokens = jnp.asarray(np.concatenate([world.queries(tb)[:, None],
                                         world.collection(tb * n).reshape(tb, n, s.dim)], 1))
    mask = jnp.ones(tokens.shape[:2], bool)
    entry = {'n': n, **rec.pair(f'phi N={n}', lambda: phi(params, tokens[:1], mask[:1]),
                                lambda: phi(params, tokens, mask), tb)}
    entry['memory_batch1'] = timing.compiled_cost(phi, params, tokens[:1], mask[:1])
    entry['memory_batched'] = timing.compiled_cost(phi, params, tokens, mask)
    entry['flops_per_query'] = entry['memory_batched']['flops'] / tb
    rows.append(entry)
  return {'rows': rows, 'batch': tb,
          'growth_batch1': timing.growth_exponent(
              sizes, [r['batch1']['per_query']['median_ms'] for r in rows]),
          'growth_batched': timing.growth_exponent(
              sizes, [r['batched']['per_query']['median_ms'] for r in rows]),
          'growth_flops': timing.growth_exponent(
              sizes, [r['flops_per_query'] for r in rows])}


def training(rec: Recorder, workdir: str) -> dict:
  """train_scl and train_ttc on the synthetic default: steps/s and examples/s after warm-up."""
  from colt_jax import data  # pylint: disable=g-import-not-at-top
  from colt_jax.datasets import synthetic  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  s = rec.settings
  if s.synthetic_quick:
    cfg = synthetic.SyntheticConfig(dim=16, num_vocabulary=40, dev_topics=8, test_topics=2,
                                    min_photos=50, max_photos=90, mean_clusters=6)
    data_dir = synthetic.ensure(s.synthetic_dir or os.path.join(workdir, 'synthetic'),
                                s.seed, cfg)
  else:
    data_dir = s.synthetic_dir or ''
  split_data = data.load('synthetic', 'dev', data_dir)
  warm = s.train_warmup
  steps = -(-s.train_steps // warm) * warm
  common = dict(num_steps=warm + steps, log_every=warm, checkpoint_every=warm + steps,
                data_dir=data_dir, **dict(s.train_overrides))
  def fields(cls):
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in common.items() if k in names}

  scl_cfg = configs.from_flagfile(configs.SCLConfig, s.scl_flags,
                                  workdir=os.path.join(workdir, 'scl'),
                                  **fields(configs.SCLConfig))
  ttc_cfg = configs.from_flagfile(configs.TTCConfig, s.ttc_flags,
                                  workdir=os.path.join(workdir, 'ttc'),
                                  scl_checkpoint=scl_cfg.workdir, **fields(configs.TTCConfig))
  rec.log(f'training: {warm} warm-up + {steps} timed steps each (synthetic dev split)')
  out = {}
  for name, cfg, fn in (('scl', scl_cfg, trainers.train_scl), ('ttc', ttc_cfg,
                                                                trainers.train_ttc)):
    start = time.perf_counter()
    with timing.CompileCounter() as counter:
      fn(cfg, resume=False, progress=False, split_data=split_data)
    wall = time.perf_counter() - start
    out[name] = train_rates(os.path.join(cfg.workdir, 'metrics.jsonl'), warm, cfg.batch_size)
    out[name].update(wall_s=wall, compiles=counter.count, batch_size=cfg.batch_size,
                     compiles_timed=counter.between(*out[name].pop('timed_window')),
                     config={k: v for k, v in dataclasses.asdict(cfg).items()
                             if k not in ('workdir', 'data_dir', 'scl_checkpoint')})
    if name == 'scl':
      out[name]['images_per_s'] = out[name]['examples_per_s'] * cfg.images_per_query
    else:
      out[name]['tokens_per_s'] = out[name]['examples_per_s'] * (cfg.num_images + 1)
    rec.log(f'  train_{name}: {out[name]["steps_per_s"]:.2f} steps/s, '
            f'{out[name]["examples_per_s"]:.1f} examples/s')
  return out


def train_rates(metrics_path: str, interval: int, batch_size: int) -> dict:
  """Steps/s over the logged intervals after the first (which holds the compilation), and the
  wall-clock window of those intervals (for counting compilations inside it)."""
  with open(metrics_path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  rows = [r for r in rows if 'steps_per_sec' in r]
  if len(rows) < 2:
    raise ValueError(f'{metrics_path}: need at least two logged intervals, got {len(rows)}')
  timed = rows[1:]
  steps = [r['step'] - p['step'] for p, r in zip(rows, timed)]
  seconds = sum(n / r['steps_per_sec'] for n, r in zip(steps, timed))
  rate = sum(steps) / seconds
  return {'steps_per_s': rate, 'examples_per_s': rate * batch_size,
          'timed_steps': sum(steps), 'timed_s': seconds,
          'first_interval_s': interval / rows[0]['steps_per_sec'],
          # wall-clock window of the timed steps (end of the first interval to the last log)
          'timed_window': (rows[0].get('time', 0.0), rows[-1].get('time', float('inf')))}


# ------------------------------------------------------------------------------ run


def run(settings: Settings, sections: Sequence[str] = SECTIONS,
        log: Callable[[str], None] = print, workdir: Optional[str] = None) -> dict:
  """Runs the chosen sections; returns the results (see the module docstring)."""
  check(settings, sections)
  start = time.perf_counter()
  result = {'schema': SCHEMA, 'settings': dataclasses.asdict(settings),
            'sections': list(sections), 'machine': timing.machine_info(),
            'paper_rtx3090_ms': PAPER_RTX3090_MS,
            'paper_phi_layers_ms': {str(k): v for k, v in PAPER_PHI_LAYERS_MS.items()}}
  m = result['machine']
  log(f'machine: {m["cpu"]}, {m["usable_cpus"]} usable CPUs, backend {m["backend"]} '
      f'{m["devices"]}, load average {m["load_average"]}')
  rec = Recorder(settings, log)
  world = World(settings)
  seconds = result['section_seconds'] = {}
  clock = time.perf_counter
  matmul = bandwidth = None
  if 'reference' in sections:
    t0 = clock()
    result['reference'] = reference(rec)
    seconds['reference'] = clock() - t0
    matmul = result['reference']['matmul']['flops_per_s']
    bandwidth = result['reference']['bandwidth']['bytes_per_s']
  if {'components', 'paths', 'ttc'} & set(sections):
    t0 = clock()
    stages = Stages(settings, world, log)
    seconds['setup'] = clock() - t0
    for name, fn in (('components', components), ('paths', paths),
                     ('ttc', functools.partial(ttc, matmul_flops_per_s=matmul))):
      if name in sections:
        t0 = clock()
        result[name] = fn(rec, stages)
        seconds[name] = clock() - t0
    del stages
  if 'scaling' in sections:
    t0 = clock()
    result['scaling'] = {'search': search_scaling(rec, world, bandwidth),
                         'ttc': ttc_scaling(rec, world)}
    seconds['scaling'] = clock() - t0
  if 'training' in sections:
    t0 = clock()
    if workdir is None:
      with tempfile.TemporaryDirectory(prefix='colt-bench-') as tmp:
        result['training'] = training(rec, tmp)
    else:
      result['training'] = training(rec, workdir)
    seconds['training'] = clock() - t0
  result['compiles_after_warmup'] = {'total': int(sum(rec.compiles.values())),
                                     'per_measurement': rec.compiles}
  log(f'compilations during timed calls: {result["compiles_after_warmup"]["total"]}')
  log('seconds per section: ' + ', '.join(f'{k} {v:.1f}' for k, v in seconds.items()))
  result['load_average_end'] = timing.load_average()
  result['elapsed_s'] = time.perf_counter() - start
  return result
