"""`gbt-pairs relevance`: the learned non-neural baseline given the relevance model of the
`colt-pairs relevance` rows (not in the paper; a fair baseline for those rows).

`colt-pairs relevance` ranks with phi's pair probabilities and r = (1 - a) r_phi + a r_model,
r_model a gradient-boosted P(relevant) over the query cosine and the official descriptors
(`colt_jax/pairs/relevance_model.py`). gbt-pairs, as the issue specifies it, has a logistic
relevance model without the descriptors; given the same relevance model, does phi's side of
the row still earn its place? This row answers it on the same footing as every baseline:

* gbt-pairs' own models (`pairlearner.fit`, its default configuration) and its selection
  (expected coverage with weight w, `pairlearner.select`), its r mixed with the model's:
  r = (1 - a) r_gbt + a r_model, the model over each topic's pool as rows of the row's view
  store (the feature setting of `colt-pairs relevance`);
* w (gbt-pairs' grid) and a (the grid of the colt-pairs row, `Variant.relevance_mixes`) chosen
  together by the F1@20 of out-of-fold predictions on the training topics: gbt-pairs' own
  inner folds (`pairlearner.cross_fit`'s partition), each fitting both models on its training
  part alone (the view statistics too); ties keep the first setting (a = 0, the smallest w);
* scored with gbt-pairs fitted on every training topic and the relevance model of the
  `colt-pairs relevance` row of the same training topics (the same folder: `Stages
  .relevance_model`).

The row records `train_F1@20` (its chosen setting's out-of-fold F1@20), so that it is a
tuned baseline like the others: in the target tables and in the choice of the best
baseline. The baseline modules are untouched (their cached rows stay valid).
"""
from __future__ import annotations

import dataclasses
import itertools
import sys
from typing import Mapping, Sequence

import numpy as np

from colt_jax.data import folds as folds_lib
from colt_jax.data import views as views_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.pairs import pairlearner
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.reproduction import code_digest
from colt_jax.reproduction import stages
from colt_jax.reproduction.variants import Variant

METHOD = 'gbt-pairs relevance'
WEIGHTS = tuple(evaluation.LEARNED_GRIDS['gbt-pairs']['gbt_weight'])
INNER_FOLDS = 3  # gbt-pairs' own (`pairlearner.cross_fit`)


def mixed_scores(scores: Sequence[pairlearner.TopicScores], model: relevance_lib.RelevanceModel,
                 store, a: float) -> list:
  """gbt-pairs' `scores` with r = (1 - a) r + a r_model; `store` the view store whose rows the
  model reads (every photo of the scores in it). a = 0: the scores as they are."""
  if not a:
    return list(scores)
  index = store.photo_index()
  photos = np.asarray(store.photos)
  out = []
  for s in scores:
    r_model = model.predict(store.query_feature(s.topic),
                            photos[store.rows_for(s.photo_ids, index)])
    r = ((1.0 - a) * np.asarray(s.relevance, np.float32) + a * r_model).astype(np.float32)
    out.append(pairlearner.TopicScores(s.topic, s.photo_ids, r, s.pair_prob))
  return out


def tuning_scores(split, oof: Sequence[tuple], mixes: Sequence[float]) -> list:
  """[{'setting': {'gbt_weight', 'relevance_mix'}, 'F1@20'}] over WEIGHTS x `mixes` (grid
  order: a first) of the out-of-fold `oof` [(scores, model, view store)] of `split`'s
  topics."""
  out = []
  for a, w in itertools.product(mixes, WEIGHTS):
    scores = [s for part, model, store in oof for s in mixed_scores(part, model, store, a)]
    run = pairlearner.select(scores, weight=w, k=evaluation.RUN_LENGTH)
    out.append({'setting': {'gbt_weight': float(w), 'relevance_mix': float(a)},
                'F1@20': float(evaluation.score(split, run).mean['F1@20'])})
  return out


def best_setting(tuning: Sequence[Mapping]) -> dict:
  """The setting with the highest F1@20 (ties: the first in grid order)."""
  best = tuning[0]
  for t in tuning[1:]:
    if t['F1@20'] > best['F1@20'] + 1e-12:
      best = t
  return dict(best['setting'])


