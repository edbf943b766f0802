"""Tests of the end-to-end reproduction (colt_jax/reproduction/pipeline.py) on the tiny synthetic data."""
import dataclasses
import glob
import json
import os

import numpy as np
import pytest

from colt_jax.baselines import versions
from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import metrics
from colt_jax.util import outputs
from colt_jax.evaluation import runfile
from colt_jax.data import views
from colt_jax.util.errors import ConfigError, InputError
from colt_jax.train import trainers
from colt_jax.reproduction import tuning as choosing
from colt_jax.reproduction import cross_validation
from colt_jax.reproduction import pipeline as reproduce
from colt_jax.reproduction import report_sections
from colt_jax.reproduction import report_tables as tables
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import row_training
from colt_jax.reproduction import variants as rows_lib

TINY_SCL = """--dataset=synthetic
--beta=0.5
--learning_rate=1e-3
--batch_size=4
--images_per_query=8
--num_steps=2
--checkpoint_every=100
"""
TINY_TTC = """--dataset=synthetic
--num_layers=1
--num_heads=2
--model_dim=16
--num_images=40
--learning_rate=1e-3
--batch_size=4
--query_relative
--num_steps=2
--checkpoint_every=100
"""


@pytest.fixture(scope='module')
def repro_data(tmp_path_factory):
  """`tiny_synthetic`'s sizes with 5 category names, each a cluster of every topic: every
  fold's and inner fold's training vocabulary is the same size, so their trainings share
  compiled programs (with 40 names, each fold had its own SCL bank and phi class head: 23
  train-step compilations, about 40 s of this file)."""
  from colt_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  config = synthetic.SyntheticConfig(dim=16, num_vocabulary=5, dev_topics=8, test_topics=6,
                                     min_photos=50, max_photos=90, mean_clusters=5,
                                     min_clusters=5, max_clusters=5)
  return synthetic.generate(str(tmp_path_factory.mktemp('data') / 'repro'), seed=3,
                            config=config)


@pytest.fixture(scope='module')
def cfg(repro_data, tmp_path_factory):
  root = tmp_path_factory.mktemp('reproduce')
  flags_dir = root / 'configs'
  flags_dir.mkdir()
  (flags_dir / 'tiny_scl.flags').write_text(TINY_SCL)
  (flags_dir / 'tiny_ttc.flags').write_text(TINY_TTC)
  # "Paper" values: other learning rates, L=2, no query_relative, 8 heads, 4 steps.
  (flags_dir / 'paper_scl.flags').write_text(TINY_SCL.replace('1e-3', '1e-5') + '--beta=0.02\n')
  (flags_dir / 'paper_ttc.flags').write_text(
      TINY_TTC.replace('--query_relative\n', '').replace('--num_layers=1', '--num_layers=2')
      .replace('1e-3', '1e-4').replace('--num_heads=2', '--num_heads=8')
      .replace('--num_steps=2', '--num_steps=4'))
  return reproduce_config.ReproduceConfig(
      dataset='synthetic', data_dir=repro_data, workdir=str(root / 'work'),
      results_dir=str(root / 'results'), doc=str(root / 'RESULTS.md'), seeds=(0, 1), folds=2,
      protocols=('pool', 'global'),
      variants=('colt', 'colt-paper', 'SCL + top-k', 'X=2', 'without SCL'),
      config_dir=str(flags_dir), paper_config_dir=str(flags_dir), colt_flags='tiny',
      paper_flags='paper', progress=False,
      inner_folds=2, choice_steps=(1, 2), pairs_steps=0,
      cv_scl_grid=(('beta', (0.1, 0.5)), ('learning_rate', (1e-3,))))


@pytest.fixture(scope='module')
def payload(cfg):
  return reproduce.run(cfg, log=lambda *_: None)


@pytest.mark.slow
def test_rows_cover_every_method_variant_seed_and_protocol(payload):
  rows = payload['rows']
  for p in ('pool', 'global'):
    for m in ('topk', 'mmr', 'umons'):
      assert f'{m} ({p})' in rows
    for s in (0, 1):
      assert f'colt (seed {s}, {p})' in rows
      assert f'colt-paper (seed {s}, {p})' in rows  # every row: every seed
      # Sec. 3.3: "a retrieval list of length k" (k = 20 here), filled when phi is short.
      assert rows[f'colt-paper (seed {s}, {p})']['returned@20'] == 20
  # ablations: ablation_protocols only, and the first ablation_seeds (1) of the seeds
  assert 'X=2 (seed 0, pool)' in rows and 'X=2 (seed 0, global)' not in rows
  for v in ('X=2', 'SCL + top-k', 'without SCL'):
    assert f'{v} (seed 0, pool)' in rows and f'{v} (seed 1, pool)' not in rows
    assert f'{v} (seed 0, global)' not in rows
  # gbt-pairs: fitted on dev, its weight chosen out-of-fold there; pool only (own photos)
  assert 'gbt-pairs (pool)' in rows and 'gbt-pairs (global)' not in rows
  assert set(rows['gbt-pairs (pool)']['chosen']) == {'gbt_weight'}
  assert rows['gbt-pairs (pool)']['train_F1@20'] == max(
      t['F1@20'] for t in rows['gbt-pairs (pool)']['tuning'])
  assert 'flickr (pool)' in rows and 'flickr (global)' not in rows
  # g's effect size is recorded with every row that trains g
  effect = rows['colt (seed 0, pool)']['g_effect']
  assert set(effect) == {'relative_change', 'top_k_changed', 'k'} and effect['k'] == 20
  assert effect['relative_change'] > 0 and 0 <= effect['top_k_changed'] <= 1
  assert rows['without SCL (seed 0, pool)']['g_effect'] is None
  assert set(rows['mmr (pool)']['chosen']) == {'diversity'}  # tuned on dev
  # The tuned setting's dev F1@20 (what the report's best baseline is chosen by).
  for p in ('pool', 'global'):
    for m in ('mmr', 'umons'):
      assert rows[f'{m} ({p})']['train_F1@20'] == max(
          t['F1@20'] for t in rows[f'{m} ({p})']['tuning'])


