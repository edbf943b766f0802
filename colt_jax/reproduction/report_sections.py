"""The report's analysis sections, each a list of markdown lines from the payload of
`reproduction.run` (results.json): per-topic analysis against the best tuned baseline, short
lists, what changed since a previous results.json, each cross-validation fold's choices (for
`colt` and the tuned baselines), the dev hold-out searches, g's effect size, and the rows of the
feature-settings table.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax.evaluation import significance
from colt_jax.data import views as views_lib
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
    known = {tables.parse_row_name(n)[0]: b for n, b in (fold.get('baselines') or {}).items()
             if tables.parse_row_name(n)[2] == protocol
             and tables.is_baseline(tables.parse_row_name(n)[0])}
    per_fold.append((fold, known))
  methods = sorted({m for _, k in per_fold for m in k},
                   key=lambda m: (tables.TABLE_BASELINES.index(m) if m in tables.TABLE_BASELINES
                                  else len(tables.TABLE_BASELINES), m))
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
      out.append(f'| {fold} | {_params_text(score["setting"])} | {score["F1@20"]:.4f} | '
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


# The target a learned CoLT row is judged by (docs/DESIGN.md, "colt-pairs"): better than every
# tuned baseline (interval of the paired difference above 0, both readings of F1@20), P@20 no
# more than TARGET_P20_SLACK below top-k's, and beyond that the paper's margin over the best
# tuned baseline.
TARGET_P20_SLACK = 0.03
TARGET_MARGIN = 0.05


def target_lines(rows: Mapping[str, Mapping[str, Any]], protocol: str,
                 method: str = 'colt-pairs',
                 folds: Optional[Sequence[Mapping[str, Any]]] = None,
                 labels: Mapping[str, str] = tables.BASELINE_LABELS) -> list:
  """Markdown lines: whether `method` meets the target against every tuned baseline of `rows`
  (in cross-validation the merged rows, each baseline on the feature setting and parameters
  its fold chose on training topics): per baseline the paired F1@20 difference in both
  readings; P@20 against top-k; the margin over the best tuned baseline (`best_baseline`,
  chosen on training topics); and the verdict, naming what fails. Empty when `method` or
  top-k is missing."""
  agg = tables.aggregate(rows, protocol)
  baselines = [b for b in tables.BASELINE_METHODS if b in agg]
  if method not in agg or 'topk' not in baselines:
    return []
  out = ['| baseline | F1@20 (official): difference [95%], W/T/L | | '
         'F1@20 (paper): difference [95%] | |', '|---|---|---|---|---|']
  failed = []
  for b in baselines:
    official = significance.paired_difference(tables.per_topic(rows, method, protocol),
                                              tables.per_topic(rows, b, protocol))
    paper = tables.paper_difference(rows, method, b, protocol)
    out.append(f'| {labels.get(b, b)} | {official.text()} | '
               f'{official.verdict} | {tables.interval_text(paper)} | {paper.verdict} |')
    if official.verdict != 'better' or paper.verdict != 'better':
      failed.append(f'`{b}`')
  p20 = agg[method]['P@20'][0] - agg['topk']['P@20'][0]
  p20_met = p20 >= -TARGET_P20_SLACK
  out += ['', f'- P@20: `{method}` {agg[method]["P@20"][0]:.4f}, top-k '
          f'{agg["topk"]["P@20"][0]:.4f}, difference {p20:+.4f} (target: at least '
          f'-{TARGET_P20_SLACK}): **{"met" if p20_met else "not met"}**']
  choice = tables.best_baseline(rows, protocol, folds)
  if choice is not None:
    margin = significance.paired_difference(
        tables.per_topic(choice['rows'], method, protocol),
        tables.per_topic(choice['rows'], choice['name'], protocol))
    out.append(f'- Margin over the best tuned baseline ({choice["label"]}, {choice["how"]}): '
               f'F1@20 (official) {margin.text()} (the paper\'s margin: +{TARGET_MARGIN}): '
               f'**{"reached" if margin.mean >= TARGET_MARGIN else "not reached"}**')
  verdict = ('**Target met**: better than every baseline in both readings, P@20 within '
             f'{TARGET_P20_SLACK} of top-k.' if not failed and p20_met else
             '**Target not met**: ' + '; '.join(
                 ([f'not better than {", ".join(failed)} in both readings'] if failed else []) +
                 ([f'P@20 more than {TARGET_P20_SLACK} below top-k'] if not p20_met else [])) +
             '.')
  return out + ['', verdict, '']


def rule_text(chosen: Mapping[str, Any]) -> str:
  """'coverage, w 0.25', 'clusters, threshold 0.3, X 1' or 'dpp, theta 0.5' (', b 0.7'
  when phi's pair probabilities are blended with the feature cosine; ', a 0.5' when a
  relevance model has that share of r): a colt-pairs row's chosen rule."""
  blend = chosen.get('pair_blend', 1.0)
  tail = f', b {blend}' if blend != 1.0 else ''
  if 'relevance_mix' in chosen:  # a row with a relevance model beside phi (a = 0 too)
    tail += f', a {chosen["relevance_mix"]}'
  if chosen.get('selection') == 'cluster':
    return (f'clusters, threshold {chosen["cluster_threshold"]}, X '
            f'{chosen.get("per_category", 1)}{tail}')
  if chosen.get('selection') == 'dpp':
    return f'dpp, theta {chosen["selection_theta"]}{tail}'
  return f'coverage, w {chosen["coverage_weight"]}{tail}'


