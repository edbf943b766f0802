"""The service's dynamic batcher (colt_jax/service/request_batching.py): gathering, dropping
cancelled requests, wake-ups, batch windows, padding cuts and the warm-up's timing."""
import asyncio
import concurrent.futures
import json
import threading
import time

import numpy as np
import pytest

from colt_jax.service import request_batching
from colt_jax.service import schemas
from colt_jax.service import searcher as searcher_lib
from service_shared import DIM, WARM, _unit  # pylint: disable=g-bad-import-order


def test_dynamic_batcher_gathers_drops_cancelled_and_drains():
  batches = []
  entered, release = threading.Event(), threading.Event()

  def handle(batch):
    batches.append([p.payload for p in batch])
    entered.set()
    release.wait(5)
    for p in batch:
      p.future.set_result(p.payload * 10)

  b = request_batching.DynamicBatcher(handle, max_batch_size=3, max_wait_ms=200).start()
  first = b.submit(0)  # runs alone after 200 ms, then blocks the worker
  assert entered.wait(5)
  later = [b.submit(i) for i in range(1, 6)]
  later[1].cancel()  # its caller gave up before its batch started
  release.set()
  assert first.result(5) == 0 and [f.result(5) for f in later if not f.cancelled()] == [
      10, 30, 40, 50]
  b.stop(5)
  assert batches == [[0], [1, 3], [4, 5]]  # at most 3 gathered, the cancelled one dropped
  with pytest.raises(RuntimeError, match='shutting down'):
    b.submit(9)

def test_waiters_get_their_outcomes_in_one_wake_up_per_batch():
  """`submit(payload, waiter)`: each request's outcome (result, the handler's error, an
  unanswered request's error) reaches its asyncio waiter through one call_soon_threadsafe
  per batch; a waiter whose caller gave up stays cancelled; a request dropped because its
  future was cancelled before its batch has its waiter cancelled."""
  entered, release = threading.Event(), threading.Event()

  def handle(batch):
    entered.set()
    release.wait(5)
    if any(p.payload == 'fail' for p in batch):
      raise ValueError('this batch failed')
    for p in batch:
      if p.payload != 'forgotten':
        p.future.set_result(p.payload * 2)

  async def main():
    loop = asyncio.get_running_loop()
    wakes = []
    threadsafe = loop.call_soon_threadsafe
    loop.call_soon_threadsafe = lambda *a: (wakes.append(a[0]), threadsafe(*a))[1]
    b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=100).start()
    try:
      busy = loop.create_future()
      b.submit('b', busy)  # holds the worker while the next batch queues
      while not entered.is_set():  # (not to_thread: its own wake-up would be counted)
        await asyncio.sleep(0.005)
      waiters = [loop.create_future() for _ in range(4)]
      futures = [b.submit(x, w) for x, w in zip(('x', 'y', 'forgotten', 'z'), waiters)]
      waiters[3].cancel()  # its caller gave up (the service's timeout) before the answer
      dropped = loop.create_future()
      b.submit('dropped', dropped).cancel()  # queued behind a full batch, cancelled: dropped
      release.set()
      assert await asyncio.wait_for(busy, 5) == 'bb'
      assert await asyncio.wait_for(waiters[0], 5) == 'xx'
      assert await waiters[1] == 'yy' and futures[1].result() == 'yy'
      with pytest.raises(RuntimeError, match='left this request unanswered'):
        await waiters[2]
      assert waiters[3].cancelled()
      await asyncio.wait_for(asyncio.wait([dropped]), 5)
      assert dropped.cancelled()
      failed = loop.create_future()
      b.submit('fail', failed)
      with pytest.raises(ValueError, match='this batch failed'):
        await asyncio.wait_for(failed, 5)
    finally:
      b.stop(5)
    # one per batch, and one for the dropped request
    assert [w.__name__ for w in wakes] == ['_copy_outcomes'] * 4

  asyncio.run(main())

def _recorder(hold=None):
  """A batcher's handler that records its batches' payloads (and first waits for `hold`)."""
  batches = []

  def handle(batch):
    if hold is not None:
      hold.wait(5)
    batches.append([p.payload for p in batch])
    for p in batch:
      p.future.set_result(p.payload)
  return batches, handle

def test_the_batch_window_opens_when_the_worker_is_free():
  """A request that arrived while the previous batch ran waits max_wait_ms from that batch's
  end (not from its arrival), so that clients answered by that batch can join it."""
  release = threading.Event()
  batches, handle = _recorder(release)
  b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=1500).start()
  busy = [b.submit(i) for i in range(4)]  # a full batch: it runs at once, then blocks
  time.sleep(0.2)
  early = b.submit(4)  # arrives while [0, 1, 2, 3] runs
  time.sleep(1.6)  # past its own arrival's window
  release.set()
  assert [f.result(5) for f in busy] == [0, 1, 2, 3]
  time.sleep(0.3)  # the worker is free; the window of 4 runs from then
  late = b.submit(5)
  assert early.result(5) == 4 and late.result(5) == 5
  b.stop(5)
  assert batches == [[0, 1, 2, 3], [4, 5]]

