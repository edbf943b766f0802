"""The reproduction's colt-pairs rows (beyond the paper): w and rule choices on training topics,
blend/ensemble/DPP rows, relevance rows, their cross-validated ablations and the report."""
import dataclasses
import glob
import os

import numpy as np
import pytest

from colt_jax.evaluation import methods as evaluation
from colt_jax.data import views
from colt_jax.util.errors import ConfigError
from colt_jax.reproduction import tuning as choosing
from colt_jax.reproduction import cross_validation
from colt_jax.reproduction import pipeline as reproduce
from colt_jax.reproduction import report_sections
from colt_jax.reproduction import report_tables as tables
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import row_training
from colt_jax.reproduction import variants as rows_lib


@pytest.mark.slow
def test_colt_pairs_rule_chooses_coverage_or_clusters_on_colt_pairs_trainings(cfg, tmp_path):
  """`colt-pairs rule` ranks with colt-pairs' own trainings (none of its own) and the rule its
  training topics chose: coverage (w) or clusters (threshold, X), with phi's checkpoint."""
  pairs_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0,), folds=0,
                                  protocols=('pool',), variants=('colt-pairs', 'colt-pairs rule'))
  rep = reproduce.Reproduction(pairs_cfg, log=lambda *_: None)
  rep.load()
  pairs, rule = (next(v for v in rep.variants if v.name == n)
                 for n in ('colt-pairs', 'colt-pairs rule'))
  rep.colt_rows(pairs, 0, rep.dev, rep.test, 'official', 'dev')
  trained = sorted(os.listdir(os.path.join(pairs_cfg.workdir, 'train')))
  row = rep.colt_rows(rule, 0, rep.dev, rep.test, 'official', 'dev')[
      'colt-pairs rule (seed 0, pool)']
  assert sorted(os.listdir(os.path.join(pairs_cfg.workdir, 'train'))) == trained
  choice = row_cache.read_json(rep.row_path('official', 'coverage choice colt-pairs rule (pool)'))
  settings = [{k: v for k, v in s.items() if k not in choosing.SCORED} for s in choice['scores']]
  assert settings == [{'selection': 'coverage', 'coverage_weight': w, 'ttc_step': 2}
                      for w in rows_lib.COVERAGE_WEIGHTS] + [
      {'selection': 'cluster', 'cluster_threshold': t, 'per_category': x, 'ttc_step': 2}
      for t in rows_lib.CLUSTER_THRESHOLDS for x in rows_lib.CLUSTER_PER_CATEGORY]
  assert choice['chosen'] == choosing.best_coverage(choice['scores'])
  assert row['chosen'] == choice['chosen']
  chosen = choice['chosen']
  assert row['params']['selection'] == chosen['selection']
  if chosen['selection'] == 'cluster':
    assert (row['params']['cluster_threshold'], row['params']['per_category']) == (
        chosen['cluster_threshold'], chosen['per_category'])
  else:
    assert row['params']['coverage_weight'] == chosen['coverage_weight']
  # colt-pairs' own choice is keyed as before: no cluster grid
  assert 'clusters' not in row_cache.read_json(
      rep.row_path('official', 'coverage choice colt-pairs (pool)'))['key']

