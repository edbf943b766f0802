"""The real benchmark end to end: features, baselines, CoLT and its ablations, cross-validation.

`run(ReproduceConfig(...))` does, for a MediaEval dataset in its official layout:

1. Features: MiniLM text features of the dev and test splits (`data_prep/extract_features.py`,
   resumable), unless the stores already exist.
2. Baselines on test, tuned on dev (F1@20, same protocol): Flickr order, top-k, MMR, UMONS.
3. CoLT (Alg. 1-2): g trained by SCL and phi by the TTC trainer on dev, evaluated on test, for
   every seed; then the ablations (`VARIANTS`), each a set of overrides of the two configs.
4. k-fold cross-validation over all topics of dev + test (`colt_jax.folds`): per fold the
   baselines are tuned (MMR, UMONS, ... on every feature setting CoLT may choose, the
   setting chosen with the parameters) and CoLT is trained on the training topics only, and
   every topic is scored once, by the fold that held it out.
5. `results.json`, the run files, and a markdown report (`report.write_markdown`).

Every choice is made on dev (or, in cross-validation, on the training topics); test scores are
only read to fill the tables. Trainings are keyed by a digest of their configuration, so rows
that share a model (X=1/2/3, SCL + top-k, ...) train it once, and a rerun after an interruption
resumes from the checkpoints and skips finished rows (`rows/*.json`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np

import choices as choices_lib
import choosing
from colt_jax import atomic
from colt_jax import configs
from colt_jax import data as data_lib
from colt_jax import evaluation
from colt_jax import folds as folds_lib
from colt_jax import outputs
from colt_jax import runfile
from colt_jax import views as views_lib
from colt_jax.errors import InputError
from colt_jax.train import restore
from variants import (BASELINES, COVERAGE_WEIGHTS, CV_VARIANTS, MAIN_VARIANTS, THRESHOLDS,
                      VARIANTS, VIEW_ABLATIONS, ReproduceConfig, Trainer, Variant, WORK_TREES,
                      _trained_key,
                      base_configs, colt_params, ensure_features, read_json, variant_key)

# Baselines a cross-validation fold tunes on every feature setting `colt` may choose there
# (`Reproduction.fold_baselines`): top-k's order is the text order in every setting (a
# query-photo cosine is text-only, colt_jax.views) and Flickr's uses no features.
CV_VIEW_BASELINES = ('mmr', 'msd', 'dpp', 'umons', 'umons-dbscan')


def tune_dbscan(dev: tuple, scl_cfg, protocol: str) -> dict:
  """UMONS's DBSCAN parameters for the SCL + DBSCAN row, grid-searched on dev's h^."""
  split, store = dev
  store_hat = restore.reencode_store(store, restore.load_reencoder(scl_cfg.workdir))
  best, _ = evaluation.tune('umons', split, store_hat, protocol, evaluation.MethodParams())
  return {k: getattr(best, k) for k in evaluation.GRIDS['umons']}


def _result_record(split, run: Mapping, protocol: str, extra: Mapping) -> dict:
  result = evaluation.score(split, run)
  return dict(extra, protocol=protocol, mean=result.mean,
              per_topic={str(t): m for t, m in result.per_topic.items()},
              run={str(t): [[p, float(s)] for p, s in r] for t, r in run.items()})


def returned_at(run: Mapping, k: int = 20) -> float:
  """Mean number of photos a run returns per topic within the first k (k when every list is
  full; less when a method, e.g. Eq. 6 without filling, returns short lists)."""
  return float(np.mean([min(len(r), k) for r in run.values()])) if run else 0.0


def _summary(row: Mapping) -> dict:
  """A row as results.json keeps it: everything but the ranked lists, plus returned@20."""
  out = {k: v for k, v in row.items() if k != 'run'}
  if 'run' in row:
    out['returned@20'] = returned_at(row['run'])
  return out


def write_run_file(path: str, split, run: Mapping, protocol: str, run_id: str) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  runfile.write_run(path, {int(t): [(p, s) for p, s in r] for t, r in run.items()},
                    run_id=run_id.replace(' ', '_'),
                    allowed_ids=evaluation.allowed_ids(split, protocol),
                    topics=split.topic_numbers)


# ----------------------------------------------------------------------------- stages


class Reproduction:
  """The stages of `run`, sharing the loaded data, the trainer and the row cache."""

  def __init__(self, cfg: ReproduceConfig, log: Callable = print):
    self.cfg = cfg
    self.log = log
    self.root = cfg.workdir or os.path.join('work', 'reproduce', cfg.dataset)
    outputs.claim_dir(self.root, 'reproduce\'s work', trees=WORK_TREES,
                      flag='--workdir')
    self.results_dir = cfg.results_path
    self.trainer = Trainer(cfg, self.root, log)
    unknown = sorted(set(cfg.variants) - {v.name for v in VARIANTS})
    if unknown:
      raise InputError(f'--variants: unknown {unknown}; expected some of '
                       f'{[v.name for v in VARIANTS]}')
    self.variants = [v for v in VARIANTS if v.name in cfg.variants]
    if cfg.dataset == 'synthetic':  # its layout has no descriptors: text-only rows
      self.variants = [dataclasses.replace(v, views=None) for v in self.variants
                       if not v.views or v.name not in VIEW_ABLATIONS]
    self._raw_views = None
    self._viewed = {}

  def _row_path(self, kind: str, name: str) -> str:
    safe = name.replace(' ', '_').replace('(', '').replace(')', '').replace('/', '-')
    return os.path.join(self.root, 'rows', kind, safe + '.json')

  def cached(self, kind: str, name: str, key: Mapping, compute: Callable[[], dict]) -> dict:
    """A row's result from `rows/`, or computed and saved (keyed by its configuration)."""
    path = self._row_path(kind, name)
    old = read_json(path)
    if old is not None and old.get('key') == json.loads(
        json.dumps(key, default=str, allow_nan=False)):
      return old
    t0 = time.perf_counter()
    record = dict(compute(), key=key)
    record['seconds'] = time.perf_counter() - t0  # training included, when this row trained
    atomic.write_json(path, record)
    # Every row compiles its own models: drop the compiled executables, or a run of hours
    # accumulates JIT memory until LLVM cannot map more (seen: 'Cannot allocate memory').
    jax.clear_caches()
    return json.loads(json.dumps(record, default=atomic.json_default, allow_nan=False))

  def load(self) -> None:
    for split in ('dev', 'test'):
      store = ''
      if self.cfg.dataset != 'synthetic':  # synthetic data comes with its feature stores
        store = ensure_features(self.cfg, split, self.log)
      setattr(self, split, data_lib.load(self.cfg.dataset, split, self.cfg.data_dir, store))

  # -- feature settings (colt_jax.views)

  def viewed(self, spec: Optional[views_lib.ViewSpec], train: tuple, test: tuple) -> tuple:
    """(train, test) under the feature setting `spec`, its statistics fitted on the training
    photos alone (None or text-only: the pair itself)."""
    if spec is None or spec.text_only:
      return train, test
    key = (spec, train[0].split, test[0].split)
    if key not in self._viewed:
      if self._raw_views is None:
        self._raw_views = views_lib.read_raw([self.dev[0], self.test[0]])
      raw = self._raw_views
      transform = views_lib.fit(spec, raw, [str(p) for p in train[1].photo_ids])
      self._viewed[key] = tuple((s, views_lib.apply(transform, raw, f)) for s, f in (train, test))
    return self._viewed[key]

  def view_specs(self) -> list:
    """The feature settings of the selected rows beyond text, each once."""
    out = []
    for v in self.variants:
      if v.view_spec is not None and v.view_spec not in out:
        out.append(v.view_spec)
    return out

  # -- official split: train/tune on dev, score on test

  def baselines(self, train: tuple, test: tuple, kind: str,
                protocols: Optional[Sequence[str]] = None,
                spec: Optional[views_lib.ViewSpec] = None,
                methods: Sequence[str] = BASELINES) -> dict:
    """Baseline rows of `methods`, each tuned on `train` and scored on `test`; with a feature
    setting `spec` beyond text, rows named '<method> [<setting>] (<protocol>)' (the Flickr
    order has no features: not repeated). Each row records `train_F1@20`, its tuned
    setting's F1@20 on the training topics (`train_score`): what a fair "best baseline" is
    chosen by."""
    out = {}
    train, test = self.viewed(spec, train, test)
    suffix = f' [{spec.name}]' if spec is not None and not spec.text_only else ''
    for protocol in (self.cfg.protocols if protocols is None else protocols):
      for method in methods:
        # Flickr's order has no features; gbt-pairs reads every signal itself (text, the
        # descriptors, the metadata) and ranks a topic's own photos: pool, text store only.
        if method in ('flickr', 'gbt-pairs') and (protocol != 'pool' or suffix):
          continue

        def compute(method=method, protocol=protocol):
          params, tuning = evaluation.MethodParams(), []
          if method in evaluation.GRIDS or method in evaluation.LEARNED_GRIDS:
            params, tuning = evaluation.tune(method, train[0], train[1], protocol, params)
          run = evaluation.rank(method, test[0], test[1], protocol, params, train=train)
          grid = evaluation.GRIDS.get(method) or evaluation.LEARNED_GRIDS.get(method, {})
          chosen = {k: getattr(params, k) for k in grid}
          tuning = [{'setting': s, 'F1@20': v} for s, v in tuning]
          return _result_record(test[0], run, protocol, {
              'method': method, 'chosen': chosen, 'tuning': tuning,
              'train_F1@20': train_score(method, train, protocol, tuning)})

        name = f'{method}{suffix} ({protocol})'
        key = {'method': method, 'protocol': protocol, 'train': train[0].split,
               'topics': test[0].topic_numbers}
        if suffix:
          key['views'] = dataclasses.asdict(spec)
        out[name] = self.cached(kind, name, key, compute)
        if 'train_F1@20' not in out[name]:  # a row cached before rows recorded it
          out[name]['train_F1@20'] = train_score(method, train, protocol,
                                                 out[name].get('tuning'))
        self.log(f'  {name:<24} F1@20 {out[name]["mean"]["F1@20"]:.4f}')
    return out

  def cv_settings(self) -> list:
    """The feature settings a cross-validation fold may choose for `colt` (`fold_choice`):
    None (text alone), then each of `cv_views` when 'views' is in `cv_choose` (none on the
    synthetic data, which has no descriptors)."""
    settings = [None]
    if 'views' in self.cfg.cv_choose and self.cfg.dataset != 'synthetic':
      settings += [dict(v) for v in self.cfg.cv_views]
    return settings

  def fold_baselines(self, train: tuple, held: tuple, tag: str,
                     protocols: Sequence[str]) -> dict:
    """A cross-validation fold's baseline rows, every choice on its training topics `train`:
    each method of BASELINES tuned on text; each of CV_VIEW_BASELINES tuned on every feature
    setting `colt` may choose (`cv_settings`), its row the (setting, parameters) with the
    best training F1@20 (ties: text, then the first setting), recording `features` (the
    setting's name) and `settings` (every setting's tuned parameters and training F1@20)."""
    rows = self.baselines(train, held, tag, protocols)
    methods = [m for m in CV_VIEW_BASELINES if m in BASELINES]
    specs = [views_lib.ViewSpec(**s) for s in self.cv_settings()[1:]]
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

  def colt_rows(self, variant: Variant, seed: int, train: tuple, test: tuple, kind: str,
                tag: str, protocols: Optional[Sequence[str]] = None) -> dict:
    out = {}
    base, raw_train = variant, train
    train, test = self.viewed(variant.view_spec, train, test)
    for protocol in (self.cfg.protocols if protocols is None else protocols):
      name = f'{base.name} (seed {seed}, {protocol})'
      variant, chosen = base, {}
      if base.chooses_coverage_weight:  # w of a colt-pairs row: on its training topics
        # (an ablation of colt-pairs takes the w chosen for colt-pairs itself)
        chooser = next((v for v in self.variants if v.name == base.coverage_of), base)
        chosen = dict(self.coverage_choice(chooser, raw_train, kind, tag,
                                           protocol)['chosen'])
        variant = dataclasses.replace(base, **chosen)
      scl_cfg, ttc_cfg = self.trainer.configs_for(variant, seed, tag, protocol)
      threshold = (variant.irrelevant_threshold if variant.irrelevant_threshold is not None
                   else self.cfg.threshold_for(protocol))
      key = {'variant': variant_key(variant), 'seed': seed, 'tag': tag,
             'irrelevant_threshold': threshold,
             'scl': _trained_key(scl_cfg) if scl_cfg else None,
             'ttc': _trained_key(ttc_cfg) if ttc_cfg else None,
             'topics': test[0].topic_numbers}

      def compute(protocol=protocol, scl_cfg=scl_cfg, ttc_cfg=ttc_cfg, threshold=threshold,
                  variant=variant, chosen=chosen):
        self.trainer.train(variant, seed, train, tag, protocol)  # no-op when trained
        tuned = tune_dbscan(train, scl_cfg, protocol) if variant.post == 'dbscan' else None
        params = colt_params(variant, scl_cfg, ttc_cfg, tuned, threshold)
        run = evaluation.rank_colt(test[0], test[1], protocol, params)
        effect = (restore.reencoder_effect(test[0], test[1], scl_cfg.workdir, protocol)
                  if scl_cfg else None)
        return _result_record(test[0], run, protocol, {
            'method': 'colt', 'variant': variant.name, 'seed': seed, 'g_effect': effect,
            'chosen': dict(tuned or {}, **chosen),
            'params': dataclasses.asdict(params),
            'scl_config': dataclasses.asdict(scl_cfg) if scl_cfg else None,
            'ttc_config': dataclasses.asdict(ttc_cfg) if ttc_cfg else None})

      out[name] = self.cached(kind, name, dict(key, protocol=protocol), compute)
      self.log(f'  {name:<40} F1@20 {out[name]["mean"]["F1@20"]:.4f}')
    return out

  def coverage_choice(self, variant: Variant, train: tuple, kind: str, tag: str,
                      protocol: str) -> dict:
    """w of a colt-pairs row's coverage selection and phi's checkpoint, chosen by an inner
    k-fold over its training topics `train` alone (`choosing.score_coverage` over
    COVERAGE_WEIGHTS x phi's kept checkpoints, the row's phi trained with the first seed on
    each inner part, like `fold_choice`'s threshold and X):
    {'chosen': {'coverage_weight': w, 'ttc_step': step}, 'scores': [...]}."""
    cfg = self.cfg
    seed = cfg.seeds[0]
    scl_cfg, ttc_cfg = self.trainer.configs_for(variant, seed, tag, protocol)
    key = {'variant': variant_key(variant), 'inner_folds': cfg.inner_folds,
           'fold_seed': cfg.fold_seed, 'seed': seed, 'weights': list(COVERAGE_WEIGHTS),
           'checkpoint_every': ttc_cfg.checkpoint_every, 'max_to_keep': ttc_cfg.max_to_keep,
           'scl': _trained_key(scl_cfg) if scl_cfg else None, 'ttc': _trained_key(ttc_cfg),
           'topics': train[0].topic_numbers, 'protocol': protocol}

    def compute():
      splits = choosing.inner_kfold(train, cfg.inner_folds, cfg.fold_seed, f'{tag}-choice')
      self.log(f'  choosing w of {variant.name} on {cfg.inner_folds} inner folds of the '
               f'{len(train[0].topics)} training topics ({protocol} protocol)')
      viewed = [self.viewed(variant.view_spec, tr, va) for tr, va in splits]
      scores = choosing.score_coverage(self.trainer, variant, seed, viewed, f'{tag}-choice',
                                       protocol, COVERAGE_WEIGHTS, self.log)
      return {'chosen': choosing.best_coverage(scores), 'scores': scores}

    return self.cached(kind, f'coverage choice {variant.name} ({protocol})', key, compute)

  def official(self) -> dict:
    self.log(f'[2/4] baselines on {self.cfg.dataset} test, tuned on dev')
    rows = self.baselines(self.dev, self.test, 'official')
    for spec in self.view_specs():  # the baselines on each feature setting of a CoLT row
      rows.update(self.baselines(self.dev, self.test, 'official', self.cfg.ablation_protocols,
                                 spec))
    self.log('[3/4] CoLT and ablations: trained on dev, scored on test')
    for variant in self.variants:
      protocols = self.cfg.protocols
      if variant.name not in MAIN_VARIANTS:
        protocols = [p for p in protocols if p in self.cfg.ablation_protocols]
      for seed in self.cfg.seeds_of(variant):  # mean +- std over its seeds
        rows.update(self.colt_rows(variant, seed, self.dev, self.test, 'official', 'dev',
                                   protocols))
    return rows

  # -- cross-validation over all topics

  def cross_validation(self) -> dict:
    everything = folds_lib.merge([self.dev, self.test])
    folds = folds_lib.kfold(everything[0].topic_numbers, self.cfg.folds, self.cfg.fold_seed)
    self.log(f'[4/4] {self.cfg.folds}-fold cross-validation over '
             f'{len(everything[0].topics)} topics')
    per_fold = []
    colt = next(v for v in VARIANTS if v.name == 'colt')
    for fold in folds:
      tag = f'cv{self.cfg.folds}-seed{self.cfg.fold_seed}-fold{fold.index}'
      train = folds_lib.subset(*everything, fold.train_topics, f'{tag}-train')
      held = folds_lib.subset(*everything, fold.test_topics, f'{tag}-test')
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
        for variant in [v for v in self.variants if v.name in CV_VARIANTS]:
          for seed in self.cfg.seeds:  # the fold's `colt` choice, and the row's own w
            rows.update(self.colt_rows(chosen_variant(variant, choice['chosen']), seed, train,
                                       held, tag, tag, [protocol]))
      per_fold.append({'fold': fold.index, 'test_topics': list(fold.test_topics),
                       'rows': rows, 'chosen': chosen, 'choices': choices})
      for key in [k for k in self._viewed if k[1].startswith(f'{tag}-')]:
        del self._viewed[key]  # the fold's feature settings: no later fold reads them
    return {'folds': per_fold, 'merged': merge_folds(per_fold)}

  def fold_choice(self, train: tuple, tag: str, protocol: str) -> dict:
    """The `colt` row's settings for one cross-validation fold, chosen by an inner k-fold over
    the fold's training topics alone (`cv_choose`, `choosing.score_scl`/`score_phi`); returns
    {'chosen': {scl, ttc, irrelevant_threshold, per_category}, 'scl': scores, 'ttc': scores}."""
    cfg = self.cfg
    colt = next(v for v in VARIANTS if v.name == 'colt')
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
      splits = choosing.inner_kfold(train, cfg.inner_folds, cfg.fold_seed, f'{tag}-choice')
      self.log(f'  choosing on {cfg.inner_folds} inner folds of the {len(train[0].topics)} '
               f'training topics ({", ".join(cfg.cv_choose)}, {protocol} protocol)')
      out, scl = {}, {}
      if 'scl' in cfg.cv_choose:
        scores = choosing.score_scl(self.trainer, seed, splits, f'{tag}-choice', protocol,
                                    scl_grid, self.log)
        scl = choosing.best_scl(scores)
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
          scores += [dict(r, **over_row) for r in choosing.score_phi(
              self.trainer, variant, seed, viewed, f'{tag}-choice', protocol,
              cfg.choice_steps, THRESHOLDS, over, self.log,
              cfg.choice_per_category if 'X' in cfg.cv_choose else ())]
      best = choosing.best_phi(scores)
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

  def write_run_files(self, rows: Mapping[str, dict], cv: Optional[dict],
                      results: outputs.ResultSet) -> dict:
    """Run files of every row: pool-protocol files for the official scorer, per split, into
    the result set (global-protocol files, which the scorer refuses, into the work dir)."""
    written = {}
    for name, row in rows.items():
      protocol = row['protocol']
      relative = os.path.join('runs', 'pool' if protocol == 'pool' else 'global',
                              f'test-{_file_name(name)}.txt')
      if protocol == 'pool':
        path, final = results.path(relative), os.path.join(self.results_dir, relative)
      else:
        path = final = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
      write_run_file(path, self.test[0], row['run'], protocol, _file_name(name))
      written[name] = final
    if cv:
      for name, row in cv['merged'].items():
        if row['protocol'] != 'pool':
          continue
        for split in (self.dev, self.test):
          run = {t: r for t, r in row['run'].items() if int(t) in split[0].topic_numbers}
          relative = os.path.join('runs', 'cv', f'{split[0].split}-{_file_name(name)}.txt')
          write_run_file(results.path(relative), split[0], run, 'pool',
                         'cv_' + _file_name(name))
          written[f'cv {name} {split[0].split}'] = os.path.join(self.results_dir, relative)
    return written


