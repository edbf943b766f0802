"""docs/RESULTS.md from the payload of `reproduction.run` (experiments/) (results.json).

Tables like the paper's: Table 2 (every method, P/CR/F1 at 10, 20
and 50), Table 3 (ablations),
Table 4 (SCL pairs), the bank's alpha (Eq. 3), Tables 5-7 (X, L, N), and the cross-validation
over all topics. CoLT rows
trained with several seeds show mean ± standard deviation. Every number comes from the
payload; the comparisons in the text are computed here too. F1@20 is given in both readings:
the official one (mean of per-topic F1) and the paper's (harmonic mean of the mean P@20 and
the mean CR@20; `PAPER_F1`). The best tuned baseline a comparison names is chosen on training
topics alone (`best_baseline`).
"""
from __future__ import annotations

import datetime
import os
import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax import views as views_lib

from colt_jax import metrics
from colt_jax import outputs
from colt_jax import significance

MAIN_COLUMNS = metrics.DEFAULT_COLUMNS  # P, CR, F1 at 10, 20 and 50
SHORT_COLUMNS = ('P@20', 'CR@20', 'F1@20')
# The paper's reading of F1@20 (`aggregate` adds it to every row): hm(mean P@20, mean CR@20).
PAPER_F1 = 'F1@20 (paper)'
# Columns of the report's tables: the paper's F1@20 right after the official one.
TABLE_COLUMNS = MAIN_COLUMNS[:MAIN_COLUMNS.index('F1@20') + 1] + (PAPER_F1,) + MAIN_COLUMNS[
    MAIN_COLUMNS.index('F1@20') + 1:]
TABLE_SHORT_COLUMNS = SHORT_COLUMNS + (PAPER_F1,)
HEADERS = {'F1@20': 'F1@20 (official)'}
F1_NOTE = ('**Two readings of F1@20.** *F1@20 (official, mean of per-topic F1)*: the MediaEval '
           'scorer\'s, the mean over topics of each topic\'s 2 P@20 CR@20 / (P@20 + CR@20); '
           'every other F1 and every choice in this report use it. *F1@20 (paper: harmonic '
           'mean of mean P and mean CR)*: the reading of the paper\'s tables, the harmonic '
           'mean of the mean P@20 and the mean CR@20 over topics (P@20 .8548 and CR@20 .6416 '
           'give .7330); the harmonic mean is concave, so it is never below the official '
           'reading. CoLT cells of either: mean ± std over seeds of each seed\'s value.')
BASELINE_LABELS = {'flickr': 'Flickr order', 'topk': 'top-k (f)', 'mmr': 'MMR (tuned on dev)',
                   'msd': 'MSD (tuned on dev)', 'dpp': 'DPP (tuned on dev)',
                   'umons': 'UMONS (tuned on dev)',
                   'umons-dbscan': 'UMONS, DBSCAN in both stages (tuned on dev)',
                   'gbt-pairs': 'gradient-boosted pairs + logistic relevance (fitted on dev)'}
# The baselines of the main tables and of CoLT's paired comparisons (absent rows are skipped).
TABLE_BASELINES = ('flickr', 'topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan', 'gbt-pairs')
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


def _label(name: str, agg: Mapping[str, Mapping[str, tuple]]) -> str:
  n = agg[name]['F1@20'][2] if name in agg else 1
  return f'{name} ({n} seeds)' if n > 1 else name


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


def _interval(d: 'significance.PairedDifference') -> str:
  return f'{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}]'


def paired_line(rows: Mapping[str, Mapping[str, Any]], method: str, other: str,
                protocol: str, label: str) -> Optional[str]:
  """'- against <label>: F1@20 (official) <diff> [95% CI], W/T/L ...: better|worse|no
  difference; F1@20 (paper) <diff> [95% CI]: ...; P@20 <diff>' from the rows' per-topic
  scores (colt_jax.significance); None when either row is missing."""
  a, b = per_topic(rows, method, protocol), per_topic(rows, other, protocol)
  if len(set(a) & set(b)) < 2:
    return None
  f1 = significance.paired_difference(a, b)
  paper = paper_difference(rows, method, other, protocol)
  p20 = significance.paired_difference(per_topic(rows, method, protocol, 'P@20'),
                                       per_topic(rows, other, protocol, 'P@20'))
  return (f'- against {label}: F1@20 (official) {f1.text()}: **{f1.verdict}**; '
          f'F1@20 (paper) {_interval(paper)}: **{paper.verdict}**; P@20 {_interval(p20)}')


def _comparison(rows: Mapping[str, Mapping[str, Any]], method: str, against: Sequence[str],
                protocol: str, labels: Mapping[str, str] = BASELINE_LABELS) -> list:
  """Paired per-topic comparisons of `method` with each of `against` (see `paired_line`)."""
  lines = [paired_line(rows, method, b, protocol, labels.get(b, b)) for b in against]
  return [line for line in lines if line]


