"""The HTTP service: `create_app(source, ...)` -> a FastAPI app, over an indexed `Retriever`
(colt and the model-free methods) or a `StoreSearch` (a store without a model: the
model-free methods alone).

Endpoints:
* `POST /search`: a `schemas.SearchRequest` -> `schemas.SearchResponse`, through the
  service's dynamic batcher (`service.Service`), by `endpoint.SearchEndpoint`: in the HTTP
  protocol (`protocol.HttpProtocol`'s direct lane, as experiments/serve.py runs it;
  `app.state.search`) or in the app, ahead of FastAPI's router (`_SearchLane`);
* `GET /photos/{photo_id}`: the photo's file, for stores indexed from a folder or a list;
* `GET /healthz`, `GET /metrics` (Prometheus text, `prometheus_metrics.ServiceMetrics`);
* `GET /docs`: FastAPI's Swagger UI page over `/openapi.json`, its script and style served
  from `/docs/assets` (fastapi-offline's copies), not a CDN: it works without the internet;
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
from fastapi import responses
import fastapi
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
import fastapi_offline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from colt_jax.data import features as features_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.service import endpoint as endpoint_lib
from colt_jax.service import protocol
from colt_jax.service import schemas
from colt_jax.service.photos import PhotoCatalog
from colt_jax.service.photos import read_records
from colt_jax.service.service import Service
from colt_jax.service.service import ServiceConfig

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')
PAGE = os.path.join(STATIC_DIR, 'index.html')
# Swagger UI's script, style and icon, shipped by fastapi-offline (the copies FastAPI's
# /docs would load from a CDN).
DOCS_ASSETS_DIR = os.path.join(os.path.dirname(fastapi_offline.__file__), 'static')
DOCS_ASSETS_URL = '/docs/assets'
# POST /search's body in the OpenAPI schema (/docs): the route parses it itself.
SEARCH_REQUEST_SCHEMA = schemas.SearchRequest.model_json_schema()


_error_body = protocol.error_body


def _error(status: int, message: str) -> responses.Response:
  return responses.Response(_error_body(message), status_code=status,
                            media_type='application/json')


class _TooLarge(Exception):
  """A request body over the service's limit."""


def _declared_over(scope, limit: int) -> bool:
  """Whether the request's Content-Length is over `limit`."""
  for name, value in scope.get('headers') or ():
    if name == b'content-length':
      return value.isdigit() and int(value) > limit
  return False


async def _read_body(receive, limit: int):
  """The request's body as it streams in; None when the client went away; `_TooLarge` once
  it passes `limit` bytes."""
  chunks, size = [], 0
  while True:
    message = await receive()
    if message['type'] != 'http.request':
      return None
    chunk = message.get('body', b'')
    size += len(chunk)
    if size > limit:
      raise _TooLarge()
    chunks.append(chunk)
    if not message.get('more_body', False):
      return chunks[0] if len(chunks) == 1 else b''.join(chunks)


class _BodyLimit:
  """Refuses (413) a request body over `limit` bytes, by its Content-Length or as it streams
  in, before the app reads it."""

  def __init__(self, app, limit: int, on_refused):
    self.app, self.limit, self.on_refused = app, limit, on_refused

  async def _refuse(self, scope, receive, send):
    self.on_refused()
    return await responses.Response(endpoint_lib.too_large_body(self.limit), status_code=413,
                                    media_type='application/json')(scope, receive, send)

  async def __call__(self, scope, receive, send):
    if scope['type'] != 'http':
      return await self.app(scope, receive, send)
    if _declared_over(scope, self.limit):
      return await self._refuse(scope, receive, send)
    if scope.get('method') not in ('POST', 'PUT', 'PATCH'):
      return await self.app(scope, receive, send)
    try:
      body = await _read_body(receive, self.limit)
    except _TooLarge:
      return await self._refuse(scope, receive, send)
    if body is None:
      return  # the client went away
    replayed = False

    async def replay():
      nonlocal replayed
      if not replayed:
        replayed = True
        return {'type': 'http.request', 'body': body, 'more_body': False}
      return await receive()

    return await self.app(scope, replay, send)


