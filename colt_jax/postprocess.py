"""Post-processing t (Eq. 6): turns the TTC's token labels into a diverse top-k list.

Rule (Sec. 3.3): take the X = `per_category` images most similar to the query from each of
floor(k / X) semantic categories. The paper fixes neither which categories nor the order of the
list; our choices:

* Categories are ordered by their best (most similar) image; the first floor(k / X) are used.
* The list is round-robin: the best image of every chosen category (in category order), then
  the second best of each, and so on, so that every prefix of the list is as diverse as
  possible (with X = 1 this is simply one image per category, by similarity).
* Images predicted as irrelevant or as query (labels outside [0, V)) are never returned.
* Slots left over (fewer than floor(k / X) categories, or categories with fewer than X images)
  are filled with the remaining category-labelled images by similarity. With `fill_excluded`
  (not in the paper), slots still free then take the images labelled irrelevant or query, by
  similarity, so that the list has min(k, N) images even when phi labels most of a topic
  irrelevant (the official P@X divides by X: a short list is penalised). Slots that still
  cannot be filled hold -1.
* Ties in similarity are broken by position (earlier first); two categories whose best images
  tie are ordered by the position of those images.

Inputs are the N image tokens of the TTC sequence (the query token at position 0 removed):
returned indices are positions in [0, N); add 1 to index the full sequence.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

Array = jax.Array


def select_per_category(labels: Array, scores: Array, valid: Array, *, k: int,
                        per_category: int, num_categories: int,
                        fill_excluded: bool = False) -> Array:
  """Eq. 6: indices [k] (int32, -1 = empty slot) of the selected image tokens.

  Args:
    labels: [N] int predicted labels (argmax of the TTC); ids >= `num_categories` (irrelevant,
      query) and negative ids are never selected.
    scores: [N] float similarity of each image to the query (higher = more similar).
    valid: [N] bool, False for padding.
    k: list length (static).
    per_category: X, images per category (static).
    num_categories: V, the number of semantic categories (static).
    fill_excluded: fill the slots left at the end with irrelevant/query-labelled images by
      similarity (static).
  """
  n = labels.shape[0]
  idx = jnp.arange(n, dtype=jnp.int32)
  num_groups = k // per_category
  valid = jnp.asarray(valid, bool)
  ok = valid & (labels >= 0) & (labels < num_categories)
  cat = jnp.where(ok, labels, num_categories).astype(jnp.int32)  # bin V collects the rest

  # Global similarity rank g (0 = most similar; ties by position), excluded images last.
  order = jnp.lexsort((idx, -scores, ~ok))
  g = jnp.zeros((n,), jnp.int32).at[order].set(idx)

  # Rank r of each image within its category (0 = the category's best image).
  by_cat = jnp.lexsort((g, cat))
  sorted_cat = cat[by_cat]
  first = jnp.searchsorted(sorted_cat, sorted_cat, side='left').astype(jnp.int32)
  r = jnp.zeros((n,), jnp.int32).at[by_cat].set(idx - first)

  # Category position rho: categories ordered by the global rank of their best image.
  is_best = ok & (r == 0)
  rho_sorted = jnp.cumsum(is_best[order].astype(jnp.int32)) - 1
  rho_at = jnp.zeros((n,), jnp.int32).at[order].set(rho_sorted)
  rho_of_cat = jnp.zeros((num_categories + 1,), jnp.int32).at[cat].add(
      jnp.where(is_best, rho_at, 0))
  rho = rho_of_cat[cat]

  # One integer key per image: round-robin picks < k, then fill by similarity, then excluded
  # (their global ranks g come after every category-labelled image's), then padding.
  primary = ok & (rho < num_groups) & (r < per_category)
  fills = (ok | valid) if fill_excluded else ok
  key = jnp.where(primary, r * max(num_groups, 1) + rho,
                  jnp.where(fills, k + g, k + n + idx))
  picked = jnp.argsort(key)[:k] if n >= k else jnp.argsort(key)
  picked_key = key[picked]
  picked = jnp.where(picked_key < k + n, picked, -1).astype(jnp.int32)
  if n < k:
    picked = jnp.concatenate([picked, jnp.full((k - n,), -1, jnp.int32)])
  return picked


@functools.partial(jax.jit, static_argnames=('k', 'per_category', 'num_categories',
                                             'fill_excluded'))
def select_per_category_batch(labels: Array, scores: Array, valid: Array, *, k: int,
                              per_category: int, num_categories: int,
                              fill_excluded: bool = False) -> Array:
  """`select_per_category` over a batch: [B, N] inputs -> [B, k] indices (jit-compiled once
  per shape and static arguments; integer and comparison logic only, so the indices are
  those of the op-by-op version)."""
  fn = lambda l, s, v: select_per_category(
      l, s, v, k=k, per_category=per_category, num_categories=num_categories,
      fill_excluded=fill_excluded)
  return jax.vmap(fn)(labels, scores, valid)