@pytest.mark.slow
def test_pool_run_files_are_valid_and_score_as_the_table(payload, cfg):
  split, _ = data.load('synthetic', 'test', cfg.data_dir)
  allowed = {t: set(gt.relevance) for t, gt in split.ground_truth.items()}
  checked = 0
  for name, path in payload['run_files'].items():
    if name.startswith('cv ') or not name.endswith('pool)'):
      continue
    run = runfile.validate_run(path, split.topic_numbers, allowed)
    result = metrics.evaluate_run(run, split.ground_truth)
    for k, v in payload['rows'][name]['mean'].items():
      assert result.mean[k] == pytest.approx(v, abs=1e-12), (name, k)
    returned = np.mean([min(len(run.get(t, [])), 20) for t in split.topic_numbers])
    assert payload['rows'][name]['returned@20'] == pytest.approx(returned), name
    checked += 1
  assert checked >= 10


def test_shared_models_are_trained_once_and_paper_row_uses_paper_values(cfg):
  trainer = row_training.Trainer(cfg, cfg.workdir)
  variants = {v.name: v for v in rows_lib.VARIANTS}
  colt_scl, colt_ttc = trainer.configs_for(variants['colt'], 0, 'dev')
  x2_scl, x2_ttc = trainer.configs_for(variants['X=2'], 0, 'dev')
  topk_scl, topk_ttc = trainer.configs_for(variants['SCL + top-k'], 0, 'dev')
  assert colt_scl.workdir == x2_scl.workdir == topk_scl.workdir and topk_ttc is None
  assert colt_ttc.workdir == x2_ttc.workdir
  assert trainer.configs_for(variants['colt'], 1, 'dev')[1].workdir != colt_ttc.workdir
  no_scl, no_scl_ttc = trainer.configs_for(variants['without SCL'], 0, 'dev')
  assert no_scl is None and no_scl_ttc.scl_checkpoint == ''
  paper_scl, paper_ttc = trainer.configs_for(variants['colt-paper'], 0, 'dev')
  assert (paper_scl.learning_rate, paper_scl.beta) == (1e-5, 0.02)
  assert (paper_ttc.learning_rate, paper_ttc.num_layers, paper_ttc.query_relative) == (
      1e-4, 2, False)
  # Only compute-bound fields come from the repo's configuration.
  assert (paper_ttc.model_dim, paper_ttc.num_heads, paper_ttc.num_steps) == (16, 2, 2)


@pytest.mark.slow
def test_phi_is_trained_under_the_protocol_it_is_scored_on(payload, cfg):
  trainer = row_training.Trainer(cfg, cfg.workdir)
  colt = next(v for v in rows_lib.VARIANTS if v.name == 'colt')
  pool_scl, pool_ttc = trainer.configs_for(colt, 0, 'dev', 'pool')
  glob_scl, glob_ttc = trainer.configs_for(colt, 0, 'dev', 'global')
  assert (pool_ttc.protocol, glob_ttc.protocol) == ('pool', 'global')
  assert pool_ttc.workdir != glob_ttc.workdir and pool_scl.workdir == glob_scl.workdir
  for name, ttc in (('colt (seed 0, pool)', pool_ttc), ('colt (seed 0, global)', glob_ttc)):
    assert payload['rows'][name]['ttc_config']['workdir'] == ttc.workdir
    assert row_training._finished(ttc)  # pylint: disable=protected-access


def test_threshold_comes_from_the_dev_choice_unless_given(cfg, tmp_path):
  flags_dir = tmp_path / 'configs'
  flags_dir.mkdir()
  for name in ('tiny_scl.flags', 'tiny_ttc.flags', 'paper_scl.flags', 'paper_ttc.flags'):
    (flags_dir / name).write_text(open(os.path.join(cfg.config_dir, name)).read())
  cfg = dataclasses.replace(cfg, config_dir=str(flags_dir))
  assert cfg.threshold_for('pool') == 0.0  # no choice made: the argmax
  result = {'what': 'ttc', 'protocol': 'global', 'held_out_topics': [1, 2], 'topk': 0.5,
            'best': {'steps': 100, 'irrelevant_threshold': 0.9},
            'scores': [{'steps': 100, 'irrelevant_threshold': 0.9, 'F1@20': 0.6}]}
  path, _ = choosing.write_choice(cfg, result, 'python experiments/choose_steps.py x',
                                   log=lambda *_: None)
  assert path.endswith('synthetic_phi_global.choice.flags')
  assert (cfg.threshold_for('pool'), cfg.threshold_for('global')) == (0.0, 0.9)
  given = dataclasses.replace(cfg, irrelevant_threshold=0.7)
  assert given.threshold_for('global') == 0.7
  # phi's steps follow the same choice per protocol, unless ttc_steps gives them.
  assert (cfg.ttc_steps_for('pool', 2), cfg.ttc_steps_for('global', 2)) == (2, 100)
  assert dataclasses.replace(cfg, ttc_steps=0).ttc_steps_for('global', 2) == 2
  assert dataclasses.replace(cfg, ttc_steps=7).ttc_steps_for('global', 2) == 7
  trainer = row_training.Trainer(cfg, str(tmp_path / 'work'), log=lambda *_: None)
  for name, want in (('colt', 100), ('colt-paper', 100)):
    variant = next(v for v in rows_lib.VARIANTS if v.name == name)
    assert trainer.configs_for(variant, 0, 'dev', 'global')[1].num_steps == want
    assert trainer.configs_for(variant, 0, 'dev', 'pool')[1].num_steps == 2  # flagfile's


