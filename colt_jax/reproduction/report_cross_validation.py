"""The report's k-fold cross-validation section (`section_lines`), in markdown lines from the
payload of `pipeline.run` (results.json): its tables, each fold's choices for `colt` and
for the tuned baselines, the colt-pairs rows' choices against each fold's best tuned baseline,
whether rows sharing a trained phi read the same weights, the target a learned row is judged
by (`target_lines`), and colt-pairs' cross-validated ablations.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import views as views_lib
from colt_jax.evaluation import significance
from colt_jax.reproduction import report_sections as sections_lib
from colt_jax.reproduction import report_tables as tables


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
      params = sections_lib.params_text(b.get('chosen') or {}) or 'no parameters'
      cells.append(f'{setting}{params} ({b["train_F1@20"]:.4f})')
    best = max(known, key=lambda m: known[m]['train_F1@20']) if known else '-'
    lines.append(f'| {fold["fold"]} | ' + ' | '.join(cells) + f' | `{best}` |')
  return lines + ['']



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


def _cv_ablation_lines(payload: Mapping[str, Any], agg: Mapping, merged: Mapping,
                       protocol: str, cols: Sequence[str]) -> list:
  """The cross-validated ablations of colt-pairs (variants.CV_ABLATIONS): their table beside
  colt-pairs and colt-pairs paired per topic with each."""
  ablations = [n for n in tables.CV_ABLATION_ROWS if n in agg]
  if not ablations or 'colt-pairs' not in agg:
    return []
  config = payload['config']
  seeds = list(config.get('seeds', []))
  n = min(config.get('cv_ablation_seeds') or config.get('ablation_seeds', len(seeds)),
          len(seeds))
  seeds_text = ('every seed, like `colt-pairs`' if n >= len(seeds) else
                f'the first {n} of the seeds {seeds} (to fit the CPU budget; `colt-pairs`: '
                'every seed, its per-topic scores averaged over them in the paired lines)')
  return [f'#### colt-pairs\' ablations ({protocol} protocol)', '',
          'Each removes one head of `colt-pairs` or (text-only tokens) its descriptor and '
          'metadata parts, and takes the w and checkpoint its fold chose for `colt-pairs` on '
          f'the training topics; trained with {seeds_text}. These rows come from '
          '`reproduce.py --cv_ablations`; colt-pairs\' other ablations are scored dev -> test '
          'only, to fit the CPU budget.',
          '', tables.table(agg, ['colt-pairs'] + ablations, {}, cols, bold_best=False,
                           headers=tables.HEADERS), '',
          f'`colt-pairs` paired per topic with each of its ablations ({protocol}):'] + (
              tables.comparison_lines(merged, 'colt-pairs', ablations, protocol)) + ['']


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
  methods = sorted({tables.parse_row_name(n)[0] for f in folds
                    for n, b in (f.get('baselines') or {}).items() if 'features' in b},
                   key=lambda m: (tables.TABLE_BASELINES.index(m) if m in tables.TABLE_BASELINES
                                  else len(tables.TABLE_BASELINES), m))
  return (f'{", ".join(f"`{m}`" for m in methods)} are tuned on every feature setting `colt` '
          f'may choose there ({", ".join(settings)}): each fold chooses the setting and its '
          'parameters together by the F1@20 on its training topics (table below the '
          'results); the other baselines use text features.')


def section_lines(payload: Mapping[str, Any], protocols: Sequence[str],
                  variants: Mapping[str, Mapping[str, Any]],
                  relevance: Optional[Mapping] = None) -> list:
  """The k-fold cross-validation section of the report (results.json `cv`), per protocol of
  `protocols` that it scored: its table, each fold's choices, the paired comparisons with
  the baselines, the target of each learned row (`variants`: the payload's rows by name;
  `relevance`: `experiments/diagnose.py --what relevance`'s record, for the notes of rows
  with a relevance model) and colt-pairs' ablations. [] without a cross-validation."""
  if not payload.get('cv'):
    return []
  out = []
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
  cv_labels = {b: label.replace('tuned on dev', 'tuned on the training folds').replace(
      'fitted on dev', 'fitted on the training folds')
               for b, label in tables.BASELINE_LABELS.items()}
  for protocol in [p for p in protocols if p in payload['config'].get('cv_protocols',
                                                                      protocols)]:
    agg = tables.aggregate(merged, protocol)
    fold_f1 = {}
    for name, row in merged.items():
      method, _, prot = tables.parse_row_name(name)
      if prot == protocol or (method == 'flickr' and protocol == 'global'):
        fold_f1.setdefault(method, []).append(row['fold_F1@20'])
    for method, per_seed in fold_f1.items():  # spread over folds of the seed-mean F1@20
      agg[method]['fold std F1@20'] = (float(np.std(np.mean(per_seed, axis=0))), 0.0, 1)
    cols = list(tables.TABLE_COLUMNS) + ['fold std F1@20']
    cv_names = list(tables.TABLE_BASELINES) + ['colt']
    learned = [n for n in tables.CV_ROWS if n in agg]
    cv_names += learned
    out += [f'### {protocol} protocol', '',
            tables.table(agg, cv_names, cv_labels, cols, bold_best=False,
                         headers=tables.HEADERS), '']
    out += fold_baseline_lines(cv['folds'], protocol)
    for method in ['colt'] + learned:
      out += [f'`{method}`, paired per topic:'] + tables.comparison_lines(
          merged, method, tables.TABLE_BASELINES, protocol, cv_labels) + (
              tables.best_baseline_line(merged, method, protocol, cv['folds'])) + ['']
    out += shared_training_lines(cv['folds'])
    for method in learned:
      out += pairs_choice_lines(merged, cv['folds'], protocol, method)
      target = target_lines(merged, protocol, method, cv['folds'], cv_labels)
      if target:
        out += [f'#### The target: `{method}` against every baseline ({protocol} protocol)',
                '', 'Each baseline as its fold tuned it (feature setting and parameters '
                'chosen on the fold\'s training topics); paired per topic, seeds averaged per '
                'topic; "better" only when the 95% interval excludes 0.', ''] + target
        if variants.get(method, {}).get('relevance_mixes'):
          from colt_jax.reproduction.diagnostics import relevance_models
          out += relevance_models.target_note_lines(relevance, method)
    out += _cv_ablation_lines(payload, agg, merged, protocol, cols)
  return out
