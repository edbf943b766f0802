"""Evaluation protocols: which photos a method ranks for each topic.

* `pool` (the official MediaEval protocol): the topic's own photos, i.e. the photos of its rGT
  file, listed in Flickr rank order.
* `global` (the CoLT paper's protocol): the `num_candidates` photos of the whole split's
  collection most similar to the query (cosine similarity of L2-normalised features). Photos of
  other topics are then simply not relevant and have no cluster. Run files of this protocol
  may name photos outside the topic's rGT file, which the official scorer rejects; score them
  with `colt_jax.evaluation.metrics` (the same formulas).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.data.types import Split

PROTOCOLS = ('pool', 'global')
DEFAULT_GLOBAL_CANDIDATES = 500


@dataclasses.dataclass(frozen=True)
class TopicCandidates:
  """What a method ranks for one topic."""
  topic: int
  photo_ids: tuple  # candidate photo ids (str)
  flickr_ranks: np.ndarray  # [n] Flickr rank within the topic; inf for other topics' photos
  query: Optional[np.ndarray] = None  # [d] L2-normalised query feature
  features: Optional[np.ndarray] = None  # [n, d] L2-normalised photo features

  def __len__(self) -> int:
    return len(self.photo_ids)

  @property
  def similarities(self) -> np.ndarray:
    return self.features @ self.query


def check_protocol(protocol: str) -> None:
  if protocol not in PROTOCOLS:
    raise ValueError(f'unknown protocol {protocol!r}; expected one of {PROTOCOLS}')


def build_candidates(split: Split, store: Optional[features_lib.FeatureStore], protocol: str,
                     num_candidates: int = DEFAULT_GLOBAL_CANDIDATES) -> list:
  """One `TopicCandidates` per topic of `split`, in topic order.

  Without a feature store only the `pool` protocol is possible, and the candidates carry no
  features (enough for the Flickr-order baseline).
  """
  check_protocol(protocol)
  if protocol == 'global' and store is None:
    raise ValueError('the global protocol ranks by similarity and needs a feature store')
  index = store.photo_index() if store is not None else None
  collection = np.asarray(store.photos) if store is not None else None
  out = []
  for topic in split.topics:
    rank_of = {p.photo_id: p.rank for p in split.photos[topic.number]}
    query = store.query_feature(topic.number) if store is not None else None
    if protocol == 'pool':
      ids = sorted(split.ground_truth[topic.number].relevance,
                   key=lambda p: (rank_of.get(p, np.inf), p))
      feats = collection[store.rows_for(ids, index)] if store is not None else None
    else:
      sims = collection @ query
      n = min(num_candidates, sims.shape[0])
      top = np.argpartition(-sims, n - 1)[:n]
      top = top[np.lexsort((top, -sims[top]))]
      ids = [str(store.photo_ids[i]) for i in top]
      feats = collection[top]
    ranks = np.array([rank_of.get(p, np.inf) for p in ids], np.float64)
    out.append(TopicCandidates(topic=topic.number, photo_ids=tuple(ids), flickr_ranks=ranks,
                               query=query, features=feats))
  return out


def pool_lead(split: Split, store: features_lib.FeatureStore) -> np.ndarray:
  """Per topic of `split` (topic order): how many photos the global protocol's order (the
  whole collection by similarity to the query, ties by row) lists before the first photo that
  is not in the topic's pool. In a topic where it reaches a list's length, a list drawn from
  the most similar photos is the same under both protocols."""
  index = store.photo_index()
  collection = np.asarray(store.photos)
  rows = np.arange(collection.shape[0])
  out = []
  for topic in split.topics:
    sims = collection @ store.query_feature(topic.number)
    own = np.zeros(len(sims), bool)
    own[store.rows_for(sorted(split.ground_truth[topic.number].relevance), index)] = True
    foreign = np.flatnonzero(~own[np.lexsort((rows, -sims))])
    out.append(int(foreign[0]) if foreign.size else len(sims))
  return np.asarray(out, np.int64)
