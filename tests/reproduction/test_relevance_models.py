"""Tests of colt_jax/reproduction/diagnostics/relevance_models.py: the models fitted on training photos alone, the
conditions' r, the rebuilt lists and the table."""
import types

import numpy as np
import pytest

from colt_jax.util.errors import InputError

from colt_jax.reproduction.diagnostics import relevance_models
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from toy_topic import IDS, toy_split  # pylint: disable=g-bad-import-order

CLUSTER_RULE = PairsInferenceSettings(k=3, per_category=1, list_length=6,
                                    selection='cluster', cluster_threshold=0.3)


def _tables(rng, topics=4, n=30, signal=True):
  """Tables whose relevance follows the first descriptor dimension (and, weakly, the first
  photo feature) when `signal`."""
  out = {}
  for t in range(topics):
    feats = rng.normal(size=(n, 3)).astype(np.float32)
    desc = rng.normal(size=(n, 5))
    y = (desc[:, 0] + 0.3 * feats[:, 0] > 0).astype(np.int64) if signal else np.ones(n, int)
    y[0] = -1  # no rGT: left out
    out[t] = (tuple(f't{t}p{i}' for i in range(n)), feats, desc, y)
  return out


def test_models_learn_from_the_descriptors_that_only_their_descriptor_inputs_read():
  rng = np.random.default_rng(0)
  models = relevance_models.fit_models(_tables(rng, topics=6))
  assert set(models) == set(relevance_models.MODELS)
  _, feats, desc, y = _tables(np.random.default_rng(1), topics=1)[0]
  use = y >= 0
  auc = {}
  from sklearn.metrics import roc_auc_score  # pylint: disable=g-import-not-at-top
  for name, model in models.items():
    x = relevance_models._inputs(name, feats, desc)  # pylint: disable=protected-access
    assert x.shape[1] == (8 if 'descriptors' in name else 3)
    auc[name] = roc_auc_score(y[use], model.predict_proba(x[use])[:, 1])
  assert auc['logistic + descriptors'] > 0.9 and auc['boosted + descriptors'] > 0.8
  assert auc['logistic'] < auc['logistic + descriptors'] - 0.1  # features alone: weak
  with pytest.raises(InputError, match='need relevant and irrelevant photos'):
    relevance_models.fit_models(_tables(rng, signal=False))


def test_conditions_take_phi_a_model_or_half_of_each():
  phi = np.array([0.2, 0.8])
  model = {m: np.array([0.6, 0.0]) for m in relevance_models.MODELS}
  got = relevance_models.condition_relevance(phi, model)
  assert list(got) == [label for label, _ in relevance_models.CONDITIONS]
  np.testing.assert_allclose(got['phi'], phi)
  np.testing.assert_allclose(got['boosted + descriptors'], [0.6, 0.0])
  np.testing.assert_allclose(got['phi and logistic, half each'], [0.4, 0.4])
  assert all(v.dtype == np.float32 for v in got.values())


class _FixedHeads:
  """A Retriever stand-in: phi calls every photo relevant and all alike except p7-p9."""
  settings = CLUSTER_RULE

  def pool_heads(self, query, features, photo_ids):
    n = len(photo_ids)
    p = np.full((n, n), 0.9, np.float32)
    p[7:, :] = p[:, 7:] = 0.0
    np.fill_diagonal(p, 1.0)
    return tuple(photo_ids), np.full(n, 0.9, np.float32), p


class _Model:
  """A fitted-model stand-in: P(relevant) is the first input column."""

  def predict_proba(self, x):
    return np.stack([1 - x[:, 0], x[:, 0]], axis=1)


def test_fold_scores_rebuild_the_rule_with_each_relevance(monkeypatch):
  ids, split = IDS, toy_split()  # p0-p6 one cluster, p7 and p8 one each, p9 not
  cands = types.SimpleNamespace(query=None, features=None, photo_ids=ids)
  monkeypatch.setattr(relevance_models.head_quality, 'by_topic', lambda *a: {7: cands})
  # The models' r: the table's first photo feature, listed in another order than the pool.
  order = list(reversed(ids))
  feats = np.array([[0.0 if pid == 'p9' else 0.8] for pid in order], np.float32)
  tables = {7: (tuple(order), feats, np.zeros((10, 2)), np.zeros(10, np.int64))}
  models = {m: _Model() for m in relevance_models.MODELS}
  got = relevance_models.fold_scores(_FixedHeads(), models, tables, (split, None),
                                     (split, None))['7']
  assert set(got) == {label for label, _ in relevance_models.CONDITIONS}
  assert got['phi']['relevance_auc'] == 0.5 and got['logistic']['relevance_auc'] == 1.0
  # The models call p9 irrelevant: it leaves the clusters' heads of the list, which keep one
  # photo of each of the three clusters either way.
  assert got['logistic']['CR@20'] == 1.0 and got['logistic']['P@20'] == 6 / 20


