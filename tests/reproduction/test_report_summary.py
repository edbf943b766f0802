"""colt_jax/reproduction/report_summary.py over the committed Div400 results: the headline rows,
the recommended method chosen on training topics, and verdicts that match their intervals."""
import json
import os
import re

import pytest

from colt_jax.reproduction import recommendation
from colt_jax.reproduction import report_summary
from colt_jax.reproduction import report_tables
from colt_jax.reproduction import row_cache
from checkout import REPO  # pylint: disable=g-bad-import-order

RESULTS = os.path.join(REPO, 'docs', 'results', 'div400', 'results.json')
ROWS = os.path.join(REPO, 'row-cache', 'div400')


@pytest.fixture(scope='module')
def payload():
  with open(RESULTS) as f:
    return json.load(f)


@pytest.fixture(scope='module')
def official():
  return recommendation.official_choice(row_cache.RowCache(ROWS, own_folder=False).saved_row,
                                        'pool')


def test_the_headline_rows_and_the_recommended_methods_numbers(payload, official):
  lines = report_summary.summary_lines(payload, official)
  assert lines[0] == '## Summary' and len(lines) <= 60
  table = [l for l in lines if l.startswith('| ') and not l.startswith('| method')]
  assert [l.split(' | ')[0] for l in table] == [
      '| top-k over f', '| strongest post-processing baseline', '| CoLT, tuned here (`colt`)',
      '| recommended: `colt-pairs relevance`']
  # The nested row equals the row every fold chose (they all chose the same one here).
  merged = payload['cv']['merged']
  agg = report_tables.aggregate(merged, 'pool')['colt-pairs relevance']
  cells = table[-1].split(' | ')
  assert cells[1] == f'{agg["F1@20"][0]:.4f}' and cells[2] == f'{agg[report_tables.PAPER_F1][0]:.4f}'
  official_agg = report_tables.aggregate(payload['rows'], 'pool')['colt-pairs relevance']
  assert cells[3] == f'{official_agg["F1@20"][0]:.4f}'


def test_every_verdict_says_what_its_interval_says(payload, official):
  for line in report_summary.summary_lines(payload, official):
    for low, high, verdict in re.findall(
        r'\[([+-]\d\.\d+), ([+-]\d\.\d+)\][^*]*\*\*(better|worse|no difference)\*\*', line):
      low, high = float(low), float(high)
      expected = 'better' if low > 0 else 'worse' if high < 0 else 'no difference'
      assert verdict == expected, line


def test_nothing_is_said_without_the_training_topics_scores(payload):
  no_choices = dict(payload, cv={'folds': [dict(f, choices={}) for f in payload['cv']['folds']],
                                 'merged': payload['cv']['merged']})
  assert report_summary.summary_lines(no_choices, None) == []
