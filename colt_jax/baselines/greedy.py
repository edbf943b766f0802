"""The greedy selection the baselines and colt-pairs share, and expected coverage.

* `greedy_picks`: k picks, each the valid unpicked candidate with the largest gain (ties to the
  lower index), a `lax.fori_loop` inside a jitted caller: the loop of MMR, MSD and DPP
  (`rerankers`), of expected coverage (below) and of colt-pairs' DPP (`pairs.selection`).
* `dpp_update`: one step of Chen, Zhang & Zhou's incremental Cholesky (NeurIPS 2018, Alg. 1),
  shared by the DPP baseline over features and colt-pairs' DPP over its heads.
* `expected_coverage`: greedy maximisation of the expected number of covered clusters, from
  relevance r [n] (r_i = P(photo i is relevant)) and pair probabilities p [n, n] (p_ij = P(i
  and j show the same cluster | both relevant)). Photo j "covers" photo i's cluster with
  probability r_j * p_ij, so after the picks S photo i's cluster is still uncovered with
  probability m_i = prod_{j in S} (1 - r_j * p_ij) (the picks taken as independent), and
  picking i adds r_i * m_i expected clusters. The next pick maximises
  w * r_i + (1 - w) * r_i * m_i: w = 1 is ranking by relevance, w = 0 the pure
  expected-coverage gain (a probabilistic reading of the subtopic-coverage greedy of
  IA-Select, Agrawal et al., WSDM 2009). jit-compiled with fixed shapes; `weight` is traced.
  The list of gbt-pairs (`gbt_pairs.select`) and of colt-pairs' `coverage` selection.

Positions into the candidates, best first, ties to the lower index; slots past the last valid
candidate hold -1 (score -inf). `VERSIONS`: see `versions`.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.util.errors import InputError

# The version of expected coverage in the row cache's keys (`versions`): raise it with any
# change of what `expected_coverage` returns (its golden test says when).
VERSIONS = {'expected-coverage': 1}

# Incremented each time `greedy_picks` is traced (compiled); tests use it.
TRACE_COUNT = 0


class Selection(NamedTuple):
  """Picked positions [k] (best first, -1 = empty slot) and their scores at pick time."""
  indices: np.ndarray  # int64 [k] (or [b, k])
  scores: np.ndarray  # float32, same shape; -inf at empty slots


def greedy_picks(gain, update, state, valid, k: int):
  """k picks, each the valid unpicked candidate with the largest `gain(t, state)` [n] (ties to
  the lower index), then `state = update(t, state, p, found)`: (picks [k] int32, -1 once none
  is left; scores [k], the gain at pick time, -inf there). Traced inside a jitted caller; the
  greedy of every selection here and of the MMR, MSD and DPP baselines."""
  global TRACE_COUNT
  TRACE_COUNT += 1
  iota = jnp.arange(valid.shape[0])

  def body(t, carry):
    chosen, picks, scores, state = carry
    objective = jnp.where(valid & ~chosen, gain(t, state), -jnp.inf)
    p = jnp.argmax(objective)  # the first maximum: ties to the lower index
    best = objective[p]
    found = best > -jnp.inf
    picks = picks.at[t].set(jnp.where(found, p, -1).astype(jnp.int32))
    return (chosen | ((iota == p) & found), picks, scores.at[t].set(best),
            update(t, state, p, found))

  init = (jnp.zeros(valid.shape, bool), jnp.full(k, -1, jnp.int32),
          jnp.full(k, -jnp.inf, jnp.float32), state)
  _, picks, scores, _ = jax.lax.fori_loop(0, k, body, init)
  return picks, scores


DPP_EPS = 1e-6  # floor of a conditional variance (and of r in log r): adds log(eps) at most


def dpp_update(column, state, t, p, found):
  """One step of Chen et al.'s incremental Cholesky (Alg. 1) after picking p: `column` is the
  kernel's column S_:p, `state` (rows c [n, k], conditional variances d^2 [n]);
  e_i = (S_ip - <c_p, c_i>) / d_p, d_i^2 -= e_i^2, row t of c set to e (nothing changes when
  no pick was found or d_p^2 is below DPP_EPS)."""
  rows, var = state
  e = (column - rows @ rows[p]) / jnp.sqrt(jnp.maximum(var[p], DPP_EPS))
  e = jnp.where(found & (var[p] > DPP_EPS), e, 0.0)
  return rows.at[:, t].set(e), jnp.maximum(var - e * e, 0.0)


def _coverage_core(relevance, pair_prob, valid, weight, k: int):
  """The greedy of `expected_coverage` for one topic: picks [k] int32, scores [k]."""
  def update(t, missed, p, found):
    cover = jnp.where(found, relevance[p] * pair_prob[:, p], 0.0)
    return missed * (1.0 - cover)

  return greedy_picks(lambda t, missed: weight * relevance + (1.0 - weight) * relevance * missed,
                      update, jnp.ones_like(relevance), valid, k)


@functools.partial(jax.jit, static_argnames=('k',))
def _coverage_jit(relevance, pair_prob, valid, weight, k: int):
  return _coverage_core(relevance, pair_prob, valid, weight, k)


@functools.partial(jax.jit, static_argnames=('k',))
def _coverage_batch_jit(relevance, pair_prob, valid, weight, k: int):
  return jax.vmap(lambda r, p, v: _coverage_core(r, p, v, weight, k))(relevance, pair_prob,
                                                                      valid)


def check_inputs(relevance, pair_prob, valid, batched: bool) -> tuple:
  """(r, p, valid) as float32, float32 and bool arrays, their shapes checked (one line)."""
  r = np.asarray(relevance, np.float32)
  p = np.asarray(pair_prob, np.float32)
  v = np.ones(r.shape, bool) if valid is None else np.asarray(valid, bool)
  lead = 2 if batched else 1
  if (r.ndim != lead or v.shape != r.shape or p.shape != r.shape + r.shape[-1:]):
    raise InputError(f'selection: expected relevance [{"b, " * batched}n], pair_prob '
                     f'[{"b, " * batched}n, n] and valid like relevance, got {r.shape}, '
                     f'{p.shape}, {v.shape}')
  return r, p, v


def _check_weight(weight: float, k: int) -> None:
  if not 0.0 <= weight <= 1.0:
    raise InputError(f'weight must be in [0, 1], got {weight}')
  if k < 0:
    raise InputError(f'k must be >= 0, got {k}')


def expected_coverage(relevance, pair_prob, valid=None, *, weight: float,
                      k: int) -> Selection:
  """Greedy expected coverage (module docstring) over one topic: `Selection` of length k.

  relevance [n], pair_prob [n, n], valid [n] (None: all). One compilation per (n, k): `weight`
  is a traced argument.
  """
  _check_weight(weight, k)
  r, p, v = check_inputs(relevance, pair_prob, valid, batched=False)
  picks, scores = _coverage_jit(r, p, v, np.float32(weight), k=k)
  return Selection(np.asarray(picks).astype(np.int64), np.asarray(scores))


def expected_coverage_batch(relevance, pair_prob, valid=None, *, weight: float,
                            k: int) -> Selection:
  """`expected_coverage` for b topics at once (vmap): relevance [b, n], pair_prob [b, n, n],
  valid [b, n] -> indices and scores [b, k]."""
  _check_weight(weight, k)
  r, p, v = check_inputs(relevance, pair_prob, valid, batched=True)
  picks, scores = _coverage_batch_jit(r, p, v, np.float32(weight), k=k)
  return Selection(np.asarray(picks).astype(np.int64), np.asarray(scores))
