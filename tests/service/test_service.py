"""The HTTP service (colt_jax/service/): the Retriever's and the baselines' answers over HTTP,
results independent of their batch, no compilation after the warm-up, bad requests in one
line, the search lane's limits and the direct lane."""
import asyncio
import concurrent.futures
import json
import os
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.data import features
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.service import app as app_lib
from colt_jax.service import request_batching
from colt_jax.service import schemas
from colt_jax.service import service as service_lib
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from service_shared import DIM, PHOTOS, TEXTS, _unit, _hits, _scores, _expected, _RealServer, _post  # pylint: disable=g-bad-import-order


def _assert_same_results(got, want, err_msg=''):
  """Two answers' `results` (lists of dicts) are the same list up to float32 rounding: the
  same photos with the same fields, in the same order where their scores are separated (only
  photos tied within rounding may trade places), ranks 1..n, scores close. Two differently
  compiled programs (other batch sizes, the service's path and the Retriever's) may round
  differently on another machine."""
  item = lambda r: tuple(sorted((k, v) for k, v in r.items() if k not in ('score', 'rank')))
  for results in (got, want):
    assert [r['rank'] for r in results] == list(range(1, len(results) + 1)), err_msg
  assert_same_ranking([item(r) for r in got], [r['score'] for r in got],
                      [item(r) for r in want], [r['score'] for r in want], err_msg=err_msg)

def test_search_is_retriever_search_text(client, colt):
  svc = client.app.state.service
  assert svc.warmup_compilations > 0
  for text in TEXTS:
    got = client.post('/search', json={'query': text})
    assert got.status_code == 200, got.text
    answer = got.json()
    hit = colt.search_text(text)
    # The service's batched path and the Retriever's: the same list up to float32 rounding.
    assert_same_ranking(_hits(answer), _scores(answer), _expected(colt, hit), hit.scores,
                        err_msg=text)
    assert [r['rank'] for r in answer['results']] == list(range(1, len(hit.photo_ids) + 1))
    assert answer['query'] == text and answer['method'] == 'colt' and answer['k'] == 20
    assert set(answer['timing_ms']) == {'queue', 'encode', 'candidates', 'rerank', 'total'}
    assert answer['timing_ms']['encode'] > 0 and answer['timing_ms']['rerank'] > 0
    assert answer['timing_ms']['total'] >= answer['timing_ms']['rerank']
  direct = svc.search(schemas.SearchRequest(query=TEXTS[-1]))  # the service without HTTP
  # Exact: the same lone request through the same compiled programs, in this process.
  assert direct['results'] == answer['results']
  # Other list settings and a query vector: Retriever.with_settings(...).search.
  query = colt.encode_queries(['the view'])[0]
  answer = client.post('/search', json={'vector': query.tolist(), 'k': 5, 'per_category': 2,
                                        'list_length': 10}).json()
  # The service computes the full list (its compiled shape per k and X) and lists its first
  # list_length photos: the list of that length (tests/model/test_postprocess.py).
  hit = colt.with_settings(k=5, per_category=2).search(query)
  assert len(answer['results']) == 10 and answer['query'] is None
  assert_same_ranking(_hits(answer), _scores(answer), _expected(colt, hit)[:10],
                      list(hit.scores)[:10], err_msg='vector')
  # Photos indexed from a folder: titles are file names, every photo has its file.
  assert all(r['has_image'] and r['title'] == os.path.basename(r['photo_id'])[:-4]
             for r in answer['results'])

def _baseline(colt, store, query, method, params, length):
  """evaluate.py's baseline over the Retriever's candidates: the 200 photos most similar
  to the query by h^ (exact cosine), with their h^."""
  hat = colt.reencode(np.asarray(store.photos))
  sims = hat @ query
  top = np.lexsort((np.arange(len(sims)), -sims))[:200]
  ids = [str(store.photo_ids[i]) for i in top]
  cand = TopicCandidates(0, tuple(ids), None, query, hat[top])
  # Two topics, as the service runs a lone request (and compiled at its warm-up).
  other = TopicCandidates(1, tuple(ids), None, query, hat[top])
  entries = evaluation.rank_baseline(method, [cand, other], params, k=length)[0]
  return [(p, c) for p, c, _ in model_free.scored(cand, entries, method)]  # cosine scores

