"""The service's persistent compilation cache (colt_jax/service/compile_cache.py): a second
warm-up loads every program from it; its folder is colt_jax's (a foreign one is refused when
named, left alone otherwise); a folder it cannot write is only read, and a cache that cannot
be written (a full disk) leaves the service serving as without one.

Counts of compilations and cache hits, never seconds (benchmarks/bench_startup.py times them).
"""
import errno
import os
import subprocess
import sys

import jax
from jax._src import compilation_cache as jax_cache
import numpy as np
import pytest

import float_compare
from colt_jax.benchmarking import startup
from colt_jax.benchmarking import synthetic_collection
from colt_jax.data import features
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.inference import store_search
from colt_jax.service import compile_cache
from colt_jax.service import schemas
from colt_jax.service import service as service_lib
from colt_jax.util.errors import InputError
from colt_jax.util.manifest import MANIFEST, Manifest
from checkout import REPO  # pylint: disable=g-bad-import-order

DIM = 16


@pytest.fixture
def jax_cache_restored():
  """The process's cache settings (conftest's test cache) as they were after the test."""
  keys = ('jax_compilation_cache_dir', 'jax_persistent_cache_min_compile_time_secs',
          'jax_persistent_cache_min_entry_size_bytes')
  before = {k: getattr(jax.config, k) for k in keys}
  yield
  for k, v in before.items():
    jax.config.update(k, v)
  jax_cache.reset_cache()


@pytest.fixture(scope='module')
def store_dir(tmp_path_factory):
  centres = synthetic_collection.synthetic_centres(4, DIM)
  return synthetic_collection.synthetic_store(
      str(tmp_path_factory.mktemp('cache') / 'store'),
      synthetic_collection.synthetic_photos(40, DIM, centres))


def _warmed(store_dir):
  """A service over the store (no model; topk and mmr at one padded size), started."""
  service = service_lib.Service(
      store_search.StoreSearch.from_store(features.load(store_dir)),
      service_lib.ServiceConfig(max_batch_size=2, methods=('topk', 'mmr')))
  service.start()
  return service


def _answer(service):
  query = np.zeros(DIM, np.float32)
  query[0] = 1.0
  try:
    return service.search(schemas.SearchRequest(vector=query.tolist(), method='mmr'))
  finally:
    service.stop()


def _cache_files(path):
  return [f for _, _, files in os.walk(os.path.join(path, compile_cache.TREE)) for f in files]


def test_a_second_warm_up_loads_every_program_from_the_cache(store_dir, tmp_path,
                                                              jax_cache_restored):
  cache = str(tmp_path / 'cache')
  assert compile_cache.enable(cache, explicit=True) == f'compilation cache {cache}'
  assert Manifest.load(cache).what == compile_cache.WHAT
  jax.clear_caches()  # what this process compiled before is compiled again, here: cold
  cold = _warmed(store_dir)
  cold_answer = _answer(cold)
  assert cold.warmup_compilations > 0 and cold.warmup_cache_hits == 0
  assert len(_cache_files(cache)) >= cold.warmup_compilations
  jax.clear_caches()  # as a new process: nothing compiled in memory
  warm = _warmed(store_dir)
  warm_answer = _answer(warm)
  assert warm.warmup_cache_hits == warm.warmup_compilations == cold.warmup_compilations
  ids = lambda a: [r['photo_id'] for r in a['results']]
  scores = lambda a: [r['score'] for r in a['results']]
  assert ids(warm_answer) == ids(cold_answer) and len(ids(cold_answer)) == 40  # all the photos
  float_compare.assert_close(scores(warm_answer), scores(cold_answer))


def test_a_cache_that_cannot_be_written_leaves_the_service_serving(store_dir, tmp_path,
                                                                   jax_cache_restored,
                                                                   monkeypatch):
  """A full disk: every write of an entry fails (ENOSPC); the programs compile and serve."""
  def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, 'No space left on device')
  monkeypatch.setattr(jax_cache, 'put_executable_and_time', full)
  cache = str(tmp_path / 'cache')
  compile_cache.enable(cache, explicit=True)
  jax.clear_caches()
  with pytest.warns(UserWarning, match='Error writing persistent compilation cache'):
    service = _warmed(store_dir)
  answer = _answer(service)
  assert service.warmup_compilations > 0 and service.warmup_cache_hits == 0
  assert len(answer['results']) == 40
  assert _cache_files(cache) == []


def test_a_folder_it_cannot_write_is_read_only(tmp_path, jax_cache_restored, monkeypatch):
  cache = str(tmp_path / 'cache')
  compile_cache.enable(cache, explicit=True)
  real = os.access
  monkeypatch.setattr(os, 'access', lambda p, mode, **kw: (
      False if os.path.abspath(p).startswith(cache) and mode & os.W_OK else real(p, mode, **kw)))
  line = compile_cache.enable(cache, explicit=True)
  assert line.startswith(f'compilation cache {cache}: read only')
  assert jax.config.jax_compilation_cache_dir == os.path.join(cache, compile_cache.TREE)
  other = str(tmp_path / 'other')  # a new folder it cannot make: no cache, no error
  monkeypatch.setattr(os, 'access', lambda p, mode, **kw: False if mode & os.W_OK else True)
  assert compile_cache.enable(other, explicit=True).startswith('compilation cache off:')
  assert not jax.config.jax_compilation_cache_dir and not os.path.exists(other)


