"""Tests of the results report (colt_jax/reproduction/report.py, results_tables.py,
results_sections.py) on hand-made rows."""
import numpy as np
import pytest

from colt_jax.reproduction import report
from colt_jax.reproduction import report_cross_validation as cv_report
from colt_jax.reproduction import report_sections as sections
from colt_jax.reproduction import report_tables as tables


def _mean(f1: float) -> dict:
  return {c: f1 for c in tables.MAIN_COLUMNS}


def test_parse_row_name():
  assert tables.parse_row_name('colt (seed 1, pool)') == ('colt', 1, 'pool')
  assert tables.parse_row_name('SCL + top-k (seed 0, global)') == ('SCL + top-k', 0, 'global')
  assert tables.parse_row_name('mmr (global)') == ('mmr', None, 'global')
  with pytest.raises(ValueError, match='unexpected row name'):
    tables.parse_row_name('colt seed 1')


def test_aggregate_means_and_spreads_over_seeds_per_protocol():
  rows = {'colt (seed 0, pool)': {'mean': _mean(0.5)},
          'colt (seed 1, pool)': {'mean': _mean(0.7)},
          'colt (seed 0, global)': {'mean': _mean(0.1)},
          'flickr (pool)': {'mean': _mean(0.3)}}
  pool = tables.aggregate(rows, 'pool')
  assert pool['colt']['F1@20'] == pytest.approx((0.6, 0.1, 2))
  glob = tables.aggregate(rows, 'global')
  assert glob['colt']['F1@20'] == (0.1, 0.0, 1)
  assert glob['flickr']['F1@20'] == (0.3, 0.0, 1)  # Flickr order exists per topic only


def test_table_bolds_the_best_and_marks_missing_columns():
  agg = {'a': {'F1@20 (pool)': (0.5, 0.0, 1), 'F1@20 (global)': (0.2, 0.0, 1)},
         'b': {'F1@20 (pool)': (0.6, 0.01, 3)}}
  text = tables.table(agg, ['a', 'b', 'absent'], {'a': 'A'},
                      ['F1@20 (pool)', 'F1@20 (global)'])
  lines = text.splitlines()
  assert len(lines) == 4  # header, rule, a, b: a name without data is left out
  assert lines[2] == '| A | 0.5000 | **0.2000** |'
  assert lines[3] == '| b | **0.6000 ± 0.0100** | - |'


def test_choice_lines_name_the_command_and_every_score():
  choice = {'held_out_topics': [1, 2], 'protocol': 'global', 'topk': 0.61, 'what': 'ttc',
            'variant': 'colt', 'best': {'steps': 200, 'irrelevant_threshold': 0.9},
            'scores': [{'steps': s, 'irrelevant_threshold': t, 'F1@20': s / 1000 + t}
                       for s in (100, 200) for t in (0.0, 0.9)]}
  lines = sections.choice_lines(choice, dev_topics=10)
  assert 'choose_steps.py --protocol global' in lines[0]
  assert 'trained on 8 dev topics and scored on the 2 others' in lines[0]
  assert '| 200 | 0.2000 | 1.1000 |' in '\n'.join(lines)


def test_short_list_lines_name_rows_with_empty_places_averaged_over_seeds():
  rows = {'colt (seed 0, pool)': {'mean': _mean(0.5), 'returned@20': 20.0},
          'colt-paper (seed 0, pool)': {'mean': _mean(0.1), 'returned@20': 3.0},
          'colt-paper (seed 1, pool)': {'mean': _mean(0.1), 'returned@20': 5.0},
          'topk (global)': {'mean': _mean(0.6)}}  # older payloads have no count
  assert sections.short_list_lines(rows) == [
      '- `colt-paper` (pool): 4.00 photos per topic in its first 20 on average.']


def test_main_tables_show_the_cutoffs_10_20_and_50():
  assert tables.MAIN_COLUMNS == ('P@10', 'P@20', 'P@50', 'CR@10', 'CR@20', 'CR@50', 'F1@10',
                                 'F1@20', 'F1@50')
  agg = tables.aggregate({'topk (pool)': {'mean': _mean(0.4)}}, 'pool')
  header = tables.table(agg, ['topk'], {}).splitlines()[0]
  assert header == ('| method | P@10 | P@20 | P@50 | CR@10 | CR@20 | CR@50 | F1@10 | F1@20 | '
                    'F1@50 |')


