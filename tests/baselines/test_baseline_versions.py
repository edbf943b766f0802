"""The baselines' explicit versions (colt_jax/baselines/versions.py) and the row keys they make
(colt_jax/reproduction/row_versions.py):

* a rename or a move of a baseline's code leaves every key as it was;
* raising a method's version changes exactly the keys of the rows that run it;
* a change of what a method returns without a raised version fails its golden test: each
  method's outputs on a fixed tiny input are recorded with its version in
  tests/fixtures/baseline_goldens.json (re-record after raising a version:
  `PYTHONPATH=. python tests/baselines/test_baseline_versions.py --record`);
* rows cached before versions (the committed row-cache/div400) are found at version 1.
"""
from __future__ import annotations

import glob
import importlib.util
import io
import json
import os
import re
import sys
import tokenize
import types

import numpy as np
import pytest

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import gbt_pairs_relevance
from colt_jax.baselines import greedy
from colt_jax.baselines import rerankers
from colt_jax.baselines import umons
from colt_jax.baselines import versions
from colt_jax.reproduction import row_versions
from colt_jax.reproduction import variants as variants_lib
from colt_jax.util import atomic

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:  # run as a script (--record): float_compare in tests/
  sys.path.insert(0, TESTS)
from float_compare import assert_close, assert_same_ranking  # noqa: E402  (after the path)

GOLDENS = os.path.join(TESTS, 'fixtures', 'baseline_goldens.json')
ROWS = os.path.join(os.path.dirname(TESTS), 'row-cache', 'div400')
# gbt-pairs' probabilities come from boosted trees over features of BLAS products: rounding
# may move a value across a bin edge on another processor, so they get a wider tolerance (a
# change of the method moves them by far more).
GBT_ULPS = 4096

# ------------------------------------------------------------------------ the golden inputs


def _unit(x):
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _features():
  rng = np.random.default_rng(66)
  return _unit(rng.normal(size=6)), _unit(rng.normal(size=(14, 6)))


def _heads():
  rng = np.random.default_rng(67)
  r = rng.uniform(0.05, 0.95, size=10).astype(np.float32)
  p = rng.uniform(size=(10, 10)).astype(np.float32)
  p = (p + p.T) / 2
  np.fill_diagonal(p, 1.0)
  return r, p


def _ranking(r) -> dict:
  return {'indices': np.asarray(r.indices).tolist(),
          'scores': np.asarray(r.scores, np.float32).tolist()}


def _gbt_data(root: str) -> tuple:
  from colt_jax.data import splits as data  # pylint: disable=g-import-not-at-top
  from colt_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  cfg = synthetic.SyntheticConfig(dim=8, num_vocabulary=20, dev_topics=3, test_topics=2,
                                  min_photos=14, max_photos=18, mean_clusters=3)
  synthetic.generate(root, seed=3, config=cfg)
  return data.load('synthetic', 'dev', root), data.load('synthetic', 'test', root)


def _gbt_outputs(root: str) -> dict:
  dev, test = _gbt_data(root)
  config = gbt_pairs.LearnerConfig(max_iter=20, max_pairs=500)
  scores = gbt_pairs.fit(*dev, 'pool', config).predict(*test, 'pool')
  run = gbt_pairs.select(scores, weight=0.4, k=8)
  return {'relevance': [np.asarray(s.relevance, np.float32).tolist() for s in scores],
          'pair_prob': [np.asarray(s.pair_prob, np.float32).tolist() for s in scores],
          'lists': {str(t): {'indices': [p for p, _ in r], 'scores': [v for _, v in r]}
                    for t, r in run.items()}}


class _Model:
  """A relevance model stand-in: P(relevant) is a fixed function of the photo's features."""

  def predict(self, query, photos):
    return (1.0 / (1.0 + np.exp(-np.asarray(photos, np.float32) @ query))).astype(np.float32)