@pytest.mark.slow
def test_blend_ensemble_and_dpp_rows_reuse_colt_pairs_trainings(cfg, tmp_path):
  """`colt-pairs blend` chooses b with the rule on its training topics; `colt-pairs
  ensemble` is one row whose phi is every seed's colt-pairs phi (comma-separated, heads
  averaged) with the blend row's choice; `colt-pairs dpp` offers the DPP rule too. None
  trains a model colt-pairs does not."""
  names = ('colt-pairs', 'colt-pairs blend', 'colt-pairs ensemble', 'colt-pairs dpp')
  pairs_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0, 1), folds=0,
                                  protocols=('pool',), variants=names)
  rep = reproduce.Reproduction(pairs_cfg, log=lambda *_: None)
  rep.load()
  pairs, blend, ensemble, dpp = (next(v for v in rep.variants if v.name == n) for n in names)
  assert pairs_cfg.seeds_of(ensemble) == (0,) and pairs_cfg.seeds_of(blend) == (0, 1)
  for seed in (0, 1):
    rep.colt_rows(pairs, seed, rep.dev, rep.test, 'official', 'dev')
  models = lambda: sorted(os.path.relpath(d, pairs_cfg.workdir) for d in glob.glob(
      os.path.join(pairs_cfg.workdir, 'train', '*', '*-*')))
  trained = models()
  assert any('choice-inner' in d for d in trained)
  blended = rep.colt_rows(blend, 0, rep.dev, rep.test, 'official', 'dev')[
      'colt-pairs blend (seed 0, pool)']
  choice = row_cache.read_json(rep.row_path('official', 'coverage choice colt-pairs blend (pool)'))
  assert choice['key']['pair_blends'] == list(rows_lib.PAIR_BLENDS)
  assert sorted({s['pair_blend'] for s in choice['scores']}) == sorted(rows_lib.PAIR_BLENDS)
  per_blend = len(rows_lib.COVERAGE_WEIGHTS) + len(rows_lib.CLUSTER_THRESHOLDS) * len(
      rows_lib.CLUSTER_PER_CATEGORY)
  assert len(choice['scores']) == per_blend * len(rows_lib.PAIR_BLENDS)
  assert blended['chosen'] == choice['chosen'] == choosing.best_coverage(choice['scores'])
  assert blended['params']['pair_blend'] == choice['chosen']['pair_blend']
  row = rep.colt_rows(ensemble, 0, rep.dev, rep.test, 'official', 'dev')[
      'colt-pairs ensemble (seed 0, pool)']
  assert models() == trained
  members = [rep.trainer.configs_for(pairs, s, 'dev', 'pool')[1].workdir for s in (0, 1)]
  assert row['params']['ttc_checkpoint'] == ','.join(members)
  assert row['chosen'] == choice['chosen'] and len(row['key']['members']) == 2
  assert set(row['per_topic']) == {str(t) for t in rep.test[0].topic_numbers}
  with pytest.raises(ConfigError, match='ensemble'):
    rows_lib.Variant('x', 'heads', '', ensemble=True)
  with pytest.raises(ConfigError, match='blends'):
    rows_lib.Variant('x', 'heads', '', pair_blends=(1.5,))
  # colt-pairs dpp: the DPP rule offered beside coverage and clusters, on the same trainings.
  dpp_row = rep.colt_rows(dpp, 0, rep.dev, rep.test, 'official', 'dev')[
      'colt-pairs dpp (seed 0, pool)']
  assert models() == trained
  choice = row_cache.read_json(rep.row_path('official', 'coverage choice colt-pairs dpp (pool)'))
  assert choice['key']['dpp_thetas'] == list(rows_lib.DPP_THETAS)
  offered = [s for s in choice['scores'] if s['selection'] == 'dpp']
  assert sorted(s['selection_theta'] for s in offered) == sorted(rows_lib.DPP_THETAS)
  assert len(choice['scores']) == per_blend + len(rows_lib.DPP_THETAS)
  assert dpp_row['chosen'] == choice['chosen'] == choosing.best_coverage(choice['scores'])
  assert dpp_row['params']['selection'] == choice['chosen']['selection']
  if choice['chosen']['selection'] == 'dpp':
    assert dpp_row['params']['selection_theta'] == choice['chosen']['selection_theta']
  with pytest.raises(ConfigError, match='choose_rule'):
    rows_lib.Variant('x', 'heads', '', dpp_thetas=(0.5,))
  with pytest.raises(ConfigError, match='needs selection dpp'):
    rows_lib.Variant('x', 'heads', '', selection='cluster', selection_theta=0.5)
  # A chosen DPP rule reaches the ranking's parameters, whatever this run's inner folds chose.
  forced = dataclasses.replace(dpp, selection='dpp', selection_theta=0.95, ttc_step=0)
  params = row_training.colt_params(forced, None, rep.trainer.configs_for(dpp, 0, 'dev', 'pool')[1])
  assert (params.selection, params.selection_theta) == ('dpp', 0.95)
  assert params.inference_settings().selection_theta == 0.95

