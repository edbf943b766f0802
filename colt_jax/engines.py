"""Candidate engines: the N photos most similar to a query, exactly or approximately.

CoLT's first stage (Alg. 2) takes the top-N of the collection by cosine similarity to the
query. Every engine answers `search(queries [B, d], n) -> (scores [B, n], rows [B, n])` over
L2-normalised rows (the index's row numbers; -1 pads a short answer):

* `exact` (`colt_jax.search.ExactIndex`): the jitted JAX search; exact, the default up to a few
  million photos (its time per query grows with the collection: memory bandwidth).
* `faiss` (`FaissIndex`, faiss-cpu): `hnsw` (graph; no training), `ivf` (inverted lists over
  k-means cells, `nprobe` of them searched), `ivfsq` (the same with 8-bit scalar-quantised
  rows: 4x less memory, scores nearly exact) or `ivfpq` (product-quantised codes: ~16x less
  memory, approximate scores). Built from the rows, saved to and loaded from one file
  (`save`, `load`).
* `qdrant` (`QdrantIndex`, qdrant-client): a Qdrant collection, in the client's embedded local
  mode (in memory, or a folder) or on a server (`url`): Qdrant shards and replicates a
  collection across nodes when it outgrows one machine.

Approximate engines return approximately the exact top-n; `recall` measures how many of the
exact top-n they return. The Retriever re-orders what an engine returns by exact cosine (the
TTC's token order), so engines differ only in which photos reach phi.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from colt_jax import search as search_lib
from colt_jax.errors import InputError

ENGINES = ('exact', 'faiss-hnsw', 'faiss-ivf', 'faiss-ivfsq', 'faiss-ivfpq', 'qdrant')


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
  url: str = ''  # qdrant: a server; '' = embedded local mode
  path: str = ''  # qdrant local mode: a folder ('' = in memory)
  collection: str = 'colt'  # qdrant: the collection name
  seed: int = 0

  def __post_init__(self):
    if self.name not in ENGINES:
      raise InputError(f'--engine: unknown engine {self.name!r}; expected one of {ENGINES}')


def build(spec: EngineSpec, rows: np.ndarray):
  """An engine of kind `spec.name` over the L2-normalised `rows` [M, d]."""
  if spec.name == 'exact':
    return search_lib.ExactIndex(rows)
  if spec.name.startswith('faiss-'):
    return FaissIndex.build(rows, spec)
  return QdrantIndex.build(rows, spec)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
  """Mean over queries of |found_i & exact_i| / |exact_i| (row indices; -1 ignored)."""
  hits = [len(set(f[f >= 0].tolist()) & set(e[e >= 0].tolist())) / max(1, int((e >= 0).sum()))
          for f, e in zip(np.asarray(found), np.asarray(exact))]
  return float(np.mean(hits))


def _faiss():
  try:
    import faiss  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError('the faiss engines need faiss-cpu (pip install faiss-cpu)') from None
  return faiss


class FaissIndex:
  """A faiss index over L2-normalised rows, by inner product (= cosine)."""

  def __init__(self, index, spec: EngineSpec):
    self.index, self.spec = index, spec
    self.num_rows, self.dim = int(index.ntotal), int(index.d)
    self._tune()

  @classmethod
  def build(cls, rows: np.ndarray, spec: EngineSpec) -> 'FaissIndex':
    faiss = _faiss()
    rows = np.ascontiguousarray(rows, np.float32)
    m, d = rows.shape
    ip = faiss.METRIC_INNER_PRODUCT
    if spec.name == 'faiss-hnsw':
      index = faiss.IndexHNSWFlat(d, spec.hnsw_m, ip)
      index.hnsw.efConstruction = spec.ef_construction
    else:
      nlist = spec.nlist or max(1, int(4 * np.sqrt(m)))
      nlist = min(nlist, max(1, m // 39))  # faiss wants >= 39 training rows per cell
      quantizer = faiss.IndexFlatIP(d)
      if spec.name == 'faiss-ivf':
        index = faiss.IndexIVFFlat(quantizer, d, nlist, ip)
      elif spec.name == 'faiss-ivfsq':
        index = faiss.IndexIVFScalarQuantizer(quantizer, d, nlist,
                                              faiss.ScalarQuantizer.QT_8bit, ip)
      else:
        code = spec.pq_bytes or max(8, d // 4)
        while d % code:
          code -= 1
        index = faiss.IndexIVFPQ(quantizer, d, nlist, code, 8, ip)
      sample = rows
      if m > spec.train_rows:
        pick = np.random.default_rng(spec.seed).choice(m, spec.train_rows, replace=False)
        sample = rows[np.sort(pick)]
      index.train(sample)
    index.add(rows)
    return cls(index, spec)

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
    scores, rows = self.index.search(queries, n)
    return scores.astype(np.float32), rows.astype(np.int64)

  def save(self, path: str) -> str:
    """Writes the index to `path` (a temporary name, then rename)."""
    faiss = _faiss()
    tmp = f'{path}.tmp-{os.getpid()}'
    faiss.write_index(self.index, tmp)
    os.replace(tmp, path)
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

  def search(self, queries, n: int):
    from qdrant_client import models  # pylint: disable=g-import-not-at-top
    queries = np.asarray(queries, np.float32)
    n = min(n, self.num_rows)
    scores = np.full((len(queries), n), -np.inf, np.float32)
    rows = np.full((len(queries), n), -1, np.int64)
    params = models.SearchParams(hnsw_ef=max(self.spec.ef_search, n))
    requests = [models.QueryRequest(query=q.tolist(), limit=n, params=params)
                for q in queries]
    for i, res in enumerate(self.client.query_batch_points(self.spec.collection, requests)):
      for j, point in enumerate(res.points):
        scores[i, j], rows[i, j] = point.score, int(point.id)
    return scores, rows
