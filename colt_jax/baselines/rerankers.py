"""Non-learned re-ranking baselines: top-k, MMR, MSD, DPP and Flickr's order (UMONS: `umons`).

Every method is a pure function over L2-normalised features: `query` [d] and
`features` [n, d] (the candidate photos, e.g. those of one topic). It returns a
`Ranking`: `indices` into `features` (best first, length min(k, n); for `mmr`, `msd`
and `dpp` also at most `num_candidates`) and the `scores` that produced the ranking (for
run files). Ties are broken by lower index.

`indices` order IS the ranking. `scores` are informational: they decrease along
the ranking for `topk` and `flickr`, but not necessarily for the greedy ones (their
objective when each photo was picked) nor for `umons` (the query similarity of
each photo, while the order is round-robin over clusters). Run-file writers
should take the rank from the position in `indices`.

UMONS clusters with scikit-learn's `DBSCAN(metric='precomputed')`, called with its input
checks off (the distances are built here, finite and square), which halves its per-call
overhead. Its small [n, d] @ [d, n] product runs on one BLAS thread (`single_thread_blas`):
the result is the same up to float32 rounding (bitwise with most OpenBLAS kernels), and on a
busy machine OpenBLAS's thread hand-offs made it ~50x slower.

MMR, MSD and DPP are greedy jit-compiled JAX functions (`_greedy_loop`: `lax.fori_loop` over
the picks, vector ops over the candidates, argmax ties to the lower position). Candidates are
padded up to `num_candidates` with a validity mask, so one compilation serves every topic for
a given (method, k, num_candidates, d); the trade-off is traced and does not recompile.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import threadpoolctl

from colt_jax.baselines import greedy
from colt_jax.util.errors import InputError

# The version of each method in the row cache's keys (`versions`): raise a method's with any
# change of what it returns (its golden test, tests/baselines/test_baseline_versions.py, says when).
VERSIONS = {'flickr': 1, 'topk': 1, 'mmr': 1, 'msd': 1, 'dpp': 1}

# Incremented each time a greedy core (MMR, MSD, DPP) is traced (i.e. compiled); tests use it.
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


# ------------------------------------------------------------------ MMR, MSD and DPP
# A core(query, cand, valid, param, k) -> (positions [k], scores [k]; -1 / -inf past the last
# valid candidate), one [m, d] @ [d] product per pick.


def _greedy_loop(objective, update, state, valid, k: int):
  """k picks, each the argmax of `objective(t, state)` [m] over the valid unpicked candidates,
  then `state = update(t, state, p, found)`: (positions [k] int32, scores [k]); the loop is
  `greedy.greedy_picks`, the same greedy as expected coverage and colt-pairs' DPP."""
  global TRACE_COUNT
  TRACE_COUNT += 1
  return greedy.greedy_picks(objective, update, state, valid, k)


def _mmr_select(query, cand, valid, diversity, k: int):
  """MMR: (1 - diversity) * sim(q, d) - diversity * max_{s picked} sim(d, s) (the max term
  is 0 for the first pick)."""
  relevance = (1.0 - diversity) * (cand @ query)
  return _greedy_loop(
      lambda t, red: relevance - diversity * jnp.where(t == 0, 0.0, red),
      lambda t, red, p, found: jnp.maximum(red, cand @ cand[p]),
      jnp.full(cand.shape[0], -jnp.inf, cand.dtype), valid, k)


def _msd_select(query, cand, valid, tradeoff, k: int):
  """MSD: sim(q, d) first, then (1 - tradeoff) * sim(q, d) + tradeoff * mean_{s picked}
  (1 - sim(d, s))."""
  relevance = cand @ query
  return _greedy_loop(
      lambda t, dist: jnp.where(t == 0, relevance, (1.0 - tradeoff) * relevance
                                + tradeoff * dist / jnp.maximum(t, 1)),
      lambda t, dist, p, found: dist + 1.0 - cand @ cand[p],
      jnp.zeros(cand.shape[0], cand.dtype), valid, k)


