"""Would other signals move the relevance model? Pool context and photo metadata, measured by
the relevance AUC on held-out topics (`experiments/diagnose.py --what signals`; not in the
paper, a diagnostic: it chooses nothing).

The lists of `colt-pairs relevance` gain most from a better relevance r (docs/RESULTS.md, "How
far could better heads take colt-pairs' list rule?"), and phi's r is no better than the
gradient-boosted relevance model beside it (`colt_jax/pairs/relevance_model.py`), which reads each
photo alone: its text cosine to the query, its place in the pool and its ten descriptors. Two
signals it does not read, each added to it and fitted on every cross-validation fold's
training topics:

* **pool context**, what phi's attention could add: stacking. The model's out-of-fold r on the
  training topics (`INNER_FOLDS` parts, each predicted by a model fitted on the others), then
  a second gradient-boosted model over the photo's own features, its r, the mean r of its 3
  and 10 nearest photos of the pool by text and by the descriptors, a similarity-weighted mean
  r, the pool's mean and spread of r and the photo's z-score in it (`context_features`).
  Held-out topics: r of the model fitted on every training topic, then the second model. It
  tests what summaries of the model's own r over the pool add, not every use attention could
  make of the other photos' features: evidence, not a bound.
* **photo metadata** that gbt-pairs' logistic relevance reads and a view store does not hold
  (`gbt_pairs.photo_features`: log Flickr rank, log views, number of tags, log description
  length, log km to the topic's location and whether it is missing), beside the model's own
  features, the same classifier.

Scored: per held-out topic, the ROC AUC of rGT 1 against 0 among phi's N candidates (the
feature setting and N of the `colt-pairs relevance` row), paired per topic with the model.
"""
from __future__ import annotations

import time
from typing import Callable, Mapping, Optional

import numpy as np
import threadpoolctl

from colt_jax.baselines import gbt_pairs
from colt_jax.data import views as views_lib
from colt_jax.evaluation import significance
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inputs.examples import token_sequences
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.reproduction.cross_validation import Reproduction
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction import variants as variants_lib
from colt_jax.util.errors import InputError
from colt_jax.util.numerics import l2_normalise

VARIANT = 'colt-pairs relevance'
INNER_FOLDS = 3
NEIGHBOURS = (3, 10)
TEMPERATURE = 0.1  # of the similarity-weighted mean r (softmax of cosine / TEMPERATURE)
# The column of `context_features` of the mean r of the 10 nearest photos by text.
TEXT_NEAREST_10 = 1 + NEIGHBOURS.index(10)
CONDITIONS = ('model', 'model + pool context', 'model + photo metadata',
              "neighbours' r alone")


def signals_path(dataset: str) -> str:
  """Where `experiments/diagnose.py --what signals` writes its JSON (and the report reads it)."""
  return f'docs/results/{dataset}-relevance-signals.json'


def topic_pools(split, store, num_images: int) -> list:
  """[(topic, query [d], features [n, d], metadata [n, m], rGT labels [n])] of every topic of
  `split`: phi's N candidates in its token order (`token_sequences`), as `relevance_model`
  reads them, with their photo metadata (`gbt_pairs.photo_features`, its columns beyond the
  cosine ones)."""
  cands = candidates_lib.build_candidates(split, store, 'pool')
  if not cands:
    return []
  seqs = token_sequences(cands, num_images)
  meta = gbt_pairs.photo_metadata(split)
  skip = len(relevance_lib.QUERY_FEATURES)  # the cosine columns both tables share
  out = []
  for t, c in enumerate(cands):
    ids = seqs.photo_ids[t]
    where = {p: i for i, p in enumerate(c.photo_ids)}
    rows = np.array([where[p] for p in ids], np.int64)
    rel = split.ground_truth[c.topic].relevance
    out.append((c.topic, seqs.tokens[t, 0], seqs.tokens[t, 1:1 + len(ids)],
                gbt_pairs.photo_features(split, c, meta)[rows, skip:],
                np.array([rel.get(p, 0) for p in ids], np.int64)))
  return out


