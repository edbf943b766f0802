"""Candidate engines: the N photos most similar to a query, exactly or approximately.

CoLT's first stage (Alg. 2) takes the top-N of the collection by cosine similarity to the
query. Every engine answers `search(queries [B, d], n) -> (scores [B, n], rows [B, n])` over
L2-normalised rows (the index's row numbers; -1 pads a short answer):

* `exact` (`colt_jax.engines.exact.ExactIndex`): the jitted JAX search; exact, the default up to a few
  million photos (its time per query grows with the collection: memory bandwidth).
* `faiss` (`FaissIndex`, faiss-cpu): `hnsw` (graph; no training), `ivf` (inverted lists over
  k-means cells, `nprobe` of them searched), `ivfsq` (the same with 8-bit scalar-quantised
  rows: 4x less memory, scores nearly exact) or `ivfpq` (product-quantised codes: ~16x less
  memory, approximate scores). Built from the rows, saved to and loaded from one file
  (`save`, `load`).
* `qdrant` (`QdrantIndex`, qdrant-client): a Qdrant collection, in the client's embedded local
  mode (in memory, or a folder) or on a server (`url`): Qdrant shards and replicates a
  collection across nodes when it outgrows one machine.

Engines that cannot be built for a collection's size get parameters that fit it (IVF cells at
most one per 39 training rows, as faiss's k-means asks; PQ codes of fewer bits below 256
training rows) or are refused with one line naming the engine and the size (`fit`). An engine
can be saved in a folder with `engine.json` (`save`, `load_saved`): the feature store of a
collection keeps its engines there (`data_prep/index_collection.py --engines`), rebuilt or
updated (`rebuild`) whenever the collection changes.

Approximate engines return approximately the exact top-n; `recall` measures how many of the
exact top-n they return. An IVF engine searches `nprobe` cells per query; `tune_nprobe` picks
the fewest that reach a target recall, and an EngineSpec with `target_recall` has its engine
pick them when it is built, on sample rows of the collection as queries (`sample_neighbours`),
and records the choice (`tuning`, saved in `engine.json`). The Retriever re-orders what an
engine returns by exact cosine (the TTC's token order), so engines differ only in which photos
reach phi.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Optional

from absl import logging
import numpy as np

# pylint: disable-next=unused-import
from colt_jax.engines.nprobe_tuning import (IVF_ENGINES, sample_neighbours, tune_nprobe)
from colt_jax.util.errors import InputError

ENGINES = ('exact', 'faiss-hnsw', 'faiss-ivf', 'faiss-ivfsq', 'faiss-ivfpq', 'qdrant')
SAVED_ENGINES = ENGINES[1:]  # the ones with an index to save (exact searches the rows)
ENGINE_FILE = 'engine.json'
ENGINE_FORMAT = 'colt_jax.engine/1'
MIN_ROWS_PER_CELL = 39  # faiss's k-means asks for at least 39 training rows per centroid
MIN_PQ_BITS = 4  # PQ codes of fewer bits are refused (fewer than 16 training rows)
UPDATE_MAX_CHANGE = 0.25  # an IVF engine keeps its trained cells below this share of change


class EngineSizeError(InputError):
  """An engine that cannot be built for a collection of this size (one line)."""


@dataclasses.dataclass(frozen=True)
class EngineSpec:
  """Which engine, with its settings (configuration as data)."""
  name: str = 'exact'
  hnsw_m: int = 32  # HNSW: neighbours per node
  ef_construction: int = 200  # HNSW: build-time beam
  ef_search: int = 256  # HNSW (faiss and qdrant): search-time beam, >= n
  nlist: int = 0  # IVF: k-means cells (0 = 4 * sqrt(M))
  nprobe: int = 32  # IVF: cells searched per query
  pq_bytes: int = 0  # IVF-PQ: bytes per code (0 = d / 4, at least 8)
  train_rows: int = 200_000  # IVF: rows the k-means and PQ are trained on (a sample)
  target_recall: float = 0.0  # IVF: > 0 = nprobe is picked at build time to reach this
  recall_n: int = 200  # IVF with target_recall: the n of recall@n (CoLT's N)
  url: str = ''  # qdrant: a server; '' = embedded local mode
  path: str = ''  # qdrant local mode: a folder ('' = in memory)
  collection: str = 'colt'  # qdrant: the collection name
  seed: int = 0

  def __post_init__(self):
    if self.name not in ENGINES:
      raise InputError(f'--engine: unknown engine {self.name!r}; expected one of {ENGINES}')
    if not 0.0 <= self.target_recall <= 1.0:
      raise InputError(f'--target_recall must be in [0, 1], got {self.target_recall!r}')
    if self.target_recall and self.name not in IVF_ENGINES:
      raise InputError(f'--target_recall applies to {", ".join(IVF_ENGINES)}, not {self.name}')
    if self.nprobe < 1:
      raise InputError(f'--nprobe must be >= 1, got {self.nprobe}')
    if self.recall_n < 1:
      raise InputError(f'{self.name}: recall_n must be >= 1, got {self.recall_n}')


def fit(spec: EngineSpec, num_rows: int, dim: int) -> dict:
  """The parameters an engine of `spec` is built with for `num_rows` rows of dimension
  `dim`: IVF cells capped at one per 39 training rows (default 4 sqrt(M)), PQ bytes per code
  (a divisor of `dim`) and bits per code (8, fewer below 256 training rows). Raises
  `EngineSizeError` (one line naming the engine and the size) when none fit."""
  if num_rows < 1:
    raise EngineSizeError(f'{spec.name} cannot be built for an empty collection (0 photos)')
  if spec.name in ('exact', 'qdrant'):
    return {}
  if spec.name == 'faiss-hnsw':
    return {'hnsw_m': spec.hnsw_m, 'ef_construction': spec.ef_construction}
  train = min(num_rows, max(1, spec.train_rows))
  nlist = spec.nlist or max(1, int(4 * np.sqrt(num_rows)))
  cap = max(1, train // MIN_ROWS_PER_CELL)
  if nlist > cap:
    if spec.nlist:
      logging.warning('%s: %d cells asked for but %d training rows fit at most %d (%d rows '
                      'per cell); using %d', spec.name, spec.nlist, train, cap,
                      MIN_ROWS_PER_CELL, cap)
    nlist = cap
  params = {'nlist': nlist, 'train_rows': train}
  if spec.name == 'faiss-ivfpq':
    nbits = min(8, int(math.floor(math.log2(train))))
    if nbits < MIN_PQ_BITS:
      raise EngineSizeError(
          f'faiss-ivfpq cannot be built for {num_rows} photos ({train} training rows): '
          f'product quantisation needs at least {2 ** MIN_PQ_BITS} (256 for 8-bit codes); '
          'use faiss-ivf, faiss-hnsw or exact')
    code = min(spec.pq_bytes or max(8, dim // 4), dim)
    while dim % code:
      code -= 1
    params.update(pq_bytes=code, pq_bits=nbits)
  return params


def _faiss():
  try:
    import faiss  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError('the faiss engines need faiss-cpu (pip install faiss-cpu)') from None
  return faiss


def distinct_rows(queries: np.ndarray, search):
  """`search(queries)` -> a tuple of per-query arrays, each distinct query row searched once:
  a padded batch (the service's, the Retriever's lone query) repeats its first row, and an
  answer to a query does not depend on the others in its batch."""
  distinct, inverse = np.unique(queries, axis=0, return_inverse=True)
  if len(distinct) == len(queries):
    return search(queries)
  out = search(np.ascontiguousarray(distinct))
  inverse = np.reshape(inverse, -1)
  return tuple(np.asarray(a)[inverse] for a in out)


class FaissIndex:
  """A faiss index over L2-normalised rows, by inner product (= cosine)."""

  def __init__(self, index, spec: EngineSpec):
    self.index, self.spec = index, spec
    self.num_rows, self.dim = int(index.ntotal), int(index.d)
    self.tuning = None  # the nprobe choice for spec.target_recall (`tune`)
    self._tune()

  @classmethod
  def build(cls, rows: np.ndarray, spec: EngineSpec) -> 'FaissIndex':
    """Trains (IVF) and fills an index with parameters that fit the rows (`fit`)."""
    faiss = _faiss()
    rows = np.ascontiguousarray(rows, np.float32)
    if rows.ndim != 2:
      raise ValueError(f'expected rows [M, d], got {rows.shape}')
    m, d = rows.shape
    params = fit(spec, m, d)
    ip = faiss.METRIC_INNER_PRODUCT
    if spec.name == 'faiss-hnsw':
      index = faiss.IndexHNSWFlat(d, spec.hnsw_m, ip)
      index.hnsw.efConstruction = spec.ef_construction
    else:
      nlist = params['nlist']
      quantizer = faiss.IndexFlatIP(d)
      if spec.name == 'faiss-ivf':
        index = faiss.IndexIVFFlat(quantizer, d, nlist, ip)
      elif spec.name == 'faiss-ivfsq':
        index = faiss.IndexIVFScalarQuantizer(quantizer, d, nlist,
                                              faiss.ScalarQuantizer.QT_8bit, ip)
      else:
        index = faiss.IndexIVFPQ(quantizer, d, nlist, params['pq_bytes'], params['pq_bits'],
                                 ip)
      # faiss warns once per k-means (per PQ sub-quantizer: dozens of lines) when a sample is
      # small for its centroids; min_points_per_centroid only sets that warning's threshold.
      # One line of ours says it instead.
      clusterings = [index.cp] + ([index.pq.cp] if spec.name == 'faiss-ivfpq' else [])
      for cp in clusterings:
        cp.min_points_per_centroid = 1
      if m < 39 * nlist:
        logging.info('%s: %d photos train %d IVF cells (faiss advises 39 a cell); the cells '
                     'are coarse', spec.name, m, nlist)
      sample = rows
      if m > params['train_rows']:
        pick = np.random.default_rng(spec.seed).choice(m, params['train_rows'], replace=False)
        sample = rows[np.sort(pick)]
      index.train(sample)
    index.add(rows)
    return cls(index, spec)._autotune(rows)

  @property
  def params(self) -> dict:
    """The parameters the index was built with (as `fit` chose them)."""
    faiss = _faiss()
    if self.spec.name == 'faiss-hnsw':
      hnsw = faiss.downcast_index(self.index).hnsw
      return {'hnsw_m': int(hnsw.nb_neighbors(1)), 'ef_construction': int(hnsw.efConstruction)}
    out = {'nlist': int(faiss.extract_index_ivf(self.index).nlist)}
    if self.spec.name == 'faiss-ivfpq':
      pq = faiss.downcast_index(self.index).pq
      out.update(pq_bytes=int(pq.M), pq_bits=int(pq.nbits))
    return out

  def refill(self, rows: np.ndarray) -> 'FaissIndex':
    """The same trained IVF index (cells, codebooks) holding `rows` instead of its rows."""
    if self.spec.name == 'faiss-hnsw':
      raise ValueError('an HNSW graph cannot be refilled: rebuild it')
    rows = np.ascontiguousarray(rows, np.float32)
    if rows.ndim != 2 or rows.shape[1] != self.dim:
      raise ValueError(f'expected rows [M, {self.dim}], got {rows.shape}')
    self.index.reset()
    self.index.add(rows)
    self.num_rows = int(self.index.ntotal)
    self._tune()
    return self._autotune(rows)

  def set_nprobe(self, nprobe: int) -> 'FaissIndex':
    """Searches `nprobe` cells per query from now on (an IVF index)."""
    if self.spec.name not in IVF_ENGINES:
      raise ValueError(f'nprobe applies to {", ".join(IVF_ENGINES)}, not {self.spec.name}')
    self.spec = dataclasses.replace(self.spec, nprobe=int(nprobe))
    self._tune()
    return self

  def tune(self, rows: np.ndarray, target_recall: Optional[float] = None,
           n: Optional[int] = None) -> dict:
    """Picks nprobe for `target_recall` (default the spec's) of recall@n (default the spec's
    recall_n) on TUNE_QUERIES sample rows of `rows`, this index's rows, as queries
    (`sample_neighbours`, `tune_nprobe`); kept in `tuning`."""
    target = self.spec.target_recall if target_recall is None else target_recall
    queries, exact, own = sample_neighbours(rows, n or self.spec.recall_n, seed=self.spec.seed)
    self.tuning = tune_nprobe(self, queries, exact, target, exclude=own)
    return self.tuning

  def _autotune(self, rows: np.ndarray) -> 'FaissIndex':
    if self.spec.target_recall and self.spec.name in IVF_ENGINES:
      t0 = time.perf_counter()
      self.tune(rows)
      self.tuning['seconds'] = round(time.perf_counter() - t0, 3)
      logging.info('%s: nprobe %d for recall@%d %.3f (target %.3f, %d sample rows)',
                   self.spec.name, self.tuning['nprobe'], self.tuning['n'],
                   self.tuning['recall'], self.tuning['target_recall'], self.tuning['queries'])
    return self

  def _tune(self):
    faiss = _faiss()
    if self.spec.name == 'faiss-hnsw':
      faiss.downcast_index(self.index).hnsw.efSearch = self.spec.ef_search
    else:
      faiss.extract_index_ivf(self.index).nprobe = self.spec.nprobe

  def search(self, queries, n: int):
    queries = np.ascontiguousarray(queries, np.float32)
    if queries.ndim != 2 or queries.shape[1] != self.dim:
      raise ValueError(f'expected queries [B, {self.dim}], got {queries.shape}')
    n = min(n, self.num_rows)
    if self.spec.name == 'faiss-hnsw' and self.index.hnsw.efSearch < n:
      self.index.hnsw.efSearch = n
    scores, rows = distinct_rows(queries, lambda q: self.index.search(q, n))
    return scores.astype(np.float32), rows.astype(np.int64)

  def save(self, path: str) -> str:
    """Writes the index to `path` (a temporary name, then rename)."""
    faiss = _faiss()
    tmp = f'{path}.tmp-{os.getpid()}'
    try:
      faiss.write_index(self.index, tmp)
      os.replace(tmp, path)
    except BaseException:  # a full disk, an interruption: no half-written index left
      if os.path.lexists(tmp):
        os.remove(tmp)
      raise
    return path

  @classmethod
  def load(cls, path: str, spec: EngineSpec) -> 'FaissIndex':
    faiss = _faiss()
    if not os.path.isfile(path):
      raise InputError(f'{path}: no faiss index')
    return cls(faiss.read_index(path), spec)


# ----------------------------------------------------------------------------- saved engines
