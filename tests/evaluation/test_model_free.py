"""A store without a model (issue 65, items 1 and 6): experiments/search.py --method and
experiments/serve.py rank a store indexed from a folder of photos (the tiny CLIP) with the
model-free methods (topk, mmr, msd, dpp, umons) over the store's own features, the default
method and parameters from colt_jax/evaluation/model_free.json; colt is refused without a
model, saying what works now and how to get one; bad input is one line."""
import json
import os
import signal
import time
import urllib.request
import warnings

import numpy as np
import pytest

from colt_jax.data import features
from colt_jax.encoders import clip
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.reproduction import model_free_rule
from colt_jax.inference import store_search
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.service import app as app_lib
from colt_jax.service import schemas
from colt_jax.service import searcher as searcher_lib
from colt_jax.service import service as service_lib
from colt_jax.util.errors import InputError
import float_compare  # pylint: disable=g-bad-import-order
from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
from service_run import start_serve  # pylint: disable=g-bad-import-order
from model_free_stores import PHOTOS, _run, _store_write, minilm_store, photos  # pylint: disable=g-bad-import-order,unused-import

with warnings.catch_warnings():  # starlette's TestClient would rather have httpx2, not here
  warnings.simplefilter('ignore')
  from fastapi.testclient import TestClient  # pylint: disable=g-import-not-at-top

QUERY = 'the view'


def _assert_ranked(results, expected, err_msg='', ulps=float_compare.ULPS):
  """`results` ({'photo_id', 'score'} rows) are the list `expected` [(photo id, score)]:
  exact where scores are separated, photos tied within float32 rounding may trade places
  (the service and the command line compute in other programs than this process)."""
  float_compare.assert_same_ranking([r['photo_id'] for r in results],
                                    [r['score'] for r in results], [p for p, _ in expected],
                                    [s for _, s in expected], err_msg=err_msg, ulps=ulps)


def _expected(store_dir, method, query, length, **params):
  """[(photo id, score)] of `method` over the store's own features: the code evaluate.py
  scores (`methods.rank_baseline`) over the 200 most similar photos by exact cosine, with
  model_free.json's parameters and `params` (two topics, as the service runs a lone
  request; mmr, msd and dpp at the full list length, then cut, as the service computes them:
  tests/service/test_compile_cache.py checks that list against the one computed at `length`);
  each score the photo's cosine similarity to the query (every method's)."""
  store = features.load(store_dir)
  rows = np.asarray(store.photos)
  sims = rows @ query
  top = np.lexsort((np.arange(len(sims)), -sims))[:200]
  ids = tuple(str(store.photo_ids[i]) for i in top)
  topics = [TopicCandidates(t, ids, None, query, rows[top]) for t in (0, 1)]
  merged = model_free.with_params(model_free.default_params(), method, params)
  full = searcher_lib.LENGTH if method in model_free.GREEDY else length
  entries = evaluation.rank_baseline(method, topics, merged, k=full)[0][:length]
  return [(p, float(np.float32(c))) for p, c, _ in model_free.scored(topics[0], entries, method)]


# What a refused `colt` names: the default (model_free.json's), then the other methods.
_DEFAULT_AND_OTHERS = (f'{model_free.default_method()} (the default), ' + ', '.join(
    m for m in model_free.METHODS if m != model_free.default_method()))


def test_the_defaults_are_one_file_written_by_the_rule():
  data = model_free.defaults()
  assert data['method'] == model_free.default_method()
  assert data['rule']['name'] == model_free_rule.NAME  # experiments/choose_model_free.py's
  assert data['evidence']['cv_F1_at_20'][data['method']] == max(
      data['evidence']['cv_F1_at_20'].values())
  params = model_free.default_params()
  assert params.dpp_theta == data['params']['dpp']['theta']
  assert params.diversity == data['params']['mmr']['lambda']
  assert params.msd_tradeoff == data['params']['msd']['lambda']
  assert schemas.METHODS == ('colt', 'topk', 'mmr', 'msd', 'dpp', 'umons')
  with pytest.raises(InputError, match=r'params.lambda: not a parameter of dpp \(it takes theta\)'):
    model_free.with_params(params, 'dpp', {'lambda': 0.5})