def context_features(features: np.ndarray, r: np.ndarray, parts) -> np.ndarray:
  """[n, 1 + 3 per similarity + 3]: a pool's r and what its other photos' r say of each photo
  (module doc): per similarity (text; the descriptors' mean, when the rows have them) the
  mean r of the 3 and the 10 nearest, and a similarity-weighted mean r (NaN, "missing" to the
  classifier, in a pool of one photo); then the pool's mean and spread of r and the photo's
  z-score in it."""
  x = np.asarray(features, np.float64)
  text = l2_normalise(x[:, :parts[0][1]])
  descs = [l2_normalise(x[:, s]) for _, s in relevance_lib.descriptor_slices(parts)]
  sims = [text @ text.T]
  if descs:
    sims.append(sum(d @ d.T for d in descs) / len(descs))
  n = len(r)
  cols = [r]
  for s in sims:
    if n < 2:  # no other photo
      cols += [np.full(n, np.nan)] * (len(NEIGHBOURS) + 1)
      continue
    s = s.copy()
    np.fill_diagonal(s, -np.inf)
    order = np.argsort(-s, axis=1, kind='stable')
    cols += [r[order[:, :min(k, n - 1)]].mean(axis=1) for k in NEIGHBOURS]
    w = np.exp((np.where(np.isfinite(s), s, -np.inf) - 1.0) / TEMPERATURE)  # cosines <= 1
    cols.append(w @ r / w.sum(axis=1))
  cols += [np.full(n, r.mean()), np.full(n, r.std()), (r - r.mean()) / (r.std() + 1e-6)]
  return np.stack(cols, axis=1)


def _proba(clf, x: np.ndarray) -> np.ndarray:
  """P(relevant) [n] of the rows x."""
  with threadpoolctl.threadpool_limits(1, user_api='openmp'):
    return clf.predict_proba(x)[:, 1]


def _labelled(pools, tables):
  """(rows, labels) of the photos of `pools` with an rGT label (-1 left out), `tables` their
  feature rows, pool by pool."""
  x = np.concatenate([t[p[-1] >= 0] for p, t in zip(pools, tables)])
  y = np.concatenate([p[-1][p[-1] >= 0] == 1 for p in pools])
  return x, y


def _fit(pools: list, parts, config) -> relevance_lib.RelevanceModel:
  """The relevance model (`relevance_model.fit`) of `pools` (topic_pools' tuples)."""
  return relevance_lib.fit([(q, f, y) for _, q, f, _, y in pools], parts, config)


def _own(pool, parts) -> np.ndarray:
  """The relevance model's own features of a pool's photos."""
  return relevance_lib.pool_features(pool[1], pool[2], parts)


def _stacked(pool, r: np.ndarray, parts) -> np.ndarray:
  """The model's features, then its r over the pool (`context_features`)."""
  return np.concatenate([_own(pool, parts), context_features(pool[2], r, parts)], axis=1)


def _with_metadata(pool, parts) -> np.ndarray:
  """The model's features, then the photos' metadata."""
  return np.concatenate([_own(pool, parts), pool[3]], axis=1)


def out_of_fold(pools: list, parts, config, seed: int = 0) -> list:
  """r of every pool by a relevance model fitted on the other `INNER_FOLDS` - 1 parts of
  `pools` (a seeded partition of the topics)."""
  part = np.random.default_rng(seed).permutation(len(pools)) % INNER_FOLDS
  out = [None] * len(pools)
  for k in range(INNER_FOLDS):
    model = _fit([p for p, q in zip(pools, part) if q != k], parts, config)
    for i in np.flatnonzero(part == k):
      out[i] = model.predict(pools[i][1], pools[i][2])
  return out


