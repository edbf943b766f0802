"""The HTTP service (colt_jax/service/, experiments/serve.py): the Retriever's answers over
HTTP, dynamic batching that changes no result and compiles nothing after the warm-up, bad
requests answered in one line, timeouts, photo files, metrics, and SIGTERM under load."""
import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax.train import configs
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.inputs.labels import LabelSpace
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.service import app as app_lib
from colt_jax.util.errors import InputError
from colt_jax.service import request_batching
from colt_jax.service import schemas
from colt_jax.service import searcher as searcher_lib
from colt_jax.service import service as service_lib
from colt_jax.engines import engine_flags
from colt_jax.service.photos import PhotoCatalog
from colt_jax.train import modules
from colt_jax.train import restore
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from test_cli_reliability import assert_bad_input  # pylint: disable=g-bad-import-order
from test_service_protocol import ThreadedServer  # pylint: disable=g-bad-import-order
from tiny_clip import random_image  # pylint: disable=g-bad-import-order
import preloaded

with warnings.catch_warnings():  # starlette's TestClient would rather have httpx2, not here
  warnings.simplefilter('ignore')
  from fastapi.testclient import TestClient  # pylint: disable=g-import-not-at-top

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIM, PHOTOS, N = 16, 40, 16
NAMES = ('bridge', 'night', 'river', 'tower')
TEXTS = ('the view', 'big ben at night', 'of the', 'view of the river bank in the evening')
WARM = (searcher_lib.ListShape(), searcher_lib.ListShape(5, 2, 10))


def _unit(rows):
  rows = np.asarray(rows, np.float32)
  return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@pytest.fixture(scope='module')
def served(tiny_clip_dir, tmp_path_factory):
  """(store dir, model dir): a folder of 40 photos in two subfolders indexed by the tiny CLIP
  (data_prep/index_collection.py's library; its text tower encodes the queries), and a model
  of a random g and phi (N=16, 4 named categories) saved for that encoder."""
  root = tmp_path_factory.mktemp('service')
  for i in range(PHOTOS):
    folder = root / 'photos' / ('a' if i < 20 else 'b/c')
    folder.mkdir(parents=True, exist_ok=True)
    random_image(i, (8, 8)).save(folder / f'p{i:02d}.png')
  store_dir = str(root / 'store')
  encoder = clip.ClipEncoder(tiny_clip_dir)
  collection.index_collection(collection.folder_items(str(root / 'photos')), encoder,
                              store_dir, source=str(root / 'photos'), progress=False)
  encoder = encoder.name
  ttc = PairsTTCConfig(num_images=N, num_layers=1, num_heads=2, model_dim=16,
                       query_relative=True)
  phi = modules.classifier_module(ttc, LabelSpace(len(NAMES)))
  phi_params = phi.init(jax.random.PRNGKey(1), jnp.zeros((1, N + 1, DIM)),
                        jnp.ones((1, N + 1), bool))['params']
  scl = configs.SCLConfig(beta=0.5, zero_init=False)
  g = modules.reencoder_module(scl)
  g_params = g.init(jax.random.PRNGKey(2), jnp.zeros((1, DIM)))['params']
  colt = retriever.Retriever(
      restore.ClassifierBundle(phi, phi_params, LabelSpace(len(NAMES)), ttc, NAMES),
      restore.ReEncoderBundle(g, g_params, scl), encoder=encoder)
  colt.index(features.load(store_dir))
  return store_dir, colt.save_pretrained(str(root / 'model'))


@pytest.fixture(scope='module')
def colt(served):
  store_dir, model = served
  return retriever.Retriever.from_pretrained(model).index(features.load(store_dir))


@pytest.fixture(scope='module')
def client(served, colt):
  """The app over `colt`, warmed up for WARM at batch sizes 1, 2, 4 (waiting 50 ms for a
  batch to fill)."""
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      max_batch_size=4, max_wait_ms=50.0, warm_settings=WARM, max_body_bytes=20_000))
  with TestClient(app) as c:
    yield c


def _hits(answer):
  return [(r['photo_id'], r['group'], r['category']) for r in answer['results']]


def _scores(answer):
  return [r['score'] for r in answer['results']]


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


