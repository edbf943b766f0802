"""Queries by a photo of the store (`photo_id`, the page's "more like this") and by an uploaded
image (`image`, base64) in the service (issue 65 item 4): the stored feature (no encoding) or
the CLIP image tower's, the query photo left out of its own results, k photos for every
method, one meaning of `score` (the cosine similarity over the features searched), phi's
label names (its query class is "query"), and each bad input refused in one line naming the
field (item 6)."""
import base64
import os
import warnings

import numpy as np
import pytest

from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.inference import store_search
from colt_jax.service import app as app_lib
from colt_jax.service import service as service_lib
from colt_jax.service import searcher as searcher_lib
from float_compare import assert_close  # pylint: disable=g-bad-import-order
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order

with warnings.catch_warnings():
  warnings.simplefilter('ignore')
  from fastapi.testclient import TestClient  # pylint: disable=g-import-not-at-top

METHODS = ('colt', 'topk', 'mmr', 'msd', 'dpp', 'umons')
WARM = (searcher_lib.ListShape(8, 1, 8),)


@pytest.fixture(scope='module')
def colt(served):
  store_dir, model = served
  return retriever.Retriever.from_pretrained(model).index(features.load(store_dir))


@pytest.fixture(scope='module')
def client(served, colt):
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), store_dir=store_dir,
                           config=service_lib.ServiceConfig(max_batch_size=4, max_wait_ms=5.0,
                                                            warm_settings=WARM))
  with TestClient(app) as c:
    yield c


def _file(store_dir, photo_id):
  return os.path.join(features.load(store_dir).meta['source'], *photo_id.split('/'))


def _b64(path):
  with open(path, 'rb') as f:
    return base64.b64encode(f.read()).decode()


def _post(client, **body):
  got = client.post('/search', json={'k': 8, 'per_category': 1, 'list_length': 8, **body})
  return got.status_code, got.json()


def test_a_photo_query_is_its_stored_feature_without_the_photo_itself(served, colt, client):
  """photo_id: every method lists k photos, none of them the query photo; its list is the
  vector query of the photo's stored feature with that photo left out; `photo_id` echoes it."""
  store = features.load(served[0])
  photo = str(store.photo_ids[3])
  vector = np.asarray(store.photos[3], np.float32)
  for method in METHODS:
    status, answer = _post(client, photo_id=photo, method=method)
    assert status == 200, answer
    ids = [r['photo_id'] for r in answer['results']]
    assert len(ids) == 8 and photo not in ids, (method, ids)
    assert answer['photo_id'] == photo and answer['query'] is None
    status, plain = _post(client, vector=vector.tolist(), method=method, list_length=20)
    assert status == 200, plain
    if method in ('colt', 'topk'):  # the same list, the query photo taken out
      want = [r for r in plain['results'] if r['photo_id'] != photo][:8]
      assert_same_ranking(ids, [r['score'] for r in answer['results']],
                          [r['photo_id'] for r in want], [r['score'] for r in want],
                          err_msg=method)


def test_every_methods_score_is_the_cosine_similarity_over_the_features_searched(
    served, colt, client):
  """`score` means one thing for every method: the photo's cosine similarity to the query
  over h^ (g's re-encoding: the features this model's service searches); mmr's, msd's and
  dpp's own objective is `objective`, null for the others; no score is -0.0."""
  store = features.load(served[0])
  hat = colt.reencode(np.asarray(store.photos))
  row = {str(p): i for i, p in enumerate(store.photo_ids)}
  query = np.asarray(store.photos[5], np.float32)
  for method in METHODS:
    status, answer = _post(client, vector=query.tolist(), method=method)
    assert status == 200, answer
    got = np.asarray([r['score'] for r in answer['results']], np.float32)
    want = hat[[row[r['photo_id']] for r in answer['results']]] @ query
    assert_close(got, want.astype(np.float32), err_msg=method)
    objectives = [r['objective'] for r in answer['results']]
    if method in ('mmr', 'msd', 'dpp'):
      assert all(isinstance(o, float) for o in objectives), (method, objectives)
    else:
      assert objectives == [None] * 8, method
    assert not any(np.signbit(s) and s == 0 for s in got), method


def test_phis_labels_are_named_as_phi_names_them(colt, client):
  """colt's photos of group -1 carry phi's label name ("irrelevant" or "query", phi's query
  class, as search.py prints them); the model-free methods' carry none."""
  names = set(colt.category_names)
  for photo in ('a/p00.png', 'b/c/p30.png'):
    status, answer = _post(client, photo_id=photo, method='colt', k=20, list_length=20)
    assert status == 200, answer
    for r in answer['results']:
      if r['group'] >= 0:
        assert r['category'] == colt.category_names[r['group']]
      else:
        assert r['category'] in ('irrelevant', 'query'), r
      assert r['category'] in names | {'irrelevant', 'query'}
  status, answer = _post(client, photo_id='a/p00.png', method='topk')
  assert {(r['group'], r['category']) for r in answer['results']} == {(-1, None)}


