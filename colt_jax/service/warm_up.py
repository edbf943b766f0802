"""The service's warm-up in two parts (`ServiceConfig.warm_up='first'`, serve.py's default):
what a first request needs before the service is ready, the rest in a background thread.

`first_part(searcher, shapes, methods)` compiles the smallest padded batch size of every
method offered and the text tower's token shapes of queries of up to 16 words
(`searcher.FIRST_WORDS`); `Background(service)` then compiles the other token shapes, then the
other padded sizes in increasing order, one step at a time. Until a size is compiled (and its
colt call timed: the batcher's `costs`) the batcher forms no batch that needs it
(`DynamicBatcher.set_limit`: the other requests wait for the next batch), and a text whose
token shape is still to be compiled waits for it (`wait_token`) rather than compile it on the
batcher's thread. The thread's compilations (and cache loads) count as the warm-up's, not as
serving ones (`CompileCounter.mark_background`). `stop()` ends it after the step in progress.
"""
from __future__ import annotations

import threading
import time
from typing import Optional

from absl import logging

from colt_jax.service import searcher as searcher_lib


def _token_keys(searcher: searcher_lib.Searcher, words) -> list:
  """The distinct token shapes of the probe texts of `words` words (in that order)."""
  if not searcher.text_queries:
    return []
  keys = {}
  for n in words:
    keys.setdefault(searcher._token_shape(' '.join(['photo'] * n)), n)  # pylint: disable=protected-access
  return list(keys.items())


def first_part(searcher: searcher_lib.Searcher, shapes, methods) -> None:
  """What a first request needs (module docstring)."""
  searcher.warm_up(shapes, methods, sizes=searcher.sizes[:1], words=searcher_lib.FIRST_WORDS)


class Background:
  """The rest of a service's warm-up, in a thread (module docstring)."""

  def __init__(self, service):
    self.service = service
    searcher = service.searcher
    first = {k for k, _ in _token_keys(searcher, searcher_lib.FIRST_WORDS)}
    self.tokens = [(k, n) for k, n in _token_keys(searcher, searcher_lib.WORDS)
                   if k not in first]
    self.sizes = list(searcher.sizes[1:])
    self.total = len(_token_keys(searcher, searcher_lib.WORDS)) + len(searcher.sizes)
    self.compiled = self.total - len(self.tokens) - len(self.sizes)
    self.seconds = 0.0  # the thread's time, once done
    self.error: Optional[BaseException] = None
    self._pending = {k for k, _ in self.tokens}
    self._cond = threading.Condition()
    self._stopping = False
    self._done = threading.Event()
    self._thread = None

  @property
  def done(self) -> bool:
    return self._done.is_set()

  def start(self) -> 'Background':
    self.service.searcher.token_wait = self.wait_token
    self.service.batcher.set_limit(self.service.searcher.sizes[0])
    self._thread = threading.Thread(target=self._run, name='colt-warm-up', daemon=True)
    self._thread.start()
    return self

  def wait_token(self, key) -> None:
    """Returns once the token shape `key` is compiled (at once if it is not one to come, or on
    the warm-up's own thread, which compiles it)."""
    if threading.current_thread() is self._thread:
      return
    with self._cond:
      while key in self._pending and not self._done.is_set():
        self._cond.wait()

  def wait(self, timeout: Optional[float] = None) -> bool:
    """Whether the background warm-up ended (within `timeout` seconds)."""
    return self._done.wait(timeout)

  def stop(self) -> None:
    """Ends the thread after the step in progress."""
    with self._cond:
      self._stopping = True
    if self._thread is not None:
      self._thread.join()

  def _step(self) -> None:
    with self._cond:
      self.compiled += 1
      self._cond.notify_all()
    self.service.count_warm_up()

  def _run(self) -> None:
    service, searcher = self.service, self.service.searcher
    service.compiles.mark_background()
    service.cache_hits.mark_background()
    t0 = time.perf_counter()
    try:
      config = service.config
      for key, words in self.tokens:
        if self._stopping:
          return
        searcher.warm_up(config.warm_settings, service.methods, sizes=(), words=(words,))
        with self._cond:
          self._pending.discard(key)
        self._step()
      for size in self.sizes:
        if self._stopping:
          return
        searcher.warm_up(config.warm_settings, service.methods, sizes=(size,), words=())
        service.batcher.costs = dict(searcher.batch_seconds)  # before the limit rises
        service.batcher.set_limit(size)
        self._step()
      self.seconds = time.perf_counter() - t0
      logging.info('background warm-up: done in %.1f s (ms per call: %s)', self.seconds,
                   {n: round(s * 1e3, 2) for n, s in searcher.batch_seconds.items()})
    except Exception as e:  # pylint: disable=broad-except
      # The sizes not compiled stay unused (the limit does not rise), a token shape compiles
      # on its first request.
      self.error = e
      logging.exception('the background warm-up failed')
    finally:
      with self._cond:
        self._done.set()
        self._pending.clear()
        self._cond.notify_all()
      service.count_warm_up()
