"""Tests for colt_jax.postprocess (Eq. 6): hand-built cases and a plain Python reference."""
from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from colt_jax import postprocess

V = 4  # categories 0..3; 4 = irrelevant, 5 = query

#                    0     1     2     3    4     5     6    7    8     9
LABELS = np.array([2, 0, 4, 2, 1, 0, 5, 3, 0, 2], np.int32)
SCORES = np.array([.9, .85, .95, .8, .7, .75, .99, .6, .5, .65], np.float32)
# By similarity (category-labelled only): 0(c2) 1(c0) 3(c2) 5(c0) 4(c1) 9(c2) 7(c3) 8(c0).
# Category order: c2, c0, c1, c3. Tokens 2 (irrelevant) and 6 (query) are never returned.


@functools.lru_cache(maxsize=None)
def _jitted(k, per_category, num_categories):
  return jax.jit(functools.partial(postprocess.select_per_category, k=k,
                                   per_category=per_category, num_categories=num_categories))


def _select(labels, scores, valid=None, *, k, x, v=V):
  valid = np.ones(labels.shape, bool) if valid is None else valid
  return np.asarray(_jitted(k, x, v)(labels, scores, valid)).tolist()


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


def _reference(labels, scores, valid, k, x, v):
  """Plain Python: categories by best image, round-robin X per category, fill, pad -1."""
  ok = [i for i in range(len(labels)) if valid[i] and 0 <= labels[i] < v]
  ok.sort(key=lambda i: (-scores[i], i))
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
  out = (primary + fill)[:k]
  return out + [-1] * (k - len(out))


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
  kwargs = dict(k=12, per_category=2, num_categories=V, fill_excluded=fill_excluded)
  assert hasattr(postprocess.select_per_category_batch, 'lower')  # a jitted function
  got = np.asarray(postprocess.select_per_category_batch(labels, scores, valid, **kwargs))
  with jax.disable_jit():
    eager = np.asarray(postprocess.select_per_category_batch(labels, scores, valid, **kwargs))
  np.testing.assert_array_equal(got, eager)
