"""Non-learned retrieval baselines: top-k, MMR, UMONS (DBSCAN) and Flickr order.

Every method is a pure function over L2-normalised features: `query` [d] and
`features` [n, d] (the candidate photos, e.g. those of one topic). It returns a
`Ranking`: `indices` into `features` (best first, length min(k, n); for `mmr`
also at most `num_candidates`) and the `scores` that produced the ranking (for
run files). Ties are broken by lower index.

`indices` order IS the ranking. `scores` are informational: they decrease along
the ranking for `topk` and `flickr`, but not necessarily for `mmr` (the MMR
objective when each photo was picked) nor for `umons` (the query similarity of
each photo, while the order is round-robin over clusters). Run-file writers
should take the rank from the position in `indices`.

UMONS clusters with scikit-learn's `DBSCAN(metric='precomputed')`, called with its input
checks off (the distances are built here, finite and square), which halves its per-call
overhead. Its small [n, d] @ [d, n] product runs on one BLAS thread (`single_thread_blas`):
the result is bitwise the same, and on a busy machine OpenBLAS's thread hand-offs made it
~50x slower (16 ms instead of 0.3 ms).

MMR is a jit-compiled JAX function (`lax.fori_loop` over the picks, vector ops
over the candidates). Candidates are padded up to `num_candidates` with a
validity mask, so one compilation serves every topic for a given (k,
num_candidates, d); `diversity` is a traced argument and does not recompile.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import sklearn
from sklearn.cluster import DBSCAN
import threadpoolctl

# Incremented each time the MMR core is traced (i.e. compiled); tests use it.
TRACE_COUNT = 0


class Ranking(NamedTuple):
  """A ranked list: `indices` into the candidates (best first) and their scores."""
  indices: np.ndarray  # int64 [min(k, n)] (or [b, min(k, n)] for batches)
  scores: np.ndarray  # float32, same shape


def _as_inputs(query, features) -> tuple[np.ndarray, np.ndarray]:
  query = np.asarray(query, dtype=np.float32)
  features = np.asarray(features, dtype=np.float32)
  if query.ndim != 1 or features.ndim != 2 or features.shape[1] != query.shape[0]:
    raise ValueError(
        f'expected query [d] and features [n, d], got {query.shape} and {features.shape}')
  return query, features


def _stable_desc(scores: np.ndarray) -> np.ndarray:
  """Indices sorting `scores` descending; ties by lower index."""
  return np.argsort(-scores, kind='stable')


def cosine_scores(query, features) -> np.ndarray:
  """Cosine similarity [n] of each row of `features` to `query` (both L2-normalised)."""
  query, features = _as_inputs(query, features)
  return features @ query


def topk(query, features, k: int) -> Ranking:
  """The k candidates most similar to the query; ties broken by lower index."""
  sims = cosine_scores(query, features)
  order = _stable_desc(sims)[:max(k, 0)]
  return Ranking(order.astype(np.int64), sims[order])


def flickr(ranks, k: int) -> Ranking:
  """Flickr's original order: ascending `ranks` (1 = first); scores are -rank."""
  ranks = np.asarray(ranks)
  order = np.argsort(ranks, kind='stable')[:max(k, 0)]
  return Ranking(order.astype(np.int64), -ranks[order].astype(np.float32))


# ----------------------------------------------------------------------------- MMR


def _mmr_select(query, cand, valid, diversity, k: int):
  """MMR over candidates `cand` [m, d] (valid [m]); returns positions [k], scores [k].

  `argmax` ties go to the lower position. Positions past the last valid
  candidate are -1 with score -inf. One [m, d] @ [d] product per pick.
  """
  global TRACE_COUNT
  TRACE_COUNT += 1
  m = cand.shape[0]
  iota = jnp.arange(m)
  relevance = (1.0 - diversity) * (cand @ query)  # [m]

  def body(t, state):
    chosen, redundancy, picks, scores = state
    # First pick: no selected photo, the redundancy term is 0 (pure relevance).
    penalty = jnp.where(t == 0, 0.0, redundancy)
    objective = jnp.where(valid & ~chosen, relevance - diversity * penalty, -jnp.inf)
    p = jnp.argmax(objective)
    best = objective[p]
    pick = jnp.where(best > -jnp.inf, p, -1).astype(jnp.int32)
    picks = jax.lax.dynamic_update_index_in_dim(picks, pick, t, 0)
    scores = jax.lax.dynamic_update_index_in_dim(scores, best, t, 0)
    chosen = chosen | (iota == p)
    redundancy = jnp.maximum(redundancy, cand @ cand[p])
    return chosen, redundancy, picks, scores

  init = (jnp.zeros(m, bool), jnp.full(m, -jnp.inf, cand.dtype),
          jnp.full(k, -1, jnp.int32), jnp.full(k, -jnp.inf, cand.dtype))
  _, _, picks, scores = jax.lax.fori_loop(0, k, body, init)
  return picks, scores