BASELINE_METHODS = ('topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan', 'gbt-pairs')
TOPIC_PROPERTIES = (('relevant_fraction', 'share of relevant photos in the pool'),
                    ('clusters', 'ground-truth clusters'), ('photos', 'photos in the pool'))


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
                  folds: Optional[Sequence[Mapping[str, Any]]] = None) -> Optional[dict]:
  """The best tuned baseline (any feature setting) of `rows` under `protocol`, chosen on
  training topics alone. dev -> test (`folds` None): the row with the highest `train_F1@20`
  (its tuned setting's F1@20 on dev). Cross-validation (`rows`: the merged rows, `folds`: the
  payload's folds): per fold the one with the highest F1@20 on that fold's training topics
  (`baselines` of the fold), the row 'best baseline' taking each topic from its fold's choice.
  When a score is missing (an older results.json), the highest test F1@20 instead, said so
  (TEST_CHOICE_NOTE). Returns {'name', 'rows' (`rows`, plus the composite row in CV), 'label',
  'how', 'per_fold'}; None without baselines."""
  agg = aggregate(rows, protocol)
  present = [b for b in agg if is_baseline(b)]
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


def per_topic_analysis(rows: Mapping[str, Mapping[str, Any]],
                       topic_stats: Mapping[str, Mapping[str, float]], protocol: str,
                       method: str = 'colt',
                       folds: Optional[Sequence[Mapping[str, Any]]] = None) -> list:
  """Markdown lines: `method` against the best tuned baseline (`best_baseline`: chosen on
  training topics; `folds` for cross-validation), topic by topic: where the F1@20 difference
  comes from (P@20 vs CR@20), how it varies with each topic property (terciles, Spearman's
  rho), and the strongest CoLT row of `rows` against the same baseline. Empty when a row is
  missing."""
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  agg = aggregate(rows, protocol)
  choice = best_baseline(rows, protocol, folds)
  if method not in agg or choice is None or not topic_stats:
    return []
  best, label, rows = choice['name'], choice['label'], choice['rows']
  diffs = {m: significance.paired_difference(per_topic(rows, method, protocol, m),
                                             per_topic(rows, best, protocol, m))
           for m in ('F1@20', 'P@20', 'CR@20')}
  paper = paper_difference(rows, method, best, protocol)
  out = [f'`{method}` against the best tuned baseline here (on any feature setting), {label}, '
         f'{choice["how"]}; topic by topic ({protocol} protocol; seeds averaged per topic):',
         '']
  out += [f'- F1@20 (official): {diffs["F1@20"].text()}: **{diffs["F1@20"].verdict}**',
          f'- F1@20 (paper): {_interval(paper)}: **{paper.verdict}**']
  out += [f'- {m}: {diffs[m].text()}: **{diffs[m].verdict}**' for m in ('P@20', 'CR@20')]
  a, b = per_topic(rows, method, protocol), per_topic(rows, best, protocol)
  topics = sorted(set(a) & set(b) & set(topic_stats), key=str)
  d = np.array([a[t] - b[t] for t in topics])
  out += ['', f'F1@20 difference by topic property (terciles over the {len(topics)} topics, '
          'two groups where ties merge two of them; rho: Spearman correlation of the property '
          'with the difference):', '',
          '| property | tercile (range) | topics | mean difference | W/T/L |', '|---|---|---|---|---|']
  for key, text in TOPIC_PROPERTIES:
    x = np.array([float(topic_stats[t][key]) for t in topics])
    rho = scipy_stats.spearmanr(x, d).statistic if np.ptp(x) > 0 else float('nan')
    edges = np.quantile(x, [1 / 3, 2 / 3])
    groups = np.digitize(x, edges, right=True)  # ties at an edge stay in the lower group
    present = [g for g in range(3) if (groups == g).any()]
    names = ('low', 'middle', 'high') if len(present) == 3 else ('lower', 'upper')
    for g, name in zip(present, names):
      sel = groups == g
      dd = d[sel]
      wtl = (f'{int(np.sum(dd > significance.TIE))}/'
             f'{int(np.sum(np.abs(dd) <= significance.TIE))}/'
             f'{int(np.sum(dd < -significance.TIE))}')
      first = f'{text} (rho {rho:+.2f})' if g == present[0] else ''
      out.append(f'| {first} | {name} ({x[sel].min():.3g}-{x[sel].max():.3g}) | '
                 f'{int(sel.sum())} | {dd.mean():+.4f} | {wtl} |')
  colt_rows = [n for n in agg if not is_baseline(n) and n != 'flickr']  # `rows` as given
  strongest = max(colt_rows, key=lambda n: agg[n]['F1@20'][0])
  line = paired_line(rows, strongest, best, protocol, label)
  if line:
    out += ['', f'The strongest CoLT row here is `{strongest}` (F1@20 '
            f'{agg[strongest]["F1@20"][0]:.4f}, {agg[strongest]["F1@20"][2]} seed(s)); paired '
            f'with the same baseline:', line]
  return out + ['']