def _expected(colt, hit):
  """What /search lists for a SearchResult: groups are phi's categories, -1 for photos of
  phi's other labels (their category is phi's name of it: irrelevant, query)."""
  v = len(colt.category_names)
  return [(p, c if c < v else -1, n)
          for p, c, n in zip(hit.photo_ids, hit.categories, hit.category_names)]


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
  # list_length photos: the list of that length (tests/test_postprocess.py).
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


class _RealServer(ThreadedServer):
  """The app of `create_app` in a real uvicorn server on a thread, over
  `protocol.configured(direct=...)` (as experiments/serve.py runs it)."""

  def __init__(self, app, direct: bool = True, read_timeout_s: float = 10.0, **config):
    from colt_jax.service import protocol  # pylint: disable=import-outside-toplevel
    super().__init__(app, protocol.configured(direct=app.state.search if direct else None,
                                              read_timeout_s=read_timeout_s),
                     lifespan='on', access_log=False, **config)

  def exchange(self, data: bytes, answers: int, timeout: float = 30.0) -> list:
    """Sends `data` on one connection and reads `answers` HTTP responses: [(status line,
    headers dict, body)], then whether the server closed the connection."""
    with socket.create_connection(('127.0.0.1', self.port), timeout=timeout) as sock:
      sock.sendall(data)
      buffer, out = b'', []
      while len(out) < answers:
        while b'\r\n\r\n' not in buffer:
          chunk = sock.recv(65536)
          assert chunk, f'the connection closed after {len(out)} answers: {buffer[:200]!r}'
          buffer += chunk
        head, buffer = buffer.split(b'\r\n\r\n', 1)
        lines = head.decode().split('\r\n')
        if lines[0].startswith('HTTP/1.1 100 '):
          continue  # the interim answer to Expect: 100-continue
        headers = dict(line.lower().split(': ', 1) for line in lines[1:])
        size = int(headers['content-length'])
        while len(buffer) < size:
          chunk = sock.recv(65536)
          assert chunk
          buffer += chunk
        out.append((lines[0], headers, buffer[:size]))
        buffer = buffer[size:]
      sock.settimeout(2.0)
      try:
        closed = sock.recv(1) == b''
      except socket.timeout:
        closed = False
    return out, closed


def _post(body: bytes, path: bytes = b'/search', extra: bytes = b'') -> bytes:
  return (b'POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s'
          b'Content-Length: %d\r\n\r\n%s' % (path, extra, len(body), body))


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


def _slow_app(served, colt, seconds: float):
  """The service's app (batches of 1, colt) whose every batch takes `seconds` more."""
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      max_batch_size=1, methods=('colt',)))
  searcher = app.state.service.searcher
  run = searcher.run

  def slow(batch):
    time.sleep(seconds)
    run(batch)

  searcher.run = slow
  return app


def test_a_slow_search_behind_a_refusal_is_not_cut_by_the_keep_alive_timer(served, colt):
  """A refusal written while its bytes are parsed does not arm the keep-alive timer for the
  search that follows in the same bytes: that search is answered however long it takes."""
  app = _slow_app(served, colt, 2.0)
  text = json.dumps({'query': TEXTS[1]}).encode()
  with _RealServer(app, timeout_keep_alive=1) as server:
    answers, _ = server.exchange(_post(b'{}') + _post(text), 2)
  assert [a[0] for a in answers] == ['HTTP/1.1 422 Unprocessable Entity', 'HTTP/1.1 200 OK']
  assert _hits(json.loads(answers[1][2])) == _expected(colt, colt.search_text(TEXTS[1]))


