"""The report's section "Without training: parameters that travel" and the model-free default.

From the `travel` records alone (the row cache): for each post-processing method and each
(source, target) pair of feature sets, the parameters tuned on the source's training topics of
each cross-validation fold (best mean F1@20 over the grid) applied to the target's held-out
topics, against those tuned on the target's own training topics; then the rule of the
model-free default (`model_free_rule`), applied per fold without the target's feature set,
against the rule on the target alone. Differences are paired per topic over every topic (each
scored by the fold that held it out), with 95% bootstrap intervals (`significance`), under the
paper's F1 (harmonic mean of mean P and mean CR) and the official one (mean per-topic F1).
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import folds as folds_lib
from colt_jax.evaluation import model_free
from colt_jax.evaluation import significance
from colt_jax.reproduction import model_free_rule as rule_lib
from colt_jax.reproduction import travel

TITLE = 'Without training: parameters that travel'
ANCHOR = 'without-training-parameters-that-travel'


def _best(grid: Sequence[tuple], topics: Sequence[int]) -> int:
  """Index of the setting with the best mean F1@20 over `topics` (ties: the first)."""
  means = [np.mean([s['F1@20'][t] for t in topics]) for _, s in grid]
  return int(np.flatnonzero(np.asarray(means) >= max(means) - 1e-12)[0])


def transfer(tables: Mapping, kfold: Sequence, method: str, source: str, target: str) -> tuple:
  """({metric: {topic: value}} of every topic, [per fold: setting]): `method` tuned on
  `source`'s training topics of each fold, scored on `target`'s held-out topics."""
  out = {k: {} for k in travel.METRICS}
  chosen = []
  for f, fold in enumerate(kfold):
    i = _best(tables[source][f][method], fold.train_topics)
    chosen.append(tables[source][f][method][i][0])
    scores = tables[target][f][method][i][1]
    for k in travel.METRICS:
      out[k].update({t: scores[k][t] for t in fold.test_topics})
  return out, chosen


def _f1_scores(tables: Mapping, fold: int, sets: Sequence[str]) -> rule_lib.Scores:
  return {e: {m: [(s, v['F1@20']) for s, v in tables[e][fold][m]] for m in rule_lib.METHODS}
          for e in sets}


def rule_transfer(tables: Mapping, kfold: Sequence, sets: Sequence[str], target: str,
                  inner_folds: int, seed: int) -> tuple:
  """RULE per fold on its training topics over `sets`, scored on `target`'s held-out topics:
  ({metric: {topic: value}}, [per fold: 'method setting'])."""
  out = {k: {} for k in travel.METRICS}
  chosen = []
  for f, fold in enumerate(kfold):
    choice = rule_lib.choose(_f1_scores(tables, f, sets), fold.train_topics, inner_folds, seed)
    grid = tables[target][f][choice.method]
    i = next(j for j, (s, _) in enumerate(grid) if s == choice.params[choice.method])
    chosen.append(_setting_text(choice.method, grid[i][0]))
    for k in travel.METRICS:
      out[k].update({t: grid[i][1][k][t] for t in fold.test_topics})
  return out, chosen


def shipped_choice(tables: Mapping, kfold: Sequence, inner_folds: int,
                   seed: int) -> rule_lib.Choice:
  """RULE on every topic over every feature set (each topic under its held-out fold's store):
  the default `experiments/choose_model_free.py` ships."""
  merged = travel.merged_scores(tables, kfold)
  topics = sorted(t for fold in kfold for t in fold.test_topics)
  return rule_lib.choose(merged, topics, inner_folds, seed)


def _setting_text(method: str, setting: Mapping) -> str:
  names = {field: name for name, (field, *_rest) in model_free.PARAMS.get(method, {}).items()}
  inner = ', '.join(f'{names.get(k, k)} {v:g}' for k, v in setting.items())
  return f'{method} ({inner})' if inner else method


def _folds_text(settings: Sequence[str]) -> str:
  counts = {}
  for s in settings:
    counts[s] = counts.get(s, 0) + 1
  return '; '.join(s if n == 1 else f'{s} x{n}' for s, n in counts.items())


def _paper_f1(m: Mapping) -> float:
  return float(significance.harmonic_mean(np.mean(list(m['P@20'].values())),
                                          np.mean(list(m['CR@20'].values()))))


def _cells(m: Mapping, ref: Optional[Mapping]) -> list:
  cells = [f'{_paper_f1(m):.4f}', f'{np.mean(list(m["F1@20"].values())):.4f}',
           f'{np.mean(list(m["P@20"].values())):.4f}', f'{np.mean(list(m["CR@20"].values())):.4f}']
  if ref is None:
    return cells + ['(reference)', '(reference)']
  paper = significance.paired_paper_f1(m['P@20'], m['CR@20'], ref['P@20'], ref['CR@20'])
  official = significance.paired_difference(m['F1@20'], ref['F1@20'])
  return cells + [f'{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}] {d.verdict}'
                  for d in (paper, official)]


HEADER = ('| {} | target | {} | F1@20 (paper) | F1@20 (official) | P@20 | CR@20 | '
          'Δ F1 paper [95%] | Δ F1 official [95%] |')


def section(saved_row: Callable, folds: int, fold_seed: int, inner_folds: int) -> list:
  """The report's lines of the section (none when a record is missing: run reproduce.py)."""
  rec = saved_row(travel.KIND, 'minilm')
  if rec is None:
    return []
  kfold = folds_lib.kfold(rec['topics'], folds, fold_seed)
  tables = travel.fold_tables(travel.saved_records(saved_row, folds, fold_seed), kfold)
  if tables is None:
    return []
  sets = travel.FEATURE_SETS
  out = [f'## {TITLE}', '',
         f'Each post-processing method tuned on one feature set and applied to another, '
         f'{folds}-fold cross-validation over all {len(rec["topics"])} topics (the folds of the '
         'cross-validation above), pool protocol: a method\'s parameters are the setting of '
         'its grid with the best mean F1@20 on the source feature set\'s training topics of '
         'the fold, scored on the target feature set\'s held-out topics; every topic is '
         'scored once. Δ: against the same method tuned on the target\'s own training topics, '
         'paired per topic, 95% bootstrap interval; a difference is called one only when the '
         'interval excludes 0. Post-processing is deterministic: no seeds. Feature sets: '
         + '; '.join(f'**{travel.LABELS[e]}**' for e in sets) + ' (`colt_jax/reproduction/'
         'travel.py`: TF-IDF\'s vocabulary and IDF and the descriptors\' statistics are fitted '
         'per fold on the photos of its training topics alone, so nothing of a held-out topic, '
         'its feature statistics included, reaches a choice). Grids: '
         + '; '.join(f'{m} {len(g)} settings' for m, g in travel.GRIDS.items() if m != 'topk')
         + ' (MethodParams\' 200 candidates, UMONS\'s min_samples 2, untuned).', '',
         HEADER.format('method', 'tuned on (settings of the 5 folds)'),
         '|---|---|---|---|---|---|---|---|---|']
  for method in ('topk', 'mmr', 'msd', 'dpp', 'umons'):
    for target in sets:
      own, _ = transfer(tables, kfold, method, target, target)
      for source in ([target] if method == 'topk' else sets):
        scores, chosen = transfer(tables, kfold, method, source, target)
        where = travel.LABELS[source] + ('' if method == 'topk' else
                                         f' ({_folds_text([_setting_text(method, c) for c in chosen])})')
        out.append('| ' + ' | '.join([method, travel.LABELS[target], where] + _cells(
            scores, None if source == target else own)) + ' |')
  return out + [''] + default_lines(tables, kfold, inner_folds, fold_seed)


def default_lines(tables: Mapping, kfold: Sequence, inner_folds: int, seed: int) -> list:
  """Which default was chosen, by which rule, and what it costs a store of an encoder never
  tuned on."""
  sets = travel.FEATURE_SETS
  choice = shipped_choice(tables, kfold, inner_folds, seed)
  shipped = model_free.defaults()
  ours = {m: {name: choice.params[m][field]
              for name, (field, *_rest) in model_free.PARAMS[m].items()
              if field in choice.params[m]} for m in rule_lib.METHODS if m != 'topk'}
  same = shipped['method'] == choice.method and all(
      all(abs(shipped['params'].get(m, {}).get(k, np.nan) - v) < 1e-9 for k, v in p.items())
      for m, p in ours.items())
  out = ['### The model-free default: which, by which rule, what it costs', '',
         f'**The rule** (fixed before it was applied, `colt_jax/reproduction/model_free_rule.py`): '
         f'{rule_lib.RULE}. Applied by `python experiments/choose_model_free.py` to all '
         f'{sum(len(f.test_topics) for f in kfold)} topics over the three feature sets, with '
         f'{inner_folds} inner folds, it chooses '
         f'**{_setting_text(choice.method, choice.params[choice.method])}**; cross-validated '
         'mean F1@20 of each method under its travelling parameters: '
         + ', '.join(f'{m} {v:.4f}' for m, v in choice.cv_scores.items()) + '. Every method\'s '
         'parameters ship too (a user may pick any): '
         + '; '.join(_setting_text(m, choice.params[m]) for m in rule_lib.METHODS if m != 'topk')
         + '. ' + ('`colt_jax/evaluation/model_free.json` holds exactly this choice.' if same else
                   '**`colt_jax/evaluation/model_free.json` differs from this choice: run '
                   '`python experiments/choose_model_free.py`.**'), '',
         '**What it costs.** The rule applied inside each fold to its training topics only, '
         'without the target\'s feature set (a store whose encoder was never tuned on), '
         'against the rule applied to the target\'s own training topics alone (what tuning on '
         'the target gives); the rule with every feature set, the target\'s included, for '
         'comparison. Δ: against the rule on the target alone.', '',
         HEADER.format('default', 'rule applied over (choices of the 5 folds)'),
         '|---|---|---|---|---|---|---|---|---|']
  costs = []
  for target in sets:
    own, own_chosen = rule_transfer(tables, kfold, [target], target, inner_folds, seed)
    others = [e for e in sets if e != target]
    left_out, _ = rule_transfer(tables, kfold, others, target, inner_folds, seed)
    # The best method tuned on the target's training topics, the method picked in hindsight
    # (by the held-out scores): a reference no rule can reach without those scores.
    tuned = {m: transfer(tables, kfold, m, target, target)[0] for m in rule_lib.METHODS}
    best = max(rule_lib.METHODS, key=lambda m: _paper_f1(tuned[m]))
    costs.append((travel.LABELS[target], significance.paired_paper_f1(
        left_out['P@20'], left_out['CR@20'], own['P@20'], own['CR@20']), best,
        significance.paired_paper_f1(left_out['P@20'], left_out['CR@20'],
                                     tuned[best]['P@20'], tuned[best]['CR@20'])))
    for label, over in ((f'{" & ".join(travel.LABELS[e] for e in others)} (target left out)',
                         others), ('every feature set', list(sets)), ('the target alone',
                                                                       [target])):
      scores, chosen = ((own, own_chosen) if over == [target] else
                        rule_transfer(tables, kfold, over, target, inner_folds, seed))
      out.append('| ' + ' | '.join(['rule', travel.LABELS[target],
                                    f'{label} ({_folds_text(chosen)})'] + _cells(
          scores, None if over == [target] else own)) + ' |')
  return out + ['', 'In short: for a store of a feature set the rule never saw, its choice against '
                'the rule on that store\'s own judgments, and against the best method tuned '
                'on them (picked in hindsight), paper\'s F1@20, 95% interval: '
                + '; '.join(f'{name} {d.text()} ({d.verdict}), against {best} tuned on it '
                            f'{h.text()} ({h.verdict})' for name, d, best, h in costs) + '.', '']
