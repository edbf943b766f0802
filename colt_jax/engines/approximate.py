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
import json
import math
import os
import time
from typing import Optional

from absl import logging
import numpy as np

from colt_jax.util import atomic
# pylint: disable-next=unused-import
from colt_jax.engines.tuning import (IVF_ENGINES, TUNE_QUERIES, nprobe_ladder, recall,
                                    sample_neighbours, tune_nprobe)
from colt_jax.engines import exact as search_lib
from colt_jax.util.errors import InputError
from colt_jax.util.manifest import Manifest

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


def build(spec: EngineSpec, rows: np.ndarray):
  """An engine of kind `spec.name` over the L2-normalised `rows` [M, d]."""
  if spec.name == 'exact':
    return search_lib.ExactIndex(rows)
  if spec.name.startswith('faiss-'):
    return FaissIndex.build(rows, spec)
  fit(spec, *np.shape(rows))
  return QdrantIndex.build(rows, spec)


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


class QdrantIndex:
  """A Qdrant collection of the rows (point id = row), searched by cosine with HNSW."""

  def __init__(self, client, spec: EngineSpec, num_rows: int, dim: int):
    self.client, self.spec, self.num_rows, self.dim = client, spec, num_rows, dim

  @staticmethod
  def client_for(spec: EngineSpec):
    try:
      from qdrant_client import QdrantClient  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise InputError('the qdrant engine needs qdrant-client (pip install qdrant-client)'
                       ) from None
    if spec.url:
      return QdrantClient(url=spec.url)
    return QdrantClient(path=spec.path) if spec.path else QdrantClient(location=':memory:')

  @classmethod
  def build(cls, rows: np.ndarray, spec: EngineSpec, batch: int = 4096) -> 'QdrantIndex':
    from qdrant_client import models  # pylint: disable=g-import-not-at-top
    client = cls.client_for(spec)
    rows = np.asarray(rows, np.float32)
    if client.collection_exists(spec.collection):
      client.delete_collection(spec.collection)
    client.create_collection(
        spec.collection,
        vectors_config=models.VectorParams(size=rows.shape[1], distance=models.Distance.COSINE),
        hnsw_config=models.HnswConfigDiff(m=spec.hnsw_m, ef_construct=spec.ef_construction))
    for start in range(0, rows.shape[0], batch):
      part = rows[start:start + batch]
      client.upload_collection(spec.collection, vectors=part,
                               ids=list(range(start, start + len(part))))
    return cls(client, spec, int(rows.shape[0]), int(rows.shape[1]))

  @classmethod
  def open(cls, spec: EngineSpec) -> 'QdrantIndex':
    """The collection `spec` names, as it is (a local folder or a server)."""
    client = cls.client_for(spec)
    if not client.collection_exists(spec.collection):
      raise InputError(f'{spec.url or spec.path}: no qdrant collection {spec.collection!r}')
    info = client.get_collection(spec.collection)
    count = int(client.count(spec.collection, exact=True).count)
    return cls(client, spec, count, int(info.config.params.vectors.size))

  @property
  def params(self) -> dict:
    return {'hnsw_m': self.spec.hnsw_m, 'ef_construction': self.spec.ef_construction}

  def close(self) -> None:
    """Releases the client (a local folder's lock)."""
    self.client.close()

  def search(self, queries, n: int):
    from qdrant_client import models  # pylint: disable=g-import-not-at-top
    queries = np.asarray(queries, np.float32)
    n = min(n, self.num_rows)
    params = models.SearchParams(hnsw_ef=max(self.spec.ef_search, n))

    def search(distinct):
      scores = np.full((len(distinct), n), -np.inf, np.float32)
      rows = np.full((len(distinct), n), -1, np.int64)
      requests = [models.QueryRequest(query=q.tolist(), limit=n, params=params)
                  for q in distinct]
      for i, res in enumerate(self.client.query_batch_points(self.spec.collection, requests)):
        for j, point in enumerate(res.points):
          scores[i, j], rows[i, j] = point.score, int(point.id)
      return scores, rows

    return distinct_rows(queries, search)


# ----------------------------------------------------------------------------- saved engines


def _utc_now() -> str:
  return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())


def _saved_spec(spec: EngineSpec) -> dict:
  return {k: v for k, v in dataclasses.asdict(spec).items() if k != 'path'}


def read_saved(folder: str) -> dict:
  """The `engine.json` of a saved engine (InputError naming the file when unusable)."""
  path = os.path.join(folder, ENGINE_FILE)
  try:
    with open(path) as f:
      info = json.load(f)
  except FileNotFoundError:
    raise InputError(f'{folder}: no saved engine (no {ENGINE_FILE})') from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: unreadable ({e})') from None
  if not isinstance(info, dict) or info.get('format') != ENGINE_FORMAT:
    raise InputError(f'{path}: not a saved engine of format {ENGINE_FORMAT}')
  return info


