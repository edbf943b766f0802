"""`gbt-pairs`: a learned non-neural baseline on the signals CoLT sees (text features,
official visual descriptors, Flickr metadata), fitted on the training topics' rGT and dGT.

* P(same cluster) of two candidates of a topic: scikit-learn's HistGradientBoostingClassifier
  over `PAIR_FEATURES` (plus one cosine per official descriptor when the split has them, each
  descriptor z-scored with the training photos' statistics, `views.fit`). Trained on pairs of
  photos that both have a dGT cluster, at most `max_pairs` of them (a seeded uniform sample),
  with class-balanced sample weights; predictions are mapped back to the training pairs' base
  rate (odds times pi / (1 - pi)), so that they read as probabilities.
* P(relevant) of a candidate: logistic regression (standardised `PHOTO_FEATURES`) on rGT 1
  vs 0 (-1 left out; under the global protocol a photo of another topic is a 0).
* The list: `greedy.expected_coverage` with weight w (tuned on out-of-fold predictions of
  the training topics, `cross_fit`).

Missing metadata (no location: absent or Div400's 0, 0; no date) gives the value -1 and a
missing flag. Everything is deterministic for a given `seed`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Optional, Sequence

import numpy as np
import threadpoolctl

from colt_jax.data import features as features_lib
from colt_jax.data import folds as folds_lib
from colt_jax.data import views as views_lib
from colt_jax.data.types import Split
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.baselines import greedy
from colt_jax.util.errors import InputError
from colt_jax.util.numerics import l2_normalise

PAIR_FEATURES = ('text_cosine', 'same_user', 'same_day', 'days_apart', 'days_missing',
                 'km_apart', 'km_missing', 'rank_gap', 'tag_jaccard')
PHOTO_FEATURES = ('query_cosine', 'cosine_minus_best', 'cosine_z', 'cosine_rank',
                  'log_flickr_rank', 'log_views', 'num_tags', 'log_description_length',
                  'log_km_to_topic', 'km_missing')
MISSING = -1.0
EARTH_KM = 6371.0
# The version of gbt-pairs in the row cache's keys (`versions`): raise it with any change of
# what `fit`, `predict`, `cross_fit` or `select` return (its golden test,
# tests/baselines/test_baseline_versions.py, says when).
VERSIONS = {'gbt-pairs': 1}


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
  """How `fit` trains (configuration as data)."""
  max_pairs: int = 200_000  # pairs the pair model is fitted on (seeded uniform sample)
  seed: int = 0
  descriptors: Optional[tuple] = None  # None: the official ones the training split has
  max_iter: int = 200  # boosting rounds
  learning_rate: float = 0.1
  max_leaf_nodes: int = 31
  relevance_c: float = 0.01  # the logistic regression's inverse L2 strength (chosen on dev)
  threads: int = 1  # OpenMP threads of the boosting (1: more would oversubscribe busy cores)

  def __post_init__(self):
    if (min(self.max_pairs, self.max_iter, self.threads) < 1
        or not min(self.learning_rate, self.relevance_c) > 0):
      raise InputError(f'gbt-pairs: max_pairs, max_iter, threads, learning_rate and '
                       f'relevance_c must be positive, got {self}')
    if self.descriptors is not None:
      views_lib.ViewSpec(descriptors=tuple(self.descriptors))  # checks the names


DEFAULT = LearnerConfig()  # what `fit` and `cross_fit` use when given no config


@dataclasses.dataclass(frozen=True)
class TopicScores:
  """Predictions for one topic's candidates."""
  topic: int
  photo_ids: tuple
  relevance: np.ndarray  # float32 [n]: P(relevant)
  pair_prob: np.ndarray  # float32 [n, n]: P(same cluster), symmetric, 1 on the diagonal


