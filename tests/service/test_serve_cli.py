"""experiments/serve.py as a process: SIGTERM under load, bad flags in one line, list shapes up
to a bound, k photos when phi labels all irrelevant, routing, file records, the address."""
import concurrent.futures
import dataclasses
import json
import re
import signal
import time
import urllib.request

import jax
import numpy as np
import pytest

from colt_jax.evaluation import model_free
from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.service import app as app_lib
from colt_jax.util.errors import InputError
from colt_jax.service import schemas
from colt_jax.service import searcher as searcher_lib
from colt_jax.service import service as service_lib
from colt_jax.engines import engine_flags
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
import preloaded
from service_run import serve_command, start_serve  # pylint: disable=g-bad-import-order
from service_shared import PHOTOS, TEXTS, WARM, _scores, TestClient  # pylint: disable=g-bad-import-order


def test_serve_finishes_requests_in_flight_on_sigterm_then_exits_0(served, colt, tmp_path):
  store_dir, model = served
  proc, url, health = start_serve(
      tmp_path / 'log', '--store', store_dir, '--model', model, '--max_batch_size', 2,
      '--max_wait_ms', 1500, '--methods', 'colt', '--warm_settings', '20:1:50')
  try:
    assert health['photos'] == PHOTOS

    def ask(text):
      post = urllib.request.Request(url + '/search', data=json.dumps({'query': text}).encode(),
                                    headers={'content-type': 'application/json'})
      with urllib.request.urlopen(post, timeout=60) as r:
        return json.load(r)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
      answers = [pool.submit(ask, t) for t in TEXTS[:3]]
      time.sleep(0.5)  # in flight: two batched at once, the third waits 1.5 s for a partner
      proc.send_signal(signal.SIGTERM)
      for text, answer in zip(TEXTS, answers):
        got = answer.result(60)
        hit = colt.search_text(text)  # in this process: the same list up to ties
        assert_same_ranking([r['photo_id'] for r in got['results']], _scores(got),
                            list(hit.photo_ids), hit.scores, err_msg=text)
    assert proc.wait(60) == 0, (tmp_path / 'log').read_text()[-3000:]
    assert 'warmed up' in (tmp_path / 'log').read_text()
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()

def test_serve_refuses_bad_flags_in_one_line(served):
  store_dir, model = served
  cmd, env = serve_command('--store', store_dir, '--model', model, '--warm_settings', '20:1:50,20:30:50')
  assert_bad_input(preloaded.run(cmd, env=env, capture_output=True, text=True, timeout=300),
                   '--warm_settings: 20:30:50: per_category: must be <= k (20), got 30')
  with pytest.raises(InputError, match='--nprobe applies to --engine faiss-ivf or faiss-ivfsq '
                     'or faiss-ivfpq, not exact'):
    engine_flags.check('exact', {'nprobe': True})
  with pytest.raises(InputError, match=r'--max_batch_size must be in \[1, 64\], got 65'):
    service_lib.ServiceConfig(max_batch_size=65)
  assert searcher_lib.batch_sizes(24) == (2, 4, 8, 12, 16, 24)  # 17 runs at 24, not 32
  assert searcher_lib.batch_sizes(64) == (2, 4, 8, 12, 16, 24, 32, 48, 64)
  assert searcher_lib.batch_sizes(1) == (2,)  # a lone query runs at 2 rows

def test_new_list_shapes_compile_up_to_a_bound_then_are_refused(colt):
  """Each list shape a request brings compiles (every batch waiting) and stays compiled: past
  --max_new_shapes new ones, another is a 422 naming the fields, before it is batched."""
  svc = service_lib.Service(colt, service_lib.ServiceConfig(
      max_batch_size=4, warm_settings=WARM, max_new_shapes=2))
  request = lambda **kw: schemas.SearchRequest(**{'query': 'x', **kw})
  for shape in WARM:  # warmed: always served
    svc.check(request(k=shape.k, per_category=shape.per_category,
                      list_length=shape.list_length))
  svc.check(request(k=3, per_category=1, list_length=7))  # new: 1 of 2
  svc.check(request(k=3, per_category=1, list_length=7))  # admitted already
  svc.check(request(k=5, per_category=1, list_length=9))  # new: 2 of 2
  svc.check(request(method='topk', k=5, list_length=11))  # top-k compiles nothing per shape
  svc.check(request(k=3, per_category=1, list_length=9))  # colt's lists: one shape per k, X
  for method in ('mmr', 'msd', 'dpp'):  # lists at full length, then cut: no shape per length
    for length in (12, 13):
      svc.check(request(method=method, k=5, list_length=length))
  assert svc.new_shapes == 2
  with pytest.raises(InputError, match=r'^k, per_category: 4:2 is not compiled '
                     r'here, .*--max_new_shapes=2\); colt serves '):
    svc.check(request(k=4, per_category=2, list_length=8))
  with pytest.raises(InputError, match='--max_new_shapes must be in'):
    service_lib.ServiceConfig(max_new_shapes=-1)