@functools.partial(jax.jit, static_argnames=('k',))
def _mmr_padded(query, cand, valid, diversity, k: int):
  return _mmr_select(query, cand, valid, diversity, k)


@functools.partial(jax.jit, static_argnames=('k', 'num_candidates', 'chunk'))
def _mmr_batch_jit(queries, features, valid, diversity, k: int, num_candidates: int,
                   chunk: Optional[int]):
  """Batched MMR: preselection (when n > num_candidates), then `_mmr_select` per query."""
  n = features.shape[1]
  if n > num_candidates:
    sims = jnp.einsum('bnd,bd->bn', features, queries)
    # lax.top_k breaks ties by lower index; re-sorting keeps the index order.
    _, pos = jax.lax.top_k(jnp.where(valid, sims, -jnp.inf), num_candidates)
    pos = jnp.sort(pos, axis=1)
    features = jnp.take_along_axis(features, pos[..., None], axis=1)
    valid = jnp.take_along_axis(valid, pos, axis=1)
  else:
    pos = None
  k = min(k, features.shape[1])
  batch_size = queries.shape[0] if chunk is None else chunk
  picks, scores = jax.lax.map(
      lambda a: _mmr_select(a[0], a[1], a[2], diversity, k),
      (queries, features, valid), batch_size=None if batch_size <= 1 else batch_size)
  if pos is not None:
    picks = jnp.where(picks >= 0, jnp.take_along_axis(pos, jnp.maximum(picks, 0), axis=1), -1)
  return picks, scores


def _check_diversity(diversity: float) -> None:
  if not 0.0 <= diversity <= 1.0:
    raise ValueError(f'diversity must be in [0, 1], got {diversity}')


def mmr(query, features, k: int, diversity: float, num_candidates: int = 200) -> Ranking:
  """Maximal marginal relevance (Carbonell & Goldstein, 1998).

  Restricts to the `num_candidates` candidates most similar to the query (ties
  by lower index), then picks k times the unselected candidate d maximising
    (1 - diversity) * sim(q, d) - diversity * max_{s in selected} sim(d, s),
  where the max term is 0 for the first pick; ties go to the lower index.
  diversity=0 is exactly `topk`; diversity=1 picks the most similar first, then
  the least redundant.

  Candidates are padded to `num_candidates` with a mask, so one compilation
  serves all topics (per k and d); `diversity` does not recompile. Returns
  min(k, n, num_candidates) photos; scores are the objective when each photo
  was picked (not necessarily decreasing).
  """
  _check_diversity(diversity)
  query, features = _as_inputs(query, features)
  n = features.shape[0]
  out_len = min(max(k, 0), n)
  if out_len == 0:
    return Ranking(np.zeros(0, np.int64), np.zeros(0, np.float32))
  if n > num_candidates:
    keep = np.sort(_stable_desc(features @ query)[:num_candidates])
  else:
    keep = np.arange(n)
  cand = np.zeros((num_candidates, features.shape[1]), np.float32)
  cand[:len(keep)] = features[keep]
  valid = np.arange(num_candidates) < len(keep)
  picks, scores = _mmr_padded(query, cand, valid, np.float32(diversity),
                              k=min(k, num_candidates))
  picks, scores = np.asarray(picks)[:out_len], np.asarray(scores)[:out_len]
  return Ranking(keep[picks].astype(np.int64), scores)


