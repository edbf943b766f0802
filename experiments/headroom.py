"""How far could better heads take colt-pairs' list rule? Its lists rebuilt from phi's heads
with one or both replaced by the ground truth, per held-out topic of the cross-validation
(`experiments/diagnose_headroom.py` runs it; `reproduce.py --report_only` renders its table
into RESULTS.md).

For each fold, the `colt-pairs rule` row of seed 0 (its phi at the checkpoint its inner folds
chose, its selection rule and parameters) reads each held-out topic's pool as `rank` does
(`Retriever.pool_heads`: the first N photos by similarity, r_i and p_ij); its list is rebuilt
by the row's own rule (`retriever.select_from_heads`) from

* phi's r and p (the row itself: the check that this rebuilds the row's lists),
* the oracle p: p*_ij = 1 when photos i and j share a dGT cluster, else 0 (a photo without a
  cluster shares none), with phi's r, and phi's p mixed with it, (1 - a) p + a p*,
* the oracle r: r*_i = rGT (1 relevant, else 0), with phi's p, and phi's r mixed with it,
* both oracles,

and scored by the official scorer; each condition is paired per topic with phi's own lists.
An upper bound of what the rule can make of better heads, and the curve between: what pair
AUC would the lists need. It uses held-out ground truth by design and chooses nothing.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax import evaluation
from colt_jax import retriever as retriever_lib
from colt_jax import significance
from colt_jax.errors import InputError
from cross_validation import Reproduction
import head_quality
from variants import VARIANTS, ReproduceConfig

VARIANT = 'colt-pairs rule'
# (label, share of the oracle in r, share of the oracle in p): 0 = phi's head, 1 = the oracle.
CONDITIONS = (('phi', 0.0, 0.0),
              ('p mixed 10% oracle', 0.0, 0.1),
              ('p mixed 25% oracle', 0.0, 0.25),
              ('oracle p', 0.0, 1.0),
              ('r mixed 5% oracle', 0.05, 0.0),
              ('r mixed 10% oracle', 0.1, 0.0),
              ('r mixed 25% oracle', 0.25, 0.0),
              ('oracle r', 1.0, 0.0),
              ('oracle r and p', 1.0, 1.0))
METRICS = ('pair_auc', 'relevance_auc', 'P@20', 'CR@20', 'F1@20')


def headroom_path(dataset: str) -> str:
  """Where this diagnosis of `dataset` is kept (outside docs/results/<dataset>/, which
  reproduce.py replaces as a whole; the report reads it from here)."""
  return f'docs/results/{dataset}-headroom.json'


def oracle_heads(photo_ids: Sequence[str], relevance: Mapping[str, int],
                 clusters: Mapping[str, int]) -> tuple:
  """(r* [n], p* [n, n]) of the ground truth: r*_i = 1 for rGT 1 (else 0); p*_ij = 1 when i
  and j share a dGT cluster (p*_ii = 1 for a photo with one), else 0."""
  r = np.array([1.0 if relevance.get(pid) == 1 else 0.0 for pid in photo_ids], np.float32)
  cid = np.array([clusters.get(pid, -1) for pid in photo_ids], np.int64)
  p = ((cid[:, None] == cid[None, :]) & (cid[:, None] >= 0)).astype(np.float32)
  return r, p


def condition_heads(r: np.ndarray, p: np.ndarray, r_star: np.ndarray, p_star: np.ndarray,
                    condition: tuple) -> tuple:
  """The (r, p) a condition of CONDITIONS reads: each head mixed with its oracle,
  (1 - a) phi + a oracle."""
  _, r_share, p_share = condition
  return (1.0 - r_share) * r + r_share * r_star, (1.0 - p_share) * p + p_share * p_star


def listed(settings: retriever_lib.InferenceSettings, photo_ids: Sequence[str], r: np.ndarray,
           p: np.ndarray) -> list:
  """The photo ids of the row's rule's list from (r, p) over the pool's tokens, as
  `Retriever.rank` builds it."""
  valid = np.ones((1, len(photo_ids)), bool)
  picks, _ = retriever_lib.select_from_heads(r[None], p[None], valid, settings)
  return [photo_ids[i] for i in picks[0] if i >= 0]


def fold_scores(colt: retriever_lib.Retriever, held: tuple, held_viewed: tuple) -> dict:
  """topic -> {condition label: {metric: value}} over a fold's held-out topics."""
  split = held[0]
  runs = {c[0]: {} for c in CONDITIONS}
  heads = {}
  for topic, cands in head_quality.by_topic(*held_viewed).items():
    gt = split.ground_truth[topic]
    ids, r, p = colt.pool_heads(cands.query, cands.features, cands.photo_ids)
    r_star, p_star = oracle_heads(ids, gt.relevance, gt.clusters)
    for condition in CONDITIONS:
      rr, pp = condition_heads(r, p, r_star, p_star, condition)
      runs[condition[0]][topic] = [(pid, 0.0) for pid in listed(colt.settings, ids, rr, pp)]
      heads.setdefault(str(topic), {})[condition[0]] = {
          'pair_auc': head_quality.pair_auc(pp, ids, gt.clusters),
          'relevance_auc': head_quality.relevance_auc(rr, ids, gt.relevance)}
  for label, run in runs.items():
    for topic, m in evaluation.score(split, run).per_topic.items():
      heads[str(topic)][label].update({k: float(m[k]) for k in ('P@20', 'CR@20', 'F1@20')})
  return heads