# ---------------------------------------------------------------------------- search.py


def test_search_cli_ranks_a_store_with_every_model_free_method(photos, tiny_clip_dir):
  store_dir, folder = photos
  query = clip.ClipEncoder(tiny_clip_dir).encode_texts([QUERY])[0]
  for method in model_free.METHODS:
    out = _run('search.py', f'--store={store_dir}', f'--query={QUERY}', '--k=6',
               f'--method={method}', '--json')
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = [json.loads(l) for l in out.stdout.strip().splitlines()]
    expected = _expected(store_dir, method, query, 6)
    _assert_ranked(row['results'], expected, method)
    assert all(r['category'] is None for r in row['results'])
  # No --method: model_free.json's default, named in the table's first line.
  table = _run('search.py', f'--store={store_dir}', f'--query={QUERY}', '--k=5')
  assert table.returncode == 0, table.stderr[-2000:]
  lines = table.stdout.strip().splitlines()
  default = model_free.default_method()
  assert lines[0] == f'{QUERY}: 5 photos by {default}' and len(lines) == 6
  expected = _expected(store_dir, default, query, 5)
  # The table's scores have 4 decimals: a tie band of ~1e-4.
  _assert_ranked([{'photo_id': l.split()[-1], 'score': float(l.split()[1])} for l in lines[1:]],
                 expected, 'table', ulps=1024)
  # --params: the method's parameters as POST /search takes them.
  out = _run('search.py', f'--store={store_dir}', f'--query={QUERY}', '--k=5', '--method=dpp',
             '--params={"theta": 0.5}', '--json')
  assert out.returncode == 0, out.stderr[-2000:]
  _assert_ranked(json.loads(out.stdout)['results'],
                 _expected(store_dir, 'dpp', query, 5, theta=0.5), 'dpp theta 0.5')
  # By a photo of the store (CLIP stores): photos like it, the photo itself left out.
  photo = os.path.join(folder, 'a', 'p03.png')
  out = _run('search.py', f'--store={store_dir}', f'--image={photo}', '--k=4', '--method=topk',
             '--json')
  assert out.returncode == 0, out.stderr[-2000:]
  row = json.loads(out.stdout)
  assert row['image'] == photo and row['photo_id'] == 'a/p03.png'
  assert 'a/p03.png' not in [r['photo_id'] for r in row['results']]
  assert len(row['results']) == 4
  # An approximate engine over the store's features.
  out = _run('search.py', f'--store={store_dir}', f'--query={QUERY}', '--k=5', '--method=mmr',
             '--engine=faiss-hnsw', '--json')
  assert out.returncode == 0, out.stderr[-2000:]
  assert len(json.loads(out.stdout)['results']) == 5


def test_search_cli_bad_input_without_a_model_is_one_line(photos, minilm_store, tmp_path):
  store_dir, folder = photos
  search = lambda *a: _run('search.py', f'--query={QUERY}', *a)
  assert_bad_input(search(f'--store={tmp_path}'), f'{tmp_path}: not a feature store')
  empty = _store_write(tmp_path / 'empty', 'clip:tiny', 0)
  assert_bad_input(search(f'--store={empty}'), f'{empty}: the store has no photos')
  assert_bad_input(search(f'--store={store_dir}', '--method=bm25'),
                   "--method: unknown method 'bm25'", 'topk, mmr, msd, dpp, umons')
  assert_bad_input(search(f'--store={store_dir}', '--method=dpp', '--params={"lambda": 0.5}'),
                   'params.lambda: not a parameter of dpp (it takes theta)')
  assert_bad_input(search(f'--store={store_dir}', '--method=mmr', '--params={"lambda": 2}'),
                   'params.lambda: must be in [0.0, 1.0], got 2')
  assert_bad_input(search(f'--store={store_dir}', '--method=mmr', '--params=[1]'),
                   '--params: a JSON object')
  assert_bad_input(search(f'--store={store_dir}', '--method=mmr', '--per_category=2'),
                   '--per_category applies to colt, not mmr')
  # colt without a model: what works now, and how to get a learned model for the encoder.
  assert_bad_input(search(f'--store={store_dir}', '--method=colt'), 'colt needs a CoLT model',
                   _DEFAULT_AND_OTHERS, 'data_prep/make_dataset.py')
  assert_bad_input(search(f'--store={minilm_store}', '--method=colt'), 'colt needs a CoLT model',
                   _DEFAULT_AND_OTHERS, '`make model`', 'div400-minilm-colt-pairs-text-only')
  photo = os.path.join(folder, 'a', 'p00.png')
  assert_bad_input(_run('search.py', f'--store={minilm_store}', f'--image={photo}'),
                   f'store {minilm_store} has minilm text features: --image needs a CLIP store')


