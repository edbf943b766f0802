"""Tests of CoLT inference: restoring g and phi, Retriever.search, evaluation of colt."""
import dataclasses

import numpy as np
import pytest

from colt_jax import data
from colt_jax import evaluation
from colt_jax import protocols
from colt_jax import retriever
from colt_jax import runfile
from colt_jax import sequences


def test_search_returns_categories_never_irrelevant(tiny_synthetic, tiny_colt):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir, store)
  space = colt.classifier.space
  for q in np.asarray(store.queries)[:3]:
    hit = colt.search(q, k=10, per_category=1)
    assert len(hit.photo_ids) <= 10 and len(set(hit.photo_ids)) == len(hit.photo_ids)
    assert all(0 <= c < space.num_categories for c in hit.categories)
    assert list(hit.category_names) == [str(store.category_names[c]) for c in hit.categories]
    # Manual Alg. 2 over the same collection gives the same list.
    seqs = colt.sequences(q[None])
    pred = colt.classifier.predict(seqs.tokens, seqs.mask)
    manual = retriever.select(pred, seqs, space, 10, 1)[0]
    assert [p for p, _, _ in manual] == list(hit.photo_ids)
    # A longer list starts with Eq. 6's picks and is full (N = 64 candidates >= 50).
    full = colt.search(q, k=10, per_category=1, length=50)
    assert len(full.photo_ids) == 50 == len(set(full.photo_ids))
    assert full.photo_ids[:len(hit.photo_ids)] == hit.photo_ids
    assert set(full.category_names) <= set(map(str, store.category_names)) | {'irrelevant',
                                                                             'query'}
    manual = retriever.select(pred, seqs, space, 10, 1, length=50)[0]
    assert [p for p, _, _ in manual] == list(full.photo_ids)
    # Sequences are sorted by h^ similarity and hold the N best photos of the collection.
    sims = np.asarray(colt.store.photos) @ q
    np.testing.assert_allclose(seqs.scores[0], np.sort(sims)[::-1][:ttc.num_images], rtol=1e-5)


def test_colt_and_its_ablations_evaluate_to_valid_runs(tiny_synthetic, tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  base = evaluation.MethodParams(scl_checkpoint=scl.workdir, ttc_checkpoint=ttc.workdir, k=20)
  for post in evaluation.POSTS:
    for protocol in protocols.PROTOCOLS:
      run = evaluation.rank('colt', split, store, protocol, dataclasses.replace(base, post=post))
      assert set(run) == set(split.topic_numbers)
      if post == 'ttc':  # full lists: 50 photos, or all of a smaller topic's
        assert {t: len(r) for t, r in run.items()} == {
            t: min(evaluation.RUN_LENGTH, len(split.photos[t]) if protocol == 'pool'
                   else ttc.num_images) for t in run}
      path = tmp_path / f'{post}-{protocol}.txt'
      runfile.write_run(path, run, 'x', allowed_ids=evaluation.allowed_ids(split, protocol),
                        topics=split.topic_numbers)
      assert runfile.validate_run(path, split.topic_numbers,
                                  evaluation.allowed_ids(split, protocol)).keys() == run.keys()
  no_scl = evaluation.rank('colt', split, store, 'pool',
                           dataclasses.replace(base, scl_checkpoint='', post='topk'))
  plain = evaluation.rank('topk', split, store, 'pool', base)
  assert no_scl == plain


def test_classifier_space_must_match_the_store(tiny_synthetic, tiny_colt):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  smaller = dataclasses.replace(store, category_names=store.category_names[:-1],
                                categories=store.categories[:-1])
  with pytest.raises(ValueError, match='categories'):
    retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir, smaller)
  c = retriever.load_classifier(ttc.workdir)
  assert c.space == sequences.LabelSpace(len(store.category_names))
  assert c.config.num_images == ttc.num_images


def test_labels_from_logits_drops_only_confidently_irrelevant_tokens():
  space = sequences.LabelSpace(3)  # categories 0..2, 3 = irrelevant, 4 = query
  probs = np.array([[[.05, .05, .05, .05, .80],    # query token
                     [.10, .30, .00, .60, .00],    # irrelevant at .6
                     [.05, .05, .05, .85, .00],    # irrelevant at .85
                     [.50, .20, .10, .20, .00]]])  # category 0
  logits = np.log(probs + 1e-12)
  argmax = np.argmax(logits, -1)
  np.testing.assert_array_equal(retriever.labels_from_logits(logits, space, 0.5), argmax)
  np.testing.assert_array_equal(retriever.labels_from_logits(logits, space, 0.7), [[4, 1, 3, 0]])
  np.testing.assert_array_equal(retriever.labels_from_logits(logits, space, 1.0), [[4, 1, 0, 0]])
