"""`gbt-pairs relevance`: gbt-pairs (`gbt_pairs`) with its P(relevant) mixed with the relevance
model of the `colt-pairs relevance` rows (not in the paper; the fair baseline of those rows).

r = (1 - a) r_gbt + a r_model, r_model the model's P(relevant) of each photo given the query
(`colt_jax.pairs.relevance_model`, fitted by the reproduction on the same training topics), then
gbt-pairs' own selection (expected coverage with weight w); w and a chosen together by the
out-of-fold F1@20 on the training topics (`best_setting`). The row that fits, chooses and scores
it is `colt_jax.reproduction.gbt_relevance`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from colt_jax.baselines import gbt_pairs

METHOD = 'gbt-pairs relevance'
# The version of the mix in the row cache's keys (`versions`): raise it with any change of what
# `mixed_scores` or `best_setting` return (its golden test, tests/baselines/test_baseline_versions.py,
# says when). Its rows also carry gbt-pairs' and expected coverage's versions.
VERSIONS = {METHOD: 1}


def mixed_scores(scores: Sequence[gbt_pairs.TopicScores], model, store, a: float) -> list:
  """gbt-pairs' `scores` with r = (1 - a) r + a r_model; `model.predict(query, photos)` gives
  r_model from the rows of the view store `store` (every photo of the scores in it). a = 0:
  the scores as they are."""
  if not a:
    return list(scores)
  index = store.photo_index()
  photos = np.asarray(store.photos)
  out = []
  for s in scores:
    r_model = model.predict(store.query_feature(s.topic),
                            photos[store.rows_for(s.photo_ids, index)])
    r = ((1.0 - a) * np.asarray(s.relevance, np.float32) + a * r_model).astype(np.float32)
    out.append(gbt_pairs.TopicScores(s.topic, s.photo_ids, r, s.pair_prob))
  return out


def best_setting(tuning: Sequence[Mapping]) -> dict:
  """The setting with the highest F1@20 of [{'setting', 'F1@20'}] (ties: the first in grid
  order)."""
  best = tuning[0]
  for t in tuning[1:]:
    if t['F1@20'] > best['F1@20'] + 1e-12:
      best = t
  return dict(best['setting'])
