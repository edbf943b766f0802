"""What the service's test modules share: the tiny store's sizes and texts, the warm-up
shapes, answers' hits and scores, a real server of the app (`_RealServer`, `_post`)."""
import socket
import warnings

import numpy as np

from colt_jax.service import searcher as searcher_lib
from service_run import ThreadedServer  # pylint: disable=g-bad-import-order


with warnings.catch_warnings():  # starlette's TestClient would rather have httpx2, not here
  warnings.simplefilter('ignore')
  from fastapi.testclient import TestClient  # pylint: disable=g-import-not-at-top,unused-import

DIM, PHOTOS, N = 16, 40, 16

NAMES = ('bridge', 'night', 'river', 'tower')

TEXTS = ('the view', 'big ben at night', 'of the', 'view of the river bank in the evening')

WARM = (searcher_lib.ListShape(), searcher_lib.ListShape(5, 2, 10))

def _unit(rows):
  rows = np.asarray(rows, np.float32)
  return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def _hits(answer):
  return [(r['photo_id'], r['group'], r['category']) for r in answer['results']]

def _scores(answer):
  return [r['score'] for r in answer['results']]

def _expected(colt, hit):
  """What /search lists for a SearchResult: groups are phi's categories, -1 for photos of
  phi's other labels (their category is phi's name of it: irrelevant, query)."""
  v = len(colt.category_names)
  return [(p, c if c < v else -1, n)
          for p, c, n in zip(hit.photo_ids, hit.categories, hit.category_names)]

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