class _Topic:
  """One topic's candidates with what the features need: metadata arrays and Gram matrices."""

  def __init__(self, split: Split, cands: candidates_lib.TopicCandidates, meta: Mapping,
               descriptor_units: Mapping[str, np.ndarray]):
    self.cands = cands
    missing = [p for p in cands.photo_ids if p not in meta]
    if missing:
      raise InputError(f'gbt-pairs: photo {missing[0]} (a candidate of topic {cands.topic}) '
                       f'has no metadata in {split.dataset}/{split.split}')
    photos = [meta[p] for p in cands.photo_ids]
    feats = np.asarray(cands.features, np.float32)
    self.gram = feats @ feats.T
    self.sims = feats @ np.asarray(cands.query, np.float32)
    self.desc = {d: u @ u.T for d, u in descriptor_units.items()}
    self.users = np.array([p.user_id or '' for p in photos])
    self.day = np.array([p.date_taken[:10] if p.date_taken else '' for p in photos])
    self.time = np.array([_days(p.date_taken) for p in photos])
    self.lat, self.lon = _coords(photos)
    self.rank = np.array([p.rank for p in photos], np.float64)
    self.views = np.array([p.views for p in photos], np.float64)
    self.desc_len = np.array([len(p.description) for p in photos], np.float64)
    tags = [set(p.tags.lower().split()) for p in photos]
    vocab = {t: i for i, t in enumerate(sorted(set().union(*tags)))} if tags else {}
    rows = [i for i, ts in enumerate(tags) for _ in ts]
    cols = [vocab[t] for ts in tags for t in sorted(ts)]
    from scipy import sparse  # pylint: disable=g-import-not-at-top  # on first use
    self.tags = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)),
                                  shape=(len(photos), max(len(vocab), 1)))
    self.num_tags = np.array([len(ts) for ts in tags], np.float64)
    topic = split.topic(cands.topic)
    self.topic_km = _km(self.lat, self.lon, topic.latitude, topic.longitude)

  def pair_features(self, i: np.ndarray, j: np.ndarray, descriptors: Sequence[str]):
    """[m, len(PAIR_FEATURES) + len(descriptors)] float32 for the pairs (i[m], j[m])."""
    same_user = (self.users[i] != '') & (self.users[i] == self.users[j])
    same_day = (self.day[i] != '') & (self.day[i] == self.day[j])
    days = np.abs(self.time[i] - self.time[j])
    km = _km(self.lat[i], self.lon[i], self.lat[j], self.lon[j])
    inter = np.asarray(self.tags[i].multiply(self.tags[j]).sum(axis=1)).ravel()
    union = self.num_tags[i] + self.num_tags[j] - inter
    cols = [self.gram[i, j], same_user, same_day, np.nan_to_num(days, nan=MISSING),
            np.isnan(days), np.nan_to_num(km, nan=MISSING), np.isnan(km),
            np.abs(self.rank[i] - self.rank[j]), np.where(union > 0, inter / np.maximum(union, 1),
                                                         0.0)]
    cols += [self.desc[d][i, j] for d in descriptors]
    return np.stack(cols, axis=1).astype(np.float32)

  def photo_features(self):
    """[n, len(PHOTO_FEATURES)] float32."""
    s = self.sims.astype(np.float64)
    order = np.argsort(-s, kind='stable')
    rank = np.empty(len(s))
    rank[order] = np.arange(len(s)) / max(len(s), 1)
    km = self.topic_km
    cols = [s, s - s.max(), (s - s.mean()) / (s.std() + 1e-6), rank, np.log(self.rank),
            np.log1p(self.views), self.num_tags, np.log1p(self.desc_len),
            np.nan_to_num(np.log1p(km), nan=MISSING), np.isnan(km)]
    return np.stack(cols, axis=1).astype(np.float32)


def _days(date: Optional[str]) -> float:
  """Days since 1970 of 'YYYY-MM-DD HH:MM:SS' (NaN when absent or not a valid date)."""
  try:
    stamp = np.datetime64(date.strip().replace(' ', 'T'), 's')
  except (AttributeError, ValueError):
    return np.nan
  return float(stamp.astype(np.int64)) / 86400.0


def _coords(photos) -> tuple:
  lat = np.array([p.latitude if p.latitude is not None else np.nan for p in photos], np.float64)
  lon = np.array([p.longitude if p.longitude is not None else np.nan for p in photos],
                 np.float64)
  none = (lat == 0) & (lon == 0)  # Div400's "no location"
  return np.where(none, np.nan, lat), np.where(none, np.nan, lon)


def _km(lat1, lon1, lat2, lon2) -> np.ndarray:
  """Great-circle distance in km (haversine); NaN where a coordinate is missing."""
  lat1, lon1, lat2, lon2 = (np.radians(np.asarray(x if x is not None else np.nan, np.float64))
                            for x in (lat1, lon1, lat2, lon2))
  a = (np.sin((lat2 - lat1) / 2) ** 2
       + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2)
  return 2 * EARTH_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def photo_metadata(split: Split) -> dict:
  """photo id -> its `Photo` (Flickr metadata), over every topic of `split`."""
  meta = {}
  for photos in split.photos.values():
    for p in photos:
      meta.setdefault(p.photo_id, p)
  return meta


def available_descriptors(split: Split) -> tuple:
  """The official descriptors whose `descvis/img/<title> <D>.csv` every topic of `split` has
  (each topic in its own split directory, `Split.root_of`)."""
  return tuple(d for d in views_lib.ALL_DESCRIPTORS
               if split.topics and all(os.path.isfile(os.path.join(
                   split.root_of(t.number), 'descvis', 'img', f'{t.title} {d}.csv'))
                                       for t in split.topics))