def _relevance_outputs() -> dict:
  from colt_jax.data import features as features_lib  # pylint: disable=g-import-not-at-top
  query, photos = _features()
  ids = [f'p{i}' for i in range(len(photos))]
  store = features_lib.make_store(
      photos=photos, photo_ids=ids, queries=query[None], query_ids=[5],
      categories=np.zeros((0, photos.shape[1]), np.float32), category_names=[],
      encoder='test', dataset='synthetic', split='test', source='', normalised=True)
  r, p = _heads()
  scores = [gbt_pairs.TopicScores(5, tuple(ids[:10]), r, p)]
  mixed = gbt_pairs_relevance.mixed_scores(scores, _Model(), store, 0.3)
  tuning = [{'setting': {'gbt_weight': w, 'relevance_mix': a}, 'F1@20': f}
            for (w, a), f in zip([(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.5, 0.5)],
                                 [0.41, 0.47, 0.47, 0.44])]
  return {'relevance': np.asarray(mixed[0].relevance, np.float32).tolist(),
          'chosen': gbt_pairs_relevance.best_setting(tuning)}


def outputs(method: str, tmp_dir: str) -> dict:
  """What `method` returns on its golden input."""
  query, feats = _features()
  if method == 'flickr':
    return _ranking(rerankers.flickr(np.array([3, 1, 7, 2, 9, 4, 6, 5, 8]), 6))
  if method == 'topk':
    return _ranking(rerankers.topk(query, feats, 8))
  if method in ('mmr', 'msd', 'dpp'):
    param = {'mmr': {'diversity': 0.6}, 'msd': {'tradeoff': 0.5}, 'dpp': {'theta': 0.7}}
    return _ranking(getattr(rerankers, method)(query, feats, 8, num_candidates=12,
                                               **param[method]))
  if method == 'umons':
    return _ranking(umons.umons(query, feats, 10, threshold=0.2, eps=0.35, min_samples=2,
                                num_candidates=12))
  if method == 'umons-dbscan':
    return _ranking(umons.umons_dbscan(query, feats, 10, relevance_eps=0.6,
                                       relevance_min_samples=2, eps=0.35, min_samples=2,
                                       num_candidates=12))
  if method == 'expected-coverage':
    r, p = _heads()
    return _ranking(greedy.expected_coverage(r, p, weight=0.3, k=7))
  if method == 'gbt-pairs':
    return _gbt_outputs(os.path.join(tmp_dir, 'gbt'))
  if method == 'gbt-pairs relevance':
    return _relevance_outputs()
  raise KeyError(f'no golden input for {method!r}: add one to tests/baselines/test_baseline_versions.py')


def _compare(method: str, got: dict, want: dict) -> None:
  """Outputs agree up to rounding (lists up to ties in their scores)."""
  if method == 'gbt-pairs':
    for field in ('relevance', 'pair_prob'):
      for g, w in zip(got[field], want[field], strict=True):
        assert_close(np.float32(g), np.float32(w), err_msg=field, ulps=GBT_ULPS)
    assert set(got['lists']) == set(want['lists'])
    for t, w in want['lists'].items():
      assert_same_ranking(got['lists'][t]['indices'], got['lists'][t]['scores'],
                          w['indices'], w['scores'], err_msg=f'topic {t}', ulps=GBT_ULPS)
  elif method == 'gbt-pairs relevance':
    assert_close(np.float32(got['relevance']), np.float32(want['relevance']), 'relevance')
    assert got['chosen'] == want['chosen']
  else:
    assert_same_ranking(got['indices'], got['scores'], want['indices'], want['scores'],
                        err_msg=method)