def test_requests_behind_a_direct_search_wait_their_turn(served, colt):
  """Behind a search the direct lane answers: a malformed request is refused after that
  search's answer, not before; a search whose body comes while the service does not read
  (it waits for the answer before it) is not cut by the reading deadline."""
  app = _slow_app(served, colt, 1.0)
  body = json.dumps({'query': TEXTS[1]}).encode()
  search = _post(body)
  with _RealServer(app, read_timeout_s=0.4) as server:
    answers, closed = server.exchange(search + b'GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n', 2)
    assert [a[0] for a in answers] == ['HTTP/1.1 200 OK', 'HTTP/1.1 400 Bad Request'] and closed
    with socket.create_connection(('127.0.0.1', server.port), timeout=30) as sock:
      second = _post(body, extra=b'Connection: close\r\n')
      head, _, rest = second.partition(b'\r\n\r\n')
      sock.sendall(search + head + b'\r\n\r\n')
      time.sleep(0.6)  # past the deadline, while the first search holds the connection
      sock.sendall(rest)
      got = b''
      while chunk := sock.recv(65536):
        got += chunk
  assert got.count(b'HTTP/1.1 200 OK') == 2 and b'HTTP/1.1 408' not in got, got[:300]


def test_unread_answers_do_not_pile_up_in_the_service(served, colt):
  """A client that sends searches and never reads their answers: once the connection's write
  buffer is over its high-water mark, searches go to the app's path, which waits for the
  client to read, and reading stops; the buffer stays near the mark."""
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      max_batch_size=1, max_wait_ms=0.0, methods=('colt',)))
  request = _post(json.dumps({'query': TEXTS[1]}).encode())
  most = 0
  with _RealServer(app) as server:
    with socket.socket() as sock:
      sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
      sock.connect(('127.0.0.1', server.port))
      sock.settimeout(0.2)
      while not server.server.server_state.connections:
        time.sleep(0.01)
      for c in list(server.server.server_state.connections):  # small kernel buffers: the
        c.transport.get_extra_info('socket').setsockopt(  # transport's own buffer fills soon
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
      end = time.monotonic() + 4.0
      while time.monotonic() < end:
        try:
          sock.sendall(request)
        except socket.timeout:  # the service stopped reading
          pass
        time.sleep(0.02)  # each search after the previous one's answer: the direct lane's
        most = max([most] + [c.transport.get_write_buffer_size()
                             for c in list(server.server.server_state.connections)])
  assert 0 < most < 160_000, most


def test_a_slow_search_is_503_and_the_service_goes_on(served, colt):
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      request_timeout_s=1.0, max_batch_size=1, methods=('colt',)))
  svc = app.state.service
  run = svc.searcher.run
  body = {'vector': _unit(np.arange(1, DIM + 1)).tolist()}
  with TestClient(app) as c:
    assert c.post('/search', json=body).status_code == 200
    svc.searcher.run = lambda batch: (time.sleep(2.0), run(batch))
    slow = c.post('/search', json=body)
    assert slow.status_code == 503 and slow.json() == {
        'error': 'the search took longer than --request_timeout_s=1 s'}
    svc.searcher.run = run
    time.sleep(1.5)  # the slow batch finishes; its answer is dropped
    again = c.post('/search', json=body)
    assert again.status_code == 200 and again.json()['results']
    assert 'colt_service_errors_total{kind="timeout"} 1.0' in c.get('/metrics').text


def test_photos_health_metrics_docs_and_page(client, served):
  store_dir, _ = served
  source = features.load(store_dir).meta['source']
  got = client.get('/photos/b/c/p25.png')
  assert got.status_code == 200 and got.headers['content-type'] == 'image/png'
  with open(os.path.join(source, 'b', 'c', 'p25.png'), 'rb') as f:
    assert got.content == f.read()
  missing = client.get('/photos/nope.png')
  assert missing.status_code == 404 and missing.json() == {
      'error': 'photo_id: nope.png: no photo of that id in the store'}
  assert client.get('/no/such/path').json() == {'error': '/no/such/path: no such path'}
  assert client.get('/search').status_code == 405
  health = client.get('/healthz').json()
  assert health['status'] == 'ok' and health['photos'] == PHOTOS and health['dim'] == DIM
  assert health['method_default'] == 'colt' and health['text_queries'] and health['images']
  text = client.get('/metrics').text
  for needle in ('colt_service_requests_total{endpoint="/search",status="200"}',
                 'colt_service_requests_total{endpoint="/photos/{photo_id:path}",status="404"}',
                 'colt_service_request_seconds_bucket{endpoint="/search",le="0.005"}',
                 'colt_service_stage_seconds_count{stage="encode"}',
                 'colt_service_errors_total{kind="not_found"}',
                 'colt_service_jax_compilations_total{phase="warmup"}'):
    assert needle in text, needle
  docs = client.get('/docs')
  assert docs.status_code == 200 and '/openapi.json' in docs.text
  assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
  assert assets and all(a.startswith(app_lib.DOCS_ASSETS_URL + '/') for a in assets), assets
  for asset in assets:  # served here, not by a CDN
    got = client.get(asset)
    assert got.status_code == 200 and len(got.content) > 500, asset
  assert '/search' in client.get('/openapi.json').json()['paths']
  page = client.get('/')
  if os.path.isfile(app_lib.PAGE):
    assert page.status_code == 200 and page.headers['content-type'].startswith('text/html')
  else:
    assert page.status_code == 404 and 'index.html' in page.json()['error']