def diagnose(cfg: ReproduceConfig, log: Callable = print, seed: int = 0) -> dict:
  """Every fold's held-out topics by `fold_scores` with that fold's row: {'variant', 'seed',
  'folds': [{'fold', 'tag', 'ttc_step', 'selection'}], 'of_folds', 'topics', 'row_check'}.
  `row_check`: the largest per-topic |F1@20| gap between phi's rebuilt lists and the row's
  saved scores (0 when the rebuilding is `rank`'s)."""
  variant = next(v for v in VARIANTS if v.name == VARIANT)
  rep = Reproduction(cfg, log)
  rep.load()
  name = f'{variant.name} (seed {seed}, pool)'
  out = {'variant': variant.name, 'seed': seed, 'folds': [], 'topics': {}, 'row_check': 0.0}
  for fold, tag, train, held in rep.cv_folds():
    row = rep.saved_row(tag, name)
    if row is None:
      log(f' fold {fold.index}: no row {rep.row_path(tag, name)}; left out')
      continue
    params = evaluation.MethodParams(**row['params'])
    _, held_viewed = rep.viewed(variant.view_spec, train, held)
    colt = evaluation.colt_retriever(params)
    log(f' fold {fold.index}: {len(fold.test_topics)} held-out topics, rule '
        f'{colt.settings.selection}')
    scores = fold_scores(colt, held, held_viewed)
    for topic, s in scores.items():
      saved = row['per_topic'].get(topic, {}).get('F1@20')
      if saved is not None:
        out['row_check'] = max(out['row_check'], abs(s['phi']['F1@20'] - float(saved)))
    out['topics'].update(scores)
    out['folds'].append({'fold': fold.index, 'tag': tag, 'ttc_step': params.ttc_step,
                         'selection': colt.settings.selection})
  if not out['folds']:
    raise InputError(f'{rep.rows_root}: no {name} rows of the cross-validation; run '
                     'experiments/reproduce.py first')
  out['of_folds'] = cfg.folds
  return out


def _mean(topics: Mapping, label: str, metric: str) -> Optional[float]:
  values = [t[label][metric] for t in topics.values() if t[label].get(metric) is not None]
  return float(np.mean(values)) if values else None


def summary_lines(result: Mapping) -> list:
  """Markdown: per condition, the mean AUCs, P@20, CR@20 and both F1@20 readings, and the
  paired differences from phi's own lists (official and paper F1@20)."""
  topics = result['topics']
  out = [f'Generated by `{result["command"]}` over {len(result["folds"])} of '
         f'{result["of_folds"]} folds ({len(topics)} held-out topics): the lists of '
         f'`{result["variant"]}` (seed {result["seed"]}, each fold\'s phi, rule and parameters) '
         'rebuilt from phi\'s heads with the relevance r, the pair probabilities p or both '
         'replaced by the ground truth (oracle: r* = rGT, p* = 1 for photos of one dGT '
         'cluster), or mixed with it ((1 - a) phi + a oracle). Rebuilt from phi\'s own heads, the lists score '
         f'as the row (largest per-topic F1@20 gap {result["row_check"]:.4f}). Held-out ground '
         'truth by design: a bound, nothing chosen by it. Paired per topic with phi\'s own lists '
         '(95% bootstrap interval).', '',
         '| heads | pair AUC | relevance AUC | P@20 | CR@20 | F1@20 (official) | F1@20 (paper) '
         '| official - phi | paper - phi |', '|---|---|---|---|---|---|---|---|---|']
  col = lambda label, m: {t: s[label][m] for t, s in topics.items()}  # noqa: E731
  for label, _, _ in CONDITIONS:
    cells = [_fmt(_mean(topics, label, m)) for m in METRICS]
    paper = significance.harmonic_mean(_mean(topics, label, 'P@20'),
                                       _mean(topics, label, 'CR@20'))
    cells.append(f'{float(paper):.4f}')
    if label == 'phi' or len(topics) < 2:
      cells += ['-', '-']
    else:
      cells.append(significance.paired_difference(col(label, 'F1@20'),
                                                  col('phi', 'F1@20')).text())
      cells.append(significance.paired_paper_f1(col(label, 'P@20'), col(label, 'CR@20'),
                                                col('phi', 'P@20'), col('phi', 'CR@20')).text())
    out.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return out + ['']


def _fmt(value: Optional[float]) -> str:
  return '-' if value is None else f'{value:.4f}'