def train_score(method: str, train: tuple, protocol: str,
                tuning: Optional[Sequence[Mapping]]) -> float:
  """F1@20 of a baseline's tuned setting on the training topics `train` it was tuned on: the
  best score of its grid search (`tuning`; `evaluation.tune` keeps that setting), or, for a
  method without parameters (Flickr order, top-k), its score there."""
  if tuning:
    return float(max(t['F1@20'] for t in tuning))
  run = evaluation.rank(method, train[0], train[1], protocol, evaluation.MethodParams())
  return float(evaluation.score(train[0], run).mean['F1@20'])


def choose_setting(candidates: Sequence[tuple]) -> tuple:
  """(name, row) of [(feature setting name, baseline row)] with the highest `train_F1@20`
  (ties: the first, i.e. text)."""
  return max(candidates, key=lambda c: c[1]['train_F1@20'])


def chosen_variant(variant: Variant, chosen: Mapping[str, Any]) -> Variant:
  """`variant` with a fold's choice (`Reproduction.fold_choice`) applied."""
  # The row's own phi settings win over the fold's `colt` choice (colt-pairs: its steps).
  return dataclasses.replace(variant, scl=dict(variant.scl, **chosen['scl']),
                             ttc=dict(chosen['ttc'], **variant.ttc),
                             irrelevant_threshold=chosen['irrelevant_threshold'],
                             per_category=chosen.get('per_category', variant.per_category),
                             # a row with its own feature setting (colt-pairs) keeps it
                             views=(variant.views if variant.views is not None
                                    else chosen.get('views')))