def test_photo_catalog_of_a_captioned_list(tmp_path):
  random_image(1, (8, 8)).save(tmp_path / 'x.jpg')
  (tmp_path / 'list.csv').write_text('path,caption\nx.jpg,"A bridge, at night"\ny.jpg,\n')
  catalog = PhotoCatalog(['x.jpg', 'y.jpg'], {'dataset': 'collection',
                                              'source': str(tmp_path / 'list.csv')})
  assert catalog.title('x.jpg') == 'A bridge, at night' and catalog.title('y.jpg') == 'y'
  assert catalog.path('x.jpg') == str(tmp_path / 'x.jpg') and catalog.path('y.jpg') is None
  assert catalog.has_files and 'x.jpg' in catalog and 'z.jpg' not in catalog
  other = PhotoCatalog(['1'], {'dataset': 'div400', 'source': str(tmp_path)})
  assert other.title('1') is None and other.path('1') is None and not other.has_files


def _records_of(folder, names):
  """A store's file records (`files.json`, image content) of `names` in `folder`."""
  rows = []
  for n in names:
    data = (folder / n).read_bytes()
    st = os.stat(folder / n)
    rows.append([n, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest()])
  return {'content': 'file', 'photos': rows}


def test_only_the_file_indexed_is_served_never_a_link_out_or_a_changed_file(tmp_path, colt):
  """A photo swapped for a symlink to /etc/passwd (or any file outside the indexed folder),
  a directory, or a file whose content changed since indexing: refused, logged; the indexed
  file and a link that stays inside the folder to the same content: served."""
  folder = tmp_path / 'photos'
  folder.mkdir()
  for i in range(4):
    random_image(i, (8, 8)).save(folder / f'img{i:02d}.jpg')
  names = [f'img{i:02d}.jpg' for i in range(4)] + ['gone.jpg']
  records = _records_of(folder, names[:4])
  catalog = PhotoCatalog(names, {'dataset': 'collection', 'source': str(folder)}, records)
  assert catalog.path('img00.jpg') == os.path.realpath(folder / 'img00.jpg')
  (folder / 'img01.jpg').unlink()
  (folder / 'img01.jpg').symlink_to('/etc/passwd')
  outside = tmp_path / 'outside.jpg'
  outside.write_bytes((folder / 'img02.jpg').read_bytes())
  (folder / 'img02.jpg').unlink()
  (folder / 'img02.jpg').symlink_to(outside)  # same bytes, but outside the folder
  (folder / 'img03.jpg').write_bytes(b'changed')  # content changed since it was indexed
  assert [catalog.path(n) for n in names[1:]] == [None, None, None, None]
  # A link inside the folder to the very file indexed is that file.
  (folder / 'img03.jpg').unlink()
  (folder / 'img03.jpg').symlink_to(folder / 'img00.jpg')
  same = dict(records, photos=records['photos'][:3] + [
      ['img03.jpg'] + records['photos'][0][1:]])
  assert PhotoCatalog(names, {'dataset': 'collection', 'source': str(folder)},
                      same).path('img03.jpg') == os.path.realpath(folder / 'img00.jpg')
  # Through HTTP: 404, logged.
  app = app_lib.create_app(colt, warm_up=False)
  app.state.service.catalog = catalog
  with TestClient(app) as c:
    assert c.get('/photos/img00.jpg').status_code == 200
    refused = c.get('/photos/img01.jpg')
    assert refused.status_code == 404 and 'root:' not in refused.text


