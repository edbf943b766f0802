"""colt_jax/service/protocol.py: a real uvicorn server over `HttpProtocol` answers each
response in one write, and refuses what it must (408, 431, 400, 503) as one JSON line."""
import asyncio
import logging
import socket
import time


from colt_jax.service import protocol
from service_run import ThreadedServer  # pylint: disable=g-bad-import-order


def test_uvicorn_over_http_protocol_answers_each_response_in_one_write():
  """A real server: each keep-alive answer (head and body) arrives complete, and the socket
  saw one send per answer (counted on the protocol's transports)."""
  body = b'{"x": "' + b'y' * 3000 + b'"}'
  writes = []

  original = protocol.CoalescingTransport.__init__

  def counting_init(self, transport, loop):
    original(self, transport, loop)
    real_write, real_lines = transport.write, transport.writelines
    self._transport = type('T', (), {
        'write': lambda _, d: (writes.append(1), real_write(d)),
        'writelines': lambda _, c: (writes.append(1), real_lines(c)),
        '__getattr__': lambda _, n: getattr(transport, n)})()

  async def app(scope, receive, send):
    if scope['type'] != 'http':
      return
    await receive()
    await send({'type': 'http.response.start', 'status': 200,
                'headers': [(b'content-type', b'application/json'),
                            (b'content-length', b'%d' % len(body))]})
    await send({'type': 'http.response.body', 'body': body})

  protocol.CoalescingTransport.__init__ = counting_init
  try:
    with ThreadedServer(app, protocol.HttpProtocol, lifespan='off') as server:
      with socket.create_connection(('127.0.0.1', server.port)) as c:
        c.settimeout(10)
        for _ in range(3):
          c.sendall(b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}')
          got = b''
          while not got.endswith(body):
            chunk = c.recv(65536)
            assert chunk, f'the server closed the connection after {got[:80]!r}'
            got += chunk
          assert got.startswith(b'HTTP/1.1 200 OK\r\n') and got.count(body) == 1
  finally:
    protocol.CoalescingTransport.__init__ = original
  assert len(writes) == 3  # one send per answer: head and body together


class _Server(ThreadedServer):
  """`ThreadedServer` over `protocol.configured(...)`, whose app reads the whole body and
  answers 200 `{}` (after `slow_s` seconds for /slow); the refusals its protocol reports are
  in `refused`."""

  def __init__(self, slow_s: float = 1.0, **limits):
    self.refused = []

    async def app(scope, receive, send):
      if scope['type'] != 'http':
        return
      while (await receive()).get('more_body'):
        pass
      if scope['path'] == '/slow':  # an answer that takes a while
        await asyncio.sleep(slow_s)
      await send({'type': 'http.response.start', 'status': 200,
                  'headers': [(b'content-type', b'application/json'),
                              (b'content-length', b'2')]})
      await send({'type': 'http.response.body', 'body': b'{}'})

    super().__init__(app, protocol.configured(on_refused=self.refused.append, **limits),
                     lifespan='off')

  def exchange(self, data: bytes, wait: float = 10.0) -> tuple:
    """(seconds until the server closed the connection, everything it sent)."""
    with socket.create_connection(('127.0.0.1', self.port)) as c:
      c.settimeout(wait)
      t0 = time.monotonic()
      if data:
        c.sendall(data)
      got = b''
      while chunk := c.recv(65536):
        got += chunk
      return time.monotonic() - t0, got


def _json_refusal(got: bytes, status: int) -> dict:
  import json  # pylint: disable=g-import-not-at-top
  head, _, body = got.partition(b'\r\n\r\n')
  assert head.startswith(b'HTTP/1.1 %d ' % status), got[:200]
  assert b'content-type: application/json' in head and b'connection: close' in head
  return json.loads(body)