def _fold_baseline(row: Mapping) -> dict:
  """What results.json keeps of a fold's baseline row beside its means: its training F1@20,
  parameters and (CV_VIEW_BASELINES) feature setting and every setting weighed."""
  return {k: row[k] for k in ('train_F1@20', 'chosen', 'features', 'settings') if k in row}


def _file_name(name: str) -> str:
  out = name.replace(' (', '-').replace(')', '').replace(', ', '-').replace(' ', '_')
  return out.replace('&', 'and').replace('+', 'plus').replace('=', '')


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


def run(cfg: ReproduceConfig, log: Callable = print, cross_validate: bool = True,
        report: bool = True, previous_results: str = '') -> dict:
  """All stages; returns the results payload (also written as results.json). Its
  `previous` (what the report's "what changed" section compares with) is the summary of
  `previous_results` (an earlier results.json) when given, else the one the replaced
  results.json carried."""
  t0 = time.perf_counter()
  if cross_validate:
    cfg.check_topics()  # before any folder is made
  previous = _previous(cfg, previous_results)
  # Checked before any folder is made; the results are written at the end as one set.
  results = outputs.ResultSet(cfg.results_path, 'reproduce results', flag='--results_dir')
  if report:
    outputs.check_writable_file(cfg.doc_path, 'the report', flag='--doc')
  rep = Reproduction(cfg, log)
  log(f'[1/4] features ({cfg.encoder}) of {cfg.dataset} dev and test')
  rep.load()
  rows = rep.official()
  cv = rep.cross_validation() if cross_validate and cfg.folds else None
  payload = {
      'dataset': cfg.dataset, 'results_dir': rep.results_dir,
      'encoder': cfg.encoder, 'config': dataclasses.asdict(cfg),
      'features': {s: dict(getattr(rep, s)[1].meta) for s in ('dev', 'test')},
      'topics': {s: len(getattr(rep, s)[0].topics) for s in ('dev', 'test')},
      'rows': {n: _summary(r) for n, r in rows.items()},
      'cv': ({'folds': [{'fold': f['fold'], 'test_topics': f['test_topics'],
                         'chosen': f['chosen'], 'choices': f.get('choices', {}),
                         'rows': {n: r['mean'] for n, r in f['rows'].items()},
                         'baselines': {n: _fold_baseline(r) for n, r in f['rows'].items()
                                       if 'train_F1@20' in r}}
                        for f in cv['folds']],
              'merged': {n: _summary(r) for n, r in cv['merged'].items()}} if cv else None),
      'run_files': {},
      'variants': [dataclasses.asdict(v) for v in rep.variants],
      'base_configs': {
          'colt': [dataclasses.asdict(c) for c in base_configs(cfg, paper=False)],
          'paper': [dataclasses.asdict(c) for c in base_configs(cfg, paper=True)]},
      'irrelevant_thresholds': {p: cfg.threshold_for(p) for p in cfg.protocols},
      'ttc_steps': {p: cfg.ttc_steps_for(p, base_configs(cfg, paper=False)[1].num_steps)
                    for p in cfg.protocols},
      'choices': choices_lib.evidence_for(cfg.config_dir, cfg.choice_flagfiles()),
      'seconds': time.perf_counter() - t0,
      'compute': compute_time(rep.root),
  }
  if previous:
    payload['previous'] = previous
  for k in ('features',):
    for s in payload[k].values():
      s.pop('path', None)
  with results:
    payload['run_files'] = rep.write_run_files(rows, cv, results)
    atomic.write_json(results.path('results.json'), payload)
  if report:
    write_report(cfg, payload, log)
  return payload