DPP_EPS = greedy.DPP_EPS  # a conditional variance below this adds nothing: floor log(eps)


def _dpp_select(query, cand, valid, theta, k: int):
  """Greedy DPP MAP (Chen et al. 2018, Alg. 1: incremental Cholesky rows c, conditional
  variances d^2) of S = (1 + cos) / 2; objective theta * sim(q, d) + (1 - theta) * log d^2."""
  relevance = cand @ query
  return _greedy_loop(
      lambda t, s: theta * relevance + (1.0 - theta) * jnp.log(jnp.maximum(s[1], DPP_EPS)),
      lambda t, s, p, found: greedy.dpp_update((1.0 + cand @ cand[p]) / 2.0, s, t, p, found),
      (jnp.zeros((cand.shape[0], k), cand.dtype),
               (1.0 + jnp.sum(cand * cand, axis=1)) / 2.0), valid, k)


@functools.partial(jax.jit, static_argnames=('core', 'k', 'num_candidates', 'chunk'))
def _greedy_batch_jit(core, queries, features, valid, param, k: int, num_candidates: int,
                      chunk: Optional[int]):
  """Batched greedy: preselection (when n > num_candidates), then `core` per query."""
  n, pos = features.shape[1], None
  if n > num_candidates:
    sims = jnp.einsum('bnd,bd->bn', features, queries)
    # lax.top_k breaks ties by lower index; re-sorting keeps the index order.
    _, pos = jax.lax.top_k(jnp.where(valid, sims, -jnp.inf), num_candidates)
    pos = jnp.sort(pos, axis=1)
    features = jnp.take_along_axis(features, pos[..., None], axis=1)
    valid = jnp.take_along_axis(valid, pos, axis=1)
  k = min(k, features.shape[1])
  batch_size = queries.shape[0] if chunk is None else chunk
  picks, scores = jax.lax.map(
      lambda a: core(a[0], a[1], a[2], param, k),
      (queries, features, valid), batch_size=None if batch_size <= 1 else batch_size)
  if pos is not None:
    picks = jnp.where(picks >= 0, jnp.take_along_axis(pos, jnp.maximum(picks, 0), axis=1), -1)
  return picks, scores


def _check_unit(name: str, value: float) -> None:
  if not 0.0 <= value <= 1.0:
    raise InputError(f'{name} must be in [0, 1], got {value}')


def _greedy(core, query, features, k: int, param: float, num_candidates: int) -> Ranking:
  """One query: NumPy preselection, padded to `num_candidates` (one compilation per k, d)."""
  query, features = _as_inputs(query, features)
  n = features.shape[0]
  out_len = min(max(k, 0), n)
  if out_len == 0:
    return Ranking(np.zeros(0, np.int64), np.zeros(0, np.float32))
  keep = (np.sort(_stable_desc(features @ query)[:num_candidates]) if n > num_candidates
          else np.arange(n))
  cand = np.zeros((1, num_candidates, features.shape[1]), np.float32)
  cand[0, :len(keep)] = features[keep]
  valid = np.arange(num_candidates)[None] < len(keep)
  picks, scores = _greedy_batch_jit(core, query[None], cand, valid, np.float32(param),
                                    k=min(k, num_candidates), num_candidates=num_candidates,
                                    chunk=None)
  picks, scores = np.asarray(picks)[0, :out_len], np.asarray(scores)[0, :out_len]
  return Ranking(keep[picks].astype(np.int64), scores)


def _greedy_batch(core, queries, features, valid, k: int, param: float, num_candidates: int,
                  chunk: Optional[int]) -> Ranking:
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
  picks, scores = _greedy_batch_jit(core, queries, features, valid, np.float32(param), k=k,
                                    num_candidates=num_candidates, chunk=chunk)
  return Ranking(np.asarray(picks)[:, :out_len].astype(np.int64),
                 np.asarray(scores)[:, :out_len])


