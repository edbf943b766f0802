"""Tests for colt_jax.baselines.rerankers and colt_jax.baselines.umons.

Rankings are computed in float32 by XLA (MMR, MSD, DPP) or BLAS (cosine scores), whose sums
round differently between machines (~1e-7 here). Their orders are compared exactly where the
test data separates the compared values by far more than that (`SEPARATED`, checked on the
float64 references: the same order on every machine), where the values tie exactly (the same
arithmetic on every input: identical rows, exact dyadic products, 0 * sim), or up to ties
(`assert_same_ranking`); scores are compared with tolerances.
"""
from __future__ import annotations

import numpy as np
import pytest

from colt_jax.baselines import rerankers
from colt_jax.baselines import umons
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order

# Greedy objectives of unit vectors (d <= 40) computed in float32 differ from the float64
# references by < 1e-6 (4e-7 at most for DPP's log-variances here); picks whose objective
# beats the runner-up by more than this are the same on every machine.
SEPARATED = 2e-5


def _preselection_gap(sims, num_candidates):
  """How far the last preselected candidate's similarity is from the first left out (inf
  when every candidate is kept)."""
  if len(sims) <= num_candidates:
    return np.inf
  ranked = np.sort(sims)[::-1]
  return ranked[num_candidates - 1] - ranked[num_candidates]


def _margin(values):
  """The best value's lead over the runner-up (inf with one candidate)."""
  if len(values) < 2:
    return np.inf
  top = np.sort(values)[::-1]
  return top[0] - top[1]


def _unit(rng, n, d):
  x = rng.normal(size=(n, d)).astype(np.float32)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _angles(*degrees):
  r = np.deg2rad(np.asarray(degrees, np.float64))
  return np.stack([np.cos(r), np.sin(r)], -1).astype(np.float32)


def _mmr_reference(query, features, k, diversity, num_candidates):
  """Plain NumPy MMR, one Python loop iteration per pick and per candidate: (picks, scores,
  the smallest lead of a pick over the runner-up, preselection boundary included)."""
  sims = features.astype(np.float64) @ query.astype(np.float64)
  cands = sorted(np.argsort(-sims, kind='stable')[:num_candidates])
  selected, scores = [], []
  margin = _preselection_gap(sims, num_candidates)
  while cands and len(selected) < k:
    best, best_val, values = None, -np.inf, []
    for c in cands:  # in index order: ties go to the lower index
      red = max((float(features[c] @ features[s]) for s in selected), default=0.0)
      val = (1 - diversity) * sims[c] - diversity * red
      values.append(val)
      if val > best_val:
        best, best_val = c, val
    # Diversity 1's first pick: every value is 0 * sim - 0, exactly 0 on every machine, so
    # the exact tie goes to the lower index everywhere.
    if not (diversity == 1.0 and not selected):
      margin = min(margin, _margin(values))
    selected.append(best)
    scores.append(best_val)
    cands.remove(best)
  return np.array(selected), np.array(scores), margin


# ---------------------------------------------------------------------- top-k, flickr


def test_cosine_and_topk_2d():
  q = np.array([1.0, 0.0], np.float32)
  x = _angles(60, 0, 90, 30, 180)
  np.testing.assert_allclose(rerankers.cosine_scores(q, x),
                             [0.5, 1.0, 0.0, np.sqrt(3) / 2, -1.0], atol=1e-6)
  r = rerankers.topk(q, x, 3)
  np.testing.assert_array_equal(r.indices, [1, 3, 0])  # similarities .13 or more apart
  np.testing.assert_allclose(r.scores, [1.0, np.sqrt(3) / 2, 0.5], atol=1e-6)
  assert len(rerankers.topk(q, x, 10).indices) == 5


def test_topk_ties_lower_index_first():
  q = np.array([1.0, 0.0], np.float32)
  x = np.array([[0.0, 1.0], [0.6, 0.8], [0.6, -0.8], [1.0, 0.0], [0.6, 0.8]], np.float32)
  # Products with q = (1, 0) are exact: the ties (.6, three times) are exact on every machine.
  np.testing.assert_array_equal(rerankers.topk(q, x, 5).indices, [3, 1, 2, 4, 0])


