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


@pytest.mark.parametrize('m,name,expected', [
    (20, 'faiss-ivf', {'nlist': 1, 'train_rows': 20}),  # too few rows for several cells
    (6000, 'faiss-ivf', {'nlist': 153, 'train_rows': 6000}),  # 4 sqrt(M) cells, at most M/39
    (100, 'faiss-ivfpq', {'nlist': 2, 'train_rows': 100, 'pq_bytes': 8, 'pq_bits': 6}),
    (300, 'faiss-ivfpq', {'nlist': 7, 'train_rows': 300, 'pq_bytes': 8, 'pq_bits': 8}),
    (25, 'faiss-hnsw', {'hnsw_m': 32, 'ef_construction': 200}),
])
def test_engines_pick_parameters_that_fit_the_collection(m, name, expected):
  x, q = _clustered(m=m, centres=min(m, 60))
  assert engines.fit(engines.EngineSpec(name), m, 32) == expected
  built = engines.build(engines.EngineSpec(name, nprobe=256), x)
  assert built.params == {k: v for k, v in expected.items() if k != 'train_rows'}
  n = min(m, 10)
  rows = built.search(q, n)[1]
  assert rows.shape == (20, n) and (rows >= 0).all()
  if name != 'faiss-ivfpq':  # every cell searched: exact
    exact = np.asarray(engines.build(engines.EngineSpec(), x).search(q, n)[1])
    assert engines.recall(rows, exact) >= 0.95


def test_engines_that_cannot_fit_refuse_in_one_line():
  x = _clustered(m=20, centres=5)[0][:10]
  message = ('faiss-ivfpq cannot be built for 10 photos (10 training rows): product '
             'quantisation needs at least 16 (256 for 8-bit codes); use faiss-ivf, '
             'faiss-hnsw or exact')
  with pytest.raises(engines.EngineSizeError) as e:
    engines.build(engines.EngineSpec('faiss-ivfpq'), x)
  assert str(e.value) == message
  with pytest.raises(engines.EngineSizeError, match='faiss-ivfpq cannot be built for 5000 '
                     r'photos \(10 training rows\)'):
    engines.fit(engines.EngineSpec('faiss-ivfpq', train_rows=10), 5000, 32)
  for name in engines.SAVED_ENGINES:
    with pytest.raises(engines.EngineSizeError, match=f'^{name} cannot be built for an empty '
                       r'collection \(0 photos\)$'):
      engines.build(engines.EngineSpec(name), np.zeros((0, 32), np.float32))
  # cells asked for beyond what the rows can train are capped (and logged)
  assert engines.fit(engines.EngineSpec('faiss-ivf', nlist=500), 1000, 32)['nlist'] == 25


@pytest.mark.parametrize('name', ['faiss-hnsw', 'faiss-ivfsq', 'qdrant'])
def test_saved_engines_load_and_answer_as_built(collection, tmp_path, name):
  x, q, _ = collection
  x = x[:600]  # Qdrant's local mode writes point by point
  spec = engines.EngineSpec(name, nlist=10, nprobe=10)
  info = engines.rebuild(spec, x, str(tmp_path / name))
  assert info['action'] == 'built' and info['rows'] == len(x) and info['spec']['name'] == name
  assert engines.read_saved(str(tmp_path / name)) == info
  loaded = engines.load_saved(str(tmp_path / name))
  found = loaded.search(q, 50)[1]
  live = engines.build(spec, x).search(q, 50)[1]
  assert engines.recall(found, live) >= (1.0 if name != 'faiss-hnsw' else 0.95)
  if name == 'qdrant':
    loaded.close()
  with pytest.raises(InputError, match='no saved engine'):
    engines.load_saved(str(tmp_path))


def test_a_saved_ivf_engine_is_updated_when_little_changed(collection, tmp_path):
  x, q, _ = collection
  spec = engines.EngineSpec('faiss-ivf', nlist=40, nprobe=40)
  first = engines.rebuild(spec, x[:5000], str(tmp_path / 'a'))
  faiss = engines._faiss()  # pylint: disable=protected-access

  def centroids(folder):
    index = faiss.read_index(str(folder / 'index.faiss'))  # kept alive while read
    return np.array(faiss.extract_index_ivf(index).quantizer.reconstruct_n(0, 40))

  small = engines.rebuild(spec, x[:5500], str(tmp_path / 'b'), previous=str(tmp_path / 'a'),
                          changed_fraction=0.1)
  assert small['action'] == 'updated' and small['rows'] == 5500
  np.testing.assert_array_equal(centroids(tmp_path / 'b'), centroids(tmp_path / 'a'))
  exact = np.asarray(engines.build(engines.EngineSpec(), x[:5500]).search(q, 20)[1])
  assert engines.recall(engines.load_saved(str(tmp_path / 'b')).search(q, 20)[1], exact) == 1.0
  big = engines.rebuild(spec, x, str(tmp_path / 'c'), previous=str(tmp_path / 'a'),
                        changed_fraction=0.6)
  assert big['action'] == 'rebuilt' and first['action'] == 'built'
