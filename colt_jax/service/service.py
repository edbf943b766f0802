"""The service without HTTP: a `Searcher` fed by a `DynamicBatcher`, its settings, its metrics
and its life (warm-up, then serving, then a drain on shutdown). It serves an indexed
`Retriever` (colt and the model-free methods) or, without a model, a `StoreSearch` (the
model-free methods: `evaluation.model_free`). `app.create_app` puts it
behind FastAPI; tests and benchmarks may drive it directly.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import gc
import threading
import time
from typing import Optional

from absl import logging

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.service import compile_cache
from colt_jax.service import image_queries
from colt_jax.service import request_batching
from colt_jax.service import prometheus_metrics as metrics_lib
from colt_jax.service import schemas
from colt_jax.service import searcher as searcher_lib
from colt_jax.service import warm_up as warm_up_lib
from colt_jax.service.photos import PhotoCatalog
from colt_jax.util.errors import InputError


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
  """The service's settings (experiments/serve.py's flags of the same names)."""
  max_batch_size: int = 32
  # The window waits for every client the previous batch answered and closes as soon as they
  # are back (request_batching.py), so a longer one costs nothing when they all return. Closed-loop
  # clients take a few ms to be back (the event loop writes a batch of answers, then reads the
  # next requests): a window shorter than that starts batches short and leaves the late client
  # waiting a whole batch. benchmarks/bench_service.py --max_wait_ms measures the choice
  # (docs/SERVICE.md).
  max_wait_ms: float = 10.0
  request_timeout_s: float = 30.0
  max_body_bytes: int = 1 << 20
  warm_settings: tuple = (searcher_lib.ListShape(),)  # ListShapes compiled at start
  # The methods offered (and warmed up); empty: every one the service can run (colt with a
  # model, and the model-free methods).
  methods: tuple = ()
  # colt's list shapes (k, X) compiled on first use, beyond the warmed ones, at most: each
  # compiles on the batcher's thread (about 1.6 s, every batch waiting) and its programs stay,
  # so requests of other shapes are refused once this many were admitted (`Service.check`).
  max_new_shapes: int = 8
  # 'all': `Service.start` compiles every padded size and token shape before it returns;
  # 'first': only what a first request needs, the rest in a background thread (warm_up.py;
  # serve.py's default: ready in seconds; `Service.wait_warm` waits for the rest).
  warm_up: str = 'all'

  def __post_init__(self):
    searcher_lib.batch_sizes(self.max_batch_size)
    if not 0 <= self.max_wait_ms <= 60_000:
      raise InputError(f'--max_wait_ms must be in [0, 60000], got {self.max_wait_ms}')
    if not 0 < self.request_timeout_s <= 86_400:
      raise InputError(f'--request_timeout_s must be in (0, 86400], got '
                       f'{self.request_timeout_s}')
    if not 1 <= self.max_body_bytes <= 1 << 30:
      raise InputError(f'--max_body_bytes must be in [1, {1 << 30}], got {self.max_body_bytes}')
    if not 0 <= self.max_new_shapes <= 10_000:
      raise InputError(f'--max_new_shapes must be in [0, 10000], got {self.max_new_shapes}')
    if self.warm_up not in ('all', 'first'):
      raise InputError(f'--warm_up: expected all or first, got {self.warm_up!r}')
    if not self.warm_settings:
      raise InputError('--warm_settings: give at least one k:per_category:list_length')
    unknown = [m for m in self.methods if m not in schemas.METHODS]
    if unknown:
      raise InputError(f'--methods: unknown {",".join(unknown)}; expected any of '
                       f'{", ".join(schemas.METHODS)}')


class Service:
  """One indexed Retriever, or a store without a model, served with dynamic batching (module
  docstring)."""

  def __init__(self, source, config: Optional[ServiceConfig] = None,
               catalog: Optional[PhotoCatalog] = None,
               method_params: Optional[evaluation.MethodParams] = None):
    """`source`: an indexed `Retriever`, or a `StoreSearch` (no model)."""
    self.config = config or ServiceConfig()
    self.metrics = metrics_lib.ServiceMetrics()
    self.searcher = searcher_lib.Searcher(
        source, catalog, max_batch_size=self.config.max_batch_size, method_params=method_params,
        metrics=self.metrics)
    self.catalog = self.searcher.catalog
    colt = self.searcher.colt
    self.model = (colt.source or 'model') if colt is not None else None
    available = schemas.METHODS if colt is not None else model_free.METHODS
    self.methods = tuple(self.config.methods or available)
    if 'colt' not in available and 'colt' in self.methods:
      raise InputError(f'--methods: colt needs a CoLT model that fits the store (--model '
                       f'MODEL_DIR); {self._no_model_help()}')
    self.compiles = metrics_lib.CompileCounter()
    self.cache_hits = compile_cache.HitCounter()  # of those, loaded from the persistent cache
    self._sync_compilations = self._sync_cache_hits = 0  # of `start`'s own warm-up
    self.warmup_seconds = 0.0  # `start`'s warm-up (the background's: `background.seconds`)
    self._counted = self._counted_warm = 0  # exported to the metrics so far
    self._count_lock = threading.Lock()
    self.background: Optional[warm_up_lib.Background] = None  # warm_up='first'
    self._warm_steps = None  # (compiled, of) once `start` warmed everything up
    self.batcher = request_batching.DynamicBatcher(self._run, self.config.max_batch_size,
                                           self.config.max_wait_ms,
                                           on_depth=self.metrics.queue_depth.set)
    self.started = False
    # The compiled list shapes: colt's (k, X; its lists are computed at full length, as those
    # of mmr, msd and dpp, which compile nothing per shape, as topk and umons); those of the
    # warm-up, then those admitted since.
    self.shapes = {('colt', s.k, s.per_category) for s in self.config.warm_settings}
    self.new_shapes = 0

  def start(self, warm_up: bool = True) -> None:
    """Warms up every padded batch size (`Searcher.warm_up`; with `config.warm_up='first'`
    the smallest, the rest in the background: warm_up.py), then starts the batcher."""
    if self.started:
      return
    self.compiles.start()
    self.cache_hits.start()
    t0 = time.perf_counter()
    first = warm_up and self.config.warm_up == 'first'
    if first:
      warm_up_lib.first_part(self.searcher, self.config.warm_settings, self.methods)
    elif warm_up:
      self.searcher.warm_up(self.config.warm_settings, self.methods)
    self.warmup_seconds = time.perf_counter() - t0
    self._sync_cache_hits = self.cache_hits.count
    self._sync_compilations = self._counted = self._counted_warm = self.compiles.count
    self.metrics.compilations.labels('warmup').inc(self._sync_compilations)
    self.metrics.compilations.labels('serving')  # exported as 0 from the start
    if first:
      self.background = warm_up_lib.Background(self)
    elif warm_up:
      total = len(warm_up_lib._token_keys(self.searcher, searcher_lib.WORDS)) + len(  # pylint: disable=protected-access
          self.searcher.sizes)
      self._warm_steps = (total, total)
    logging.info('warm-up: %d compilations (%d from the compilation cache) in %.1f s (batch '
                 'sizes %s; ms per call: %s)', self.warmup_compilations,
                 self.warmup_cache_hits, self.warmup_seconds, self.searcher.sizes,
                 {n: round(s * 1e3, 2) for n, s in self.searcher.batch_seconds.items()})
    self.batcher.costs = dict(self.searcher.batch_seconds)
    # What start-up made (JAX, the model, the store's tables, the app) lives as long as the
    # service: moved out of the collector's reach, so that a full collection does not scan it
    # while the event loop and the batcher wait (a pause of every request under load).
    gc.collect()
    gc.freeze()
    if self.background is not None:
      self.background.start()  # caps the batcher's batches first
    self.batcher.start()
    self.started = True

  def stop(self) -> None:
    """Ends a background warm-up after its step in progress, answers every request already
    submitted, then stops."""
    if self.background is not None:
      self.background.stop()
    self.batcher.stop()
    self.compiles.stop()
    self.cache_hits.stop()

  def wait_warm(self, timeout: Optional[float] = None) -> bool:
    """Whether every padded size and token shape is compiled (waiting up to `timeout` s for a
    background warm-up)."""
    return self.background is None or self.background.wait(timeout)

  @property
  def warm_steps(self) -> Optional[tuple]:
    """(compiled, of) padded sizes and token shapes; None without a warm-up."""
    if self.background is not None:
      return self.background.compiled, self.background.total
    return self._warm_steps

  @property
  def warmup_compilations(self) -> int:
    """JAX compilations of the warm-up (`start`'s and the background's so far)."""
    return self._sync_compilations + self.compiles.background

  @property
  def warmup_cache_hits(self) -> int:
    return self._sync_cache_hits + self.cache_hits.background

  @property
  def serving_compilations(self) -> int:
    """JAX compilations since `start`'s warm-up ended, but a background warm-up's."""
    count, background = self.compiles.counts()
    return count - background - self._sync_compilations

  def count_warm_up(self) -> None:
    """Exports a background warm-up's compilations so far (its thread calls it)."""
    with self._count_lock:
      count = self._sync_compilations + self.compiles.counts()[1]
      if count > self._counted_warm:
        self.metrics.compilations.labels('warmup').inc(count - self._counted_warm)
        self._counted_warm = count

  def _run(self, batch: list) -> None:
    try:
      self.searcher.run(batch)
    finally:
      with self._count_lock:
        count = self._sync_compilations + self.serving_compilations
        if count > self._counted:
          self.metrics.compilations.labels('serving').inc(count - self._counted)
          self._counted = count

  def check(self, request: schemas.SearchRequest) -> None:
    """What the schema cannot know: the model's dimension, whether text can be encoded, the
    methods offered. Raises InputError naming the field."""
    error = schemas.with_default_method(request, self.searcher.default_method)
    if error:
      raise InputError(error)
    if request.method == 'colt' and self.searcher.colt is None:
      raise InputError(f'method: colt needs a CoLT model, and this service has none (serve.py '
                       f'--model MODEL_DIR); offered here: {", ".join(self.methods)}; '
                       + model_free.learned_model_hint(self.searcher.search.encoder_name))
    if request.method not in self.methods:
      raise InputError(f'method: {request.method} is not offered here (methods: '
                       f'{", ".join(self.methods)})')
    if request.vector is not None and len(request.vector) != self.searcher.dim:
      what = 'the model takes' if self.searcher.colt is not None else 'the store has'
      raise InputError(f'vector: {len(request.vector)} numbers, {what} '
                       f'{self.searcher.dim}-d features')
    if request.query is not None and not self.searcher.text_queries:
      raise InputError('query: this store\'s encoder has no text tower here (e.g. synthetic '
                       'features); send "vector" or "photo_id" instead')
    if request.photo_id is not None and self.searcher.search.row_of(request.photo_id) is None:
      raise InputError(f'photo_id: no photo {request.photo_id!r} in the store')
    if request.image is not None:
      image_queries.check(request, self.searcher.search, self.catalog)
    self._admit_shape(request)

  def _admit_shape(self, request: schemas.SearchRequest) -> None:
    """Refuses a list shape that would compile once `max_new_shapes` new ones were admitted
    (`ServiceConfig.max_new_shapes`); admits it otherwise."""
    key = ('colt', request.k, request.per_category)
    if request.method != 'colt' or key in self.shapes:
      return  # the other methods' lists are computed at full length, then cut
    if self.new_shapes >= self.config.max_new_shapes:
      served = sorted(':'.join(map(str, s[1:])) for s in self.shapes if s[0] == 'colt')
      raise InputError(f'k, per_category: {request.k}:{request.per_category} is not compiled '
                       f'here, and this service compiles no more new list shapes '
                       f'(--max_new_shapes={self.config.max_new_shapes}); colt serves '
                       f'{", ".join(served)} (k:per_category); --warm_settings adds shapes')
    self.shapes.add(key)
    self.new_shapes += 1

  def submit(self, request: schemas.SearchRequest,
             waiter: Optional[asyncio.Future] = None) -> concurrent.futures.Future:
    """The request's future (`check` first); `waiter`, an asyncio future (or what
    `request_batching.DynamicBatcher.submit` takes as one), also gets its outcome
    (`request_batching.deliver`)."""
    self.check(request)
    return self.batcher.submit(request, waiter)

  def search(self, request: schemas.SearchRequest, timeout: Optional[float] = None) -> dict:
    """One request, synchronously: the JSON object of `schemas.SearchResponse`."""
    return self.searcher.response(self.submit(request).result(
        timeout if timeout is not None else self.config.request_timeout_s))

  def health(self) -> dict:
    return {'status': 'ok', 'photos': self.searcher.num_photos,
            'method_default': self.searcher.default_method,
            'methods': list(self.methods), 'model': self.model,
            'dim': self.searcher.dim, 'text_queries': self.searcher.text_queries,
            'images': self.catalog.has_files, 'photo_queries': True,
            'image_queries': image_queries.accepted(self.searcher.search),
            'max_batch_size': self.config.max_batch_size,
            'warm': (None if self.warm_steps is None else
                     dict(zip(('compiled', 'of'), self.warm_steps)))}

  def _no_model_help(self) -> str:
    return model_free.no_model_help(self.searcher.search.encoder_name)
