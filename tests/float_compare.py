"""Comparisons of floating-point outputs that hold on every machine (x86-64, ARM, GPU).

XLA's code differs between processors (vector widths, fused multiply-adds, the order of a
sum's terms, its own exp/tanh/erf), so the same parameters and inputs give float outputs that
agree to rounding, not bit for bit. Tests that compare outputs with fixtures saved on another
machine, or two differently compiled programs, use these helpers:

- `assert_close`: float arrays within a tolerance set from their dtype (`tolerance`); dtype and
  shape exactly. Integers, booleans and strings are compared exactly.
- `assert_same_ranking`: a ranked list is the same where its scores are separated by more than
  the tolerance; only items whose scores tie within it may trade places (or, at the list's
  end, trade membership).
- `assert_top_k`: rows found by a search are the k best of reference scores, up to a tie at
  the k-th.

What the tolerance protects: a restored parameter in the wrong place, a layer skipped or
reordered, another activation or normalisation change a network's outputs by far more than
`ULPS` units in the last place of their scale; a few layers of float32 arithmetic computed in
another order differ by a few tens.
"""
from typing import Optional, Sequence

import numpy as np

# Units in the last place (of the outputs' scale) that a computation may drift between
# machines: tiny networks of 1-3 layers differ by up to ~10 between two x86-64 CPUs.
ULPS = 256


def tolerance(dtype, scale: float = 1.0, ulps: int = ULPS) -> tuple:
  """(rtol, atol) for values of a float `dtype` whose magnitude is about `scale` (atol covers
  values near zero in an array of that scale)."""
  eps = float(np.finfo(np.dtype(dtype)).eps)
  return ulps * eps, ulps * eps * max(1.0, float(scale))


def _is_float(x: np.ndarray) -> bool:
  return np.issubdtype(x.dtype, np.floating)


def assert_close(actual, desired, err_msg: str = '', ulps: int = ULPS) -> None:
  """`actual` equals `desired` up to rounding: same dtype and shape, floats within
  `tolerance(dtype, max |desired|)`, everything else exactly (NaNs where NaNs were)."""
  actual, desired = np.asarray(actual), np.asarray(desired)
  assert actual.dtype == desired.dtype, f'{err_msg}: dtype {actual.dtype} != {desired.dtype}'
  assert actual.shape == desired.shape, f'{err_msg}: shape {actual.shape} != {desired.shape}'
  if not _is_float(desired):
    np.testing.assert_array_equal(actual, desired, err_msg=err_msg)
    return
  finite = desired[np.isfinite(desired)]
  scale = float(np.max(np.abs(finite))) if finite.size else 1.0
  rtol, atol = tolerance(desired.dtype, scale, ulps)
  np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, err_msg=err_msg)


def _tied(a: float, b: float, rtol: float, atol: float) -> bool:
  return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def assert_same_ranking(actual_items: Sequence, actual_scores: Sequence[float],
                        desired_items: Sequence, desired_scores: Sequence[float],
                        err_msg: str = '', dtype=np.float32, ulps: int = ULPS) -> None:
  """Two ranked lists (items: hashable, e.g. photo ids or (id, category) pairs) are the same
  up to ties: position by position the scores agree within the tolerance, and where the
  items differ, the item shown has (in the desired list) a score tied with the desired item's;
  an item absent from the desired list may take the place of one absent from the actual list
  only at a score tied with the desired list's last. Any other difference in order or
  membership fails."""
  actual_items, desired_items = list(actual_items), list(desired_items)
  actual_scores = np.asarray(actual_scores, np.float64)
  desired_scores = np.asarray(desired_scores, np.float64)
  where = f'{err_msg}: ' if err_msg else ''
  assert len(actual_items) == len(desired_items), (
      f'{where}{len(actual_items)} items, expected {len(desired_items)}')
  assert len(actual_scores) == len(actual_items) and len(desired_scores) == len(desired_items), (
      f'{where}one score an item')
  assert len(set(actual_items)) == len(actual_items), f'{where}an item repeats'
  finite = desired_scores[np.isfinite(desired_scores)]
  scale = float(np.max(np.abs(finite))) if finite.size else 1.0
  rtol, atol = tolerance(dtype, scale, ulps)
  np.testing.assert_allclose(actual_scores, desired_scores, rtol=rtol, atol=atol,
                             err_msg=f'{where}scores')
  desired_score_of = dict(zip(desired_items, desired_scores))
  actual_set = set(actual_items)
  last = float(desired_scores[-1]) if len(desired_scores) else 0.0
  for i, (got, want) in enumerate(zip(actual_items, desired_items)):
    if got == want:
      continue
    if got in desired_score_of:
      ok = _tied(desired_score_of[got], float(desired_scores[i]), rtol, atol)
    else:  # traded membership at the list's end: both tied with its last score
      ok = (want not in actual_set and
            _tied(float(desired_scores[i]), last, rtol, atol) and
            _tied(float(actual_scores[i]), last, rtol, atol))
    assert ok, (f'{where}position {i} holds {got!r}, expected {want!r} (score '
                f'{desired_scores[i]!r}): not a tie within rtol {rtol:.2g}, atol {atol:.2g}')


def assert_same_result(actual: dict, desired: dict, err_msg: str = '',
                       score_field: str = 'scores') -> None:
  """A search result as a dict of parallel lists (e.g. {'photo_ids', 'categories',
  'category_names', 'scores'}): the same ranking of items, each item the tuple of its
  non-score fields, up to ties in `score_field`."""
  assert set(actual) == set(desired), f'{err_msg}: fields {sorted(actual)} != {sorted(desired)}'
  fields = sorted(f for f in desired if f != score_field)
  items = lambda r: list(zip(*(r[f] for f in fields)))
  assert_same_ranking(items(actual), actual[score_field], items(desired), desired[score_field],
                      err_msg=err_msg)


def assert_top_k(rows, scores, err_msg: str = '', atol: Optional[float] = None) -> None:
  """Each query's `rows` [q, k] are the k best of `scores` [q, n] (a reference, e.g. NumPy's
  products), exactly where scores are separated: every row scoring more than `atol` above the
  k-th best is found, none scoring more than `atol` below it (an engine sums in its own order,
  so a tie at the k-th may go either way). `atol`: float32 rounding of unit vectors' scores."""
  tie = tolerance(np.float32, 1.0)[1] if atol is None else atol
  k = np.shape(rows)[1]
  for i, (got, row_scores) in enumerate(zip(rows, scores)):
    row_scores = np.asarray(row_scores)
    kth = np.sort(row_scores)[::-1][k - 1]
    got = set(np.asarray(got).tolist())
    assert len(got) == k, f'{err_msg}: query {i} repeats a row'
    assert set(np.flatnonzero(row_scores > kth + tie).tolist()) <= got, f'{err_msg}: query {i}'
    assert got <= set(np.flatnonzero(row_scores >= kth - tie).tolist()), f'{err_msg}: query {i}'
