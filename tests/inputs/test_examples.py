"""Tests of SCL examples, TTC token sequences and batch samplers (colt_jax/inputs/examples.py)."""
import numpy as np
import pytest

from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inputs import examples as examples_lib
from colt_jax.inputs import labels as labels_lib


def _cands(topic, sims, ids=None):
  """Candidates whose similarity to the query e0 is `sims`."""
  sims = np.asarray(sims, np.float32)
  feats = np.stack([sims, np.sqrt(1 - sims ** 2), np.zeros_like(sims)], 1)
  ids = ids or [f'{topic}-{i}' for i in range(len(sims))]
  return candidates_lib.TopicCandidates(topic=topic, photo_ids=tuple(ids),
                                   flickr_ranks=np.arange(len(sims), dtype=float),
                                   query=np.array([1., 0., 0.], np.float32), features=feats)


def test_label_space():
  space = labels_lib.LabelSpace(5)
  assert (space.irrelevant_id, space.query_id, space.num_classes) == (5, 6, 7)


def test_token_sequences_sort_truncate_pad_and_label():
  space = labels_lib.LabelSpace(3)
  a = _cands(1, [0.1, 0.9, 0.5, 0.7])
  b = _cands(2, [0.2, 0.8])
  labels = {1: {'1-1': 2, '1-3': 0}, 2: {'2-0': 1}}
  seqs = examples_lib.token_sequences([a, b], 3, space, labels)
  assert seqs.tokens.shape == (2, 4, 3)
  assert seqs.photo_ids == (('1-1', '1-3', '1-2'), ('2-1', '2-0'))
  np.testing.assert_allclose(seqs.scores[0], [0.9, 0.7, 0.5], atol=1e-6)
  assert np.isneginf(seqs.scores[1, 2])
  np.testing.assert_array_equal(seqs.mask, [[1, 1, 1, 1], [1, 1, 1, 0]])
  np.testing.assert_array_equal(seqs.labels, [[4, 2, 0, 3], [4, 3, 1, -1]])
  np.testing.assert_array_equal(seqs.tokens[:, 0], [[1, 0, 0], [1, 0, 0]])
  np.testing.assert_allclose(seqs.tokens[0, 1], a.features[1])
  np.testing.assert_array_equal(seqs.tokens[1, 3], 0)  # padding is zeros, not invented tokens
  assert examples_lib.token_sequences([a], 3).labels is None


def test_scl_examples_and_sampling():
  a = _cands(1, [0.1, 0.9, 0.5])
  b = _cands(2, [0.2, 0.8, 0.3, 0.4, 0.6])
  labels = {1: {'1-1': 2}, 2: {'2-0': 1, '2-4': 0}}
  relevance = {1: {'1-0': 0, '1-1': 1, '1-2': -1}, 2: {'2-0': 1, '2-4': 1}}
  ex = examples_lib.scl_examples([a, b], labels, relevance)
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
    examples_lib.scl_examples([a], {1: {}}, {1: {'1-2': 1}})


def test_batches_are_a_function_of_seed_and_step():
  a = _cands(1, [0.9, 0.5, 0.1, 0.7])
  space = labels_lib.LabelSpace(2)
  seqs = examples_lib.token_sequences([a], 3, space, {1: {'1-0': 0, '1-3': 1}})
  make = examples_lib.ttc_batches(seqs, seed=3, batch_size=4)
  again = examples_lib.ttc_batches(seqs, seed=3, batch_size=4)
  for step in (0, 5):  # the same NumPy code on the same seed: exact on every machine
    first, second = make(step), again(step)
    assert all(np.array_equal(first[k], second[k]) for k in first)
  assert make(0)['tokens'].shape == (4, 4, 3)
  examples = examples_lib.scl_examples([a], {1: {'1-0': 0}}, {1: {'1-0': 1}})
  batch = examples_lib.scl_batches(examples, seed=1, batch_size=2, images_per_query=3)(7)
  again = examples_lib.scl_batches(examples, seed=1, batch_size=2, images_per_query=3)(7)
  assert all(np.array_equal(batch[k], again[k]) for k in batch)
  assert batch['images'].shape == (2, 3, 3)
