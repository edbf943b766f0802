"""The report's analysis sections, each a list of markdown lines from the payload of
`pipeline.run` (results.json): per-topic analysis against the best tuned baseline, short
lists, what changed since a previous results.json, the dev hold-out searches, g's effect size,
and the rows of the feature-settings table. The cross-validation's sections:
`report_cross_validation.py`.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import views as views_lib
from colt_jax.evaluation import significance
from colt_jax.reproduction import report_tables as tables

TOPIC_PROPERTIES = (('relevant_fraction', 'share of relevant photos in the pool'),
                    ('clusters', 'ground-truth clusters'), ('photos', 'photos in the pool'))


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
  agg = tables.aggregate(rows, protocol)
  choice = tables.best_baseline(rows, protocol, folds)
  if method not in agg or choice is None or not topic_stats:
    return []
  best, label, rows = choice['name'], choice['label'], choice['rows']
  diffs = {m: significance.paired_difference(tables.per_topic(rows, method, protocol, m),
                                             tables.per_topic(rows, best, protocol, m))
           for m in ('F1@20', 'P@20', 'CR@20')}
  paper = tables.paper_difference(rows, method, best, protocol)
  out = [f'`{method}` against the best tuned baseline here (on any feature setting), {label}, '
         f'{choice["how"]}; topic by topic ({protocol} protocol; seeds averaged per topic):',
         '']
  out += [f'- F1@20 (official): {diffs["F1@20"].text()}: **{diffs["F1@20"].verdict}**',
          f'- F1@20 (paper): {tables.interval_text(paper)}: **{paper.verdict}**']
  out += [f'- {m}: {diffs[m].text()}: **{diffs[m].verdict}**' for m in ('P@20', 'CR@20')]
  a, b = tables.per_topic(rows, method, protocol), tables.per_topic(rows, best, protocol)
  topics = sorted(set(a) & set(b) & set(topic_stats), key=str)
  d = np.array([a[t] - b[t] for t in topics])
  out += [
      '', f'F1@20 difference by topic property (terciles over the {len(topics)} topics, '
      'two groups where ties merge two of them; rho: Spearman correlation of the property '
      'with the difference):', '',
      '| property | tercile (range) | topics | mean difference | W/T/L |', '|---|---|---|---|---|'
  ]
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
  colt_rows = [n for n in agg if not tables.is_baseline(n) and n != 'flickr']  # `rows` as given
  strongest = max(colt_rows, key=lambda n: agg[n]['F1@20'][0])
  line = tables.paired_line(rows, strongest, best, protocol, label)
  if line:
    out += ['', f'The strongest CoLT row here is `{strongest}` (F1@20 '
            f'{agg[strongest]["F1@20"][0]:.4f}, {agg[strongest]["F1@20"][2]} seed(s)); paired '
            f'with the same baseline:', line]
    noise = seed_noise_line(rows, strongest, best, protocol)
    if noise:
      out.append(noise)
  return out + ['']


def seed_noise_line(rows: Mapping[str, Mapping[str, Any]], method: str, baseline: str,
                    protocol: str) -> Optional[str]:
  """'- seeds: ...': how much of the per-topic F1@20 difference of `method` (its seeds
  averaged) with `baseline` is phi's retraining noise, and so how far more seeds could narrow
  its interval. A seed's noise variance s^2 is the topics' mean variance across the seeds;
  the S-seed mean carries s^2 / S of it, the rest of the difference's variance is the rows'
  own disagreement topic by topic, which no number of seeds removes (the interval's width
  scales with the square root of the variance left). None with fewer than 2 seeds."""
  seeds = {}
  for name, row in rows.items():
    m, seed, prot = tables.parse_row_name(name)
    if m == method and prot == protocol and seed is not None:
      seeds[seed] = {t: s['F1@20'] for t, s in row.get('per_topic', {}).items()}
  other = tables.per_topic(rows, baseline, protocol)
  topics = sorted(set(other).intersection(*seeds.values()), key=str) if seeds else []
  if len(seeds) < 2 or len(topics) < 3:
    return None
  x = np.array([[per[t] for t in topics] for per in seeds.values()])  # [seeds, topics]
  d = x.mean(0) - np.array([other[t] for t in topics])
  total = float(np.var(d, ddof=1))
  noise = float(np.mean(np.var(x, axis=0, ddof=1))) / len(seeds)
  if total <= 0:
    return None
  share = min(noise / total, 1.0)
  return (f'- seeds: retraining phi moves a topic\'s F1@20 by sd {np.sqrt(noise * len(seeds)):.4f} '
          f'(the spread of its {len(seeds)} seeds); in their mean that is {share:.0%} of the '
          f'variance of the per-topic difference (sd {np.sqrt(total):.4f}), so more seeds '
          f'could narrow the interval by {1 - np.sqrt(1 - share):.0%} at most; the rest, sd '
          f'{np.sqrt(max(total - noise, 0.0)):.4f}, is the two rows disagreeing topic by topic')


def short_list_lines(rows: Mapping[str, Mapping[str, Any]], k: int = 20) -> list:
  """One line per method/protocol whose lists hold fewer than k photos on average (from each
  row's `returned@20`, averaged over seeds): P@k and CR@k count the empty slots as misses."""
  groups = {}
  for name, row in rows.items():
    if 'returned@20' in row:
      method, _, protocol = tables.parse_row_name(name)
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
    protocols = sorted({tables.parse_row_name(n)[2] for n in rows})
    for protocol in protocols:
      out[part][protocol] = {
          m: dict({c: v[c][0] for c in CHANGE_COLUMNS if c in v}, seeds=v['F1@20'][2])
          for m, v in tables.aggregate(rows, protocol).items() if 'F1@20' in v}
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


def params_text(chosen: Mapping[str, Any]) -> str:
  """'k v, k v': the parameters of a chosen setting, sorted by name."""
  return ', '.join(f'{k} {v}' for k, v in sorted(chosen.items()))


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


def g_effect_lines(rows: Mapping[str, Mapping[str, Any]], cv: Optional[Mapping]) -> list:
  """g's effect size (Eq. 1) per row that trains g, and what the folds' inner choice of g saw."""
  effects = {}
  for name, row in rows.items():
    if row.get('g_effect'):
      method = tables.parse_row_name(name)[0]
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
      out.append(f'| {fold} | {params_text(score["setting"])} | {score["F1@20"]:.4f} | '
                 f'{score["g_effect"]["relative_change"]:.4f} | '
                 f'{score["g_effect"]["top_k_changed"]:.0%} |')
    out.append('')
  return out


def view_rows(variants: Mapping[str, Mapping[str, Any]]) -> list:
  """Rows of the feature-settings table: `colt`, then per setting its CoLT rows and the
  baselines scored on the same features ('<method> [<setting>]')."""
  from colt_jax.reproduction import variants as variants_lib
  names = ['colt', 'topk', 'mmr', 'umons', 'umons-dbscan']
  for name, v in variants.items():
    # (the rows without one descriptor each: their settings have no baselines; the heads table)
    if v.get('views') and name not in variants_lib.OPT_IN_VARIANTS:
      setting = views_lib.ViewSpec(**v['views']).name
      names += [name] + [f'{m} [{setting}]' for m in ('topk', 'mmr', 'umons', 'umons-dbscan')]
  return list(dict.fromkeys(names))