# ---------------------------------------------------------------------------- the service


@pytest.fixture(scope='module')
def client(photos):
  """The app over the store alone (no model), warmed for k 5, lists of 8."""
  store_dir, _ = photos
  store = features.load(store_dir)
  app = app_lib.create_app(
      store_search.StoreSearch.from_store(store), store=store, store_dir=store_dir,
      config=service_lib.ServiceConfig(max_batch_size=4, max_wait_ms=20.0,
                                       warm_settings=(searcher_lib.ListShape(5, 1, 8),)))
  with TestClient(app) as c:
    yield c


def test_the_service_without_a_model_answers_every_model_free_method(client, photos,
                                                                     tiny_clip_dir):
  store_dir, _ = photos
  health = client.get('/healthz').json()
  assert health['model'] is None and health['method_default'] == model_free.default_method()
  assert health['methods'] == list(model_free.METHODS) and health['text_queries']
  svc = client.app.state.service
  serving = svc.serving_compilations
  query = svc.searcher.search.encode_queries([QUERY])[0]  # f's text tower, as it runs
  params = {'mmr': {'lambda': 0.6}, 'msd': {'lambda': 0.2}, 'dpp': {'theta': 0.7},
            'umons': {'eps': 0.2, 'threshold': 0.3}}
  for method in model_free.METHODS:
    for given in ({}, params.get(method, {})):
      got = client.post('/search', json={'query': QUERY, 'k': 5, 'list_length': 8,
                                         'method': method, 'params': given})
      assert got.status_code == 200, got.text
      answer = got.json()
      expected = _expected(store_dir, method, query, 8, **given)
      _assert_ranked(answer['results'], expected, method)
      assert answer['method'] == method and all(r['group'] == -1 for r in answer['results'])
      assert all(r['has_image'] for r in answer['results'])
  # No method: the store's default (model_free.json); all of it through the warmed programs.
  answer = client.post('/search', json={'query': QUERY, 'k': 5, 'list_length': 8}).json()
  default = model_free.default_method()
  assert answer['method'] == default
  _assert_ranked(answer['results'], _expected(store_dir, default, query, 8), 'default')
  assert svc.serving_compilations == serving == 0
  np.testing.assert_allclose(query, clip.ClipEncoder(tiny_clip_dir).encode_texts([QUERY])[0],
                             atol=1e-5)
  # Batched together, each answer is its own alone.
  bodies = [{'query': QUERY, 'k': 5, 'list_length': 8, 'method': m}
            for m in ('topk', 'dpp', 'msd', 'dpp')]  # a batch of at most --max_batch_size 4
  alone = [client.post('/search', json=b).json()['results'] for b in bodies]
  answers = svc.searcher  # the batch through the searcher at once
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  from colt_jax.service import request_batching  # pylint: disable=g-import-not-at-top
  batch = [request_batching.Pending(schemas.SearchRequest(**b), time.perf_counter(),
                                    concurrent.futures.Future()) for b in bodies]
  for p in batch:
    p.future.set_running_or_notify_cancel()
  answers.run(batch)
  together = [answers.response(p.future.result())['results'] for p in batch]
  for a, b in zip(together, alone):  # other padded sizes: other programs
    _assert_ranked(a, [(r['photo_id'], r['score']) for r in b], 'batched')
  # A request without a method takes the default's parameters; others' are refused alone.
  bodies = [{'query': QUERY, 'k': 5, 'list_length': 8, 'params': {'lambda': 0.5}},
            {'query': QUERY, 'k': 5, 'list_length': 8, 'params': {'theta': 0.7}}]
  batch = [request_batching.Pending(schemas.SearchRequest(**b), time.perf_counter(),
                                    concurrent.futures.Future()) for b in bodies]
  for p in batch:
    p.future.set_running_or_notify_cancel()
  answers.run(batch)
  with pytest.raises(InputError, match=r'params.lambda: not a parameter of dpp'):
    batch[0].future.result()
  _assert_ranked(answers.response(batch[1].future.result())['results'],
                 _expected(store_dir, 'dpp', query, 8, theta=0.7), 'theta 0.7')