def test_flickr_order():
  r = rerankers.flickr([3, 1, 2, 5, 4], 3)  # integer ranks: exact
  np.testing.assert_array_equal(r.indices, [1, 2, 0])
  np.testing.assert_array_equal(r.scores, [-1, -2, -3])


# ------------------------------------------------------------------------------ MMR


def test_mmr_hand_worked():
  # q = (1, 0). A = (.96, .28), B = (.8, .6), C = (.6, -.8), D = (.28, .96),
  # stored as [B, D, A, C] (indices 0..3). sim(q, .): A .96, B .8, C .6, D .28.
  # diversity .5, objective .5 * sim(q, d) - .5 * max_s sim(d, s):
  # pick 1: .5 * sim -> A .48, B .40, C .30, D .14            -> A (idx 2), .48
  # pick 2: sim(., A): B .936, C .352, D .5376
  #         B .40 - .468 = -.068, C .30 - .176 = .124, D .14 - .2688 = -.1288 -> C (idx 3)
  # pick 3: sim(., C): B 0, D -.6; max stays .936 (B), .5376 (D)
  #         B -.068, D -.1288                                   -> B (idx 0)
  # pick 4: sim(D, B) = .8 -> max .8; D .14 - .4 = -.26         -> D (idx 1)
  q = np.array([1.0, 0.0], np.float32)
  x = np.array([[0.8, 0.6], [0.28, 0.96], [0.96, 0.28], [0.6, -0.8]], np.float32)
  r = rerankers.mmr(q, x, 4, 0.5)
  np.testing.assert_array_equal(r.indices, [2, 3, 0, 1])  # picks .06 or more ahead
  np.testing.assert_allclose(r.scores, [0.48, 0.124, -0.068, -0.26], atol=1e-5)
  np.testing.assert_array_equal(rerankers.topk(q, x, 4).indices, [2, 0, 3, 1])  # .16 apart


@pytest.mark.parametrize('n,k', [(7, 3), (60, 10), (250, 10), (300, 20), (5, 10)])
def test_mmr_diversity_zero_is_topk(n, k):
  rng = np.random.default_rng(n)
  q, x = _unit(rng, 1, 16)[0], _unit(rng, n, 16)
  r = rerankers.mmr(q, x, k, 0.0)
  t = rerankers.topk(q, x, k)
  # XLA's float32 scores against BLAS's: the same order up to ties.
  assert_same_ranking(r.indices.tolist(), r.scores, t.indices.tolist(), t.scores)
  np.testing.assert_allclose(r.scores, t.scores, atol=1e-5)


@pytest.mark.parametrize('diversity', [0.1, 0.3, 0.5, 0.8, 1.0])
@pytest.mark.parametrize('n,k,num_candidates', [
    (40, 10, 64),  # n < num_candidates
    (150, 12, 64),  # n > num_candidates
    (6, 10, 64),  # n < k
    (30, 30, 16),  # k > num_candidates < n
])
def test_mmr_matches_numpy_reference(diversity, n, k, num_candidates):
  rng = np.random.default_rng(1000 * n + k)
  q, x = _unit(rng, 1, 24)[0], _unit(rng, n, 24)
  r = rerankers.mmr(q, x, k, diversity, num_candidates=num_candidates)
  ref_idx, ref_scores, margin = _mmr_reference(q, x, k, diversity, num_candidates)
  assert len(r.indices) == min(k, n, num_candidates)
  assert margin > SEPARATED  # so the picks below are the same on every machine
  np.testing.assert_array_equal(r.indices, ref_idx)
  np.testing.assert_allclose(r.scores, ref_scores, atol=1e-5)
  assert len(set(r.indices.tolist())) == len(r.indices)


