"""Tests of topic subsets: merge, subset and k-fold cross-validation."""
import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.data import folds
from colt_jax.inputs import candidates as candidates_lib


@pytest.fixture(scope='module')
def both(tiny_synthetic):
  return data.load('synthetic', 'dev', tiny_synthetic), data.load('synthetic', 'test',
                                                                  tiny_synthetic)


def test_merge_holds_every_topic_photo_and_query(both):
  (dev, dev_store), (test, test_store) = both
  split, store = folds.merge([(dev, dev_store), (test, test_store)])
  assert split.topic_numbers == dev.topic_numbers + test.topic_numbers
  assert set(split.ground_truth) == set(dev.ground_truth) | set(test.ground_truth)
  index = store.photo_index()
  for part_store in (dev_store, test_store):
    for i, p in enumerate(part_store.photo_ids[:50]):
      np.testing.assert_array_equal(store.photos[index[str(p)]], part_store.photos[i])  # copied
  for t in test.topic_numbers:
    np.testing.assert_array_equal(store.query_feature(t), test_store.query_feature(t))
  data.check_store_covers(split, store)


def test_merged_and_subset_splits_know_each_topics_directory(both):
  """A fold's training split holds dev and test topics, whose files (descriptors, images)
  live in their own split directories: `root_of` gives each topic's, through subsets too."""
  (dev, dev_store), (test, test_store) = both
  assert dev.root != test.root
  split, store = folds.merge([(dev, dev_store), (test, test_store)])
  assert [split.root_of(t) for t in split.topic_numbers] == (
      [dev.root] * len(dev.topics) + [test.root] * len(test.topics))
  keep = [dev.topic_numbers[0], test.topic_numbers[-1]]
  sub, sub_store = folds.subset(split, store, keep, 'part')
  assert [sub.root_of(t) for t in keep] == [dev.root, test.root]
  again, _ = folds.merge([(sub, sub_store)], 'again')  # a merged split merged again
  assert [again.root_of(t) for t in keep] == [dev.root, test.root]


def test_merge_refuses_repeated_topics(both):
  (dev, dev_store), _ = both
  with pytest.raises(ValueError, match='more than one part'):
    folds.merge([(dev, dev_store), (dev, dev_store)])


def test_subset_keeps_only_its_topics_photos(both):
  (dev, dev_store), (test, test_store) = both
  split, store = folds.merge([(dev, dev_store), (test, test_store)])
  keep = split.topic_numbers[::3]
  sub, sub_store = folds.subset(split, store, keep, 'part')
  assert sub.topic_numbers == keep and sub.split == 'part'
  assert set(str(p) for p in sub_store.photo_ids) == set(sub.all_photo_ids())
  data.check_store_covers(sub, sub_store)
  # Global protocol inside a subset searches the subset's photos only.
  cands = candidates_lib.build_candidates(sub, sub_store, 'global', 30)
  allowed = set(sub.all_photo_ids())
  assert all(set(c.photo_ids) <= allowed for c in cands)
  with pytest.raises(ValueError, match='no topics'):
    folds.subset(split, store, [999999], 'x')


def test_kfold_partitions_topics():
  topics = list(range(100, 157))
  fs = folds.kfold(topics, 5, seed=1)
  held = [t for f in fs for t in f.test_topics]
  assert sorted(held) == topics  # every topic held out exactly once
  for f in fs:
    assert not set(f.train_topics) & set(f.test_topics)
    assert sorted(f.train_topics + f.test_topics) == topics
    assert len(f.test_topics) in (11, 12)
  assert folds.kfold(topics, 5, seed=1) == fs  # seeded
  assert folds.kfold(topics, 5, seed=2) != fs
  with pytest.raises(ValueError):
    folds.kfold(topics, 1)
