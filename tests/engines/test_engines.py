"""Tests of the candidate engines (colt_jax/engines/approximate.py), their use by the Retriever, and the
nprobe they pick for a target recall (data_prep/index_collection.py --target_recall)."""
import os
import sys

import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.engines import approximate as engines
from colt_jax.engines import nprobe_tuning as engine_tuning
from colt_jax.engines import saved_engines
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError
from float_compare import assert_same_ranking, assert_same_result, assert_top_k
from tiny_clip import random_image
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order



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
  exact = np.asarray(saved_engines.build(engines.EngineSpec(), x).search(q, 100)[1])
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
  scores, rows = saved_engines.build(spec, x).search(q, 100)
  assert rows.shape == scores.shape == (20, 100)
  if least == 1.0:  # exhaustive: the exact top 100, up to a tie at the 100th
    assert_top_k(rows, q @ x.T, spec.name)
  else:
    assert engine_tuning.recall(rows, exact) >= least
  if spec.name not in ('faiss-ivfpq', 'faiss-ivfsq'):  # exact scores (quantised: approximate)
    valid = rows >= 0
    np.testing.assert_allclose(scores[valid], np.einsum('bd,bkd->bk', q, x[rows])[valid],
                               atol=1e-4)


@pytest.mark.parametrize('name', ['faiss-ivf', 'qdrant'])
def test_a_padded_batch_searches_each_distinct_query_once(collection, name):
  """A batch that repeats a query (the service's padding) gets, per row, the answer of the
  query alone, and the engine sees each distinct query once."""
  x, q, _ = collection
  engine = saved_engines.build(engines.EngineSpec(name, nlist=40, nprobe=8), x)
  alone = [engine.search(q[i:i + 1], 30) for i in (0, 1)]
  seen = []
  searched = engines.distinct_rows(q[[0, 1, 0, 0]], lambda b: (seen.append(len(b)),
                                                            engine.search(b, 30))[1])
  assert seen == [2]
  padded = engine.search(q[[0, 1, 0, 0]], 30)
  for got in (searched, padded):
    for row, i in enumerate((0, 1, 0, 0)):
      if name.startswith('faiss'):
        # Exact: faiss searches each query of a batch this small (< its BLAS threshold, 20
        # queries) by the same code, whatever the other queries: the same bits.
        np.testing.assert_array_equal(got[1][row], alone[i][1][0])
        np.testing.assert_array_equal(got[0][row], alone[i][0][0])
      else:  # qdrant's scores of a batch and of a lone query differ in their last bits
        assert_same_ranking(got[1][row].tolist(), got[0][row], alone[i][1][0].tolist(),
                            alone[i][0][0], err_msg=f'{name} row {row}')
        np.testing.assert_allclose(got[0][row], alone[i][0][0], rtol=0, atol=1e-6)
  # no repeat: the batch as it is, to the same search (exact)
  np.testing.assert_array_equal(engine.search(q[:3], 30)[1], engines.distinct_rows(
      q[:3], lambda b: engine.search(b, 30))[1])


def test_faiss_index_saves_and_loads(collection, tmp_path, monkeypatch):
  x, q, _ = collection
  spec = engines.EngineSpec('faiss-hnsw')
  built = saved_engines.build(spec, x)
  path = built.save(str(tmp_path / 'photos.faiss'))
  loaded = engines.FaissIndex.load(path, spec)
  # Exact: the index read back is the one written, searched by the same code.
  np.testing.assert_array_equal(loaded.search(q, 50)[1], built.search(q, 50)[1])
  assert list(tmp_path.iterdir()) == [tmp_path / 'photos.faiss']  # no temporary left
  # A write that fails half-way (a full disk) leaves the saved index and no temporary.
  faiss = engines._faiss()  # pylint: disable=protected-access

  def half_written(index, name):
    with open(name, 'wb') as f:
      f.write(b'half')
    raise RuntimeError('No space left on device')

  monkeypatch.setattr(faiss, 'write_index', half_written)
  with pytest.raises(RuntimeError, match='No space'):
    built.save(path)
  assert list(tmp_path.iterdir()) == [tmp_path / 'photos.faiss']
  monkeypatch.undo()
  with pytest.raises(InputError, match='no faiss index'):
    engines.FaissIndex.load(str(tmp_path / 'nope'), spec)
  with pytest.raises(InputError, match='unknown engine'):
    engines.EngineSpec('annoy')


def test_recall_counts_shared_rows():
  assert engine_tuning.recall(np.array([[1, 2, -1]]), np.array([[2, 3, 4]])) == pytest.approx(1 / 3)


def _as_dict(result):
  return {f: list(getattr(result, f)) for f in ('photo_ids', 'categories', 'category_names',
                                                'scores')}


