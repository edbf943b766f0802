"""uvicorn's HTTP protocol (httptools) with each response's head and body sent in one write.

uvicorn writes a response's status line and headers as soon as the app sends
`http.response.start`, and its body at `http.response.body`: two `write` system calls per
answer. On loopback each of them also runs the receiving side's TCP processing and wakes the
client, and under load they were the largest single share of the event loop's time between
batches (benchmarks/bench_service.py; py-spy: `write` ahead of parsing and serialising).
`CoalescingTransport` holds a write until the next write or the end of the event loop's turn,
whichever comes first, and sends both together: a search's head and body leave in one
syscall, and nothing waits beyond the turn in which it was written. `HttpProtocol` is
uvicorn's `HttpToolsProtocol` over that transport (`uvicorn.Config(http=HttpProtocol)`,
as experiments/serve.py starts it).

It also guards what uvicorn leaves open (`configured(...)` sets the limits):
* a request must arrive whole (head and body) within `read_timeout_s` of its first byte, or
  of the connection's opening: a client that sends nothing, half a head or half a body is
  answered 408 and disconnected (uvicorn's keep-alive timer only runs between requests);
* a request head larger than `max_header_bytes` is answered 431 and disconnected (httptools
  caps the URL, not the headers);
* a connection beyond `max_connections` open ones is answered 503 and closed at once;
* a search whose client disconnects before its batch starts is dropped from the batch
  (`PENDING`: the app's search lane records the request's future there); as with uvicorn
  (and nginx's 499), a client that closes its side before the answer, half-closing included,
  is taken as gone: its answer is not written;
* what uvicorn refuses itself (a malformed request line, Content-Length or chunk) is
  answered as every other refusal is, a JSON `{"error": ...}`, not plain text.
Each of these refusals is reported to `on_refused(kind)` (the service's error counter).
"""
from __future__ import annotations

import asyncio
import json
from typing import Callable, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
  """An asyncio transport whose writes go out in pairs (module docstring); every other
  method is the wrapped transport's."""

  def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
    self._transport = transport
    self._loop = loop
    self._held: Optional[bytes] = None

  def write(self, data) -> None:
    if not data:
      return
    if self._held is None:
      self._held = data if isinstance(data, bytes) else bytes(data)  # not the caller's buffer
      self._loop.call_soon(self.flush)
      return
    held, self._held = self._held, None
    self._transport.writelines((held, data))  # one vectored write, no copy

  def writelines(self, chunks) -> None:
    for chunk in chunks:
      self.write(chunk)

  def flush(self) -> None:
    """Sends a held write now (called at the end of the turn it was written in); dropped
    when the connection closed meanwhile, as the transport drops writes after it is lost."""
    if self._held is not None:
      held, self._held = self._held, None
      if not self._transport.is_closing():
        self._transport.write(held)

  def get_write_buffer_size(self) -> int:
    return self._transport.get_write_buffer_size() + len(self._held or b'')

  def write_eof(self) -> None:
    self.flush()
    self._transport.write_eof()

  def close(self) -> None:
    self.flush()
    self._transport.close()

  def abort(self) -> None:
    self._held = None
    self._transport.abort()

  def __getattr__(self, name):
    return getattr(self._transport, name)


# The scope key under which the search lane (app.py) records a request's (batcher future,
# asyncio waiter) while its search waits.
PENDING = 'colt_jax.pending'


class ClientGone(Exception):
  """Its client disconnected before the search was answered."""


READ_TIMEOUT_S = 10.0  # a request's head and body arrive within this (module docstring)
MAX_HEADER_BYTES = 64 * 1024  # a request head larger than this is refused
MAX_CONNECTIONS = 1000  # open connections at most (a file descriptor each)

_REASONS = {400: b'Bad Request', 408: b'Request Timeout',
            431: b'Request Header Fields Too Large', 503: b'Service Unavailable'}


def error_body(message: str) -> bytes:
  """`{"error": message}` on one line, as JSONResponse writes it: every refusal's body, here
  and in the app."""
  return json.dumps({'error': ' '.join(str(message).split())}, ensure_ascii=False,
                    separators=(',', ':')).encode()