def _descriptor_units(transform: Optional[views_lib.ViewTransform],
                      raw: Optional[views_lib.RawViews], photo_ids: Sequence[str]) -> dict:
  """descriptor -> [n, dim] unit rows of the z-scored descriptor (training statistics)."""
  if transform is None:
    return {}
  rows = raw.rows(photo_ids, 'gbt-pairs descriptors')
  out, start = {}, 0
  for name, dim in zip(raw.descriptor_names, raw.descriptor_dims):
    if name in transform.mean:
      x = raw.descriptors[rows, start:start + dim].astype(np.float64)
      out[name] = l2_normalise((x - transform.mean[name]) / transform.std[name])
    start += dim
  return out


def _topics(split, store, protocol, transform, raw) -> list:
  meta = photo_metadata(split)
  return [_Topic(split, c, meta, _descriptor_units(transform, raw, c.photo_ids))
          for c in candidates_lib.build_candidates(split, store, protocol)]


@dataclasses.dataclass(frozen=True)
class PairLearner:
  """The fitted models of `gbt-pairs` and what prediction needs to reproduce the features."""
  config: LearnerConfig
  pair_model: object  # sklearn HistGradientBoostingClassifier
  relevance_model: object  # sklearn Pipeline: StandardScaler + LogisticRegression
  descriptors: tuple  # descriptor cosines among the pair features (may be empty)
  transform: Optional[views_lib.ViewTransform]  # their training statistics
  pair_prior: float  # share of same-cluster pairs among the training pairs

  def predict(self, split: Split, store: features_lib.FeatureStore, protocol: str,
              raw: Optional[views_lib.RawViews] = None) -> list:
    """One `TopicScores` per topic of `split` (candidates of `protocol`)."""
    if self.descriptors and raw is None:
      raw = _read_descriptors(split, self.descriptors)
    out = []
    for t in _topics(split, store, protocol, self.transform, raw):
      n = len(t.cands)
      i, j = np.triu_indices(n, 1)
      prob = np.ones((n, n), np.float32)
      if len(i):
        with threadpoolctl.threadpool_limits(self.config.threads, user_api='openmp'):
          p = self.pair_model.predict_proba(t.pair_features(i, j, self.descriptors))[:, 1]
        p = _unbalance(p, self.pair_prior)
        prob[i, j] = prob[j, i] = p
      rel = self.relevance_model.predict_proba(t.photo_features())[:, 1].astype(np.float32)
      out.append(TopicScores(t.cands.topic, t.cands.photo_ids, rel, prob))
    return out

  def rank(self, split: Split, store: features_lib.FeatureStore, protocol: str, k: int = 50,
           weight: float = 0.5) -> dict:
    """topic -> [(photo id, score)]: expected coverage over the predictions (module doc)."""
    return select(self.predict(split, store, protocol), weight=weight, k=k)


def photo_features(split: Split, cands: candidates_lib.TopicCandidates,
                   meta: Optional[Mapping] = None) -> np.ndarray:
  """[n, len(PHOTO_FEATURES)] float32 of a topic's candidates (their order): what gbt-pairs'
  relevance model reads (`meta`: `photo_metadata(split)`, read once for many topics)."""
  return _Topic(split, cands, photo_metadata(split) if meta is None else meta,
                {}).photo_features()


def _unbalance(p: np.ndarray, prior: float) -> np.ndarray:
  """Probabilities of a model fitted with class-balanced weights, back at base rate `prior`."""
  odds = p / np.maximum(1.0 - p, 1e-12) * (prior / (1.0 - prior))
  return (odds / (1.0 + odds)).astype(np.float32)


def _read_descriptors(split: Split, names: Sequence[str]) -> views_lib.RawViews:
  missing = sorted(set(names) - set(available_descriptors(split)))
  if missing:
    raise InputError(f'gbt-pairs: the model uses descriptors {missing} that '
                     f'{split.dataset}/{split.split} lacks (descvis/img)')
  return views_lib.read_raw([split], tuple(names))