def test_mmr_compiles_once_across_topic_sizes():
  rng = np.random.default_rng(0)
  q = _unit(rng, 1, 8)[0]
  before = rerankers.TRACE_COUNT
  rerankers.mmr(q, _unit(rng, 50, 8), 9, 0.5, num_candidates=96)
  assert rerankers.TRACE_COUNT == before + 1  # (k, num_candidates, d) not seen before
  before = rerankers.TRACE_COUNT
  for n in (3, 17, 96, 200, 1000):
    for diversity in (0.2, 0.7):
      rerankers.mmr(q, _unit(rng, n, 8), 9, diversity, num_candidates=96)
  assert rerankers.TRACE_COUNT == before


@pytest.mark.parametrize('num_candidates,chunk', [(64, -1), (64, None), (200, 3), (200, -1)])
def test_mmr_batch_matches_single(num_candidates, chunk):
  # num_candidates 64 < n = 120 (preselection path), 200 >= n (all candidates).
  rng = np.random.default_rng(7)
  sizes = [5, 40, 120, 80]
  topics = [_unit(rng, n, 16) for n in sizes]
  queries = _unit(rng, len(sizes), 16)
  feats, valid = rerankers.pad_features(topics)
  r = rerankers.mmr_batch(queries, feats, valid, k=10, diversity=0.4,
                          num_candidates=num_candidates, chunk=chunk)
  assert r.indices.shape == (4, 10)
  for i, (q, x) in enumerate(zip(queries, topics)):
    s = rerankers.mmr(q, x, 10, 0.4, num_candidates=num_candidates)
    # A batch and one query are two programs; their picks are the same on every machine
    # where the data separates them (the float64 reference's margins).
    assert _mmr_reference(q, x, 10, 0.4, num_candidates)[2] > SEPARATED
    np.testing.assert_array_equal(r.indices[i, :len(s.indices)], s.indices)
    np.testing.assert_allclose(r.scores[i, :len(s.indices)], s.scores, atol=1e-5)
  # Topic 0 has 5 photos: the rest is padding.
  np.testing.assert_array_equal(r.indices[0, 5:], -1)
  assert np.all(np.isneginf(r.scores[0, 5:]))


def test_mmr_rejects_bad_diversity():
  with pytest.raises(ValueError):
    rerankers.mmr(np.ones(2) / np.sqrt(2), np.eye(2), 1, 1.5)


# ------------------------------------------------------------------------- MSD and DPP


def _msd_reference(query, features, k, tradeoff, num_candidates):
  """Plain NumPy greedy MSD: relevance first, then (1 - l) rel + l * mean distance: (picks,
  scores, the smallest lead of a pick over the runner-up, preselection boundary included)."""
  sims = features.astype(np.float64) @ query.astype(np.float64)
  cands = sorted(np.argsort(-sims, kind='stable')[:num_candidates])
  selected, scores = [], []
  margin = _preselection_gap(sims, num_candidates)
  while cands and len(selected) < k:
    best, best_val, values = None, -np.inf, []
    for c in cands:
      if selected:
        dist = np.mean([1.0 - float(features[c] @ features[s]) for s in selected])
        val = (1 - tradeoff) * sims[c] + tradeoff * dist
      else:
        val = sims[c]
      values.append(val)
      if val > best_val:
        best, best_val = c, val
    margin = min(margin, _margin(values))
    selected.append(best)
    scores.append(best_val)
    cands.remove(best)
  return np.array(selected), np.array(scores), margin


def _dpp_reference(query, features, k, theta, num_candidates):
  """Greedy DPP MAP by determinants: var(c) = det S_{B+c} / det S_B over the basis B of picks
  whose variance was above eps (the others add nothing), floored at eps: (picks, scores, the
  smallest lead of a pick over the runner-up, preselection boundary included)."""
  x = features.astype(np.float64)
  sims = x @ query.astype(np.float64)
  s = (1.0 + x @ x.T) / 2.0
  cands = sorted(np.argsort(-sims, kind='stable')[:num_candidates])
  selected, scores, basis = [], [], []
  margin = _preselection_gap(sims, num_candidates)
  det = lambda idx: np.linalg.det(s[np.ix_(idx, idx)]) if idx else 1.0
  while cands and len(selected) < k:
    best, best_val, best_var, values = None, -np.inf, None, []
    for c in cands:
      var = det(basis + [c]) / det(basis)
      val = theta * sims[c] + (1 - theta) * np.log(max(var, rerankers.DPP_EPS))
      values.append(val)
      if val > best_val:
        best, best_val, best_var = c, val, var
    margin = min(margin, _margin(values))
    selected.append(best)
    scores.append(best_val)
    cands.remove(best)
    if best_var > rerankers.DPP_EPS:
      basis.append(best)
  return np.array(selected), np.array(scores), margin


