"""The jitted cores of CoLT's inference (Alg. 2): phi over padded token sequences in slices
(`apply_phi`), its labels (Eq. 4, `labels_from_logits`) and the list of post-processing t
(Eq. 6, `label_and_select`), over a given pool (`rank_tokens`) or after exact search of an
indexed collection (`search_and_rank`, over `search_tokens`). Settings are static arguments,
the relevance threshold a traced one (`static_settings`): one program for every threshold.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.engines import exact as search_lib
from colt_jax.inference import settings as settings_lib
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model import postprocess

BATCH = 64  # queries per call of the jitted core (one compilation per batch shape)
# A lone query runs padded to 2 rows: XLA's CPU backend computes a [1, d] x [d, M] product by
# another kernel than [B >= 2, d] x [d, M], whose float32 sums differ in their last bits, and
# near-tied candidates (rank N) then changed places; padded, a query's list is the same alone
# as in any batch (the service batches requests). It costs batch 1's latency a second row.
MIN_BATCH = 2


def labels_from_logits(logits, space: LabelSpace, irrelevant_threshold):
  """Token labels (Eq. 4); with a threshold > 0 (not in the paper, its "easy to control"
  post-processing in spirit) a token is 'irrelevant' only when phi gives that class more than
  `irrelevant_threshold`, otherwise its most probable category (the query token keeps
  'query'). 1 never drops an image. The threshold may be traced (one compiled program for
  every threshold: the choices score several)."""
  logits = jnp.asarray(logits, jnp.float32)
  argmax = jnp.argmax(logits, -1)
  if isinstance(irrelevant_threshold, (int, float)) and irrelevant_threshold <= 0:
    return argmax
  probs = jax.nn.softmax(logits, -1)
  labels = jnp.argmax(logits[..., :space.num_categories], -1)
  labels = jnp.where(probs[..., space.irrelevant_id] > irrelevant_threshold,
                     space.irrelevant_id, labels)
  labels = jnp.where(argmax == space.query_id, space.query_id, labels)
  return jnp.where(irrelevant_threshold > 0, labels, argmax)


def phi_slice() -> int:
  """Sequences phi runs on at a time inside a batched call (`apply_phi`): 16 on a CPU, where
  phi over more sequences at once costs more per sequence (its activations leave the caches;
  `benchmarks/bench_batch_cost.py` measures it), all of them at once on an accelerator (0)."""
  return 16 if jax.default_backend() == 'cpu' else 0


def apply_phi(params, tokens, mask, *, module, outputs: Optional[Callable] = None):
  """phi's outputs (`module.apply`, deterministic; or `outputs(module, variables, tokens,
  mask, deterministic=True)`, e.g. a method's other heads) for tokens [B, T, d] and mask
  [B, T], computed `phi_slice()` sequences at a time (`jax.lax.map` over slices; the last one
  padded by repeating its first sequence): per sequence, on one machine, bit for bit what one
  call over those 16 gives, and one call over all B's values up to float rounding (a sequence's outputs depend
  on it alone), in the cache's reach on a CPU."""
  if outputs is not None:
    run = lambda t, m: outputs(module, {'params': params}, t, m, deterministic=True)
  else:
    run = lambda t, m: module.apply({'params': params}, t, m, deterministic=True)
  size, b = phi_slice(), tokens.shape[0]
  if not size or b <= size:
    return run(tokens, mask)
  slices = -(-b // size)
  pad = slices * size - b

  def sliced(a):
    if pad:
      a = jnp.concatenate([a, jnp.repeat(a[:1], pad, 0)])
    return a.reshape((slices, size) + a.shape[1:])

  out = jax.lax.map(lambda tm: run(*tm), (sliced(tokens), sliced(mask)))
  return jax.tree_util.tree_map(lambda a: a.reshape((slices * size,) + a.shape[2:])[:b], out)


def label_and_select(params, tokens, mask, scores, threshold, *, module, space: LabelSpace,
                      settings: settings_lib.InferenceSettings):
  """phi (Eq. 4) + t (Eq. 6): (picks [B, L] positions among the N images (-1 = none), image
  labels [B, N]); an empty list gets the most similar valid image. `threshold`: the
  irrelevant_threshold, an argument (`settings` is static, `static_settings`)."""
  logits = apply_phi(params, tokens, mask, module=module)
  labels = labels_from_logits(logits, space, threshold)[:, 1:]
  valid = mask[:, 1:]
  picks = postprocess.select_per_category_batch(
      labels, scores, valid, k=settings.k, per_category=settings.per_category,
      num_categories=space.num_categories, fill_excluded=settings.fill_excluded,
      length=settings.list_length)
  best = jnp.argmax(jnp.where(valid, scores, -jnp.inf), -1).astype(picks.dtype)
  empty = (picks[:, 0] < 0) & valid.any(-1)
  picks = picks.at[:, 0].set(jnp.where(empty, best, picks[:, 0]))
  return picks, labels


rank_tokens = jax.jit(label_and_select, static_argnames=('module', 'space', 'settings'))


def static_settings(settings: settings_lib.InferenceSettings) -> tuple:
  """(Eq. 6's fields of `settings` as the compiled calls' static argument, its
  irrelevant_threshold as their traced one): models scored at several thresholds share one
  program."""
  return (dataclasses.replace(settings_lib.paper_settings(settings), irrelevant_threshold=0.0),
          jnp.float32(settings.irrelevant_threshold))


@functools.partial(jax.jit, static_argnames=('module', 'space', 'settings', 'n', 'num_rows',
                                             'num_images'))
def search_and_rank(params, queries, chunks, threshold, *, module, space, settings, n, num_rows,
                     num_images):
  """Exact search of the n most similar rows, tokens [h_q, h^_1..h^_N] (padded to N), phi,
  t: (rows [B, L] of the collection (-1 = none), scores [B, L], labels [B, L])."""
  tokens, mask, scores, idx = search_tokens(queries, chunks, n, num_rows, num_images)
  picks, labels = label_and_select(params, tokens, mask, scores, threshold, module=module,
                                    space=space,
                                    settings=settings)
  safe = jnp.maximum(picks, 0)
  take = lambda a: jnp.take_along_axis(a, safe, 1)
  return (jnp.where(picks >= 0, take(idx), -1), jnp.where(picks >= 0, take(scores), -jnp.inf),
          jnp.where(picks >= 0, take(labels), -1))


def search_tokens(queries, chunks, n, num_rows, num_images):
  """The n most similar rows of each query as phi's input: (tokens [B, 1+N, d], mask, their
  scores [B, N] and rows [B, N], padded with -inf and -1)."""
  scores, idx = search_lib.search_chunks(queries, chunks, n=n, num_rows=num_rows)
  cand = search_lib.gather_rows(chunks, idx)
  pad = num_images - n
  b = queries.shape[0]
  tokens = jnp.concatenate([queries[:, None], cand,
                            jnp.zeros((b, pad, cand.shape[-1]), cand.dtype)], 1)
  mask = jnp.arange(1 + num_images)[None, :] <= n
  mask = jnp.broadcast_to(mask, (b, 1 + num_images))
  scores = jnp.concatenate([scores, jnp.full((b, pad), -jnp.inf, scores.dtype)], 1)
  idx = jnp.concatenate([idx, jnp.full((b, pad), -1, idx.dtype)], 1)
  return tokens, mask, scores, idx


def batches(n: int, pad_to: int = 0):
  """Slices of at most BATCH queries, each padded (by the caller) to `size` rows: a last,
  shorter batch when there are several, and a single query to MIN_BATCH rows (or, with
  `pad_to`, to that many rows, at most BATCH)."""
  size = max(min(max(n, pad_to), BATCH), MIN_BATCH)
  return [(s, min(s + size, n), size) for s in range(0, n, size)]


def pad_rows(x: np.ndarray, size: int) -> np.ndarray:
  if x.shape[0] == size:
    return x
  return np.concatenate([x, np.zeros((size - x.shape[0],) + x.shape[1:], x.dtype)])