def test_an_uploaded_image_is_encoded_by_the_stores_clip_image_tower(served, colt, client):
  """image: a store photo's file uploaded (base64, or as a data: URL) is that photo: left out
  of its results, named in `photo_id`, its list that of the photo's own feature up to f's
  rounding; another image (not the store's) is listed with every photo a candidate."""
  store_dir, _ = served
  photo = 'b/c/p25.png'
  encoded = _b64(_file(store_dir, photo))
  by_id = _post(client, photo_id=photo, method='topk')[1]
  for body in (encoded, 'data:image/png;base64,' + encoded):
    status, answer = _post(client, image=body, method='topk')
    assert status == 200, answer
    assert answer['photo_id'] == photo
    assert answer['timing_ms']['encode'] > 0
    assert_same_ranking([r['photo_id'] for r in answer['results']],
                        [r['score'] for r in answer['results']],
                        [r['photo_id'] for r in by_id['results']],
                        [r['score'] for r in by_id['results']])
  want = colt.encode_images([_file(store_dir, photo)])[0]
  assert_close(want, np.asarray(features.load(store_dir).photos[
      list(map(str, features.load(store_dir).photo_ids)).index(photo)], np.float32))
  import io  # pylint: disable=g-import-not-at-top
  from tiny_clip import random_image  # pylint: disable=g-import-not-at-top
  other = io.BytesIO()
  random_image(999, (8, 8)).save(other, format='PNG')
  for method in ('colt', 'dpp'):
    status, answer = _post(client, image=base64.b64encode(other.getvalue()).decode(),
                           method=method)
    assert status == 200 and answer['photo_id'] is None and len(answer['results']) == 8


def test_healthz_says_which_queries_are_taken(client):
  health = client.get('/healthz').json()
  assert health['images'] and health['photo_queries'] and health['image_queries']


@pytest.mark.parametrize('body,field', [
    ({'photo_id': 'nope.png'}, "photo_id: no photo 'nope.png' in the store"),
    ({'photo_id': ' '}, 'photo_id: empty'),
    ({'image': 'not base64!'}, 'image: not base64'),
    ({'image': ''}, 'image: empty'),
    ({'image': base64.b64encode(b'GIF89a but not an image').decode()},
     'image: not an image that can be read'),
    ({'photo_id': 'a/p00.png', 'query': 'x'}, 'query: give exactly one of'),
    ({'vector': [1.0, 0.0]}, 'vector: 2 numbers'),
    ({'photo_id': 'a/p00.png', 'method': 'nope'}, 'method:'),
    ({'photo_id': 'a/p00.png', 'method': 'mmr', 'params': {'theta': 0.5}},
     'params.theta: not a parameter of mmr'),
])
def test_a_bad_query_is_one_line_naming_the_field(client, body, field):
  got = client.post('/search', json=body)
  assert got.status_code == 422, got.text
  error = got.json()['error']
  assert field in error and '\n' not in error, error


def test_an_image_on_a_text_store_is_refused_naming_the_field(tiny_synthetic):
  """A store without an image tower (synthetic features: no encoder) refuses `image` in one
  line naming the field and what to send instead; `photo_id` works there."""
  import glob  # pylint: disable=g-import-not-at-top
  store_dir = sorted(glob.glob(os.path.join(str(tiny_synthetic), '**', 'meta.json'),
                               recursive=True))[0]
  store = features.load(os.path.dirname(store_dir))
  app = app_lib.create_app(store_search.StoreSearch.from_store(store), store=store,
                           config=service_lib.ServiceConfig(max_batch_size=2,
                                                            warm_settings=WARM),
                           warm_up=False)
  with TestClient(app) as c:
    assert not c.get('/healthz').json()['image_queries']
    got = c.post('/search', json={'image': base64.b64encode(b'x').decode(), 'k': 8,
                                  'list_length': 8})
    assert got.status_code == 422 and got.json()['error'].startswith('image: '), got.text
    assert 'photo_id' in got.json()['error']
    photo = str(store.photo_ids[0])
    got = c.post('/search', json={'photo_id': photo, 'method': 'topk', 'k': 8,
                                  'list_length': 8})
    assert got.status_code == 200, got.text
    assert photo not in [r['photo_id'] for r in got.json()['results']]