@pytest.mark.slow
def test_choose_steps_writes_flagfiles_and_evidence_that_reproduce_reads(cfg, tmp_path):
  """choose_steps on the tiny synthetic dev split: each choice lands in a flagfile (read back
  by configs.from_flagfile) with its evidence, and reproduce trains/ranks with it."""
  from colt_jax.reproduction import choice_files
  from colt_jax.pairs.config import PairsTTCConfig  # pylint: disable=g-import-not-at-top
  from colt_jax.train import configs  # pylint: disable=g-import-not-at-top
  flags_dir = tmp_path / 'configs'
  flags_dir.mkdir()
  for name in ('tiny_scl.flags', 'tiny_ttc.flags', 'paper_scl.flags', 'paper_ttc.flags'):
    (flags_dir / name).write_text(open(os.path.join(cfg.config_dir, name)).read())
  # The shipped flagfiles whose blocks choose_steps rewrites are listed in their folder's
  # manifest (experiments/configs/.colt_jax-manifest.json); these copies are recorded alike.
  outputs.record(str(flags_dir), files=('tiny_scl.flags', 'tiny_ttc.flags'))
  cfg = dataclasses.replace(cfg, config_dir=str(flags_dir), workdir=str(tmp_path / 'work'))
  quiet = lambda *_: None  # pylint: disable=unnecessary-lambda-assignment
  scl = choosing.choose_scl(cfg, holdout=3, grid={'beta': (0.1, 0.5),
                                                  'learning_rate': (1e-3,)}, log=quiet)
  path, evidence = choosing.write_choice(cfg, scl, 'python experiments/choose_steps.py '
                                          '--dataset synthetic --what scl', log=quiet)
  assert path == str(flags_dir / 'tiny_scl.flags') and os.path.isfile(evidence)
  written = configs.from_flagfile(configs.SCLConfig, path)
  assert (written.beta, written.learning_rate) == (scl['best']['beta'], 1e-3)
  text = open(path).read()
  assert text.count('--beta=') == 1 and '--dataset synthetic --what scl' in text
  assert row_training.base_configs(cfg, paper=False)[0].beta == scl['best']['beta']
  ttc = choosing.choose_steps(cfg, holdout=3, steps=(1, 2), protocol='global',
                               thresholds=(0.0, 0.9), log=quiet)
  path, evidence = choosing.write_choice(cfg, ttc, 'python experiments/choose_steps.py '
                                          '--dataset synthetic --protocol global', log=quiet)
  choice = configs.from_flagfile(configs.ProtocolChoice, path)
  assert (choice.num_steps, choice.irrelevant_threshold) == (
      ttc['best']['steps'], ttc['best']['irrelevant_threshold'])
  assert cfg.threshold_for('global') == ttc['best']['irrelevant_threshold']
  assert cfg.ttc_steps_for('global', 2) == ttc['best']['steps']
  records = choice_files.evidence_for(cfg.config_dir, cfg.choice_flagfiles())
  assert sorted(r['what'] for r in records) == ['scl', 'ttc']
  assert all(len(r['scores']) >= 2 and r['command'] for r in records)
  labels = choosing.choose_label_scheme(cfg, holdout=3, steps=(1,), thresholds=(0.0,),
                                         log=quiet)
  path, _ = choosing.write_choice(cfg, labels, 'python experiments/choose_steps.py '
                                   '--what label_scheme', log=quiet)
  assert configs.from_flagfile(PairsTTCConfig, path).label_scheme == (
      labels['best']['label_scheme'])
  assert {r['label_scheme'] for r in labels['scores']} == set(configs.LABEL_SCHEMES)


@pytest.mark.slow
def test_each_fold_chooses_on_its_own_training_topics(payload, cfg):
  """A cross-validation fold's steps and threshold come from an inner k-fold over its
  training topics (never the dev choice flagfiles), and its `colt` row uses them."""
  rep = reproduce.Reproduction(cfg, log=lambda *_: None)
  for fold in payload['cv']['folds']:
    tag = f'cv{cfg.folds}-seed{cfg.fold_seed}-fold{fold["fold"]}'
    choice = row_cache.read_json(rep.row_path(tag, 'choice (pool)'))
    assert not set(choice['key']['topics']) & set(fold['test_topics'])
    assert cfg.cv_choose == reproduce_config.CV_DEFAULT_CHOICES  # scl, X, ttc
    assert 'views' not in choice['chosen']
    assert len(choice['scl']) == 2
    assert len(choice['ttc']) == (len(cfg.choice_steps) * len(rows_lib.THRESHOLDS) *
                                  len(cfg.choice_per_category))
    chosen = fold['chosen']['pool']
    assert chosen == choice['chosen']
    best_scl = max(choice['scl'], key=lambda r: r['F1@20'])['setting']
    assert chosen['scl'] == best_scl
    best = choosing.best_phi(choice['ttc'])
    assert max(r['F1@20'] for r in choice['ttc']) == next(
        r['F1@20'] for r in choice['ttc'] if all(r[k] == v for k, v in best.items()))
    assert (chosen['ttc'], chosen['irrelevant_threshold'], chosen['per_category']) == (
        {'num_steps': best['steps']}, best['irrelevant_threshold'], best['per_category'])
    assert 'label_scheme' not in best  # not chosen by default: the flagfile's
    for seed in cfg.seeds:
      row = row_cache.read_json(rep.row_path(tag, f'colt (seed {seed}, pool)'))
      assert row['ttc_config']['num_steps'] == chosen['ttc']['num_steps']
      assert row['scl_config']['beta'] == chosen['scl']['beta']
      assert row['params']['irrelevant_threshold'] == chosen['irrelevant_threshold']
      assert row['params']['per_category'] == chosen['per_category']
    inner = os.listdir(os.path.join(cfg.workdir, 'train'))
    assert sum(d.startswith(f'{tag}-choice-inner') for d in inner) == cfg.inner_folds


def test_inner_kfold_scores_every_training_topic_once(tiny_synthetic):
  dev = data.load('synthetic', 'dev', tiny_synthetic)
  splits = choosing.inner_kfold(dev, 3, 0, 'x')
  valid = [t for _, v in splits for t in v[0].topic_numbers]
  assert sorted(valid) == sorted(dev[0].topic_numbers)
  for train, v in splits:
    assert not set(train[0].topic_numbers) & set(v[0].topic_numbers)


