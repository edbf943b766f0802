"""POST /search from a request's body to its answer: `SearchEndpoint`, for both ways a search
arrives, the HTTP protocol's direct lane (`protocol.HttpProtocol`) and the ASGI app (app.py's
`_SearchLane`, and the route for /docs)."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from absl import logging
import orjson
import pydantic

from colt_jax.service import protocol
from colt_jax.service import schemas
from colt_jax.service.service import Service
from colt_jax.util.errors import InputError


def too_large_body(limit: int) -> bytes:
  """The error body of a request body over `limit` bytes."""
  return protocol.error_body(f'body: over the limit of {limit} bytes (--max_body_bytes)')


class _Search:
  """One search in flight. The batcher delivers its outcome here as to an asyncio future
  (`request_batching.deliver`: get_loop, done, cancel, set_result, set_exception), on the event
  loop; it replies once (`SearchEndpoint.begin`)."""
  __slots__ = ('endpoint', 'loop', 'reply', 'start', 'future', 'timer', 'finished')

  def __init__(self, endpoint: 'SearchEndpoint', loop, reply, start: float):
    self.endpoint, self.loop, self.reply, self.start = endpoint, loop, reply, start
    self.future = self.timer = None
    self.finished = False

  def get_loop(self):
    return self.loop

  def done(self) -> bool:
    return self.finished

  def _finish(self, status, body) -> None:
    if self.finished:
      return
    self.finished = True
    if self.timer is not None:
      self.timer.cancel()
    if status is not None:
      self.endpoint.count(status, self.start)
    self.reply(status, body)

  def set_result(self, answer: dict) -> None:
    if self.finished:
      return
    try:
      body = orjson.dumps(self.endpoint.service.searcher.response(answer))
    except Exception as e:  # pylint: disable=broad-except
      self._finish(*self.endpoint.internal(e))
      return
    self._finish(200, body)

  def set_exception(self, error: BaseException) -> None:
    if isinstance(error, InputError):
      self._finish(*self.endpoint.refused(422, str(error)))
    else:
      self._finish(*self.endpoint.internal(error))

  def cancel(self) -> None:
    """Its future was cancelled while it waited (by `drop` or `timed_out`, which replied)."""
    if not self.finished:
      self._finish(*self.endpoint.refused(503, 'the search was cancelled', 'unavailable'))

  def timed_out(self) -> None:
    self.timer = None
    self.future.cancel()  # dropped if its batch has not started
    self._finish(*self.endpoint.refused(
        503, f'the search took longer than --request_timeout_s='
        f'{self.endpoint.timeout_s:g} s', 'timeout'))

  def drop(self) -> None:
    """Its client went away: the search is dropped if its batch has not started, and nothing
    is answered or counted (`reply(None, None)`)."""
    if self.future is not None:
      self.future.cancel()
    self._finish(None, None)


class SearchEndpoint:
  """POST /search, from a request's body to its answer (HTTP status, JSON bytes), for both
  ways a search arrives: the HTTP protocol's direct lane (`protocol.HttpProtocol`, which skips
  uvicorn's ASGI cycle: no task, no messages, one write) and the ASGI app (`_SearchLane`, and
  the route for /docs). What it answers:
  * a refusal, at once: 400 (not JSON), 413 (`too_large`), 422 (a field; `service.check`),
    503 (shutting down), each counted in the errors by kind;
  * a search, through the service's batcher: 200 with the `schemas.SearchResponse`, 503 once
    `request_timeout_s` passes (the search is dropped if its batch has not started), 500 for
    an error of its batch.
  Every answer is counted by status with its latency from its request's start. The body is
  parsed and checked in one pass by pydantic's JSON parser, and the answer written by orjson
  (half of pydantic_core.to_json's time for a list of 50)."""
  path = '/search'
  path_bytes = b'/search'

  def __init__(self, service: Service):
    self.service = service
    self.max_body_bytes = service.config.max_body_bytes
    self.timeout_s = service.config.request_timeout_s
    metrics = service.metrics
    self._latency = metrics.latency.labels(self.path)
    self._requests = metrics.requests
    self._counts = {}  # status -> its counter (labels() looks it up under a lock)
    self._errors = metrics.errors
    self._too_large = too_large_body(self.max_body_bytes)
    dim = service.searcher.dim
    # The most values (commas) a valid body holds: the vector's, a query's commas, the other
    # fields. A body with more is refused before it is parsed: parsing a vector of hundreds of
    # thousands of numbers (under --max_body_bytes) to learn it is too long would hold the
    # event loop, every batch's requests waiting.
    self.max_commas = dim + schemas.MAX_QUERY_CHARS + 64
    # Bodies of a usual length are not counted (counting costs each request): parsing one of
    # them costs little, valid or not.
    self.uncounted = 32 * dim + 8 * schemas.MAX_QUERY_CHARS + 4096

  def count(self, status: int, start: float) -> None:
    counter = self._counts.get(status)
    if counter is None:
      counter = self._counts[status] = self._requests.labels(self.path, str(status))
    counter.inc()
    self._latency.observe(time.perf_counter() - start)

  def refused(self, status: int, message: str, kind: str = 'bad_request') -> tuple:
    self._errors.labels(kind).inc()
    return status, protocol.error_body(message)

  def internal(self, error: BaseException) -> tuple:
    logging.error('search failed: %s: %s', type(error).__name__, error)
    return self.refused(500, f'internal error: {type(error).__name__}: {error}', 'internal')

  def failed(self, error: BaseException, start: float) -> tuple:
    """The 500 of an error outside a search's own handling, counted."""
    status, body = self.internal(error)
    self.count(status, start)
    return status, body

  def too_large(self, start: float) -> tuple:
    """The 413 of a body over `max_body_bytes`, counted."""
    self._errors.labels('too_large').inc()
    self.count(413, start)
    return 413, self._too_large

  def request(self, raw: bytes):
    """The checked `schemas.SearchRequest` of a body, or its refusal (status, body)."""
    if not raw.strip():
      return self.refused(422, 'body: a JSON object is required')
    if len(raw) > self.uncounted and (commas := raw.count(b',')) > self.max_commas:
      dim = self.service.searcher.dim
      return self.refused(422, f'body: {commas + 1} values or more, more than a request to '
                          f'this {dim}-d model holds (vector: {dim} numbers)')
    try:
      return schemas.SearchRequest.model_validate_json(raw)
    except pydantic.ValidationError as e:
      return self.refused(*schemas.error_message(e.errors()))

  def begin(self, raw: bytes, reply, start: Optional[float] = None):
    """Starts answering a body: `reply(status, body)` is called once, on the event loop (this
    one's), at once for a refusal. Returns the search's `drop` (its client went away:
    `reply(None, None)`, nothing counted), or None when it was answered at once."""
    start = time.perf_counter() if start is None else start
    try:
      return self._begin(raw, reply, start)
    except Exception as e:  # pylint: disable=broad-except
      reply(*self.failed(e, start))
      return None

  def _begin(self, raw: bytes, reply, start: float):
    checked = self.request(raw)
    if isinstance(checked, tuple):
      self.count(checked[0], start)
      reply(*checked)
      return None
    loop = asyncio.get_running_loop()
    search = _Search(self, loop, reply, start)
    try:
      search.future = self.service.submit(checked, search)  # answered with its batch
    except InputError as e:
      search._finish(*self.refused(422, str(e)))  # pylint: disable=protected-access
      return None
    except RuntimeError as e:  # shutting down
      search._finish(*self.refused(503, str(e), 'unavailable'))  # pylint: disable=protected-access
      return None
    search.timer = loop.call_later(self.timeout_s, search.timed_out)
    return search.drop

  async def answer(self, raw: bytes, scope: Optional[dict] = None,
                   start: Optional[float] = None) -> tuple:
    """`begin`, awaited: (status, body), or (None, None) when the client went away (the
    protocol calls the `drop` it finds in `scope[protocol.PENDING]`)."""
    done = asyncio.get_running_loop().create_future()

    def reply(status, body):
      if not done.done():
        done.set_result((status, body))

    drop = self.begin(raw, reply, start)
    if drop is not None and scope is not None:
      scope[protocol.PENDING] = drop
    try:
      return await done
    except asyncio.CancelledError:  # the server cancelled the request (e.g. at shutdown)
      if drop is not None:
        drop()
      raise
