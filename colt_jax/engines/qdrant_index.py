"""Qdrant as a candidate engine: a collection of the rows (the embedded local mode in memory, or
a server), searched by cosine."""
from __future__ import annotations

import numpy as np

from colt_jax.engines import approximate
from colt_jax.util.errors import InputError


class QdrantIndex:
  """A Qdrant collection of the rows (point id = row), searched by cosine with HNSW."""

  def __init__(self, client, spec: approximate.EngineSpec, num_rows: int, dim: int):
    self.client, self.spec, self.num_rows, self.dim = client, spec, num_rows, dim

  @staticmethod
  def client_for(spec: approximate.EngineSpec):
    try:
      from qdrant_client import QdrantClient  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise InputError('the qdrant engine needs qdrant-client (pip install qdrant-client)'
                       ) from None
    if spec.url:
      return QdrantClient(url=spec.url)
    return QdrantClient(path=spec.path) if spec.path else QdrantClient(location=':memory:')

  @classmethod
  def build(cls, rows: np.ndarray, spec: approximate.EngineSpec, batch: int = 4096) -> 'QdrantIndex':
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
  def open(cls, spec: approximate.EngineSpec) -> 'QdrantIndex':
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

    return approximate.distinct_rows(queries, search)
