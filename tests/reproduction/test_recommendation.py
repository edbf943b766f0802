"""colt_jax/reproduction/recommendation.py: the recommended row, chosen on training topics."""
from colt_jax.reproduction import recommendation as rec

SCORES = {'colt-pairs': 0.60, 'colt-pairs rule': 0.70, 'colt-pairs blend': 0.70,
          'colt-pairs dpp': 0.65, 'colt-pairs relevance': 0.68}


def test_the_rule_takes_the_best_inner_score_and_breaks_ties_toward_the_simpler():
  choice = rec.choose(SCORES)
  assert choice.chosen == 'colt-pairs rule'  # blend ties it and comes later
  assert choice.scores == SCORES
  assert rec.choose(dict(SCORES, **{'colt-pairs relevance': 0.71})).chosen == \
      'colt-pairs relevance'


def test_a_missing_inner_score_chooses_nothing():
  assert rec.choose({k: v for k, v in SCORES.items() if k != 'colt-pairs dpp'}) is None
  assert rec.fold_choices([{'choices': {'pool': {'coverage': {}}}}], 'pool') is None


def _row(topics):
  return {'per_topic': {t: {'F1@20': v, 'P@20': v, 'CR@20': v} for t, v in topics.items()},
          'mean': {}}


def test_each_held_out_topic_comes_from_its_own_folds_choice_seed_by_seed():
  folds = [{'test_topics': [1, 2], 'choices': {'pool': {'coverage': {
               c: {'F1@20': s} for c, s in SCORES.items()}}}},
           {'test_topics': [3], 'choices': {'pool': {'coverage': {
               c: {'F1@20': s + (0.2 if c == 'colt-pairs dpp' else 0)}
               for c, s in SCORES.items()}}}}]
  choices = rec.fold_choices(folds, 'pool')
  assert [c.chosen for c in choices] == ['colt-pairs rule', 'colt-pairs dpp']
  rows = {}
  for seed in (0, 1):
    rows[f'colt-pairs rule (seed {seed}, pool)'] = _row({'1': 0.1 + seed, '2': 0.2, '3': 0.9})
    rows[f'colt-pairs dpp (seed {seed}, pool)'] = _row({'1': 0.9, '2': 0.9, '3': 0.3 + seed})
  nested = rec.nested_rows(rows, folds, choices, 'pool')
  assert sorted(nested) == ['recommended (seed 0, pool)', 'recommended (seed 1, pool)']
  one = nested['recommended (seed 1, pool)']
  assert {t: s['F1@20'] for t, s in one['per_topic'].items()} == {'1': 1.1, '2': 0.2, '3': 1.3}
  assert abs(one['mean']['F1@20'] - (1.1 + 0.2 + 1.3) / 3) < 1e-12


def test_dev_to_test_takes_the_dev_choice_own_test_rows():
  records = {f'coverage choice {c} (pool)': {'scores': [{'F1@20': s}, {'F1@20': s - 0.1}]}
             for c, s in SCORES.items()}
  choice = rec.official_choice(lambda kind, name: records.get(name), 'pool')
  assert choice.chosen == 'colt-pairs rule'
  rows = {'colt-pairs rule (seed 0, pool)': {'x': 1}, 'colt-pairs blend (seed 0, pool)': {},
          'topk (pool)': {}}
  assert rec.official_rows(rows, choice, 'pool') == {'recommended (seed 0, pool)': {'x': 1}}