@pytest.mark.parametrize('body,needle', [
    ({'query': QUERY, 'method': 'colt'}, 'method: colt needs a CoLT model'),
    ({'vector': [0.6, 0.8]}, 'vector: 2 numbers, the store has 16-d features'),
    ({'query': QUERY, 'method': 'bm25'}, 'method:'),
    ({'query': QUERY, 'method': 'dpp', 'params': {'lambda': 0.5}},
     'params.lambda: not a parameter of dpp (it takes theta)'),
    ({'query': QUERY, 'method': 'msd', 'params': {'lambda': 1.5}},
     'params.lambda: must be in [0.0, 1.0]'),
    ({'query': QUERY, 'params': {'lambda': 0.5}},
     'params.lambda: not a parameter of dpp (it takes theta)'),
])
def test_the_service_without_a_model_refuses_bad_requests_naming_the_field(client, body,
                                                                          needle):
  got = client.post('/search', json=body)
  assert got.status_code == 422 and needle in got.json()['error'], got.text
  if body.get('method') == 'colt':
    assert 'offered here: topk, mmr, msd, dpp, umons' in got.json()['error']
    assert 'data_prep/make_dataset.py' in got.json()['error']


def test_serve_without_a_model_starts_and_answers(photos, tmp_path):
  store_dir, _ = photos
  proc, url, health = start_serve(tmp_path / 'log', '--store', store_dir, '--max_batch_size', 2,
                                  '--warm_settings', '6:1:6')
  try:
    assert health['model'] is None and health['methods'] == list(model_free.METHODS)
    post = urllib.request.Request(url + '/search', data=json.dumps(
        {'query': QUERY, 'k': 6, 'list_length': 6}).encode(),
                                  headers={'content-type': 'application/json'})
    with urllib.request.urlopen(post, timeout=60) as r:
      answer = json.load(r)
    assert answer['method'] == 'dpp' and len(answer['results']) == 6
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, (tmp_path / 'log').read_text()[-3000:]
    assert f'{PHOTOS} photos of {store_dir}, no model' in (tmp_path / 'log').read_text()
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()


def test_serve_refuses_colt_without_a_model_and_bad_stores_in_one_line(photos, minilm_store,
                                                                       tmp_path):
  store_dir, _ = photos
  serve = lambda *a: _run('serve.py', '--port=0', *a)
  assert_bad_input(serve(f'--store={store_dir}', '--methods=colt,dpp'),
                   '--methods: colt needs a CoLT model', _DEFAULT_AND_OTHERS,
                   'data_prep/make_dataset.py')
  assert_bad_input(serve(f'--store={minilm_store}', '--methods=colt'),
                   '--methods: colt needs a CoLT model', '`make model`')
  assert_bad_input(serve(f'--store={store_dir}', '--methods=bm25'), '--methods', 'bm25')
  assert_bad_input(serve(f'--store={tmp_path}'), f'{tmp_path}: not a feature store')
  empty = _store_write(tmp_path / 'empty', 'clip:tiny', 0)
  assert_bad_input(serve(f'--store={empty}'), f'{empty}: the store has no photos')
  assert_bad_input(serve(f'--store={store_dir}', '--dpp_theta=2'),
                   '--dpp_theta: must be in [0.0, 1.0], got 2')