PAIRED_NOTE = ('Paired differences over topics (`colt_jax/significance.py`): the mean '
               'per-topic difference (seeds averaged per topic first), its 95% percentile '
               'bootstrap interval (10,000 resamples of the topics) and wins/ties/losses; '
               '"better" or "worse" only where the interval excludes 0. The paper\'s F1@20 '
               'is compared the same way: its difference on all topics, and its interval from '
               'resampled topics (the same for both rows), its reading recomputed on each '
               'resample (its wins/ties/losses would be the per-topic F1\'s, not repeated). '
               'The best tuned baseline of a comparison is chosen on training topics alone: '
               'dev -> test, the baseline row (any feature setting) with the highest F1@20 of '
               'its tuned setting on dev; in cross-validation, per fold, the one with the '
               'highest F1@20 on that fold\'s training topics.')


def short_list_lines(rows: Mapping[str, Mapping[str, Any]], k: int = 20) -> list:
  """One line per method/protocol whose lists hold fewer than k photos on average (from each
  row's `returned@20`, averaged over seeds): P@k and CR@k count the empty slots as misses."""
  groups = {}
  for name, row in rows.items():
    if 'returned@20' in row:
      method, _, protocol = parse_row_name(name)
      groups.setdefault((method, protocol), []).append(row['returned@20'])
  lines = []
  for (method, protocol), values in sorted(groups.items()):
    mean = float(np.mean(values))
    if mean < k - 1e-9:
      lines.append(f'- `{method}` ({protocol}): {mean:.2f} photos per topic in its first {k} '
                   f'on average.')
  return lines


CHANGE_COLUMNS = ('P@20', 'CR@20', 'F1@20')


def previous_summary(payload: Mapping[str, Any], label: str) -> dict:
  """What a later report compares itself with: of an earlier results.json (`payload`), per
  part (`rows`: dev -> test, `cv`: cross-validation) and protocol, each method's mean over
  seeds of P@20, CR@20 and F1@20, and how many seeds it had; `label` says where it came from."""
  out = {'label': label, 'rows': {}, 'cv': {}}
  parts = {'rows': payload.get('rows') or {},
           'cv': (payload.get('cv') or {}).get('merged') or {}}
  for part, rows in parts.items():
    protocols = sorted({parse_row_name(n)[2] for n in rows})
    for protocol in protocols:
      out[part][protocol] = {
          m: dict({c: v[c][0] for c in CHANGE_COLUMNS if c in v}, seeds=v['F1@20'][2])
          for m, v in aggregate(rows, protocol).items() if 'F1@20' in v}
  return out


def change_lines(payload: Mapping[str, Any], previous: Mapping[str, Any],
                 tolerance: float = 5e-5) -> list:
  """Markdown lines: every row of `payload` against the same row of `previous` (a
  `previous_summary`): its F1@20, P@20 and CR@20 before and now and the change of F1@20;
  rows only one of them has are listed as added or removed."""
  now = previous_summary(payload, '')
  out = [f'Every row against the same row of {previous["label"]} (means over seeds; a row is '
         f'"unchanged" when its F1@20 moved by at most {tolerance:g}).', '']
  titles = {'rows': 'dev -> test', 'cv': 'cross-validation'}
  for part, title in titles.items():
    for protocol in sorted(set(now[part]) | set(previous.get(part, {}))):
      new_rows = now[part].get(protocol, {})
      old_rows = previous.get(part, {}).get(protocol, {})
      if not new_rows and not old_rows:
        continue
      out += [f'**{title}, {protocol} protocol**', '',
              '| method | F1@20 before | F1@20 now | change | P@20 before -> now | '
              'CR@20 before -> now | seeds before -> now |', '|---|---|---|---|---|---|---|']
      for m in sorted(set(new_rows) | set(old_rows), key=lambda n: (n not in new_rows, n)):
        a, b = old_rows.get(m), new_rows.get(m)
        if a is None:
          out.append(f'| {m} | - | {b["F1@20"]:.4f} | added | - -> {b["P@20"]:.4f} | '
                     f'- -> {b["CR@20"]:.4f} | - -> {b["seeds"]} |')
          continue
        if b is None:
          out.append(f'| {m} | {a["F1@20"]:.4f} | - | removed | {a["P@20"]:.4f} -> - | '
                     f'{a["CR@20"]:.4f} -> - | {a["seeds"]} -> - |')
          continue
        delta = b['F1@20'] - a['F1@20']
        change = f'{delta:+.4f}' if abs(delta) > tolerance else 'unchanged'
        out.append(f'| {m} | {a["F1@20"]:.4f} | {b["F1@20"]:.4f} | {change} | '
                   f'{a["P@20"]:.4f} -> {b["P@20"]:.4f} | {a["CR@20"]:.4f} -> '
                   f'{b["CR@20"]:.4f} | {a["seeds"]} -> {b["seeds"]} |')
      out.append('')
  return out