def test_change_lines_compare_every_row_with_the_previous_results():
  old = {'rows': {'colt (seed 0, pool)': {'mean': _mean(0.5)},
                  'colt (seed 1, pool)': {'mean': _mean(0.7)},
                  'mmr (pool)': {'mean': _mean(0.6)},
                  'gone (seed 0, pool)': {'mean': _mean(0.2)}}}
  new = {'rows': {'colt (seed 0, pool)': {'mean': _mean(0.55)},
                  'colt (seed 1, pool)': {'mean': _mean(0.75)},
                  'colt (seed 2, pool)': {'mean': _mean(0.65)},
                  'mmr (pool)': {'mean': _mean(0.60001)},
                  'added (seed 0, pool)': {'mean': _mean(0.3)}},
         'cv': {'merged': {'colt (seed 0, pool)': {'mean': _mean(0.4)}}}}
  previous = sections.previous_summary(old, '`old.json`')
  assert previous['rows']['pool']['colt'] == {'P@20': 0.6, 'CR@20': 0.6, 'F1@20': 0.6,
                                              'seeds': 2}
  text = '\n'.join(sections.change_lines(new, previous))
  assert 'the same row of `old.json`' in text
  assert '| colt | 0.6000 | 0.6500 | +0.0500 | 0.6000 -> 0.6500 | 0.6000 -> 0.6500 | 2 -> 3 |' in text
  assert '| mmr | 0.6000 | 0.6000 | unchanged |' in text
  assert '| added | - | 0.3000 | added |' in text
  assert '| gone | 0.2000 | - | removed |' in text
  assert '**cross-validation, pool protocol**' in text  # the previous results had no CV
  assert '| colt | - | 0.4000 | added |' in text


def test_analysis_weighs_baselines_on_every_feature_setting_and_never_calls_one_colt():
  topics = [str(t) for t in range(6)]

  def row(f1s):
    return {'mean': _mean(float(sum(f1s) / len(f1s))),
            'per_topic': {t: _mean(f) for t, f in zip(topics, f1s)}}
  rows = {'colt (seed 0, pool)': row([0.5, 0.6, 0.4, 0.5, 0.6, 0.5]),
          'umons (pool)': row([0.6, 0.6, 0.5, 0.6, 0.6, 0.6]),
          'mmr [text+descvis10x1] (pool)': row([0.7, 0.7, 0.6, 0.7, 0.7, 0.7])}
  stats = {t: {'photos': 50 + i, 'clusters': 5 + i, 'relevant_fraction': 0.1 * i}
           for i, t in enumerate(topics)}
  assert tables.is_baseline('mmr [text+descvis10x1]') and not tables.is_baseline('colt')
  lines = sections.per_topic_analysis(rows, stats, 'pool')
  assert '`mmr [text+descvis10x1]`' in lines[0]
  assert tables.TEST_CHOICE_NOTE in lines[0]  # these rows carry no dev scores
  assert any('The strongest CoLT row here is `colt`' in l for l in lines)
  # With dev scores, the choice follows them (UMONS), not the test scores (MMR).
  rows['umons (pool)']['train_F1@20'] = 0.7
  rows['mmr [text+descvis10x1] (pool)']['train_F1@20'] = 0.6
  lines = sections.per_topic_analysis(rows, stats, 'pool')
  assert 'UMONS (`umons`), chosen by its F1@20 on the dev topics' in lines[0]
  assert tables.TEST_CHOICE_NOTE not in '\n'.join(lines)


def test_fold_choice_lines_show_what_each_fold_chose():
  folds = [{'fold': 0, 'chosen': {'pool': {
      'scl': {'beta': 0.1, 'learning_rate': 1e-3}, 'irrelevant_threshold': 0.7,
      'ttc': {'num_steps': 400, 'label_scheme': 'local'}, 'per_category': 2,
      'views': {'descriptors': ['CM', 'HOG'], 'descriptor_weight': 1.0}}}},
           {'fold': 1, 'chosen': {'pool': {'scl': {}, 'ttc': {'num_steps': 100},
                                           'irrelevant_threshold': 0.0, 'per_category': 1}}}]
  lines = cv_report.fold_choice_lines(folds)
  assert lines[4].startswith('| 0 | pool | 0.1, 0.001 | local, 400 | 0.7 | 2 | text+')
  assert lines[5] == '| 1 | pool | -, - | -, 100 | 0.0 | 1 | text |'