def test_retriever_with_an_exhaustive_engine_gives_the_exact_lists(tiny_synthetic, tiny_colt):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  exact = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store)
  spec = engines.EngineSpec('faiss-ivf', nlist=4, nprobe=4)
  faiss = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store, spec)
  queries = np.asarray(store.queries)[:4]
  # XLA's exact search and faiss's inner products: the same lists up to ties.
  for i, (a, b) in enumerate(zip(exact.search_batch(queries), faiss.search_batch(queries))):
    assert_same_result(_as_dict(b), _as_dict(a), err_msg=f'query {i}')
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
  approx = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(
      store, engines.EngineSpec('faiss-hnsw'))
  assert len(approx.search(queries[0]).photo_ids) == 50
  # A padded batch (the service's: its first query repeated) does each distinct query once,
  # with phi at the batch's size: every row is the list of its query alone.
  padded = faiss.search_batch(queries[[0, 1, 0, 0]])
  for got, i in zip(padded, (0, 1, 0, 0)):
    alone = faiss.search(queries[i])
    # phi at 2 rows and at 4 are two programs: the same list up to float32 rounding.
    assert_same_result(_as_dict(got), _as_dict(alone), err_msg=f'query {i}')


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
  built = saved_engines.build(engines.EngineSpec(name, nprobe=256), x)
  assert built.params == {k: v for k, v in expected.items() if k != 'train_rows'}
  n = min(m, 10)
  rows = built.search(q, n)[1]
  assert rows.shape == (20, n) and (rows >= 0).all()
  if name != 'faiss-ivfpq':  # every cell searched: exact
    exact = np.asarray(saved_engines.build(engines.EngineSpec(), x).search(q, n)[1])
    assert engine_tuning.recall(rows, exact) >= 0.95


def test_engines_that_cannot_fit_refuse_in_one_line():
  x = _clustered(m=20, centres=5)[0][:10]
  message = ('faiss-ivfpq cannot be built for 10 photos (10 training rows): product '
             'quantisation needs at least 16 (256 for 8-bit codes); use faiss-ivf, '
             'faiss-hnsw or exact')
  with pytest.raises(engines.EngineSizeError) as e:
    saved_engines.build(engines.EngineSpec('faiss-ivfpq'), x)
  assert str(e.value) == message
  with pytest.raises(engines.EngineSizeError, match='faiss-ivfpq cannot be built for 5000 '
                     r'photos \(10 training rows\)'):
    engines.fit(engines.EngineSpec('faiss-ivfpq', train_rows=10), 5000, 32)
  for name in engines.SAVED_ENGINES:
    with pytest.raises(engines.EngineSizeError, match=f'^{name} cannot be built for an empty '
                       r'collection \(0 photos\)$'):
      saved_engines.build(engines.EngineSpec(name), np.zeros((0, 32), np.float32))
  # cells asked for beyond what the rows can train are capped (and logged)
  assert engines.fit(engines.EngineSpec('faiss-ivf', nlist=500), 1000, 32)['nlist'] == 25


@pytest.mark.parametrize('name', ['faiss-hnsw', 'faiss-ivfsq', 'qdrant'])
def test_saved_engines_load_and_answer_as_built(collection, tmp_path, name):
  x, q, _ = collection
  x = x[:600]  # Qdrant's local mode writes point by point
  spec = engines.EngineSpec(name, nlist=10, nprobe=10)
  info = saved_engines.rebuild(spec, x, str(tmp_path / name))
  assert info['action'] == 'built' and info['rows'] == len(x) and info['spec']['name'] == name
  assert saved_engines.read_saved(str(tmp_path / name)) == info
  loaded = saved_engines.load_saved(str(tmp_path / name))
  found = loaded.search(q, 50)[1]
  live = saved_engines.build(spec, x).search(q, 50)[1]
  assert engine_tuning.recall(found, live) >= (1.0 if name != 'faiss-hnsw' else 0.95)
  if name == 'qdrant':
    loaded.close()
  with pytest.raises(InputError, match='no saved engine'):
    saved_engines.load_saved(str(tmp_path))


