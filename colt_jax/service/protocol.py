"""uvicorn's HTTP protocol (httptools) with each response's head and body sent in one write,
and a direct lane for the service's searches.

uvicorn writes a response's status line and headers as soon as the app sends
`http.response.start`, and its body at `http.response.body`: two `write` system calls per
answer. On loopback each of them also runs the receiving side's TCP processing and wakes the
client, and under load they were the largest single share of the event loop's time between
batches (benchmarks/bench_service.py; py-spy: `write` ahead of parsing and serialising).
`transport.CoalescingTransport` sends a response's head and body in one syscall.
`HttpProtocol` is
uvicorn's `HttpToolsProtocol` over that transport (`uvicorn.Config(http=HttpProtocol)`,
as experiments/serve.py starts it).

The direct lane (`configured(direct=...)`: endpoint.SearchEndpoint, a `DirectLane`) answers
`POST /search` in the protocol itself: the body is handed to the lane when it is complete and
the answer written in one call when it comes, without uvicorn's ASGI cycle (a task per request,
receive and send messages, their checks), the event loop's work on every search between two
batches under load. It takes a request only when nothing else is in flight on its connection
(a search pipelined behind a request the app answers goes to the app, so answers stay in
order), when the client reads its answers (the transport's writing is not paused: the app's
path then waits, and reading stops, so unread answers do not pile up), when it does not ask
`Expect: 100-continue` and when uvicorn's access log is off; the others go to the ASGI app,
whose search lane answers them with the same endpoint. Its answers carry uvicorn's default
headers, keep-alive and `Connection: close` as uvicorn's do. An answer written while its
request's bytes are parsed (a refusal) does not start the keep-alive timer for a request
that follows in the same bytes.

It also guards what uvicorn leaves open (`configured(...)` sets the limits):
* a request must arrive whole (head and body) within `read_timeout_s` of its first byte, or
  of the connection's opening: a client that sends nothing, half a head or half a body is
  answered 408 and disconnected (uvicorn's keep-alive timer only runs between requests);
  time the service does not read (a pipelined request waits for the answer before it) does
  not count;
* a request head larger than `max_header_bytes` is answered 431 and disconnected (httptools
  caps the URL, not the headers): its URL and header lines are counted as they are parsed,
  and a head still arriving by the bytes read since the read it began in;
* a connection beyond `max_connections` open ones is answered 503 and closed at once;
* a search whose client disconnects before its batch starts is dropped from the batch
  (the direct lane's `drop`, or the one the app's search lane records under `PENDING`), a
  pipelined request behind it or not; as with uvicorn (and nginx's 499), a client that
  closes its side before the answer, half-closing included, is taken as gone: its answer is
  not written. (Behind a direct search, a pipelined request stops reading, as uvicorn stops
  it, and the close is seen once that search is answered);
* what uvicorn refuses itself (a malformed request line, Content-Length or chunk) is
  answered as every other refusal is, a JSON `{"error": ...}`, not plain text.
Each of these refusals is reported to `on_refused(kind)` (the service's error counter). A
refusal of a request pipelined behind one received whole and not yet answered is written
after that answer (answers stay in order; the refused request never runs); after a refusal
nothing more is parsed, this side of the connection is shut, and what the client still
sends is read and dropped until it closes (`read_timeout_s` at most), so that closing does
not reset the connection before the client has read the refusal.
"""
from __future__ import annotations

import asyncio
import functools
import json
import time
import typing
from typing import Callable, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from colt_jax.service.transport import CoalescingTransport


# The scope key under which the app's search lane records the `drop` of a request's search
# while it waits (endpoint.SearchEndpoint.answer): called when the connection is lost.
PENDING = 'colt_jax.pending'


class DirectLane(typing.Protocol):
  """What the direct lane answers requests with (endpoint.SearchEndpoint): `POST path_bytes`
  (the exact request target), bodies of at most `max_body_bytes`; `begin(raw, reply, start)`
  calls `reply(status, body)` once, on the event loop (a 500 for its own errors: it does not
  raise), and returns the function that drops the request (or None once answered);
  `too_large(start)` is the (status, body) of a body over the limit."""
  path_bytes: bytes
  max_body_bytes: int

  def begin(self, raw: bytes, reply: Callable, start: float) -> Optional[Callable[[], None]]:
    ...

  def too_large(self, start: float) -> tuple:
    ...


