"""The reproduction's report and feature-setting rows: the bank table (Eq. 3's two readings),
feature settings fitted on training photos, topic-by-topic analyses, compute time, changes."""
import dataclasses
import json
import os

import numpy as np
import pytest

from colt_jax.util.errors import InputError
from colt_jax.reproduction import tuning as choosing
from colt_jax.reproduction import cross_validation
from colt_jax.reproduction import pipeline as reproduce
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import row_training
from colt_jax.reproduction import variants as rows_lib


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
