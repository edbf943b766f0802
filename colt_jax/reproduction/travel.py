"""Without training: every post-processing method's grid scored on every topic under three
feature sets, the records of "parameters that travel" and of the model-free default's rule.

Feature sets (`FEATURE_SETS`), all over the same photo text (title, tags, description) and
query (the topic title):
- `minilm`: the reproduction's MiniLM text store (f).
- `tfidf`: a lexical encoder, scikit-learn's TfidfVectorizer (sublinear tf, l2 rows, terms in at
  least 2 photos) fitted on the text of the photos of a fold's training topics.
- `descvis`: MiniLM text + the ten official visual descriptors (`colt_jax.data.views`, the
  cross-validation's `cv_views`), the descriptors' statistics fitted on the photos of a fold's
  training topics (as the cross-validation's view stores are). A photo that belongs to a
  training and a held-out topic is a training photo of the fold, as in the cross-validation.
The two fitted sets (`FITTED`) have one record per cross-validation fold (`kfold`): fitted on
that fold's training topics' photos only, then scoring every topic, so that a fold's choices
(made on its training topics) and its held-out scores never see a held-out topic's text or
descriptor statistics. MiniLM fits nothing: one record serves every fold. Each store ranks
every topic's own photos (pool protocol, the official task) with each setting of `GRIDS`
(post-processing is deterministic: no seeds), and a record keeps every topic's P@20, CR@20 and
F1@20 (`records`), cached in the row cache under `KIND`, so that the report (`report_travel`)
and the default (`experiments/choose_model_free.py`) read them without computing anything.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import folds as folds_lib
from colt_jax.data import views as views_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.reproduction import model_free_rule as rule_lib

FEATURE_SETS = ('minilm', 'tfidf', 'descvis')
LABELS = {'minilm': 'MiniLM text', 'tfidf': 'TF-IDF text',
          'descvis': 'MiniLM text + descriptors'}
# Small grids (the whole table runs in minutes on 2 cores); UMONS's radius spans the cosine
# distances of dense (MiniLM) and sparse (TF-IDF) features alike. UMONS keeps min_samples 2
# and every method 200 candidates (MethodParams' defaults): not tuned.
GRIDS = {
    'topk': [{}],
    'mmr': [{'diversity': v} for v in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7)],
    'msd': [{'msd_tradeoff': v} for v in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7)],
    'dpp': [{'dpp_theta': v} for v in (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)],
    'umons': [{'umons_threshold': t, 'umons_eps': e} for t in (0.0, 0.3, 0.5)
              for e in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7)],
}
METRICS = ('P@20', 'CR@20', 'F1@20')
PROTOCOL = 'pool'
KIND = 'travel'  # the row cache's folder of these records
VERSION = 1  # raise when a change of this module's code changes what a record holds
TFIDF = {'sublinear_tf': True, 'min_df': 2, 'norm': 'l2'}
FITTED = ('tfidf', 'descvis')  # feature sets with statistics fitted on photos: one record a fold
FIT = 'photos of the fold\'s training topics'
TFIDF_TEXT = 'each topic\'s own text of a photo'  # in the TF-IDF records' key


def record_name(feature_set: str, fold: int, folds: int, seed: int) -> str:
  """The row cache's name of `feature_set`'s record for fold `fold` of `folds` seeded `seed`
  (the cross-validation's tag; one record for every fold when the set fits nothing)."""
  return f'{feature_set}-cv{folds}-seed{seed}-fold{fold}' if feature_set in FITTED else feature_set


def photo_ids(split, topics: Sequence[int]) -> list:
  """The ids of the photos of `topics` (sorted, each once)."""
  return sorted({p.photo_id for t in topics for p in split.photos[t]})


def tfidf_candidates(split, cands: Sequence[candidates_lib.TopicCandidates],
                     fit_topics: Sequence[int]) -> list:
  """`cands` (pool protocol, any store) with TF-IDF features fitted on the text of the photos
  of `fit_topics` alone: each topic's photos and query in an orthonormal basis of their span
  (every cosine unchanged), zero-padded to one width. A photo of several topics may have
  another text in each (Div400: 8 such photos): the fit reads the fit topics' own texts, each
  topic's photos are encoded with that topic's."""
  from sklearn.feature_extraction.text import TfidfVectorizer  # pylint: disable=g-import-not-at-top
  corpus = {}  # (photo id, text) of the fit topics, each once
  for t in fit_topics:
    for p in split.photos[t]:
      corpus[(p.photo_id, p.text)] = p.text
  vectorizer = TfidfVectorizer(**TFIDF).fit([corpus[k] for k in sorted(corpus)])
  titles = {t.number: t.title for t in split.topics}
  parts = []
  for c in cands:
    text = {p.photo_id: p.text for p in split.photos[c.topic]}
    photos = vectorizer.transform([text[p] for p in c.photo_ids]).tocsc()
    query = vectorizer.transform([titles[c.topic]]).tocsc()
    cols = np.union1d(photos.nonzero()[1], query.nonzero()[1])
    rows = np.concatenate([photos[:, cols].toarray(), query[:, cols].toarray()])
    # An orthonormal basis of the rows' span: every dot product kept, width n + 1 (not the
    # topic's thousands of terms), so the batched methods stay fast.
    basis = np.linalg.qr(rows.T, mode='reduced')[0] if len(cols) else np.zeros((0, 1))
    projected = rows @ basis
    parts.append((c, projected[:-1], projected[-1]))
  width = max(1, max(len(q) for _, _, q in parts))
  pad = lambda a: np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, width - a.shape[-1])])
  return [dataclasses.replace(c, features=pad(f).astype(np.float32),
                              query=pad(q).astype(np.float32)) for c, f, q in parts]