def test_a_foreign_folder_is_refused_when_named_and_left_alone_otherwise(tmp_path,
                                                                         jax_cache_restored):
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'notes.txt').write_text('mine')
  with pytest.raises(InputError, match=r'mine \(--compilation_cache_dir\): refusing .*notes'):
    compile_cache.enable(str(mine), explicit=True)
  line = compile_cache.enable(str(mine), explicit=False)
  assert line.startswith('compilation cache off:') and not jax.config.jax_compilation_cache_dir
  assert sorted(os.listdir(mine)) == ['notes.txt'] and (mine / 'notes.txt').read_text() == 'mine'
  assert compile_cache.enable(None, explicit=False) == 'compilation cache off'


def test_configure_follows_the_flags_then_the_environment_then_the_default(
    tmp_path, jax_cache_restored, monkeypatch):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  assert compile_cache.default_dir() == str(tmp_path / 'xdg' / 'colt_jax' / 'compilation-cache')
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', str(tmp_path / 'env'))
  assert compile_cache.configure(None) == (f'compilation cache {tmp_path / "env"} '
                                           '(JAX_COMPILATION_CACHE_DIR)')
  assert compile_cache.configure(str(tmp_path / 'flag')) == (
      f'compilation cache {tmp_path / "flag"}')
  assert compile_cache.configure(str(tmp_path / 'flag'), use=False) == 'compilation cache off'
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR')
  compile_cache.configure(None)
  assert os.path.isfile(os.path.join(compile_cache.default_dir(), MANIFEST))


def _serve(store, *args, env_cache=True):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  if not env_cache:
    env.pop('JAX_COMPILATION_CACHE_DIR', None)
  return [sys.executable, os.path.join(REPO, 'experiments', 'serve.py'), '--store', store,
          '--port', '0', *args], env


@pytest.mark.slow
def test_serve_refuses_a_named_foreign_cache_folder_in_one_line(store_dir, tmp_path):
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'thesis.tex').write_text('mine')
  cmd, env = _serve(store_dir, '--compilation_cache_dir', str(mine))
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 2, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert '--compilation_cache_dir' in last and 'thesis.tex' in last and str(mine) in last
  assert os.listdir(mine) == ['thesis.tex']



@pytest.mark.slow
def test_a_second_start_of_serve_loads_its_programs_from_the_cache(store_dir, tmp_path):
  """benchmarks/bench_startup.py's measurement of one start, twice on one cache folder: the
  warm-up's compilations all come from the cache the second time; the first requests are
  answered and the section names every start (no seconds asserted)."""
  cache = str(tmp_path / 'cache')
  config = startup.StartupConfig(serve_args=('--methods', 'topk,mmr', '--max_batch_size', '2'))
  env = dict(os.environ)
  env.pop('JAX_COMPILATION_CACHE_DIR', None)  # the flag's folder, not the tests' cache
  starts = {name: startup.measure_start(config, store_dir, '', cache,
                                        str(tmp_path / f'{name}.log'), env=env)
            for name in ('cold', 'warm')}
  cold, warm = starts['cold'], starts['warm']
  assert cold['warmup_compilations'] > 0 and cold['warmup_cache_hits'] == 0, cold
  assert warm['warmup_cache_hits'] == warm['warmup_compilations'] == cold['warmup_compilations']
  for s in (cold, warm):
    assert s['methods'] == ['topk', 'mmr'] and s['exit_status'] == 0
    assert set(s['first_ms']) == set(s['second_ms']) == {'topk', 'mmr'}
    assert set(s['new_shape_ms']) == {'mmr'}  # topk compiles nothing per list length
    assert s['warm']['compiled'] == s['warm']['of'] > 0 and s['all_compiled_s'] >= s['ready_s']
  report = {'command': 'c', 'machine': {}, 'sizes': {'40': {'no model': starts}}}
  text = '\n'.join(startup.section(report))
  assert text.count('| 40 photos, no model, ') == 2 and '`python c`' in text


@pytest.mark.slow
def test_a_list_length_not_warmed_compiles_nothing_and_ranks_as_before(store_dir):
  """mmr, msd and dpp compute every list at full length and cut it (searcher.rank_baseline):
  a request of a list length the warm-up did not see (the page sends list_length = k)
  compiles nothing, and its list is `evaluation.rank_baseline` at that length (how the
  service computed it before), up to float32 ties."""
  service = service_lib.Service(
      store_search.StoreSearch.from_store(features.load(store_dir)),
      service_lib.ServiceConfig(max_batch_size=2, methods=('mmr', 'msd', 'dpp')))
  service.start()
  try:
    searcher = service.searcher
    queries = np.random.default_rng(3).standard_normal((3, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    cases = [(q, length, method) for q, length in zip(queries, (5, 12, 33))
             for method in ('mmr', 'msd', 'dpp')]
    answers = [service.search(schemas.SearchRequest(
        vector=q.tolist(), method=method, k=min(length, 20), list_length=length))
               for q, length, method in cases]
    assert service.serving_compilations == 0  # (the references below compile their own)
  finally:
    service.stop()
  for (q, length, method), got in zip(cases, answers):
    cands = searcher.search.candidates(q[None], searcher.num_candidates)
    entries = evaluation.rank_baseline(method, cands, searcher.method_params, k=length)[0]
    want = model_free.scored(cands[0], entries, method)  # (id, cosine score, objective)
    assert len(want) == length
    float_compare.assert_same_ranking(
        [r['photo_id'] for r in got['results']], [r['objective'] for r in got['results']],
        [pid for pid, _, _ in want], [objective for _, _, objective in want],
        f'{method} {length}')
    float_compare.assert_close(np.asarray([r['score'] for r in got['results']], np.float32),
                               np.asarray([score for _, score, _ in want], np.float32))
