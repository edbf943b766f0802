"""Tests of SCL examples and TTC token sequences (colt_jax/sequences.py)."""
import jax
import numpy as np
import pytest

from colt_jax import protocols
from colt_jax import sequences
import label_rule  # pylint: disable=g-bad-import-order


def _cands(topic, sims, ids=None):
  """Candidates whose similarity to the query e0 is `sims`."""
  sims = np.asarray(sims, np.float32)
  feats = np.stack([sims, np.sqrt(1 - sims ** 2), np.zeros_like(sims)], 1)
  ids = ids or [f'{topic}-{i}' for i in range(len(sims))]
  return protocols.TopicCandidates(topic=topic, photo_ids=tuple(ids),
                                   flickr_ranks=np.arange(len(sims), dtype=float),
                                   query=np.array([1., 0., 0.], np.float32), features=feats)


def test_label_space():
  space = sequences.LabelSpace(5)
  assert (space.irrelevant_id, space.query_id, space.num_classes) == (5, 6, 7)


def test_token_sequences_sort_truncate_pad_and_label():
  space = sequences.LabelSpace(3)
  a = _cands(1, [0.1, 0.9, 0.5, 0.7])
  b = _cands(2, [0.2, 0.8])
  labels = {1: {'1-1': 2, '1-3': 0}, 2: {'2-0': 1}}
  seqs = sequences.token_sequences([a, b], 3, space, labels)
  assert seqs.tokens.shape == (2, 4, 3)
  assert seqs.photo_ids == (('1-1', '1-3', '1-2'), ('2-1', '2-0'))
  np.testing.assert_allclose(seqs.scores[0], [0.9, 0.7, 0.5], atol=1e-6)
  assert np.isneginf(seqs.scores[1, 2])
  np.testing.assert_array_equal(seqs.mask, [[1, 1, 1, 1], [1, 1, 1, 0]])
  np.testing.assert_array_equal(seqs.labels, [[4, 2, 0, 3], [4, 3, 1, -1]])
  np.testing.assert_array_equal(seqs.tokens[:, 0], [[1, 0, 0], [1, 0, 0]])
  np.testing.assert_allclose(seqs.tokens[0, 1], a.features[1])
  np.testing.assert_array_equal(seqs.tokens[1, 3], 0)  # padding is zeros, not invented tokens
  assert sequences.token_sequences([a], 3).labels is None


def test_scl_examples_and_sampling():
  a = _cands(1, [0.1, 0.9, 0.5])
  b = _cands(2, [0.2, 0.8, 0.3, 0.4, 0.6])
  labels = {1: {'1-1': 2}, 2: {'2-0': 1, '2-4': 0}}
  relevance = {1: {'1-0': 0, '1-1': 1, '1-2': -1}, 2: {'2-0': 1, '2-4': 1}}
  ex = sequences.scl_examples([a, b], labels, relevance)
  assert ex.features.shape == (2, 5, 3)
  np.testing.assert_array_equal(ex.counts, [3, 5])
  np.testing.assert_array_equal(ex.relevant[0], [0, 1, 0, 0, 0])
  np.testing.assert_array_equal(ex.categories[1], [1, -1, -1, -1, 0])
  batch = ex.sample(np.random.default_rng(0), batch_size=6, images_per_query=4)
  assert batch['images'].shape == (6, 4, 3)
  for b in range(6):
    n_valid = batch['valid'][b].sum()
    assert n_valid in (3, 4)
    assert not batch['relevant'][b][~batch['valid'][b]].any()
  with pytest.raises(ValueError, match='relevant photo 1-2 has no category'):
    sequences.scl_examples([a], {1: {}}, {1: {'1-2': 1}})


def test_store_vocabulary_requires_sorted_normalised_names():
  vocab = sequences.store_vocabulary(['a view', 'b view'])
  assert vocab.id_of('B View ') == 1
  with pytest.raises(ValueError, match='normalised, distinct and sorted'):
    sequences.store_vocabulary(['b view', 'a view'])


def test_local_groups_number_categories_by_first_appearance():
  v = 10  # categories 0..9, 10 = irrelevant, 11 = query
  labels = np.array([[11, 7, 10, 3, 7, 9, 3, 5, -1, -1],
                     [11, 2, 2, 10, 8, 4, 6, 1, 0, 10]], np.int32)
  got = sequences.local_groups(labels, v, num_groups=4)
  np.testing.assert_array_equal(got[0], [5, 0, 4, 1, 0, 2, 1, 3, -1, -1])
  # More categories than groups: the last group collects them.
  np.testing.assert_array_equal(got[1], [5, 0, 0, 4, 1, 2, 3, 3, 3, 4])


def test_local_groups_matches_the_numpy_rule_under_jit():
  v, length = 6, 12
  tokens, labels, mask = label_rule.random_sequences(np.random.default_rng(0), 200, length, v)
  del tokens, mask
  for groups in (1, 2, 3, 8):
    fn = jax.jit(lambda l, g=groups: sequences.local_groups(l, v, g))
    got = np.asarray(fn(labels))
    np.testing.assert_array_equal(got, label_rule.local_groups(labels, v, groups))
    np.testing.assert_array_equal(got[labels == -1], -1)
    np.testing.assert_array_equal(got[:, 0], groups + 1)  # the query
    np.testing.assert_array_equal(np.asarray(fn(labels[0])), got[0])  # one sequence [T]


def test_scheme_space_and_targets():
  labels = np.array([6, 2, 0, 2, 5, -1], np.int32)  # V = 5: 5 irrelevant, 6 query
  assert sequences.scheme_space('global', 5, 3) == sequences.LabelSpace(5)
  assert sequences.scheme_space('local', 5, 3) == sequences.LabelSpace(3)
  np.testing.assert_array_equal(sequences.scheme_targets(labels, 5, 'global', 3), labels)
  np.testing.assert_array_equal(sequences.scheme_targets(labels, 5, 'local', 3),
                                [4, 0, 1, 0, 3, -1])
  for fn in (lambda: sequences.scheme_space('topic', 5, 3),
             lambda: sequences.scheme_targets(labels, 5, 'topic', 3)):
    with pytest.raises(ValueError, match="label_scheme 'topic'"):
      fn()