def pad_features(feature_list: Sequence[np.ndarray],
                 length: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
  """Stacks per-topic features [n_i, d] into [b, length, d] zero-padded + valid [b, length]."""
  length = max(len(f) for f in feature_list) if length is None else length
  d = np.shape(feature_list[0])[1]
  out = np.zeros((len(feature_list), length, d), np.float32)
  valid = np.zeros((len(feature_list), length), bool)
  for i, f in enumerate(feature_list):
    f = np.asarray(f, np.float32)[:length]
    out[i, :len(f)] = f
    valid[i, :len(f)] = True
  return out, valid


def mmr_batch(queries, features, valid=None, *, k: int, diversity: float,
              num_candidates: int = 200, chunk: Optional[int] = -1) -> Ranking:
  """`mmr` for a batch: queries [b, d], features [b, n, d], valid [b, n] (None: all).

  Returns indices/scores [b, min(k, n)]; positions past a query's number of
  valid candidates hold index -1 and score -inf. Use `pad_features` to batch
  topics of different sizes. `chunk`: how many queries are vectorised together
  (`lax.map` batch size; None: all, i.e. one vmap). The default -1 means 16 on
  CPU (measured 1.5-2x faster than both 1 and all for b >= 64, d = 512) and
  all on accelerators.
  """
  _check_diversity(diversity)
  # jnp.asarray keeps device arrays where they are (no host round trip).
  queries = jnp.asarray(queries, jnp.float32)
  features = jnp.asarray(features, jnp.float32)
  b, n = features.shape[:2]
  valid = jnp.ones((b, n), bool) if valid is None else jnp.asarray(valid, bool)
  out_len = min(max(k, 0), n)
  if out_len == 0:
    return Ranking(np.zeros((b, 0), np.int64), np.zeros((b, 0), np.float32))
  if chunk == -1:
    chunk = 16 if jax.default_backend() == 'cpu' else None
  picks, scores = _mmr_batch_jit(queries, features, valid, np.float32(diversity), k=k,
                                 num_candidates=num_candidates, chunk=chunk)
  return Ranking(np.asarray(picks)[:, :out_len].astype(np.int64),
                 np.asarray(scores)[:, :out_len])


# --------------------------------------------------------------------------- UMONS


def umons(query, features, k: int, threshold: float, eps: float, min_samples: int = 1,
          num_candidates: Optional[int] = 200, relative: bool = True) -> Ranking:
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
                         relevant, eps: float, min_samples: int) -> Ranking:
  """The shared frame of both UMONS readings: the `num_candidates` most similar, a relevance
  mask over them (`relevant(considered, sims)`), DBSCAN round-robin over the relevant ones,
  then the rest by similarity."""
  query, features = _as_inputs(query, features)
  n = features.shape[0]
  sims = features @ query
  order = _stable_desc(sims)
  out_len = min(max(k, 0), n)
  if out_len == 0:
    return Ranking(np.zeros(0, np.int64), np.zeros(0, np.float32))
  considered = order if num_candidates is None else order[:num_candidates]
  passed = relevant(considered, sims)
  head = _cluster_round_robin(features, considered[passed], eps, min_samples)
  tail = np.concatenate([considered[~passed], order[len(considered):]])
  result = np.concatenate([head, tail])[:out_len].astype(np.int64)
  return Ranking(result, sims[result])


def _dbscan(x: np.ndarray, eps: float, min_samples: int) -> np.ndarray:
  """DBSCAN labels of the L2-normalised rows `x` on cosine distance (-1: noise)."""
  with single_thread_blas():
    gram = x @ x.T
  dist = np.clip(1.0 - gram, 0.0, None).astype(np.float64)
  np.fill_diagonal(dist, 0.0)
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
                 num_candidates: Optional[int] = 200) -> Ranking:
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
  query, features = _as_inputs(query, features)

  def relevant(considered, sims):
    del sims
    return _dbscan(features[considered], relevance_eps, relevance_min_samples) >= 0

  return _filter_then_cluster(query, features, k, num_candidates, relevant, eps, min_samples)


@functools.lru_cache(maxsize=None)
def _blas_controller() -> threadpoolctl.ThreadpoolController:
  return threadpoolctl.ThreadpoolController()  # scans the loaded libraries once


def single_thread_blas():
  """A context in which NumPy's BLAS uses one thread (for small products, where threads only
  add hand-off cost; the results are the same)."""
  return _blas_controller().limit(limits=1, user_api='blas')