class _NoEvent:
  """The message event a direct request does not need (uvicorn's protocol sets it)."""

  @staticmethod
  def set() -> None:
    pass


class _DirectCycle:
  """A request answered by the direct lane, in the place of uvicorn's RequestResponseCycle:
  the attributes uvicorn's protocol reads and sets (`response_complete`, `keep_alive`,
  `disconnected`, `message_event`), its body and its lane's `drop`."""
  __slots__ = ('keep_alive', 'body', 'more_body', 'response_complete', 'disconnected', 'start',
               'drop')
  message_event = _NoEvent

  def __init__(self, keep_alive: bool, start: float):
    self.keep_alive = keep_alive
    self.body = bytearray()
    self.more_body = True  # until the request has arrived whole
    self.response_complete = False
    self.disconnected = False
    self.start = start
    self.drop = None


READ_TIMEOUT_S = 10.0  # a request's head and body arrive within this (module docstring)
MAX_HEADER_BYTES = 64 * 1024  # a request head larger than this is refused
MAX_CONNECTIONS = 1000  # open connections at most (a file descriptor each)

def error_body(message: str) -> bytes:
  """`{"error": message}` on one line, as JSONResponse writes it: every refusal's body, here
  and in the app."""
  return json.dumps({'error': ' '.join(str(message).split())}, ensure_ascii=False,
                    separators=(',', ':')).encode()


def refusal(status: int, message: str) -> bytes:
  """A whole HTTP/1.1 response: `status`, `error_body(message)`, and the connection closed
  after it."""
  body = error_body(message)
  return STATUS_LINE[status] + (b'content-type: application/json\r\ncontent-length: %d\r\n'
                                b'connection: close\r\n\r\n' % len(body)) + body


class _HeadTooLarge(Exception):
  """Raised by a parser callback when the request head is over `max_header_bytes`."""