def fold_choice_lines(folds: Sequence[Mapping[str, Any]]) -> list:
  """A table of what each cross-validation fold's inner k-fold chose for `colt` (per
  protocol): g's beta and lr, phi's labels and steps, the relevance threshold, X and the
  feature setting."""
  lines = ['What each fold chose for `colt` (inner k-fold over its training topics):', '',
           '| fold | protocol | g: beta, lr | phi: labels, steps | threshold | X | features |',
           '|---|---|---|---|---|---|---|']
  for fold in folds:
    for protocol, c in sorted((fold.get('chosen') or {}).items()):
      scl, ttc = c.get('scl') or {}, c.get('ttc') or {}
      views = (views_lib.ViewSpec(**c['views']).name if c.get('views') else 'text')
      lines.append(f'| {fold["fold"]} | {protocol} | {scl.get("beta", "-")}, '
                   f'{scl.get("learning_rate", "-")} | {ttc.get("label_scheme", "-")}, '
                   f'{ttc.get("num_steps", "-")} | {c.get("irrelevant_threshold", "-")} | '
                   f'{c.get("per_category", "-")} | {views} |')
  return lines + ['']


def _params_text(chosen: Mapping[str, Any]) -> str:
  return ', '.join(f'{k} {v}' for k, v in sorted(chosen.items()))


def fold_baseline_lines(folds: Sequence[Mapping[str, Any]], protocol: str) -> list:
  """A table of what each cross-validation fold chose for its tuned baselines on its
  training topics (results.json `baselines` per fold): per method the feature setting (the
  methods tuned on several), the parameters and the training F1@20; and the fold's best
  tuned baseline (the highest training F1@20). [] for an older results.json without them."""
  per_fold = []
  for fold in folds:
    known = {parse_row_name(n)[0]: b for n, b in (fold.get('baselines') or {}).items()
             if parse_row_name(n)[2] == protocol and is_baseline(parse_row_name(n)[0])}
    per_fold.append((fold, known))
  methods = sorted({m for _, k in per_fold for m in k},
                   key=lambda m: (TABLE_BASELINES.index(m) if m in TABLE_BASELINES
                                  else len(TABLE_BASELINES), m))
  if not methods:
    return []
  lines = [f'What each fold chose for the tuned baselines ({protocol} protocol) on its '
           'training topics: feature setting, parameters (F1@20 on the training topics); the '
           'fold\'s best tuned baseline is the one with the highest training F1@20:', '',
           '| fold | ' + ' | '.join(f'`{m}`' for m in methods) + ' | best |',
           '|---|' + '---|' * (len(methods) + 1)]
  for fold, known in per_fold:
    cells = []
    for m in methods:
      b = known.get(m)
      if b is None:
        cells.append('-')
        continue
      setting = f'{b["features"]}: ' if 'features' in b else ''
      params = _params_text(b.get('chosen') or {}) or 'no parameters'
      cells.append(f'{setting}{params} ({b["train_F1@20"]:.4f})')
    best = max(known, key=lambda m: known[m]['train_F1@20']) if known else '-'
    lines.append(f'| {fold["fold"]} | ' + ' | '.join(cells) + f' | `{best}` |')
  return lines + ['']


def _config_lines(payload: Mapping[str, Any]) -> list:
  lines = []
  for which, (scl, ttc) in payload['base_configs'].items():
    lines.append(
        f'- `{which}`: g: lr {scl["learning_rate"]}, beta {scl["beta"]}, tau {scl["tau"]}, '
        f'alpha {scl["alpha"]}, batch {scl["batch_size"]} queries x '
        f'{scl["images_per_query"]} photos, {scl["num_steps"]} steps. phi: L={ttc["num_layers"]}, '
        f'd={ttc["model_dim"] or "feature dim"}, {ttc["num_heads"]} heads, N={ttc["num_images"]}, '
        f'lr {ttc["learning_rate"]}, batch {ttc["batch_size"]}, dropout {ttc["dropout"]} '
        f'(attention weights {ttc.get("attention_dropout", ttc["dropout"])}), labels '
        f'{ttc.get("label_scheme", "global")}, '
        f'query_relative={ttc["query_relative"]}, augmentation p_q={ttc["p_q"]} '
        f'p_v={ttc["p_v"]} p_d={ttc["p_d"]} p_c={ttc["p_c"]}, {ttc["num_steps"]} steps.')
  return lines


