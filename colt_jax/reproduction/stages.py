"""The stages of the reproduction on the official split: dev -> test (`pipeline.run`).

`Stages` holds what every stage shares: the loaded dev and test splits, the trainer
(`row_training.Trainer`), the row cache it is (`row_cache.RowCache`: each row keyed by its
configuration, so a rerun skips finished rows) and the feature settings beyond text
(`viewed`). Its `official` stage tunes the baselines on dev and scores them on test
(`baselines`), then trains and scores every CoLT row for every seed (`colt_rows`; a
colt-pairs row's w chosen on its training topics, `coverage_choice`); `write_run_files` writes
the run files of the rows. `cross_validation.Reproduction` adds the cross-validation over all
topics.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Mapping, Optional, Sequence

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import versions
from colt_jax.data import splits as data_lib
from colt_jax.data import views as views_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.evaluation import runfile
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.reproduction import row_versions
from colt_jax.reproduction import tuning as choosing
from colt_jax.reproduction.reproduce_config import WORK_TREES, ReproduceConfig
from colt_jax.reproduction.row_cache import RowCache
from colt_jax.reproduction.row_training import (Trainer, _trained_key, colt_params,
                                                ensure_features, relevance_key)
from colt_jax.reproduction.row_training import relevance_model as fit_relevance_model
from colt_jax.reproduction.variants import (BASELINES, CLUSTER_PER_CATEGORY, CLUSTER_THRESHOLDS,
                                            COVERAGE_WEIGHTS, MAIN_VARIANTS, ROW_ORDER,
                                            VIEW_ABLATIONS, Variant, variant_key)
from colt_jax.reproduction import variants as variants_lib
from colt_jax.train import checkpoints
from colt_jax.train import effect as effect_lib
from colt_jax.train import restore
from colt_jax.util import devices
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

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


def write_run_file(path: str, split, run: Mapping, protocol: str, run_id: str) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  runfile.write_run(path, {int(t): [(p, s) for p, s in r] for t, r in run.items()},
                    run_id=run_id.replace(' ', '_'),
                    allowed_ids=result_sets.allowed_ids(split, protocol),
                    topics=split.topic_numbers)


def train_score(method: str, train: tuple, protocol: str,
                tuning: Optional[Sequence[Mapping]]) -> float:
  """F1@20 of a baseline's tuned setting on the training topics `train` it was tuned on: the
  best score of its grid search (`tuning`; `evaluation.tune` keeps that setting), or, for a
  method without parameters (Flickr order, top-k), its score there."""
  if tuning:
    return float(max(t['F1@20'] for t in tuning))
  run = evaluation.rank(method, train[0], train[1], protocol, evaluation.MethodParams())
  return float(evaluation.score(train[0], run).mean['F1@20'])


def _file_name(name: str) -> str:
  out = name.replace(' (', '-').replace(')', '').replace(', ', '-').replace(' ', '_')
  return out.replace('&', 'and').replace('+', 'plus').replace('=', '')


class Stages(RowCache):
  """The stages of `run` on the official split, sharing the loaded data, the trainer and the
  row cache (`RowCache`: `cached`, `saved_row`, `row_path`)."""

  def __init__(self, cfg: ReproduceConfig, log: Callable = print):
    self.cfg = cfg
    self.log = log
    self.root = cfg.workdir or os.path.join('work', 'reproduce', cfg.dataset)
    outputs.claim_dir(self.root, 'reproduce\'s work', trees=WORK_TREES,
                      flag='--workdir')
    if cfg.compilation_cache:
      devices.use_compilation_cache(os.path.join(self.root, 'jax_cache'))
    super().__init__(cfg.rows_dir or os.path.join(self.root, 'rows'),
                     own_folder=bool(cfg.rows_dir))
    self.results_dir = cfg.results_path
    self.trainer = Trainer(cfg, self.root, log)
    unknown = sorted(set(cfg.variants) - set(ROW_ORDER))
    if unknown:
      raise InputError(f'--variants: unknown {unknown}; expected some of {list(ROW_ORDER)}')
    self.variants = [cfg.own_schedule(v) for v in variants_lib.VARIANTS
                     if v.name in cfg.variants]
    if cfg.dataset == 'synthetic':  # its layout has no descriptors: text-only rows
      self.variants = [dataclasses.replace(v, views=None) for v in self.variants
                       if not v.views or v.name not in VIEW_ABLATIONS]
    self._raw_views = None
    self._viewed = {}

  def load(self) -> None:
    for split in ('dev', 'test'):
      store = ''
      if self.cfg.dataset != 'synthetic':  # synthetic data comes with its feature stores
        store = ensure_features(self.cfg, split, self.log)
      setattr(self, split, data_lib.load(self.cfg.dataset, split, self.cfg.data_dir, store))

  # -- feature settings (colt_jax.data.views)

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
               'topics': test[0].topic_numbers, 'versions': versions.of(method)}
        if suffix:
          key['views'] = dataclasses.asdict(spec)
        if method == 'gbt-pairs':  # the descriptors it reads (every topic must have them)
          key['descriptors'] = list(gbt_pairs.available_descriptors(train[0]))
        out[name] = self.cached(kind, name, key, compute)
        if 'train_F1@20' not in out[name]:  # a row cached before rows recorded it
          out[name]['train_F1@20'] = train_score(method, train, protocol,
                                                 out[name].get('tuning'))
        self.log(f'  {name:<24} F1@20 {out[name]["mean"]["F1@20"]:.4f}')
    return out

  def colt_rows(self, variant: Variant, seed: int, train: tuple, test: tuple, kind: str,
                tag: str, protocols: Optional[Sequence[str]] = None,
                chooser: Optional[Variant] = None) -> dict:
    """The row of `variant` trained with `seed` on `train`, scored on `test`, per protocol.
    A colt-pairs row's w (its rule) is chosen on `train` first (`coverage_choice`), by the row
    itself or by the one it takes it from (`coverage_of`; `chooser`: that row as the caller
    configured it, e.g. with a cross-validation fold's choice). An ensemble row
    (`Variant.ensemble`) trains each seed of the reproduction and ranks with their average."""
    out = {}
    base, raw_train = variant, train
    train, test = self.viewed(variant.view_spec, train, test)
    for protocol in (self.cfg.protocols if protocols is None else protocols):
      name = f'{base.name} (seed {seed}, {protocol})'
      variant, chosen = base, {}
      if base.chooses_coverage_weight:  # w of a colt-pairs row: on its training topics
        # (an ablation of colt-pairs takes the w chosen for colt-pairs itself)
        by = chooser or next((v for v in self.variants if v.name == base.coverage_of), base)
        chosen = dict(self.coverage_choice(by, raw_train, kind, tag, protocol)['chosen'])
        variant = dataclasses.replace(base, **chosen)
      scl_cfg, ttc_cfg = self.trainer.configs_for(variant, seed, tag, protocol)
      threshold = (variant.irrelevant_threshold if variant.irrelevant_threshold is not None
                   else self.cfg.threshold_for(protocol))
      members = self.cfg.seeds if variant.ensemble else (seed,)
      member_cfgs = ([self.trainer.configs_for(variant, s, tag, protocol)[1] for s in members]
                     if variant.ensemble else [ttc_cfg])
      key = {'variant': variant_key(variant), 'seed': seed, 'tag': tag,
             'irrelevant_threshold': threshold,
             'scl': _trained_key(scl_cfg) if scl_cfg else None,
             'ttc': _trained_key(ttc_cfg) if ttc_cfg else None,
             'topics': test[0].topic_numbers}
      if variant.ensemble:
        key['members'] = [_trained_key(c) for c in member_cfgs]
      if variant.relevance_mixes:
        key['relevance_model'] = relevance_key()
      if row_versions.colt_methods(variant):  # the baselines it runs (absent: none)
        key['versions'] = row_versions.colt_versions(variant)

      def compute(protocol=protocol, scl_cfg=scl_cfg, ttc_cfg=ttc_cfg, threshold=threshold,
                  variant=variant, chosen=chosen, members=members, member_cfgs=member_cfgs):
        for s in members:
          self.trainer.train(variant, s, train, tag, protocol)  # no-op when trained
        tuned = tune_dbscan(train, scl_cfg, protocol) if variant.post == 'dbscan' else None
        params = colt_params(variant, scl_cfg, ttc_cfg, tuned, threshold)
        if variant.ensemble:  # phi of every member, comma-separated: their heads averaged
          params = dataclasses.replace(
              params, ttc_checkpoint=','.join(c.workdir for c in member_cfgs))
        extra = {}
        if variant.relevance_mixes:  # a relevance model beside phi, fitted on `train`
          model_dir = self.relevance_model(train, tag, protocol, ttc_cfg)
          colt = evaluation.colt_retriever(params).with_relevance_model(
              relevance_lib.load(model_dir), variant.relevance_mix)
          run = evaluation.run_retriever(colt, test[0], test[1], protocol)
          extra = {'relevance_model': model_dir, 'relevance_mix': variant.relevance_mix}
        else:
          run = evaluation.rank_colt(test[0], test[1], protocol, params)
        effect = (effect_lib.reencoder_effect(test[0], test[1], scl_cfg.workdir, protocol)
                  if scl_cfg else None)
        return _result_record(test[0], run, protocol, {
            'method': 'colt', 'variant': variant.name, 'seed': seed, 'g_effect': effect,
            'chosen': dict(tuned or {}, **chosen),
            'params': dataclasses.asdict(params),
            'scl_config': dataclasses.asdict(scl_cfg) if scl_cfg else None,
            'ttc_config': dataclasses.asdict(ttc_cfg) if ttc_cfg else None,
            # which trained weights it read (rows that share a training must agree)
            'ttc_digests': [checkpoints.weights_digest(c.workdir) for c in member_cfgs if c],
            **extra})

      out[name] = self.cached(kind, name, dict(key, protocol=protocol), compute)
      self.log(f'  {name:<40} F1@20 {out[name]["mean"]["F1@20"]:.4f}')
    return out

  def relevance_model(self, train: tuple, tag: str, protocol: str, ttc_cfg) -> str:
    """The folder of the relevance model fitted on the (viewed) training split `train`
    (`row_training.relevance_model`: once per training split, feature setting, N and
    protocol)."""
    return fit_relevance_model(self.root, train, tag, protocol, ttc_cfg.num_images, self.log)

  def coverage_choice(self, variant: Variant, train: tuple, kind: str, tag: str,
                      protocol: str) -> dict:
    """w of a colt-pairs row's coverage selection and phi's checkpoint, chosen by an inner
    k-fold over its training topics `train` alone (`choosing.score_coverage` over
    COVERAGE_WEIGHTS x phi's kept checkpoints, the row's phi trained with the first seed on
    each inner part, like `fold_choice`'s threshold and X):
    {'chosen': {'coverage_weight': w, 'ttc_step': step}, 'scores': [...]}. A row that chooses
    its rule (`Variant.choose_rule`) weighs the cluster rule too (CLUSTER_THRESHOLDS x
    CLUSTER_PER_CATEGORY): 'chosen' then names the selection and its parameters."""
    cfg = self.cfg
    seed = cfg.seeds[0]
    scl_cfg, ttc_cfg = self.trainer.configs_for(variant, seed, tag, protocol)
    key = {'variant': variant_key(variant), 'inner_folds': cfg.inner_folds,
           'fold_seed': cfg.fold_seed, 'seed': seed, 'weights': list(COVERAGE_WEIGHTS),
           'checkpoint_every': ttc_cfg.checkpoint_every, 'max_to_keep': ttc_cfg.max_to_keep,
           'scl': _trained_key(scl_cfg) if scl_cfg else None, 'ttc': _trained_key(ttc_cfg),
           'topics': train[0].topic_numbers, 'protocol': protocol}
    clusters = ([(t, x) for t in CLUSTER_THRESHOLDS for x in CLUSTER_PER_CATEGORY]
                if variant.choose_rule else [])
    if clusters:  # (absent from the key of a row that chooses w alone: its cache stays valid)
      key['clusters'] = clusters
    if variant.pair_blends:  # likewise b, for a row that chooses it
      key['pair_blends'] = list(variant.pair_blends)
    if variant.dpp_thetas:  # and the DPP rule, for a row that offers it
      key['dpp_thetas'] = list(variant.dpp_thetas)
    if variant.relevance_mixes:  # and a, for a row with a relevance model beside phi
      key['relevance_mixes'] = list(variant.relevance_mixes)
      key['relevance_model'] = relevance_key()
    key['versions'] = versions.of('expected-coverage')  # w is expected coverage's weight

    def compute():
      splits = choosing.inner_kfold(train, cfg.inner_folds, cfg.fold_seed, f'{tag}-choice')
      rules = 'w, clusters or dpp' if variant.dpp_thetas else 'w or clusters'
      what = f'the rule ({rules})' if clusters else 'w'
      self.log(f'  choosing {what} of {variant.name} on {cfg.inner_folds} inner folds of the '
               f'{len(train[0].topics)} training topics ({protocol} protocol)')
      viewed = [self.viewed(variant.view_spec, tr, va) for tr, va in splits]
      scores = choosing.score_coverage(self.trainer, variant, seed, viewed, f'{tag}-choice',
                                       protocol, COVERAGE_WEIGHTS, self.log, clusters,
                                       variant.pair_blends, variant.dpp_thetas,
                                       variant.relevance_mixes)
      return {'chosen': choosing.best_coverage(scores), 'scores': scores}

    return self.cached(kind, f'coverage choice {variant.name} ({protocol})', key, compute)

  def official(self) -> dict:
    self.log(f'[3/4] baselines on {self.cfg.dataset} test, tuned on dev')
    rows = self.baselines(self.dev, self.test, 'official')
    for spec in self.view_specs():  # the baselines on each feature setting of a CoLT row
      rows.update(self.baselines(self.dev, self.test, 'official', self.cfg.ablation_protocols,
                                 spec))
    self.log('[4/4] CoLT and ablations: trained on dev, scored on test')
    for variant in self.variants:
      protocols = self.cfg.protocols
      if variant.name not in MAIN_VARIANTS:
        protocols = [p for p in protocols if p in self.cfg.ablation_protocols]
      for seed in self.cfg.seeds_of(variant):  # mean +- std over its seeds
        rows.update(self.colt_rows(variant, seed, self.dev, self.test, 'official', 'dev',
                                   protocols))
    return rows

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
