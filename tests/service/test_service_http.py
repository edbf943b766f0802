"""The HTTP service under slow searches and refusals (503, keep-alive, answers nobody reads),
and what it serves besides searches: photo files, health, metrics, docs and the page."""
import hashlib
import json
import os
import re
import socket
import time

import numpy as np

from colt_jax.data import features
from colt_jax.service import app as app_lib
from colt_jax.service import service as service_lib
from colt_jax.service.photos import PhotoCatalog
from tiny_clip import random_image  # pylint: disable=g-bad-import-order
from service_shared import DIM, PHOTOS, TEXTS, _unit, _hits, _expected, _RealServer, _post, TestClient  # pylint: disable=g-bad-import-order


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
  # A search of its own: the metrics below count it, whichever modules ran before on this
  # worker (the client is the session's).
  assert client.post('/search', json={'query': 'big ben', 'k': 3}).status_code == 200
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