class _SearchLane:
  """Answers `POST /search` that reaches the ASGI app (the protocol's direct lane answers it
  before; both by `endpoint.SearchEndpoint`) ahead of FastAPI's middleware and router
  (`_ServiceApp`), with the body limit, metrics and 500s of the middleware it skips. Each
  layer it skips (the error, telemetry and body-limit middleware, the router's dependency
  resolution, wrapped `send`s) cost the event loop time on every search. The route stays for
  /docs and OpenAPI."""

  def __init__(self, endpoint: endpoint_lib.SearchEndpoint):
    self.endpoint = endpoint
    self.path = endpoint.path

  async def __call__(self, scope, receive, send):
    start = time.perf_counter()
    endpoint = self.endpoint
    try:
      if _declared_over(scope, endpoint.max_body_bytes):
        raise _TooLarge()
      raw = await _read_body(receive, endpoint.max_body_bytes)
      if raw is None:
        return  # the client went away: no answer, nothing counted
      status, body = await endpoint.answer(raw, scope, start)
      if status is None:
        return  # the client went away while its search waited: no answer, nothing counted
    except _TooLarge:
      status, body = endpoint.too_large(start)
    except Exception as e:  # pylint: disable=broad-except
      status, body = endpoint.failed(e, start)
    await send({'type': 'http.response.start', 'status': status,
                'headers': [(b'content-type', b'application/json'),
                            (b'content-length', b'%d' % len(body))]})
    await send({'type': 'http.response.body', 'body': body})


class _ServiceApp(fastapi.FastAPI):
  """FastAPI, with `POST /search` answered by its `search_lane` first (`_SearchLane`)."""
  search_lane = None

  async def __call__(self, scope, receive, send):
    lane = self.search_lane
    if (lane is not None and scope['type'] == 'http' and scope['path'] == lane.path
        and scope['method'] == 'POST'):
      return await lane(scope, receive, send)
    return await super().__call__(scope, receive, send)


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


def create_app(source, *,
               store: Optional[features_lib.FeatureStore] = None, store_dir: str = '',
               config: Optional[ServiceConfig] = None,
               method_params: Optional[evaluation.MethodParams] = None,
               warm_up: bool = True) -> fastapi.FastAPI:
  """The service over `source`, an indexed `Retriever` or a `StoreSearch` (no model; module
  docstring). `store`: the store it indexed, for the photos' files and titles
  (`PhotoCatalog`), and `store_dir` its folder (its file records: only the files indexed are
  served); `config`: batching, limits and the settings to warm up; `method_params`: the
  model-free methods' default parameters (default: colt_jax/evaluation/model_free.json's);
  `warm_up=False` skips the compilations at start (tests of the HTTP layer)."""
  catalog = None
  if store is not None:
    catalog = PhotoCatalog([str(p) for p in store.photo_ids], store.meta,
                           read_records(store_dir) if store_dir else None)
  service = Service(source, config, catalog, method_params)
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
  app = _ServiceApp(
      title='colt_jax diverse image search', lifespan=lifespan, redirect_slashes=False,
      docs_url=None, redoc_url=None,  # /docs below, without a CDN
      telemetry={'tracing': False, 'metrics': False, 'logs': False},
      description='CoLT (g + phi + Eq. 6, with a model) and the model-free methods top-k, MMR, '
      'MSD, DPP and UMONS over one indexed collection, with dynamic batching.')
  app.state.service = service
  endpoint = endpoint_lib.SearchEndpoint(service)
  app.state.search = endpoint  # for the HTTP protocol's direct lane (experiments/serve.py)

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
    status, body = await endpoint.answer(await request.body())
    return responses.Response(body, status_code=status, media_type='application/json')

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

  app.mount(DOCS_ASSETS_URL, StaticFiles(directory=DOCS_ASSETS_DIR), name='docs-assets')

  @app.get('/docs', response_class=responses.HTMLResponse, include_in_schema=False)
  async def docs(request: fastapi.Request):
    root = request.scope.get('root_path', '')
    return get_swagger_ui_html(
        openapi_url=f'{root}{app.openapi_url}', title=f'{app.title} - Swagger UI',
        swagger_js_url=f'{root}{DOCS_ASSETS_URL}/swagger-ui-bundle.js',
        swagger_css_url=f'{root}{DOCS_ASSETS_URL}/swagger-ui.css',
        swagger_favicon_url=f'{root}{DOCS_ASSETS_URL}/favicon.png')

  @app.get('/', response_class=responses.HTMLResponse, include_in_schema=False)
  async def page():
    if not os.path.isfile(PAGE):
      service.metrics.errors.labels('not_found').inc()
      return _error(404, f'{PAGE}: the search page is missing')
    return responses.FileResponse(PAGE, media_type='text/html')

  count_too_large = service.metrics.errors.labels('too_large').inc
  app.search_lane = _SearchLane(endpoint)
  app.add_middleware(_BodyLimit, limit=cfg.max_body_bytes, on_refused=count_too_large)
  app.add_middleware(_Metrics, metrics=service.metrics, routes=app.routes)
  return app
