"""colt-pairs' TTC step (beyond the paper): phi with a relevance head and a pairwise grouping
head (`pairs.pairs_phi.PairsTokenClassifier`) minimises

  class_weight * CE (Eq. 5) + relevance_weight * BCE_rel + pair_weight * BCE_pair,

each term a mean over the global batch (`head_losses`), with targets recomputed from the
augmented sequence's category ids (`augment_example_targets`). The augmentation, the dropout
draws and Eq. 5's term are the paper's step's (`train.ttc_step`).
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from colt_jax.inputs import labels as labels_lib
from colt_jax.model import augment
from colt_jax.pairs import pair_labels
from colt_jax.train import state as state_lib
from colt_jax.train import ttc_step


def augment_example_targets(key: jax.Array, tokens, labels, mask, *, num_categories: int,
                            label_scheme: str = 'global', num_groups: int = 0,
                            augment_config: Optional[augment.AugmentConfig] = None):
  """`ttc_step.augment_example` with the targets of every head: (tokens, mask, targets),
  targets a dict of 'class' [T] (the label scheme's), 'relevant' and 'relevance_weights' [T]
  (`pair_labels.relevance_targets`), 'same' and 'pair_weights' [T, T]
  (`pair_labels.pair_targets`), all from the AUGMENTED sequence's category ids: a copy has
  its source's relevance and is in its source's cluster; a deleted token is in no pair."""
  tokens, labels, mask = ttc_step.augment_tokens(key, tokens, labels, mask,
                                                 num_categories=num_categories,
                                                 augment_config=augment_config)
  relevant, relevance_weights = pair_labels.relevance_targets(labels, mask, num_categories)
  same, pair_weights = pair_labels.pair_targets(labels, mask, num_categories)
  return tokens, mask, {
      'class': labels_lib.scheme_targets(labels, num_categories, label_scheme, num_groups),
      'relevant': relevant, 'relevance_weights': relevance_weights, 'same': same,
      'pair_weights': pair_weights}


def relevance_loss(logits, relevant, weights):
  """Summed binary cross-entropy of the relevance head's logits [..., T] against rGT
  (`relevant`) over the `weights` tokens, and their count."""
  bce = optax.sigmoid_binary_cross_entropy(logits, jnp.asarray(relevant, logits.dtype))
  return jnp.sum(jnp.where(weights, bce, 0.0)), jnp.sum(weights)


def pair_loss(logits, same, weights):
  """Sums of the pair head's binary cross-entropy [..., T, T] over the positive pairs (same
  cluster) and the negative pairs among `weights`, and their counts: (pos_sum, pos_count,
  neg_sum, neg_count). Class-balanced, the loss is 0.5 pos_sum / pos_count + 0.5 neg_sum /
  neg_count (`head_losses`): most pairs of a topic are in different clusters."""
  bce = optax.sigmoid_binary_cross_entropy(logits, jnp.asarray(same, logits.dtype))
  pos, neg = weights & same, weights & ~same
  return (jnp.sum(jnp.where(pos, bce, 0.0)), jnp.sum(pos), jnp.sum(jnp.where(neg, bce, 0.0)),
          jnp.sum(neg))


def head_counts(targets: dict, mask) -> dict:
  """What each loss term averages over, in one example set: the class head's valid tokens,
  the relevance head's image tokens, the pair head's positive and negative pairs."""
  same, weights = targets['same'], targets['pair_weights']
  return {'class': jnp.sum(mask & (targets['class'] >= 0)),
          'relevance': jnp.sum(targets['relevance_weights']),
          'pair_pos': jnp.sum(weights & same), 'pair_neg': jnp.sum(weights & ~same)}


def head_losses(outputs: dict, targets: dict, mask, counts: dict, *,
                class_weight: float = 1.0, relevance_weight: float = 0.0,
                pair_weight: float = 0.0) -> tuple:
  """(loss, terms): class_weight * CE (Eq. 5) + relevance_weight * BCE_rel + pair_weight *
  class-balanced BCE_pair, each term the sum over these examples divided by `counts` (the
  global batch's, `head_counts` summed over devices; a term with no pair or token is 0), so
  that summing the losses of the devices' shards gives the global batch's loss."""
  ce_sum, _ = ttc_step.token_loss(outputs['class'], targets['class'], mask)
  div = lambda x, n: x / jnp.maximum(n, 1).astype(jnp.float32)
  terms = {'class_loss': div(ce_sum, counts['class'])}
  loss = class_weight * terms['class_loss']
  if relevance_weight:
    rel_sum, _ = relevance_loss(outputs['relevance'], targets['relevant'],
                                targets['relevance_weights'])
    terms['relevance_loss'] = div(rel_sum, counts['relevance'])
    loss = loss + relevance_weight * terms['relevance_loss']
  if pair_weight:
    pos_sum, _, neg_sum, _ = pair_loss(outputs['pair'], targets['same'],
                                       targets['pair_weights'])
    terms['pair_loss'] = 0.5 * (div(pos_sum, counts['pair_pos']) +
                                div(neg_sum, counts['pair_neg']))
    loss = loss + pair_weight * terms['pair_loss']
  return loss, terms


def train_step(state: state_lib.TrainState, batch: dict, rng: jax.Array, *,
               num_categories: int, label_scheme: str = 'global', num_groups: int = 0,
               augment_config: Optional[augment.AugmentConfig], dropout: bool = True,
               axis_name: str = 'batch', class_weight: float = 1.0,
               relevance_weight: float = 0.0, pair_weight: float = 0.0):
  """The TTC step of phi with its relevance and/or pair heads (`ttc_step.train_step`'s
  augmentation and dropout draws), every head's targets from the augmented sequence
  (`augment_example_targets`), the loss of `head_losses` over the global batch (the counts
  each term averages over are summed over devices first, so the split over devices is
  invisible). Metrics: the loss, each term, the class head's accuracy, and the relevance and
  pair heads' accuracies at probability 0.5 (the pair head's balanced over both classes)."""
  fn = functools.partial(augment_example_targets, num_categories=num_categories,
                         label_scheme=label_scheme, num_groups=num_groups,
                         augment_config=augment_config)
  (tokens, mask, targets), drop_keys = ttc_step.augmented_batch(fn, batch, rng, dropout)
  counts = jax.lax.psum(head_counts(targets, mask), axis_name)
  weights = dict(class_weight=class_weight, relevance_weight=relevance_weight,
                 pair_weight=pair_weight)

  def local_loss(params):
    outputs = ttc_step.apply_per_example(state.apply_fn, params, tokens, mask, drop_keys,
                                with_heads=True)
    loss, terms = head_losses(outputs, targets, mask, counts, **weights)
    return loss, (terms, outputs)

  (loss, (terms, outputs)), grads = jax.value_and_grad(local_loss, has_aux=True)(
      state.params)
  grads = jax.lax.psum(grads, axis_name)
  new_state = state.apply_gradients(grads=grads)
  div = lambda x, n: x / jnp.maximum(n, 1)
  hits = {'accuracy': (jnp.sum((jnp.argmax(outputs['class'], -1) == targets['class'])
                               & mask & (targets['class'] >= 0)), counts['class'])}
  if relevance_weight:
    hits['relevance_accuracy'] = (
        jnp.sum(((outputs['relevance'] > 0) == targets['relevant'])
                & targets['relevance_weights']), counts['relevance'])
  if pair_weight:
    right = (outputs['pair'] > 0) == targets['same']
    w, same = targets['pair_weights'], targets['same']
    hits['pair_recall'] = (jnp.sum(right & w & same), counts['pair_pos'])
    hits['pair_specificity'] = (jnp.sum(right & w & ~same), counts['pair_neg'])
  metrics = {'loss': jax.lax.psum(loss, axis_name),
             **{k: jax.lax.psum(v, axis_name) for k, v in terms.items()},
             **{k: div(jax.lax.psum(n, axis_name), c) for k, (n, c) in hits.items()}}
  return new_state, metrics