@pytest.mark.slow
def test_each_fold_records_its_baselines_training_scores_and_settings(payload):
  from colt_jax.reproduction import report_cross_validation as cv_report
  for fold in payload['cv']['folds']:
    known = fold['baselines']
    assert {'mmr (pool)', 'umons (pool)', 'topk (pool)'} <= set(known)
    assert known['mmr (pool)']['features'] == 'text'  # synthetic: no descriptors
    assert [s['features'] for s in known['mmr (pool)']['settings']] == ['text']
    assert 'features' not in known['topk (pool)']  # its order is text-only in every setting
  lines = cv_report.fold_baseline_lines(payload['cv']['folds'], 'pool')
  assert lines[2].startswith('| fold | `topk` | `mmr` |')
  assert len(lines) == 4 + len(payload['cv']['folds']) + 1


@pytest.mark.slow
def test_fold_baselines_choose_setting_and_parameters_on_training_topics(cfg, tmp_path,
                                                                         monkeypatch):
  """With a (made-up) feature setting beside text, each of CV_VIEW_BASELINES is tuned on both
  and keeps the setting with the best training F1@20; the others stay on text."""
  from colt_jax.data import views  # pylint: disable=g-import-not-at-top
  cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'))  # its rows apart
  rep = reproduce.Reproduction(cfg, log=lambda *_: None)
  rep.load()
  ids = sorted({str(p) for s in (rep.dev, rep.test) for p in s[1].photo_ids})
  rng = np.random.default_rng(0)
  rep._raw_views = views.RawViews(  # pylint: disable=protected-access
      photo_index={p: i for i, p in enumerate(ids)},
      descriptors=rng.normal(0.0, 1.0, (len(ids), 3)).astype(np.float32),
      descriptor_names=('CM',), descriptor_dims=(3,), users=(None,) * len(ids),
      days=(None,) * len(ids))
  fake = {'descriptors': ('CM',), 'descriptor_weight': 1.0}
  monkeypatch.setattr(rep, 'cv_settings', lambda: [None, fake])
  rows = rep.fold_baselines(rep.dev, rep.test, 'fold-settings-test', ['pool'])
  name = views.ViewSpec(**fake).name
  for method in cross_validation.CV_VIEW_BASELINES:
    row = rows[f'{method} (pool)']
    per_setting = {'text': rep.baselines(rep.dev, rep.test, 'fold-settings-test', ['pool'],
                                         methods=[method])[f'{method} (pool)'],
                   name: rep.baselines(rep.dev, rep.test, 'fold-settings-test', ['pool'],
                                       views.ViewSpec(**fake),
                                       [method])[f'{method} [{name}] (pool)']}
    assert [s['features'] for s in row['settings']] == ['text', name]
    scores = {s['features']: s['train_F1@20'] for s in row['settings']}
    assert scores == {k: r['train_F1@20'] for k, r in per_setting.items()}
    want = 'text' if scores['text'] >= scores[name] else name  # ties keep text
    assert row['features'] == want
    assert row['per_topic'] == per_setting[want]['per_topic']
    assert row['chosen'] == per_setting[want]['chosen']
    assert per_setting[want]['key']['train'] == rep.dev[0].split  # tuned on training topics
  assert 'features' not in rows['topk (pool)'] and 'features' not in rows['flickr (pool)']
  assert cross_validation.choose_setting([('text', {'train_F1@20': 0.5}),
                                          ('x', {'train_F1@20': 0.5})])[0] == 'text'
  assert cross_validation.choose_setting([('text', {'train_F1@20': 0.5}),
                                          ('x', {'train_F1@20': 0.6})])[0] == 'x'
  # `fold_choice` weighs the same settings for `colt` (the synthetic default: text alone).
  assert reproduce.Reproduction(cfg, log=lambda *_: None).cv_settings() == [None]
  div400 = dataclasses.replace(cfg, dataset='div400')
  settings = reproduce.Reproduction.cv_settings(type('R', (), {'cfg': div400})())
  assert settings == [None]  # 'views' is not chosen by default
  div400 = dataclasses.replace(div400, cv_choose=reproduce_config.CV_CHOICES)
  settings = reproduce.Reproduction.cv_settings(type('R', (), {'cfg': div400})())
  assert settings == [None] + [dict(v) for v in div400.cv_views]


@pytest.mark.slow
def test_cross_validation_scores_every_topic_once(payload, cfg):
  dev, _ = data.load('synthetic', 'dev', cfg.data_dir)
  test, _ = data.load('synthetic', 'test', cfg.data_dir)
  folds = payload['cv']['folds']
  held = [t for f in folds for t in f['test_topics']]
  assert sorted(held) == sorted(dev.topic_numbers + test.topic_numbers)
  merged = payload['cv']['merged']
  assert {'colt (seed 0, pool)', 'colt (seed 1, pool)', 'mmr (pool)', 'topk (pool)',
          'umons-dbscan (pool)'} <= set(merged)
  assert not any(n.endswith('global)') for n in merged)  # cv_protocols: pool only
  colt = merged['colt (seed 0, pool)']
  assert len(colt['per_topic']) == len(held) and len(colt['fold_F1@20']) == 2
  for split in (dev, test):
    path = payload['run_files'][f'cv colt (seed 0, pool) {split.split}']
    allowed = {t: set(gt.relevance) for t, gt in split.ground_truth.items()}
    run = runfile.validate_run(path, split.topic_numbers, allowed)
    result = metrics.evaluate_run(run, split.ground_truth)
    for t, m in result.per_topic.items():
      assert m['F1@20'] == pytest.approx(colt['per_topic'][str(t)]['F1@20'], abs=1e-12)


@pytest.mark.slow
def test_report_has_the_tables(payload, cfg):
  text = open(cfg.doc).read()
  assert payload['irrelevant_thresholds'] == {'pool': 0.0, 'global': 0.0}
  for needle in ('Table 2', 'pool protocol', 'global protocol', 'Table 3', 'Table 5',
                 '2-fold cross-validation', 'colt (2 seeds)', 'colt-paper'):
    assert needle in text, needle
  assert os.path.isfile(os.path.join(cfg.results_dir, 'results.json'))