def test_the_golden_inputs_keep_clear_of_the_umons_thresholds():
  """UMONS's picks turn on distances against eps and similarities against the threshold: on
  the golden input none lies within rounding of them, so its golden holds on every machine."""
  query, feats = _features()
  sims = feats @ query
  keep = np.sort(np.argsort(-sims, kind='stable')[:12])
  dist = (1.0 - feats[keep] @ feats[keep].T)[np.triu_indices(12, 1)]
  normed = (sims[keep] - sims[keep].min()) / (sims[keep].max() - sims[keep].min())
  assert np.min(np.abs(dist - 0.35)) > 1e-3 and np.min(np.abs(dist - 0.6)) > 1e-3
  assert np.min(np.abs(normed - 0.2)) > 1e-3


def _goldens() -> dict:
  with open(GOLDENS) as f:
    return json.load(f)


# ------------------------------------------------------------------ (c) behaviour vs. version


def test_every_versioned_method_has_a_golden():
  assert set(_goldens()) == set(versions.VERSIONS), (
      'record the golden of every method of colt_jax/baselines/versions.py: '
      'PYTHONPATH=. python tests/baselines/test_baseline_versions.py --record')


@pytest.mark.parametrize('method', sorted(versions.VERSIONS))
def test_outputs_match_the_golden_of_the_version(method, tmp_path):
  golden = _goldens()[method]
  version = versions.VERSIONS[method]
  assert golden['version'] == version, (
      f'{method} is at version {version}, its golden at {golden["version"]}: re-record it '
      '(PYTHONPATH=. python tests/baselines/test_baseline_versions.py --record)')
  got = json.loads(json.dumps(outputs(method, str(tmp_path))))
  try:
    _compare(method, got, golden['outputs'])
  except AssertionError as e:
    raise AssertionError(
        f'{method} returns other outputs than version {version} did ({e}). If the change is '
        f'meant, raise its version in colt_jax/baselines/ (VERSIONS: the rows that run it are '
        'computed anew) and re-record: PYTHONPATH=. python tests/baselines/test_baseline_versions.py '
        '--record') from None


def test_the_golden_test_fails_on_a_change_of_behaviour(tmp_path, monkeypatch):
  """A change of a method's code (MMR's trade-off read the other way) fails its golden."""
  golden = _goldens()['mmr']['outputs']
  real = rerankers._mmr_select  # pylint: disable=protected-access
  monkeypatch.setattr(rerankers, '_mmr_select',
                      lambda q, c, v, diversity, k: real(q, c, v, 1.0 - diversity, k))
  with pytest.raises(AssertionError):
    _compare('mmr', json.loads(json.dumps(outputs('mmr', str(tmp_path)))), golden)


# ------------------------------------------------------------------ (a) renames and moves


def _renamed_copy(module: types.ModuleType, name: str, monkeypatch) -> types.ModuleType:
  """`module`'s source with every top-level function renamed (uses included), loaded as the
  module `name` (a move to another package)."""
  source = open(module.__file__).read()
  names = set(re.findall(r'^def (\w+)\(', source, flags=re.M))
  tokens = [(t.type, t.string + '_renamed' if t.type == tokenize.NAME and t.string in names
             else t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)]
  source = tokenize.untokenize(tokens)  # names renamed; strings (the methods' names) kept
  spec = importlib.util.spec_from_loader(name, loader=None)
  copy = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, name, copy)  # for its dataclasses
  exec(compile(source, f'<{name}>', 'exec'), copy.__dict__)  # pylint: disable=exec-used
  return copy


def test_a_rename_or_move_of_the_code_keeps_every_version_and_key(monkeypatch):
  moved = [_renamed_copy(m, f'elsewhere_moved_{i}', monkeypatch)
           for i, m in enumerate(versions.MODULES)]
  assert any(hasattr(c, 'mmr_renamed') for c in moved)  # renamed indeed
  assert versions.registry(moved) == versions.registry() == versions.VERSIONS
  for method in list(variants_lib.BASELINES) + ['gbt-pairs relevance']:
    assert (versions.of(method, versions=versions.registry(moved))
            == versions.of(method)), method