def test_a_request_that_does_not_arrive_whole_is_answered_408_and_closed():
  body = b'{"vector": [1.0]}'
  with _Server(read_timeout_s=0.3) as server:
    for partial in (b'',  # nothing at all
                    b'POST /search HTTP/1.1\r\nHost: x\r\nX-a: ',  # half a head
                    b'POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s'
                    % (len(body), body[:5]),  # half a body
                    b'POST /search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'
                    b'20\r\nabc'):  # half a chunk
      seconds, got = server.exchange(partial)
      assert 0.25 < seconds < 5, (partial, seconds)
      assert 'within 0.3 s' in _json_refusal(got, 408)['error']
    # A whole request is answered, and the deadline does not cut a keep-alive connection's
    # later requests that arrive whole.
    with socket.create_connection(('127.0.0.1', server.port)) as c:
      c.settimeout(10)
      for _ in range(2):
        time.sleep(0.2)
        c.sendall(b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}')
        got = b''
        while not got.endswith(b'{}'):
          got += c.recv(65536)
        assert got.startswith(b'HTTP/1.1 200 OK')
  assert server.refused == ['timeout'] * 4


def test_a_request_head_over_the_limit_is_answered_431_and_closed():
  with _Server(max_header_bytes=4096) as server:
    _, got = server.exchange(b'GET / HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'a' * 20000)
    assert 'over 4096 bytes' in _json_refusal(got, 431)['error']
    # A head under the limit with a body over it is a request like any other.
    body = b'x' * 50000
    _, got = server.exchange(b'POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n'
                             b'Content-Length: %d\r\n\r\n%s' % (len(body), body))
    assert got.startswith(b'HTTP/1.1 200 OK')
  assert server.refused == ['too_large']


def test_a_whole_head_over_the_limit_is_refused_however_it_arrives():
  """A complete head over the limit is refused whether it arrives in the read it began in
  (one send), split after its first bytes, or as many small headers; one just under is not."""
  limit = 4096
  request = b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n'
  big = request + b'X-Big: ' + b'a' * (2 * limit) + b'\r\n\r\n'
  many = request + b''.join(b'X-%d: %s\r\n' % (i, b'b' * 40) for i in range(200)) + b'\r\n'
  under = request + b'X-Big: ' + b'a' * (limit - 200) + b'\r\n\r\n'
  with _Server(max_header_bytes=limit) as server:
    for data in (big, many):
      _, got = server.exchange(data)
      assert 'over 4096 bytes' in _json_refusal(got, 431)['error']
    with socket.create_connection(('127.0.0.1', server.port)) as c:
      c.settimeout(10)
      c.sendall(big[:100])
      time.sleep(0.2)  # the rest arrives in a later read, the head completes there
      c.sendall(big[100:])
      got = b''
      while chunk := c.recv(65536):
        got += chunk
    assert 'over 4096 bytes' in _json_refusal(got, 431)['error']
    _, got = server.exchange(under)
    assert got.startswith(b'HTTP/1.1 200 OK'), got[:100]
  assert server.refused == ['too_large'] * 3


def test_what_uvicorn_refuses_itself_is_a_json_400():
  with _Server() as server:
    for bad in (b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n',
                b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n',
                b'GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n'):
      _, got = server.exchange(bad)
      assert _json_refusal(got, 400)['error'].startswith('request: Invalid HTTP request')
  assert server.refused == ['bad_request'] * 3


def test_a_connection_over_the_limit_is_answered_503_and_closed():
  with _Server(max_connections=2) as server:
    held = [socket.create_connection(('127.0.0.1', server.port)) for _ in range(2)]
    try:
      time.sleep(0.2)
      _, got = server.exchange(b'')
      assert 'holds 2 open connections' in _json_refusal(got, 503)['error']
    finally:
      for c in held:
        c.close()
    time.sleep(0.2)  # both closed: a connection is served again
    _, got = server.exchange(b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
    assert got.startswith(b'HTTP/1.1 200 OK')
  assert server.refused == ['unavailable']


def test_a_refused_connection_lingers_until_the_client_closes_except_over_the_cap():
  """After a refusal the service shuts its side and reads (and drops) what the client still
  sends until the client closes: the client reads the refusal, then the end of the stream,
  even with unread bytes behind it; nothing is written after the end (an app still reading
  asked for `100 Continue`: no error on the loop); a shutdown closes such a connection at
  once; a connection over the cap is closed at once."""
  errors = []

  class Errors(logging.Handler):
    def emit(self, record):
      errors.append(record.getMessage())

  handler = Errors(logging.ERROR)
  logging.getLogger('asyncio').addHandler(handler)
  with _Server(read_timeout_s=3.0, max_connections=2) as server:
    with socket.create_connection(('127.0.0.1', server.port)) as c:
      c.settimeout(10)
      c.sendall(b'POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n'
                b'Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n' + b'x' * 100_000)
      got = b''
      while chunk := c.recv(65536):  # the refusal, then the end of the stream (no reset)
        got += chunk
      assert _responses(got) == ['HTTP/1.1 400 Bad Request'], got[:200]
      c.sendall(b'more bytes after the end')  # read and dropped: nothing comes back
      time.sleep(0.2)
      assert len(server.server.server_state.connections) == 1  # lingering for the client
    time.sleep(0.3)
    assert not server.server.server_state.connections  # the client closed: so did it
    held = [socket.create_connection(('127.0.0.1', server.port)) for _ in range(2)]
    try:
      time.sleep(0.2)
      _, got = server.exchange(b'')
      assert _responses(got) == ['HTTP/1.1 503 Service Unavailable']
      time.sleep(0.2)
      assert len(server.server.server_state.connections) == 2  # the refused one is gone
    finally:
      for c in held:
        c.close()
    # A client that keeps its side open after a refusal: a shutdown closes it now.
    c = socket.create_connection(('127.0.0.1', server.port))
    c.sendall(b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab')  # a 408
    c.settimeout(10)
    got = b''
    while chunk := c.recv(65536):
      got += chunk
    assert _responses(got) == ['HTTP/1.1 408 Request Timeout']
    t0 = time.monotonic()
  seconds = time.monotonic() - t0  # the `with` block's exit: a shutdown
  c.close()
  logging.getLogger('asyncio').removeHandler(handler)
  assert seconds < 2.0, seconds
  assert server.refused == ['bad_request', 'unavailable', 'timeout']
  assert not errors, errors


def _responses(got: bytes) -> list:
  """The status lines of the HTTP responses in `got`, in order."""
  out = []
  while got:
    head, _, rest = got.partition(b'\r\n\r\n')
    size = int(head.lower().split(b'content-length: ')[1].split(b'\r\n')[0])
    out.append(head.split(b'\r\n')[0].decode())
    got = rest[size:]
  return out


def _pipelined(port: int, first: bytes, then: bytes = b'', pause: float = 0.0) -> list:
  """Sends `first`, after `pause` seconds `then`, on one connection; the responses' status
  lines until the server closes it."""
  with socket.create_connection(('127.0.0.1', port)) as c:
    c.settimeout(10)
    c.sendall(first)
    if then:
      time.sleep(pause)
      c.sendall(then)
    got = b''
    while chunk := c.recv(65536):
      got += chunk
  return _responses(got)


def test_a_refusal_of_a_pipelined_request_comes_after_the_answers_owed_before_it():
  """A request refused (431, 400, 408) while the one before it on its connection, received
  whole, is still being answered: that answer first, then the refusal, then the connection
  closes; a refused request queued behind it never runs."""
  slow = b'GET /slow HTTP/1.1\r\nHost: x\r\n\r\n'
  with _Server(slow_s=1.0, max_header_bytes=4096, read_timeout_s=0.4) as server:
    port = server.port
    big = _pipelined(port, slow + b'GET / HTTP/1.1\r\nHost: x\r\n',
                     b'X-Big: ' + b'a' * 20000, pause=0.2)
    assert big == ['HTTP/1.1 200 OK', 'HTTP/1.1 431 Request Header Fields Too Large'], big
    bad = _pipelined(port, slow + b'GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n')
    assert bad == ['HTTP/1.1 200 OK', 'HTTP/1.1 400 Bad Request'], bad
    half = _pipelined(port, slow + b'GET / HTTP/1.1\r\nHost: x\r\nX-a: ')
    assert half == ['HTTP/1.1 200 OK', 'HTTP/1.1 408 Request Timeout'], half
    # Its head whole, a POST is queued behind /slow; its body comes after the deadline.
    late = _pipelined(port, slow + b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n'
                      b'\r\n', b'{}', pause=0.6)
    assert late == ['HTTP/1.1 200 OK', 'HTTP/1.1 408 Request Timeout'], late
  assert server.refused == ['too_large', 'bad_request', 'timeout', 'timeout']