def load_saved(folder: str, **overrides):
  """The engine saved in `folder` (`rebuild`), searching as it was saved (an IVF engine: the
  nprobe its target recall picked); `overrides`: search-time settings (nprobe, ef_search,
  url)."""
  info = read_saved(folder)
  known = {f.name for f in dataclasses.fields(EngineSpec)}
  picked = {'nprobe': info['tuning']['nprobe']} if info.get('tuning') else {}
  spec = EngineSpec(**{k: v for k, v in {**info['spec'], **picked, **overrides}.items()
                       if k in known})
  if spec.name.startswith('faiss-'):
    engine = FaissIndex.load(os.path.join(folder, info['file']), spec)
    engine.tuning = info.get('tuning')
  elif spec.url:
    engine = QdrantIndex.open(spec)
  else:
    engine = QdrantIndex.open(dataclasses.replace(spec, path=os.path.join(folder, info['file'])))
  if engine.num_rows != info['rows']:
    raise InputError(f'{folder}: the engine holds {engine.num_rows} rows but {ENGINE_FILE} '
                     f'says {info["rows"]}; rebuild it')
  return engine


def _reusable(spec: EngineSpec, previous: Optional[str], num_rows: int, dim: int,
              changed_fraction: float):
  """The previous IVF engine when its trained cells and codebooks still fit the rows."""
  if (previous is None or spec.name not in ('faiss-ivf', 'faiss-ivfsq', 'faiss-ivfpq')
      or changed_fraction > UPDATE_MAX_CHANGE):
    return None
  try:
    old = load_saved(previous)
  except InputError as e:
    logging.warning('%s: the previous engine cannot be reused (%s); rebuilding it', spec.name, e)
    return None
  if old.spec.name != spec.name or old.dim != dim:
    return None
  now, then = fit(spec, num_rows, dim), old.params
  if not now['nlist'] / 2 <= then['nlist'] <= max(1, now['train_rows'] // MIN_ROWS_PER_CELL):
    return None
  if spec.name == 'faiss-ivfpq' and (then['pq_bytes'] != now['pq_bytes']
                                     or then['pq_bits'] > now['pq_bits']):
    return None
  return old


def rebuild(spec: EngineSpec, rows: np.ndarray, folder: str, *, previous: Optional[str] = None,
            changed_fraction: float = 1.0) -> dict:
  """Builds an engine of `spec` over `rows` into the new folder `folder` (`engine.json`, and
  the faiss index or the Qdrant local folder; a Qdrant server's collection is replaced) and
  returns what `engine.json` records: the settings, the parameters it was built with (an IVF
  engine with `target_recall`: the nprobe it picked, and how, in `tuning`), and
  `action`: built (no previous engine), rebuilt, or updated (an IVF engine whose trained cells
  and codebooks in `previous` still fit the rows and at most UPDATE_MAX_CHANGE of them
  changed: refilled, not retrained). Raises `EngineSizeError` when it cannot be built for the
  rows' size."""
  if spec.name not in SAVED_ENGINES:
    raise InputError(f'{spec.name}: nothing to save (expected one of {SAVED_ENGINES})')
  rows = np.ascontiguousarray(rows, np.float32)
  m, d = rows.shape
  fit(spec, m, d)  # refuses before any work
  t0 = time.perf_counter()
  os.makedirs(folder, exist_ok=True)
  files, trees = [ENGINE_FILE], []
  action = 'built' if previous is None else 'rebuilt'
  if spec.name.startswith('faiss-'):
    engine = _reusable(spec, previous, m, d, changed_fraction)
    if engine is not None:
      engine.spec, engine.tuning = spec, None
      engine.refill(rows)
      action = 'updated'
    else:
      engine = FaissIndex.build(rows, spec)
    file = 'index.faiss'
    files.append(file)
    engine.save(os.path.join(folder, file))
  elif spec.url:
    file = None
    engine = QdrantIndex.build(rows, spec)
  else:
    file = 'local'
    trees.append(file)
    engine = QdrantIndex.build(rows, dataclasses.replace(spec, path=os.path.join(folder, file)))
  params = engine.params
  if isinstance(engine, QdrantIndex):
    engine.close()
  info = {'format': ENGINE_FORMAT, 'name': spec.name, 'spec': _saved_spec(spec),
          'params': params, 'rows': int(m), 'dim': int(d), 'file': file, 'action': action,
          'seconds': round(time.perf_counter() - t0, 3), 'time': _utc_now()}
  if getattr(engine, 'tuning', None):
    info['tuning'] = engine.tuning
  Manifest(files=files, trees=trees).save(folder)  # the folder is one tree of its owner's
  atomic.write_json(os.path.join(folder, ENGINE_FILE), info)
  return info