def test_msd_and_dpp_hand_worked():
  q = np.array([1.0, 0.0], np.float32)
  # MSD, tradeoff .6: A (0 deg) first; then B (10 deg): .4 cos10 + .6 (1 - cos10) = .403,
  # C (90 deg): .6 * 1 = .6 -> C; then B: .4 cos10 + .6 * mean(1 - cos10, 1 - cos80) = .8.
  x = _angles(10, 90, 0)  # [B, C, A]
  r = rerankers.msd(q, x, 3, 0.6)
  c10, c80 = np.cos(np.deg2rad(10)), np.cos(np.deg2rad(80))
  np.testing.assert_array_equal(r.indices, [2, 1, 0])  # picks .01 or more ahead
  np.testing.assert_allclose(r.scores, [1.0, 0.6, .4 * c10 + .3 * (2 - c10 - c80)], atol=1e-5)
  # DPP, theta .5: x0 (sim 1, ties x1, its duplicate: lower index first); then x2 (var 3/4
  # given x0) beats the duplicate (var 0, floored); the duplicate last.
  x = np.array([[1, 0], [1, 0], [0, 1]], np.float32)
  r = rerankers.dpp(q, x, 3, 0.5)
  # 0/1 features: the similarities and variances (1, 3/4, 0) are exact, and so the ties.
  np.testing.assert_array_equal(r.indices, [0, 2, 1])
  np.testing.assert_allclose(r.scores, [0.5, 0.5 * np.log(0.75), 0.5 + 0.5 *
                                        np.log(rerankers.DPP_EPS)], atol=1e-5)
  np.testing.assert_array_equal(rerankers.dpp(q, x[::-1], 3, 0.0).indices, [0, 1, 2])  # ties


@pytest.mark.parametrize('method,param', [('msd', 0.0), ('dpp', 1.0)])
def test_msd_and_dpp_extremes_are_topk(method, param):
  rng = np.random.default_rng(3)
  q, x = _unit(rng, 1, 16)[0], _unit(rng, 90, 16)
  r = getattr(rerankers, method)(q, x, 20, param, num_candidates=64)
  t = rerankers.topk(q, x, 20)
  sims = rerankers.cosine_scores(q, x)
  assert_same_ranking(r.indices.tolist(), sims[r.indices], t.indices.tolist(), t.scores)


@pytest.mark.parametrize('param', [0.2, 0.5, 0.9, 1.0])
@pytest.mark.parametrize('n,k,num_candidates', [(20, 8, 32), (60, 10, 24), (5, 9, 32)])
def test_msd_matches_numpy_reference(param, n, k, num_candidates):
  rng = np.random.default_rng(10 * n + k)
  q, x = _unit(rng, 1, 40)[0], _unit(rng, n, 40)
  r = rerankers.msd(q, x, k, param, num_candidates=num_candidates)
  ref_idx, ref_scores, margin = _msd_reference(q, x, k, param, num_candidates)
  assert margin > SEPARATED  # so the picks below are the same on every machine
  np.testing.assert_array_equal(r.indices, ref_idx)
  np.testing.assert_allclose(r.scores, ref_scores, atol=1e-5)


@pytest.mark.parametrize('theta', [0.3, 0.5, 0.9, 0.99])  # 0: first-pick ties
@pytest.mark.parametrize('n,k,num_candidates,d', [(20, 8, 32, 40), (60, 10, 24, 40),
                                                  (5, 9, 32, 40), (12, 12, 32, 3)])