def choice_lines(choice: Mapping[str, Any], dev_topics: int) -> list:
  """Markdown for one dev hold-out search (experiments/choose_steps.py)."""
  held = len(choice['held_out_topics'])
  what = choice.get('what', 'ttc')
  flag = f" --what {what}" if what != 'ttc' else ''
  if what == 'ttc' and choice.get('variant', 'colt') != 'colt':
    flag += f" --variant '{choice['variant']}'"
  if choice.get('protocol', 'pool') != 'pool':
    flag += f" --protocol {choice['protocol']}"
  command = choice.get('command') or f'python experiments/choose_steps.py{flag}'
  lines = [f'- `{command}`: `{choice.get("variant", "colt")}` '
           f'trained on {dev_topics - held} dev topics and scored on the {held} others '
           f'(F1@20, {choice["protocol"]} protocol; top-k over f on them: '
           f'{choice["topk"]:.4f}). Chosen: {choice["best"]}.', '']
  if what == 'label_scheme':
    lines += ['  | labels | best F1@20 (over steps x threshold) |', '  |---|---|']
    for scheme in sorted({r['label_scheme'] for r in choice['scores']}):
      best = max(r['F1@20'] for r in choice['scores'] if r['label_scheme'] == scheme)
      lines.append(f'  | {scheme} | {best:.4f} |')
  elif what == 'scl':
    lines += ['  | beta | lr | P@20 | CR@20 | F1@20 |', '  |---|---|---|---|---|']
    for r in choice['scores']:
      lines.append(f'  | {r["setting"]["beta"]} | {r["setting"]["learning_rate"]} | '
                   f'{r["P@20"]:.4f} | {r["CR@20"]:.4f} | {r["F1@20"]:.4f} |')
  else:
    thresholds = sorted({r['irrelevant_threshold'] for r in choice['scores']})
    lines += ['  | steps | ' + ' | '.join(f'F1@20, threshold {t}' for t in thresholds) + ' |',
              '  |---|' + '---|' * len(thresholds)]
    for steps in sorted({r['steps'] for r in choice['scores']}):
      cells = {r['irrelevant_threshold']: r['F1@20'] for r in choice['scores']
               if r['steps'] == steps}
      lines.append(f'  | {steps} | ' + ' | '.join(f'{cells[t]:.4f}' for t in thresholds) + ' |')
  return lines + ['']


def _compute_text(compute: Optional[Mapping]) -> str:
  """How long computing every row took, from the rows' own records (results.json
  `compute`); '' when none is timed."""
  if not compute or not compute.get('timed'):
    return ''
  text = (f'Computing its {compute["rows"]} rows and choices from scratch took '
          f'{compute["seconds"] / 3600:.1f} hours on this 2-core machine')
  if compute['timed'] < compute['rows']:
    text += (f' for the {compute["timed"]} of them that recorded their time (rows cached by '
             'older code did not)')
  return text + '. '


def _cv_baseline_text(payload: Mapping[str, Any]) -> str:
  """How the cross-validation tuned its baselines' feature settings (from the payload)."""
  folds = payload['cv']['folds']
  if not any('features' in b for f in folds for b in (f.get('baselines') or {}).values()):
    if any(f.get('baselines') for f in folds):
      return 'The baselines use text features.'
    return ('The baselines use text features (an older results.json: no training-topic '
            'scores of the baselines per fold).')
  settings = list(dict.fromkeys(s['features'] for f in folds
                                for b in (f.get('baselines') or {}).values()
                                for s in b.get('settings', ())))
  methods = sorted({parse_row_name(n)[0] for f in folds
                    for n, b in (f.get('baselines') or {}).items() if 'features' in b},
                   key=lambda m: (TABLE_BASELINES.index(m) if m in TABLE_BASELINES
                                  else len(TABLE_BASELINES), m))
  return (f'{", ".join(f"`{m}`" for m in methods)} are tuned on every feature setting `colt` '
          f'may choose there ({", ".join(settings)}): each fold chooses the setting and its '
          'parameters together by the F1@20 on its training topics (table below the '
          'results); the other baselines use text features.')


def g_effect_lines(rows: Mapping[str, Mapping[str, Any]], cv: Optional[Mapping]) -> list:
  """g's effect size (Eq. 1) per row that trains g, and what the folds' inner choice of g saw."""
  effects = {}
  for name, row in rows.items():
    if row.get('g_effect'):
      method = parse_row_name(name)[0]
      effects.setdefault(method, []).append(row['g_effect'])
  if not effects:
    return []
  out = ['## What g does', '',
         'g\'s effect size on the test photos: the mean of ||beta g(h)|| / ||h|| (Eq. 1), and '
         'the share of test topics whose top-20 by query similarity holds other photos after '
         're-encoding (h^ instead of h); means over the row\'s seeds and protocols.', '',
         '| row | ||beta g(h)|| / ||h|| | topics whose top-20 changes |', '|---|---|---|']
  for method, values in sorted(effects.items()):
    out.append(f'| {method} | {np.mean([v["relative_change"] for v in values]):.4f} | '
               f'{np.mean([v["top_k_changed"] for v in values]):.0%} |')
  out.append('')
  scl_scores = [(f['fold'], s) for f in (cv or {}).get('folds', [])
                for choice in f.get('choices', {}).values() for s in choice.get('scl', [])
                if 'g_effect' in s]
  if scl_scores:
    out += ['Each cross-validation fold\'s inner choice of g (SCL + top-k on the inner '
            'held-out parts, F1@20):', '',
            '| fold | setting | inner F1@20 | ||beta g(h)|| / ||h|| | top-20 changed |',
            '|---|---|---|---|---|']
    for fold, score in scl_scores:
      out.append(f'| {fold} | {_params_text(score["setting"])} | {score["F1@20"]:.4f} | '
                 f'{score["g_effect"]["relative_change"]:.4f} | '
                 f'{score["g_effect"]["top_k_changed"]:.0%} |')
    out.append('')
  return out