class HttpProtocol(HttpToolsProtocol):
  """uvicorn's httptools protocol whose transport is a `CoalescingTransport`, with a reading
  deadline, a cap on request heads and JSON refusals (module docstring)."""
  read_timeout_s: float = READ_TIMEOUT_S
  max_header_bytes: int = MAX_HEADER_BYTES
  max_connections: int = MAX_CONNECTIONS
  on_refused: Optional[Callable[[str], None]] = None
  direct: Optional[DirectLane] = None

  def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
    super().connection_made(CoalescingTransport(transport, self.loop))
    self._timer = None
    self._answering = None  # the cycle being answered (direct or the app's); see `_owed`
    self._deferred = None  # a refusal written once the answers owed before it are
    self._refused = False
    self._shutting_down = False
    self._waiting_since = self.loop.time()  # for a request to arrive whole; None: it has
    self._head_bytes = 0
    self._in_head = True
    self._parsed_head_bytes = 0  # the head's URL and header lines parsed so far
    self._head_over = False
    if len(self.connections) > self.max_connections:  # this one included
      self._refuse(503, f'connection: the service holds {self.max_connections} open '
                   'connections already (--max_connections)', 'unavailable', linger=False)
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
    if since is not None and self.flow.read_paused:
      # the service stopped reading (a pipelined request waits for the answer before it):
      # the request's time runs again from when reading resumes (`on_response_complete`)
      self._timer = self.loop.call_later(self.read_timeout_s, self._check_deadline)
      return
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

  def _owed(self) -> bool:
    """Whether an earlier request, received whole, still waits for its answer: a refusal of a
    request after it is written after that answer (answers stay in order)."""
    cycle = self._answering
    return cycle is not None and not cycle.response_complete and not cycle.more_body

  def _refuse(self, status: int, message: str, kind: str, linger: bool = True) -> None:
    if self._refused:  # one refusal a connection
      return
    self._stop_timer()
    if self.on_refused is not None:
      self.on_refused(kind)
    if self.transport.is_closing():
      return
    self._refused = True  # nothing the client sends after it is parsed
    if self._owed():  # written by `on_response_complete`
      self._deferred = refusal(status, message)
      self.flow.pause_reading()
      # the refused request, if it was queued (its head whole), never runs; the requests
      # queued before it, received whole, are answered first
      for queued in [q for q in self.pipeline if q[0].more_body]:
        self.pipeline.remove(queued)
      return
    self._end_with(refusal(status, message), linger)

  def _end_with(self, answer: bytes, linger: bool = True) -> None:
    """Writes a refusal and ends the connection: the requests still in it are gone for the
    app and the lane; with `linger` (unless the server is shutting down), this side is shut
    once the refusal is written and what the client still sends is read and dropped until it
    closes (at most `read_timeout_s`), so that closing over unread bytes does not reset the
    connection before the client reads it; else the connection is closed."""
    self._abandon()  # (none of them has a search waiting: `_owed` deferred those)
    self.transport.write(answer)
    if linger and not self._shutting_down and self.transport.can_write_eof():
      self.transport.write_eof()
      self.flow.resume_reading()
      self._timer = self.loop.call_later(self.read_timeout_s, self.transport.close)
    else:
      self.transport.close()

  def data_received(self, data: bytes) -> None:
    if self._refused:  # after a refusal: dropped, not parsed
      return
    if self._in_head:
      self._head_bytes += len(data)
    super().data_received(data)
    if (self._in_head and self._head_bytes > self.max_header_bytes and not self._refused
        and not self.transport.is_closing()):
      self._refuse(431, self._head_message(), 'too_large')

  def _count_head(self, size: int) -> None:
    """Counts a parsed part of the request head (its URL, a header line); over
    `max_header_bytes`, parsing stops here (`send_400_response` answers 431)."""
    self._parsed_head_bytes += size
    if self._parsed_head_bytes > self.max_header_bytes:
      self._head_over = True
      raise _HeadTooLarge()  # httptools ends feed_data with HttpParserCallbackError

  def on_url(self, url: bytes) -> None:
    super().on_url(url)
    self._count_head(len(url))

  def on_header(self, name: bytes, value: bytes) -> None:
    super().on_header(name, value)
    self._count_head(len(name) + len(value) + 4)  # 'name: value\r\n'

  def on_message_begin(self) -> None:
    super().on_message_begin()
    self._parsed_head_bytes = 0
    # uvicorn stops the keep-alive timer when data arrives; a direct answer written while
    # that data is parsed (a refusal) starts it again, and this request must not be cut off.
    self._unset_keepalive_if_required()
    self._in_head = True  # its bytes count from the chunk after the one it began in
    self._waiting_since = self.loop.time()

  def on_headers_complete(self) -> None:
    self._in_head = False
    self._head_bytes = 0
    lane, parser = self.direct, self.parser
    if (lane is not None and self.url == lane.path_bytes and parser.get_method() == b'POST'
        and not self.expect_100_continue and not self.access_log
        and not self.flow.write_paused  # else the app's path waits for the client to read
        and (self.cycle is None or self.cycle.response_complete)
        and not parser.should_upgrade()):
      keep_alive = parser.get_http_version() != '1.0' and parser.should_keep_alive()
      self.cycle = self._answering = cycle = _DirectCycle(keep_alive, time.perf_counter())
      for name, value in self.headers:
        if name == b'content-length' and value.isdigit() and int(value) > lane.max_body_bytes:
          self._direct_reply(cycle, *lane.too_large(cycle.start))
      return
    super().on_headers_complete()
    cycle = self.cycle  # started at once unless queued behind the one being answered
    if cycle is not None and not (self.pipeline and self.pipeline[0][0] is cycle):
      self._answering = cycle

  def on_body(self, body: bytes) -> None:
    cycle = self.cycle
    if type(cycle) is not _DirectCycle:  # pylint: disable=unidiomatic-typecheck
      super().on_body(body)
    elif not cycle.response_complete:
      cycle.body += body
      if len(cycle.body) > self.direct.max_body_bytes:
        self._direct_reply(cycle, *self.direct.too_large(cycle.start))

  def on_message_complete(self) -> None:
    self._waiting_since = None
    cycle = self.cycle
    if type(cycle) is not _DirectCycle:  # pylint: disable=unidiomatic-typecheck
      super().on_message_complete()
    elif not cycle.response_complete:
      raw, cycle.body, cycle.more_body = bytes(cycle.body), None, False
      cycle.drop = self.direct.begin(raw, functools.partial(self._direct_reply, cycle),
                                     cycle.start)

  def _direct_reply(self, cycle: _DirectCycle, status: Optional[int], body: bytes) -> None:
    """The answer of a direct request, head and body in one write; then what uvicorn does
    after a response (keep-alive, the next pipelined request)."""
    if status is None or cycle.response_complete or cycle.disconnected:
      return
    cycle.response_complete = True
    if self.transport.is_closing():
      return
    head = [STATUS_LINE[status]]
    head.extend(b'%s: %s\r\n' % pair for pair in self.server_state.default_headers)
    head.append(b'content-type: application/json\r\ncontent-length: %d\r\n' % len(body))
    if not cycle.keep_alive:
      head.append(b'connection: close\r\n')
    head.append(b'\r\n')
    self.transport.write_now((b''.join(head), body))
    if not cycle.keep_alive:
      self.transport.close()
    self.on_response_complete()

  def _abandon(self) -> None:
    """The requests still in flight on this connection, the one being answered and the one
    after it when pipelined (uvicorn's `cycle`), are gone: marked disconnected (an app
    request waiting for its body learns it), and a search waiting for its batch is dropped
    (if its batch has not started: request_batching.py; no answer)."""
    for cycle in {id(c): c for c in (self._answering, self.cycle) if c is not None}.values():
      if cycle.response_complete:
        continue
      direct = type(cycle) is _DirectCycle  # pylint: disable=unidiomatic-typecheck
      drop = cycle.drop if direct else cycle.scope.get(PENDING)
      cycle.disconnected = True
      cycle.message_event.set()
      if drop is not None:
        drop()

  def connection_lost(self, exc: Optional[Exception]) -> None:
    self._stop_timer()
    self._abandon()
    super().connection_lost(exc)

  def on_response_complete(self) -> None:
    if self._deferred is not None and not self.pipeline:  # a refusal that waited for the
      deferred, self._deferred = self._deferred, None  # answers before it (`_refuse`)
      self.server_state.total_requests += 1
      if not self.transport.is_closing():
        self._end_with(deferred)
      return
    queued = self.pipeline[-1][0] if self.pipeline else None  # the next to start
    paused = self.flow.read_paused
    super().on_response_complete()  # starts the next pipelined request, if any
    if queued is not None and not (self.pipeline and self.pipeline[-1][0] is queued):
      self._answering = queued
    if paused and self._waiting_since is not None and not self.transport.is_closing():
      self._waiting_since = self.loop.time()  # reading resumed: a request mid-way starts anew

  def shutdown(self) -> None:
    """uvicorn's, except that a connection ending in a refusal closes now (no lingering),
    once the answers owed before the refusal are written."""
    self._shutting_down = True
    if self._refused and self._deferred is None:
      self.transport.close()
      return
    super().shutdown()

  def send_400_response(self, msg: str) -> None:
    if self._head_over:
      self._refuse(431, self._head_message(), 'too_large')
    else:
      self._refuse(400, f'request: {msg.rstrip(".")}', 'bad_request')

  def _head_message(self) -> str:
    return f'headers: the request head is over {self.max_header_bytes} bytes'


def configured(read_timeout_s: float = READ_TIMEOUT_S, max_header_bytes: int = MAX_HEADER_BYTES,
               max_connections: int = MAX_CONNECTIONS,
               on_refused: Optional[Callable[[str], None]] = None,
               direct: Optional[DirectLane] = None) -> type:
  """`HttpProtocol` with these limits and direct lane, for `uvicorn.Config(http=...)`."""
  return type('HttpProtocol', (HttpProtocol,), {
      'read_timeout_s': float(read_timeout_s), 'max_header_bytes': int(max_header_bytes),
      'max_connections': int(max_connections),
      'on_refused': staticmethod(on_refused) if on_refused else None,
      'direct': direct})