@pytest.mark.slow
def test_relevance_row_chooses_its_mix_and_fits_its_model_on_training_topics(cfg, tmp_path):
  """`colt-pairs relevance`: colt-pairs' trainings, a relevance model fitted on the training
  topics (kept in the work folder, reused), a chosen with the rule; the row ranks with both."""
  from colt_jax.pairs import relevance_model  # pylint: disable=g-import-not-at-top
  names = ('colt-pairs', 'colt-pairs relevance')
  pairs_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0,), folds=0,
                                  protocols=('pool',), variants=names)
  rep = reproduce.Reproduction(pairs_cfg, log=lambda *_: None)
  rep.load()
  pairs, relevance = (next(v for v in rep.variants if v.name == n) for n in names)
  rep.colt_rows(pairs, 0, rep.dev, rep.test, 'official', 'dev')
  trained = sorted(glob.glob(os.path.join(pairs_cfg.workdir, 'train', '*', 'ttc-*')))
  row = rep.colt_rows(relevance, 0, rep.dev, rep.test, 'official', 'dev')[
      'colt-pairs relevance (seed 0, pool)']
  assert sorted(glob.glob(os.path.join(pairs_cfg.workdir, 'train', '*', 'ttc-*'))) == trained
  choice = row_cache.read_json(rep.row_path('official',
                                            'coverage choice colt-pairs relevance (pool)'))
  assert choice['key']['relevance_mixes'] == list(rows_lib.RELEVANCE_MIXES)
  assert sorted({s['relevance_mix'] for s in choice['scores']}) == list(rows_lib.RELEVANCE_MIXES)
  assert row['chosen'] == choice['chosen'] == choosing.best_coverage(choice['scores'])
  assert row['relevance_mix'] == choice['chosen']['relevance_mix']
  model_dir = row['relevance_model']
  assert os.path.dirname(model_dir) == os.path.join(pairs_cfg.workdir, 'train', 'dev')
  model = relevance_model.load(model_dir)
  assert model.parts[0][0] == 'text'
  # Fitted on the training topics' pools of phi's N candidates, every labelled photo of them.
  viewed_dev, _ = rep.viewed(relevance.view_spec, rep.dev, rep.test)
  num_images = rep.trainer.configs_for(relevance, 0, 'dev', 'pool')[1].num_images
  pools = relevance_model.split_pools(*viewed_dev, num_images)
  assert model.num_photos == sum(int((y >= 0).sum()) for *_, y in pools)
  assert not set(viewed_dev[0].topic_numbers) & set(rep.test[0].topic_numbers)
  # The row is what its Retriever ranks: phi at its checkpoint, the model, its a.
  colt = evaluation.colt_retriever(evaluation.MethodParams(**row['params'])).with_relevance_model(
      model, row['relevance_mix'])
  run = evaluation.run_retriever(colt, rep.test[0], rep.test[1], 'pool')
  assert {str(t): [[p, s] for p, s in r] for t, r in run.items()} == row['run']
  with pytest.raises(ConfigError, match='need choose_rule'):
    rows_lib.Variant('x', 'heads', '', relevance_mixes=(0.5,))
  with pytest.raises(ConfigError, match=r'relevance mixes must be in \[0, 1\]'):
    rows_lib.Variant('x', 'heads', '', choose_rule=True, relevance_mixes=(2.0,))

@pytest.mark.slow
def test_gbt_pairs_relevance_chooses_w_and_a_on_training_topics_with_the_rows_model(
    cfg, tmp_path, monkeypatch):
  """The fair baseline of `colt-pairs relevance`: gbt-pairs' models, its r mixed with that
  row's relevance model (the same folder), w and a chosen on out-of-fold predictions of the
  training topics; at a = 0 the grid scores what gbt-pairs' own tuning scores."""
  from colt_jax.baselines import gbt_pairs  # pylint: disable=g-import-not-at-top
  from colt_jax.pairs import relevance_model  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import gbt_relevance
  rel_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0,), folds=0,
                                protocols=('pool',), variants=('colt-pairs relevance',))
  rep = reproduce.Reproduction(rel_cfg, log=lambda *_: None)
  rep.load()
  variant = rep.relevance_variant()
  assert variant.name == 'colt-pairs relevance'
  row = gbt_relevance.rows(rep, variant, rep.dev, rep.test, 'official', 'dev')[
      'gbt-pairs relevance (pool)']
  tuning = row['tuning']
  assert [t['setting']['relevance_mix'] for t in tuning] == [
      a for a in rows_lib.RELEVANCE_MIXES for _ in gbt_relevance.WEIGHTS]
  assert row['chosen'] == gbt_relevance.best_setting(tuning)
  assert row['train_F1@20'] == max(t['F1@20'] for t in tuning)
  _, own = evaluation.tune('gbt-pairs', rep.dev[0], rep.dev[1], 'pool',
                           evaluation.MethodParams())
  assert [t['F1@20'] for t in tuning[:len(own)]] == pytest.approx([v for _, v in own])
  # the relevance row's own model, fitted on the training topics
  ttc_cfg = rep.trainer.configs_for(variant, 0, 'dev', 'pool')[1]
  viewed_dev, viewed_test = rep.viewed(variant.view_spec, rep.dev, rep.test)
  assert row['relevance_model'] == rep.relevance_model(viewed_dev, 'dev', 'pool', ttc_cfg)
  scores = gbt_relevance.mixed_scores(
      gbt_pairs.fit(*rep.dev, 'pool').predict(*rep.test, 'pool'),
      relevance_model.load(row['relevance_model']), viewed_test[1],
      row['chosen']['relevance_mix'])
  run = gbt_pairs.select(scores, weight=row['chosen']['gbt_weight'], k=evaluation.RUN_LENGTH)
  assert {str(t): [[p, s] for p, s in r] for t, r in run.items()} == row['run']
  # inner parts: the training topics alone, each held out once; each part's view statistics
  # and relevance model from its own training topics
  viewed, fitted = [], []
  real_viewed, real_fit = rep.viewed, relevance_model.fit_split
  monkeypatch.setattr(rep, 'viewed', lambda spec, a, b: (
      viewed.append((a[0].topic_numbers, b[0].topic_numbers)) or real_viewed(spec, a, b)))
  monkeypatch.setattr(gbt_relevance.relevance_lib, 'fit_split', lambda split, *a, **k: (
      fitted.append(split.topic_numbers) or real_fit(split, *a, **k)))
  oof = gbt_relevance.out_of_fold(rep, variant.view_spec, rep.dev, ttc_cfg.num_images, 'pool',
                                  'check')
  held = [s.topic for part, _, _ in oof for s in part]
  assert sorted(held) == sorted(rep.dev[0].topic_numbers)
  assert len(viewed) == len(fitted) == len(oof) >= 2
  for (part, valid), fit_on, (scores, _, _) in zip(viewed, fitted, oof):
    assert fit_on == part and not set(part) & set(valid)
    assert sorted(valid) == sorted(s.topic for s in scores)
    assert set(part) | set(valid) == set(rep.dev[0].topic_numbers)
  # cached: a second call reads the row
  again = gbt_relevance.rows(rep, variant, rep.dev, rep.test, 'official', 'dev')
  assert again['gbt-pairs relevance (pool)']['run'] == row['run']