def fold_scores(train_pools: list, held_pools: list, parts, seed: int = 0) -> dict:
  """{topic: {condition: relevance AUC}} of the held-out pools (topics with relevant and
  irrelevant photos), every model fitted on `train_pools` alone."""
  from sklearn.metrics import roc_auc_score  # pylint: disable=g-import-not-at-top
  config = relevance_lib.RelevanceConfig(seed=seed)
  oof = out_of_fold(train_pools, parts, config, seed)
  context = relevance_lib.fit_classifier(*_labelled(
      train_pools, [_stacked(p, r, parts) for p, r in zip(train_pools, oof)]), config)
  metadata = relevance_lib.fit_classifier(*_labelled(
      train_pools, [_with_metadata(p, parts) for p in train_pools]), config)
  model = _fit(train_pools, parts, config)
  out = {}
  for pool in held_pools:
    y = pool[-1]
    keep = y >= 0
    truth = y[keep] == 1
    if truth.all() or not truth.any():
      continue
    r = model.predict(pool[1], pool[2])
    context_of_r = context_features(pool[2], r, parts)
    stacked = np.concatenate([_own(pool, parts), context_of_r], axis=1)
    auc = lambda scores, truth=truth, keep=keep: float(roc_auc_score(truth, scores[keep]))
    out[str(pool[0])] = {
        'model': auc(r),
        'model + pool context': auc(_proba(context, stacked)),
        'model + photo metadata': auc(_proba(metadata, _with_metadata(pool, parts))),
        "neighbours' r alone": auc(context_of_r[:, TEXT_NEAREST_10]),
    }
  return out


def diagnose(cfg: ReproduceConfig, log: Callable = print,
             rep: Optional[Reproduction] = None) -> dict:
  """Every fold's held-out topics by `fold_scores`: {'variant', 'num_images', 'views',
  'folds', 'of_folds', 'topics', 'seconds'}."""
  variant = variants_lib.row(VARIANT)
  if rep is None:
    rep = Reproduction(cfg, log)
    rep.load()
  out = {'variant': VARIANT, 'views': variant.view_spec.name, 'folds': [], 'topics': {}}
  t0 = time.perf_counter()
  for fold, tag, train, held in rep.cv_folds():
    num_images = rep.trainer.configs_for(variant, cfg.seeds[0], tag, 'pool')[1].num_images
    train_v, held_v = rep.viewed(variant.view_spec, train, held)
    parts = views_lib.token_parts(train_v[1])
    scores = fold_scores(topic_pools(*train_v, num_images), topic_pools(*held_v, num_images),
                         parts)
    out['topics'].update(scores)
    out['folds'].append({'fold': fold.index, 'train_topics': len(fold.train_topics),
                         'held_topics': len(scores)})
    out['num_images'] = num_images
    log(f' fold {fold.index}: {len(scores)} held-out topics scored '
        f'({time.perf_counter() - t0:.0f} s)')
  if not out['topics']:
    raise InputError('relevance signals: no held-out topic has relevant and irrelevant photos')
  out['of_folds'] = cfg.folds
  out['seconds'] = time.perf_counter() - t0
  return out


def summary_lines(result: Mapping) -> list:
  """Markdown: the mean relevance AUC of each condition, paired per topic with the model."""
  topics = result['topics']
  mean = lambda c: float(np.mean([t[c] for t in topics.values()]))
  folds = len(result['folds'])
  out = [
      f'Generated by `{result.get("command", "")}` over {folds} of '
      f'{result.get("of_folds", folds)} folds ({len(topics)} held-out topics with relevant '
      f'and irrelevant photos): the relevance model of `{result["variant"]}` '
      f'({result["views"]}, N = {result["num_images"]}) and the same classifier given more '
      'signals, each fitted on the fold\'s training topics '
      '(`colt_jax/reproduction/diagnostics/relevance_signals.py`); the ROC AUC of rGT 1 against 0 among each '
      'held-out topic\'s N candidates, paired per topic with the model (95% bootstrap '
      'interval). Scored on held-out topics: it chooses nothing.', '',
      '| relevance r | AUC | AUC - model |', '|---|---|---|'
  ]
  for c in CONDITIONS:
    diff = ('-' if c == 'model' else significance.paired_difference(
        {t: v[c] for t, v in topics.items()}, {t: v['model'] for t, v in topics.items()}).text())
    out.append(f'| {c} | {mean(c):.4f} | {diff} |')
  return out + ['']
