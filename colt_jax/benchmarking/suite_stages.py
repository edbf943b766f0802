"""What the measurements of `benchmarks/bench_retrieval.py` run on, built once per run.

* `World`: the synthetic feature space: unit vectors around random cluster centres (so UMONS
  and MMR see clustered candidates), queries between a few centres, collections of any size.
* `make_phi`, `make_g`, `make_encoder`: phi (paper size), g and the query encoder f (the real
  MiniLM-L6 text encoder, zero-padded to the feature dimension).
* `Recorder`: times a call at batch 1 and batched (`timing.time_calls`: warm-up calls first,
  every call waited for), counting compilations during the timed calls.
* `Stages`: everything the components and whole paths need (collection, index, candidates,
  tokens, phi's labels, CoLT's `Retriever`).
"""
from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.baselines import rerankers
from colt_jax.baselines import umons
from colt_jax.benchmarking import timing
from colt_jax.benchmarking.suite_settings import Settings
from colt_jax.inference import retriever
from colt_jax.inference import settings as settings_lib
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model import postprocess
from colt_jax.train import configs
from colt_jax.train import modules
from colt_jax.train import restore

# Keyword queries like Div400's (location names): the texts f encodes.
QUERY_TEXTS = ('Big Ben', 'Eiffel Tower', 'Colosseum', 'Sagrada Familia', 'Tower Bridge',
               'Brandenburg Gate', 'Notre Dame de Paris', 'Acropolis of Athens',
               'Golden Gate Bridge', 'Taj Mahal', 'Angkor Wat', 'Neuschwanstein Castle',
               'Hagia Sophia', 'Charles Bridge', 'Mont Saint Michel', 'St Peters Basilica')


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
  module = modules.classifier_module(cfg, space)
  n = cfg.num_images + 1
  params = module.init(jax.random.PRNGKey(settings.seed), jnp.zeros((1, n, settings.dim)),
                       jnp.ones((1, n), bool))['params']

  @jax.jit
  def labels(p, tokens, mask):
    return jnp.argmax(module.apply({'params': p}, tokens, mask, deterministic=True), -1)

  return labels, params, module


def make_g(settings: Settings):
  """(jitted g: (params, features [..., d]) -> h^, params): the paper-size re-encoder."""
  module = modules.reencoder_module(configs.SCLConfig())
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



# ------------------------------------------------------------------------- stages


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
    self.colt = retriever.Retriever(classifier, None, settings_lib.InferenceSettings(k=s.k))
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
    return rerankers.mmr(q, cand, s.k, s.diversity, num_candidates=s.num_images)

  def mmr_many(self, q, cand):
    s = self.settings
    return rerankers.mmr_batch(q, cand, k=s.k, diversity=s.diversity,
                               num_candidates=s.num_images)

  def umons_one(self, q, cand):
    s = self.settings
    return umons.umons(q, cand, s.k, s.umons_threshold, s.umons_eps, s.umons_min_samples,
                           num_candidates=s.num_images)

  def colt_core(self, queries):
    """CoLT after f: `Retriever.search_rows` (search h^, tokens [h_q, top N], phi labels, t
    (Eq. 6 and its continuation)) -> rows [B, 50]."""
    return self.colt.search_rows(queries)[0]