def out_of_fold(rep, spec: views_lib.ViewSpec, train: tuple, num_images: int, protocol: str,
                tag: str) -> list:
  """[(gbt-pairs' scores of an inner part's held topics, the relevance model fitted on its
  training topics, their view store)] over `pairlearner.cross_fit`'s partition of `train`."""
  split, store = train
  config = pairlearner.DEFAULT
  names = pairlearner.available_descriptors(split)
  config = dataclasses.replace(config, descriptors=tuple(names))
  raw = views_lib.read_raw([split], tuple(names)) if names else None
  out = []
  for fold in folds_lib.kfold(split.topic_numbers, min(INNER_FOLDS, len(split.topics)),
                              config.seed):
    part = folds_lib.subset(split, store, fold.train_topics, f'{tag}-gbt-inner{fold.index}')
    held = folds_lib.subset(split, store, fold.test_topics,
                            f'{tag}-gbt-inner{fold.index}-valid')
    scores = pairlearner.fit(*part, protocol, config, raw).predict(*held, protocol, raw)
    part_viewed, held_viewed = rep.viewed(spec, part, held)
    model = relevance_lib.fit_split(*part_viewed, num_images, protocol=protocol)
    out.append((scores, model, held_viewed[1]))
  return out


def implementation() -> dict:
  """What decides the row beyond its inputs, for its cache key: a digest of this module's
  code (`code_digest`) and the baselines' (the relevance model's is `relevance_key`'s
  VERSION)."""
  return {'source': code_digest.code_digest([sys.modules[__name__]]),
          'baselines': stages.baseline_code()}


def rows(rep, variant: Variant, train: tuple, test: tuple, kind: str, tag: str,
         protocol: str = 'pool') -> dict:
  """{'gbt-pairs relevance (<protocol>)': row} of gbt-pairs given `variant`'s relevance model
  (`variant`: the `colt-pairs relevance` row as the caller configured it), chosen on `train`
  and scored on `test` (module doc); cached in `rep`'s row cache."""
  name = f'{METHOD} ({protocol})'
  ttc_cfg = rep.trainer.configs_for(variant, rep.cfg.seeds[0], tag, protocol)[1]
  key = {'method': METHOD, 'protocol': protocol, 'train': train[0].split,
         'topics': test[0].topic_numbers, 'implementation': implementation(),
         'descriptors': list(pairlearner.available_descriptors(train[0])),
         'views': dataclasses.asdict(variant.view_spec) if variant.view_spec else None,
         'num_images': ttc_cfg.num_images, 'weights': list(WEIGHTS),
         'mixes': list(variant.relevance_mixes), 'relevance_model': stages.relevance_key()}

  def compute():
    rep.log(f'  {name}: choosing w and a on {INNER_FOLDS} inner folds of the '
            f'{len(train[0].topics)} training topics')
    oof = out_of_fold(rep, variant.view_spec, train, ttc_cfg.num_images, protocol,
                      f'{tag}-{kind}')
    tuning = tuning_scores(train[0], oof, variant.relevance_mixes)
    chosen = best_setting(tuning)
    train_viewed, test_viewed = rep.viewed(variant.view_spec, train, test)
    model_dir = rep.relevance_model(train_viewed, tag, protocol, ttc_cfg)
    scores = pairlearner.fit(*train, protocol).predict(*test, protocol)
    scores = mixed_scores(scores, relevance_lib.load(model_dir), test_viewed[1],
                          chosen['relevance_mix'])
    run = pairlearner.select(scores, weight=chosen['gbt_weight'], k=evaluation.RUN_LENGTH)
    return stages._result_record(test[0], run, protocol, {  # pylint: disable=protected-access
        'method': METHOD, 'chosen': chosen, 'tuning': tuning,
        'train_F1@20': max(t['F1@20'] for t in tuning), 'relevance_model': model_dir})

  row = rep.cached(kind, name, key, compute)
  rep.log(f'  {name:<24} F1@20 {row["mean"]["F1@20"]:.4f} (w {row["chosen"]["gbt_weight"]:g}, '
          f'a {row["chosen"]["relevance_mix"]:g})')
  return {name: row}
