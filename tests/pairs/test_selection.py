"""Tests for colt_jax.pairs.selection and colt_jax.baselines.greedy (expected coverage) against plain NumPy transcriptions.

The selections are computed in float32 by XLA (and the clustering in float64 by
scikit-learn), whose arithmetic rounds differently between machines. Their picks are compared
exactly where the test data separates the compared values by far more than that rounding
(`SEPARATED`, checked on the float64 references: the same picks on every machine) or where
values tie exactly (identical inputs, 0/1 probabilities, theta 0's first pick); scores are
compared with tolerances.
"""
from __future__ import annotations

import numpy as np
import pytest

from colt_jax.baselines import greedy
from colt_jax.pairs import selection
from colt_jax.util.errors import InputError

# The greedy objectives (values of order 1, a few float32 operations a pick) differ from the
# float64 references by < 1e-7 here; a pick whose objective beats the runner-up by more than
# this is the same on every machine. (The linkage, in float64, needs far less.)
SEPARATED = 1e-5


def _margin(values):
  """The best value's lead over the runner-up (inf with fewer than two)."""
  if len(values) < 2:
    return np.inf
  top = sorted(values, reverse=True)
  return top[0] - top[1]


def _topic(seed, n, dim=3):
  """Relevance in [0, 1] and symmetric pair probabilities (1 + cos) / 2 of random points."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, dim))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return (rng.uniform(size=n).astype(np.float32),
          ((1.0 + x @ x.T) / 2.0).clip(0, 1).astype(np.float32))


def _coverage_reference(r, p, valid, weight, k):
  """One Python loop per pick and per candidate; ties to the lower index. (picks, scores, the
  smallest lead of a pick over the runner-up.)"""
  missed = np.ones(len(r))
  picks, scores, chosen, margin = [], [], set(), np.inf
  for _ in range(k):
    best, best_val, values = -1, -np.inf, []
    for i in range(len(r)):
      if valid[i] and i not in chosen:
        val = weight * r[i] + (1 - weight) * r[i] * missed[i]
        values.append(val)
        if val > best_val:
          best, best_val = i, val
    margin = min(margin, _margin(values))
    picks.append(best)
    scores.append(best_val)
    if best >= 0:
      chosen.add(best)
      missed = missed * (1 - r[best] * p[:, best])
  return np.array(picks), np.array(scores), margin


def _average_linkage_reference(dist, threshold):
  """Merge the two closest groups (mean pairwise distance) while that distance < threshold:
  (labels, the smallest gap of a merge's distance to the threshold or to the next closest
  pair of groups)."""
  groups = [[i] for i in range(len(dist))]
  margin = np.inf
  while len(groups) > 1:
    pairs = sorted((dist[np.ix_(groups[a], groups[b])].mean(), a, b)
                   for a in range(len(groups)) for b in range(a + 1, len(groups)))
    d, a, b = pairs[0]
    margin = min(margin, abs(d - threshold))
    if d >= threshold:
      break
    if len(pairs) > 1:
      margin = min(margin, pairs[1][0] - d)
    groups[a] += groups.pop(b)
  labels = np.zeros(len(dist), np.int64)
  for g, members in enumerate(groups):
    labels[members] = g
  return labels, margin


def _cluster_reference(r, p, valid, threshold, per_cluster, k):
  kept = sorted((i for i in range(len(r)) if valid[i]), key=lambda i: (-r[i], i))
  labels, margin = _average_linkage_reference(1.0 - p[np.ix_(kept, kept)].astype(np.float64),
                                              threshold)
  members = {}  # label -> positions in `kept`, by relevance; dict order = group order
  for pos, lab in enumerate(labels):
    members.setdefault(lab, []).append(pos)
  group_of = {lab: g for g, lab in enumerate(members)}
  out = []
  for rnd in range(per_cluster):
    out += [m[rnd] for m in members.values() if rnd < len(m)]
  out += [pos for pos in range(len(kept)) if pos not in out]
  out = out[:k]
  indices = [kept[pos] for pos in out] + [-1] * (k - len(out))
  groups = [group_of[labels[pos]] for pos in out] + [-1] * (k - len(out))
  return np.array(indices), np.array(groups), margin


# ----------------------------------------------------------------------- expected coverage


@pytest.mark.parametrize('weight', [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize('n,k,num_valid', [(12, 5, 12), (12, 12, 9), (10, 15, 6), (8, 4, 0)])
def test_coverage_matches_reference(weight, n, k, num_valid):
  r, p = _topic(n * 7 + k, n)
  valid = np.zeros(n, bool)
  valid[np.random.default_rng(k).permutation(n)[:num_valid]] = True
  got = greedy.expected_coverage(r, p, valid, weight=weight, k=k)
  want_i, want_s, margin = _coverage_reference(r, p, valid, weight, k)
  assert margin > SEPARATED  # so the picks below are the same on every machine
  np.testing.assert_array_equal(got.indices, want_i)
  assert got.indices.shape == (k,) and got.indices.dtype == np.int64
  np.testing.assert_allclose(got.scores, want_s, rtol=1e-5, atol=1e-6)
  assert (got.indices >= 0).sum() == min(k, num_valid)  # empty slots last, -1 / -inf
  assert np.all(np.isneginf(got.scores[got.indices < 0]))


def test_coverage_hand_worked_and_ties():
  # Photos 0 and 1 tie on relevance .8 and are the same cluster for sure; photo 2 (.5) is not.
  r = np.array([0.8, 0.8, 0.5], np.float32)
  p = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], np.float32)
  # Products with 0/1 probabilities are exact, so are the ties: the same on every machine.
  # w = 0: pick 0 (tie with 1, lower index), then 1's gain .8 * (1 - .8) = .16 < .5 -> 2.
  got = greedy.expected_coverage(r, p, weight=0.0, k=3)
  np.testing.assert_array_equal(got.indices, [0, 2, 1])
  np.testing.assert_allclose(got.scores, [0.8, 0.5, 0.16], rtol=1e-6)
  # w = 1: relevance order, ties by index.
  np.testing.assert_array_equal(greedy.expected_coverage(r, p, weight=1.0, k=3).indices,
                                [0, 1, 2])
  # Identical candidates: index order.
  np.testing.assert_array_equal(greedy.expected_coverage(
      np.full(4, .5), np.ones((4, 4)), weight=.5, k=4).indices, [0, 1, 2, 3])


def test_one_compilation_serves_every_weight():
  r, p = _topic(1, 9)
  greedy.expected_coverage(r, p, weight=0.1, k=4)
  before = greedy.TRACE_COUNT
  for w in (0.0, 0.25, 0.5, 1.0):
    greedy.expected_coverage(r, p, weight=w, k=4)
  assert greedy.TRACE_COUNT == before


def test_coverage_batch_matches_single():
  topics = [_topic(s, 10) for s in range(3)]
  valid = np.ones((3, 10), bool)
  valid[1, 6:] = False
  r = np.stack([t[0] for t in topics])
  p = np.stack([t[1] for t in topics])
  got = greedy.expected_coverage_batch(r, p, valid, weight=0.4, k=12)
  assert got.indices.shape == (3, 12)
  for b in range(3):
    one = greedy.expected_coverage(r[b], p[b], valid[b], weight=0.4, k=12)
    # A batch and one topic are two programs: the same picks where the data separates them.
    assert _coverage_reference(r[b], p[b], valid[b], 0.4, 12)[2] > SEPARATED
    np.testing.assert_array_equal(got.indices[b], one.indices)
    np.testing.assert_allclose(got.scores[b], one.scores, rtol=1e-6)


def test_coverage_rejects_bad_input():
  r, p = _topic(0, 4)
  with pytest.raises(InputError, match='weight'):
    greedy.expected_coverage(r, p, weight=1.5, k=2)
  with pytest.raises(InputError, match='pair_prob'):
    greedy.expected_coverage(r, p[:3], weight=0.5, k=2)


# ------------------------------------------------------------------------------ dpp_select


def _dpp_reference(r, p, valid, theta, k, eps=selection.DPP_EPS):
  """Each pick: theta log r_i + (1 - theta) log(det S_{Y+i} / det S_Y) by determinants.
  (picks, scores, the smallest lead of a pick over the runner-up.)"""
  s = np.where(np.eye(len(r), dtype=bool), 1.0, (p + p.T) / 2.0).astype(np.float64)
  picks, scores, margin = [], [], np.inf
  for _ in range(k):
    base = np.linalg.det(s[np.ix_(picks, picks)]) if picks else 1.0
    best, best_val, values = -1, -np.inf, []
    for i in range(len(r)):
      if valid[i] and i not in picks:
        var = np.linalg.det(s[np.ix_(picks + [i], picks + [i])]) / base
        val = theta * np.log(max(r[i], eps)) + (1 - theta) * np.log(max(var, eps))
        values.append(val)
        if val > best_val:
          best, best_val = i, val
    if best < 0:
      break
    # Theta 0's first pick: every value is 0 * log r + log 1, exactly 0 on every machine, so
    # the exact tie goes to the lower index everywhere.
    if theta or picks:
      margin = min(margin, _margin(values))
    picks.append(best)
    scores.append(best_val)
  return (np.array(picks + [-1] * (k - len(picks))),
          np.array(scores + [-np.inf] * (k - len(scores))), margin)


@pytest.mark.parametrize('theta', [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize('n,k,num_valid', [(10, 5, 10), (10, 6, 7), (6, 8, 4)])
def test_dpp_matches_the_determinant_reference(theta, n, k, num_valid):
  r, p = _topic(n + k, n, dim=8)  # (1 + cos) / 2 of 8-d points: PSD, full rank up to 9
  valid = np.arange(n) < num_valid
  got = selection.dpp_select(r[None], p[None], valid[None], theta=theta, k=k)
  want, scores, margin = _dpp_reference(r, p, valid, theta, k)
  assert margin > SEPARATED  # so the picks below are the same on every machine
  np.testing.assert_array_equal(got.indices[0], want)
  np.testing.assert_allclose(got.scores[0], scores, rtol=1e-4, atol=1e-4)


def test_dpp_hand_worked_theta_and_compilations():
  # Two groups of three; relevance falls with the index.
  r = np.array([[.9, .85, .8, .7, .6, .5]], np.float32)
  p = np.zeros((1, 6, 6), np.float32)
  p[0, :3, :3] = p[0, 3:, 3:] = .95
  # Relevances .05 or more apart, variances 1 against 1 - .95^2: the same on every machine.
  by_r = selection.dpp_select(r, p, theta=1.0, k=6).indices
  np.testing.assert_array_equal(by_r, [[0, 1, 2, 3, 4, 5]])  # theta = 1: by relevance
  before = greedy.TRACE_COUNT
  diverse = selection.dpp_select(r, p, theta=0.5, k=6).indices
  assert greedy.TRACE_COUNT == before  # theta is traced: one compilation per shape
  np.testing.assert_array_equal(diverse[0, :2], [0, 3])  # the other group second
  masked = selection.dpp_select(r, p, np.array([[1, 1, 1, 1, 0, 0]], bool), theta=.5, k=6)
  np.testing.assert_array_equal(masked.indices[0, 4:], [-1, -1])
  assert np.isneginf(masked.scores[0, 4:]).all()
  # An asymmetric p is read as (p + p^T) / 2, and the diagonal as 1.
  rng = np.random.default_rng(3)
  skew = rng.uniform(size=(1, 6, 6)).astype(np.float32)
  sym = (skew + skew.transpose(0, 2, 1)) / 2
  for theta in (0.2, 0.6):
    # (skew + skew^T) / 2 and (sym + sym^T) / 2 are the same floats (one rounding of a
    # commutative sum, halved exactly): one program on the same inputs, deterministic.
    np.testing.assert_array_equal(selection.dpp_select(r, skew, theta=theta, k=6).indices,
                                  selection.dpp_select(r, sym, theta=theta, k=6).indices)
  with pytest.raises(InputError, match='theta'):
    selection.dpp_select(r, p, theta=1.5, k=2)
  with pytest.raises(InputError, match='pair_prob'):
    selection.dpp_select(r, p[:, :3], theta=.5, k=2)


# --------------------------------------------------------------------------- cluster_select


@pytest.mark.parametrize('threshold', [0.15, 0.4, 0.8])
@pytest.mark.parametrize('per_cluster', [1, 2])
@pytest.mark.parametrize('n,k,num_valid', [(14, 8, 14), (14, 20, 10), (9, 5, 1), (6, 3, 0)])
def test_cluster_select_matches_reference(threshold, per_cluster, n, k, num_valid):
  r, p = _topic(n + k, n)
  valid = np.zeros(n, bool)
  valid[np.random.default_rng(n).permutation(n)[:num_valid]] = True
  got = selection.cluster_select(r, p, valid, threshold=threshold, per_cluster=per_cluster, k=k)
  want_i, want_g, margin = _cluster_reference(r, p, valid, threshold, per_cluster, k)
  # scikit-learn's float64 linkage against the reference's: the same groups on every machine
  # where no merge is within rounding of the threshold or of another merge.
  assert margin > SEPARATED
  np.testing.assert_array_equal(got.indices, want_i)
  np.testing.assert_array_equal(got.groups, want_g)


def test_cluster_select_hand_worked_with_ties():
  # Two sure groups {0, 1, 2} and {3, 4}; relevance ties between 1 and 3 (.9) and 0 and 4.
  # Distances 0 or 1 and equal float32 relevances: exact on every machine.
  r = np.array([0.5, 0.9, 0.3, 0.9, 0.5], np.float32)
  same = np.array([0, 0, 0, 1, 1])
  p = (same[:, None] == same[None, :]).astype(np.float32)
  got = selection.cluster_select(r, p, threshold=0.5, per_cluster=1, k=5)
  np.testing.assert_array_equal(got.indices, [1, 3, 0, 4, 2])  # heads, then by relevance
  np.testing.assert_array_equal(got.groups, [0, 1, 0, 1, 0])
  two = selection.cluster_select(r, p, threshold=0.5, per_cluster=2, k=6)
  np.testing.assert_array_equal(two.indices, [1, 3, 0, 4, 2, -1])
  np.testing.assert_array_equal(two.groups, [0, 1, 0, 1, 0, -1])
  with pytest.raises(InputError, match='threshold'):
    selection.cluster_select(r, p, threshold=0.0, k=2)