def test_official_adds_the_fair_baseline_only_beside_a_relevance_row(cfg, tmp_path,
                                                                       monkeypatch):
  from colt_jax.reproduction import gbt_relevance
  from colt_jax.reproduction import stages
  calls = []
  monkeypatch.setattr(stages.Stages, 'official', lambda self: {'x (pool)': {}})
  monkeypatch.setattr(gbt_relevance, 'rows', lambda rep, variant, train, test, kind, tag: (
      calls.append((variant.name, train[0].split, test[0].split, kind, tag)) or {'g': {}}))
  for names, expected in ((('colt-pairs relevance',), ['x (pool)', 'g']), (('colt',),
                                                                            ['x (pool)'])):
    rep = reproduce.Reproduction(dataclasses.replace(
        cfg, workdir=str(tmp_path / 'work'), variants=names), log=lambda *_: None)
    rep.load()
    assert list(rep.official()) == expected
  assert calls == [('colt-pairs relevance', 'dev', 'test', 'official', 'dev')]

def test_each_fold_scores_colt_pairs_with_its_colt_choice(cfg, tmp_path, monkeypatch):
  """In cross-validation the colt-pairs row follows the fold's `colt` choice and chooses its
  w on the fold's training topics (the wiring; the choice itself is tested above)."""
  pairs_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0,), folds=2,
                                  protocols=('pool',), variants=('colt', 'colt-pairs'))
  rep = reproduce.Reproduction(pairs_cfg, log=lambda *_: None)
  rep.load()
  chosen = {'scl': {'beta': 0.1}, 'ttc': {'num_steps': 1}, 'irrelevant_threshold': 0.9,
            'per_category': 1}
  calls = []
  monkeypatch.setattr(rep, 'fold_choice', lambda *a: {'chosen': chosen})
  monkeypatch.setattr(rep, 'baselines', lambda *a, **k: {})

  def colt_rows(variant, seed, train, held, kind, tag, protocols, chooser=None):
    del chooser
    calls.append((variant, train[0].topic_numbers, held[0].topic_numbers))
    return {f'{variant.name} (seed {seed}, pool)': {
        'protocol': 'pool', 'mean': {'F1@20': 0.5}, 'run': {},
        'per_topic': {str(t): {'F1@20': 0.5} for t in held[0].topic_numbers}}}

  monkeypatch.setattr(rep, 'colt_rows', colt_rows)
  coverage_calls = []

  def coverage_choice(variant, train, kind, tag, protocol):
    coverage_calls.append((variant.name, train[0].topic_numbers, kind, protocol))
    return {'chosen': {'coverage_weight': 0.25, 'ttc_step': 1},
            'scores': [{'F1@20': 0.6}, {'F1@20': 0.7}]}

  monkeypatch.setattr(rep, 'coverage_choice', coverage_choice)
  cv = rep.cross_validation()
  assert {'colt (seed 0, pool)', 'colt-pairs (seed 0, pool)'} <= set(cv['merged'])
  # each fold records colt-pairs' choice on its training topics (the report's table)
  assert [c[0] for c in coverage_calls] == ['colt-pairs', 'colt-pairs']
  for fold, call in zip(cv['folds'], coverage_calls):
    assert fold['choices']['pool']['coverage']['colt-pairs'] == {
        'chosen': {'coverage_weight': 0.25, 'ttc_step': 1}, 'F1@20': 0.7}
    assert not set(call[1]) & set(fold['test_topics'])
  pairs = [c for c in calls if c[0].name == 'colt-pairs']
  assert len(pairs) == 2
  for variant, train, held in pairs:
    assert not set(train) & set(held)
    # the fold's steps; colt-pairs trains no g, so the fold's g setting does not apply
    assert variant.ttc['num_steps'] == 1 and variant.scl is None
    assert variant.chooses_coverage_weight  # colt_rows chooses w on `train`

