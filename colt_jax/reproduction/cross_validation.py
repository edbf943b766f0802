"""k-fold cross-validation over all topics of dev + test (`colt_jax.data.folds`), each fold's
choices made on its training topics alone.

`Reproduction` is every stage of `pipeline.run`: the official split's (`stages.Stages`)
and this one (`cross_validation`). Per fold the baselines are tuned (MMR, UMONS,
... on every feature setting CoLT may choose, the setting chosen with the parameters:
`fold_baselines`), `colt`'s settings are chosen by an inner k-fold over the fold's training
topics (`fold_choice`) and CoLT is trained on them; every topic is scored once, by the fold
that held it out (`merge_folds`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from colt_jax.data import folds as folds_lib
from colt_jax.data import views as views_lib
from colt_jax.reproduction import gbt_relevance
from colt_jax.reproduction import stages
from colt_jax.reproduction import tuning
from colt_jax.reproduction.row_training import _trained_key, base_configs
from colt_jax.reproduction.variants import (BASELINES, CV_ABLATIONS, CV_VARIANTS,
                                            OPT_IN_VARIANTS, THRESHOLDS, Variant)
from colt_jax.reproduction import variants as variants_lib
from colt_jax.train import configs
from colt_jax.util.errors import InputError

# Baselines a cross-validation fold tunes on every feature setting `colt` may choose there
# (`Reproduction.fold_baselines`): top-k's order is the text order in every setting (a
# query-photo cosine is text-only, colt_jax.data.views) and Flickr's uses no features.
CV_VIEW_BASELINES = ('mmr', 'msd', 'dpp', 'umons', 'umons-dbscan')


class Reproduction(stages.Stages):
  """Every stage of `run`: the official split's (`stages.Stages`) and the cross-validation
  over all topics."""

  def cv_settings(self) -> list:
    """The feature settings a cross-validation fold may choose for `colt` (`fold_choice`):
    None (text alone), then each of `cv_views` when 'views' is in `cv_choose` (none on the
    synthetic data, which has no descriptors)."""
    settings = [None]
    if 'views' in self.cfg.cv_choose and self.cfg.dataset != 'synthetic':
      settings += [dict(v) for v in self.cfg.cv_views]
    return settings

  def baseline_settings(self) -> list:
    """The feature settings beyond text that a fold tunes CV_VIEW_BASELINES on: those of
    `cv_settings` and of every CV_VARIANTS row it scores (colt-pairs: text + descriptors +
    metadata), once each (none on the synthetic data, whose rows are text-only)."""
    specs = [views_lib.ViewSpec(**s) for s in self.cv_settings()[1:]]
    specs += [v.view_spec for v in self.variants if v.name in CV_VARIANTS and v.views]
    return list({s.name: s for s in specs}.values())

  def fold_baselines(self, train: tuple, held: tuple, tag: str,
                     protocols: Sequence[str]) -> dict:
    """A cross-validation fold's baseline rows, every choice on its training topics `train`:
    each method of BASELINES tuned on text; each of CV_VIEW_BASELINES tuned on every feature
    setting a CoLT row may use (`baseline_settings`), its row the (setting, parameters) with the
    best training F1@20 (ties: text, then the first setting), recording `features` (the
    setting's name) and `settings` (every setting's tuned parameters and training F1@20)."""
    rows = self.baselines(train, held, tag, protocols)
    methods = [m for m in CV_VIEW_BASELINES if m in BASELINES]
    specs = self.baseline_settings()
    viewed = [(spec, self.baselines(train, held, tag, protocols, spec, methods))
              for spec in specs]
    for name, row in list(rows.items()):
      if row['method'] not in methods:
        continue
      candidates = [('text', row)] + [
          (spec.name, out[f'{row["method"]} [{spec.name}] ({row["protocol"]})'])
          for spec, out in viewed]
      features, best = choose_setting(candidates)
      rows[name] = dict(best, features=features, settings=[
          {'features': n, 'chosen': r['chosen'], 'train_F1@20': r['train_F1@20']}
          for n, r in candidates])
    return rows

  def view_specs(self) -> list:
    """`stages.Stages.view_specs` (the settings the official split's baselines are also
    scored on) less those of the rows that remove one descriptor each (OPT_IN_VARIANTS): ten
    settings of nine descriptors, whose names (`ViewSpec.name`) say only how many."""
    kept = [v for v in self.variants if v.name not in OPT_IN_VARIANTS]
    own = {v.view_spec for v in kept if v.view_spec is not None}
    return [s for s in super().view_specs() if s in own]

  def relevance_variant(self) -> Variant | None:
    """The selected row with a relevance model beside phi (`colt-pairs relevance`), whose
    model gbt-pairs is given in its fair baseline (`gbt_relevance`); None without one."""
    return next((v for v in self.variants if v.relevance_mixes), None)

  def official(self) -> dict:
    """`stages.Stages.official`'s rows, and gbt-pairs given the relevance model of the
    relevance row (`gbt_relevance`) when that row is selected (pool protocol)."""
    rows = super().official()
    relevance = self.relevance_variant()
    if relevance is not None and 'pool' in self.cfg.protocols:
      rows.update(gbt_relevance.rows(self, relevance, self.dev, self.test, 'official', 'dev'))
    return rows

  def cv_folds(self) -> list:
    """[(fold, tag, train, held)]: the cross-validation's folds over every topic of dev and
    test (`folds.kfold`, seeded), each with its row-cache tag and its training and held-out
    (split, store) pairs."""
    everything = folds_lib.merge([self.dev, self.test])
    out = []
    for fold in folds_lib.kfold(everything[0].topic_numbers, self.cfg.folds,
                                self.cfg.fold_seed):
      tag = f'cv{self.cfg.folds}-seed{self.cfg.fold_seed}-fold{fold.index}'
      out.append((fold, tag, folds_lib.subset(*everything, fold.train_topics, f'{tag}-train'),
                  folds_lib.subset(*everything, fold.test_topics, f'{tag}-test')))
    return out

  def fold_rows(self, name: str) -> list:
    """[(fold, tag, train, held, row)]: the `cv_folds` whose row cache holds the row `name`
    (the diagnostics read the rows' models); the others are logged and left out. Raises
    InputError when no fold has it."""
    out = []
    for fold, tag, train, held in self.cv_folds():
      row = self.saved_row(tag, name)
      if row is None:
        self.log(f' fold {fold.index}: no row {self.row_path(tag, name)} yet; left out')
        continue
      out.append((fold, tag, train, held, row))
    if not out:
      raise InputError(f'{self.rows_root}: no {name} rows of the cross-validation; run '
                       'experiments/reproduce.py first')
    return out

  def cross_validation(self) -> dict:
    folds = self.cv_folds()
    self.log(f'[2/4] {self.cfg.folds}-fold cross-validation over '
             f'{sum(len(f.test_topics) for f, *_ in folds)} topics')
    per_fold = []
    colt = variants_lib.row('colt')
    for fold, tag, train, held in folds:
      self.log(f' fold {fold.index}: {len(fold.train_topics)} training topics, '
               f'{len(fold.test_topics)} held out')
      protocols = [p for p in self.cfg.protocols if p in self.cfg.cv_protocols]
      rows = self.fold_baselines(train, held, tag, protocols)
      chosen, choices = {}, {}
      for protocol in protocols:
        choice = self.fold_choice(train, tag, protocol)
        chosen[protocol] = choice['chosen']
        choices[protocol] = {'scl': choice.get('scl', [])}  # g's grid, scores, effect sizes
        for seed in self.cfg.seeds:  # the fold's choice (made with the first seed), every seed
          rows.update(self.colt_rows(chosen_variant(colt, choice['chosen']), seed, train,
                                     held, tag, tag, [protocol]))
        # the learned rows, then colt-pairs' ablations (each with its fold's colt-pairs w)
        ablations = CV_ABLATIONS if self.cfg.scores_cv_ablations() else ()
        scored = ([v for v in self.variants if v.name in CV_VARIANTS]
                  + [v for v in self.variants if v.name in ablations])
        for variant in scored:
          fold_variant = chosen_variant(variant, choice['chosen'])
          # the row whose choice it takes (`coverage_of`), with the fold's `colt` choice too
          chooser = next((chosen_variant(v, choice['chosen']) for v in self.variants
                          if v.name == variant.coverage_of), None)
          for seed in self.cfg.seeds_of(variant, cross_validation=True):  # the row's w
            rows.update(self.colt_rows(fold_variant, seed, train, held, tag, tag, [protocol],
                                       chooser))
          if fold_variant.chooses_coverage_weight and not fold_variant.coverage_of:
            # the row's w and checkpoint and every inner score (made by colt_rows: cached)
            coverage = self.coverage_choice(fold_variant, train, tag, tag, protocol)
            choices[protocol].setdefault('coverage', {})[variant.name] = {
                'chosen': coverage['chosen'],
                'F1@20': max(r['F1@20'] for r in coverage['scores'])}
        relevance = self.relevance_variant()
        if relevance is not None and protocol == 'pool':  # its fair baseline (gbt_relevance)
          rows.update(gbt_relevance.rows(self, chosen_variant(relevance, choice['chosen']),
                                         train, held, tag, tag, protocol))
      per_fold.append({'fold': fold.index, 'test_topics': list(fold.test_topics),
                       'rows': rows, 'chosen': chosen, 'choices': choices,
                       'trainings': shared_trainings(rows)})
      for key in [k for k in self._viewed if k[1].startswith(f'{tag}-')]:
        del self._viewed[key]  # the fold's feature settings: no later fold reads them
    return {'folds': per_fold, 'merged': merge_folds(per_fold)}

  def fold_choice(self, train: tuple, tag: str, protocol: str) -> dict:
    """The `colt` row's settings for one cross-validation fold, chosen by an inner k-fold over
    the fold's training topics alone (`cv_choose`, `tuning.score_scl`/`score_phi`); returns
    {'chosen': {scl, ttc, irrelevant_threshold, per_category}, 'scl': scores, 'ttc': scores}."""
    cfg = self.cfg
    colt = variants_lib.row('colt')
    seed = cfg.seeds[0]
    scl_grid = {name: tuple(values) for name, values in cfg.cv_scl_grid}
    key = {'choose': list(cfg.cv_choose), 'inner_folds': cfg.inner_folds,
           'fold_seed': cfg.fold_seed, 'seed': seed, 'steps': list(cfg.choice_steps),
           'thresholds': list(THRESHOLDS),
           'scl_grid': scl_grid if 'scl' in cfg.cv_choose else None,
           'per_category': list(cfg.choice_per_category) if 'X' in cfg.cv_choose else None,
           'base': [_trained_key(c) for c in base_configs(cfg, paper=False)],
           'topics': train[0].topic_numbers, 'protocol': protocol}
    settings = self.cv_settings()
    if 'views' in cfg.cv_choose and cfg.dataset != 'synthetic':
      key['views'] = settings

    def compute():
      splits = tuning.inner_kfold(train, cfg.inner_folds, cfg.fold_seed, f'{tag}-choice')
      self.log(f'  choosing on {cfg.inner_folds} inner folds of the {len(train[0].topics)} '
               f'training topics ({", ".join(cfg.cv_choose)}, {protocol} protocol)')
      out, scl = {}, {}
      if 'scl' in cfg.cv_choose:
        scores = tuning.score_scl(self.trainer, seed, splits, f'{tag}-choice', protocol,
                                    scl_grid, self.log)
        scl = tuning.best_scl(scores)
        out['scl'] = scores
      schemes = configs.LABEL_SCHEMES if 'label_scheme' in cfg.cv_choose else (None,)
      scores = []
      for views in settings:  # the feature setting (None: text), its statistics per inner fold
        variant = dataclasses.replace(colt, scl=dict(colt.scl, **scl), views=views)
        viewed = [self.viewed(variant.view_spec, tr, va) for tr, va in splits]
        for scheme in schemes:
          over = {'label_scheme': scheme} if scheme else {}
          if len(settings) > 1:
            over_row = dict(over, views=variant.view_spec.name if views else 'text')
          else:
            over_row = over
          scores += [dict(r, **over_row) for r in tuning.score_phi(
              self.trainer, variant, seed, viewed, f'{tag}-choice', protocol,
              cfg.choice_steps, THRESHOLDS, over, self.log,
              cfg.choice_per_category if 'X' in cfg.cv_choose else ())]
      best = tuning.best_phi(scores)
      out['ttc'] = scores
      ttc = {'num_steps': best['steps']}
      if 'label_scheme' in best:
        ttc['label_scheme'] = best['label_scheme']
      out['chosen'] = {'scl': scl, 'ttc': ttc,
                       'irrelevant_threshold': best['irrelevant_threshold'],
                       'per_category': best.get('per_category', colt.per_category)}
      if len(settings) > 1:
        names = ['text'] + [views_lib.ViewSpec(**v).name for v in settings[1:]]
        out['chosen']['views'] = settings[names.index(best['views'])]
      self.log(f'  chosen for {tag}: {out["chosen"]}')
      return out

    return self.cached(tag, f'choice ({protocol})', key, compute)


def shared_trainings(rows: Mapping[str, Mapping[str, Any]]) -> dict:
  """Whether rows that read the same trained phi (its workdir; an ensemble's members) read the
  same weights, by the digests each row recorded (`ttc_digests`): {'rows': rows with digests,
  'shared': workdirs read by two or more of them, 'differ': those read with two digests}."""
  seen, counted = {}, 0
  for name, row in rows.items():
    digests = row.get('ttc_digests')
    if not digests:
      continue
    counted += 1
    workdirs = ((row.get('params') or {}).get('ttc_checkpoint') or '').split(',')
    for workdir, digest in zip(workdirs, digests):
      seen.setdefault(workdir, {}).setdefault(digest, []).append(name)
  shared = {w: d for w, d in seen.items() if sum(map(len, d.values())) > 1}
  return {'rows': counted, 'shared': len(shared),
          'differ': sorted(w for w, d in shared.items() if len(d) > 1)}


def choose_setting(candidates: Sequence[tuple]) -> tuple:
  """(name, row) of [(feature setting name, baseline row)] with the highest `train_F1@20`
  (ties: the first, i.e. text)."""
  return max(candidates, key=lambda c: c[1]['train_F1@20'])


def chosen_variant(variant: Variant, chosen: Mapping[str, Any]) -> Variant:
  """`variant` with a fold's choice (`Reproduction.fold_choice`) applied."""
  # The row's own phi settings win over the fold's `colt` choice (colt-pairs: its steps).
  # A row without g (colt-pairs) stays without it.
  scl = None if variant.scl is None else dict(variant.scl, **chosen['scl'])
  return dataclasses.replace(variant, scl=scl,
                             ttc=dict(chosen['ttc'], **variant.ttc),
                             irrelevant_threshold=chosen['irrelevant_threshold'],
                             per_category=chosen.get('per_category', variant.per_category),
                             # a row with its own feature setting keeps it, and a colt-pairs
                             # row (a list from the heads) its text alone when it names none
                             views=(variant.views if variant.views is not None
                                    or variant.selection != 'category'
                                    else chosen.get('views')))


def merge_folds(per_fold: Sequence[Mapping]) -> dict:
  """Every row over all folds: each topic scored by the fold that held it out."""
  names = per_fold[0]['rows'].keys()
  merged = {}
  for name in names:
    per_topic, run = {}, {}
    for f in per_fold:
      row = f['rows'][name]
      per_topic.update(row['per_topic'])
      run.update(row['run'])
    names_ = list(next(iter(per_topic.values())))
    mean = {k: float(np.mean([m[k] for m in per_topic.values()])) for k in names_}
    fold_f1 = [f['rows'][name]['mean']['F1@20'] for f in per_fold]
    merged[name] = {'protocol': per_fold[0]['rows'][name]['protocol'], 'mean': mean,
                    'per_topic': per_topic, 'run': run, 'fold_F1@20': fold_f1}
  return merged
