"""The service's Prometheus metrics, in a registry of its own (one per app, so that tests and
benchmarks can build many apps in one process), and the count of JAX compilations.

`GET /metrics` serves `ServiceMetrics.text()`: requests by endpoint (the route's template,
e.g. /photos/{photo_id}) and status, their latency, the size of every batched call, the time
of each stage, errors by kind, the queue's depth, and JAX compilations during the warm-up
and while serving (`CompileCounter`: none are expected while serving requests of warmed
settings).
"""
from __future__ import annotations

import threading

from jax import monitoring
import prometheus_client

# Lowering a jitted function to XLA happens once per compilation (also when the executable
# then comes from JAX's persistent cache): a jit cache miss.
COMPILE_EVENT = '/jax/core/compile/jaxpr_to_mlir_module_duration'
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
prometheus_client.disable_created_metrics()  # no *_created series: counts and histograms only


class CompileCounter:
  """Counts JAX compilations in this process while it is active (`start`, `stop`); of them,
  `background`: those of the threads marked by `mark_background` (a background warm-up; JAX
  reports a compilation on the thread that compiles)."""

  def __init__(self):
    self.count = 0
    self.background = 0
    self.background_threads = set()  # thread idents whose compilations are `background`
    self._lock = threading.Lock()
    self._active = False

  def mark_background(self) -> None:
    """Counts the calling thread's compilations as `background` from now on."""
    self.background_threads.add(threading.get_ident())

  def counts(self) -> tuple:
    """(count, background), read together."""
    with self._lock:
      return self.count, self.background

  def _listener(self, event: str, duration: float, **kwargs) -> None:
    del duration, kwargs
    if event == COMPILE_EVENT:
      with self._lock:
        self.count += 1
        if threading.get_ident() in self.background_threads:
          self.background += 1

  def start(self) -> 'CompileCounter':
    if not self._active:
      monitoring.register_event_duration_secs_listener(self._listener)
      self._active = True
    return self

  def stop(self) -> None:
    if self._active:
      monitoring.unregister_event_duration_listener(self._listener)
      self._active = False


class ServiceMetrics:
  """The metrics of one app (module docstring)."""

  def __init__(self):
    self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
    r = self.registry
    self.requests = prometheus_client.Counter(
        'colt_service_requests', 'HTTP requests answered, by endpoint and status.',
        ('endpoint', 'status'), registry=r)
    self.latency = prometheus_client.Histogram(
        'colt_service_request_seconds', 'Time from a request\'s arrival to its answer.',
        ('endpoint',), buckets=_LATENCY_BUCKETS, registry=r)
    self.batch_size = prometheus_client.Histogram(
        'colt_service_batch_size', 'Requests gathered per batch (before padding).',
        buckets=_BATCH_BUCKETS, registry=r)
    self.stage = prometheus_client.Histogram(
        'colt_service_stage_seconds', 'Time of each stage of a batched call.', ('stage',),
        buckets=_LATENCY_BUCKETS, registry=r)
    self.errors = prometheus_client.Counter(
        'colt_service_errors', 'Requests refused or failed, by kind (bad_request, too_large, '
        'not_found, timeout, internal).', ('kind',), registry=r)
    self.queue_depth = prometheus_client.Gauge(
        'colt_service_queue_depth', 'Search requests waiting for a batch.', registry=r)
    self.compilations = prometheus_client.Counter(
        'colt_service_jax_compilations', 'JAX compilations, by phase (warmup, serving).',
        ('phase',), registry=r)

  def text(self) -> bytes:
    return prometheus_client.generate_latest(self.registry)

  content_type = prometheus_client.CONTENT_TYPE_LATEST