@pytest.mark.parametrize('method,params', [('topk', {}), ('mmr', {'lambda': 0.7}),
                                           ('umons', {'eps': 0.2, 'threshold': 0.3})])
def test_baselines_are_evaluations_over_the_retrievers_candidates(client, served, colt, method,
                                                                   params):
  store = features.load(served[0])
  query = colt.encode_queries(['big ben'])[0]
  answer = client.post('/search', json={'vector': query.tolist(), 'method': method,
                                        'params': params}).json()
  fields = {'lambda': 'diversity', 'eps': 'umons_eps', 'threshold': 'umons_threshold'}
  expected = _baseline(colt, store, query, method, evaluation.MethodParams(
      **{fields[k]: v for k, v in params.items()}), 50)
  # The service's candidate search and baseline against NumPy's: the same list up to ties.
  assert_same_ranking([(r['photo_id'], r['group']) for r in answer['results']], _scores(answer),
                      [(p, -1) for p, _ in expected], [s for _, s in expected], err_msg=method)
  assert answer['timing_ms']['candidates'] > 0 and len(answer['results']) == PHOTOS

def _pending(request):
  return request_batching.Pending(request, time.perf_counter(), concurrent.futures.Future())

def _answers(svc, requests):
  """The searcher's answers to one batch of requests, in order."""
  batch = [_pending(r) for r in requests]
  for p in batch:
    p.future.set_running_or_notify_cancel()
  svc.searcher.run(batch)
  return [svc.searcher.response(p.future.result()) for p in batch]

def test_a_result_never_depends_on_its_batch(client, colt):
  """The same requests alone, and batched with others (padded sizes 2 and 4): the same photos
  and groups, in the same order up to ties, and the same scores to float32 rounding (a lone
  request runs at 2 rows, as the Retriever runs a lone query; other padded sizes are other
  programs, whose float32 sums may round differently on another machine)."""
  svc = client.app.state.service
  before = svc.compiles.count
  rng = np.random.default_rng(5)
  vectors = _unit(rng.normal(size=(4, DIM))).tolist()
  req = lambda **kw: schemas.SearchRequest(**kw)  # pylint: disable=unnecessary-lambda
  mine = [req(query='big ben at night'), req(vector=vectors[0], k=5, per_category=2,
                                             list_length=10),
          req(vector=vectors[1], method='mmr', params={'lambda': 0.4}),
          req(query='of the', method='umons'), req(query='the view', method='topk')]
  others = [[req(vector=vectors[2])], [req(query=TEXTS[3]), req(vector=vectors[3], method='mmr',
                                                                 params={'lambda': 0.4})],
            [req(query=TEXTS[1], method='topk'), req(vector=vectors[2], k=5, per_category=2,
                                                     list_length=10), req(query=TEXTS[0])]]
  for r in mine:
    alone = _answers(svc, [r])[0]
    assert alone['batch_size'] == 1
    together = [_answers(svc, [*extra[:1], r, *extra[1:]])[1] for extra in others]
    assert any(got['batch_size'] >= 2 for got in together)  # in one call with others
    for got in together:
      _assert_same_results(got['results'], alone['results'], err_msg=str(r))
  assert svc.compiles.count == before  # every padded size and setting was warmed up

