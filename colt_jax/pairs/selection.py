"""Ranked lists from predicted relevance and predicted same-cluster probabilities.

Inputs for one topic of n candidates: relevance r [n] (r_i = P(photo i is relevant), in
[0, 1]), pair probabilities p [n, n] (p_ij = P(i and j show the same ground-truth cluster |
both relevant), symmetric, in [0, 1]) and a validity mask [n] (False = padding, never picked).

* `expected_coverage`, the greedy maximisation of the expected number of covered clusters,
  lives with the baselines (`colt_jax.baselines.greedy`): gbt-pairs lists with it too.
* `dpp_select`: greedy MAP of a determinantal point process whose kernel is built from the
  same two heads, L = Diag(r^a) S Diag(r^a) with S = p (unit diagonal): the next pick
  maximises  theta * log r_i + (1 - theta) * log d_i^2,  d_i^2 photo i's conditional variance
  under S given the picks (Chen, Zhang & Zhou, NeurIPS 2018, Alg. 1: incremental Cholesky, as
  `rerankers.dpp` on features). theta = 1 is ranking by relevance. p need not be PSD: a
  variance that falls below DPP_EPS is floored there (the photo then adds log DPP_EPS).
* `cluster_select`: average-linkage agglomerative clustering on the distance 1 - p, cut at
  `threshold`, then a round-robin over the clusters (NumPy and scikit-learn).

All follow `rerankers.Ranking`'s conventions: positions into the candidates, best first, ties
to the lower index; slots past the last valid candidate hold -1 (score -inf, group -1).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.baselines.greedy import DPP_EPS, Selection, check_inputs, dpp_update, greedy_picks
from colt_jax.util.errors import InputError


class Grouped(NamedTuple):
  """Picked positions [k] (-1 = empty slot) and the group of each pick (0 = the group with
  the most relevant photo; -1 at empty slots)."""
  indices: np.ndarray  # int64 [k]
  groups: np.ndarray  # int64 [k]


def _dpp_core(relevance, pair_prob, valid, theta, k: int):
  """The greedy of `dpp_select` for one topic: picks [k] int32, scores [k]."""
  n = relevance.shape[0]
  kernel = jnp.where(jnp.eye(n, dtype=bool), 1.0, (pair_prob + pair_prob.T) / 2.0)
  quality = theta * jnp.log(jnp.maximum(relevance, DPP_EPS))

  return greedy_picks(
      lambda t, state: quality + (1.0 - theta) * jnp.log(jnp.maximum(state[1], DPP_EPS)),
      lambda t, state, p, found: dpp_update(kernel[:, p], state, t, p, found),
      (jnp.zeros((n, k), relevance.dtype), jnp.ones(n, relevance.dtype)), valid, k)


@functools.partial(jax.jit, static_argnames=('k',))
def _dpp_batch_jit(relevance, pair_prob, valid, theta, k: int):
  return jax.vmap(lambda r, p, v: _dpp_core(r, p, v, theta, k))(relevance, pair_prob, valid)


def dpp_select(relevance, pair_prob, valid=None, *, theta: float, k: int) -> Selection:
  """Greedy DPP MAP (module docstring) for b topics at once: relevance [b, n], pair_prob
  [b, n, n], valid [b, n] -> indices and scores [b, k]. One compilation per (b, n, k): `theta`
  (in [0, 1]) is a traced argument."""
  if not 0.0 <= theta <= 1.0 or k < 0:
    raise InputError(f'dpp_select: theta must be in [0, 1] and k >= 0; got {theta}, {k}')
  r, p, v = check_inputs(relevance, pair_prob, valid, batched=True)
  picks, scores = _dpp_batch_jit(r, p, v, np.float32(theta), k=k)
  return Selection(np.asarray(picks).astype(np.int64), np.asarray(scores))


def _average_linkage(distance: np.ndarray, threshold: float) -> np.ndarray:
  """Cluster labels of scikit-learn's average-linkage clustering cut at `threshold` (groups
  merge while their mean distance is below it)."""
  if len(distance) < 2:
    return np.zeros(len(distance), np.int64)
  import sklearn  # pylint: disable=g-import-not-at-top  # on first use: ~1.4 s of every start
  from sklearn.cluster import AgglomerativeClustering  # pylint: disable=g-import-not-at-top
  with sklearn.config_context(assume_finite=True):
    return AgglomerativeClustering(n_clusters=None, metric='precomputed', linkage='average',
                                   distance_threshold=threshold).fit(distance).labels_


def cluster_select(relevance, pair_prob, valid=None, *, threshold: float, per_cluster: int = 1,
                   k: int) -> Grouped:
  """Groups by predicted same-cluster probability, then a round-robin by relevance.

  1. Average-linkage agglomerative clustering of the valid candidates on 1 - p_ij, cut at
     `threshold` (scikit-learn's `distance_threshold`: no merge at a distance >= threshold).
  2. Groups in the order of their most relevant photo; within a group, photos by relevance.
  3. Round r < `per_cluster` takes the r-th photo of every group, in group order.
  4. The remaining valid candidates fill the list by relevance.
  Ties in relevance go to the lower index. Returns `Grouped` of length k.
  """
  if not 0.0 < threshold <= 2.0 or per_cluster < 1 or k < 0:
    raise InputError(f'cluster_select: threshold must be in (0, 2], per_cluster >= 1 and '
                     f'k >= 0; got {threshold}, {per_cluster}, {k}')
  r, p, v = check_inputs(relevance, pair_prob, valid, batched=False)
  kept = np.flatnonzero(v)
  kept = kept[np.argsort(-r[kept], kind='stable')]  # by relevance, ties by index
  dist = 1.0 - p[np.ix_(kept, kept)].astype(np.float64)
  dist = np.clip((dist + dist.T) / 2.0, 0.0, None)
  np.fill_diagonal(dist, 0.0)
  labels = _average_linkage(dist, threshold)
  # Group ids by first appearance along the relevance order = order of their best photo.
  _, first = np.unique(labels, return_index=True)
  group_of_label = np.empty(labels.max(initial=-1) + 1, np.int64)
  group_of_label[labels[np.sort(first)]] = np.arange(len(first))
  group = group_of_label[labels]
  rank_in_group = np.zeros(len(kept), np.int64)
  seen = np.zeros(len(first), np.int64)
  for i, g in enumerate(group):
    rank_in_group[i] = seen[g]
    seen[g] += 1
  head = rank_in_group < per_cluster
  # Head: by round, then group; the rest keeps the relevance order.
  order = np.concatenate([np.flatnonzero(head)[np.lexsort((group[head], rank_in_group[head]))],
                          np.flatnonzero(~head)])[:k]
  indices = np.full(k, -1, np.int64)
  groups = np.full(k, -1, np.int64)
  indices[:len(order)] = kept[order]
  groups[:len(order)] = group[order]
  return Grouped(indices, groups)