def test_a_saved_ivf_engine_is_updated_when_little_changed(collection, tmp_path):
  x, q, _ = collection
  spec = engines.EngineSpec('faiss-ivf', nlist=40, nprobe=40)
  first = saved_engines.rebuild(spec, x[:5000], str(tmp_path / 'a'))
  faiss = engines._faiss()  # pylint: disable=protected-access

  def centroids(folder):
    index = faiss.read_index(str(folder / 'index.faiss'))  # kept alive while read
    return np.array(faiss.extract_index_ivf(index).quantizer.reconstruct_n(0, 40))

  small = saved_engines.rebuild(spec, x[:5500], str(tmp_path / 'b'), previous=str(tmp_path / 'a'),
                          changed_fraction=0.1)
  assert small['action'] == 'updated' and small['rows'] == 5500
  # Exact: the update keeps the previous centroids (copied, not computed again).
  np.testing.assert_array_equal(centroids(tmp_path / 'b'), centroids(tmp_path / 'a'))
  assert_top_k(saved_engines.load_saved(str(tmp_path / 'b')).search(q, 20)[1],
                         q @ x[:5500].T, 'updated')  # every cell searched: exact up to ties
  big = saved_engines.rebuild(spec, x, str(tmp_path / 'c'), previous=str(tmp_path / 'a'),
                        changed_fraction=0.6)
  assert big['action'] == 'rebuilt' and first['action'] == 'built'


# ----------------------------------------------------------------------------- nprobe for a recall


def test_nprobe_ladder_grows_by_half_or_double_and_ends_at_every_cell():
  assert engine_tuning.nprobe_ladder(40) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40]
  assert engine_tuning.nprobe_ladder(4) == [1, 2, 3, 4]
  assert engine_tuning.nprobe_ladder(1) == [1]


@pytest.mark.parametrize('chunk', [1 << 18, 700, 30])  # one scan, several, fewer rows than n
def test_sample_neighbours_are_the_exact_top_n_of_other_rows(collection, chunk):
  x = collection[0]
  queries, exact, own = engine_tuning.sample_neighbours(x, 50, count=12, seed=3, chunk=chunk)
  assert queries.shape == (12, 32) and exact.shape == (12, 50) and len(set(own)) == 12
  np.testing.assert_array_equal(queries, x[own])  # rows copied: exact
  scores = queries @ x.T
  scores[np.arange(12), own] = -np.inf  # a query is not its own neighbour
  # Products in chunks of another size may round otherwise: the top 50 up to ties.
  assert_top_k(exact, scores, f'chunk {chunk}')
  assert not (exact == own[:, None]).any()
  # a collection of three rows: each query has two others
  small = engine_tuning.sample_neighbours(x[:3], 50, count=5)
  assert small[1].shape == (3, 2) and small[2].tolist() == [0, 1, 2]


def test_tune_nprobe_picks_the_fewest_cells_that_reach_the_target(collection):
  x, q, exact = collection
  engine = saved_engines.build(engines.EngineSpec('faiss-ivf', nlist=40, nprobe=1), x)
  tuning = engine_tuning.tune_nprobe(engine, q, exact, 0.97)
  assert tuning['reached'] and tuning['n'] == 100 and tuning['queries'] == 20
  ladder = engine_tuning.nprobe_ladder(40)
  tried = tuning['tried']
  assert [p for p, _ in tried] == ladder[:len(tried)] and tried[-1][0] == tuning['nprobe']
  assert all(r < 0.97 for _, r in tried[:-1]) and tried[-1][1] >= 0.97
  assert 1 < tuning['nprobe'] < 40 and engine.spec.nprobe == tuning['nprobe']
  assert engine_tuning.recall(engine.search(q, 100)[1], exact) == tuning['recall']
  # quantised scores cap the recall: the fewest cells with the best recall, not reached
  pq = saved_engines.build(engines.EngineSpec('faiss-ivfpq', nlist=20), x)
  capped = engine_tuning.tune_nprobe(pq, q, exact, 1.0)
  best = max(r for _, r in capped['tried'])
  assert not capped['reached'] and capped['recall'] == best < 1.0
  assert capped['nprobe'] == min(p for p, r in capped['tried'] if r == best)
  assert pq.spec.nprobe == capped['nprobe'] and len(capped['tried']) == len(
      engine_tuning.nprobe_ladder(20))
  with pytest.raises(ValueError, match='tune_nprobe needs an IVF engine'):
    engine_tuning.tune_nprobe(saved_engines.build(engines.EngineSpec('faiss-hnsw'), x[:500]), q,
                              exact, 0.9)


def test_target_recall_is_checked_in_one_line():
  with pytest.raises(InputError, match=r'^--target_recall must be in \[0, 1\], got 1.5$'):
    engines.EngineSpec('faiss-ivf', target_recall=1.5)
  with pytest.raises(InputError, match='^--target_recall applies to faiss-ivf, faiss-ivfsq, '
                     'faiss-ivfpq, not faiss-hnsw$'):
    engines.EngineSpec('faiss-hnsw', target_recall=0.9)


