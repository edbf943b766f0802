"""colt_jax/service/protocol.py: writes leave in pairs or at the end of the event loop's turn,
in order, and a real uvicorn server over `HttpProtocol` answers each response in one write."""
import asyncio
import socket
import threading
import time

import uvicorn

from colt_jax.service import protocol


class _Recorder:
  """A transport that records what reaches it."""

  def __init__(self):
    self.sent, self.calls, self.closed, self.aborted = [], [], False, False

  def write(self, data):
    self.calls.append('write')
    self.sent.append(bytes(data))

  def writelines(self, chunks):
    self.calls.append('writelines')
    self.sent.append(b''.join(chunks))

  def close(self):
    self.closed = True

  def abort(self):
    self.aborted = True

  def get_write_buffer_size(self):
    return 0

  def is_closing(self):
    return self.closed or self.aborted

  def get_extra_info(self, name, default=None):
    return f'extra:{name}'


def test_a_head_and_body_written_together_leave_in_one_call():
  async def run():
    inner = _Recorder()
    t = protocol.CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(b'HTTP/1.1 200 OK\r\n\r\n')
    assert inner.sent == [] and t.get_write_buffer_size() == 19  # held, counted
    t.write(b'{"a": 1}')
    assert inner.calls == ['writelines'] and inner.sent == [b'HTTP/1.1 200 OK\r\n\r\n{"a": 1}']
    await asyncio.sleep(0)  # the end-of-turn flush finds nothing held
    assert len(inner.sent) == 1
    t.write(b'lone')  # a write with no partner leaves at the end of the turn, in order
    t.write(b'')  # nothing to send: not held, not paired
    assert inner.sent == [b'HTTP/1.1 200 OK\r\n\r\n{"a": 1}']
    await asyncio.sleep(0)
    assert inner.sent[1:] == [b'lone']
    t.write(b'a')
    t.write(b'b')
    t.write(b'c')  # a third write in the turn is held again
    t.close()  # flushes before closing
    assert inner.sent[2:] == [b'ab', b'c'] and inner.closed
    t.write(b'dropped')
    t.abort()
    await asyncio.sleep(0)
    assert inner.sent[4:] == [] and inner.aborted
    assert t.get_extra_info('peername') == 'extra:peername'  # the rest is the transport's
    lost = _Recorder()
    t = protocol.CoalescingTransport(lost, asyncio.get_running_loop())
    t.write(memoryview(b'held'))  # kept as bytes of its own, not the caller's buffer
    lost.aborted = True  # the connection is lost before the turn ends: the write is dropped
    await asyncio.sleep(0)
    assert lost.sent == []
  asyncio.run(run())


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

  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  protocol.CoalescingTransport.__init__ = counting_init
  try:
    server = uvicorn.Server(uvicorn.Config(app, host='127.0.0.1', port=port, log_level='error',
                                           http=protocol.HttpProtocol, lifespan='off'))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
      assert thread.is_alive() and time.monotonic() < deadline, 'the server did not start'
      threading.Event().wait(0.01)
    with socket.create_connection(('127.0.0.1', port)) as c:
      c.settimeout(10)
      for _ in range(3):
        c.sendall(b'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}')
        got = b''
        while not got.endswith(body):
          chunk = c.recv(65536)
          assert chunk, f'the server closed the connection after {got[:80]!r}'
          got += chunk
        assert got.startswith(b'HTTP/1.1 200 OK\r\n') and got.count(body) == 1
    server.should_exit = True
    thread.join(10)
  finally:
    protocol.CoalescingTransport.__init__ = original
  assert len(writes) == 3  # one send per answer: head and body together