def test_dynamic_batcher_gathers_drops_cancelled_and_drains():
  batches = []
  entered, release = threading.Event(), threading.Event()

  def handle(batch):
    batches.append([p.payload for p in batch])
    entered.set()
    release.wait(5)
    for p in batch:
      p.future.set_result(p.payload * 10)

  b = request_batching.DynamicBatcher(handle, max_batch_size=3, max_wait_ms=200).start()
  first = b.submit(0)  # runs alone after 200 ms, then blocks the worker
  assert entered.wait(5)
  later = [b.submit(i) for i in range(1, 6)]
  later[1].cancel()  # its caller gave up before its batch started
  release.set()
  assert first.result(5) == 0 and [f.result(5) for f in later if not f.cancelled()] == [
      10, 30, 40, 50]
  b.stop(5)
  assert batches == [[0], [1, 3], [4, 5]]  # at most 3 gathered, the cancelled one dropped
  with pytest.raises(RuntimeError, match='shutting down'):
    b.submit(9)


def test_waiters_get_their_outcomes_in_one_wake_up_per_batch():
  """`submit(payload, waiter)`: each request's outcome (result, the handler's error, an
  unanswered request's error) reaches its asyncio waiter through one call_soon_threadsafe
  per batch; a waiter whose caller gave up stays cancelled; a request dropped because its
  future was cancelled before its batch has its waiter cancelled."""
  entered, release = threading.Event(), threading.Event()

  def handle(batch):
    entered.set()
    release.wait(5)
    if any(p.payload == 'fail' for p in batch):
      raise ValueError('this batch failed')
    for p in batch:
      if p.payload != 'forgotten':
        p.future.set_result(p.payload * 2)

  async def main():
    loop = asyncio.get_running_loop()
    wakes = []
    threadsafe = loop.call_soon_threadsafe
    loop.call_soon_threadsafe = lambda *a: (wakes.append(a[0]), threadsafe(*a))[1]
    b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=100).start()
    try:
      busy = loop.create_future()
      b.submit('b', busy)  # holds the worker while the next batch queues
      while not entered.is_set():  # (not to_thread: its own wake-up would be counted)
        await asyncio.sleep(0.005)
      waiters = [loop.create_future() for _ in range(4)]
      futures = [b.submit(x, w) for x, w in zip(('x', 'y', 'forgotten', 'z'), waiters)]
      waiters[3].cancel()  # its caller gave up (the service's timeout) before the answer
      dropped = loop.create_future()
      b.submit('dropped', dropped).cancel()  # queued behind a full batch, cancelled: dropped
      release.set()
      assert await asyncio.wait_for(busy, 5) == 'bb'
      assert await asyncio.wait_for(waiters[0], 5) == 'xx'
      assert await waiters[1] == 'yy' and futures[1].result() == 'yy'
      with pytest.raises(RuntimeError, match='left this request unanswered'):
        await waiters[2]
      assert waiters[3].cancelled()
      await asyncio.wait_for(asyncio.wait([dropped]), 5)
      assert dropped.cancelled()
      failed = loop.create_future()
      b.submit('fail', failed)
      with pytest.raises(ValueError, match='this batch failed'):
        await asyncio.wait_for(failed, 5)
    finally:
      b.stop(5)
    # one per batch, and one for the dropped request
    assert [w.__name__ for w in wakes] == ['_copy_outcomes'] * 4

  asyncio.run(main())


def _recorder(hold=None):
  """A batcher's handler that records its batches' payloads (and first waits for `hold`)."""
  batches = []

  def handle(batch):
    if hold is not None:
      hold.wait(5)
    batches.append([p.payload for p in batch])
    for p in batch:
      p.future.set_result(p.payload)
  return batches, handle