def test_a_lone_client_does_not_wait_for_others():
  """After a lone request, a lone request that arrives once the worker is free runs at once;
  two requests wait for the window."""
  batches, handle = _recorder()
  b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=2000).start()
  t0 = time.perf_counter()
  assert b.submit(0).result(10) == 0  # the first request: no batch before it, it waits
  assert time.perf_counter() - t0 >= 1.9
  for i in range(1, 4):  # a client alone, one request after another
    time.sleep(0.05)  # (its round trip: the worker notes the end of the batch)
    t0 = time.perf_counter()
    assert b.submit(i).result(10) == i
    assert time.perf_counter() - t0 < 1.0
  pair = [b.submit(4), b.submit(5)]  # two waiting: a batch of them
  assert [f.result(10) for f in pair] == [4, 5]
  b.stop(5)
  assert batches == [[0], [1], [2], [3], [4, 5]]

def test_a_batch_waits_for_every_closed_loop_client_and_no_longer():
  """Clients that send their next request when answered: after the first window (it waits
  for max_batch_size), each batch runs as soon as all three clients are back, never waiting out
  the window, and never without one of them."""
  batches, handle = _recorder()
  b = request_batching.DynamicBatcher(handle, max_batch_size=8, max_wait_ms=1500).start()

  def client(c):
    for i in range(5):
      assert b.submit((c, i)).result(10) == (c, i)
      time.sleep(0.01 * c)  # the clients come back at different times

  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    list(pool.map(client, range(3)))
  took = time.perf_counter() - t0
  b.stop(5)
  assert [sorted(batch) for batch in batches] == [[(c, i) for c in range(3)] for i in range(5)]
  assert 1.4 < took < 2.5, took  # the first window, then no waiting beyond the clients'

def test_the_worker_is_woken_by_a_first_request_and_a_full_batch_only():
  """Requests between the first and the one the window waits for (max_batch_size before any
  batch) do not wake the worker only for it to wait again; the batch still runs at once when
  the last of them arrives, not at the window's end."""
  batches, handle = _recorder()
  b = request_batching.DynamicBatcher(handle, max_batch_size=4, max_wait_ms=5000)
  notify, wakes = b._cond.notify, []  # pylint: disable=protected-access
  b._cond.notify = lambda *a: (wakes.append(1), notify(*a))  # pylint: disable=protected-access
  b.start()
  t0 = time.perf_counter()
  futures = [b.submit(i) for i in range(4)]
  assert [f.result(5) for f in futures] == [0, 1, 2, 3]
  assert time.perf_counter() - t0 < 2.0  # not the window of 5 s
  assert len(wakes) == 2  # the first request and the fourth
  b.stop(5)
  assert batches == [[0, 1, 2, 3]]

def test_a_checked_vector_is_the_float32_array_the_model_reads():
  """A request's vector, once checked, is held as float32 (its Python floats released), the
  same numbers the batcher passed on before; a text query has none."""
  rng = np.random.default_rng(2)
  vector = _unit(rng.normal(size=(1, DIM)))[0].astype(np.float32).tolist()
  for got in (schemas.SearchRequest(vector=vector),
              schemas.SearchRequest.model_validate_json(json.dumps({'vector': vector}))):
    assert isinstance(got.vector, np.ndarray) and got.vector.dtype == np.float32
    np.testing.assert_array_equal(got.vector, np.asarray(vector, np.float32))
  assert schemas.SearchRequest(query='big ben').vector is None

def test_a_batch_that_is_mostly_padding_is_cut():
  """With the padded sizes' costs, n gathered requests run at the size that costs least per
  answered request; the others wait for the next batch (in arrival order)."""
  costs = {s: 0.020 + 0.006 * s for s in (2, 4, 8, 24, 32)}  # a fixed and a per-row cost
  b = request_batching.DynamicBatcher(lambda batch: None, max_batch_size=32, max_wait_ms=0,
                              costs=costs)
  assert [b.take(n) for n in (1, 2, 3, 8, 24, 32)] == [1, 2, 3, 8, 24, 32]
  assert b.take(26) == 24  # 0.212 / 26 > 0.164 / 24
  assert b.take(5) == 4  # 0.068 / 5 > 0.044 / 4
  assert request_batching.DynamicBatcher(lambda batch: None, 32, 0).take(26) == 26  # no costs: all
  release = threading.Event()
  batches, handle = _recorder(release)
  b = request_batching.DynamicBatcher(handle, max_batch_size=32, max_wait_ms=0, costs=costs).start()
  busy = b.submit(-1)  # holds the worker while 26 requests queue
  time.sleep(0.2)
  futures = [b.submit(i) for i in range(26)]
  release.set()
  assert busy.result(5) == -1 and [f.result(5) for f in futures] == list(range(26))
  b.stop(5)
  assert batches == [[-1], list(range(24)), [24, 25]]

def test_warm_up_times_every_size_by_its_best_round(client, monkeypatch):
  """The batcher's costs are each padded size's best of COST_ROUNDS interleaved rounds: a
  call slowed once (contention) does not make its size look dearer for good."""
  searcher = client.app.state.service.searcher
  assert set(searcher.batch_seconds) == set(searcher.sizes)
  assert all(s > 0 for s in searcher.batch_seconds.values())
  calls = []

  def timed(shape, queries):
    calls.append(queries.shape[0])
    slow = len(calls) == 1  # the first size's first round only
    return 1.0 if slow else 0.001 * queries.shape[0]

  monkeypatch.setattr(searcher, '_seconds', timed)
  monkeypatch.setattr(searcher, 'batch_seconds', {})
  searcher.warm_up(WARM, ('colt',))
  sizes = list(searcher.sizes)
  assert calls == sizes * searcher_lib.COST_ROUNDS  # round by round over every size
  assert searcher.batch_seconds == {n: 0.001 * n for n in sizes}
