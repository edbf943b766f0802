"""The HTTP service: `create_app(retriever, ...)` -> a FastAPI app.

Endpoints:
* `POST /search`: a `schemas.SearchRequest` -> `schemas.SearchResponse`, through the
  service's dynamic batcher (`service.Service`);
* `GET /photos/{photo_id}`: the photo's file, for stores indexed from a folder or a list;
* `GET /healthz`, `GET /metrics` (Prometheus text, `metrics.ServiceMetrics`), `/docs`;
* `GET /`: the live search page, `static/index.html`.

A refused request is answered `{"error": "<field>: <why>"}`: 400 for a body that is not JSON,
413 for a body over `max_body_bytes`, 422 for a field out of range or of the wrong kind, an
unknown method or a vector of the wrong dimension, 404 for an unknown photo or path, 405 for
a wrong method. A search that takes longer than `request_timeout_s` (queueing included) is
answered 503; the service goes on (the batch it is in still finishes). The app's lifespan
warms the service up before the server accepts connections and drains the batcher at
shutdown, after the server's in-flight requests are answered.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Optional

from absl import logging
import fastapi
import pydantic
import pydantic_core
from fastapi import responses
from fastapi.exceptions import RequestValidationError
import starlette.requests
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from colt_jax import evaluation
from colt_jax import features as features_lib
from colt_jax import retriever as retriever_lib
from colt_jax.errors import InputError
from colt_jax.service import schemas
from colt_jax.service.photos import PhotoCatalog
from colt_jax.service.service import Service
from colt_jax.service.service import ServiceConfig

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')
PAGE = os.path.join(STATIC_DIR, 'index.html')
# POST /search's body in the OpenAPI schema (/docs): the route parses it itself.
SEARCH_REQUEST_SCHEMA = schemas.SearchRequest.model_json_schema()


def _error(status: int, message: str) -> responses.JSONResponse:
  return responses.JSONResponse({'error': ' '.join(str(message).split())}, status_code=status)


class _BodyLimit:
  """Refuses (413) a request body over `limit` bytes, by its Content-Length or as it streams
  in, before the app reads it."""

  def __init__(self, app, limit: int, on_refused):
    self.app, self.limit, self.on_refused = app, limit, on_refused

  async def __call__(self, scope, receive, send):
    if scope['type'] != 'http':
      return await self.app(scope, receive, send)
    declared = dict(scope.get('headers') or []).get(b'content-length')
    too_large = f'body: over the limit of {self.limit} bytes (--max_body_bytes)'
    if declared is not None and declared.isdigit() and int(declared) > self.limit:
      self.on_refused()
      return await _error(413, too_large)(scope, receive, send)
    if scope.get('method') not in ('POST', 'PUT', 'PATCH'):
      return await self.app(scope, receive, send)
    chunks, size = [], 0
    while True:
      message = await receive()
      if message['type'] != 'http.request':
        return  # the client went away
      chunks.append(message.get('body', b''))
      size += len(chunks[-1])
      if size > self.limit:
        self.on_refused()
        return await _error(413, too_large)(scope, receive, send)
      if not message.get('more_body', False):
        break
    body, replayed = b''.join(chunks), False

    async def replay():
      nonlocal replayed
      if not replayed:
        replayed = True
        return {'type': 'http.request', 'body': body, 'more_body': False}
      return await receive()

    return await self.app(scope, replay, send)


class _SearchFirst:
  """Answers `POST /search` before FastAPI's router, by the function its route calls
  (`answer`, of the raw body): the route stays for /docs and OpenAPI, while each search skips
  the router's per-request work (dependency resolution, cookie parsing, exit stacks), the
  largest share of the event loop's time per search. An error `answer` does not answer itself
  goes to `on_error`, the app's handler of errors (500, JSON, counted)."""

  def __init__(self, app, answer, route, on_error):
    self.app, self.answer, self.route, self.path = app, answer, route, route.path
    self.on_error = on_error

  async def __call__(self, scope, receive, send):
    if (scope['type'] != 'http' or scope['path'] != self.path
        or scope.get('method') != 'POST'):
      return await self.app(scope, receive, send)
    scope['route'] = self.route  # as the router records it (the metrics' endpoint label)
    try:
      raw = await starlette.requests.Request(scope, receive).body()
    except starlette.requests.ClientDisconnect:
      return
    try:
      response = await self.answer(raw)
    except Exception as e:  # pylint: disable=broad-except
      response = await self.on_error(None, e)
    return await response(scope, receive, send)