def test_each_fold_scores_the_fair_baseline_beside_the_relevance_row(cfg, tmp_path,
                                                                      monkeypatch):
  """In cross-validation, gbt-pairs given the relevance model is scored per fold on the
  fold's own training and held-out topics, with the relevance row as the fold configured it."""
  from colt_jax.reproduction import gbt_relevance
  rel_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0,), folds=2,
                                protocols=('pool',),
                                variants=('colt', 'colt-pairs', 'colt-pairs relevance'))
  rep = reproduce.Reproduction(rel_cfg, log=lambda *_: None)
  rep.load()
  chosen = {'scl': {'beta': 0.1}, 'ttc': {'num_steps': 1}, 'irrelevant_threshold': 0.9,
            'per_category': 1}
  monkeypatch.setattr(rep, 'fold_choice', lambda *a: {'chosen': chosen})
  monkeypatch.setattr(rep, 'baselines', lambda *a, **k: {})
  row = lambda held: {'protocol': 'pool', 'mean': {'F1@20': 0.5}, 'run': {},
                      'per_topic': {str(t): {'F1@20': 0.5} for t in held[0].topic_numbers}}
  monkeypatch.setattr(rep, 'colt_rows', lambda variant, seed, train, held, *a, **k: {
      f'{variant.name} (seed {seed}, pool)': row(held)})
  monkeypatch.setattr(rep, 'coverage_choice', lambda *a: {
      'chosen': {'coverage_weight': 0.25, 'ttc_step': 1}, 'scores': [{'F1@20': 0.6}]})
  calls = []

  def rows(rep_, variant, train, held, kind, tag, protocol):
    assert rep_ is rep
    calls.append((variant, train[0].topic_numbers, held[0].topic_numbers, kind, tag, protocol))
    return {'gbt-pairs relevance (pool)': {**row(held), 'train_F1@20': 0.6}}

  monkeypatch.setattr(gbt_relevance, 'rows', rows)
  cv = rep.cross_validation()
  assert 'gbt-pairs relevance (pool)' in cv['merged']
  assert len(calls) == 2
  for (variant, train, held, kind, tag, protocol), fold in zip(calls, cv['folds']):
    assert variant.name == 'colt-pairs relevance' and variant.ttc['num_steps'] == 1
    assert sorted(held) == sorted(fold['test_topics']) and not set(train) & set(held)
    assert kind == tag and tag.endswith(f'fold{fold["fold"]}') and protocol == 'pool'

def test_cv_tunes_baselines_on_every_feature_setting_a_colt_row_uses(tmp_path):
  """A fold tunes the view baselines on colt-pairs' features (text + descriptors + metadata)
  even when `colt`'s choice weighs no feature setting, and on each of cv_views when it does."""
  base = dict(dataset='div400', workdir=str(tmp_path / 'w'))
  names = lambda cfg: [s.name for s in reproduce.Reproduction(
      cfg, log=lambda *_: None).baseline_settings()]
  pairs = views.ViewSpec(**rows_lib.METADATA_VIEWS).name
  descvis = views.ViewSpec(**rows_lib.DESCVIS_VIEWS).name
  assert names(reproduce_config.ReproduceConfig(**base)) == [pairs]
  assert names(reproduce_config.ReproduceConfig(**base, cv_choose=reproduce_config.CV_CHOICES)) == [
      descvis, pairs]
  assert names(reproduce_config.ReproduceConfig(**base, variants=('colt',))) == []