def test_a_version_is_declared_once_as_a_positive_int():
  twice = types.SimpleNamespace(__name__='x', VERSIONS={'mmr': 1})
  with pytest.raises(ValueError, match='two modules'):
    versions.registry([rerankers, twice])
  with pytest.raises(ValueError, match='int >= 1'):
    versions.registry([types.SimpleNamespace(__name__='y', VERSIONS={'new': '2'})])
  with pytest.raises(KeyError, match='no version'):
    versions.of('no-such-method')


# ------------------------------------------------------ (b) a raised version: its rows only

# What each row runs, written out here (not derived from the code under test).
RUNS = {
    **{m: {m} for m in ('flickr', 'topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan')},
    'gbt-pairs': {'gbt-pairs', 'expected-coverage'},
    'gbt-pairs relevance': {'gbt-pairs', 'expected-coverage', 'gbt-pairs relevance'},
}


def _colt_runs(variant) -> set:
  if variant.post == 'topk':
    return {'topk'}
  if variant.post == 'dbscan':
    return {'umons'}
  return {'expected-coverage'} if variant.selection == 'coverage' else set()


def _row_keys() -> dict:
  """Row name -> the versions its key holds, for every baseline row and every CoLT row (each
  selection rule a chosen row may take)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  keys = {m: versions.of(m) for m in RUNS}
  for v in variants_lib.VARIANTS:
    rules = ('coverage', 'cluster', 'dpp') if v.choose_rule else (v.selection,)
    for rule in rules:
      chosen = dataclasses.replace(v, selection=rule)
      keys[f'{v.name} [{rule}]'] = row_versions.colt_versions(chosen)
  return keys


def test_raising_a_version_changes_exactly_the_keys_of_the_rows_that_run_it(monkeypatch):
  runs = dict(RUNS)
  for v in variants_lib.VARIANTS:
    for rule in (('coverage', 'cluster', 'dpp') if v.choose_rule else (v.selection,)):
      runs[f'{v.name} [{rule}]'] = _colt_runs(types.SimpleNamespace(post=v.post, selection=rule))
  assert {'SCL + top-k [category]', 'SCL + DBSCAN [category]', 'colt [category]',
          'colt-pairs [coverage]'} <= set(runs)
  before = _row_keys()
  assert set(before) == set(runs)
  for method in versions.VERSIONS:
    with monkeypatch.context() as m:
      m.setitem(versions.VERSIONS, method, versions.VERSIONS[method] + 1)
      after = _row_keys()
    changed = {row for row in before if before[row] != after[row]}
    assert changed == {row for row, used in runs.items() if method in used}, method
    assert changed, f'no row runs {method}'


# -------------------------------------------------- rows cached before versions: version 1


def _committed_keys():
  """(path, stored key) of every committed row: the one object named "key" in the file
  parsed alone (the records are large), the whole record where that is ambiguous."""
  for path in sorted(glob.glob(os.path.join(ROWS, '**', '*.json'), recursive=True)):
    if os.path.basename(path).startswith('.'):
      continue
    with open(path) as f:
      text = f.read()
    if text.count('"key": {') == 1:
      key, _ = json.JSONDecoder().raw_decode(text, text.index('"key": {') + len('"key": '))
    else:
      key = json.loads(text)['key']
    yield path, key


def _versioned(stored: dict) -> dict:
  """The key the code builds now for the row whose pre-version key is `stored` (a row of
  another kind, e.g. a fold's choice: `stored` itself)."""
  key = {k: v for k, v in stored.items() if k != 'implementation'}
  if 'implementation' in stored:  # a baseline row, keyed by its modules' code digest
    key['versions'] = versions.of(stored['method'])
  elif {'variant', 'inner_folds', 'weights'} <= set(stored):  # a colt-pairs row's choice of w
    key['versions'] = versions.of('expected-coverage')
  elif {'variant', 'seed', 'tag'} <= set(stored):  # a CoLT row
    v = stored['variant']
    used = row_versions.colt_versions(types.SimpleNamespace(
        post=v.get('post', 'ttc'), selection=v.get('selection', 'category')))
    if used:
      key['versions'] = used
  return key


@pytest.mark.skipif(not os.path.isdir(ROWS), reason='no committed row cache')
def test_the_committed_rows_are_found_at_version_1_and_never_at_another():
  found = 0
  for path, stored in _committed_keys():
    key = _versioned(stored)
    if key == stored:  # a row that runs no baseline: its key is as it was
      continue
    assert row_versions.legacy_match(stored, key), path
    found += 1
    raised = dict(key, versions={m: v + 1 for m, v in key['versions'].items()})
    assert not row_versions.legacy_match(stored, raised), path
  assert found >= 103  # the baseline rows (97 + 6 gbt-pairs relevance) and colt-pairs rows


def test_legacy_match_needs_a_known_digest_and_the_same_configuration():
  key = {'method': 'mmr', 'protocol': 'pool', 'topics': [1, 2], 'code': 1,
         'versions': {'mmr': 1}}
  stored = {'method': 'mmr', 'protocol': 'pool', 'topics': [1, 2], 'code': 1,
            'implementation': row_versions.LEGACY_BASELINE_CODE[0]}
  assert row_versions.legacy_match(stored, key)
  assert not row_versions.legacy_match(dict(stored, implementation='0123456789ab'), key)
  assert not row_versions.legacy_match(dict(stored, topics=[1]), key)
  assert not row_versions.legacy_match({k: v for k, v in stored.items()
                                        if k != 'implementation'}, key)
  assert not row_versions.legacy_match(dict(stored, versions={'mmr': 1}), key)
  colt = {'variant': {'name': 'SCL + top-k', 'post': 'topk'}, 'seed': 0, 'code': 1}
  assert row_versions.legacy_match(colt, dict(colt, versions={'topk': 1}))
  assert not row_versions.legacy_match(colt, dict(colt, versions={'topk': 2}))


def test_the_row_cache_finds_a_legacy_row_and_recomputes_a_raised_version(tmp_path):
  from colt_jax.reproduction import row_cache  # pylint: disable=g-import-not-at-top
  cache = row_cache.RowCache(str(tmp_path), own_folder=False)
  stored = {'method': 'topk', 'protocol': 'pool', 'code': row_cache.ROWS_CODE_VERSION,
            'implementation': row_versions.LEGACY_BASELINE_CODE[0]}
  atomic.write_json(cache.row_path('official', 'topk (pool)'), {'mean': {'F1@20': 0.5},
                                                               'key': stored})
  key = {'method': 'topk', 'protocol': 'pool', 'versions': versions.of('topk')}
  refuse = lambda: pytest.fail('a legacy row of version 1 was computed again')
  assert cache.cached('official', 'topk (pool)', key, refuse)['mean'] == {'F1@20': 0.5}
  raised = dict(key, versions={'topk': versions.VERSIONS['topk'] + 1})
  again = cache.cached('official', 'topk (pool)', raised, lambda: {'mean': {'F1@20': 0.25}})
  assert again['mean'] == {'F1@20': 0.25} and again['key']['versions'] == raised['versions']


# ------------------------------------------------------------------------------- recording


def record(tmp_dir: str) -> None:
  """Writes every method's golden at its current version (after raising a version)."""
  out = {m: {'version': v, 'outputs': outputs(m, tmp_dir)}
         for m, v in sorted(versions.VERSIONS.items())}
  atomic.write_json(GOLDENS, json.loads(json.dumps(out)), indent=1)
  print(f'wrote {GOLDENS}')


if __name__ == '__main__':
  if sys.argv[1:] != ['--record']:
    sys.exit('usage: PYTHONPATH=. python tests/baselines/test_baseline_versions.py --record')
  import tempfile  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as d:
    record(d)