def test_concurrent_requests_are_batched_without_compiling(client, colt):
  svc = client.app.state.service
  serving = svc.serving_compilations
  bodies = [{'query': TEXTS[i % 4], 'method': ('colt', 'topk', 'mmr', 'umons')[i % 4]}
            for i in range(12)] + [{'query': TEXTS[1], 'k': 5, 'per_category': 2,
                                    'list_length': 10}] * 4
  alone = [client.post('/search', json=b).json() for b in bodies]
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    answers = list(pool.map(lambda b: client.post('/search', json=b), bodies))
  assert all(a.status_code == 200 for a in answers)
  answers = [a.json() for a in answers]
  assert max(a['batch_size'] for a in answers) > 1
  for a, b in zip(answers, alone):
    assert _hits(a) == _hits(b)
  assert svc.serving_compilations == serving == 0
  # The warm-up measured what each padded size costs (the batcher's cut, request_batching.py).
  assert sorted(svc.batcher.costs) == list(svc.searcher.sizes)
  assert all(c > 0 for c in svc.batcher.costs.values())
  text = client.get('/metrics').text
  assert 'colt_service_jax_compilations_total{phase="serving"} 0.0' in text
  assert 'colt_service_batch_size_bucket{le="4.0"}' in text
  # Another list shape compiles once, on first use (counted), then no more.
  body = {'query': TEXTS[0], 'k': 3, 'per_category': 1, 'list_length': 7}
  assert len(client.post('/search', json=body).json()['results']) == 7
  first = svc.serving_compilations
  client.post('/search', json=body)
  assert first > 0 and svc.serving_compilations == first

BAD = [
    (b'{"query": "big ben"', 400, 'body: malformed JSON'),
    (b'[1, 2]', 422, 'body:'),
    (b'{}', 422, 'query: give exactly one of'),
    (b'{"query": "x", "vector": [1.0]}', 422, 'query: give exactly one of'),
    (b'{"query": "   "}', 422, 'query: empty text'),
    (b'{"query": "x", "k": 0}', 422, 'k: must be in [1, 50], got 0'),
    (b'{"query": "x", "k": 51}', 422, 'k: must be in [1, 50], got 51'),
    (b'{"query": "x", "k": "20"}', 422, 'k:'),
    (b'{"query": "x", "per_category": 0}', 422, 'per_category: must be in [1, 50], got 0'),
    (b'{"query": "x", "k": 5, "per_category": 6}', 422, 'per_category: must be <= k (5)'),
    (b'{"query": "x", "k": 30, "list_length": 20}', 422, 'k: must be <= list_length (20)'),
    (b'{"query": "x", "method": "bm25"}', 422, 'method:'),
    (b'{"query": "x", "params": {"lambda": 0.5}}', 422, 'params.lambda: not a parameter of colt'),
    (b'{"query": "x", "method": "mmr", "params": {"lambda": 1.5}}', 422,
     'params.lambda: must be in [0.0, 1.0]'),
    (b'{"query": "x", "method": "umons", "params": {"min_samples": 1.5}}', 422,
     'params.min_samples: must be an integer'),
    (b'{"query": "x", "colour": "red"}', 422, 'colour: not a field of the request'),
    (b'{"vector": [0.6, 0.8]}', 422, 'vector: 2 numbers, the model takes 16-d features'),
    (b'{"vector": [3.0, 4.0]}', 422, 'vector: must be L2-normalised'),
    (b'{"vector": [1.0, "a"]}', 422, 'vector.1:'),
    # numbers only: neither true/false nor a number written as a string, as for k
    (b'{"vector": [true, false]}', 422, 'vector.0: Input should be a valid number, got True'),
    (b'{"vector": ["1", 0]}', 422, "vector.0: Input should be a valid number, got '1'"),
    (b'{"query": "x", "method": "mmr", "params": {"lambda": "0.5"}}', 422, 'params.lambda:'),
    (b'{"vector": [NaN, 1.0]}', 422, 'vector: every number must be finite'),
    (b'{"vector": [1.7e308, 1.7e308]}', 422, 'vector: must be L2-normalised, its norm overflows'),
    (b'{"query": "' + b'x' * 30_000 + b'"}', 413, 'body: over the limit of 20000 bytes'),
    # more values than a request to this 16-d model holds: refused before it is parsed
    (b'{"vector": [1.0' + b', 0' * 5000 + b']}', 422,
     'body: 5001 values or more, more than a request to this 16-d model holds'),
]

@pytest.mark.parametrize('body,status,needle', BAD, ids=[b[2].split(':')[0] + str(i)
                                                          for i, b in enumerate(BAD)])
def test_bad_requests_are_one_line_errors_naming_the_field(client, body, status, needle):
  got = client.post('/search', content=body, headers={'content-type': 'application/json'})
  assert got.status_code == status, got.text
  error = got.json()['error']
  assert needle in error and '\n' not in error and list(got.json()) == ['error']
  assert client.post('/search', json={'query': 'the view'}).status_code == 200