def mmr(query, features, k: int, diversity: float, num_candidates: int = 200) -> Ranking:
  """Maximal marginal relevance (Carbonell & Goldstein, 1998).

  Restricts to the `num_candidates` candidates most similar to the query (ties by lower
  index), then picks k times the unselected candidate d maximising
    (1 - diversity) * sim(q, d) - diversity * max_{s in selected} sim(d, s),
  where the max term is 0 for the first pick; ties go to the lower index.
  diversity=0 is exactly `topk`; diversity=1 picks the most similar first, then
  the least redundant.

  Candidates are padded to `num_candidates` with a mask, so one compilation
  serves all topics (per k and d); `diversity` does not recompile. Returns
  min(k, n, num_candidates) photos; scores are the objective when each photo
  was picked (not necessarily decreasing).
  """
  _check_unit('diversity', diversity)
  return _greedy(_mmr_select, query, features, k, diversity, num_candidates)


def msd(query, features, k: int, tradeoff: float, num_candidates: int = 200) -> Ranking:
  """Greedy max-sum diversification (Gollapudi & Sharma, WWW 2009, MaxSumDispersion: the
  relevance sum plus lambda times the pairwise distances of the set), incremental greedy.

  Over the `num_candidates` most similar candidates (as `mmr`): first the most similar to
  the query, then each time the unselected d maximising
    (1 - tradeoff) * sim(q, d) + tradeoff * mean_{s in selected} (1 - sim(d, s)),
  the objective's marginal gain with the dispersion averaged over the picks (its scale does
  not grow with the list). tradeoff=0 is `topk`. Scores: the objective at pick time.
  """
  _check_unit('tradeoff', tradeoff)
  return _greedy(_msd_select, query, features, k, tradeoff, num_candidates)


def dpp(query, features, k: int, theta: float, num_candidates: int = 200) -> Ranking:
  """Greedy MAP inference of a DPP (Chen, Zhang & Zhou, NeurIPS 2018, Alg. 1 and Sec. 4.1).

  Kernel L = Diag(q) S Diag(q) over the `num_candidates` most similar candidates: quality
  q_i = exp(alpha sim(q, d_i)), alpha = theta / (2 (1 - theta)); S = (1 + cos) / 2 (PSD, unit
  diagonal). Each pick maximises log det L_{Y+d} - log det L_Y = 2 alpha sim(q, d) + log d^2_d
  or, times 1 - theta, theta sim(q, d) + (1 - theta) log d^2_d, d^2_d the conditional variance
  of d under S given the picks (Chen et al.'s incremental Cholesky). theta=1 is `topk`; d^2 is
  floored at DPP_EPS, so once S is exhausted the rest come by similarity. Scores: the
  objective at pick time.
  """
  _check_unit('theta', theta)
  return _greedy(_dpp_select, query, features, k, theta, num_candidates)


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
  _check_unit('diversity', diversity)
  return _greedy_batch(_mmr_select, queries, features, valid, k, diversity, num_candidates,
                       chunk)


def msd_batch(queries, features, valid=None, *, k: int, tradeoff: float,
              num_candidates: int = 200, chunk: Optional[int] = -1) -> Ranking:
  """`msd` for a batch (shapes and `chunk` as `mmr_batch`)."""
  _check_unit('tradeoff', tradeoff)
  return _greedy_batch(_msd_select, queries, features, valid, k, tradeoff, num_candidates,
                       chunk)


def dpp_batch(queries, features, valid=None, *, k: int, theta: float,
              num_candidates: int = 200, chunk: Optional[int] = -1) -> Ranking:
  """`dpp` for a batch (shapes and `chunk` as `mmr_batch`)."""
  _check_unit('theta', theta)
  return _greedy_batch(_dpp_select, queries, features, valid, k, theta, num_candidates, chunk)



@functools.lru_cache(maxsize=None)
def _blas_controller() -> threadpoolctl.ThreadpoolController:
  return threadpoolctl.ThreadpoolController()  # scans the loaded libraries once


def single_thread_blas():
  """A context in which NumPy's BLAS uses one thread (for small products, where threads only
  add hand-off cost; the results are the same)."""
  return _blas_controller().limit(limits=1, user_api='blas')