def test_each_descriptor_has_an_opt_in_row_without_it(tmp_path):
  """One colt-pairs ablation per official descriptor, each removing that one alone; not among
  the default rows (--per_view_ablations adds them); the official split's baselines are not
  scored on their settings (nine descriptors, which `ViewSpec.name` does not tell apart)."""
  by_name = {v.name: v for v in rows_lib.VARIANTS}
  pairs = by_name['colt-pairs']
  assert rows_lib.OPT_IN_VARIANTS == tuple(f'colt-pairs without {d}'
                                           for d in views.ALL_DESCRIPTORS)
  for d in views.ALL_DESCRIPTORS:
    v = by_name[f'colt-pairs without {d}']
    spec = v.view_spec
    assert set(spec.descriptors) == set(views.ALL_DESCRIPTORS) - {d}
    assert (spec.descriptor_weight, spec.metadata_weight) == (
        pairs.view_spec.descriptor_weight, pairs.view_spec.metadata_weight)
    assert (v.ttc, v.scl, v.table, v.selection, v.coverage_of) == (
        pairs.ttc, None, 'heads', 'coverage', 'colt-pairs')
  assert len({by_name[n].view_spec for n in rows_lib.OPT_IN_VARIANTS}) == 10
  assert not set(rows_lib.OPT_IN_VARIANTS) & set(reproduce_config.ReproduceConfig().variants)
  assert set(rows_lib.DEFAULT_VARIANTS) | set(rows_lib.OPT_IN_VARIANTS) == set(by_name)
  assert set(rows_lib.OPT_IN_VARIANTS) <= set(rows_lib.VIEW_ABLATIONS)  # text-only on synthetic
  kept = ('colt + descvis', 'colt-pairs', 'colt-pairs without descriptors')
  rep = reproduce.Reproduction(reproduce_config.ReproduceConfig(
      dataset='div400', workdir=str(tmp_path / 'w'),
      variants=kept + rows_lib.OPT_IN_VARIANTS), log=lambda *_: None)
  assert rep.view_specs() == [by_name[n].view_spec for n in kept]
  # the feature-settings table leaves them to the heads table (no baselines on their settings)
  table = report_sections.view_rows({v.name: dataclasses.asdict(v) for v in rows_lib.VARIANTS})
  assert 'colt-pairs without descriptors' in table
  assert not set(rows_lib.OPT_IN_VARIANTS) & set(table)

def test_colt_pairs_rows_train_on_their_own_schedule():
  """colt-pairs rows train phi for `pairs_steps` in every protocol and fold (the fold's
  `colt` choice of steps does not apply to them); 0 keeps the `colt` row's steps."""
  cfg = reproduce_config.ReproduceConfig()
  by_name = {v.name: v for v in rows_lib.VARIANTS}
  pairs = cfg.own_schedule(by_name['colt-pairs'])
  assert pairs.ttc['num_steps'] == cfg.pairs_steps == 300
  assert cfg.own_schedule(by_name['colt-pairs cluster']).ttc['num_steps'] == 300
  assert cfg.own_schedule(by_name['colt']) == by_name['colt']
  chosen = {'scl': {}, 'ttc': {'num_steps': 400}, 'irrelevant_threshold': 0.7}
  assert cross_validation.chosen_variant(pairs, chosen).ttc['num_steps'] == 300
  assert cross_validation.chosen_variant(by_name['colt'], chosen).ttc['num_steps'] == 400
  follow = dataclasses.replace(cfg, pairs_steps=0)
  assert follow.own_schedule(by_name['colt-pairs']) == by_name['colt-pairs']
  with pytest.raises(ConfigError, match='pairs_steps'):
    reproduce_config.ReproduceConfig(pairs_steps=-1)

@pytest.mark.slow
def test_report_names_the_command_with_every_flag_that_shaped_its_rows(payload, cfg):
  command = cfg.command()
  assert command.startswith('python experiments/reproduce.py --dataset synthetic ')
  for flag in ('--seeds=0,1', '--folds=2', '--inner_folds=2', '--pairs_steps=0',
               "--variants='colt,colt-paper,SCL + top-k,X=2,without SCL'"):
    assert flag in command, flag
  assert '--protocol' not in command  # both protocols: the default
  text = open(cfg.doc).read()
  assert f'Generated by `{command}`' in text
  # the rows it left out are named (`colt-pairs` among them), the protocols were all run
  partial = next(l for l in text.splitlines() if l.startswith('**Part of the full'))
  assert '`colt-pairs`' in partial and '`colt`' not in partial and 'protocol' not in partial
  assert reproduce_config.ReproduceConfig().command() == (
      'python experiments/reproduce.py --dataset div400')
  # the opt-in rows are not "left out" of a full run, and adding them is one flag
  assert 'colt-pairs without CM' not in partial
  every = rows_lib.DEFAULT_VARIANTS + rows_lib.OPT_IN_VARIANTS
  assert reproduce_config.ReproduceConfig(variants=every).command() == (
      'python experiments/reproduce.py --dataset div400 --per_view_ablations')