def score_grids(split, cands: Sequence[candidates_lib.TopicCandidates],
                grids: Mapping[str, Sequence[Mapping]] = GRIDS,
                log: Callable = print) -> dict:
  """{'topics', 'methods': {method: [{'setting', 'P@20': [per topic], 'CR@20', 'F1@20'}]}}:
  every setting of `grids` over `cands`, scored on `split`'s ground truth."""
  topics = [c.topic for c in cands]
  out = {}
  for method, grid in grids.items():
    out[method] = []
    for setting in grid:
      params = dataclasses.replace(evaluation.MethodParams(), **setting)
      per_topic = evaluation.score(split, evaluation.rank_baseline(method, cands, params)
                                   ).per_topic
      out[method].append({'setting': dict(setting), **{
          k: [float(per_topic[t][k]) for t in topics] for k in METRICS}})
      log(f'  {method} {setting}: F1@20 {np.mean(out[method][-1]["F1@20"]):.4f}')
  return {'topics': [int(t) for t in topics], 'methods': out}


def records(split, store, raw_views: Callable[[], views_lib.RawViews],
            spec: views_lib.ViewSpec, cached: Callable, folds: int, seed: int,
            log: Callable = print, only: Optional[Sequence[str]] = None) -> dict:
  """feature set -> [per fold of `folds_lib.kfold(topics, folds, seed)`: its record] (of
  those in `only`, when given), each computed (`score_grids`) unless the row cache
  (`cached(kind, name, key, compute)`, `RowCache.cached`) has it; a FITTED set's record of a
  fold is fitted on that fold's training topics' photos. `split`: every topic (dev + test);
  `store`: its MiniLM store (None will do for TF-IDF alone); `raw_views()` reads the
  descriptors (only when a descvis record is computed)."""
  topics = split.topic_numbers
  kfold = folds_lib.kfold(topics, folds, seed)
  base = {'version': VERSION, 'grids': GRIDS, 'protocol': PROTOCOL, 'topics': topics}
  raw = []  # the descriptors, read once

  def compute(feature_set: str, fit_topics: Optional[Sequence[int]]) -> dict:
    where = '' if fit_topics is None else f', fitted on {len(fit_topics)} training topics'
    log(f'[travel] {feature_set}{where}: {sum(len(g) for g in GRIDS.values())} settings over '
        f'{len(topics)} topics')
    if feature_set == 'tfidf':
      cands = tfidf_candidates(split, candidates_lib.build_candidates(split, None, PROTOCOL),
                               fit_topics)
    elif feature_set == 'descvis':
      if not raw:
        raw.append(raw_views())
      fitted = views_lib.fit(spec, raw[0], photo_ids(split, fit_topics))
      cands = candidates_lib.build_candidates(split, views_lib.apply(fitted, raw[0], store),
                                              PROTOCOL)
    else:
      cands = candidates_lib.build_candidates(split, store, PROTOCOL)
    out = dict(score_grids(split, cands, log=log), feature_set=feature_set)
    return out if fit_topics is None else dict(out, fit_topics=[int(t) for t in fit_topics])

  out = {}
  for feature_set in FEATURE_SETS:
    if only is not None and feature_set not in only:
      continue
    key = dict(base, feature_set=feature_set)
    if feature_set == 'tfidf':
      key.update(tfidf=TFIDF, text=TFIDF_TEXT)
    else:
      key['encoder'] = store.meta.get('encoder')
    if feature_set == 'descvis':
      key['views'] = dataclasses.asdict(spec)
    if feature_set not in FITTED:
      one = cached(KIND, feature_set, key, lambda e=feature_set: compute(e, None))
      out[feature_set] = [one] * len(kfold)
      continue
    out[feature_set] = []
    for fold in kfold:
      fold_key = dict(key, fit=FIT, fold=fold.index, fit_topics=list(fold.train_topics))
      out[feature_set].append(cached(
          KIND, record_name(feature_set, fold.index, folds, seed), fold_key,
          lambda e=feature_set, f=fold: compute(e, f.train_topics)))
  return out