@pytest.mark.slow
def test_report_pairs_colt_with_each_baseline_from_the_per_topic_scores(payload, cfg):
  import re  # pylint: disable=g-import-not-at-top
  from colt_jax.evaluation import significance  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import report_tables
  text = open(cfg.doc).read()
  rows = payload['rows']
  colt = report_tables.per_topic(rows, 'colt', 'pool')
  umons = report_tables.per_topic(rows, 'umons', 'pool')
  seeds = [r['per_topic'] for n, r in rows.items() if n.startswith('colt (seed')
           and n.endswith('pool)')]
  assert len(seeds) == 2
  some = next(iter(colt))
  assert colt[some] == pytest.approx(np.mean([s[some]['F1@20'] for s in seeds]))
  want = significance.paired_difference(colt, umons)
  line = next(l for l in text.splitlines()
              if l.startswith('- against UMONS (tuned on dev): F1@20 (official)'))
  assert f'{want.text()}: **{want.verdict}**' in line
  pt = lambda m, k: report_tables.per_topic(rows, m, 'pool', k)  # pylint: disable=unnecessary-lambda-assignment
  paper = significance.paired_paper_f1(pt('colt', 'P@20'), pt('colt', 'CR@20'),
                                       pt('umons', 'P@20'), pt('umons', 'CR@20'))
  assert (f'F1@20 (paper) {paper.mean:+.4f} [{paper.low:+.4f}, {paper.high:+.4f}]: '
          f'**{paper.verdict}**') in line
  checked = 0
  for line in text.splitlines():
    for m in re.finditer(r'F1@20 \((?:official|paper)\) \S+ \[(\S+), (\S+)\][^*]*\*\*(.+?)\*\*',
                         line):
      low, high, verdict = float(m.group(1)), float(m.group(2)), m.group(3)
      assert verdict == ('better' if low > 0 else 'worse' if high < 0 else 'no difference')
      checked += 1
  assert checked >= 20
  assert 'F1@20 (paper: harmonic mean of mean P and mean CR)' in text
  assert '| F1@20 (official) | F1@20 (paper) |' in text
  best = next(l for l in text.splitlines() if l.startswith('- against the best tuned baseline'))
  assert 'chosen by its F1@20 on the dev topics it was tuned on' in best


@pytest.mark.slow
def test_rerun_reuses_finished_rows_without_training(payload, cfg, monkeypatch):
  def refuse(*args, **kwargs):
    raise AssertionError('a finished row was trained again')
  monkeypatch.setattr(trainers, 'train_scl', refuse)
  monkeypatch.setattr(trainers, 'train_ttc', refuse)
  again = reproduce.run(cfg, log=lambda *_: None)
  for name, row in payload['rows'].items():
    assert again['rows'][name]['mean'] == row['mean']


@pytest.mark.slow
def test_a_fresh_work_folder_resumes_from_a_kept_row_cache(cfg, tmp_path, monkeypatch):
  """The row cache in a folder of its own (reproduce.py keeps it committed): a run with
  another, empty work folder (a fresh clone) trains nothing and gives the same rows; the
  cache's folder records what it holds, and a row whose code version changed is computed
  anew."""
  from colt_jax.reproduction import stages
  kept = tmp_path / 'rows'
  small = dataclasses.replace(cfg, workdir=str(tmp_path / 'first'), rows_dir=str(kept),
                              results_dir=str(tmp_path / 'results'), doc=str(tmp_path / 'R.md'),
                              variants=('SCL + top-k',), seeds=(0,), folds=0,
                              protocols=('pool',))
  first = reproduce.run(small, log=lambda *_: None)
  assert not os.path.exists(os.path.join(small.workdir, 'rows'))
  assert set(outputs.Manifest.load(str(kept)).trees) == {'official'}
  rows = first['compute']['rows']
  assert rows == len(first['rows']) and rows == len(os.listdir(kept / 'official'))

  def refuse(*args, **kwargs):
    raise AssertionError('a kept row was trained again')
  monkeypatch.setattr(trainers, 'train_scl', refuse)
  monkeypatch.setattr(trainers, 'train_ttc', refuse)
  fresh = dataclasses.replace(small, workdir=str(tmp_path / 'fresh'))
  again = reproduce.run(fresh, log=lambda *_: None)
  assert {n: r['mean'] for n, r in again['rows'].items()} == {
      n: r['mean'] for n, r in first['rows'].items()}
  # A raised version of a baseline recomputes exactly the rows that run it (`row_versions`):
  # topk's, the baseline row and `SCL + top-k` (which ranks h^ by top-k: re-ranked with the
  # trainings of its work folder: still nothing trained).
  computed = []
  real_rank = stages.evaluation.rank
  monkeypatch.setattr(stages.evaluation, 'rank',
                      lambda method, *a, **k: computed.append(method) or real_rank(method, *a, **k))
  ranked_colt = []
  real_colt = stages.evaluation.rank_colt
  monkeypatch.setattr(stages.evaluation, 'rank_colt',
                      lambda *a, **k: ranked_colt.append(a[3].post) or real_colt(*a, **k))
  monkeypatch.setitem(versions.VERSIONS, 'mmr', versions.VERSIONS['mmr'] + 1)
  reproduce.run(fresh, log=lambda *_: None)
  assert set(computed) == {'mmr'} and not ranked_colt
  monkeypatch.setitem(versions.VERSIONS, 'topk', versions.VERSIONS['topk'] + 1)
  reproduce.run(small, log=lambda *_: None)  # the work folder that holds its trainings
  assert set(computed) == {'mmr', 'topk'} and ranked_colt == ['topk']
  monkeypatch.setattr(row_cache, 'ROWS_CODE_VERSION', row_cache.ROWS_CODE_VERSION + 1)
  with pytest.raises(AssertionError, match='trained again'):
    reproduce.run(fresh, log=lambda *_: None)


def test_unknown_variant_is_refused(cfg):
  with pytest.raises(ValueError, match='--variants: unknown'):
    reproduce.Reproduction(dataclasses.replace(cfg, variants=('colt', 'L=99')))


