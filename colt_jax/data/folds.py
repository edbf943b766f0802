"""Topic subsets of a dataset: merging splits, restricting to topics, k-fold cross-validation.

Div400's dev split has only 25 topics, so besides the official dev -> test evaluation the
results are also cross-validated over all topics of both splits (`kfold`). A fold's train and
held-out parts are ordinary `(Split, FeatureStore)` pairs (`subset`), so every trainer,
method and metric runs on them unchanged. A subset's store keeps only its topics' photos and
queries: under the global protocol a held-out fold searches its own photos only, never the
training topics' photos.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.data.types import Split


def merge(parts: Sequence[tuple], name: str = 'all') -> tuple:
  """One `(Split, FeatureStore)` holding the topics of every `(Split, FeatureStore)` part.

  The stores must share the encoder and the category vocabulary; topic numbers must be
  distinct across parts. A photo id present in several parts must have the same features.
  """
  if not parts:
    raise ValueError('merge needs at least one (split, store) part')
  splits = [s for s, _ in parts]
  stores = [f for _, f in parts]
  first = stores[0]
  for split, store in parts[1:]:
    where = store.meta.get('path', f'{split.dataset}/{split.split} store')
    if store.meta.get('encoder') != first.meta.get('encoder'):
      raise ValueError(f'{where}: encoder {store.meta.get("encoder")!r} differs from '
                       f'{first.meta.get("encoder")!r}')
    if list(store.category_names) != list(first.category_names):
      raise ValueError(f'{where}: category vocabulary differs from the first store\'s')
  numbers = [t.number for s in splits for t in s.topics]
  if len(set(numbers)) != len(numbers):
    dup = next(n for n in numbers if numbers.count(n) > 1)
    raise ValueError(f'topic {dup} appears in more than one part')
  photo_rows, photo_ids, seen = [], [], {}
  for store in stores:
    photos = np.asarray(store.photos)
    for i, p in enumerate(store.photo_ids):
      p = str(p)
      if p in seen:
        if not np.allclose(photo_rows[seen[p]], photos[i], atol=1e-6):
          raise ValueError(f'photo {p} has different features in two stores')
        continue
      seen[p] = len(photo_ids)
      photo_ids.append(p)
      photo_rows.append(photos[i])
  split = Split(dataset=splits[0].dataset, split=name, root=splits[0].root,
                topics=[t for s in splits for t in s.topics],
                photos={k: v for s in splits for k, v in s.photos.items()},
                ground_truth={k: v for s in splits for k, v in s.ground_truth.items()},
                topic_roots={t.number: s.root_of(t.number) for s in splits for t in s.topics
                             if s.root_of(t.number) != splits[0].root})
  store = features_lib.make_store(
      photos=np.stack(photo_rows), photo_ids=photo_ids,
      queries=np.concatenate([np.asarray(s.queries) for s in stores]),
      query_ids=np.concatenate([np.asarray(s.query_ids) for s in stores]),
      categories=np.asarray(first.categories), category_names=list(first.category_names),
      encoder=first.meta.get('encoder', ''), dataset=split.dataset, split=name,
      source=split.root, normalised=first.meta.get('normalisation') == 'l2',
      extra=_shared_encoder_settings(stores))
  return split, store


def _shared_encoder_settings(stores: Sequence[features_lib.FeatureStore]) -> dict:
  """The parts' 'encoder_settings' when they agree (how f's text tower encodes a query)."""
  settings = [s.meta.get('encoder_settings') for s in stores]
  return {'encoder_settings': settings[0]} if settings[0] and all(
      s == settings[0] for s in settings) else {}


def subset(split: Split, store: features_lib.FeatureStore, topics: Sequence[int],
           name: str) -> tuple:
  """`(Split, FeatureStore)` restricted to `topics` (their photos and queries only)."""
  wanted = set(int(t) for t in topics)
  unknown = sorted(wanted - set(split.topic_numbers))
  if unknown:
    raise ValueError(f'{split.dataset}/{split.split}: no topics {unknown[:5]}')
  kept = [t for t in split.topics if t.number in wanted]
  sub = Split(dataset=split.dataset, split=name, root=split.root, topics=kept,
              photos={t.number: split.photos[t.number] for t in kept},
              ground_truth={t.number: split.ground_truth[t.number] for t in kept},
              topic_roots={t.number: split.topic_roots[t.number] for t in kept
                           if t.number in split.topic_roots})
  photo_ids = sub.all_photo_ids()
  rows = store.rows_for(photo_ids)
  qindex = store.query_index()
  qrows = np.array([qindex[t.number] for t in kept], np.int64)
  meta = dict(store.meta)
  sub_store = features_lib.make_store(
      photos=np.asarray(store.photos)[rows], photo_ids=photo_ids,
      queries=np.asarray(store.queries)[qrows], query_ids=[t.number for t in kept],
      categories=np.asarray(store.categories), category_names=list(store.category_names),
      encoder=meta.get('encoder', ''), dataset=sub.dataset, split=name,
      source=meta.get('source', ''), normalised=meta.get('normalisation') == 'l2')
  return sub, sub_store


@dataclasses.dataclass(frozen=True)
class Fold:
  index: int
  train_topics: tuple
  test_topics: tuple


def kfold(topics: Sequence[int], k: int = 5, seed: int = 0) -> list:
  """k folds over `topics`: a seeded permutation cut into k near-equal held-out parts."""
  topics = sorted(int(t) for t in topics)
  if not 2 <= k <= len(topics):
    raise ValueError(f'k must be in [2, {len(topics)}], got {k}')
  order = np.random.default_rng(seed).permutation(len(topics))
  parts = np.array_split(order, k)
  folds = []
  for i, part in enumerate(parts):
    held = sorted(topics[j] for j in part)
    train = sorted(set(topics) - set(held))
    folds.append(Fold(i, tuple(train), tuple(held)))
  return folds
