"""Training arrays of the input pipeline: SCL examples and TTC token sequences, and the
deterministic batch samplers the trainers draw from them (a batch is a function of the seed
and the step only, so a resumed run draws the batches an uninterrupted one would).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.inputs.labels import PAD_LABEL, LabelSpace, candidate_labels


def batch_rng(seed: int, step: int) -> np.random.Generator:
  """The host-side sampler of step `step`: a function of (seed, step) only."""
  return np.random.default_rng([seed, step])


@dataclasses.dataclass(frozen=True)
class SCLExamples:
  """Per-topic padded arrays from which SCL batches are sampled.

  features [T, P, d], relevant [T, P] bool, categories [T, P] int (-1 if none), valid [T, P],
  queries [T, d], counts [T] (valid photos per topic).
  """
  queries: np.ndarray
  features: np.ndarray
  relevant: np.ndarray
  categories: np.ndarray
  valid: np.ndarray
  counts: np.ndarray

  def sample(self, rng: np.random.Generator, batch_size: int, images_per_query: int) -> dict:
    """B topics (with replacement), each with M of its photos (without replacement)."""
    topics = rng.integers(0, len(self.counts), batch_size)
    rows = np.zeros((batch_size, images_per_query), np.int64)
    valid = np.zeros((batch_size, images_per_query), bool)
    for b, t in enumerate(topics):
      n = int(self.counts[t])
      m = min(n, images_per_query)
      rows[b, :m] = rng.choice(n, m, replace=False)
      valid[b, :m] = True
    take = lambda a: a[topics[:, None], rows]
    return {'query': self.queries[topics], 'images': take(self.features),
            'relevant': take(self.relevant) & valid, 'categories': take(self.categories),
            'valid': valid}


def scl_examples(candidates: Sequence[TopicCandidates], labels: Mapping[int, Mapping[str, int]],
                 relevance: Mapping[int, Mapping[str, int]]) -> SCLExamples:
  """Packs each topic's candidates (relevant ones with their category, irrelevant ones)."""
  size = max(len(c) for c in candidates)
  dim = candidates[0].features.shape[1]
  t = len(candidates)
  feats = np.zeros((t, size, dim), np.float32)
  rel = np.zeros((t, size), bool)
  cats = np.full((t, size), -1, np.int32)
  valid = np.zeros((t, size), bool)
  counts = np.zeros(t, np.int64)
  for i, c in enumerate(candidates):
    n = len(c)
    feats[i, :n] = c.features
    valid[i, :n] = True
    counts[i] = n
    for j, p in enumerate(c.photo_ids):
      if p in labels[c.topic]:
        rel[i, j] = True
        cats[i, j] = labels[c.topic][p]
      elif relevance[c.topic].get(p) == 1:
        raise ValueError(f'topic {c.topic}: relevant photo {p} has no category')
  return SCLExamples(queries=np.stack([c.query for c in candidates]).astype(np.float32),
                     features=feats, relevant=rel, categories=cats, valid=valid, counts=counts)


def scl_batches(examples: SCLExamples, seed: int, batch_size: int,
                images_per_query: int) -> Callable[[int], dict]:
  """step -> the SCL batch of that step (`SCLExamples.sample` with `batch_rng`)."""
  return lambda step: examples.sample(batch_rng(seed, step), batch_size, images_per_query)


@dataclasses.dataclass(frozen=True)
class TokenSequences:
  """TTC inputs for a set of topics: tokens [T, 1+N, d] = [h_q, N images by similarity].

  `photo_ids[t][j]` is the photo of token j+1 (j < number of valid image tokens); `scores` are
  the images' cosine similarities to the query [T, N]; `labels` [T, 1+N] (PAD_LABEL in padding)
  exist only when ground truth was given.
  """
  topics: np.ndarray
  tokens: np.ndarray
  mask: np.ndarray
  scores: np.ndarray
  photo_ids: tuple
  labels: Optional[np.ndarray] = None


def token_sequences(candidates: Sequence[TopicCandidates], num_images: int,
                    space: Optional[LabelSpace] = None,
                    labels: Optional[Mapping[int, Mapping[str, int]]] = None,
                    ) -> TokenSequences:
  """Sorts each topic's candidates by similarity to the query and keeps the first N.

  The candidates' `features` are those the TTC sees (the re-encoded h^ for CoLT, raw f
  features for the "without SCL" ablation). Topics with fewer than N candidates are padded
  and masked; no token is invented.
  """
  t = len(candidates)
  dim = candidates[0].features.shape[1]
  tokens = np.zeros((t, 1 + num_images, dim), np.float32)
  mask = np.zeros((t, 1 + num_images), bool)
  scores = np.full((t, num_images), -np.inf, np.float32)
  out_labels = None
  if labels is not None:
    out_labels = np.full((t, 1 + num_images), PAD_LABEL, np.int32)
  ids = []
  for i, c in enumerate(candidates):
    sims = c.features @ c.query
    order = np.lexsort((np.arange(len(sims)), -sims))[:num_images]
    n = len(order)
    tokens[i, 0] = c.query
    tokens[i, 1:n + 1] = c.features[order]
    mask[i, :n + 1] = True
    scores[i, :n] = sims[order]
    ids.append(tuple(c.photo_ids[j] for j in order))
    if labels is not None:
      cl = candidate_labels(c, labels[c.topic], space)
      out_labels[i, 0] = space.query_id
      out_labels[i, 1:n + 1] = cl[order]
  return TokenSequences(topics=np.array([c.topic for c in candidates]), tokens=tokens,
                        mask=mask, scores=scores, photo_ids=tuple(ids), labels=out_labels)


def ttc_batches(seqs: TokenSequences, seed: int, batch_size: int) -> Callable[[int], dict]:
  """step -> the TTC batch of that step: `batch_size` topics drawn with replacement, with
  their tokens, category-id labels, mask and each row's index in the batch."""
  index = np.arange(batch_size, dtype=np.int32)

  def make_batch(step: int) -> dict:
    topics = batch_rng(seed, step).integers(0, len(seqs.topics), batch_size)
    return {'tokens': seqs.tokens[topics], 'labels': seqs.labels[topics],
            'mask': seqs.mask[topics], 'index': index}

  return make_batch
