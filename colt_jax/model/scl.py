"""Semantics-aware contrastive learning (SCL): the loss of Eq. 2 and the prototype bank (Eq. 3).

Conventions (the paper leaves them open; these are our choices):

* Cosine similarities. `scl_loss` L2-normalises the query, the re-encoded image features
  ĥ = h + beta * g(h) (Eq. 1) and the prototypes before every dot product (`normalise=True`,
  the default): tau = 0.2 presumes similarities in [-1, 1], as in CLIP-style InfoNCE losses.
* The bank is a constant inside the loss (`lax.stop_gradient`); it moves only through the EMA
  of `update_bank` (Eq. 3), which likewise uses normalised ĥ and re-normalises every prototype
  it touched, so that the bank stays on the unit sphere.
* One "example" is one query with up to M images: relevant ones carry a category id, irrelevant
  ones do not, padding has `valid=False`. Examples without any relevant image have an empty
  numerator (the loss is undefined); they are masked out of the mean.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from colt_jax.util.numerics import l2_normalise

Array = jax.Array


def init_bank(category_features: Array) -> Array:
  """The initial bank B: L2-normalised fine-grained description features [C, d] (Alg. 1 L3)."""
  return l2_normalise(jnp.asarray(category_features, jnp.float32))


def _masked_logsumexp(x: Array, mask: Array, axis: int = -1) -> Array:
  """log sum_{mask} exp(x) along `axis`; 0 (log 1, not -inf) where the mask is empty.

  The empty case returns a finite placeholder so that gradients stay finite; callers mask such
  rows out themselves.
  """
  big_neg = jnp.finfo(x.dtype).min
  shift = jax.lax.stop_gradient(jnp.max(jnp.where(mask, x, big_neg), axis=axis, keepdims=True))
  shift = jnp.where(jnp.any(mask, axis=axis, keepdims=True), shift, 0.0)
  terms = jnp.where(mask, jnp.exp(jnp.where(mask, x - shift, 0.0)), 0.0)
  total = jnp.sum(terms, axis=axis)
  nonempty = total > 0
  return jnp.where(nonempty, jnp.log(jnp.where(nonempty, total, 1.0)) + jnp.squeeze(shift, axis),
                   0.0)


def scl_loss(query: Array,
             images: Array,
             relevant: Array,
             categories: Array,
             valid: Array,
             bank: Array,
             tau: float,
             use_pair2: bool = True,
             use_pair4: bool = True,
             normalise: bool = True) -> tuple[Array, dict[str, Any]]:
  """The semantics-aware contrastive loss of Eq. 2, averaged over examples.

  Per example (one query h_q, its relevant images ĥ^r_i and irrelevant images ĥ^ir_i):

    num = (1) sum_i exp(h_q . ĥ^r_i / tau) + (2) sum_i exp(B(G(ĥ^r_i)) . ĥ^r_i / tau)
    den = (3) sum_i exp(h_q . ĥ^ir_i / tau) + (4) sum_{i,j} exp(B(j) . ĥ^ir_i / tau) + num
    loss = -log(num / den) = logsumexp(den terms) - logsumexp(num terms).

  Args:
    query: [B, d] query features h_q.
    images: [B, M, d] re-encoded image features ĥ (Eq. 1).
    relevant: [B, M] bool, True for relevant images (only where `valid`).
    categories: [B, M] int, category id in [0, C) of each relevant image (G in Eq. 2); ignored
      for irrelevant and padding images.
    valid: [B, M] bool, False for padding.
    bank: [C, d] category prototypes B (treated as a constant).
    tau: temperature.
    use_pair2: keep term (2) (relevant image-prototype positives) in numerator and denominator.
    use_pair4: keep term (4) (irrelevant image-prototype negatives) in the denominator.
    normalise: L2-normalise query, images and prototypes first (cosine similarities).

  Returns:
    (loss, aux): loss is the mean over examples with at least one relevant image (0 when there
    are none); aux holds 'per_example' [B] losses (0 where masked), 'has_relevant' [B] and the
    counts 'num_examples', 'num_relevant', 'num_irrelevant'.
  """
  bank = jax.lax.stop_gradient(bank)
  if normalise:
    query, images, bank = l2_normalise(query), l2_normalise(images), l2_normalise(bank)
  num_categories = bank.shape[0]
  valid = valid.astype(bool)
  rel = valid & relevant.astype(bool)
  irr = valid & ~relevant.astype(bool)

  # (1) and (3): query-image similarities [B, M].
  s_query = jnp.einsum('bd,bmd->bm', query, images) / tau
  # (2): each relevant image against its own prototype [B, M].
  cat = jnp.clip(categories, 0, num_categories - 1)
  s_own = jnp.einsum('bmd,bmd->bm', jnp.take(bank, cat, axis=0), images) / tau
  # (4): each irrelevant image against every prototype [B, M, C].
  s_bank = jnp.einsum('bmd,cd->bmc', images, bank) / tau

  batch = rel.shape[0]
  pair2 = rel & use_pair2
  pair4 = jnp.broadcast_to(irr[:, :, None] & use_pair4, s_bank.shape).reshape(batch, -1)
  # num's terms are the first 2M of den's: (1), (2), then (3), (4). (A mask of constant
  # zeros over (3) and (4) instead made XLA fold [B, M C] constants while compiling.)
  num_logits = jnp.concatenate([s_query, s_own], axis=1)
  logits = jnp.concatenate([num_logits, s_query, s_bank.reshape(batch, -1)], axis=1)
  den_mask = jnp.concatenate([rel, pair2, irr, pair4], axis=1)

  log_num = _masked_logsumexp(num_logits, jnp.concatenate([rel, pair2], axis=1))
  log_den = _masked_logsumexp(logits, den_mask)
  has_rel = jnp.any(rel, axis=1)
  per_example = jnp.where(has_rel, log_den - log_num, 0.0)
  num_examples = jnp.sum(has_rel)
  loss = jnp.sum(per_example) / jnp.maximum(num_examples, 1)
  aux = {
      'per_example': per_example,
      'has_relevant': has_rel,
      'num_examples': num_examples,
      'num_relevant': jnp.sum(rel),
      'num_irrelevant': jnp.sum(irr),
  }
  return loss, aux


def update_bank(bank: Array,
                images: Array,
                categories: Array,
                mask: Array,
                alpha: float,
                normalise: bool = True) -> Array:
  """EMA update of the prototypes (Eq. 3), applied image by image in flattened order.

  Eq. 3 as written: B(c) <- alpha * B(c) + (1 - alpha) * ĥ for every relevant image ĥ of
  category c. Note that alpha weights the OLD prototype, so with the paper's alpha = 0.01 a
  prototype nearly follows the latest image of its category.

  Several images of one category in a batch are applied sequentially in row-major order of the
  flattened inputs. This is computed exactly and vectorised: for a category with n images
  h_0..h_{n-1} (in order),

    B(c) <- alpha^n B(c) + (1 - alpha) * sum_k alpha^(n-1-k) h_k,

  via a stable sort (rank of each image within its category) and a segment sum. The images are
  L2-normalised first and each prototype that received at least one image is L2-normalised once
  at the end (`normalise=True`; not after every single image). Untouched prototypes are
  returned unchanged.

  Under pmap, gather every device's batch first (`lax.all_gather` of images, categories and
  mask, then call this): all replicas then apply the same updates in the same order and keep
  identical banks.

  Args:
    bank: [C, d] prototypes.
    images: [..., d] re-encoded image features ĥ.
    categories: [...] int category ids; entries outside [0, C) are ignored.
    mask: [...] bool, True for the images that update the bank (the relevant, valid ones).
    alpha: momentum, the weight of the old prototype.
    normalise: L2-normalise images before and updated prototypes after the update.

  Returns:
    The new bank [C, d].
  """
  num_categories, dim = bank.shape
  images = images.reshape(-1, dim).astype(bank.dtype)
  if normalise:
    images = l2_normalise(images)
  categories = categories.reshape(-1)
  mask = mask.reshape(-1).astype(bool) & (categories >= 0) & (categories < num_categories)
  key = jnp.where(mask, categories, num_categories)  # masked images sort last, in their own bin
  num = key.shape[0]

  # Rank of each image among the earlier images of its category (stable sort keeps order).
  order = jnp.argsort(key, stable=True)
  sorted_key = key[order]
  first = jnp.searchsorted(sorted_key, sorted_key, side='left')
  rank = jnp.zeros((num,), jnp.int32).at[order].set(jnp.arange(num, dtype=jnp.int32) - first)

  counts = jax.ops.segment_sum(mask.astype(jnp.int32), key, num_segments=num_categories + 1)
  counts = counts[:num_categories]
  alpha = jnp.asarray(alpha, bank.dtype)
  n_of_image = jnp.take(counts, jnp.clip(key, 0, num_categories - 1))
  exponent = jnp.maximum(n_of_image - 1 - rank, 0).astype(bank.dtype)
  weights = jnp.where(mask, (1.0 - alpha) * jnp.power(alpha, exponent), 0.0)
  summed = jax.ops.segment_sum(weights[:, None] * images, key, num_segments=num_categories + 1)
  new_bank = jnp.power(alpha, counts.astype(bank.dtype))[:, None] * bank + summed[:num_categories]
  if normalise:
    new_bank = l2_normalise(new_bank)
  return jnp.where((counts > 0)[:, None], new_bank, bank)