def test_the_batch_window_opens_when_the_worker_is_free():
  """A request that arrived while the previous batch ran waits max_wait_ms from that batch's
  end (not from its arrival), so that clients answered by that batch can join it."""
  release = threading.Event()
  batches, handle = _recorder(release)
  b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=1500).start()
  busy = [b.submit(i) for i in range(4)]  # a full batch: it runs at once, then blocks
  time.sleep(0.2)
  early = b.submit(4)  # arrives while [0, 1, 2, 3] runs
  time.sleep(1.6)  # past its own arrival's window
  release.set()
  assert [f.result(5) for f in busy] == [0, 1, 2, 3]
  time.sleep(0.3)  # the worker is free; the window of 4 runs from then
  late = b.submit(5)
  assert early.result(5) == 4 and late.result(5) == 5
  b.stop(5)
  assert batches == [[0, 1, 2, 3], [4, 5]]


def test_a_lone_client_does_not_wait_for_others():
  """After a lone request, a lone request that arrives once the worker is free runs at once;
  two requests wait for the window."""
  batches, handle = _recorder()
  b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=2000).start()
  t0 = time.perf_counter()
  assert b.submit(0).result(10) == 0  # the first request: no batch before it, it waits
  assert time.perf_counter() - t0 >= 1.9
  for i in range(1, 4):  # a client alone, one request after another
    time.sleep(0.05)  # (its round trip: the worker notes the end of the batch)
    t0 = time.perf_counter()
    assert b.submit(i).result(10) == i
    assert time.perf_counter() - t0 < 1.0
  pair = [b.submit(4), b.submit(5)]  # two waiting: a batch of them
  assert [f.result(10) for f in pair] == [4, 5]
  b.stop(5)
  assert batches == [[0], [1], [2], [3], [4, 5]]


def test_a_batch_waits_for_every_closed_loop_client_and_no_longer():
  """Clients that send their next request when answered: after the first window (it waits
  for max_batch_size), each batch runs as soon as all three clients are back, never waiting out
  the window, and never without one of them."""
  batches, handle = _recorder()
  b = request_batching.DynamicBatcher(handle, max_batch_size=8, max_wait_ms=1500).start()

  def client(c):
    for i in range(5):
      assert b.submit((c, i)).result(10) == (c, i)
      time.sleep(0.01 * c)  # the clients come back at different times

  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    list(pool.map(client, range(3)))
  took = time.perf_counter() - t0
  b.stop(5)
  assert [sorted(batch) for batch in batches] == [[(c, i) for c in range(3)] for i in range(5)]
  assert 1.4 < took < 2.5, took  # the first window, then no waiting beyond the clients'


def test_the_worker_is_woken_by_a_first_request_and_a_full_batch_only():
  """Requests between the first and the one the window waits for (max_batch_size before any
  batch) do not wake the worker only for it to wait again; the batch still runs at once when
  the last of them arrives, not at the window's end."""
  batches, handle = _recorder()
  b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=5000)
  notify, wakes = b._cond.notify, []  # pylint: disable=protected-access
  b._cond.notify = lambda *a: (wakes.append(1), notify(*a))  # pylint: disable=protected-access
  b.start()
  t0 = time.perf_counter()
  futures = [b.submit(i) for i in range(4)]
  assert [f.result(5) for f in futures] == [0, 1, 2, 3]
  assert time.perf_counter() - t0 < 2.0  # not the window of 5 s
  assert len(wakes) == 2  # the first request and the fourth
  b.stop(5)
  assert batches == [[0, 1, 2, 3]]


def test_a_checked_vector_is_the_float32_array_the_model_reads():
  """A request's vector, once checked, is held as float32 (its Python floats released), the
  same numbers the batcher passed on before; a text query has none."""
  rng = np.random.default_rng(2)
  vector = _unit(rng.normal(size=(1, DIM)))[0].astype(np.float32).tolist()
  for got in (schemas.SearchRequest(vector=vector),
              schemas.SearchRequest.model_validate_json(json.dumps({'vector': vector}))):
    assert isinstance(got.vector, np.ndarray) and got.vector.dtype == np.float32
    np.testing.assert_array_equal(got.vector, np.asarray(vector, np.float32))
  assert schemas.SearchRequest(query='big ben').vector is None