def test_an_engine_with_a_target_recall_picks_saves_and_loads_its_nprobe(collection, tmp_path):
  x, q, _ = collection
  spec = engines.EngineSpec('faiss-ivfsq', nlist=40, target_recall=0.9, recall_n=50)
  info = saved_engines.rebuild(spec, x[:5000], str(tmp_path / 'a'))
  tuning = info['tuning']
  assert tuning['reached'] and tuning['n'] == 50 and tuning['queries'] == engine_tuning.TUNE_QUERIES
  assert 1 <= tuning['nprobe'] < 40 and tuning['recall'] >= 0.9
  assert info['spec'] == {**info['spec'], 'nprobe': 32, 'target_recall': 0.9}  # the settings
  loaded = saved_engines.load_saved(str(tmp_path / 'a'))
  assert loaded.spec.nprobe == tuning['nprobe'] and loaded.tuning == tuning
  assert saved_engines.load_saved(str(tmp_path / 'a'), nprobe=40).spec.nprobe == 40
  # on unseen queries, the picked setting is near the target too (same distribution)
  exact = np.asarray(saved_engines.build(engines.EngineSpec(), x[:5000]).search(q, 50)[1])
  assert engine_tuning.recall(loaded.search(q, 50)[1], exact) >= 0.85
  # an update refills the trained cells and picks nprobe again over the new rows
  updated = saved_engines.rebuild(spec, x[:5500], str(tmp_path / 'b'), previous=str(tmp_path / 'a'),
                            changed_fraction=0.1)
  assert updated['action'] == 'updated' and updated['tuning']['reached']
  assert saved_engines.load_saved(str(tmp_path / 'b')).spec.nprobe == updated['tuning']['nprobe']
  # built for the Retriever (saved_engines.build): the same choice, kept on the engine (the
  # same build and tuning again, on this machine: deterministic)
  built = saved_engines.build(spec, x[:5000])
  assert built.tuning['tried'] == tuning['tried'] and built.spec.nprobe == tuning['nprobe']
  # no target: nprobe as given, nothing tuned or recorded
  plain = saved_engines.rebuild(engines.EngineSpec('faiss-ivfsq', nlist=40, nprobe=5), x[:5000],
                          str(tmp_path / 'c'))
  assert 'tuning' not in plain and saved_engines.load_saved(str(tmp_path / 'c')).spec.nprobe == 5


@pytest.mark.slow
def test_index_collection_cli_picks_nprobe_for_target_recall(tiny_clip_dir, tmp_path):
  """data_prep/index_collection.py --target_recall: IVF engines pick nprobe, say so, and a
  rerun with nothing changed keeps them."""
  photos = tmp_path / 'photos'
  photos.mkdir()
  for i in range(100):  # 100 photos: 2 IVF cells (at least 39 rows each)
    random_image(i, (8, 8)).save(photos / f'p{i:03d}.png')
  out = tmp_path / 'store'
  run = lambda *a: preloaded.run(
      [sys.executable, os.path.join(REPO, 'data_prep', 'index_collection.py'),
       f'--images={photos}', '--encoder=clip', f'--model={tiny_clip_dir}', f'--out={out}',
       '--noprogress', *a], capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PYTHONPATH=REPO))
  done = run('--engines=faiss-ivf,faiss-hnsw', '--target_recall=0.99')
  assert done.returncode == 0, done.stderr[-2000:]
  info = saved_engines.read_saved(str(out / 'engines' / 'faiss-ivf'))
  tuning = info['tuning']
  assert info['spec']['target_recall'] == 0.99 and tuning['reached'] and tuning['n'] == 99
  assert tuning['nprobe'] in (1, 2) and 'tuning' not in saved_engines.read_saved(
      str(out / 'engines' / 'faiss-hnsw'))
  line = (f'  engine faiss-ivf: built (nlist 2, nprobe {tuning["nprobe"]}: recall@99 '
          f'{tuning["recall"]:.3f} on 100 sample photos (target 0.99))')
  assert line in done.stdout.splitlines(), done.stdout
  again = run('--engines=faiss-ivf,faiss-hnsw', '--target_recall=0.99')
  assert again.returncode == 0, again.stderr[-2000:]
  assert '  photos up to date: nothing added, changed or removed' in again.stdout
  assert line.replace('built', 'kept') in again.stdout.splitlines()
  for args, message in (
      (['--target_recall=0.9'], '--target_recall needs --engines naming an IVF engine'),
      (['--engines=faiss-hnsw', '--target_recall=0.9'],
       '--target_recall applies to IVF engines'),
      (['--engines=faiss-ivf', '--target_recall=2'], 'target_recall')):
    bad = run(*args)
    assert bad.returncode != 0 and message in bad.stderr.strip().splitlines()[-1], bad.stderr
