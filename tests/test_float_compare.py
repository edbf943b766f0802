"""The suite's comparison of float outputs (float_compare) passes rounding differences and
fails real ones: a value off by more than the tolerance, another dtype or shape, a reordering
of items whose scores are separated, a change of membership that is not a tie."""
import numpy as np
import pytest

from float_compare import (assert_close, assert_same_ranking, assert_same_result, assert_top_k,
                           tolerance)


def _ulps(x, n):
  x = np.asarray(x, np.float32)
  for _ in range(n):
    x = np.nextafter(x, np.float32(np.inf))
  return x


def test_tolerance_follows_the_dtype_and_scale():
  r32, a32 = tolerance(np.float32)
  r64, a64 = tolerance(np.float64)
  assert r32 == pytest.approx(256 * 2.0 ** -23) and a32 == r32
  assert r64 < r32 * 1e-8
  assert tolerance(np.float32, scale=100.0)[1] == pytest.approx(100 * a32)
  assert tolerance(np.float32, scale=0.01)[1] == a32  # atol never below the unit scale's


def test_close_passes_rounding_and_fails_more():
  x = np.linspace(-3, 3, 50, dtype=np.float32)
  assert_close(_ulps(x, 8), x)
  assert_close(x + np.float32(1e-6), x)  # about ten ulps of the array's scale (3)
  with pytest.raises(AssertionError):
    assert_close(x + np.float32(1e-3), x)
  y = x.copy()
  y[7] += 1e-2  # one element off
  with pytest.raises(AssertionError):
    assert_close(y, x)


def test_close_is_exact_on_dtype_shape_and_integers():
  x = np.arange(6, dtype=np.float32)
  with pytest.raises(AssertionError, match='dtype'):
    assert_close(x.astype(np.float64), x)
  with pytest.raises(AssertionError, match='shape'):
    assert_close(x.reshape(2, 3), x)
  labels = np.array([0, 1, 2, 3])
  assert_close(labels.copy(), labels)
  with pytest.raises(AssertionError):
    assert_close(labels + np.array([0, 0, 1, 0]), labels)
  with pytest.raises(AssertionError):  # NaN where a number was
    assert_close(np.where(x > 2, np.nan, x).astype(np.float32), x)
  nan = np.array([np.nan, 1.0], np.float32)
  assert_close(nan.copy(), nan)


SCORES = [0.9, 0.8, 0.7, 0.7, 0.5, 0.4]
IDS = ['a', 'b', 'c', 'd', 'e', 'f']


def test_ranking_allows_swaps_within_a_tie():
  assert_same_ranking(IDS, _ulps(SCORES, 3), IDS, SCORES)
  swapped = ['a', 'b', 'd', 'c', 'e', 'f']  # c and d tie at 0.7
  assert_same_ranking(swapped, SCORES, IDS, SCORES)
  nearly = np.float32(SCORES)
  nearly[3] = _ulps(nearly[2], 2)  # d two ulps above c: still a tie
  assert_same_ranking(['a', 'b', 'd', 'c', 'e', 'f'], nearly[[0, 1, 3, 2, 4, 5]], IDS, nearly)


def test_ranking_fails_on_a_real_reordering():
  with pytest.raises(AssertionError, match='position 1'):
    assert_same_ranking(['a', 'c', 'b', 'd', 'e', 'f'], SCORES, IDS, SCORES)
  with pytest.raises(AssertionError, match='position 0'):  # scores listed as expected, ids not
    assert_same_ranking(list(reversed(IDS)), SCORES, IDS, SCORES)
  with pytest.raises(AssertionError, match='scores'):
    assert_same_ranking(IDS, np.float32(SCORES) + np.float32(1e-3), IDS, SCORES)
  with pytest.raises(AssertionError, match='repeats'):
    assert_same_ranking(['a', 'a', 'c', 'd', 'e', 'f'], SCORES, IDS, SCORES)
  with pytest.raises(AssertionError, match='items'):
    assert_same_ranking(IDS[:5], SCORES[:5], IDS, SCORES)


def test_ranking_membership_changes_only_at_a_tie_with_the_end():
  tied_end = [0.9, 0.8, 0.5, 0.5]
  assert_same_ranking(['a', 'b', 'c', 'x'], tied_end, ['a', 'b', 'c', 'd'], tied_end)
  with pytest.raises(AssertionError, match='scores'):  # the stranger's score is not the end's
    assert_same_ranking(['a', 'b', 'c', 'x'], [0.9, 0.8, 0.5, 0.3], ['a', 'b', 'c', 'd'],
                        tied_end)
  with pytest.raises(AssertionError, match='position 1'):  # a stranger in the middle
    assert_same_ranking(['a', 'x', 'c', 'd'], tied_end, ['a', 'b', 'c', 'd'], tied_end)


def test_result_items_are_all_their_fields():
  want = {'photo_ids': ['p', 'q', 'r'], 'categories': [1, 2, 1], 'scores': [0.9, 0.9, 0.1]}
  swapped = {'photo_ids': ['q', 'p', 'r'], 'categories': [2, 1, 1], 'scores': [0.9, 0.9, 0.1]}
  assert_same_result(swapped, want)
  relabelled = dict(want, categories=[1, 3, 1])
  with pytest.raises(AssertionError, match='position 1'):
    assert_same_result(relabelled, want)
  with pytest.raises(AssertionError, match='fields'):
    assert_same_result({k: v for k, v in want.items() if k != 'categories'}, want)


def test_top_k_allows_a_tie_at_the_kth_only():
  scores = np.array([[0.9, 0.1, 0.5, 0.5, 0.3]], np.float32)
  assert_top_k(np.array([[0, 2]]), scores)
  assert_top_k(np.array([[3, 0]]), scores)  # 2 and 3 tie at the k-th: either
  with pytest.raises(AssertionError, match='query 0'):
    assert_top_k(np.array([[0, 4]]), scores)  # 4 is below the k-th
  with pytest.raises(AssertionError, match='query 0'):
    assert_top_k(np.array([[2, 3]]), scores)  # 0, above the k-th, is missing
  with pytest.raises(AssertionError, match='repeats'):
    assert_top_k(np.array([[0, 0]]), scores)