def test_a_batch_that_is_mostly_padding_is_cut():
  """With the padded sizes' costs, n gathered requests run at the size that costs least per
  answered request; the others wait for the next batch (in arrival order)."""
  costs = {s: 0.020 + 0.006 * s for s in (2, 4, 8, 24, 32)}  # a fixed and a per-row cost
  b = request_batching.DynamicBatcher(lambda batch: None, max_batch_size=32, max_wait_ms=0,
                              costs=costs)
  assert [b.take(n) for n in (1, 2, 3, 8, 24, 32)] == [1, 2, 3, 8, 24, 32]
  assert b.take(26) == 24  # 0.212 / 26 > 0.164 / 24
  assert b.take(5) == 4  # 0.068 / 5 > 0.044 / 4
  assert request_batching.DynamicBatcher(lambda batch: None, 32, 0).take(26) == 26  # no costs: all
  release = threading.Event()
  batches, handle = _recorder(release)
  b = request_batching.DynamicBatcher(handle, max_batch_size=32, max_wait_ms=0, costs=costs).start()
  busy = b.submit(-1)  # holds the worker while 26 requests queue
  time.sleep(0.2)
  futures = [b.submit(i) for i in range(26)]
  release.set()
  assert busy.result(5) == -1 and [f.result(5) for f in futures] == list(range(26))
  b.stop(5)
  assert batches == [[-1], list(range(24)), [24, 25]]


def test_warm_up_times_every_size_by_its_best_round(client, monkeypatch):
  """The batcher's costs are each padded size's best of COST_ROUNDS interleaved rounds: a
  call slowed once (contention) does not make its size look dearer for good."""
  searcher = client.app.state.service.searcher
  assert set(searcher.batch_seconds) == set(searcher.sizes)
  assert all(s > 0 for s in searcher.batch_seconds.values())
  calls = []

  def timed(shape, queries):
    calls.append(queries.shape[0])
    slow = len(calls) == 1  # the first size's first round only
    return 1.0 if slow else 0.001 * queries.shape[0]

  monkeypatch.setattr(searcher, '_seconds', timed)
  monkeypatch.setattr(searcher, 'batch_seconds', {})
  searcher.warm_up(WARM, ('colt',))
  sizes = list(searcher.sizes)
  assert calls == sizes * searcher_lib.COST_ROUNDS  # round by round over every size
  assert searcher.batch_seconds == {n: 0.001 * n for n in sizes}


def _free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]

def _serve(*args):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return [sys.executable, os.path.join(REPO, 'experiments', 'serve.py'), *map(str, args)], env


def start_serve(log_path, *args):
  """`serve.py ARGS --port P` started on a free port P, its output in `log_path`, once its
  /healthz answers (within 240 s): (the process, its URL, /healthz's answer)."""
  port = _free_port()
  cmd, env = _serve(*args, '--port', port)
  with open(log_path, 'w') as log:
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
  url = f'http://127.0.0.1:{port}'
  deadline = time.time() + 240
  while True:
    if proc.poll() is not None or time.time() > deadline:
      proc.kill()
      raise AssertionError(open(log_path).read()[-3000:])
    try:
      with urllib.request.urlopen(url + '/healthz', timeout=2) as r:
        return proc, url, json.load(r)
    except OSError:
      time.sleep(0.5)


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
  cmd, env = _serve('--store', store_dir, '--model', model, '--warm_settings', '20:1:50,20:30:50')
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
  svc.check(request(method='mmr', k=5, list_length=9))  # new: 2 of 2
  svc.check(request(method='topk', k=5, list_length=11))  # top-k compiles nothing per shape
  svc.check(request(k=3, per_category=1, list_length=9))  # colt's lists: one shape per k, X
  with pytest.raises(InputError, match=r'^k, per_category: 4:2 is not compiled '
                     r'here, .*--max_new_shapes=2\); colt serves '):
    svc.check(request(k=4, per_category=2, list_length=8))
  with pytest.raises(InputError, match=r'^list_length: 13 \(dpp\) is not compiled here'):
    svc.check(request(method='dpp', k=5, list_length=13))
  with pytest.raises(InputError, match=r'^list_length: 12 \(mmr\) is not compiled here'):
    svc.check(request(method='mmr', k=5, list_length=12))
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
