"""Tests for colt_jax.model.postprocess (Eq. 6): hand-built cases and a plain Python reference."""
from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from colt_jax.model import postprocess

V = 4  # categories 0..3; 4 = irrelevant, 5 = query

#                    0     1     2     3    4     5     6    7    8     9
LABELS = np.array([2, 0, 4, 2, 1, 0, 5, 3, 0, 2], np.int32)
SCORES = np.array([.9, .85, .95, .8, .7, .75, .99, .6, .5, .65], np.float32)
# By similarity (category-labelled only): 0(c2) 1(c0) 3(c2) 5(c0) 4(c1) 9(c2) 7(c3) 8(c0).
# Category order: c2, c0, c1, c3. Tokens 2 (irrelevant) and 6 (query) are never returned.


@functools.lru_cache(maxsize=None)
def _jitted(k, per_category, num_categories, length=None, fill_excluded=False):
  return jax.jit(functools.partial(postprocess.select_per_category, k=k,
                                   per_category=per_category, num_categories=num_categories,
                                   length=length, fill_excluded=fill_excluded))


def _select(labels, scores, valid=None, *, k, x, v=V, length=None, fill_excluded=False):
  valid = np.ones(labels.shape, bool) if valid is None else valid
  return np.asarray(_jitted(k, x, v, length, fill_excluded)(labels, scores, valid)).tolist()


@pytest.mark.parametrize('x,k,expected', [
    (1, 1, [0]),
    (1, 3, [0, 1, 4]),
    (1, 4, [0, 1, 4, 7]),
    (1, 6, [0, 1, 4, 7, 3, 5]),  # 4 categories only: fill by similarity
    (1, 10, [0, 1, 4, 7, 3, 5, 9, 8, -1, -1]),  # only 8 selectable images
    (2, 4, [0, 1, 3, 5]),  # round-robin: best of c2, c0, then second best of c2, c0
    (2, 5, [0, 1, 3, 5, 4]),  # floor(5/2) = 2 categories, one fill slot
    (2, 6, [0, 1, 4, 3, 5, 9]),  # c1 has one image: its second slot is filled
    (2, 3, [0, 3, 1]),
    (3, 9, [0, 1, 4, 3, 5, 9, 8, 7, -1]),
    (3, 2, [0, 1]),  # floor(2/3) = 0 categories: everything is fill
])
def test_hand_built(x, k, expected):
  assert _select(LABELS, SCORES, k=k, x=x) == expected


def test_padding_is_never_returned():
  valid = np.ones(10, bool)
  valid[[0, 7]] = False  # c2's best and c3's only image become padding
  # Now: 1(c0) 3(c2) 5(c0) 4(c1) 9(c2) 8(c0); category order c0, c2, c1.
  assert _select(LABELS, SCORES, valid, k=4, x=1) == [1, 3, 4, 5]
  assert _select(LABELS, SCORES, valid, k=8, x=1) == [1, 3, 4, 5, 9, 8, -1, -1]


def test_nothing_selectable():
  labels = np.array([4, 5, 4], np.int32)
  assert _select(labels, np.array([.3, .2, .1], np.float32), k=2, x=1) == [-1, -1]


def test_ties_broken_by_position():
  labels = np.array([1, 0, 1, 0], np.int32)
  scores = np.full(4, 0.5, np.float32)
  assert _select(labels, scores, k=2, x=1) == [0, 1]
  assert _select(labels, scores, k=4, x=2) == [0, 1, 2, 3]
  labels = np.array([0, 1, 0], np.int32)
  scores = np.array([.5, .9, .9], np.float32)
  assert _select(labels, scores, k=2, x=1) == [1, 2]
  assert _select(labels, scores, k=3, x=1) == [1, 2, 0]


def test_k_larger_than_n():
  labels = np.array([0, 1], np.int32)
  assert _select(labels, np.array([.1, .2], np.float32), k=4, x=1) == [1, 0, -1, -1]


def _by_similarity(images, scores):
  return sorted(images, key=lambda i: (-scores[i], i))