def test_each_fold_scores_colt_pairs_ablations_with_the_w_it_chose_for_colt_pairs(
    cfg, tmp_path, monkeypatch):
  """The cross-validation scores colt-pairs' ablations (CV_ABLATIONS) at the ablation seeds
  (or at cv_ablation_seeds),
  each taking its fold's colt-pairs choice (`chooser`); text-only tokens stays on text when the
  fold's `colt` chose descriptors; the ablations add no baseline feature settings."""
  names = ('colt', 'colt-pairs', 'colt-pairs no-pair-head', 'colt-pairs text-only tokens')
  abl_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0, 1),
                                ablation_seeds=1, folds=2, protocols=('pool',), variants=names,
                                cv_ablations=True)
  assert abl_cfg.command().endswith(' --cv_ablations')
  rep = reproduce.Reproduction(abl_cfg, log=lambda *_: None)
  rep.load()
  chosen = {'scl': {'beta': 0.1}, 'ttc': {'num_steps': 1}, 'irrelevant_threshold': 0.9,
            'per_category': 1, 'views': rows_lib.DESCVIS_VIEWS}
  monkeypatch.setattr(rep, 'fold_choice', lambda *a: {'chosen': chosen})
  monkeypatch.setattr(rep, 'baselines', lambda *a, **k: {})
  calls = []

  def colt_rows(variant, seed, train, held, kind, tag, protocols, chooser=None):
    calls.append((variant, seed, chooser))
    return {f'{variant.name} (seed {seed}, pool)': {
        'protocol': 'pool', 'mean': {'F1@20': 0.5}, 'run': {},
        'per_topic': {str(t): {'F1@20': 0.5} for t in held[0].topic_numbers}}}

  monkeypatch.setattr(rep, 'colt_rows', colt_rows)
  coverage = []
  monkeypatch.setattr(rep, 'coverage_choice', lambda variant, *a: coverage.append(
      variant.name) or {'chosen': {'coverage_weight': 0.25}, 'scores': [{'F1@20': 0.6}]})
  cv = rep.cross_validation()
  for name in names[2:]:
    assert f'{name} (seed 0, pool)' in cv['merged']
    assert f'{name} (seed 1, pool)' not in cv['merged']  # ablation_seeds=1
  assert 'colt-pairs (seed 1, pool)' in cv['merged']
  ablations = [(v, c) for v, _, c in calls if v.name in names[2:]]
  assert len(ablations) == 4  # two rows, two folds, one seed
  # the chooser is the colt-pairs row its fold scored (same configuration: its cached w)
  scored_pairs = [v for v, _, _ in calls if v.name == 'colt-pairs']
  assert len(scored_pairs) == 4  # two folds, two seeds, one configuration per fold
  for variant, chooser in ablations:
    assert chooser == scored_pairs[0] and chooser.ttc['num_steps'] == 1
    assert variant.ttc['num_steps'] == 1 and variant.coverage_of == 'colt-pairs'
  text_only = [v for v, _ in ablations if v.name == 'colt-pairs text-only tokens']
  assert all(v.views is None for v in text_only)  # not the fold's `colt` feature choice
  assert coverage == ['colt-pairs', 'colt-pairs']  # only colt-pairs records its own choice
  div400 = reproduce.Reproduction(reproduce_config.ReproduceConfig(
      dataset='div400', workdir=str(tmp_path / 'w'), variants=names + rows_lib.CV_ABLATIONS,
      cv_ablations=True), log=lambda *_: None)
  assert [s.name for s in div400.baseline_settings()] == [
      views.ViewSpec(**rows_lib.METADATA_VIEWS).name]
  # without cv_ablations (the default budget) the folds score none of them
  rep.cfg = dataclasses.replace(abl_cfg, cv_ablations=False)
  calls.clear()
  assert not set(rep.cross_validation()['merged']) & {f'{n} (seed 0, pool)' for n in names[2:]}
  # cv_ablation_seeds: the cross-validated ablations run every seed, the others still one
  rep.cfg = dataclasses.replace(abl_cfg, cv_ablation_seeds=2)
  assert rep.cfg.command().endswith(' --cv_ablations --cv_ablation_seeds=2')
  calls.clear()
  merged = rep.cross_validation()['merged']
  for name in names[2:]:
    assert {f'{name} (seed 0, pool)', f'{name} (seed 1, pool)'} <= set(merged)
  assert sorted(s for v, s, _ in calls if v.name in names[2:]) == [0, 0, 0, 0, 1, 1, 1, 1]
  by_name = {v.name: v for v in rows_lib.VARIANTS}
  assert rep.cfg.seeds_of(by_name['colt-pairs no-pair-head']) == (0,)  # dev -> test
  assert rep.cfg.seeds_of(by_name['without SCL'], cross_validation=True) == (0,)
  with pytest.raises(ConfigError, match='cv_ablation_seeds must be in'):
    dataclasses.replace(abl_cfg, cv_ablation_seeds=3)