def fold_tables(saved: Mapping[str, Optional[Sequence[Optional[Mapping]]]],
                kfold: Sequence[folds_lib.Fold]) -> Optional[dict]:
  """feature set -> [per fold: {method: [(setting, {metric: {topic: value}})]}] from the
  records `saved` (`saved_records`); None when one is missing, when a FITTED record was not
  fitted on its fold's training topics (records of other folds), when a record's grids are
  not `GRIDS` (settings are matched by position across records), or when a TF-IDF record was
  made otherwise than this code makes it: run reproduce.py."""
  grids = json.loads(json.dumps(GRIDS))
  out = {}
  for feature_set in FEATURE_SETS:
    recs = saved.get(feature_set)
    if not recs or len(recs) != len(kfold) or any(r is None for r in recs):
      return None
    out[feature_set] = []
    for rec, fold in zip(recs, kfold):
      if feature_set in FITTED and rec.get('fit_topics') != list(fold.train_topics):
        return None
      if {m: [r['setting'] for r in rows] for m, rows in rec['methods'].items()} != grids:
        return None
      key = rec.get('key')
      if feature_set == 'tfidf' and key is not None and (key.get('tfidf') != TFIDF
                                                         or key.get('text') != TFIDF_TEXT):
        return None
      out[feature_set].append({
          m: [(dict(r['setting']), {k: dict(zip(rec['topics'], r[k])) for k in METRICS})
              for r in rows] for m, rows in rec['methods'].items()})
  return out


def merged_scores(tables: Mapping[str, Sequence[Mapping]], kfold: Sequence,
                  metric: str = 'F1@20') -> rule_lib.Scores:
  """feature set -> method -> [(setting, {topic: metric})], each topic scored under the store
  of the fold that held it out (its TF-IDF and descriptors' statistics fitted without it)."""
  out = {}
  for feature_set, per_fold in tables.items():
    out[feature_set] = {}
    for method in per_fold[0]:
      grid = []
      for i, (setting, _) in enumerate(per_fold[0][method]):
        scores = {}
        for fold, table in zip(kfold, per_fold):
          scores.update({t: table[method][i][1][metric][t] for t in fold.test_topics})
        grid.append((setting, scores))
      out[feature_set][method] = grid
  return out


def saved_records(saved_row: Callable, folds: int, seed: int) -> dict:
  """feature set -> [per fold of `folds` seeded `seed`: its cached record
  (`RowCache.saved_row`), whatever its key, or None when absent]."""
  return {name: [saved_row(KIND, record_name(name, f, folds, seed)) for f in range(folds)]
          for name in FEATURE_SETS}


def missing(saved: Mapping) -> bool:
  """Whether a record of `saved_records` is absent."""
  return any(r is None for recs in saved.values() for r in recs)


def stage(rep) -> dict:
  """The reproduction's stage (`cross_validation.Reproduction` `rep`, loaded): every record,
  from the row cache or computed, per fold of the cross-validation (`rep.cfg.folds`,
  `rep.cfg.fold_seed`)."""
  spec = views_lib.ViewSpec(**dict(rep.cfg.cv_views[0]))
  split, store = folds_lib.merge([rep.dev, rep.test])
  return records(split, store, lambda: views_lib.read_raw([rep.dev[0], rep.test[0]]), spec,
                 rep.cached, rep.cfg.folds, rep.cfg.fold_seed, rep.log)