def test_work_results_report_and_choices_are_named_by_the_dataset(tmp_path, monkeypatch):
  """One feature path (the view rows): the dataset alone names the work, results, report and
  choice flagfiles (where runs before the views were cached)."""
  monkeypatch.chdir(tmp_path)  # Reproduction claims its work dir
  cfg = reproduce_config.ReproduceConfig(dataset='div400')
  assert cfg.results_path == os.path.join('docs', 'results', 'div400')
  assert cfg.doc_path == os.path.join('docs', 'RESULTS.md')
  assert cfg.choice_flagfiles()[-1] == os.path.join(reproduce_config.CONFIG_DIR,
                                                    'div400_phi_global.choice.flags')
  assert reproduce.Reproduction(cfg).root == os.path.join('work', 'reproduce', 'div400')
  assert not hasattr(cfg, 'with_descriptors')


@pytest.mark.slow
def test_report_names_the_results_and_work_dirs(payload):
  from colt_jax.reproduction import report
  text = report.render(dict(payload, results_dir='docs/results/x'), 'cmd')
  assert '`docs/results/x/results.json`' in text
  assert f'work/reproduce/{payload["dataset"]}/runs/global/' in text


@pytest.mark.slow
def test_report_shows_the_bank_table_with_both_readings_of_eq3(payload):
  from colt_jax.reproduction import report
  alpha = next(v for v in rows_lib.VARIANTS if v.name == 'alpha=0.99')
  assert (alpha.table, dict(alpha.scl)) == ('bank', {'alpha': 0.99})
  rows = dict(payload['rows'])
  rows['alpha=0.99 (seed 0, pool)'] = payload['rows']['colt (seed 0, pool)']
  text = report.render(dict(payload, rows=rows,
                            variants=payload['variants'] + [dataclasses.asdict(alpha)]), 'cmd')
  bank = text.split('Eq. 3): as written vs. as momentum')[1].split('##')[0]
  assert '| alpha=0.01 (colt) |' in bank and '| alpha=0.99 |' in bank


@pytest.mark.slow
def test_feature_setting_rows_fit_on_training_photos_and_train_their_own_models(cfg, payload):
  from colt_jax.data import views  # pylint: disable=g-import-not-at-top
  rep = reproduce.Reproduction(cfg, log=lambda *_: None)
  rep.load()
  ids = sorted({str(p) for s in (rep.dev, rep.test) for p in s[1].photo_ids})
  rng = np.random.default_rng(0)
  raw = views.RawViews(photo_index={p: i for i, p in enumerate(ids)},
                       descriptors=rng.normal(2.0, 3.0, (len(ids), 3)).astype(np.float32),
                       descriptor_names=('CM',), descriptor_dims=(3,),
                       users=tuple(f'u{i % 5}' for i in range(len(ids))),
                       days=(None,) * len(ids))
  rep._raw_views = raw  # the synthetic layout has no descvis/: descriptors made up here
  spec = views.ViewSpec(descriptors=('CM',))
  dev_v, test_v = rep.viewed(spec, rep.dev, rep.test)
  assert dev_v[1].dim == test_v[1].dim == rep.dev[1].dim + 3
  dev_only = views.fit(spec, raw, [str(p) for p in rep.dev[1].photo_ids])
  np.testing.assert_allclose(np.asarray(test_v[1].photos),
                             np.asarray(views.apply(dev_only, raw, rep.test[1]).photos))
  rows = rep.baselines(rep.dev, rep.test, 'views-test', ['pool'], spec)
  assert set(rows) == {f'{m} [text+descvis1x1] (pool)'
                       for m in ('topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan')}
  colt = next(v for v in rows_lib.VARIANTS if v.name == 'colt')
  with_cm = dataclasses.replace(colt, name='colt + CM', table='views',
                                views=dataclasses.asdict(spec))
  text_cfgs = rep.trainer.configs_for(colt, 0, 'dev', 'pool')
  view_cfgs = rep.trainer.configs_for(with_cm, 0, 'dev', 'pool')
  assert all(a.workdir != b.workdir for a, b in zip(text_cfgs, view_cfgs))
  out = rep.colt_rows(with_cm, 0, rep.dev, rep.test, 'views-test', 'dev', ['pool'])
  row = out['colt + CM (seed 0, pool)']
  assert row['ttc_config']['workdir'] == view_cfgs[1].workdir
  assert 0.0 <= row['mean']['F1@20'] <= 1.0
  from colt_jax.reproduction import report_sections as sections
  names = sections.view_rows({'colt + CM': dataclasses.asdict(with_cm)})
  assert names[-5:] == ['colt + CM', 'topk [text+descvis1x1]', 'mmr [text+descvis1x1]',
                        'umons [text+descvis1x1]', 'umons-dbscan [text+descvis1x1]']
  with pytest.raises(ValueError, match='descriptors'):
    dataclasses.replace(colt, views={'descriptors': ('SIFT',)})
  full = reproduce.Reproduction(dataclasses.replace(cfg, variants=('colt', 'colt + descvis')))
  assert [v.name for v in full.variants] == ['colt']  # synthetic has no descriptors