def _topic_rows(p: dict, cr: dict) -> dict:
  """A row from per-topic P@20 and CR@20 (F1@20 per topic, the official reading)."""
  per_topic = {t: {'P@20': p[t], 'CR@20': cr[t],
                   'F1@20': 2 * p[t] * cr[t] / (p[t] + cr[t]) if p[t] + cr[t] else 0.0}
               for t in p}
  mean = {k: float(np.mean([m[k] for m in per_topic.values()])) for k in ('P@20', 'CR@20',
                                                                          'F1@20')}
  return {'mean': mean, 'per_topic': per_topic}


def test_tables_and_paired_lines_give_both_readings_of_f1():
  from colt_jax.evaluation import significance  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  topics = [str(t) for t in range(12)]
  draw = lambda: {t: float(v) for t, v in zip(topics, rng.uniform(0.2, 0.9, 12))}  # pylint: disable=unnecessary-lambda-assignment
  rows = {'colt (seed 0, pool)': _topic_rows(draw(), draw()),
          'colt (seed 1, pool)': _topic_rows(draw(), draw()),
          'umons (pool)': _topic_rows(draw(), draw())}
  agg = tables.aggregate(rows, 'pool')
  hm = lambda m: 2 * m['P@20'] * m['CR@20'] / (m['P@20'] + m['CR@20'])  # pylint: disable=unnecessary-lambda-assignment
  seeds = [hm(rows[f'colt (seed {s}, pool)']['mean']) for s in (0, 1)]
  assert agg['colt'][tables.PAPER_F1] == pytest.approx((np.mean(seeds), np.std(seeds), 2))
  assert agg['umons'][tables.PAPER_F1][0] >= agg['umons']['F1@20'][0]  # hm is concave
  header = tables.table(agg, ['umons'], {}, ('F1@20', tables.PAPER_F1),
                        headers=tables.HEADERS).splitlines()[0]
  assert header == '| method | F1@20 (official) | F1@20 (paper) |'
  assert tables.TABLE_COLUMNS.index(tables.PAPER_F1) == tables.TABLE_COLUMNS.index('F1@20') + 1
  line = tables.paired_line(rows, 'colt', 'umons', 'pool', 'UMONS')
  official = significance.paired_difference(tables.per_topic(rows, 'colt', 'pool'),
                                            tables.per_topic(rows, 'umons', 'pool'))
  pt = lambda m, k: tables.per_topic(rows, m, 'pool', k)  # pylint: disable=unnecessary-lambda-assignment
  paper = significance.paired_paper_f1(pt('colt', 'P@20'), pt('colt', 'CR@20'),
                                       pt('umons', 'P@20'), pt('umons', 'CR@20'))
  assert line.startswith(f'- against UMONS: F1@20 (official) {official.text()}: '
                         f'**{official.verdict}**; F1@20 (paper) {paper.mean:+.4f} '
                         f'[{paper.low:+.4f}, {paper.high:+.4f}]: **{paper.verdict}**; P@20 ')
  assert 'harmonic mean of the mean P@20 and the mean CR@20' in report.F1_NOTE


def _cv(test_scores: dict, train_scores: list) -> tuple:
  """Merged CV rows of baselines a and b (per-topic F1 `test_scores[name]` over topics 0-5)
  and two folds holding out topics 0-2 and 3-5, with the given training F1@20 per fold."""
  topics = [str(t) for t in range(6)]
  merged = {f'{n} (pool)': {'mean': _mean(float(np.mean(v))),
                            'per_topic': {t: _mean(f) for t, f in zip(topics, v)}}
            for n, v in test_scores.items()}
  folds = [{'fold': i, 'test_topics': [3 * i, 3 * i + 1, 3 * i + 2],
            'baselines': {f'{n} (pool)': {'train_F1@20': s, 'chosen': {}}
                          for n, s in scores.items()}}
           for i, scores in enumerate(train_scores)]
  return merged, folds