def _previous(cfg: ReproduceConfig, previous_results: str) -> Optional[dict]:
  """The `previous` summary a new payload carries (see `run`); checked before any work."""
  import results_report as report_lib  # pylint: disable=g-import-not-at-top
  if previous_results:
    if not os.path.isfile(previous_results):
      raise InputError(f'--previous_results: {previous_results}: no such file')
    try:
      old = read_json(previous_results)
    except json.JSONDecodeError as e:
      raise InputError(f'--previous_results: {previous_results}, line {e.lineno}: not JSON '
                       f'({e.msg})') from None
    if not isinstance(old, dict) or 'rows' not in old:
      raise InputError(f'--previous_results: {previous_results} is not a results.json of '
                       'experiments/reproduce.py')
    return report_lib.previous_summary(old, f'`{previous_results}`')
  current = read_json(os.path.join(cfg.results_path, 'results.json')) or {}
  return current.get('previous')


def compute_time(root: str) -> dict:
  """{'seconds', 'timed', 'rows'}: the summed compute time of every cached row and choice
  under `root`/rows (each records its own, trainings included), and how many are timed
  (rows cached before rows recorded their time are not)."""
  seconds, timed, rows = 0.0, 0, 0
  for folder, _, files in os.walk(os.path.join(root, 'rows')):
    for name in files:
      if name.endswith('.json'):
        record = read_json(os.path.join(folder, name)) or {}
        rows += 1
        if 'seconds' in record:
          seconds += float(record['seconds'])
          timed += 1
  return {'seconds': seconds, 'timed': timed, 'rows': rows}