def shared_training_lines(folds: Sequence[Mapping[str, Any]]) -> list:
  """One line: whether the rows that share a trained phi (colt-pairs and the rows on its
  trainings) read the same weights in every fold (`cross_validation.shared_trainings`)."""
  records = [f.get('trainings') for f in folds if f.get('trainings')]
  if not records:
    return []
  rows, shared = sum(r['rows'] for r in records), sum(r['shared'] for r in records)
  differ = [w for r in records for w in r['differ']]
  verdict = ('each read with the same weights by every row' if not differ else
             f'**{len(differ)} read with different weights**: {", ".join(differ)}')
  return [f'Trained phi read by more than one row (the rows on colt-pairs\' trainings): '
          f'{shared} over the folds, checked by the digests of their weights that {rows} rows '
          f'recorded; {verdict}.', '']


def pairs_choice_lines(merged: Mapping[str, Mapping[str, Any]],
                       folds: Sequence[Mapping[str, Any]], protocol: str,
                       method: str = 'colt-pairs') -> list:
  """Markdown lines: per cross-validation fold, `method`'s choice on its training topics (w,
  phi's checkpoint, the best inner-fold F1@20) beside the fold's best tuned baseline (its
  F1@20 on the training topics it was tuned on), then both on the held-out topics (the
  fold's F1@20; `method`: mean over seeds). Empty for folds without the record (older
  results.json)."""
  records = [(i, f, ((f.get('choices') or {}).get(protocol) or {}).get('coverage', {})
              .get(method)) for i, f in enumerate(folds)]
  if not any(r for _, _, r in records):
    return []
  seeds = [n for n in merged if tables.parse_row_name(n)[0] == method
           and tables.parse_row_name(n)[2] == protocol]
  out = [f'`{method}`\'s choice on each fold\'s training topics against the fold\'s best '
         'tuned baseline. The inner F1@20 is scored on inner held-out parts (phi trained '
         'without them); a baseline\'s training F1@20 is scored on the topics it was tuned on '
         '(a handful of parameters; optimistic by the tuning). Then both on the fold\'s '
         f'held-out topics ({protocol} protocol):', '',
         '| fold | rule | phi step | inner F1@20 | best baseline (training F1@20) | held-out '
         f'F1@20 `{method}` | held-out F1@20 baseline |', '|---|---|---|---|---|---|---|']
  for i, fold, record in records:
    if not record:
      continue
    known = {n: r for n, r in (fold.get('baselines') or {}).items()
             if n.endswith(f'({protocol})') and tables.is_baseline(tables.parse_row_name(n)[0])}
    held = np.mean([merged[n]['fold_F1@20'][i] for n in seeds]) if seeds else float('nan')
    if known:
      best = max(known, key=lambda n: known[n]['train_F1@20'])
      base = (f'`{tables.parse_row_name(best)[0]}` ({known[best]["train_F1@20"]:.4f})',
              f'{merged[best]["fold_F1@20"][i]:.4f}' if best in merged else '-')
    else:
      base = ('-', '-')
    out.append(f'| {fold["fold"]} | {rule_text(record["chosen"])} | '
               f'{record["chosen"]["ttc_step"]} | {record["F1@20"]:.4f} | {base[0]} | '
               f'{held:.4f} | {base[1]} |')
  return out + ['']
