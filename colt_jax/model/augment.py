"""Token-wise data augmentation for the TTC input sequence (Sec. 3.4, Eq. 7-8).

A sequence is `tokens [T, d]` (T = 1 + N), `labels [T]` and `mask [T]`: position 0 is the query
feature h_q (label `query_id`), positions 1.. are image features sorted by similarity to the
query (label = category id in [0, V) for relevant images, `irrelevant_id` for irrelevant ones),
and invalid (padding) slots follow the valid ones.

The four operations run in the paper's order: (1) query perturbation, (2) deletion, (3) copy,
(4) image perturbation. Each is a deterministic helper that takes its random draws explicitly;
`augment_sequence` draws them. Our choices where the paper is vague:

* lambda ~ Beta(1, 1) is drawn as Uniform(0, 1) (the same distribution).
* Query perturbation mixes h_q with one valid relevant image token chosen uniformly; it is a
  no-op when the sequence has no relevant image.
* Image perturbation (Eq. 8) applies to RELEVANT image tokens only: pulling an irrelevant
  image towards the query while keeping its 'irrelevant' label would contradict the label. It
  uses the (possibly perturbed) query token, and each token has its own lambda.
* Mixed features are NOT re-normalised (the formulas of Eq. 7-8 as written).
* Deletion never removes the query token; later tokens shift left. Copy inserts the duplicate
  right after its original; tokens pushed past T are dropped. Both keep shapes fixed.
* Output padding slots hold zero features and label `pad_label` (default -1); consumers must
  mask them out with the returned mask anyway.
* Labels are category ids, which move with their tokens. Targets that depend on order (the
  'local' label scheme) are computed after augmentation (`ttc_step.augment_example`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from colt_jax.util.errors import ConfigError

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """Probabilities of the four operations (Sec. 4.3 defaults, after EDA)."""
  p_q: float = 0.5  # query perturbation (per sequence)
  p_v: float = 0.2  # image perturbation (per relevant image token)
  p_d: float = 0.2  # deletion (per image token)
  p_c: float = 0.2  # copy (per image token)

  def __post_init__(self):
    for name, p in dataclasses.asdict(self).items():
      if not 0.0 <= p <= 1.0:
        raise ConfigError(f'--{name} (AugmentConfig.{name}) must be a probability in [0, 1], '
                          f'got {p!r}')

  def as_kwargs(self) -> dict[str, float]:
    return dataclasses.asdict(self)


def _mix(a: Array, b: Array, lam: Array) -> Array:
  """max(lam, 1-lam) a + min(lam, 1-lam) b (Eq. 7-8): a keeps the larger weight."""
  lam = jnp.asarray(lam, a.dtype)
  hi = jnp.maximum(lam, 1.0 - lam)
  lo = jnp.minimum(lam, 1.0 - lam)
  return hi[..., None] * a + lo[..., None] * b


def relevant_image_mask(labels: Array, mask: Array, *, irrelevant_id: int,
                        query_id: int) -> Array:
  """[T] bool: valid image tokens (positions >= 1) whose label is a category id."""
  labels, mask = jnp.asarray(labels), jnp.asarray(mask, bool)
  is_image = jnp.arange(labels.shape[0]) >= 1
  is_category = (labels >= 0) & (labels != irrelevant_id) & (labels != query_id)
  return mask.astype(bool) & is_image & is_category


def perturb_query(tokens: Array, labels: Array, mask: Array, apply: Array, source: Array,
                  lam: Array, *, irrelevant_id: int, query_id: int) -> Array:
  """Eq. 7: h_q <- max(lam,1-lam) h_q + min(lam,1-lam) h_v with h_v = tokens[source].

  A no-op unless `apply` and `source` is a valid relevant image token. Returns new tokens.
  """
  tokens = jnp.asarray(tokens)
  relevant = relevant_image_mask(labels, mask, irrelevant_id=irrelevant_id, query_id=query_id)
  do = jnp.asarray(apply, bool) & relevant[source]
  new_query = _mix(tokens[0], tokens[source], lam)
  return tokens.at[0].set(jnp.where(do, new_query, tokens[0]))


def _repeat_tokens(tokens: Array, labels: Array, counts: Array,
                   pad_label: int) -> tuple[Array, Array, Array]:
  """Token i appears counts[i] times, in order, compacted to the front; truncated to T."""
  length = tokens.shape[0]
  ends = jnp.cumsum(counts)  # token i fills output slots [ends[i] - counts[i], ends[i])
  slots = jnp.arange(length)
  source = jnp.searchsorted(ends, slots, side='right')
  new_mask = slots < ends[-1]
  source = jnp.where(new_mask, source, 0)
  new_tokens = jnp.where(new_mask[:, None], tokens[source], jnp.zeros_like(tokens[:1]))
  new_labels = jnp.where(new_mask, labels[source], jnp.asarray(pad_label, labels.dtype))
  return new_tokens, new_labels, new_mask


def delete_tokens(tokens: Array, labels: Array, mask: Array, delete: Array,
                  pad_label: int = -1) -> tuple[Array, Array, Array]:
  """Deletion: drops the valid image tokens where `delete` [T] is True (never position 0).

  Later tokens shift left; freed slots at the end become padding.
  """
  tokens, labels, mask = jnp.asarray(tokens), jnp.asarray(labels), jnp.asarray(mask, bool)
  is_image = jnp.arange(tokens.shape[0]) >= 1
  keep = mask & ~(jnp.asarray(delete, bool) & is_image)
  return _repeat_tokens(tokens, labels, keep.astype(jnp.int32), pad_label)


def copy_tokens(tokens: Array, labels: Array, mask: Array, copy: Array,
                pad_label: int = -1) -> tuple[Array, Array, Array]:
  """Copy: duplicates the valid image tokens where `copy` [T] is True (never position 0).

  The copy (same label) goes right after its original; tokens pushed past T are dropped.
  """
  tokens, labels, mask = jnp.asarray(tokens), jnp.asarray(labels), jnp.asarray(mask, bool)
  is_image = jnp.arange(tokens.shape[0]) >= 1
  counts = mask.astype(jnp.int32) * (1 + (jnp.asarray(copy, bool) & is_image).astype(jnp.int32))
  return _repeat_tokens(tokens, labels, counts, pad_label)


def perturb_images(tokens: Array, labels: Array, mask: Array, perturb: Array, lam: Array, *,
                   irrelevant_id: int, query_id: int) -> Array:
  """Eq. 8: h_v <- max(lam,1-lam) h_v + min(lam,1-lam) h_q for relevant tokens with `perturb`.

  `perturb` [T] bool and `lam` [T] are per token; h_q is tokens[0]. Returns new tokens.
  """
  tokens = jnp.asarray(tokens)
  relevant = relevant_image_mask(labels, mask, irrelevant_id=irrelevant_id, query_id=query_id)
  do = jnp.asarray(perturb, bool) & relevant
  mixed = _mix(tokens, jnp.broadcast_to(tokens[0], tokens.shape), lam)
  return jnp.where(do[:, None], mixed, tokens)


def augment_sequence(rng: Array,
                     tokens: Array,
                     labels: Array,
                     mask: Array,
                     *,
                     irrelevant_id: int,
                     query_id: int,
                     p_q: float = 0.5,
                     p_v: float = 0.2,
                     p_d: float = 0.2,
                     p_c: float = 0.2,
                     pad_label: int = -1) -> tuple[Array, Array, Array]:
  """Augments one TTC sequence: query perturbation, deletion, copy, image perturbation.

  Args:
    rng: PRNG key.
    tokens: [T, d] features, query at position 0.
    labels: [T] int labels.
    mask: [T] bool, valid tokens (a prefix).
    irrelevant_id: label of irrelevant images (V).
    query_id: label of the query token (V + 1).
    p_q, p_v, p_d, p_c: probabilities of the four operations (see `AugmentConfig`).
    pad_label: label written into output padding slots.

  Returns:
    (tokens, labels, mask) with the input shapes.
  """
  tokens, labels, mask = jnp.asarray(tokens), jnp.asarray(labels), jnp.asarray(mask, bool)
  length = tokens.shape[0]
  keys = jax.random.split(rng, 7)
  ids = dict(irrelevant_id=irrelevant_id, query_id=query_id)

  # (1) Query perturbation with a uniformly chosen relevant image (Gumbel-max over the mask).
  relevant = relevant_image_mask(labels, mask, **ids)
  gumbel = jax.random.gumbel(keys[0], (length,))
  source = jnp.argmax(jnp.where(relevant, gumbel, -jnp.inf))
  apply_q = jax.random.bernoulli(keys[1], p_q)
  lam_q = jax.random.uniform(keys[2], (), tokens.dtype)
  tokens = perturb_query(tokens, labels, mask, apply_q, source, lam_q, **ids)

  # (2) Deletion and (3) copy, each image token independently.
  delete = jax.random.bernoulli(keys[3], p_d, (length,))
  tokens, labels, mask = delete_tokens(tokens, labels, mask, delete, pad_label)
  copy = jax.random.bernoulli(keys[4], p_c, (length,))
  tokens, labels, mask = copy_tokens(tokens, labels, mask, copy, pad_label)

  # (4) Image perturbation of relevant image tokens towards the (perturbed) query.
  perturb = jax.random.bernoulli(keys[5], p_v, (length,))
  lam_v = jax.random.uniform(keys[6], (length,), tokens.dtype)
  tokens = perturb_images(tokens, labels, mask, perturb, lam_v, **ids)
  return tokens, labels, mask


def augment_batch(rng: Array, tokens: Array, labels: Array, mask: Array,
                  **kwargs: Any) -> tuple[Array, Array, Array]:
  """`augment_sequence` over a batch ([B, T, d], [B, T], [B, T]) with one key per sequence.

  Keyword arguments are those of `augment_sequence`; with a config, pass
  `**config.as_kwargs()`.
  """
  keys = jax.random.split(rng, tokens.shape[0])
  fn = lambda k, t, l, m: augment_sequence(k, t, l, m, **kwargs)
  return jax.vmap(fn)(keys, tokens, labels, mask)
