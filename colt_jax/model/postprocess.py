"""Post-processing t (Eq. 6): turns the TTC's token labels into a diverse ranked list.

Rule for the first k positions (Sec. 3.3): take the X = `per_category` images most similar
to the query from each of floor(k / X) semantic categories. The paper fixes neither which
categories nor the order of the list; our choices:

* Categories are ordered by their best (most similar) image; the first floor(k / X) are used.
* The list is round-robin: the best image of every chosen category (in category order), then
  the second best of each, and so on, so that every prefix of the list is as diverse as
  possible (with X = 1 this is simply one image per category, by similarity).
* Eq. 6 takes no image predicted as irrelevant or as query (labels outside [0, V)), unless
  `fill_excluded` is set (see below).
* Slots left over (fewer than floor(k / X) categories, or categories with fewer than X images)
  are filled with the remaining category-labelled images by similarity. With `fill_excluded`
  (not in the paper), slots still free then take the images labelled irrelevant or query, by
  similarity (the official P@X divides by X: a short list is penalised). Slots that still
  cannot be filled hold -1.
* Ties in similarity are broken by position (earlier first); two categories whose best images
  tie are ordered by the position of those images.

Past k (not in the paper, which stops at k; the official task ranks up to 50 photos and
scores @5 to @50): a list of `length` > k continues, skipping images already listed,

1. with the same round-robin over every category: round r holds each category's image of
   rank r within its category, categories in the order above. A category the first k did not
   reach thus gives its best image before any category gives its next one: the continuation
   is the order Eq. 6's round-robin would have without the cut at floor(k / X) categories
   and X images;
2. then with every other image (labelled irrelevant or query) by similarity,

and has no empty slot: it holds min(length, valid images) images, -1 only at its end (when
fewer than k images carry a category, excluded images close up Eq. 6's empty slots). So a
list longer than k is always full and `fill_excluded` makes no difference to it (the
continuation reaches excluded images only after every category-labelled image, where
`fill_excluded` puts them); the flag only decides whether a list of length <= k has empty
slots. A list of length < k is the first `length` positions of the list of length k.

Inputs are the N image tokens of the TTC sequence (the query token at position 0 removed):
returned indices are positions in [0, N); add 1 to index the full sequence.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

Array = jax.Array


def select_per_category(labels: Array, scores: Array, valid: Array, *, k: int,
                        per_category: int, num_categories: int,
                        fill_excluded: bool = False,
                        length: Optional[int] = None) -> Array:
  """Eq. 6 and its continuation: indices [length] (int32, -1 = empty slot) of the images.

  Args:
    labels: [N] int predicted labels (argmax of the TTC); ids >= `num_categories` (irrelevant,
      query) and negative ids are excluded from Eq. 6 (positions < k).
    scores: [N] float similarity of each image to the query (higher = more similar).
    valid: [N] bool, False for padding (never returned).
    k: the k of Eq. 6 (static): the first k positions follow Eq. 6.
    per_category: X, images per category (static).
    num_categories: V, the number of semantic categories (static).
    fill_excluded: fill the slots left within the first k with irrelevant/query-labelled
      images by similarity (static; no effect when `length` > k).
    length: list length (static); None = k. Past k the list continues (module docstring).
  """
  length = k if length is None else length
  if k < 1 or length < 1:
    raise ValueError(f'k and length must be positive, got k={k}, length={length}')
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

  # Eq. 6, one integer key per image: round-robin picks < k, then fill by similarity, then
  # excluded (their global ranks g come after every category-labelled image's), then padding.
  primary = ok & (rho < num_groups) & (r < per_category)
  fills = (ok | valid) if fill_excluded else ok
  key = jnp.where(primary, r * max(num_groups, 1) + rho,
                  jnp.where(fills, k + g, k + n + idx))
  # Position of every image in Eq. 6's order; the picks are the first k that may be filled.
  pos = jnp.zeros((n,), jnp.int32).at[jnp.argsort(key)].set(idx)
  head = (pos < k) & (key < k + n)

  # The whole list, one integer key per image: Eq. 6's picks (by position), then the other
  # category-labelled images in round-robin order (round r, then category rho), then every
  # other valid image by similarity (g), then padding. Keys are distinct.
  round_robin = jnp.lexsort((rho, r, ~ok))
  rr = jnp.zeros((n,), jnp.int32).at[round_robin].set(idx)
  key = jnp.where(head, pos, jnp.where(ok, k + rr, jnp.where(valid, k + n + g,
                                                               k + 2 * n + idx)))
  picked = jnp.argsort(key)[:length]
  # Up to k, only Eq. 6's picks (its empty slots stay empty); past k, every valid image.
  limit = k if length <= k else k + 2 * n
  picked = jnp.where(key[picked] < limit, picked, -1).astype(jnp.int32)
  if n < length:
    picked = jnp.concatenate([picked, jnp.full((length - n,), -1, jnp.int32)])
  return picked


@functools.partial(jax.jit, static_argnames=('k', 'per_category', 'num_categories',
                                             'fill_excluded', 'length'))
def select_per_category_batch(labels: Array, scores: Array, valid: Array, *, k: int,
                              per_category: int, num_categories: int,
                              fill_excluded: bool = False,
                              length: Optional[int] = None) -> Array:
  """`select_per_category` over a batch: [B, N] inputs -> [B, length] indices (jit-compiled
  once per shape and static arguments; integer and comparison logic only, so the indices are
  those of the op-by-op version)."""
  fn = lambda l, s, v: select_per_category(
      l, s, v, k=k, per_category=per_category, num_categories=num_categories,
      fill_excluded=fill_excluded, length=length)
  return jax.vmap(fn)(labels, scores, valid)
