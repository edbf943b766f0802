"""The label rule in plain NumPy (the reference for inputs.labels.scheme_targets), and random
token sequences whose tokens say where they came from.

Shared by the augmentation, sequence and train-step tests.
"""
from __future__ import annotations

import numpy as np

PAD = -1


def local_groups(labels, num_categories: int, num_groups: int) -> np.ndarray:
  """Per sequence [..., T]: categories numbered by first appearance (capped at num_groups-1),
  irrelevant/query -> num_groups + (label - num_categories), padding stays PAD."""
  labels = np.asarray(labels)
  out = np.full_like(labels, PAD)
  for idx in np.ndindex(labels.shape[:-1]):
    seen = {}
    for j, c in enumerate(labels[idx]):
      if c == PAD:
        continue
      if c >= num_categories:
        out[idx + (j,)] = num_groups + (c - num_categories)
      else:
        out[idx + (j,)] = seen.setdefault(int(c), min(len(seen), num_groups - 1))
  return out


def targets(labels, num_categories: int, scheme: str, num_groups: int) -> np.ndarray:
  """global: the category ids; local: `local_groups`."""
  if scheme == 'global':
    return np.array(labels)
  assert scheme == 'local', scheme
  return local_groups(labels, num_categories, num_groups)


def random_sequences(rng: np.random.Generator, batch: int, length: int, num_categories: int):
  """(tokens [B, T, T], labels [B, T], mask [B, T]): query, 0..T-1 images with random category
  ids or `irrelevant` (= num_categories), then padding. Token j is the one-hot e_j, so after
  augmentation argmax gives its origin (every mix keeps weight >= 0.5 on itself)."""
  counts = rng.integers(0, length, batch)  # image tokens per sequence
  labels = np.full((batch, length), PAD, np.int32)
  labels[:, 0] = num_categories + 1
  for b, n in enumerate(counts):
    labels[b, 1:n + 1] = rng.integers(0, num_categories + 1, n)
  mask = np.arange(length)[None] <= counts[:, None]
  tokens = np.eye(length, dtype=np.float32)[None] * mask[..., None]
  return tokens, labels, mask


def labels_by_origin(tokens, mask, labels) -> np.ndarray:
  """The original `labels` of the tokens now in each slot (PAD where the mask is off)."""
  origin = np.argmax(np.asarray(tokens), axis=-1)
  return np.where(np.asarray(mask, bool), np.take_along_axis(np.asarray(labels), origin, -1),
                  PAD)


def relevance_targets(labels, mask, num_categories: int) -> tuple:
  """Per sequence: (relevant [..., T]: an image token (position >= 1, valid) with a category
  id; weights [..., T]: every valid image token)."""
  labels, mask = np.asarray(labels), np.asarray(mask, bool)
  relevant = np.zeros(labels.shape, bool)
  weights = np.zeros(labels.shape, bool)
  for idx in np.ndindex(labels.shape[:-1]):
    for j, c in enumerate(labels[idx]):
      if j >= 1 and mask[idx + (j,)] and c != PAD:
        weights[idx + (j,)] = True
        relevant[idx + (j,)] = 0 <= c < num_categories
  return relevant, weights


def pair_targets(labels, mask, num_categories: int) -> tuple:
  """Per sequence: (same [..., T, T], weights [..., T, T]): pairs i != j of relevant image
  tokens, and whether their category ids (clusters) agree."""
  relevant, _ = relevance_targets(labels, mask, num_categories)
  labels = np.asarray(labels)
  length = labels.shape[-1]
  same = np.zeros(labels.shape + (length,), bool)
  weights = np.zeros(labels.shape + (length,), bool)
  for idx in np.ndindex(labels.shape[:-1]):
    for i in range(length):
      for j in range(length):
        if i != j and relevant[idx + (i,)] and relevant[idx + (j,)]:
          weights[idx + (i, j)] = True
          same[idx + (i, j)] = labels[idx + (i,)] == labels[idx + (j,)]
  return same, weights