def test_dpp_matches_determinant_reference(theta, n, k, num_candidates, d):
  # d = 3: S has rank <= 4, so after 4 picks every variance is floored (rest by similarity).
  rng = np.random.default_rng(10 * n + k)
  q, x = _unit(rng, 1, d)[0], _unit(rng, n, d)
  r = rerankers.dpp(q, x, k, theta, num_candidates=num_candidates)
  ref_idx, ref_scores, margin = _dpp_reference(q, x, k, theta, num_candidates)
  assert margin > SEPARATED  # so the picks below are the same on every machine
  np.testing.assert_array_equal(r.indices, ref_idx)
  np.testing.assert_allclose(r.scores, ref_scores, atol=2e-4)


@pytest.mark.parametrize('method,param_name', [('msd', 'tradeoff'), ('dpp', 'theta')])
def test_msd_and_dpp_batches_match_single_and_compile_once(method, param_name):
  rng = np.random.default_rng(11)
  topics = [_unit(rng, n, 16) for n in (5, 40, 120)]
  queries = _unit(rng, 3, 16)
  feats, valid = rerankers.pad_features(topics)
  batch, single = getattr(rerankers, f'{method}_batch'), getattr(rerankers, method)
  reference = {'msd': _msd_reference, 'dpp': _dpp_reference}[method]
  r = batch(queries, feats, valid, k=10, num_candidates=64, **{param_name: 0.4})
  for i, (q, x) in enumerate(zip(queries, topics)):
    s = single(q, x, 10, 0.4, num_candidates=64)
    # Two programs: the same picks on every machine where the data separates them.
    assert reference(q, x, 10, 0.4, 64)[2] > SEPARATED
    np.testing.assert_array_equal(r.indices[i, :len(s.indices)], s.indices)
    np.testing.assert_allclose(r.scores[i, :len(s.indices)], s.scores, atol=1e-5)
  np.testing.assert_array_equal(r.indices[0, 5:], -1)
  before = rerankers.TRACE_COUNT
  for p in (0.1, 0.7):
    batch(queries, feats, valid, k=10, num_candidates=64, **{param_name: p})
    single(queries[0], topics[1], 10, p, num_candidates=64)
  assert rerankers.TRACE_COUNT == before
  with pytest.raises(ValueError, match=param_name):
    single(queries[0], topics[1], 10, 1.5)


# ---------------------------------------------------------------------------- UMONS


def test_umons_hand_worked():
  # Query at 0 degrees; photos at angles (degrees), similarity = cos(angle):
  #   idx 0: -33 (.839)  1: 100 (-.174)  2: 14 (.970)  3: 50 (.643)
  #   idx 4:  10 (.985)  5: -30 (.866)   6: 18 (.951)
  # Relative threshold .5 on (sim - min) / (max - min): idx 1 -> 0, idx 3 -> .705,
  # so only idx 1 is dropped. eps = 1 - cos(5 deg): neighbours within 5 degrees.
  # DBSCAN (min_samples=2): cluster P = {10, 14, 18} (chain of 4-degree gaps),
  # cluster Q = {-30, -33}, 50 is noise (label -1) -> own singleton cluster.
  # Cluster order by best similarity: P (.985), Q (.866), {50} (.643).
  # Round 1: 10, -30, 50; round 2: 14, -33; round 3: 18; then dropped: 100.
  q = np.array([1.0, 0.0], np.float32)
  x = _angles(-33, 100, 14, 50, 10, -30, 18)
  eps = 1 - np.cos(np.deg2rad(5.0))
  r = umons.umons(q, x, 7, threshold=0.5, eps=eps, min_samples=2)
  # Similarities .015 or more apart, neighbour distances 1 or 2 degrees from the radius: the
  # same clusters and order on every machine.
  np.testing.assert_array_equal(r.indices, [4, 5, 3, 2, 0, 6, 1])
  np.testing.assert_allclose(r.scores, rerankers.cosine_scores(q, x)[r.indices])
  r4 = umons.umons(q, x, 4, threshold=0.5, eps=eps, min_samples=2)
  np.testing.assert_array_equal(r4.indices, [4, 5, 3, 2])
  # Noise as singletons: min_samples=1 gives the same partition.
  r1 = umons.umons(q, x, 7, threshold=0.5, eps=eps, min_samples=1)
  np.testing.assert_array_equal(r1.indices, r.indices)
  # Absolute threshold .7 drops 50 (.643) too; it comes before 100 in the tail.
  ra = umons.umons(q, x, 7, threshold=0.7, eps=eps, min_samples=2, relative=False)
  np.testing.assert_array_equal(ra.indices, [4, 5, 2, 0, 6, 3, 1])