def view_rows(variants: Mapping[str, Mapping[str, Any]]) -> list:
  """Rows of the feature-settings table: `colt`, then per setting its CoLT rows and the
  baselines scored on the same features ('<method> [<setting>]')."""
  names = ['colt', 'topk', 'mmr', 'umons', 'umons-dbscan']
  for name, v in variants.items():
    if v.get('views'):
      setting = views_lib.ViewSpec(**v['views']).name
      names += [name] + [f'{m} [{setting}]' for m in ('topk', 'mmr', 'umons', 'umons-dbscan')]
  return list(dict.fromkeys(names))


def render(payload: Mapping[str, Any], command: str,
           choose_steps: Optional[Sequence[Mapping]] = None,
           analysis: str = '', topic_stats: Optional[Mapping] = None) -> str:
  rows = payload['rows']
  protocols = payload['config']['protocols']
  variants = {v['name']: v for v in payload['variants']}
  ds = payload['dataset']
  rdir = payload.get('results_dir', f'docs/results/{ds}')
  feats = payload['features']['test']
  out = [f'# CoLT on real {ds} data', '',
         f'Generated by `{command}` on {datetime.date.today().isoformat()} '
         f'(`experiments/reproduction.py`, `experiments/results_report.py`); its last invocation took '
         f'{payload["seconds"] / 60:.0f} minutes on this machine (an invocation reuses the rows '
         'and trainings that earlier ones finished). ' + _compute_text(payload.get('compute'))
         + 'Raw numbers, per-topic scores and every configuration: '
         f'`{rdir}/results.json`; run files: `{rdir}/runs/`.', '',
         '**Features.** f is all-MiniLM-L6-v2 over text (`--encoder minilm`): each photo is '
         'its Flickr metadata text (title, tags, description without HTML), each query its '
         'topic title, each category its name. No photo pixels are available here and no '
         'CLIP weights can be downloaded, so these tables measure the diversification '
         'machinery (SCL, TTC, post-processing) on real queries, photos and ground truth, '
         'not CLIP; they are not comparable with the paper\'s numbers. '
         f'Store: {feats.get("encoder")}, dim {feats.get("dim")}.', '',
         f'**Splits.** Trained and tuned on dev ({payload["topics"]["dev"]} topics), scored '
         f'on test ({payload["topics"]["test"]} topics), official metrics '
         '(`colt_jax/metrics.py`, which reproduces the official scorer). Protocols: `pool` '
         '(official: rank the topic\'s own photos) and `global` (the paper\'s: rank the N '
         'photos of the whole test collection most similar to the query).', '', F1_NOTE, '']
  colt_names = [v for v in variants if variants[v]['table'] == 'main']
  main_names = list(TABLE_BASELINES) + colt_names
  for protocol in protocols:
    agg = aggregate(rows, protocol)
    labels = dict(BASELINE_LABELS, **{n: _label(n, agg) for n in colt_names})
    out += [f'## Table 2: every method, {ds} test, {protocol} protocol', '',
            table(agg, main_names, labels, TABLE_COLUMNS, headers=HEADERS), '']
    if protocol == 'global':
      out += ['Flickr order exists per topic only, so its row is the pool protocol\'s.', '']
    if protocol == protocols[0]:
      out += [PAIRED_NOTE, '']
    out += [f'CoLT ({protocol}), paired per topic:'] + _comparison(
        rows, 'colt', TABLE_BASELINES, protocol) + best_baseline_line(
            rows, 'colt', protocol) + ['']
  short = short_list_lines(rows)
  if short:
    out += ['Rows whose ranked lists are shorter than 20 (Eq. 6 without filling returns X '
            'photos per predicted category and nothing else; P@20 and CR@20 count the empty '
            'places as misses):'] + short + ['']
  agg_by = {p: aggregate(rows, p) for p in protocols}
  sections = [('ablation', 'Table 3: ablations',
               ['topk', 'colt', 'without SCL', 'umons', 'SCL + DBSCAN', 'SCL + top-k',
                'without DA', 'global labels', 'all names', 'without fill',
                'argmax labels']),
              ('pairs', 'Table 4: pairs of the SCL loss (Eq. 2)',
               ['colt', 'without pair (2)', 'without pair (4)']),
              ('bank', 'The prototype bank\'s alpha (Eq. 3): as written vs. as momentum',
               ['colt', 'alpha=0.99']),
              ('X', 'Table 5: images per category X (Eq. 6)', ['colt', 'X=2', 'X=3']),
              ('L', 'Table 6: encoder layers L', ['colt', 'L=6', 'L=8', 'L=10']),
              ('N', 'Table 7: candidate images N', ['N=150', 'colt', 'N=250']),
              ('views', 'Feature settings of f (beyond the paper): text, + visual descriptors, '
               '+ metadata; the baselines on the same features', view_rows(variants)),
              ('heads', 'colt-pairs (beyond the paper): phi predicts relevance and '
               'same-cluster pairs; lists by expected coverage (w chosen on training topics)',
               ['topk', 'colt', 'gbt-pairs', 'colt-pairs', 'colt-pairs no-relevance-head',
                'colt-pairs no-pair-head', 'colt-pairs no-class-head', 'colt-pairs cluster',
                'colt-pairs feature tokens', 'colt-pairs text-only tokens', 'colt-pairs without descriptors',
                'colt-pairs without metadata'])]
  base_scl, base_ttc = payload['base_configs']['colt']
  rename = {'colt': 'SCL + TTC (colt)', 'topk': 'without SCL & TTC (top-k on f)',
            'umons': 'UMONS'}
  for key, title, names in sections:
    if not any(n in variants and variants[n]['table'] == key for n in names):
      continue
    cols = [f'{c} ({p})' for p in protocols for c in TABLE_SHORT_COLUMNS]
    headers = {f'{c} ({p})': f'{HEADERS.get(c, c)} ({p})' for p in protocols
               for c in TABLE_SHORT_COLUMNS}
    merged = {}
    for p in protocols:
      for n, v in agg_by[p].items():
        merged.setdefault(n, {}).update({f'{c} ({p})': v[c] for c in TABLE_SHORT_COLUMNS
                                         if c in v})
    labels = {n: rename.get(n, n) for n in names}
    if key == 'X':
      labels['colt'] = 'X=1 (colt)'
    if key == 'L':
      labels['colt'] = f'L={base_ttc["num_layers"]} (colt)'
    if key == 'N':
      labels['colt'] = f'N={base_ttc["num_images"]} (colt)'
    if key == 'bank':
      labels['colt'] = f'alpha={base_scl["alpha"]} (colt)'
    out += [f'## {title}', '', table(merged, names, labels, cols, bold_best=False,
                                     headers=headers), '']
    for p in protocols:
      lines = _comparison(rows, 'colt', [n for n in names if n != 'colt'], p,
                          {n: f'{labels[n]} ({p})' for n in names})
      if lines:
        out += [f'`colt` paired per topic with each row ({p}):'] + lines + ['']
  abl = payload['config'].get('ablation_protocols') or protocols
  n_abl = payload['config'].get('ablation_seeds', len(payload['config']['seeds']))
  seeds_text = ('every seed, like `colt` (cells: mean ± std over seeds)'
                if n_abl >= len(payload['config']['seeds']) else
                f'the first {n_abl} of the seeds {payload["config"]["seeds"]} (to fit the CPU '
                'budget; `colt`, `colt-paper` and `colt-pairs` run every seed)')
  out += ['Each ablation changes one thing of its row\'s configuration (`colt`, or '
          '`colt-pairs` for the colt-pairs rows, which take the w chosen for `colt-pairs`) '
          f'and is trained with {seeds_text}; X only changes the '
          'post-processing, so its rows reuse `colt`\'s models. SCL + DBSCAN tunes '
          'DBSCAN\'s parameters on dev\'s re-encoded features with the UMONS grid. phi is '
          'trained under the protocol it is scored on. Ablations are scored under the '
          f'{" and ".join(abl)} protocol{"s" if len(abl) > 1 else ""} ("-": not run, to fit '
          'the CPU budget).', '']
  if payload.get('cv'):
    cv = payload['cv']
    merged = cv['merged']
    k = len(cv['folds'])
    n_topics = sum(len(f['test_topics']) for f in cv['folds'])
    out += [f'## {k}-fold cross-validation over all {n_topics} topics', '',
            f'Topics of dev and test together, cut into {k} folds (seeded). Per fold the '
            'baselines are tuned (grid search) and CoLT (`colt`, every seed) is '
            'trained on the other folds\' topics, with its settings chosen by an inner k-fold '
            'over those topics alone (table below); every topic is scored once, by the fold '
            'that held it out. ' + _cv_baseline_text(payload) + ' Means over topics (CoLT: '
            'mean ± std over seeds); the last column is the spread (std) over folds of the '
            'per-fold F1@20.', '']
    out += fold_choice_lines(cv['folds'])
    cv_labels = {b: label.replace('tuned on dev', 'tuned on the training folds')
                 for b, label in BASELINE_LABELS.items()}
    for protocol in [p for p in protocols if p in payload['config'].get('cv_protocols',
                                                                        protocols)]:
      agg = aggregate(merged, protocol)
      fold_f1 = {}
      for name, row in merged.items():
        method, _, prot = parse_row_name(name)
        if prot == protocol or (method == 'flickr' and protocol == 'global'):
          fold_f1.setdefault(method, []).append(row['fold_F1@20'])
      for method, per_seed in fold_f1.items():  # spread over folds of the seed-mean F1@20
        agg[method]['fold std F1@20'] = (float(np.std(np.mean(per_seed, axis=0))), 0.0, 1)
      cols = list(TABLE_COLUMNS) + ['fold std F1@20']
      cv_names = list(TABLE_BASELINES) + ['colt']
      cv_names += [n for n in ('colt-pairs',) if n in agg]  # variants.CV_VARIANTS
      out += [f'### {protocol} protocol', '',
              table(agg, cv_names, cv_labels, cols, bold_best=False, headers=HEADERS), '']
      out += fold_baseline_lines(cv['folds'], protocol)
      for method in ['colt'] + [n for n in ('colt-pairs',) if n in agg]:
        out += [f'`{method}`, paired per topic:'] + _comparison(
            merged, method, TABLE_BASELINES, protocol, cv_labels) + best_baseline_line(
                merged, method, protocol, cv['folds']) + ['']
  out += g_effect_lines(rows, payload.get('cv'))
  if topic_stats:
    out += ['## Per-topic analysis', '',
            'Where `colt` gains and loses against the best tuned baseline, from the per-topic '
            'scores in results.json and each topic\'s ground truth (pool size, share of '
            'relevant photos, clusters).', '', '### dev -> test', '']
    out += per_topic_analysis(rows, topic_stats, 'pool')
    if payload.get('cv'):
      out += ['### cross-validation', '']
      out += per_topic_analysis(payload['cv']['merged'], topic_stats, 'pool',
                                folds=payload['cv']['folds'])
  out += ['## How every choice was made', '']
  out += _config_lines(payload)
  out += ['- `colt-paper` takes the paper\'s hyper-parameters (Sec. 4.3: lr 1e-5 and beta '
          '0.02 for g, lr 1e-4 and L=8 for phi, no query_relative) and only the width, heads '
          'and number of steps of `colt` (a paper-size phi, d=384, costs ~600 GFLOP a step: '
          'too slow for this 2-core CPU).',
          '- The `colt` values of phi\'s lr, L, width and query_relative are the synthetic '
          'configuration\'s (settled before any real data was read), with a 64-d projection '
          'of the 384-d MiniLM features. g\'s beta and lr, phi\'s number of steps, its label '
          'scheme and its relevance threshold were chosen on dev hold-outs (below). Nothing '
          'was tuned on test.']
  thresholds = payload.get('irrelevant_thresholds') or {}
  if thresholds:
    out += ['- phi\'s relevance threshold (a photo is "irrelevant" only when phi gives that '
            'class more than this probability; 0 = the argmax of Eq. 4), per protocol: ' +
            ', '.join(f'{p} {t}' for p, t in thresholds.items()) +
            ' (rows "argmax labels" and `colt-paper` use 0).']
  steps = payload.get('ttc_steps') or {}
  if steps:
    out += ['- phi\'s number of steps (of `colt` and `colt-paper`, and of every ablation that '
            'does not set its own), per protocol, from the dev choice (the flagfile\'s when '
            'none was made): ' + ', '.join(f'{p} {n}' for p, n in steps.items()) + '.']
  for choice in choose_steps or ():
    out += choice_lines(choice, payload['topics']['dev'])
  out += ['- MMR\'s diversity and UMONS\'s threshold and eps: grid search on dev (F1@20, '
          'same protocol; grids in `colt_jax/evaluation.py`); the chosen values are in '
          'results.json (`chosen`), with the chosen setting\'s dev F1@20 (`train_F1@20`). In '
          'cross-validation, on the training folds, over every feature setting `colt` may '
          'choose there (results.json: each fold\'s `baselines`).',
          '- The best tuned baseline a comparison names: chosen by the baselines\' '
          'training-topic F1@20 (dev; in cross-validation each fold\'s training topics), '
          'never by test scores; a results.json without those scores says so ("' +
          TEST_CHOICE_NOTE + '").', '']
  if payload.get('previous'):
    out += ['## What changed since the previous results', '']
    out += change_lines(payload, payload['previous'])
  if analysis:
    out += ['## Where CoLT wins and where it does not', '', analysis.strip(), '']
  out += ['## Run files', '',
          f'`{rdir}/runs/pool/test-*.txt`: every row under the official protocol, '
          'written and checked by `colt_jax.runfile` (the official scorer\'s rules; the '
          'evaluator reproduces its reference numbers). '
          f'`{rdir}/runs/cv/{{dev,test}}-*.txt`: the cross-validated rows, each topic from the '
          'fold that held it out, one file per official split. Global-protocol run files name '
          'photos of other topics, which the 2013 scorer refuses by rule, so they stay in '
          f'`work/reproduce/{ds}/runs/global/` and their numbers come from '
          '`colt_jax.metrics` alone.', '']
  return '\n'.join(out)


def analysis_file(results_dir: str) -> str:
  """The hand-written analysis of a results folder: a sibling file `<results_dir>-analysis.md`
  (not inside the folder, which reproduce replaces as a whole)."""
  return os.path.normpath(results_dir) + '-analysis.md'


def write_markdown(payload: Mapping[str, Any], path: str,
                   command: str = 'python experiments/reproduce.py --dataset div400',
                   analysis_path: str = '', results_dir: str = '',
                   topic_stats: Optional[Mapping] = None) -> None:
  """Renders the report and writes it atomically; the dev choices' evidence comes from the
  payload (`choices`, read from experiments/configs/evidence/ by reproduce), and an analysis text
  (hand-written, no numbers) is included when it exists beside the results."""
  results = results_dir or payload.get('results_dir') or os.path.join(
      'docs', 'results', payload['dataset'])
  choose = payload.get('choices') or []
  analysis = ''
  apath = analysis_path or analysis_file(results)
  if os.path.isfile(apath):
    with open(apath) as f:
      analysis = f.read()
  outputs.write_owned_text(path, render(payload, command, choose, analysis, topic_stats),
                           'the report', flag='--doc')