def test_summary_pairs_each_condition_with_phis_lists():
  rng = np.random.default_rng(0)
  topics = {}
  for t in range(6):
    base = rng.uniform(0.4, 0.6)
    topics[str(t)] = {label: {'relevance_auc': 0.7, 'P@20': base, 'CR@20': base,
                              'F1@20': base} for label, _ in relevance_models.CONDITIONS}
    topics[str(t)]['boosted + descriptors'].update(
        {'relevance_auc': 0.8, 'P@20': base + 0.2, 'F1@20': base + 0.1})
  result = {'command': 'cmd', 'variant': 'colt-pairs rule', 'seed': 0, 'row_check': 0.0,
            'row_checked': 6, 'folds': [{'fold': 0}], 'of_folds': 5, 'topics': topics}
  lines = relevance_models.summary_lines(result)
  assert lines[0].startswith('Generated by `cmd` over 1 of 5 folds (6 held-out topics)')
  assert 'largest per-topic F1@20 gap 0.0000 over 6 topics' in lines[0]
  rows = {l.split(' | ')[0][2:]: l.split(' | ') for l in lines if l.startswith('| ')}
  assert {label for label, _ in relevance_models.CONDITIONS} <= set(rows)
  assert rows['phi'][6:] == ['-', '-', '- |']
  boosted = rows['boosted + descriptors']
  assert boosted[1] == '0.8000'
  assert boosted[6].startswith('+0.1000 [+0.1000, +0.1000]')  # AUC - phi
  assert boosted[7].startswith('+0.1000 [+0.1000, +0.1000]')  # official F1@20 - phi
  assert boosted[8].startswith('+')  # paper F1@20 - phi: P rose, CR did not move


class _Learner:
  """A fitted gbt-pairs stand-in: every photo relevant at 0.6, p 1 for p0-p6, else 0."""

  def __init__(self, ids):
    self.ids = ids

  def predict(self, split, store, protocol):
    n = len(self.ids)
    p = np.eye(n, dtype=np.float32)
    p[:7, :7] = 1.0
    return [relevance_models.gbt_pairs.TopicScores(7, self.ids, np.full(n, 0.6, np.float32),
                                                     p)]


class _Relevance:
  """A relevance-model stand-in: P(relevant) is the first feature of each photo's row."""

  def predict(self, query, features):
    return np.asarray(features)[:, 0].astype(np.float32)


def test_gbt_lists_take_the_relevance_model_by_its_share():
  ids, split = IDS, toy_split()  # p0-p6 one cluster, p7 and p8 one each, p9 not
  rows = np.zeros((10, 2), np.float32)
  rows[:, 0] = [0.9] * 9 + [0.0]  # the model calls p9 irrelevant
  store = types.SimpleNamespace(photo_index=lambda: {pid: i for i, pid in enumerate(ids)},
                                rows_for=lambda pids, index: np.array([index[p] for p in pids]),
                                query_feature=lambda topic: np.zeros(2, np.float32),
                                photos=rows)
  got = relevance_models.gbt_fold_scores(_Learner(ids), 0.0, _Relevance(), (split, None),
                                         (split, store))['7']
  assert [c for c, _ in relevance_models.GBT_CONDITIONS] == list(got)
  # w = 0: coverage lists one photo per cluster first; with the model, p9 (irrelevant) drops
  # below them, so P@20 over 20 places counts the 9 relevant photos either way.
  for label in got:
    assert got[label]['CR@20'] == 1.0 and got[label]['P@20'] == 9 / 20


def test_gbt_summary_pairs_the_row_with_each_gbt_condition():
  topics = {}
  for t in range(5):
    base = 0.5 + t / 100
    topics[str(t)] = {c: {'P@20': base, 'CR@20': base, 'F1@20': base}
                      for c, _ in relevance_models.GBT_CONDITIONS}
    topics[str(t)][relevance_models.ROW] = {'P@20': base + 0.1, 'CR@20': base,
                                            'F1@20': base + 0.05}
  result = {'command': 'cmd', 'folds': [{'fold': 0}], 'of_folds': 5, 'row_check': 0.0,
            'row_checked': 5, 'topics': topics}
  lines = relevance_models.gbt_summary_lines(result)
  assert 'largest per-topic gap in P@20, CR@20 or F1@20 0.0000 over 5 topics' in lines[0]
  rows = {l.split(' | ')[0][2:]: l.split(' | ') for l in lines if l.startswith('| ')}
  assert rows['gbt-pairs'][5].startswith('+0.0500 [+0.0500, +0.0500]')
  assert rows['gbt-pairs'][6].startswith('+')  # the row's P is higher: the paper's F1 too
  assert rows[relevance_models.ROW][5:] == ['-', '- |']


def test_a_relevance_rows_verdict_carries_the_fair_check():
  topics = {str(t): {c: {'P@20': 0.5, 'CR@20': 0.5, 'F1@20': 0.5 + t / 100}
                     for c, _ in relevance_models.GBT_CONDITIONS} for t in range(4)}
  for t, s in topics.items():
    s[relevance_models.ROW] = {'P@20': 0.5, 'CR@20': 0.5, 'F1@20': s['gbt-pairs']['F1@20']}
  line = relevance_models.target_note_lines({'gbt': {'topics': topics}},
                                            relevance_models.ROW)[0]
  assert '`gbt-pairs` is as specified' in line
  assert '`gbt-pairs relevance` is gbt-pairs given the same relevance model' in line
  assert ('F1@20 (official) +0.0000 [+0.0000, +0.0000], W/T/L 0/4/0: **no difference**; '
          'F1@20 (paper) +0.0000 [+0.0000, +0.0000]: **no difference**.') in line
  # Without the diagnosis (or for another row): the first sentence alone.
  assert relevance_models.target_note_lines(None, 'x')[0].endswith('earns its place.')