def test_umons_degenerate_cases():
  rng = np.random.default_rng(3)
  q, x = _unit(rng, 1, 8)[0], _unit(rng, 30, 8)
  sims = rerankers.cosine_scores(q, x)

  def same_order(r, k):  # similarity order, up to ties
    t = rerankers.topk(q, x, k)
    assert_same_ranking(r.indices.tolist(), sims[r.indices], t.indices.tolist(), t.scores)

  # Huge eps: one cluster -> plain similarity order.
  same_order(umons.umons(q, x, 30, threshold=0.0, eps=10.0), 30)
  # Tiny eps: all singletons -> also similarity order; k > n truncates to n.
  same_order(umons.umons(q, x, 50, threshold=0.0, eps=1e-9, num_candidates=10), 30)
  # Everything filtered out but the best one: best, then the rest by similarity.
  same_order(umons.umons(q, x, 5, threshold=1.0, eps=0.1), 5)
  assert len(umons.umons(q, x[:1], 5, threshold=0.5, eps=0.1).indices) == 1


def test_umons_dbscan_hand_worked():
  # The angles of test_umons_hand_worked. Relevance stage, DBSCAN within 5 degrees,
  # min_samples 2: {10, 14, 18} and {-30, -33} are dense, 50 and 100 are noise, so they are
  # irrelevant (tail, by similarity: 50, then 100). Diversity stage with the same radius:
  # the same two clusters, round-robin: 10, -30, 14, -33, 18.
  q = np.array([1.0, 0.0], np.float32)
  x = _angles(-33, 100, 14, 50, 10, -30, 18)
  eps = 1 - np.cos(np.deg2rad(5.0))
  r = umons.umons_dbscan(q, x, 7, relevance_eps=eps, relevance_min_samples=2, eps=eps,
                             min_samples=2)
  # Separated as in test_umons_hand_worked: the same on every machine.
  np.testing.assert_array_equal(r.indices, [4, 5, 2, 0, 6, 3, 1])
  np.testing.assert_allclose(r.scores, rerankers.cosine_scores(q, x)[r.indices])
  # A tiny diversity radius: every relevant photo its own cluster, so similarity order
  # among the relevant ones, then the irrelevant ones.
  r = umons.umons_dbscan(q, x, 7, relevance_eps=eps, relevance_min_samples=2, eps=1e-9)
  np.testing.assert_array_equal(r.indices, [4, 2, 6, 5, 0, 3, 1])
  # A relevance radius that joins everything: no photo is noise; same as umons with no filter.
  r = umons.umons_dbscan(q, x, 7, relevance_eps=1.9, relevance_min_samples=2, eps=eps,
                             min_samples=2)
  want = umons.umons(q, x, 7, threshold=0.0, eps=eps, min_samples=2)
  np.testing.assert_array_equal(r.indices, want.indices)
  assert len(umons.umons_dbscan(q, x, 0, relevance_eps=eps, relevance_min_samples=2,
                                    eps=eps).indices) == 0


def test_single_thread_blas_gives_the_same_products():
  rng = np.random.default_rng(5)
  for n in (7, 150, 200, 333):
    x = _unit(rng, n, 512)
    with rerankers.single_thread_blas():
      one = x @ x.T
    # Bitwise equal with most OpenBLAS kernels; others sum in another order (float32 rounding).
    np.testing.assert_allclose(one, x @ x.T, rtol=0, atol=1e-6)
