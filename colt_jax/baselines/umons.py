"""UMONS (Seddati et al., MediaEval 2017) and UMONS-DBSCAN, the clustering baselines: a relevance
filter over the candidates, DBSCAN (scikit-learn, cosine distance) over the relevant ones, and
a round-robin over the clusters in order of their best similarity."""
from __future__ import annotations

from typing import Optional

import numpy as np

from colt_jax.baselines import rerankers

# The version of each method in the row cache's keys (`versions`): raise a method's with any
# change of what it returns (its golden test, tests/baselines/test_baseline_versions.py, says when).
VERSIONS = {'umons': 1, 'umons-dbscan': 1}


def umons(query, features, k: int, threshold: float, eps: float, min_samples: int = 1,
          num_candidates: Optional[int] = 200, relative: bool = True) -> rerankers.Ranking:
  """UMONS (Seddati et al., MediaEval 2017): relevance filter + DBSCAN + round-robin.

  1. Keep the `num_candidates` candidates most similar to the query (None: all).
  2. Relevance filter: with `relative` (default) a candidate passes when its
     min-max normalised similarity (sim - min) / (max - min) over those
     candidates is >= `threshold` (in [0, 1]; invariant to each topic's
     similarity offset and spread, so one value transfers across topics); else
     when its raw cosine similarity is >= `threshold`. All pass if max == min.
  3. Cluster the passing ones with sklearn DBSCAN on cosine distance (`eps`,
     `min_samples`). Noise points (label -1) are each their own singleton
     cluster (so min_samples 1 and 2 give the same partition).
  4. Order clusters by their best similarity; take photos round-robin: the
     best of each cluster in cluster order, then the second best of each, ...
  5. Then append the filtered-out candidates and those beyond
     `num_candidates`, by similarity.
  Ties are broken by lower index throughout. Scores are the query similarities.
  """

  def relevant(considered, sims):
    cs = sims[considered]
    if relative:
      lo, hi = cs.min(), cs.max()
      return np.ones(len(cs), bool) if hi <= lo else (cs - lo) / (hi - lo) >= threshold
    return cs >= threshold

  return _filter_then_cluster(query, features, k, num_candidates, relevant, eps, min_samples)


def _filter_then_cluster(query, features, k: int, num_candidates: Optional[int],
                         relevant, eps: float, min_samples: int) -> rerankers.Ranking:
  """The shared frame of both UMONS readings: the `num_candidates` most similar, a relevance
  mask over them (`relevant(considered, sims)`), DBSCAN round-robin over the relevant ones,
  then the rest by similarity."""
  query, features = rerankers._as_inputs(query, features)
  n = features.shape[0]
  sims = features @ query
  order = rerankers._stable_desc(sims)
  out_len = min(max(k, 0), n)
  if out_len == 0:
    return rerankers.Ranking(np.zeros(0, np.int64), np.zeros(0, np.float32))
  considered = order if num_candidates is None else order[:num_candidates]
  passed = relevant(considered, sims)
  head = _cluster_round_robin(features, considered[passed], eps, min_samples)
  tail = np.concatenate([considered[~passed], order[len(considered):]])
  result = np.concatenate([head, tail])[:out_len].astype(np.int64)
  return rerankers.Ranking(result, sims[result])


def _dbscan(x: np.ndarray, eps: float, min_samples: int) -> np.ndarray:
  """DBSCAN labels of the L2-normalised rows `x` on cosine distance (-1: noise)."""
  with rerankers.single_thread_blas():
    gram = x @ x.T
  dist = np.clip(1.0 - gram, 0.0, None).astype(np.float64)
  np.fill_diagonal(dist, 0.0)
  import sklearn  # pylint: disable=g-import-not-at-top  # on first use: ~1.4 s of every start
  from sklearn.cluster import DBSCAN  # pylint: disable=g-import-not-at-top
  with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
    return DBSCAN(eps=eps, min_samples=min_samples, metric='precomputed').fit(dist).labels_


def _cluster_round_robin(features: np.ndarray, kept: np.ndarray, eps: float,
                         min_samples: int) -> np.ndarray:
  """`kept` (indices sorted by query similarity) clustered by DBSCAN (noise points are
  singleton clusters), clusters ordered by their best member, taken round-robin."""
  if not len(kept):
    return np.zeros(0, np.int64)
  labels = _dbscan(features[kept], eps, min_samples)
  # Noise -> singleton cluster ids past the real ones.
  noise = labels < 0
  labels[noise] = labels.max(initial=-1) + 1 + np.arange(noise.sum())
  # `kept` is sorted by similarity, so within a cluster the member order is
  # by similarity, and each member's within-cluster rank is its round.
  rank_in_cluster = np.zeros(len(kept), np.int64)
  first_pos = {}  # cluster -> position of its best member (= cluster order)
  counts = {}
  for i, c in enumerate(labels.tolist()):
    rank_in_cluster[i] = counts.get(c, 0)
    counts[c] = rank_in_cluster[i] + 1
    first_pos.setdefault(c, i)
  cluster_order = np.array([first_pos[c] for c in labels.tolist()])
  return kept[np.lexsort((cluster_order, rank_in_cluster))]


def umons_dbscan(query, features, k: int, relevance_eps: float, relevance_min_samples: int,
                 eps: float, min_samples: int = 1,
                 num_candidates: Optional[int] = 200) -> rerankers.Ranking:
  """UMONS with DBSCAN in both stages (Seddati et al., MediaEval 2017, as the paper cites it:
  "first filters irrelevant images, then clusters the rest via DBSCAN").

  1. Keep the `num_candidates` candidates most similar to the query (None: all).
  2. Relevance: DBSCAN over them (`relevance_eps`, `relevance_min_samples`, cosine
     distance); the photos it calls noise, far from every dense group of the result set,
     are taken as irrelevant. (Where the description is silent, this is the reading chosen
     here: an on-topic photo has near neighbours among the query's results.)
  3. Diversity: DBSCAN over the relevant ones (`eps`, `min_samples`) and the round-robin of
     `umons` (step 4 there).
  4. Then the irrelevant ones and those beyond `num_candidates`, by similarity.
  """
  query, features = rerankers._as_inputs(query, features)

  def relevant(considered, sims):
    del sims
    return _dbscan(features[considered], relevance_eps, relevance_min_samples) >= 0

  return _filter_then_cluster(query, features, k, num_candidates, relevant, eps, min_samples)