def test_the_answer_holds_k_photos_when_phi_labels_them_all_irrelevant(served, colt):
  """Issue 65 item 4: a list of k (the page sends list_length = k) holds k photos whenever the
  store has them, for colt too: phi labelling every photo irrelevant leaves Eq. 6's head with
  one photo, and the answer is the full list's first k (the head, then the continuation), as
  search.py lists it."""
  classifier = colt.classifier
  params = jax.tree_util.tree_map(np.zeros_like, classifier.params)
  bias = np.zeros_like(params['classifier']['bias'])
  bias[classifier.space.irrelevant_id] = 10.0
  params['classifier']['bias'] = bias
  blind = retriever.Retriever(
      dataclasses.replace(classifier, params=params), colt.reencoder, colt.settings,
      colt.category_names, colt.text_encoder, encoder=colt.encoder).index(
          features.load(served[0]))
  query = colt.encode_queries(['the view'])[0]
  head = blind.with_settings(k=12, list_length=12).search(query)
  assert len(head.photo_ids) == 1  # Eq. 6 alone: one photo (the list is never empty)
  full = blind.with_settings(k=12).search(query)
  store = features.load(served[0])
  app = app_lib.create_app(blind, store=store, warm_up=False,
                           config=service_lib.ServiceConfig(max_batch_size=2))
  with TestClient(app) as c:
    for method in ('colt',) + model_free.METHODS:
      answer = c.post('/search', json={'query': 'the view', 'k': 12, 'per_category': 1,
                                       'list_length': 12, 'method': method}).json()
      assert len(answer['results']) == 12, (method, answer)
    answer = c.post('/search', json={'query': 'the view', 'k': 12, 'list_length': 12}).json()
  assert [r['photo_id'] for r in answer['results']] == list(full.photo_ids[:12])
  assert all(r['group'] == -1 for r in answer['results'])

def test_a_trailing_slash_is_a_404_not_a_redirect(client):
  got = client.post('/search/', json={'query': 'x'}, follow_redirects=False)
  assert got.status_code == 404 and got.json() == {'error': '/search/: no such path'}

def test_searches_are_answered_before_the_router(client, monkeypatch):
  """POST /search never reaches FastAPI's router (app._SearchLane answers it with the
  route's own function), while its route stays for /docs and other methods are routed."""
  route = next(r for r in client.app.routes if getattr(r, 'path', '') == '/search')

  async def unreachable(scope, receive, send):
    raise AssertionError('POST /search went through the router')

  before = client.post('/search', json={'query': TEXTS[0]}).json()['results']
  monkeypatch.setattr(route, 'app', unreachable)
  got = client.post('/search', json={'query': TEXTS[0]})
  assert got.status_code == 200, got.text
  assert got.json()['results'] == before and before  # the same program again: exact
  bad = client.post('/search', content=b'{"query": ')
  assert bad.status_code == 400 and 'error' in bad.json()
  assert client.get('/search').status_code == 405
  svc = client.app.state.service  # an error outside the search's own handling: 500, JSON

  def broken(answer):
    raise ValueError('no response')

  monkeypatch.setattr(svc.searcher, 'response', broken)
  failed = client.post('/search', json={'query': TEXTS[0]})
  assert failed.status_code == 500
  assert failed.json() == {'error': 'internal error: ValueError: no response'}

@pytest.mark.parametrize('rows', [
    [['img00.jpg', 'big', 0, 'ab']],  # a size that is no integer
    [['img00.jpg', 10, 0]],  # a short row
    [None],
    {'img00.jpg': [10, 0, 'ab']},  # not a list of rows
])
def test_malformed_file_records_are_refused_naming_the_file(tmp_path, rows):
  """The store's files.json is read at the service's start: a row it cannot use is one line
  naming the file and the row, not an internal error."""
  from colt_jax.encoders import collection_records  # pylint: disable=g-import-not-at-top
  from colt_jax.service import photos  # pylint: disable=g-import-not-at-top
  path = tmp_path / collection_records.RECORDS_FILE
  path.write_text(json.dumps({'format': collection_records.RECORDS_FORMAT, 'content': 'file',
                              'photos': rows}))
  with pytest.raises(InputError, match=re.escape(str(path)) + r': photos'):
    photos.read_records(str(tmp_path))
  path.write_text(json.dumps({'format': collection_records.RECORDS_FORMAT, 'content': 'file',
                              'photos': [['img00.jpg', 10, 0, 'ab']]}))
  assert photos.read_records(str(tmp_path))['photos'] == [['img00.jpg', 10, 0, 'ab']]

def test_an_address_that_cannot_be_bound_is_refused_before_loading():
  """serve.py checks --host/--port before it loads the model (`address.check_bindable`)."""
  import socket  # pylint: disable=g-import-not-at-top
  from colt_jax.service import address  # pylint: disable=g-import-not-at-top
  address.check_bindable('127.0.0.1', 0)
  with socket.socket() as taken:
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    port = taken.getsockname()[1]
    with pytest.raises(InputError, match=rf'--host 127.0.0.1 --port {port}: cannot listen'):
      address.check_bindable('127.0.0.1', port)
  with pytest.raises(InputError, match='--host no-such-host.invalid: not an address'):
    address.check_bindable('no-such-host.invalid', 8000)