def fit(split: Split, store: features_lib.FeatureStore, protocol: str = 'pool',
        config: Optional[LearnerConfig] = None,
        raw: Optional[views_lib.RawViews] = None) -> PairLearner:
  """Fits both models on every topic of `split` (the training topics only)."""
  config = config or DEFAULT
  names = available_descriptors(split) if config.descriptors is None else config.descriptors
  names, transform = tuple(names), None
  if names:
    raw = raw if raw is not None else _read_descriptors(split, names)
    transform = views_lib.fit(views_lib.ViewSpec(descriptors=names), raw, split.all_photo_ids())
  topics = _topics(split, store, protocol, transform, raw)
  # Pairs of photos that both have a cluster: enumerated per topic, sampled, then featurised.
  clustered = []
  for t in topics:
    gt = split.ground_truth[t.cands.topic]
    pos = np.array([i for i, p in enumerate(t.cands.photo_ids) if p in gt.clusters], np.int64)
    clustered.append((pos, np.array([gt.clusters[t.cands.photo_ids[i]] for i in pos])))
  counts = np.array([len(pos) * (len(pos) - 1) // 2 for pos, _ in clustered], np.int64)
  total = int(counts.sum())
  rng = np.random.default_rng(config.seed)
  chosen = np.sort(rng.choice(total, size=min(total, config.max_pairs), replace=False))
  offsets = np.concatenate([[0], np.cumsum(counts)])
  x, y = [], []
  for t, (pos, cluster), lo, hi in zip(topics, clustered, offsets[:-1], offsets[1:]):
    local = chosen[(chosen >= lo) & (chosen < hi)] - lo
    a, b = (u[local] for u in np.triu_indices(len(pos), 1))
    x.append(t.pair_features(pos[a], pos[b], names))
    y.append(cluster[a] == cluster[b])
  x, y = np.concatenate(x), np.concatenate(y)
  prior = float(y.mean()) if len(y) else 0.0
  if not 0.0 < prior < 1.0:
    raise InputError(f'gbt-pairs: the training topics of {split.dataset}/{split.split} need '
                     f'pairs of photos in the same and in different dGT clusters ({len(y)} '
                     'pairs)')
  weights = np.where(y, 0.5 / prior, 0.5 / (1.0 - prior))
  # scikit-learn on first use: ~1.4 s of every command's start otherwise.
  from sklearn.ensemble import HistGradientBoostingClassifier  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  from sklearn.pipeline import make_pipeline  # pylint: disable=g-import-not-at-top
  from sklearn.preprocessing import StandardScaler  # pylint: disable=g-import-not-at-top
  pair_model = HistGradientBoostingClassifier(
      max_iter=config.max_iter, learning_rate=config.learning_rate,
      max_leaf_nodes=config.max_leaf_nodes, early_stopping=False, random_state=config.seed)
  with threadpoolctl.threadpool_limits(config.threads, user_api='openmp'):
    pair_model.fit(x, y, sample_weight=weights)
  # Relevance: every candidate with an rGT value of 1 or 0 (other topics' photos: 0).
  px, py = [], []
  for t in topics:
    rel = split.ground_truth[t.cands.topic].relevance
    labels = np.array([rel.get(p, 0) for p in t.cands.photo_ids])
    px.append(t.photo_features()[labels >= 0])
    py.append(labels[labels >= 0] == 1)
  py = np.concatenate(py)
  if py.all() or not py.any():
    raise InputError(f'gbt-pairs: the training topics of {split.dataset}/{split.split} need '
                     'relevant and irrelevant photos')
  relevance_model = make_pipeline(StandardScaler(), LogisticRegression(C=config.relevance_c,
                                                                     max_iter=1000))
  relevance_model.fit(np.concatenate(px), py)
  return PairLearner(config, pair_model, relevance_model, names, transform, prior)


def select(scores: Sequence[TopicScores], *, weight: float, k: int = 50) -> dict:
  """topic -> [(photo id, score)]: `greedy.expected_coverage` of every topic (one batch,
  padded to the largest topic)."""
  if not scores:
    return {}
  n = max(len(s.photo_ids) for s in scores)
  rel = np.zeros((len(scores), n), np.float32)
  prob = np.zeros((len(scores), n, n), np.float32)
  valid = np.zeros((len(scores), n), bool)
  for b, s in enumerate(scores):
    m = len(s.photo_ids)
    rel[b, :m], prob[b, :m, :m], valid[b, :m] = s.relevance, s.pair_prob, True
  picked = greedy.expected_coverage_batch(rel, prob, valid, weight=weight, k=min(k, n))
  return {s.topic: [(s.photo_ids[int(i)], float(v))
                    for i, v in zip(picked.indices[b], picked.scores[b]) if i >= 0]
          for b, s in enumerate(scores)}


def cross_fit(split: Split, store: features_lib.FeatureStore, protocol: str = 'pool',
              config: Optional[LearnerConfig] = None, folds: int = 3) -> list:
  """Out-of-fold `TopicScores` of every topic of `split`: each topic predicted by a learner
  fitted on the other folds (`folds.kfold`, seeded by `config.seed`); for choosing w."""
  config = config or DEFAULT
  names = available_descriptors(split) if config.descriptors is None else config.descriptors
  config = dataclasses.replace(config, descriptors=tuple(names))
  raw = _read_descriptors(split, names) if names else None
  out = {}
  for fold in folds_lib.kfold(split.topic_numbers, min(folds, len(split.topics)), config.seed):
    train = folds_lib.subset(split, store, fold.train_topics, f'{split.split}-train')
    held = folds_lib.subset(split, store, fold.test_topics, f'{split.split}-held')
    learner = fit(*train, protocol, config, raw)
    out.update({s.topic: s for s in learner.predict(*held, protocol, raw)})
  return [out[t] for t in split.topic_numbers]
