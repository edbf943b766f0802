"""Tests of the candidate protocols (colt_jax/inputs/candidates.py)."""
import os

import numpy as np
import pytest

from colt_jax.data import features
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.data import mediaeval


def test_pool_and_global_candidates(tiny_synthetic):
  split = mediaeval.read_split('synthetic', tiny_synthetic, 'test')
  store = features.load(os.path.join(tiny_synthetic, 'features', 'test'))
  pool = candidates_lib.build_candidates(split, store, 'pool')
  assert [c.topic for c in pool] == split.topic_numbers
  for c in pool:
    gt = split.ground_truth[c.topic]
    assert set(c.photo_ids) == set(gt.relevance)
    np.testing.assert_array_equal(c.flickr_ranks, np.sort(c.flickr_ranks))
    np.testing.assert_allclose(c.features, np.asarray(store.photos)[store.rows_for(c.photo_ids)])
  glob = candidates_lib.build_candidates(split, store, 'global', num_candidates=30)
  photos = np.asarray(store.photos)
  for c in glob:
    sims = photos @ c.query
    expected = np.argsort(-sims, kind='stable')[:30]
    assert list(c.photo_ids) == [str(store.photo_ids[i]) for i in expected]
    own = set(split.ground_truth[c.topic].relevance)
    for p, r in zip(c.photo_ids, c.flickr_ranks):
      assert np.isfinite(r) == (p in own)
  no_store = candidates_lib.build_candidates(split, None, 'pool')
  assert no_store[0].features is None and no_store[0].photo_ids == pool[0].photo_ids
  with pytest.raises(ValueError, match='needs a feature store'):
    candidates_lib.build_candidates(split, None, 'global')
  with pytest.raises(ValueError, match='unknown protocol'):
    candidates_lib.build_candidates(split, store, 'local')


def test_pool_lead_counts_the_pool_photos_that_lead_the_global_order(tiny_synthetic):
  split = mediaeval.read_split('synthetic', tiny_synthetic, 'test')
  store = features.load(os.path.join(tiny_synthetic, 'features', 'test'))
  n = len(store.photo_ids)
  glob = candidates_lib.build_candidates(split, store, 'global', num_candidates=n)
  lead = candidates_lib.pool_lead(split, store)
  assert lead.shape == (len(split.topics),)
  for c, k in zip(glob, lead):
    own = [p in split.ground_truth[c.topic].relevance for p in c.photo_ids]
    assert all(own[:k]) and (k == n or not own[k])