@pytest.mark.slow
def test_report_analyses_colt_against_the_best_baseline_topic_by_topic(payload, cfg):
  from colt_jax.reproduction.diagnostics import headroom
  from colt_jax.reproduction import report
  from colt_jax.reproduction import report_sections as sections
  from colt_jax.reproduction import report_tables as tables
  stats = reproduce.topic_stats(cfg)
  assert set(stats) >= {str(t) for t in payload['rows']['topk (pool)']['per_topic']}
  rows = payload['rows']
  agg = tables.aggregate(rows, 'pool')
  candidates = [b for b in agg if tables.is_baseline(b)]
  best = max(candidates, key=lambda b: rows[f'{b} (pool)']['train_F1@20'])  # by dev, not test
  lines = sections.per_topic_analysis(rows, stats, 'pool')
  assert f'(`{best}`)' in lines[0] and 'never by test' in lines[0]
  colt, base = tables.per_topic(rows, 'colt', 'pool'), tables.per_topic(rows, best, 'pool')
  mean = np.mean([colt[t] - base[t] for t in colt])
  assert any(l.startswith(f'- F1@20 (official): {mean:+.4f} [') for l in lines)
  assert any(l.startswith('- F1@20 (paper): ') for l in lines)
  terciles = [l for l in lines if l.startswith('| ') and 'tercile' not in l]
  assert len(terciles) >= 3 * 2  # three properties, each split into terciles
  for key in ('share of relevant photos', 'ground-truth clusters', 'photos in the pool'):
    block = [l for l in lines if l.startswith('| ')]
    start = next(i for i, l in enumerate(block) if key in l)
    counts, i = 0, start
    while i < len(block) and (i == start or block[i].startswith('|  |')):
      counts += int(block[i].split('|')[3])
      i += 1
    assert counts == len(colt)
  assert any('The strongest CoLT row here is' in l for l in lines)
  heads = {'variant': 'colt-pairs', 'seed': 0, 'command': 'diagnose', 'topics': {
      str(t): {n: {'pair_auc': 0.6, 'relevance_auc': 0.7} for n in ('phi', 'gbt-pairs',
                                                                     'text cosine',
                                                                     'feature-setting cosine')}
      for t in range(3)}}
  steps = {'command': 'steps', 'variant': 'colt-pairs', 'folds': [{'fold': 0}], 'of_folds': 5,
           'scored_steps': [300], 'topics': {str(t): {
               k: {'pair_auc': 0.6, 'relevance_auc': 0.7, 'F1@20': 0.5} for k in ('row', '300')}
               for t in range(3)}}
  larger = dict(steps, command='larger', changes={'num_layers': 8},
                row_size={'num_layers': 2, 'model_dim': 64, 'num_heads': 2, 'mlp_ratio': 4})
  room = {'command': 'headroom', 'variant': 'colt-pairs rule', 'seed': 0,
          'folds': [{'fold': 0, 'selection': 'cluster'}],
          'of_folds': 5, 'row_check': 0.0, 'topics': {str(t): {
              c[0]: {'pair_auc': 0.6, 'relevance_auc': 0.7, 'P@20': 0.8, 'CR@20': 0.5,
                     'F1@20': 0.6} for c in headroom.CONDITIONS} for t in range(3)}}
  from colt_jax.reproduction.diagnostics import relevance_models
  learned = dict(room, command='relevance', row_checked=3, topics={str(t): {
      label: {'relevance_auc': 0.7, 'P@20': 0.8, 'CR@20': 0.5, 'F1@20': 0.6}
      for label, _ in relevance_models.CONDITIONS} for t in range(3)})
  from colt_jax.reproduction.diagnostics import relevance_signals
  signals = {'command': 'signals', 'variant': 'colt-pairs relevance', 'views': 'text',
             'num_images': 200, 'folds': [{'fold': 0}], 'of_folds': 5, 'topics': {
                 str(t): {c: 0.7 for c in relevance_signals.CONDITIONS} for t in range(3)}}
  text = report.render(payload, 'cmd', topic_stats=stats, heads=heads,
                       phi_steps=[steps, larger], headroom=room, relevance=learned,
                       relevance_signals=signals)
  assert '## What colt-pairs\' heads predict on held-out topics\n\nGenerated by `diagnose`' in text
  assert ('## Would longer training move colt-pairs\' phi?\n\nGenerated by `steps` over 1 of 5 '
          'folds (3 held-out topics)') in text
  assert '| 300 steps | 0.6000 | 0.7000 | 0.5000 | +0.0000' in text
  assert ('over 1 of 5 folds (3 held-out topics): `colt-pairs` phi (seed 0, pool) trained again '
          'with num_layers=8 (the row: num_layers=2), its other settings the row\'s') in text
  assert ('## Would another size of phi move colt-pairs? (num_layers=8)\n\nGenerated by '
          '`larger`') in text
  assert ('## How far could better heads take colt-pairs\' list rule?\n\nGenerated by '
          '`headroom` over 1 of 5 folds (3 held-out topics)') in text
  assert ('## Would a relevance model beside phi move colt-pairs\' list rule?\n\nGenerated by '
          '`relevance` over 1 of 5 folds (3 held-out topics)') in text
  assert '| phi and boosted + descriptors, half each | 0.7000 |' in text
  assert ('## Would pool context or photo metadata move the relevance model?\n\nGenerated by '
          '`signals` over 1 of 5 folds (3 held-out topics') in text
  assert text.index('move the relevance model?') > text.index('move colt-pairs\' list rule?')
  assert '## Per-topic analysis' in text and '### cross-validation' in text
  cv = text.split('### cross-validation')[1]
  assert 'the best baseline of each fold: fold 0 `' in cv
  named = [l for l in text.splitlines() if 'against the best tuned baseline' in l]
  assert len(named) >= 3 and not any(tables.TEST_CHOICE_NOTE in l for l in named)


def test_a_fold_may_choose_a_feature_setting():
  rows = [{'F1@20': 0.5, 'steps': 1, 'irrelevant_threshold': 0.0, 'views': 'text'},
          {'F1@20': 0.5, 'steps': 1, 'irrelevant_threshold': 0.0, 'views': 'text+descvis10x1'}]
  assert choosing.best_phi(rows)['views'] == 'text'  # a tie keeps text alone
  rows[1]['F1@20'] = 0.6
  assert choosing.best_phi(rows) == {'steps': 1, 'irrelevant_threshold': 0.0,
                                     'views': 'text+descvis10x1'}
  colt = next(v for v in rows_lib.VARIANTS if v.name == 'colt')
  chosen = cross_validation.chosen_variant(colt, {'scl': {}, 'ttc': {},
                                                  'irrelevant_threshold': 0.7,
                                                  'views': rows_lib.DESCVIS_VIEWS})
  assert chosen.view_spec.uses_descriptors and chosen.irrelevant_threshold == 0.7
  assert cross_validation.chosen_variant(
      colt, {'scl': {}, 'ttc': {}, 'irrelevant_threshold': 0.0}).views is None
  assert ('views' in reproduce_config.CV_CHOICES
          and 'views' not in reproduce_config.ReproduceConfig().cv_choose)