def refusal(status: int, message: str) -> bytes:
  """A whole HTTP/1.1 response: `status`, `error_body(message)`, and the connection closed
  after it."""
  body = error_body(message)
  return (b'HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n'
          b'connection: close\r\n\r\n' % (status, _REASONS[status], len(body))) + body


class HttpProtocol(HttpToolsProtocol):
  """uvicorn's httptools protocol whose transport is a `CoalescingTransport`, with a reading
  deadline, a cap on request heads and JSON refusals (module docstring)."""
  read_timeout_s: float = READ_TIMEOUT_S
  max_header_bytes: int = MAX_HEADER_BYTES
  max_connections: int = MAX_CONNECTIONS
  on_refused: Optional[Callable[[str], None]] = None

  def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
    super().connection_made(CoalescingTransport(transport, self.loop))
    self._timer = None
    self._waiting_since = self.loop.time()  # for a request to arrive whole; None: it has
    self._head_bytes = 0
    self._in_head = True
    if len(self.connections) > self.max_connections:  # this one included
      self._refuse(503, f'connection: the service holds {self.max_connections} open '
                   'connections already (--max_connections)', 'unavailable')
      return
    self._timer = self.loop.call_later(self.read_timeout_s, self._check_deadline)

  # One timer per connection, not one per request (a timer armed and cancelled per request
  # was measurable in the event loop's time under load): when it fires, it refuses a request
  # that has been arriving longer than the deadline, else it fires again when the request
  # now arriving (or the next one) could first pass it.
  def _check_deadline(self) -> None:
    self._timer = None
    if self.transport.is_closing():
      return
    now = self.loop.time()
    since = self._waiting_since
    if since is not None and now - since >= self.read_timeout_s:
      self._refuse(408, f'request: not received whole within {self.read_timeout_s:g} s '
                   '(--read_timeout_s)', 'timeout')
      return
    delay = self.read_timeout_s - (now - since) if since is not None else self.read_timeout_s
    self._timer = self.loop.call_later(delay, self._check_deadline)

  def _stop_timer(self) -> None:
    if self._timer is not None:
      self._timer.cancel()
      self._timer = None

  def _refuse(self, status: int, message: str, kind: str) -> None:
    self._stop_timer()
    if self.on_refused is not None:
      self.on_refused(kind)
    if not self.transport.is_closing():
      self.transport.write(refusal(status, message))
      self.transport.close()

  def data_received(self, data: bytes) -> None:
    if self._in_head:
      self._head_bytes += len(data)
    super().data_received(data)
    if (self._in_head and self._head_bytes > self.max_header_bytes
        and not self.transport.is_closing()):
      self._refuse(431, f'headers: the request head is over {self.max_header_bytes} bytes',
                   'too_large')

  def on_message_begin(self) -> None:
    super().on_message_begin()
    self._in_head = True  # its bytes count from the chunk after the one it began in
    self._waiting_since = self.loop.time()

  def on_headers_complete(self) -> None:
    self._in_head = False
    self._head_bytes = 0
    super().on_headers_complete()

  def on_message_complete(self) -> None:
    self._waiting_since = None
    super().on_message_complete()

  def connection_lost(self, exc: Optional[Exception]) -> None:
    self._stop_timer()
    cycle = self.cycle
    if cycle is not None and not cycle.response_complete:
      future, waiter = cycle.scope.get(PENDING) or (None, None)
      if future is not None:
        future.cancel()  # dropped if its batch has not started (batching.py)
        if not waiter.done():
          waiter.set_exception(ClientGone())
    super().connection_lost(exc)

  def send_400_response(self, msg: str) -> None:
    self._refuse(400, f'request: {msg.rstrip(".")}', 'bad_request')


def configured(read_timeout_s: float = READ_TIMEOUT_S, max_header_bytes: int = MAX_HEADER_BYTES,
               max_connections: int = MAX_CONNECTIONS,
               on_refused: Optional[Callable[[str], None]] = None) -> type:
  """`HttpProtocol` with these limits, for `uvicorn.Config(http=...)`."""
  return type('HttpProtocol', (HttpProtocol,), {
      'read_timeout_s': float(read_timeout_s), 'max_header_bytes': int(max_header_bytes),
      'max_connections': int(max_connections),
      'on_refused': staticmethod(on_refused) if on_refused else None})