def test_cv_ablations_keep_their_own_features_and_need_colt_pairs(tmp_path):
  """A fold's `colt` feature choice does not reach colt-pairs rows (text-only tokens stays
  on text, colt-pairs keeps its own setting); --cv_ablations without colt-pairs is refused,
  and the recorded command names the flag only when it scores something."""
  by_name = {v.name: v for v in rows_lib.VARIANTS}
  chosen = {'scl': {}, 'ttc': {}, 'irrelevant_threshold': 0.9,
            'views': rows_lib.DESCVIS_VIEWS}
  assert cross_validation.chosen_variant(by_name['colt-pairs text-only tokens'],
                                         chosen).views is None
  assert cross_validation.chosen_variant(by_name['colt-pairs'], chosen).views == (
      rows_lib.METADATA_VIEWS)
  assert cross_validation.chosen_variant(by_name['colt'], chosen).views == (
      rows_lib.DESCVIS_VIEWS)
  base = dict(dataset='div400', workdir=str(tmp_path / 'w'), cv_ablations=True)
  with pytest.raises(ConfigError, match='--cv_ablations: .* select it too'):
    reproduce_config.ReproduceConfig(**base, variants=('colt', 'colt-pairs no-pair-head'))
  assert '--cv_ablations' not in reproduce_config.ReproduceConfig(
      **base, variants=('colt',)).command()
  assert '--cv_ablations' not in reproduce_config.ReproduceConfig(
      **dict(base, folds=0), variants=('colt-pairs', 'colt-pairs no-pair-head')).command()

def test_the_report_pairs_colt_pairs_with_its_cross_validated_ablations():
  """The cross-validation section's ablation table and colt-pairs' paired lines."""
  from colt_jax.reproduction import report_cross_validation as cv_report
  rng = np.random.default_rng(0)
  metrics = ('P@20', 'CR@20', 'F1@20', 'paper_F1@20')

  def row(shift):
    per_topic = {str(t): {m: float(np.clip(0.5 + shift + 0.05 * rng.standard_normal(), 0, 1))
                          for m in metrics} for t in range(40)}
    return {'protocol': 'pool', 'per_topic': per_topic, 'fold_F1@20': [0.5, 0.5],
            'mean': {m: float(np.mean([v[m] for v in per_topic.values()])) for m in metrics}}

  merged = {'colt-pairs (seed 0, pool)': row(0.1), 'colt-pairs (seed 1, pool)': row(0.1),
            'colt-pairs no-pair-head (seed 0, pool)': row(0.0)}
  agg = tables.aggregate(merged, 'pool')
  payload = {'config': {'seeds': [0, 1], 'ablation_seeds': 1}}
  lines = cv_report._cv_ablation_lines(payload, agg, merged, 'pool',
                                       list(tables.TABLE_COLUMNS))
  text = '\n'.join(lines)
  assert "#### colt-pairs' ablations (pool protocol)" in text
  assert 'first 1 of the seeds [0, 1]' in text and 'F1@20 (paper)' in text
  assert '| colt-pairs no-pair-head |' in text
  paired = [l for l in lines if l.startswith('- against colt-pairs no-pair-head')]
  assert len(paired) == 1 and '**better**' in paired[0]
  assert cv_report._cv_ablation_lines(payload, tables.aggregate(
      {'colt-pairs (seed 0, pool)': row(0.1)}, 'pool'), merged, 'pool', []) == []
  every = {'config': {'seeds': [0, 1], 'ablation_seeds': 1, 'cv_ablation_seeds': 2}}
  text = '\n'.join(cv_report._cv_ablation_lines(every, agg, merged, 'pool',
                                                list(tables.TABLE_COLUMNS)))
  assert 'trained with every seed, like `colt-pairs`' in text and 'first 1' not in text

def test_the_reports_row_lists_are_the_reproductions():
  """results_tables keeps its own copies of the cross-validated row names (the report does not
  import variants.py and its trainers): they must stay the reproduction's."""
  assert tables.CV_ROWS == rows_lib.CV_VARIANTS
  assert tables.CV_ABLATION_ROWS == rows_lib.CV_ABLATIONS

def test_the_report_gives_short_invocations_in_tenths_of_a_minute():
  from colt_jax.reproduction import report as results_report
  assert results_report._minutes(84) == '1.4 minutes'
  assert results_report._minutes(9.9 * 60) == '9.9 minutes'
  assert results_report._minutes(92 * 60 + 10) == '92 minutes'
  assert results_report._minutes(598) == '10 minutes'