def test_cv_best_baseline_is_each_folds_choice_on_its_training_topics():
  merged, folds = _cv({'umons': [0.9] * 6, 'mmr': [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]},
                      [{'umons': 0.5, 'mmr': 0.6}, {'umons': 0.7, 'mmr': 0.6}])
  choice = tables.best_baseline(merged, 'pool', folds)
  assert choice['name'] == 'best baseline' and choice['per_fold'] == ['mmr', 'umons']
  row = choice['rows']['best baseline (pool)']
  assert [row['per_topic'][str(t)]['F1@20'] for t in range(6)] == [0.1, 0.2, 0.3, 0.9, 0.9,
                                                                   0.9]
  assert 'fold 0 `mmr`, fold 1 `umons`' in choice['label']
  assert 'training topics' in choice['how']
  del folds[1]['baselines']['mmr (pool)']  # an older results.json: by test, said so
  choice = tables.best_baseline(merged, 'pool', folds)
  assert (choice['name'], choice['how']) == ('umons', tables.TEST_CHOICE_NOTE)
  line = tables.best_baseline_line(dict(merged, **{'colt (seed 0, pool)': merged['mmr (pool)']}),
                                   'colt', 'pool', folds)
  assert line[0].startswith('- against the best tuned baseline, UMONS (`umons`) (chosen by '
                            'test score: older results.json without dev scores): F1@20 (official)')


def test_fold_baseline_lines_show_each_folds_setting_parameters_and_best():
  folds = [{'fold': 0, 'baselines': {
      'mmr (pool)': {'train_F1@20': 0.61, 'chosen': {'diversity': 0.3},
                     'features': 'text+descvis10x1'},
      'topk (pool)': {'train_F1@20': 0.6, 'chosen': {}},
      'flickr (pool)': {'train_F1@20': 0.9, 'chosen': {}}}},  # not a tuned baseline
           {'fold': 1}]  # an older fold without the record
  lines = cv_report.fold_baseline_lines(folds, 'pool')
  assert lines[2] == '| fold | `topk` | `mmr` | best |'
  assert lines[4] == ('| 0 | no parameters (0.6000) | text+descvis10x1: diversity 0.3 (0.6100) '
                      '| `mmr` |')
  assert lines[5] == '| 1 | - | - | `-` |'
  assert cv_report.fold_baseline_lines([{'fold': 0}], 'pool') == []


def test_target_lines_judge_every_baseline_in_both_readings_and_p20_against_topk():
  topics = [str(t) for t in range(12)]
  const = lambda v: {t: v for t in topics}  # pylint: disable=unnecessary-lambda-assignment
  noisy = lambda v: {t: v + 0.01 * (i % 3) for i, t in enumerate(topics)}  # pylint: disable=unnecessary-lambda-assignment
  rows = {'colt-pairs (seed 0, pool)': _topic_rows(noisy(0.80), noisy(0.70)),
          'topk (pool)': _topic_rows(const(0.82), const(0.40)),
          'mmr (pool)': _topic_rows(const(0.70), const(0.50))}
  lines = cv_report.target_lines(rows, 'pool')
  assert lines[2].startswith('| top-k (f) | +') and lines[2].count('| better |') == 2
  assert lines[-2] == ('**Target met**: better than every baseline in both readings, P@20 '
                       'within 0.03 of top-k.')
  assert any('difference -0.0100' in l and '**met**' in l for l in lines)
  assert any(l.startswith('- Margin over the best tuned baseline') and '**reached**' in l
             for l in lines)
  # P@20 .05 below top-k, and no better than MMR on F1: both named.
  rows['colt-pairs (seed 0, pool)'] = _topic_rows(noisy(0.77), noisy(0.40))
  rows['mmr (pool)'] = _topic_rows(noisy(0.77), noisy(0.40))
  lines = cv_report.target_lines(rows, 'pool')
  assert lines[-2] == ('**Target not met**: not better than `topk`, `mmr` in both readings; '
                       'P@20 more than 0.03 below top-k.')
  assert cv_report.target_lines({k: v for k, v in rows.items() if 'topk' not in k}, 'pool') == []