def topic_stats(cfg: ReproduceConfig) -> dict:
  """topic -> {photos, relevant_fraction, clusters} of every dev and test topic (its pool:
  the rGT photos) for the report's per-topic analysis."""
  data_dir = data_lib.resolve(cfg.dataset, 'dev', cfg.data_dir).data_dir
  out = {}
  for split_name in ('dev', 'test'):
    split = data_lib.load_split(cfg.dataset, data_dir, split_name)
    for t, gt in split.ground_truth.items():
      n = len(gt.relevance)
      out[str(t)] = {'photos': n, 'clusters': gt.num_clusters,
                     'relevant_fraction': len(gt.relevant_ids) / n if n else 0.0}
  return out


def write_report(cfg: ReproduceConfig, payload: Optional[Mapping] = None,
                 log: Callable = print, previous_results: str = '') -> str:
  """Writes the markdown report from `payload` (default: the saved results.json, which gains
  the summary of `previous_results` as its `previous` when that is given)."""
  import results_report as report_lib  # pylint: disable=g-import-not-at-top
  if payload is None:
    path = os.path.join(cfg.results_path, 'results.json')
    payload = read_json(path)
    if payload is None:
      raise InputError(f'{path}: no results yet; run experiments/reproduce.py first')
    if previous_results:
      payload['previous'] = _previous(cfg, previous_results)
      atomic.write_json(path, payload)
  doc = cfg.doc_path
  command = f'python experiments/reproduce.py --dataset {cfg.dataset}'
  report_lib.write_markdown(payload, doc, command=command, results_dir=cfg.results_path,
                            topic_stats=topic_stats(cfg))
  log(f'wrote {doc}')
  return doc