@pytest.mark.slow
def test_rows_record_their_compute_time_and_the_report_sums_it(payload, cfg):
  compute = payload['compute']
  assert compute['rows'] > 0 and compute['timed'] == compute['rows']
  assert compute['seconds'] > 0
  text = open(cfg.doc).read()
  assert f'Its {compute["rows"]} rows and choices recorded' in text


@pytest.mark.slow
def test_report_says_what_changed_since_the_previous_results(payload, cfg, tmp_path):
  from colt_jax.reproduction import report_tables as tables
  old = json.loads(json.dumps(payload))
  old['rows']['colt (seed 0, pool)']['mean']['F1@20'] -= 0.1  # colt's mean moves by +0.05
  del old['rows']['topk (pool)']
  old['rows']['gone (pool)'] = old['rows']['mmr (pool)']
  path = tmp_path / 'old.json'
  path.write_text(json.dumps(old))
  reproduce.write_report(cfg, log=lambda *_: None, previous_results=str(path))
  now = tables.aggregate(payload['rows'], 'pool')['colt']['F1@20'][0]
  text = open(cfg.doc_path).read().split('## What changed since the previous results')[1]
  assert f'| colt | {now - 0.05:.4f} | {now:.4f} | +0.0500 |' in text
  assert '| mmr |' in text and '| topk | - |' in text and '| gone |' in text
  saved = json.load(open(os.path.join(cfg.results_path, 'results.json')))
  assert saved['previous']['label'] == f'`{path}`'
  # A later report, or a rerun, without the flag keeps the comparison.
  reproduce.write_report(cfg, log=lambda *_: None)
  assert f'| colt | {now - 0.05:.4f} |' in open(cfg.doc_path).read()
  assert reproduce.run(cfg, log=lambda *_: None)['previous'] == saved['previous']
  with pytest.raises(InputError, match='absent.json: no such file'):
    reproduce.write_report(cfg, log=lambda *_: None,
                           previous_results=str(tmp_path / 'absent.json'))
  bad = tmp_path / 'bad.json'
  bad.write_text('{"rows": ')
  with pytest.raises(InputError, match=r'--previous_results: .*bad.json, line 1: not JSON'):
    reproduce.write_report(cfg, log=lambda *_: None, previous_results=str(bad))
  bad.write_text('[1, 2]')
  with pytest.raises(InputError, match='bad.json is not a results.json'):
    reproduce.write_report(cfg, log=lambda *_: None, previous_results=str(bad))


@pytest.mark.slow
def test_colt_pairs_rows_choose_w_on_their_training_topics(cfg, tmp_path):
  """A colt-pairs row trains phi with its heads and ranks by expected coverage with the w an
  inner k-fold over its TRAINING topics chose (never test's); rows of the paper's settings
  keep their cache keys and training digests (no new field in them)."""
  pairs_cfg = dataclasses.replace(cfg, workdir=str(tmp_path / 'work'), seeds=(0,), folds=0,
                                  protocols=('pool',), variants=('colt-pairs',))
  rep = reproduce.Reproduction(pairs_cfg, log=lambda *_: None)
  rep.load()
  variant = next(v for v in rep.variants if v.name == 'colt-pairs')  # text-only on synthetic
  assert variant.chooses_coverage_weight and variant.ttc['relevance_weight'] == 1.0
  row = rep.colt_rows(variant, 0, rep.dev, rep.test, 'official', 'dev')['colt-pairs (seed 0, pool)']
  choice = row_cache.read_json(rep.row_path('official', 'coverage choice colt-pairs (pool)'))
  assert choice['key']['topics'] == rep.dev[0].topic_numbers
  assert not set(choice['key']['topics']) & set(rep.test[0].topic_numbers)
  # every w at every checkpoint phi keeps (num_steps 2, checkpoint_every 100: the final one)
  assert [(s['ttc_step'], s['coverage_weight']) for s in choice['scores']] == [
      (2, w) for w in rows_lib.COVERAGE_WEIGHTS]
  assert choosing.kept_steps(dataclasses.replace(
      row_training.base_configs(cfg, paper=False)[1], num_steps=500, max_to_keep=3)) == [
          300, 400, 500]
  assert choice['chosen'] == choosing.best_coverage(choice['scores'])
  assert row['chosen'] == choice['chosen']
  assert (row['params']['selection'], row['params']['coverage_weight'],
          row['params']['ttc_step']) == ('coverage', choice['chosen']['coverage_weight'],
                                         choice['chosen']['ttc_step'])
  assert (row['ttc_config']['relevance_weight'], row['ttc_config']['pair_weight'],
          row['ttc_config']['relational_tokens']) == (1.0, 1.0, True)
  assert row['scl_config'] is None and row['g_effect'] is None  # colt-pairs trains no g
  inner = os.listdir(os.path.join(pairs_cfg.workdir, 'train'))
  assert sum(d.startswith('dev-choice-inner') for d in inner) == pairs_cfg.inner_folds
  colt = next(v for v in rows_lib.VARIANTS if v.name == 'colt')
  assert rows_lib.variant_key(colt) == {
      k: v for k, v in dataclasses.asdict(colt).items()
      if k not in ('selection', 'coverage_weight', 'coverage_of', 'ttc_step',
                   'cluster_threshold', 'choose_rule', 'pair_blend', 'pair_blends', 'ensemble',
                   'selection_theta', 'dpp_thetas', 'relevance_mix', 'relevance_mixes')}
  _, ttc = row_training.base_configs(cfg, paper=False)
  assert not {'class_weight', 'relevance_weight', 'pair_weight', 'pair_dim', 'view_tokens',
              'relational_tokens', 'appearance_tokens', 'appearance_dim'} & set(
                 row_training._trained_key(ttc))  # pylint: disable=protected-access


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
