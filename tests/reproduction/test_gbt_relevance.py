"""Tests of colt_jax/baselines/gbt_pairs_relevance.py: gbt-pairs' r mixed with a relevance model,
the grid and its ties (the row, colt_jax/reproduction/gbt_pairs_relevance.py, on the synthetic
reproduction: tests/reproduction/test_reproduction.py)."""
import numpy as np

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import gbt_pairs_relevance
from colt_jax.data import features as features_lib


def _store():
  photos = np.array([[1.0, 0.0], [0.2, 0.9], [0.5, 0.5]], np.float32)
  return features_lib.make_store(
      photos=photos, photo_ids=['a', 'b', 'c'], queries=np.array([[1.0, 0.0]], np.float32),
      query_ids=[7], categories=np.zeros((0, 2), np.float32), category_names=[],
      encoder='test', dataset='synthetic', split='test', source='', normalised=False)


class _Model:
  """A relevance-model stand-in: P(relevant) is the photo's first feature."""

  def __init__(self):
    self.calls = []

  def predict(self, query, features):
    self.calls.append((np.asarray(query).tolist(), np.asarray(features).tolist()))
    return np.asarray(features)[:, 0].astype(np.float32)


def test_mixed_scores_mix_r_with_the_model_over_each_topics_own_rows():
  prob = np.eye(2, dtype=np.float32)
  scores = [gbt_pairs.TopicScores(7, ('c', 'b'), np.array([0.0, 1.0], np.float32), prob)]
  model = _Model()
  assert gbt_pairs_relevance.mixed_scores(scores, model, _store(), 0.0) == scores  # r as it was
  assert not model.calls  # a = 0: the model is not read
  (half,) = gbt_pairs_relevance.mixed_scores(scores, model, _store(), 0.5)
  np.testing.assert_allclose(half.relevance, [0.25, 0.6])  # (0 + .5) / 2, (1 + .2) / 2
  assert half.relevance.dtype == np.float32 and half.pair_prob is prob
  assert (half.topic, half.photo_ids) == (7, ('c', 'b'))
  query, rows = model.calls[0]  # its query, its photos' rows
  assert query == [1.0, 0.0]
  np.testing.assert_allclose(rows, [[0.5, 0.5], [0.2, 0.9]])
  (alone,) = gbt_pairs_relevance.mixed_scores(scores, _Model(), _store(), 1.0)
  np.testing.assert_allclose(alone.relevance, [0.5, 0.2])


def test_best_setting_keeps_the_first_of_equal_scores():
  tuning = [{'setting': {'gbt_weight': w, 'relevance_mix': a}, 'F1@20': f}
            for (a, w), f in zip([(0.0, 0.0), (0.0, 0.5), (0.5, 0.0), (1.0, 0.0)],
                                 [0.5, 0.6, 0.6, 0.59])]
  assert gbt_pairs_relevance.best_setting(tuning) == {'gbt_weight': 0.5, 'relevance_mix': 0.0}
  tuning[2]['F1@20'] = 0.61
  assert gbt_pairs_relevance.best_setting(tuning) == {'gbt_weight': 0.0, 'relevance_mix': 0.5}
