"""Tests of the input pipeline's labels (colt_jax/inputs/labels.py).

Labels and targets are integers computed by integer operations: compared exactly, jitted or
not, on every machine."""
import jax
import numpy as np
import pytest

from colt_jax.inputs import labels as labels_lib
from colt_jax.pairs import pair_labels
import label_rule  # pylint: disable=g-bad-import-order


def test_store_vocabulary_requires_sorted_normalised_names():
  vocab = labels_lib.store_vocabulary(['a view', 'b view'])
  assert vocab.id_of('B View ') == 1
  with pytest.raises(ValueError, match='normalised, distinct and sorted'):
    labels_lib.store_vocabulary(['b view', 'a view'])


def test_local_groups_number_categories_by_first_appearance():
  v = 10  # categories 0..9, 10 = irrelevant, 11 = query
  labels = np.array([[11, 7, 10, 3, 7, 9, 3, 5, -1, -1],
                     [11, 2, 2, 10, 8, 4, 6, 1, 0, 10]], np.int32)
  got = labels_lib.local_groups(labels, v, num_groups=4)
  np.testing.assert_array_equal(got[0], [5, 0, 4, 1, 0, 2, 1, 3, -1, -1])
  # More categories than groups: the last group collects them.
  np.testing.assert_array_equal(got[1], [5, 0, 0, 4, 1, 2, 3, 3, 3, 4])


def test_local_groups_matches_the_numpy_rule_under_jit():
  v, length = 6, 12
  tokens, labels, mask = label_rule.random_sequences(np.random.default_rng(0), 200, length, v)
  del tokens, mask
  for groups in (1, 2, 3, 8):
    fn = jax.jit(lambda l, g=groups: labels_lib.local_groups(l, v, g))
    got = np.asarray(fn(labels))
    np.testing.assert_array_equal(got, label_rule.local_groups(labels, v, groups))
    np.testing.assert_array_equal(got[labels == -1], -1)
    np.testing.assert_array_equal(got[:, 0], groups + 1)  # the query
    np.testing.assert_array_equal(np.asarray(fn(labels[0])), got[0])  # one sequence [T]


def test_scheme_space_and_targets():
  labels = np.array([6, 2, 0, 2, 5, -1], np.int32)  # V = 5: 5 irrelevant, 6 query
  assert labels_lib.scheme_space('global', 5, 3) == labels_lib.LabelSpace(5)
  assert labels_lib.scheme_space('local', 5, 3) == labels_lib.LabelSpace(3)
  np.testing.assert_array_equal(labels_lib.scheme_targets(labels, 5, 'global', 3), labels)
  np.testing.assert_array_equal(labels_lib.scheme_targets(labels, 5, 'local', 3),
                                [4, 0, 1, 0, 3, -1])
  for fn in (lambda: labels_lib.scheme_space('topic', 5, 3),
             lambda: labels_lib.scheme_targets(labels, 5, 'topic', 3)):
    with pytest.raises(ValueError, match="label_scheme 'topic'"):
      fn()


def test_relevance_and_pair_targets_match_numpy():
  """colt-pairs' targets: relevant = a category id at a valid image position; pairs of two
  relevant images (i != j), positive when their category ids (clusters) agree."""
  v, length = 4, 9
  _, labels, mask = label_rule.random_sequences(np.random.default_rng(1), 64, length, v)
  rel = jax.jit(lambda l, m: pair_labels.relevance_targets(l, m, v))
  pair = jax.jit(lambda l, m: pair_labels.pair_targets(l, m, v))
  for got, want in zip(rel(labels, mask) + pair(labels, mask),
                       label_rule.relevance_targets(labels, mask, v) +
                       label_rule.pair_targets(labels, mask, v)):
    np.testing.assert_array_equal(np.asarray(got), want)
  # One sequence by hand: [query, c0, irrelevant, c1, c0, padding].
  one = np.array([v + 1, 0, v, 1, 0, -1], np.int32)
  m = one >= 0
  relevant, weights = pair_labels.relevance_targets(one, m, v)
  np.testing.assert_array_equal(relevant, [0, 1, 0, 1, 1, 0])
  np.testing.assert_array_equal(weights, [0, 1, 1, 1, 1, 0])
  same, pairs = pair_labels.pair_targets(one, m, v)
  assert np.asarray(pairs).sum() == 6 and np.asarray(same).sum() == 2  # (1, 4) and (4, 1)
  assert same[1, 4] and same[4, 1] and not same[1, 1] and not pairs[1, 2]