class _Metrics:
  """Counts every answered request by endpoint (the route's path) and status, and its
  latency."""

  def __init__(self, app, metrics, routes):
    self.app, self.metrics, self.routes = app, metrics, routes

  def _route(self, scope) -> str:
    """The route of a request answered before routing (413), else 'other'."""
    for route in self.routes:
      if route.matches(scope)[0] != Match.NONE:
        return route.path
    return 'other'

  async def __call__(self, scope, receive, send):
    if scope['type'] != 'http':
      return await self.app(scope, receive, send)
    start, status = time.perf_counter(), [500]

    async def record(message):
      if message['type'] == 'http.response.start':
        status[0] = message['status']
      await send(message)

    try:
      await self.app(scope, receive, record)
    finally:
      route = getattr(scope.get('route'), 'path', None) or self._route(scope)
      self.metrics.requests.labels(route, str(status[0])).inc()
      self.metrics.latency.labels(route).observe(time.perf_counter() - start)


def create_app(retriever: retriever_lib.Retriever, *,
               store: Optional[features_lib.FeatureStore] = None,
               config: Optional[ServiceConfig] = None,
               method_params: Optional[evaluation.MethodParams] = None,
               warm_up: bool = True) -> fastapi.FastAPI:
  """The service over an indexed `retriever` (module docstring). `store`: the store it
  indexed, for the photos' files and titles (`PhotoCatalog`); `config`: batching, limits and
  the settings to warm up; `method_params`: the baselines' default parameters;
  `warm_up=False` skips the compilations at start (tests of the HTTP layer)."""
  catalog = None
  if store is not None:
    catalog = PhotoCatalog([str(p) for p in store.photo_ids], store.meta)
  service = Service(retriever, config, catalog, method_params)
  cfg = service.config

  @contextlib.asynccontextmanager
  async def lifespan(_):
    await asyncio.to_thread(service.start, warm_up)
    try:
      yield
    finally:
      await asyncio.to_thread(service.stop)

  # telemetry off: FastAPI's native OpenTelemetry would otherwise look up the global
  # providers (and environment variables) on every request, for nothing when none is set up.
  app = fastapi.FastAPI(
      title='colt_jax diverse image search', lifespan=lifespan,
      telemetry={'tracing': False, 'metrics': False, 'logs': False},
      description='CoLT (g + phi + Eq. 6) and the baselines top-k, MMR and UMONS over one '
      'indexed collection, with dynamic batching.')
  app.state.service = service

  @app.exception_handler(RequestValidationError)
  async def _invalid(_, exc: RequestValidationError):
    status, message = schemas.error_message(exc.errors())
    service.metrics.errors.labels('bad_request').inc()
    return _error(status, message)

  @app.exception_handler(StarletteHTTPException)
  async def _http_error(request: fastapi.Request, exc: StarletteHTTPException):
    if exc.status_code == 404:
      service.metrics.errors.labels('not_found').inc()
      detail = exc.detail if exc.detail != 'Not Found' else f'{request.url.path}: no such path'
      return _error(404, detail)
    return _error(exc.status_code, f'{request.method} {request.url.path}: {exc.detail}')

  @app.exception_handler(Exception)
  async def _internal(_, exc: Exception):
    logging.error('internal error: %s: %s', type(exc).__name__, exc)
    service.metrics.errors.labels('internal').inc()
    return _error(500, f'internal error: {type(exc).__name__}: {exc}')

  @app.post('/search', response_model=schemas.SearchResponse,
            responses={400: {'model': schemas.Error}, 413: {'model': schemas.Error},
                       422: {'model': schemas.Error}, 503: {'model': schemas.Error}},
            openapi_extra={'requestBody': {'required': True, 'content': {
                'application/json': {'schema': SEARCH_REQUEST_SCHEMA}}}})
  async def search(request: fastapi.Request):
    """A ranked list for a text query or a query vector."""
    return await answer_search(await request.body())

  async def answer_search(raw: bytes) -> responses.Response:
    """POST /search's answer to its body (the route above, and `_SearchFirst`)."""
    # The body is parsed and checked in one pass by pydantic's JSON parser (not json.loads,
    # then validation of the Python objects), and the answer written by pydantic_core.
    if not raw.strip():
      service.metrics.errors.labels('bad_request').inc()
      return _error(422, 'body: a JSON object is required')
    try:
      body = schemas.SearchRequest.model_validate_json(raw)
    except pydantic.ValidationError as e:
      status, message = schemas.error_message(e.errors())
      service.metrics.errors.labels('bad_request').inc()
      return _error(status, message)
    try:
      future = service.submit(body)
    except InputError as e:
      service.metrics.errors.labels('bad_request').inc()
      return _error(422, str(e))
    except RuntimeError as e:  # shutting down
      service.metrics.errors.labels('unavailable').inc()
      return _error(503, str(e))
    try:
      async with asyncio.timeout(cfg.request_timeout_s):  # no task of its own, as wait_for's
        answer = await asyncio.wrap_future(future)
    except TimeoutError:
      future.cancel()  # dropped if its batch has not started
      service.metrics.errors.labels('timeout').inc()
      return _error(503, f'the search took longer than --request_timeout_s='
                    f'{cfg.request_timeout_s:g} s')
    except InputError as e:
      service.metrics.errors.labels('bad_request').inc()
      return _error(422, str(e))
    except Exception as e:  # pylint: disable=broad-except
      logging.error('search failed: %s: %s', type(e).__name__, e)
      service.metrics.errors.labels('internal').inc()
      return _error(500, f'internal error: {type(e).__name__}: {e}')
    return responses.Response(pydantic_core.to_json(service.searcher.response(answer)),
                              media_type='application/json')

  @app.get('/photos/{photo_id:path}', responses={404: {'model': schemas.Error}})
  async def photo(photo_id: str):
    """The photo's image file (stores indexed from a folder or a list)."""
    path = service.catalog.path(photo_id)
    if path is None or not os.path.isfile(path):
      service.metrics.errors.labels('not_found').inc()
      what = ('no photo of that id in the store' if photo_id not in service.catalog
              else 'the store has no file for it')
      return _error(404, f'photo_id: {photo_id}: {what}')
    return responses.FileResponse(path, media_type=PhotoCatalog.media_type(path))

  @app.get('/healthz', response_model=schemas.Health)
  async def healthz():
    """Liveness, the collection's size and what the service offers."""
    return service.health()

  @app.get('/metrics', response_class=responses.PlainTextResponse)
  async def metrics():
    """Prometheus text format."""
    return responses.Response(service.metrics.text(), media_type=service.metrics.content_type)

  @app.get('/', response_class=responses.HTMLResponse, include_in_schema=False)
  async def page():
    if not os.path.isfile(PAGE):
      service.metrics.errors.labels('not_found').inc()
      return _error(404, f'{PAGE}: the search page is missing')
    return responses.FileResponse(PAGE, media_type='text/html')

  app.add_middleware(_SearchFirst, answer=answer_search, on_error=_internal,
                     route=next(r for r in app.routes if getattr(r, 'path', '') == '/search'))
  app.add_middleware(_BodyLimit, limit=cfg.max_body_bytes,
                     on_refused=lambda: service.metrics.errors.labels('too_large').inc())
  app.add_middleware(_Metrics, metrics=service.metrics, routes=app.routes)
  return app
