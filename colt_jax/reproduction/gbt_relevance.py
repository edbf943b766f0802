"""`gbt-pairs relevance`: the learned non-neural baseline given the relevance model of the
`colt-pairs relevance` rows (not in the paper; a fair baseline for those rows).

`colt-pairs relevance` ranks with phi's pair probabilities and r = (1 - a) r_phi + a r_model,
r_model a gradient-boosted P(relevant) over the query cosine and the official descriptors
(`colt_jax/pairs/relevance_model.py`). gbt-pairs, as the issue specifies it, has a logistic
relevance model without the descriptors; given the same relevance model, does phi's side of
the row still earn its place? This row answers it on the same footing as every baseline:

* gbt-pairs' own models (`gbt_pairs.fit`, its default configuration) and its selection
  (expected coverage with weight w, `gbt_pairs.select`), its r mixed with the model's:
  r = (1 - a) r_gbt + a r_model, the model over each topic's pool as rows of the row's view
  store (the feature setting of `colt-pairs relevance`);
* w (gbt-pairs' grid) and a (the grid of the colt-pairs row, `Variant.relevance_mixes`) chosen
  together by the F1@20 of out-of-fold predictions on the training topics: gbt-pairs' own
  inner folds (`gbt_pairs.cross_fit`'s partition), each fitting both models on its training
  part alone (the view statistics too); ties keep the first setting (a = 0, the smallest w);
* scored with gbt-pairs fitted on every training topic and the relevance model of the
  `colt-pairs relevance` row of the same training topics (the same folder: `Stages
  .relevance_model`).

The row records `train_F1@20` (its chosen setting's out-of-fold F1@20), so that it is a
tuned baseline like the others: in the target tables and in the choice of the best
baseline. The method's own parts (the mix, the choice of a setting, its version) are
`colt_jax.baselines.gbt_pairs_relevance`; this module is its row of the reproduction.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Sequence

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import versions
from colt_jax.baselines.gbt_pairs_relevance import METHOD, best_setting, mixed_scores
from colt_jax.data import folds as folds_lib
from colt_jax.data import views as views_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.reproduction import stages
from colt_jax.reproduction.variants import Variant

WEIGHTS = tuple(evaluation.LEARNED_GRIDS['gbt-pairs']['gbt_weight'])
INNER_FOLDS = 3  # gbt-pairs' own (`gbt_pairs.cross_fit`)


def tuning_scores(split, oof: Sequence[tuple], mixes: Sequence[float]) -> list:
  """[{'setting': {'gbt_weight', 'relevance_mix'}, 'F1@20'}] over WEIGHTS x `mixes` (grid
  order: a first) of the out-of-fold `oof` [(scores, model, view store)] of `split`'s
  topics."""
  out = []
  for a, w in itertools.product(mixes, WEIGHTS):
    scores = [s for part, model, store in oof for s in mixed_scores(part, model, store, a)]
    run = gbt_pairs.select(scores, weight=w, k=evaluation.RUN_LENGTH)
    out.append({'setting': {'gbt_weight': float(w), 'relevance_mix': float(a)},
                'F1@20': float(evaluation.score(split, run).mean['F1@20'])})
  return out


def out_of_fold(rep, spec: views_lib.ViewSpec, train: tuple, num_images: int, protocol: str,
                tag: str) -> list:
  """[(gbt-pairs' scores of an inner part's held topics, the relevance model fitted on its
  training topics, their view store)] over `gbt_pairs.cross_fit`'s partition of `train`."""
  split, store = train
  config = gbt_pairs.DEFAULT
  names = gbt_pairs.available_descriptors(split)
  config = dataclasses.replace(config, descriptors=tuple(names))
  raw = views_lib.read_raw([split], tuple(names)) if names else None
  out = []
  for fold in folds_lib.kfold(split.topic_numbers, min(INNER_FOLDS, len(split.topics)),
                              config.seed):
    part = folds_lib.subset(split, store, fold.train_topics, f'{tag}-gbt-inner{fold.index}')
    held = folds_lib.subset(split, store, fold.test_topics,
                            f'{tag}-gbt-inner{fold.index}-valid')
    scores = gbt_pairs.fit(*part, protocol, config, raw).predict(*held, protocol, raw)
    part_viewed, held_viewed = rep.viewed(spec, part, held)
    model = relevance_lib.fit_split(*part_viewed, num_images, protocol=protocol)
    out.append((scores, model, held_viewed[1]))
  return out


def rows(rep, variant: Variant, train: tuple, test: tuple, kind: str, tag: str,
         protocol: str = 'pool') -> dict:
  """{'gbt-pairs relevance (<protocol>)': row} of gbt-pairs given `variant`'s relevance model
  (`variant`: the `colt-pairs relevance` row as the caller configured it), chosen on `train`
  and scored on `test` (module doc); cached in `rep`'s row cache."""
  name = f'{METHOD} ({protocol})'
  ttc_cfg = rep.trainer.configs_for(variant, rep.cfg.seeds[0], tag, protocol)[1]
  key = {'method': METHOD, 'protocol': protocol, 'train': train[0].split,
         'topics': test[0].topic_numbers, 'versions': versions.of(METHOD),
         'descriptors': list(gbt_pairs.available_descriptors(train[0])),
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
    scores = gbt_pairs.fit(*train, protocol).predict(*test, protocol)
    scores = mixed_scores(scores, relevance_lib.load(model_dir), test_viewed[1],
                          chosen['relevance_mix'])
    run = gbt_pairs.select(scores, weight=chosen['gbt_weight'], k=evaluation.RUN_LENGTH)
    return stages._result_record(test[0], run, protocol, {  # pylint: disable=protected-access
        'method': METHOD, 'chosen': chosen, 'tuning': tuning,
        'train_F1@20': max(t['F1@20'] for t in tuning), 'relevance_model': model_dir})

  row = rep.cached(kind, name, key, compute)
  rep.log(f'  {name:<24} F1@20 {row["mean"]["F1@20"]:.4f} (w {row["chosen"]["gbt_weight"]:g}, '
          f'a {row["chosen"]["relevance_mix"]:g})')
  return {name: row}
