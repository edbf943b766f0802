"""Targets of colt-pairs' heads (beyond the paper) from the category ids of an augmented token
sequence (`inputs.labels`' conventions): rGT for the relevance head (`relevance_targets`) and
"same ground-truth cluster" for the pairwise grouping head (`pair_targets`). The paper's
targets (Eq. 5's classes under a label scheme) are `inputs.labels.scheme_targets`.
"""
from __future__ import annotations

import jax.numpy as jnp


def relevance_targets(labels, mask, num_categories: int) -> tuple:
  """Targets of phi's relevance head (the `colt-pairs` method, not in the paper) from
  category-id labels [..., T] in LabelSpace(`num_categories`): (relevant [..., T] bool, the
  ground truth's rGT = 1: a category id; weights [..., T] bool: the valid image tokens, i.e.
  positions >= 1 that are not padding). Apply it AFTER augmentation (Sec. 3.4): a copied token
  carries its source's category id, so it has its source's relevance; a deleted token is gone."""
  labels = jnp.asarray(labels)
  image = jnp.asarray(mask, bool) & (jnp.arange(labels.shape[-1]) >= 1) & (labels >= 0)
  return image & (labels < num_categories), image


def pair_targets(labels, mask, num_categories: int) -> tuple:
  """Targets of phi's pairwise grouping head (the `colt-pairs` method, not in the paper) from
  category-id labels [..., T]: (same [..., T, T] bool: tokens i and j are in the same
  ground-truth cluster; weights [..., T, T] bool: the pairs the loss counts, i != j both
  relevant image tokens; pairs with an irrelevant, query or padding token are masked out).

  Within a topic a cluster is its category id (its normalised name): same id = same cluster.
  Apply it AFTER augmentation (Sec. 3.4): a copy is in its source's cluster, since it carries
  the source's id; deleted tokens are gone, and later ones pair at their new positions.
  """
  relevant, _ = relevance_targets(labels, mask, num_categories)
  labels = jnp.asarray(labels)
  same = labels[..., :, None] == labels[..., None, :]
  length = labels.shape[-1]
  weights = relevant[..., :, None] & relevant[..., None, :] & ~jnp.eye(length, dtype=bool)
  return same & weights, weights