def _reference(labels, scores, valid, k, x, v, fill_excluded=False):
  """Plain Python, the old rule (Eq. 6 alone): categories by best image, round-robin X per
  category, fill by similarity (then excluded images with `fill_excluded`), pad -1."""
  ok = _by_similarity([i for i in range(len(labels)) if valid[i] and 0 <= labels[i] < v],
                      scores)
  per_cat = {}
  for i in ok:  # insertion order of the dict = category order by best image
    per_cat.setdefault(int(labels[i]), []).append(i)
  chosen = list(per_cat.values())[:k // x]
  primary = []
  for r in range(x):
    for images in chosen:
      if r < len(images):
        primary.append(images[r])
  fill = [i for i in ok if i not in set(primary)]
  if fill_excluded:
    fill += _by_similarity([i for i in range(len(labels)) if valid[i] and i not in set(ok)],
                           scores)
  out = (primary + fill)[:k]
  return out + [-1] * (k - len(out))


def _reference_full(labels, scores, valid, k, x, v, length, fill_excluded=False):
  """Plain Python, the new rule: Eq. 6's k picks, then (past k) the remaining
  category-labelled images round by round (rank r within the category, then category order),
  then every other valid image by similarity; no empty slot before the end."""
  head = _reference(labels, scores, valid, k, x, v, fill_excluded)
  if length <= k:
    return head[:length]
  head = [i for i in head if i >= 0]
  ok = _by_similarity([i for i in range(len(labels)) if valid[i] and 0 <= labels[i] < v],
                      scores)
  per_cat = {}
  for i in ok:
    per_cat.setdefault(int(labels[i]), []).append(i)
  rounds = [images[r] for r in range(len(labels)) for images in per_cat.values()
            if r < len(images)]
  rest = _by_similarity([i for i in range(len(labels)) if valid[i] and i not in set(ok)],
                        scores)
  out = head + [i for i in rounds + rest if i not in set(head)]
  out = out[:length]
  return out + [-1] * (length - len(out))


@pytest.mark.parametrize('k,x', [(10, 1), (20, 1), (10, 2), (20, 3), (7, 2)])
def test_against_reference_random(k, x):
  rng = np.random.default_rng(k * 10 + x)
  n, v, batch = 30, 6, 40
  labels = rng.integers(-1, v + 2, size=(batch, n)).astype(np.int32)
  # Coarse scores to create ties.
  scores = (rng.integers(0, 12, size=(batch, n)) / 12).astype(np.float32)
  valid = rng.random((batch, n)) < 0.85
  got = np.asarray(jax.jit(functools.partial(
      postprocess.select_per_category_batch, k=k, per_category=x, num_categories=v))(
          labels, scores, valid))
  assert got.shape == (batch, k) and got.dtype == np.int32
  for b in range(batch):
    expected = _reference(labels[b], scores[b], valid[b], k, x, v)
    assert got[b].tolist() == expected, b


def test_fill_excluded_completes_the_list_with_irrelevant_images_by_similarity():
  fill = jax.jit(functools.partial(postprocess.select_per_category, k=10, per_category=1,
                                   num_categories=V, fill_excluded=True))
  valid = np.ones(LABELS.shape, bool)
  got = np.asarray(fill(LABELS, SCORES, valid)).tolist()
  # The 8 category-labelled picks as without filling, then query (6, .99) and irrelevant
  # (2, .95) tokens by similarity.
  assert got == [0, 1, 4, 7, 3, 5, 9, 8, 6, 2]
  # Filling never changes the first picks, and padding is still never returned.
  valid[6] = False
  got = np.asarray(fill(LABELS, SCORES, valid)).tolist()
  assert got == [0, 1, 4, 7, 3, 5, 9, 8, 2, -1]
  everything_irrelevant = np.full(LABELS.shape, V, np.int32)
  got = np.asarray(fill(everything_irrelevant, SCORES, np.ones(LABELS.shape, bool))).tolist()
  assert got == list(np.argsort(-SCORES, kind='stable'))


@pytest.mark.parametrize('fill_excluded', [False, True])
def test_batch_is_jitted_and_equals_op_by_op(fill_excluded):
  rng = np.random.default_rng(7)
  labels = rng.integers(-1, V + 2, size=(16, 25)).astype(np.int32)
  scores = (rng.integers(0, 8, size=(16, 25)) / 8).astype(np.float32)
  valid = rng.random((16, 25)) < 0.9
  kwargs = dict(k=12, per_category=2, num_categories=V, fill_excluded=fill_excluded,
                length=20)
  assert hasattr(postprocess.select_per_category_batch, 'lower')  # a jitted function
  got = np.asarray(postprocess.select_per_category_batch(labels, scores, valid, **kwargs))
  with jax.disable_jit():
    eager = np.asarray(postprocess.select_per_category_batch(labels, scores, valid, **kwargs))
  # Exact: the selection only compares and sorts the scores given (no arithmetic on them).
  np.testing.assert_array_equal(got, eager)


@pytest.mark.parametrize('fill_excluded', [False, True])
@pytest.mark.parametrize('k,x,length', [(10, 1, 10), (10, 1, 50), (20, 1, 50), (7, 2, 25),
                                        (20, 3, 30), (10, 2, 4), (2, 3, 12)])
def test_full_lists_against_reference_random(k, x, length, fill_excluded):
  rng = np.random.default_rng(k * 100 + x * 10 + length)
  n, v, batch = 30, 6, 40
  labels = rng.integers(-1, v + 2, size=(batch, n)).astype(np.int32)
  scores = (rng.integers(0, 12, size=(batch, n)) / 12).astype(np.float32)  # ties
  valid = rng.random((batch, n)) < 0.85
  labels[0] = v  # a topic where phi labels everything irrelevant
  got = np.asarray(postprocess.select_per_category_batch(
      labels, scores, valid, k=k, per_category=x, num_categories=v,
      fill_excluded=fill_excluded, length=length))
  assert got.shape == (batch, length) and got.dtype == np.int32
  for b in range(batch):
    row = got[b].tolist()
    assert row == _reference_full(labels[b], scores[b], valid[b], k, x, v, length,
                                  fill_excluded), b
    # The first k picks are the old rule's (Eq. 6), whatever the list length.
    old = _reference(labels[b], scores[b], valid[b], k, x, v, fill_excluded)
    if length > k:
      picks = [i for i in old if i >= 0]
      assert row[:len(picks)] == picks
      # Full: min(length, valid candidates) entries, distinct, -1 only at the end.
      m = min(length, int(valid[b].sum()))
      assert all(i >= 0 for i in row[:m]) and all(i == -1 for i in row[m:])
      assert len(set(row[:m])) == m and all(valid[b][i] for i in row[:m])
    else:
      assert row == old[:length]


def test_continuation_hand_example():
  # Categories A=0, B=1, C=2 (V=3) with 3 images each; 3 = irrelevant.
  #                  0    1    2    3   4    5    6   7    8   9   10
  labels = np.array([0, 1, 3, 2, 0, 1, 2, 3, 0, 1, 2], np.int32)
  scores = np.array([.95, .9, .99, .7, .5, .45, .68, .1, .4, .3, .65], np.float32)
  # By similarity: 0(A) 1(B) 3(C) 6(C) 10(C) 4(A) 5(B) 8(A) 9(B); categories A, B, C.
  # k=2, X=1: Eq. 6 takes A's and B's best (0, 1); then round 0 goes on with C (3), round 1
  # takes A's, B's and C's second best (4, 5, 6), round 2 their third (8, 9, 10); then the
  # irrelevant images by similarity (2, 7). A fill by similarity would give 3, 6, 10, 4, ...
  assert _select(labels, scores, k=2, x=1, v=3, length=11) == [0, 1, 3, 4, 5, 6, 8, 9, 10,
                                                               2, 7]
  assert _select(labels, scores, k=2, x=1, v=3, length=13)[11:] == [-1, -1]
  assert _select(labels, scores, k=2, x=1, v=3, length=2) == [0, 1]
  assert _select(labels, scores, k=2, x=1, v=3) == [0, 1]  # length defaults to k
  # k=4, X=2: Eq. 6 gives 0, 1, 4, 5 (two rounds of A and B); then C's best (round 0), C's
  # second (round 1), the third round, then the irrelevant images.
  assert _select(labels, scores, k=4, x=2, v=3, length=11) == [0, 1, 4, 5, 3, 6, 8, 9, 10,
                                                               2, 7]
  # Fewer category-labelled images than k: Eq. 6 without filling leaves empty slots, a
  # longer list closes them up with the irrelevant images, as fill_excluded does.
  assert _select(labels, scores, k=12, x=1, v=3) == [0, 1, 3, 6, 10, 4, 5, 8, 9, -1, -1, -1]
  full = [0, 1, 3, 6, 10, 4, 5, 8, 9, 2, 7, -1, -1]
  assert _select(labels, scores, k=12, x=1, v=3, length=13) == full
  assert _select(labels, scores, k=12, x=1, v=3, length=13, fill_excluded=True) == full
  assert _select(labels, scores, k=12, x=1, v=3, fill_excluded=True) == full[:12]


def test_length_below_k_is_a_prefix_and_lengths_must_be_positive():
  full = _select(LABELS, SCORES, k=6, x=2)
  assert _select(LABELS, SCORES, k=6, x=2, length=3) == full[:3]
  with pytest.raises(ValueError, match='positive'):
    _select(LABELS, SCORES, k=6, x=2, length=0)
