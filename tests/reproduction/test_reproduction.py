"""The end-to-end reproduction (colt_jax/reproduction/pipeline.py) on the tiny synthetic data:
its rows, run files, shared trainings, dev choices, cross-validation folds and row cache."""
import dataclasses
import os

import numpy as np
import pytest

from colt_jax.baselines import versions
from colt_jax.data import splits as data
from colt_jax.evaluation import metrics
from colt_jax.util import outputs
from colt_jax.evaluation import runfile
from colt_jax.train import trainers
from colt_jax.reproduction import tuning as choosing
from colt_jax.reproduction import choice_files
from colt_jax.reproduction import cross_validation
from colt_jax.reproduction import pipeline as reproduce
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import row_training
from colt_jax.reproduction import variants as rows_lib


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
  path, _, proposal = choosing.write_choice(cfg, result, 'python experiments/choose_steps.py x',
                                            log=lambda *_: None)
  assert path.endswith('synthetic_phi_global.choice.flags')
  assert cfg.threshold_for('global') == 0.0  # proposed, not in place yet
  choice_files.apply_proposal(proposal)
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
  """choose_steps on the tiny synthetic dev split: each choice, its proposal applied, lands in
  a flagfile (read back by configs.from_flagfile) with its evidence, and reproduce trains/ranks
  with it."""
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
  path, evidence, proposal = choosing.write_choice(cfg, scl, 'python experiments/choose_steps.py '
                                                    '--dataset synthetic --what scl', log=quiet)
  assert path == str(flags_dir / 'tiny_scl.flags') and os.path.isfile(evidence)
  choice_files.apply_proposal(proposal)
  written = configs.from_flagfile(configs.SCLConfig, path)
  assert (written.beta, written.learning_rate) == (scl['best']['beta'], 1e-3)
  text = open(path).read()
  assert text.count('--beta=') == 1 and '--dataset synthetic --what scl' in text
  assert row_training.base_configs(cfg, paper=False)[0].beta == scl['best']['beta']
  ttc = choosing.choose_steps(cfg, holdout=3, steps=(1, 2), protocol='global',
                               thresholds=(0.0, 0.9), log=quiet)
  path, evidence, proposal = choosing.write_choice(cfg, ttc, 'python experiments/choose_steps.py '
                                                    '--dataset synthetic --protocol global',
                                                    log=quiet)
  choice_files.apply_proposal(proposal)
  choice = choice_files.read_protocol_choice(cfg.config_dir, cfg.dataset, 'global',
                                             cfg.colt_stem)  # steps: maybe the flagfile's
  assert (choice.num_steps, choice.irrelevant_threshold) == (
      ttc['best']['steps'], ttc['best']['irrelevant_threshold'])
  assert cfg.threshold_for('global') == ttc['best']['irrelevant_threshold']
  assert cfg.ttc_steps_for('global', 2) == ttc['best']['steps']
  records = choice_files.evidence_for(cfg.config_dir, cfg.choice_flagfiles())
  assert sorted(r['what'] for r in records) == ['scl', 'ttc']
  assert all(len(r['scores']) >= 2 and r['command'] for r in records)
  labels = choosing.choose_label_scheme(cfg, holdout=3, steps=(1,), thresholds=(0.0,),
                                         log=quiet)
  path, _, proposal = choosing.write_choice(cfg, labels, 'python experiments/choose_steps.py '
                                            '--what label_scheme', log=quiet)
  choice_files.apply_proposal(proposal)
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