def test_pairs_choice_lines_set_each_folds_inner_choice_beside_its_best_baseline():
  merged = {'colt-pairs (seed 0, pool)': {'fold_F1@20': [0.60, 0.70]},
            'colt-pairs (seed 1, pool)': {'fold_F1@20': [0.62, 0.72]},
            'umons (pool)': {'fold_F1@20': [0.65, 0.68]},
            'mmr (pool)': {'fold_F1@20': [0.64, 0.69]}}
  folds = [{'fold': 0, 'choices': {'pool': {'coverage': {'colt-pairs': {
      'chosen': {'coverage_weight': 0.25, 'ttc_step': 200}, 'F1@20': 0.69}}}},
            'baselines': {'umons (pool)': {'train_F1@20': 0.70},
                          'mmr (pool)': {'train_F1@20': 0.66},
                          'flickr (pool)': {'train_F1@20': 0.9}}},
           {'fold': 1, 'choices': {'pool': {'scl': []}}}]  # no record: no line
  lines = cv_report.pairs_choice_lines(merged, folds, 'pool')
  assert lines[-2] == ('| 0 | coverage, w 0.25 | 200 | 0.6900 | `umons` (0.7000) | 0.6100 | '
                       '0.6500 |')
  assert cv_report.rule_text({'selection': 'cluster', 'cluster_threshold': 0.3,
                             'per_category': 2, 'ttc_step': 100}) == 'clusters, threshold 0.3, X 2'
  assert cv_report.rule_text({'selection': 'coverage', 'coverage_weight': 0.25,
                             'pair_blend': 0.7}) == 'coverage, w 0.25, b 0.7'
  assert cv_report.rule_text({'selection': 'dpp', 'selection_theta': 0.5,
                             'ttc_step': 200}) == 'dpp, theta 0.5'
  assert cv_report.rule_text({'selection': 'cluster', 'cluster_threshold': 0.3, 'per_category': 1,
                             'relevance_mix': 0.0}) == 'clusters, threshold 0.3, X 1, a 0.0'
  assert len([l for l in lines if l.startswith('| 1 ')]) == 0
  assert cv_report.pairs_choice_lines(merged, folds[1:], 'pool') == []


def test_shared_trainings_are_checked_by_their_weights_digests():
  from colt_jax.reproduction import cross_validation
  row = lambda workdirs, digests: {'params': {'ttc_checkpoint': ','.join(workdirs)},
                                   'ttc_digests': digests}
  rows = {'colt-pairs rule (seed 0, pool)': row(['w0'], ['a']),
          'colt-pairs dpp (seed 0, pool)': row(['w0'], ['a']),
          'colt-pairs ensemble (seed 0, pool)': row(['w0', 'w1'], ['a', 'b']),
          'colt-pairs rule (seed 1, pool)': row(['w1'], ['c']),  # w1 read with another digest
          'colt (seed 0, pool)': row(['w9'], ['z']),  # read by one row only
          'mmr (pool)': {'mean': {}}}  # no digest
  got = cross_validation.shared_trainings(rows)
  assert got == {'rows': 5, 'shared': 2, 'differ': ['w1']}
  line = cv_report.shared_training_lines([{'trainings': got}, {'trainings': {
      'rows': 3, 'shared': 1, 'differ': []}}, {}])
  assert line[0].startswith('Trained phi read by more than one row')
  assert '3 over the folds' in line[0] and 'that 8 rows recorded' in line[0]
  assert '**1 read with different weights**: w1' in line[0]
  clean = cv_report.shared_training_lines([{'trainings': {'rows': 3, 'shared': 1, 'differ': []}}])
  assert 'each read with the same weights by every row' in clean[0]
  assert cv_report.shared_training_lines([{}]) == []


def test_seed_noise_line_splits_the_difference_into_seed_noise_and_disagreement():
  topics = ['a', 'b', 'c', 'd']
  base = dict(zip(topics, (0.5, 0.6, 0.4, 0.7)))
  gain = dict(zip(topics, (0.1, -0.1, 0.1, -0.1)))  # the rows' own disagreement

  def row(scores):
    return {'mean': _mean(float(np.mean(list(scores.values())))),
            'per_topic': {t: _mean(v) for t, v in scores.items()}}
  rows = {'best baseline (pool)': row(base),
          # the mean of the two seeds is base + gain; each seed is 0.05 off it
          'colt-pairs (seed 0, pool)': row({t: base[t] + gain[t] + 0.05 for t in topics}),
          'colt-pairs (seed 1, pool)': row({t: base[t] + gain[t] - 0.05 for t in topics})}
  line = sections.seed_noise_line(rows, 'colt-pairs', 'best baseline', 'pool')
  # a seed's sd 0.0707; noise in the mean 0.0025 of the difference's variance 0.04 / 3
  assert line == ("- seeds: retraining phi moves a topic's F1@20 by sd 0.0707 (the spread of "
                  'its 2 seeds); in their mean that is 19% of the variance of the per-topic '
                  'difference (sd 0.1155), so more seeds could narrow the interval by 10% at '
                  'most; the rest, sd 0.1041, is the two rows disagreeing topic by topic')
  del rows['colt-pairs (seed 1, pool)']
  assert sections.seed_noise_line(rows, 'colt-pairs', 'best baseline', 'pool') is None
