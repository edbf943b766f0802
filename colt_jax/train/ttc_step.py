"""The TTC train step (Alg. 1 L10-L16): token-wise augmentation (Sec. 3.4, Eq. 7-8), phi
(Eq. 4) and its token-wise cross-entropy (Eq. 5), data-parallel under pmap.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from colt_jax.inputs import labels as labels_lib
from colt_jax.model import augment
from colt_jax.train import state as state_lib


def apply_per_example(apply_fn, params, tokens, mask, keys: Optional[jax.Array],
                      **kwargs):
  """phi over a batch with one dropout key per example (vmap of a batch-1 apply), so that
  results do not depend on how the batch is split over devices. `kwargs` go to phi's
  apply."""
  if keys is None:
    return apply_fn({'params': params}, tokens, mask, deterministic=True, **kwargs)
  one = lambda t, m, k: jax.tree_util.tree_map(
      lambda x: x[0], apply_fn({'params': params}, t[None], m[None], deterministic=False,
                               rngs={'dropout': k}, **kwargs))
  return jax.vmap(one)(tokens, mask, keys)


def token_loss(logits, labels, mask):
  """Summed cross-entropy over valid tokens (query token included) and their count."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
  weights = mask & (labels >= 0)
  return jnp.sum(jnp.where(weights, ce, 0.0)), jnp.sum(weights)


def augment_tokens(key: jax.Array, tokens, labels, mask, *, num_categories: int,
                   augment_config: Optional[augment.AugmentConfig] = None):
  """One example's augmented (tokens, category-id labels, mask) (Sec. 3.4, Eq. 7-8); the
  input itself when `augment_config` is None."""
  if augment_config is not None:
    tokens, labels, mask = augment.augment_sequence(
        key, tokens, labels, mask, irrelevant_id=num_categories, query_id=num_categories + 1,
        pad_label=labels_lib.PAD_LABEL, **augment_config.as_kwargs())
  return tokens, labels, mask


def augment_example(key: jax.Array, tokens, labels, mask, *, num_categories: int,
                    label_scheme: str = 'global', num_groups: int = 0,
                    augment_config: Optional[augment.AugmentConfig] = None):
  """One example's (tokens, targets, mask): augmentation (Sec. 3.4, Eq. 7-8), then targets.

  `labels` [T] are category ids in LabelSpace(`num_categories`), which augmentation moves
  with their tokens; the label scheme (`labels_lib.scheme_targets`) is applied to the
  AUGMENTED sequence, so local groups follow deletions and copies.
  """
  tokens, labels, mask = augment_tokens(key, tokens, labels, mask,
                                        num_categories=num_categories,
                                        augment_config=augment_config)
  targets = labels_lib.scheme_targets(labels, num_categories, label_scheme, num_groups)
  return tokens, targets, mask


def augmented_batch(augment_fn, batch: dict, rng: jax.Array, dropout: bool) -> tuple:
  """Each example's augmentation (`augment_fn` vmapped, key fold 0 of the example's key) and
  its dropout keys (fold 1; None without dropout): the draws every TTC step makes alike."""
  keys = state_lib.example_keys(rng, batch['index'])
  aug_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
  out = jax.vmap(augment_fn)(aug_keys, batch['tokens'], batch['labels'], batch['mask'])
  drop_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys) if dropout else None
  return out, drop_keys


def train_step(state: state_lib.TrainState, batch: dict, rng: jax.Array, *,
               num_categories: int, label_scheme: str = 'global', num_groups: int = 0,
               augment_config: Optional[augment.AugmentConfig],
               dropout: bool = True, axis_name: str = 'batch'):
  """One data-parallel TTC step `(state, batch, rng) -> (state, metrics)`; run under pmap.

  `batch`: tokens [b, T, d], labels [b, T] (category ids, see `augment_example`), mask [b, T],
  index [b] (position in the global batch, which seeds the example's augmentation and
  dropout). The loss is Eq. 5's cross-entropy, a mean over the global batch's valid tokens.
  """
  fn = functools.partial(augment_example, num_categories=num_categories,
                         label_scheme=label_scheme, num_groups=num_groups,
                         augment_config=augment_config)
  (tokens, targets, mask), drop_keys = augmented_batch(fn, batch, rng, dropout)

  def local_sum(params):
    logits = apply_per_example(state.apply_fn, params, tokens, mask, drop_keys)
    loss_sum, count = token_loss(logits, targets, mask)
    correct = jnp.sum((jnp.argmax(logits, -1) == targets) & mask & (targets >= 0))
    return loss_sum, (count, correct)

  (loss_sum, (count, correct)), grads = jax.value_and_grad(local_sum, has_aux=True)(
      state.params)
  total = jnp.maximum(jax.lax.psum(count, axis_name), 1)
  grads = jax.tree_util.tree_map(lambda g: jax.lax.psum(g, axis_name) / total, grads)
  new_state = state.apply_gradients(grads=grads)
  metrics = {'loss': jax.lax.psum(loss_sum, axis_name) / total,
             'accuracy': jax.lax.psum(correct, axis_name) / total}
  return new_state, metrics
