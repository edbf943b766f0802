"""Tests of the candidate engines (colt_jax/engines.py) and their use by the Retriever."""
import numpy as np
import pytest

from colt_jax import data
from colt_jax import engines
from colt_jax import retriever
from colt_jax.errors import InputError


def _clustered(m=6000, d=32, centres=60, seed=0):
  rng = np.random.default_rng(seed)
  c = rng.normal(size=(centres, d))
  x = c[rng.integers(0, centres, m)] + 0.35 * rng.normal(size=(m, d))
  x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
  q = x[rng.choice(m, 20, replace=False)] + 0.1 * rng.normal(size=(20, d)).astype(np.float32)
  return x, (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope='module')
def collection():
  x, q = _clustered()
  exact = np.asarray(engines.build(engines.EngineSpec(), x).search(q, 100)[1])
  return x, q, exact


@pytest.mark.parametrize('spec,least', [
    (engines.EngineSpec('faiss-hnsw'), 0.95),
    (engines.EngineSpec('faiss-ivf', nlist=40, nprobe=40), 1.0),  # every cell: exact
    (engines.EngineSpec('faiss-ivf', nlist=40, nprobe=8), 0.8),
    (engines.EngineSpec('faiss-ivfsq', nlist=40, nprobe=40), 0.9),
    (engines.EngineSpec('faiss-ivfpq', nlist=40, nprobe=40), 0.5),
    (engines.EngineSpec('qdrant'), 1.0),  # embedded local mode searches exhaustively
])
def test_engines_return_the_exact_top_n(collection, spec, least):
  x, q, exact = collection
  scores, rows = engines.build(spec, x).search(q, 100)
  assert rows.shape == scores.shape == (20, 100)
  assert engines.recall(rows, exact) >= least
  if spec.name not in ('faiss-ivfpq', 'faiss-ivfsq'):  # exact scores (quantised: approximate)
    valid = rows >= 0
    np.testing.assert_allclose(scores[valid], np.einsum('bd,bkd->bk', q, x[rows])[valid],
                               atol=1e-4)


def test_faiss_index_saves_and_loads(collection, tmp_path):
  x, q, _ = collection
  spec = engines.EngineSpec('faiss-hnsw')
  built = engines.build(spec, x)
  path = built.save(str(tmp_path / 'photos.faiss'))
  loaded = engines.FaissIndex.load(path, spec)
  np.testing.assert_array_equal(loaded.search(q, 50)[1], built.search(q, 50)[1])
  assert list(tmp_path.iterdir()) == [tmp_path / 'photos.faiss']  # no temporary left
  with pytest.raises(InputError, match='no faiss index'):
    engines.FaissIndex.load(str(tmp_path / 'nope'), spec)
  with pytest.raises(InputError, match='unknown engine'):
    engines.EngineSpec('annoy')


def test_recall_counts_shared_rows():
  assert engines.recall(np.array([[1, 2, -1]]), np.array([[2, 3, 4]])) == pytest.approx(1 / 3)


def test_retriever_with_an_exhaustive_engine_gives_the_exact_lists(tiny_synthetic, tiny_colt):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  exact = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store)
  spec = engines.EngineSpec('faiss-ivf', nlist=4, nprobe=4)
  faiss = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store, spec)
  queries = np.asarray(store.queries)[:4]
  for a, b in zip(exact.search_batch(queries), faiss.search_batch(queries)):
    assert a.photo_ids == b.photo_ids and a.categories == b.categories
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
  approx = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(
      store, engines.EngineSpec('faiss-hnsw'))
  assert len(approx.search(queries[0]).photo_ids) == 50
