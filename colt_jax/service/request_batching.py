"""Dynamic batching: concurrent requests gathered into batches for one worker thread.

`DynamicBatcher(handle, max_batch_size, max_wait_ms)`: `submit(payload)` returns a
`concurrent.futures.Future` at once; a worker thread takes the oldest waiting request and
gathers more until the batch holds `max_batch_size` or its window of `max_wait_ms` has
passed, then calls `handle(batch)` with the `Pending` requests, which sets every future (a
request it leaves unanswered gets a RuntimeError). The worker is the only thread that runs
the model, so batches never overlap.

The window starts at the later of the oldest request's arrival and the end of the previous
batch: the clients that batch answered can send their next requests and join the next batch
(closed-loop clients would otherwise find a window that closed while the model ran, and
batches half full), while a request that arrived long before is held at most `max_wait_ms`
after the worker is free. The window closes early (`expected`) once the queue holds as many
requests as the previous batch answered plus those that were waiting when it ended: with
clients that send their next request when answered, that is every client, so a batch waits for
all of them and no longer (32 clients run batches of 32, not of whoever is back within the
window; a lone client, answered, runs its next request at once; two clients share batches
rather than alternate lone ones). The first batch waits for `max_batch_size`. A submitted
request wakes the worker only when it is the first waiting or the one its window waits for:
the others would only wake it to wait again (32 wake-ups a batch, each taking the GIL from the
event loop).

With `costs` ({padded batch size: seconds its call takes}, measured by the service's
warm-up), a batch that would be mostly padding is cut: of n gathered requests, the number
that run now is n (padded to the smallest size P >= n) or a size b < n, whichever costs
least per answered request (cost[P] / n against cost[b] / b, b only when it saves 10%:
`CUT_GAIN`); the newest requests wait for
the next batch. 26 closed-loop clients of 32 would otherwise run at 32 rows, at the price of
32 queries; on a CPU, where a batch's time grows with its rows, they run at 24 and the other
2 join the next batch. Without `costs`, every gathered request runs.

`limit` (at most `max_batch_size`; `set_limit`) caps a batch below `max_batch_size` while the
larger padded sizes are not compiled yet (the service's background warm-up, warm_up.py): the
other requests wait for the next batch, so nothing compiles on the worker.

A request whose future was cancelled before its batch started (its caller gave up: the
service's timeout) is dropped from the batch; its waiter (below), if still pending, is
cancelled.

A caller on an asyncio event loop passes `submit(payload, waiter=loop.create_future())` (or
an object with a future's `get_loop`, `done`, `cancel`, `set_result` and `set_exception`: the
service's searches, endpoint.py's `_Search`, which answer their HTTP request in
`set_result`): once its batch is answered, the batcher copies every request's outcome to its
waiter in one `call_soon_threadsafe` per loop and batch (`deliver`), not one cross-thread
wake-up and future chain per request as `asyncio.wrap_future` makes (the event loop's work
between batches under load: benchmarks/bench_service.py). A waiter already done (its caller
timed out) is left as it is. `stop()` lets the worker finish every request already
submitted, then ends it; `submit` after `stop` raises `RuntimeError`.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import threading
import time
from typing import Any, Callable, Mapping, Optional

from absl import logging

# A batch is cut only when that saves at least 10% of the time per answered request: what a
# batch costs beyond its timed call (waking the callers, writing the answers) favours fewer,
# larger batches (at 8 closed-loop clients, 7 gathered ran better at 8 rows than cut to 4).
CUT_GAIN = 0.9


@dataclasses.dataclass
class Pending:
  """One submitted request: its payload, arrival time (time.perf_counter), future and the
  asyncio future its outcome is copied to (`waiter`, or None)."""
  payload: Any
  arrived: float
  future: concurrent.futures.Future
  waiter: Optional[asyncio.Future] = None


def _copy_outcomes(pairs: list) -> None:
  """On the waiters' event loop: each (future, waiter)'s outcome to the waiter."""
  for future, waiter in pairs:
    if waiter.done():
      continue
    try:
      if future.cancelled():
        waiter.cancel()
      elif (error := future.exception()) is not None:
        waiter.set_exception(error)
      else:
        waiter.set_result(future.result())
    except Exception as e:  # pylint: disable=broad-except
      # (e.g. an exception asyncio refuses to set): this waiter fails, the others still get
      # their outcomes
      logging.exception('could not hand a request its outcome')
      if not waiter.done():
        waiter.set_exception(RuntimeError(f'the answer could not be delivered: {e}'))


def deliver(batch: list) -> None:
  """Copies the outcomes of a batch's requests (their futures done) to their waiters: one
  `call_soon_threadsafe` per event loop (module docstring); a closed loop is skipped."""
  by_loop = {}
  for p in batch:
    if p.waiter is not None:
      by_loop.setdefault(p.waiter.get_loop(), []).append((p.future, p.waiter))
  for loop, pairs in by_loop.items():
    try:
      loop.call_soon_threadsafe(_copy_outcomes, pairs)
    except RuntimeError:  # the loop closed: nobody waits any more
      pass


class DynamicBatcher:
  """Gathers submitted requests into batches for `handle` (module docstring)."""

  def __init__(self, handle: Callable[[list], None], max_batch_size: int, max_wait_ms: float,
               on_depth: Optional[Callable[[int], None]] = None,
               costs: Optional[Mapping[int, float]] = None):
    if max_batch_size < 1:
      raise ValueError(f'max_batch_size must be >= 1, got {max_batch_size}')
    if max_wait_ms < 0:
      raise ValueError(f'max_wait_ms must be >= 0, got {max_wait_ms}')
    self.handle = handle
    self.max_batch_size = int(max_batch_size)
    self.max_wait = float(max_wait_ms) / 1000.0
    self._on_depth = on_depth or (lambda n: None)
    self.costs = dict(costs or {})  # {padded size: seconds}; settable before `start`
    self._queue = collections.deque()
    self._cond = threading.Condition()
    self._stopping = False
    self._thread = None
    self._last_end = float('-inf')  # when the previous batch ended (time.perf_counter)
    self._expected = self.max_batch_size  # requests its window waits for (`expected`)
    self.limit = self.max_batch_size  # the largest batch formed now (`set_limit`)

  def start(self) -> 'DynamicBatcher':
    if self._thread is None:
      self._thread = threading.Thread(target=self._run, name='colt-batcher', daemon=True)
      self._thread.start()
    return self

  def submit(self, payload: Any,
             waiter: Optional[asyncio.Future] = None) -> concurrent.futures.Future:
    """The request's future; `waiter` (an asyncio future) also gets its outcome (module
    docstring)."""
    future = concurrent.futures.Future()
    with self._cond:
      if self._stopping:
        raise RuntimeError('the service is shutting down')
      self._queue.append(Pending(payload, time.perf_counter(), future, waiter))
      waiting = len(self._queue)
      self._on_depth(waiting)
      if waiting == 1 or waiting >= self._expected:
        # The worker waits for a first request, then for `_expected` of them or its window's
        # end (a timed wait): the requests in between would only wake it to wait again.
        self._cond.notify()
    return future

  def set_limit(self, limit: int) -> None:
    """Batches of at most `limit` requests (up to `max_batch_size`) from now on."""
    with self._cond:
      self.limit = max(1, min(int(limit), self.max_batch_size))
      self._cond.notify()

  def stop(self, timeout: Optional[float] = None) -> None:
    """Finishes every submitted request, then ends the worker."""
    with self._cond:
      self._stopping = True
      self._cond.notify()
    if self._thread is not None:
      self._thread.join(timeout)

  def expected(self, answered: int, waiting: int) -> int:
    """The requests the next window waits for, after a batch that answered `answered` while
    `waiting` queued (module docstring)."""
    return max(1, min(self.max_batch_size, answered + waiting))

  def take(self, n: int) -> int:
    """How many of n gathered requests run now (module docstring: the cheapest per answered
    request by `costs`, all n unless a cut saves CUT_GAIN, or without costs)."""
    sizes = sorted(self.costs)
    padded = next((s for s in sizes if s >= n), None)
    if n < 2 or padded is None:
      return n
    best, best_cost = n, self.costs[padded] / n * CUT_GAIN
    for size in sizes:
      if size < n and self.costs[size] / size < best_cost:
        best, best_cost = size, self.costs[size] / size
    return best

  def _gather(self) -> Optional[list]:
    """The next batch (None: stopped and drained)."""
    with self._cond:
      while not self._queue:
        if self._stopping:
          return None
        self._cond.wait()
      deadline = max(self._queue[0].arrived, self._last_end) + self.max_wait
      while len(self._queue) < min(self._expected, self.limit) and not self._stopping:
        left = deadline - time.perf_counter()
        if left <= 0:
          break
        self._cond.wait(left)
      batch = [self._queue.popleft()
               for _ in range(self.take(min(self.limit, len(self._queue))))]
      self._on_depth(len(self._queue))
    # Requests whose caller gave up are dropped (their waiters cancelled); the others are
    # marked running.
    running, dropped = [], []
    for p in batch:
      (running if p.future.set_running_or_notify_cancel() else dropped).append(p)
    if dropped:
      deliver(dropped)
    return running

  def _run(self) -> None:
    while True:
      batch = self._gather()
      if batch is None:
        return
      if not batch:
        continue
      error = None
      try:
        self.handle(batch)
      except Exception as e:  # pylint: disable=broad-except
        logging.exception('a batch of %d requests failed', len(batch))
        error = e
      finally:
        for p in batch:  # the batch's error, or a request the handler left unanswered
          try:
            if not p.future.done():
              p.future.set_exception(
                  error or RuntimeError('the batch left this request unanswered'))
          except concurrent.futures.InvalidStateError:  # answered meanwhile, elsewhere
            pass
        deliver(batch)
        with self._cond:
          self._last_end = time.perf_counter()
          self._expected = self.expected(len(batch), len(self._queue))
