"""The report's rows: aggregation over seeds, markdown tables, and paired comparisons.

Rows of results.json are named '<method> (seed <s>, <protocol>)' or '<method> (<protocol>)'
(`parse_row_name`); `aggregate` gives each method's mean ± standard deviation over its seeds
per protocol, `table` a markdown table of them. F1@20 is given in both readings: the official
one (mean of per-topic F1) and the paper's (harmonic mean of the mean P@20 and the mean CR@20;
`PAPER_F1`). Paired per-topic comparisons (`paired_line`) use
colt_jax.evaluation.significance; the best tuned baseline a comparison names is chosen on training topics alone (`best_baseline`).
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax.evaluation import metrics
from colt_jax.evaluation import significance

MAIN_COLUMNS = metrics.DEFAULT_COLUMNS  # P, CR, F1 at 10, 20 and 50
SHORT_COLUMNS = ('P@20', 'CR@20', 'F1@20')
# The paper's reading of F1@20 (`aggregate` adds it to every row): hm(mean P@20, mean CR@20).
PAPER_F1 = 'F1@20 (paper)'
# Columns of the report's tables: the paper's F1@20 right after the official one.
TABLE_COLUMNS = MAIN_COLUMNS[:MAIN_COLUMNS.index('F1@20') + 1] + (PAPER_F1,) + MAIN_COLUMNS[
    MAIN_COLUMNS.index('F1@20') + 1:]
TABLE_SHORT_COLUMNS = SHORT_COLUMNS + (PAPER_F1,)
HEADERS = {'F1@20': 'F1@20 (official)'}
BASELINE_LABELS = {'flickr': 'Flickr order', 'topk': 'top-k (f)', 'mmr': 'MMR (tuned on dev)',
                   'msd': 'MSD (tuned on dev)', 'dpp': 'DPP (tuned on dev)',
                   'umons': 'UMONS (tuned on dev)',
                   'umons-dbscan': 'UMONS, DBSCAN in both stages (tuned on dev)',
                   'gbt-pairs': 'gradient-boosted pairs + logistic relevance (fitted on dev)',
                   'gbt-pairs relevance': 'gradient-boosted pairs + the relevance model of '
                                          '`colt-pairs relevance` (fitted on dev)'}
# The baselines of the main tables and of CoLT's paired comparisons (absent rows are skipped).
TABLE_BASELINES = ('flickr', 'topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan', 'gbt-pairs',
                   'gbt-pairs relevance')
_ROW = re.compile(r'^(?P<name>.+?) \((?:seed (?P<seed>\d+), )?(?P<protocol>pool|global)\)$')


def parse_row_name(name: str) -> tuple:
  """'colt (seed 1, pool)' -> ('colt', 1, 'pool'); 'mmr (global)' -> ('mmr', None, 'global')."""
  m = _ROW.match(name)
  if not m:
    raise ValueError(f'unexpected row name {name!r}')
  seed = m.group('seed')
  return m.group('name'), (int(seed) if seed is not None else None), m.group('protocol')


def paper_f1(mean: Mapping[str, float]) -> Optional[float]:
  """The paper's F1@20 of a row's means: hm(mean P@20, mean CR@20); None without them."""
  if 'P@20' not in mean or 'CR@20' not in mean:
    return None
  return float(significance.harmonic_mean(mean['P@20'], mean['CR@20']))


def aggregate(rows: Mapping[str, Mapping[str, Any]], protocol: str) -> dict:
  """method/variant -> {metric: (mean, std, n)} over seeds, for one protocol; with P@20 and
  CR@20, also PAPER_F1 (each seed's hm(mean P@20, mean CR@20))."""
  groups = {}
  for name, row in rows.items():
    method, _, prot = parse_row_name(name)
    if prot != protocol and not (method == 'flickr' and protocol == 'global'):
      continue
    mean = dict(row['mean'])
    if paper_f1(mean) is not None:
      mean[PAPER_F1] = paper_f1(mean)
    groups.setdefault(method, []).append(mean)
  out = {}
  for method, means in groups.items():
    out[method] = {k: (float(np.mean([m[k] for m in means])),
                       float(np.std([m[k] for m in means])), len(means)) for k in means[0]}
  return out


def _cell(value: tuple, best: bool = False) -> str:
  mean, std, n = value
  text = f'{mean:.4f}' + (f' ± {std:.4f}' if n > 1 else '')
  return f'**{text}**' if best else text


def table(agg: Mapping[str, Mapping[str, tuple]], names: Sequence[str],
          labels: Mapping[str, str], columns: Sequence[str] = MAIN_COLUMNS,
          bold_best: bool = True, headers: Mapping[str, str] = None) -> str:
  """A markdown table of `names`' rows of `agg` (`headers`: a column's title, default its
  name)."""
  headers = headers or {}
  present = [n for n in names if n in agg]
  best = {c: max((agg[n][c][0] for n in present if c in agg[n]), default=None)
          for c in columns}
  lines = ['| method | ' + ' | '.join(headers.get(c, c) for c in columns) + ' |',
           '|---|' + '---|' * len(columns)]
  for n in present:  # a column a row was not scored under (an ablation's global) shows '-'
    cells = [_cell(agg[n][c], bold_best and agg[n][c][0] == best[c]) if c in agg[n] else '-'
             for c in columns]
    lines.append(f'| {labels.get(n, n)} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def per_topic(rows: Mapping[str, Mapping[str, Any]], method: str, protocol: str,
              metric: str = 'F1@20') -> dict:
  """topic -> `metric` of `method` under `protocol`, averaged over its seeds."""
  values = {}
  for name, row in rows.items():
    m, _, prot = parse_row_name(name)
    if m == method and (prot == protocol or (m == 'flickr' and protocol == 'global')):
      for t, scores in row.get('per_topic', {}).items():
        values.setdefault(t, []).append(scores[metric])
  return {t: float(np.mean(v)) for t, v in values.items()}


def paper_difference(rows: Mapping[str, Mapping[str, Any]], method: str, other: str,
                     protocol: str) -> 'significance.PairedDifference':
  """`method` - `other` in the paper's F1@20 (hm of the mean P@20 and mean CR@20 over the
  shared topics, seeds averaged per topic; `significance.paired_paper_f1`)."""
  return significance.paired_paper_f1(
      per_topic(rows, method, protocol, 'P@20'), per_topic(rows, method, protocol, 'CR@20'),
      per_topic(rows, other, protocol, 'P@20'), per_topic(rows, other, protocol, 'CR@20'))


def interval_text(d: 'significance.PairedDifference') -> str:
  return f'{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}]'


def paired_line(rows: Mapping[str, Mapping[str, Any]], method: str, other: str,
                protocol: str, label: str) -> Optional[str]:
  """'- against <label>: F1@20 (official) <diff> [95% CI], W/T/L ...: better|worse|no
  difference; F1@20 (paper) <diff> [95% CI]: ...; P@20 <diff>' from the rows' per-topic
  scores (colt_jax.evaluation.significance); None when either row is missing."""
  a, b = per_topic(rows, method, protocol), per_topic(rows, other, protocol)
  if len(set(a) & set(b)) < 2:
    return None
  f1 = significance.paired_difference(a, b)
  paper = paper_difference(rows, method, other, protocol)
  p20 = significance.paired_difference(per_topic(rows, method, protocol, 'P@20'),
                                       per_topic(rows, other, protocol, 'P@20'))
  return (f'- against {label}: F1@20 (official) {f1.text()}: **{f1.verdict}**; '
          f'F1@20 (paper) {interval_text(paper)}: **{paper.verdict}**; '
          f'P@20 {interval_text(p20)}')


def comparison_lines(rows: Mapping[str, Mapping[str, Any]], method: str,
                     against: Sequence[str], protocol: str,
                     labels: Mapping[str, str] = BASELINE_LABELS) -> list:
  """Paired per-topic comparisons of `method` with each of `against` (see `paired_line`)."""
  lines = [paired_line(rows, method, b, protocol, labels.get(b, b)) for b in against]
  return [line for line in lines if line]


# The learned rows the cross-validation scores beside `colt` (variants.CV_VARIANTS).
CV_ROWS = ('colt-pairs', 'colt-pairs rule', 'colt-pairs blend', 'colt-pairs ensemble',
           'colt-pairs dpp', 'colt-pairs relevance')

# colt-pairs' ablations the cross-validation scores (variants.CV_ABLATIONS).
CV_ABLATION_ROWS = ('colt-pairs no-relevance-head', 'colt-pairs no-pair-head',
                    'colt-pairs no-class-head', 'colt-pairs text-only tokens')

BASELINE_METHODS = ('topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan', 'gbt-pairs',
                    'gbt-pairs relevance')


def is_baseline(method: str) -> bool:
  """Whether a row is a tuned baseline, on text ('umons') or on a feature setting
  ('umons [text+descvis10x1]')."""
  return method.split(' [')[0] in BASELINE_METHODS


TEST_CHOICE_NOTE = 'chosen by test score: older results.json without dev scores'


def _baseline_label(name: str) -> str:
  label = BASELINE_LABELS.get(name, name).replace(' (tuned on dev)', '').replace(
      ' (fitted on dev)', '')
  return f'{label} (`{name}`)' if label != name else f'`{name}`'


def _composite(rows: Mapping[str, Mapping[str, Any]], per_fold: Sequence[tuple],
               protocol: str) -> dict:
  """A row taking each fold's held-out topics from that fold's chosen baseline row."""
  topics = {}
  for fold, name in per_fold:
    scores = rows[f'{name} ({protocol})']['per_topic']
    for t in fold['test_topics']:
      if str(t) in scores:
        topics[str(t)] = scores[str(t)]
  keys = list(next(iter(topics.values()))) if topics else []
  return {'protocol': protocol, 'per_topic': topics,
          'mean': {k: float(np.mean([m[k] for m in topics.values()])) for k in keys}}


def best_baseline(rows: Mapping[str, Mapping[str, Any]], protocol: str,
                  folds: Optional[Sequence[Mapping[str, Any]]] = None,
                  among: Optional[Sequence[str]] = None) -> Optional[dict]:
  """The best tuned baseline (any feature setting) of `rows` under `protocol`, chosen on
  training topics alone. dev -> test (`folds` None): the row with the highest `train_F1@20`
  (its tuned setting's F1@20 on dev). Cross-validation (`rows`: the merged rows, `folds`: the
  payload's folds): per fold the one with the highest F1@20 on that fold's training topics
  (`baselines` of the fold), the row 'best baseline' taking each topic from its fold's choice.
  When a score is missing (an older results.json), the highest test F1@20 instead, said so
  (TEST_CHOICE_NOTE). Returns {'name', 'rows' (`rows`, plus the composite row in CV), 'label',
  'how', 'per_fold'}; None without baselines. `among`: only these baselines (each on any
  feature setting)."""
  agg = aggregate(rows, protocol)
  present = [b for b in agg if is_baseline(b)
             and (among is None or b.split(' [')[0] in among)]
  if not present:
    return None
  if folds is None:
    scores = {b: rows.get(f'{b} ({protocol})', {}).get('train_F1@20') for b in present}
    if all(v is not None for v in scores.values()):
      best = max(present, key=lambda b: scores[b])
      return {'name': best, 'rows': rows, 'label': _baseline_label(best), 'per_fold': None,
              'how': f'chosen by its F1@20 on the dev topics it was tuned on '
                     f'({scores[best]:.4f}), never by test'}
  else:
    per_fold, chosen = [], True
    for fold in folds:
      known = fold.get('baselines') or {}
      scores = {b: (known.get(f'{b} ({protocol})') or {}).get('train_F1@20') for b in present}
      if any(v is None for v in scores.values()):
        chosen = False
        break
      per_fold.append((fold, max(present, key=lambda b: scores[b])))
    if chosen and per_fold:
      names = [n for _, n in per_fold]
      out = dict(rows)
      out[f'best baseline ({protocol})'] = _composite(rows, per_fold, protocol)
      label = ('the best baseline of each fold: ' +
               ', '.join(f'fold {f["fold"]} `{n}`' for f, n in per_fold))
      return {'name': 'best baseline', 'rows': out, 'label': label, 'per_fold': names,
              'how': 'each fold\'s chosen by its F1@20 on that fold\'s training topics, '
                     'never by the held-out ones'}
  best = max(present, key=lambda b: agg[b]['F1@20'][0])
  return {'name': best, 'rows': rows, 'label': _baseline_label(best), 'per_fold': None,
          'how': TEST_CHOICE_NOTE}


def best_baseline_line(rows: Mapping[str, Mapping[str, Any]], method: str, protocol: str,
                       folds: Optional[Sequence[Mapping[str, Any]]] = None) -> list:
  """`paired_line` of `method` against `best_baseline` (saying how it was chosen); [] when
  either is missing."""
  choice = best_baseline(rows, protocol, folds)
  if choice is None:
    return []
  line = paired_line(choice['rows'], method, choice['name'], protocol,
                     f'the best tuned baseline, {choice["label"]} ({choice["how"]})')
  return [line] if line else []
