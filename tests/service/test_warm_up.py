"""The service's warm-up in two parts (colt_jax/service/warm_up.py, `warm_up='first'`):
ready with the smallest padded size compiled, a batch larger than the sizes compiled so far
split into batches of those sizes (nothing compiles while serving), the background warm-up
completing (every size compiled, timed, counted as warm-up) and a stop during it clean.

The background thread is held at its first step (`_gate`) so that the tests see the service
before it is done, whatever the machine's speed."""
import concurrent.futures
import threading
import time

import numpy as np
import pytest

from colt_jax.service import service as service_lib
from colt_jax.service import schemas
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from service_shared import DIM, TEXTS, WARM, _unit, _hits, _scores, _expected  # pylint: disable=g-bad-import-order


def _gate(svc):
  """(entered, release): the background warm-up's steps wait for `release` (set), and
  `entered` is set once its first step waits."""
  entered, release = threading.Event(), threading.Event()
  original = svc.searcher.warm_up

  def gated(*args, **kwargs):
    if threading.current_thread().name == 'colt-warm-up':
      entered.set()
      assert release.wait(120), 'the test never released the warm-up'
    return original(*args, **kwargs)

  svc.searcher.warm_up = gated
  return entered, release


def _service(colt):
  return service_lib.Service(colt, service_lib.ServiceConfig(
      max_batch_size=8, max_wait_ms=200.0, warm_settings=WARM, warm_up='first'))


def _vectors(n, seed):
  return _unit(np.random.default_rng(seed).normal(size=(n, DIM)))


def test_ready_before_the_background_warm_up_splits_larger_batches(colt):
  svc = _service(colt)
  entered, release = _gate(svc)
  svc.start()
  try:
    assert entered.wait(60)
    assert svc.searcher.sizes == (2, 4, 8)
    compiled, total = svc.warm_steps
    assert compiled < total and svc.health()['warm'] == {'compiled': compiled, 'of': total}
    assert not svc.wait_warm(0.0) and svc.batcher.limit == 2
    assert sorted(svc.batcher.costs) == [2]  # only the compiled size is timed
    vectors = _vectors(6, 3)
    requests = ([schemas.SearchRequest(vector=v.tolist()) for v in vectors[:4]]
                + [schemas.SearchRequest(vector=vectors[4].tolist(), method='mmr'),
                   schemas.SearchRequest(query=TEXTS[1], method='topk')])
    futures = [svc.submit(r) for r in requests]  # 6 at once: more than the compiled size
    answers = [svc.searcher.response(f.result(60)) for f in futures]
    assert max(a['batch_size'] for a in answers) == 2  # split into batches of 2
    for v, answer in zip(vectors[:4], answers[:4]):
      hit = colt.search(v)
      assert_same_ranking(_hits(answer), _scores(answer), _expected(colt, hit), hit.scores)
    for r, answer in zip(requests[4:], answers[4:]):  # the same as each alone
      alone = svc.search(r)
      assert_same_ranking(_hits(answer), _scores(answer), _hits(alone), _scores(alone))
    assert svc.serving_compilations == 0
    assert svc.warm_steps == (compiled, total)  # still held
  finally:
    release.set()
  assert svc.wait_warm(300)
  try:
    total = svc.warm_steps[1]
    assert svc.warm_steps == (total, total) and svc.background.error is None
    assert svc.health()['warm'] == {'compiled': total, 'of': total}
    assert svc.batcher.limit == 8 and sorted(svc.batcher.costs) == [2, 4, 8]
    assert all(c > 0 for c in svc.batcher.costs.values())
    # The background's compilations are the warm-up's, exported as such.
    assert svc.warmup_compilations > svc._sync_compilations  # pylint: disable=protected-access
    text = svc.metrics.text().decode()
    assert f'colt_service_jax_compilations_total{{phase="warmup"}} {svc.warmup_compilations}.0' in text
    assert 'colt_service_jax_compilations_total{phase="serving"} 0.0' in text
    # Now batches of 8 run, still without compiling.
    vectors = _vectors(8, 4)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
      answers = list(pool.map(
          lambda v: svc.search(schemas.SearchRequest(vector=v.tolist())), vectors))
    assert max(a['batch_size'] for a in answers) > 2
    for v, answer in zip(vectors, answers):
      hit = colt.search(v)
      assert_same_ranking(_hits(answer), _scores(answer), _expected(colt, hit), hit.scores)
    assert svc.serving_compilations == 0
  finally:
    svc.stop()


def test_a_text_waits_for_its_token_shape_rather_than_compile_it(colt):
  """A text whose token shape the background still has to compile waits for it (the tiny
  CLIP has one token shape, compiled before ready: it is marked as still to come here)."""
  svc = _service(colt)
  entered, release = _gate(svc)
  svc.start()
  try:
    assert entered.wait(60)
    text = ' '.join(['photo'] * 40)
    with svc.background._cond:  # pylint: disable=protected-access
      svc.background._pending.add(svc.searcher._token_shape(text))  # pylint: disable=protected-access
    future = svc.submit(schemas.SearchRequest(query=text))
    time.sleep(0.5)
    assert not future.done()
  finally:
    release.set()
  try:
    assert len(future.result(300)['results']) > 0
    assert svc.background.done and svc.serving_compilations == 0
  finally:
    svc.stop()


def test_a_stop_during_the_background_warm_up_is_clean(colt):
  svc = _service(colt)
  entered, release = _gate(svc)
  svc.start()
  assert entered.wait(60)
  future = svc.submit(schemas.SearchRequest(vector=_vectors(1, 5)[0].tolist()))
  stopper = threading.Thread(target=svc.stop)
  stopper.start()
  time.sleep(0.3)
  assert stopper.is_alive()  # it waits for the step in progress
  release.set()
  stopper.join(120)
  assert not stopper.is_alive()
  assert len(future.result(0)['results']) > 0  # answered before the stop ended
  compiled, total = svc.warm_steps
  assert svc.background.done and compiled < total  # the later steps never ran
  assert not any(t.name == 'colt-warm-up' for t in threading.enumerate())
  with pytest.raises(RuntimeError):
    svc.submit(schemas.SearchRequest(vector=_vectors(1, 6)[0].tolist()))