def test_the_search_lane_refuses_streamed_bodies_over_the_limit_and_drops_lost_clients():
  """`_SearchLane` over ASGI messages: a body without Content-Length that streams past the
  limit is 413 (the endpoint's `too_large`), a client gone before its body ends gets no
  answer; neither reaches `answer`."""
  answered, too_large = [], []

  class Endpoint:
    path, max_body_bytes = '/search', 10

    async def answer(self, raw, scope, start):
      assert scope['path'] == '/search' and start > 0
      answered.append(raw)
      return 200, b'{}'

    def too_large(self, start):
      too_large.append(start)
      return 413, b'{"error": "body: over the limit of 10 bytes (--max_body_bytes)"}'

  lane = app_lib._SearchLane(Endpoint())  # pylint: disable=protected-access

  def call(messages, headers=()):
    sent, queue = [], list(messages)

    async def receive():
      return queue.pop(0)

    async def send(message):
      sent.append(message)

    scope = {'type': 'http', 'method': 'POST', 'path': '/search', 'headers': list(headers)}
    asyncio.run(lane(scope, receive, send))
    return sent

  chunk = lambda body, more: {'type': 'http.request', 'body': body, 'more_body': more}
  sent = call([chunk(b'{"query":', True), chunk(b' "a long one"}', False)],
              [(b'transfer-encoding', b'chunked')])
  assert sent[0]['status'] == 413 and not answered and len(too_large) == 1
  assert json.loads(sent[1]['body']) == {
      'error': 'body: over the limit of 10 bytes (--max_body_bytes)'}
  assert call([chunk(b'{}', True), {'type': 'http.disconnect'}]) == [] and not answered
  assert call([chunk(b'{}', False)])[0]['status'] == 200 and answered == [b'{}']

@pytest.mark.parametrize('direct,pipelined', [(True, False), (False, False), (False, True)],
                         ids=['direct lane', 'asgi lane', 'asgi lane, pipelined'])
def test_a_search_whose_client_went_away_is_dropped_before_its_batch(served, colt, direct,
                                                                     pipelined):
  """Over a real server (uvicorn, `protocol.configured`): a search whose connection closes
  while it waits for the batcher is dropped, never run, whether the protocol's direct lane
  or the ASGI app answers it; the app's, also when another request waits behind it on its
  connection (behind a direct search, reading stops and the close is seen after its answer:
  protocol.py)."""
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      max_batch_size=1, methods=('colt',)))
  svc = app.state.service
  run, ran, gate = svc.searcher.run, [], threading.Event()

  def held(batch):
    ran.append(len(batch))
    gate.wait(30)
    run(batch)

  svc.searcher.run = held
  body = json.dumps({'vector': _unit(np.arange(1, DIM + 1)).tolist()}).encode()
  request = _post(body)
  with _RealServer(app, direct=direct) as server:
    port = server.port
    try:
      first = socket.create_connection(('127.0.0.1', port), timeout=30)
      first.sendall(request)  # its batch holds the batcher
      while not ran:
        time.sleep(0.01)
      gone = socket.create_connection(('127.0.0.1', port), timeout=30)
      gone.sendall(request + (b'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' if pipelined
                              else b''))
      time.sleep(0.3)  # queued behind the first
      gone.close()
      time.sleep(0.3)
      gate.set()
      answer = b''
      while b'"batch_size"' not in answer:
        answer += first.recv(65536)
      assert answer.startswith(b'HTTP/1.1 200 OK')
      first.close()
      time.sleep(0.5)
      assert ran == [1]  # the second search never ran
      with urllib.request.urlopen(urllib.request.Request(
          f'http://127.0.0.1:{port}/search', data=body,
          headers={'Content-Type': 'application/json'}), timeout=30) as got:
        assert got.status == 200
      assert ran == [1, 1]
    finally:
      gate.set()  # a failed check does not leave the batcher held

@pytest.mark.slow
def test_the_direct_lane_answers_searches_in_the_protocol(served, colt, monkeypatch):
  """Over a real server: POST /search is answered by the protocol's direct lane (the ASGI
  app never sees it) with what Retriever.search_text gives, head and body of the ASGI lane's
  form; pipelined requests are answered in order (a search, a GET routed by the app, a
  search); refusals are the same one-line JSON (400, 422, 413 by Content-Length and as a
  chunked body streams past the limit, after which the connection serves again; a search
  pipelined behind a request the app answers goes to the app, in order); a request
  with `Expect: 100-continue` goes to the app; `Connection: close` closes after the answer;
  /metrics counts every answer by status."""
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      max_batch_size=4, max_wait_ms=20.0, methods=('colt',), max_body_bytes=20_000))
  lane_calls = []
  lane = app.search_lane

  class Recorded:
    path = lane.path

    async def __call__(self, scope, receive, send):
      lane_calls.append(scope['path'])
      return await lane(scope, receive, send)

  monkeypatch.setattr(app, 'search_lane', Recorded())
  text = json.dumps({'query': TEXTS[1]}).encode()
  expected = _expected(colt, colt.search_text(TEXTS[1]))
  with _RealServer(app) as server:
    (status, headers, body), = server.exchange(_post(text), 1)[0]
    assert status == 'HTTP/1.1 200 OK', body
    assert headers['content-type'] == 'application/json'
    assert _hits(json.loads(body)) == expected and not lane_calls
    assert 'date' in headers and headers['server'] == 'uvicorn'  # uvicorn's default headers
    vector = json.dumps({'vector': _unit(np.arange(1, DIM + 1)).tolist(), 'k': 5,
                         'per_category': 2, 'list_length': 10}).encode()
    answers, closed = server.exchange(
        _post(vector) + b'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' + _post(text), 3)
    assert [a[0] for a in answers] == ['HTTP/1.1 200 OK'] * 3 and not closed
    assert json.loads(answers[0][2])['list_length'] == 10
    assert json.loads(answers[1][2])['photos'] == PHOTOS
    # the search behind the GET (an ASGI cycle still in flight) is answered by the app
    assert _hits(json.loads(answers[2][2])) == expected
    assert lane_calls == ['/search']
    refusals = [(b'{"query": ', 400, 'body: malformed JSON'),
                (b'{"query": "x", "k": 0}', 422, 'k: must be in [1, 50]'),
                (b'{"vector": [1.0]}', 422, 'the model takes 16-d features')]
    for bad, code, needle in refusals:
      (status, _, body), = server.exchange(_post(bad), 1)[0]
      assert status.startswith(f'HTTP/1.1 {code} ') and needle in json.loads(body)['error'], body
    (status, _, body), = server.exchange(
        b'POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 30000\r\n\r\n', 1)[0]
    assert status == 'HTTP/1.1 413 Request Entity Too Large'
    assert json.loads(body) == {'error': 'body: over the limit of 20000 bytes (--max_body_bytes)'}
    chunk = b'[' + b'1,' * 6000
    streamed = (b'POST /search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                + (b'%x\r\n%s\r\n' % (len(chunk), chunk)) * 2 + b'0\r\n\r\n')
    answers, _ = server.exchange(streamed + _post(text), 2)
    assert answers[0][0].startswith('HTTP/1.1 413 ') and answers[1][0] == 'HTTP/1.1 200 OK'
    answers, _ = server.exchange(_post(text, extra=b'Expect: 100-continue\r\n'), 1)
    assert answers[0][0] == 'HTTP/1.1 200 OK' and lane_calls == ['/search'] * 2
    assert _hits(json.loads(answers[0][2])) == expected
    [(status, headers, _)], closed = server.exchange(
        _post(text, extra=b'Connection: close\r\n'), 1)
    assert status == 'HTTP/1.1 200 OK' and headers['connection'] == 'close' and closed
    (_, _, metrics), = server.exchange(b'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n', 1)[0]
    text_metrics = metrics.decode()
    for status, count in (('200', 6), ('400', 1), ('422', 2), ('413', 2)):
      assert (f'colt_service_requests_total{{endpoint="/search",status="{status}"}} '
              f'{count}.0') in text_metrics, status
    assert 'colt_service_errors_total{kind="too_large"} 2.0' in text_metrics
