"""How far could better heads take colt-pairs' list rule? Its lists rebuilt from phi's heads
with one or both replaced by the ground truth, per held-out topic of the cross-validation
(`experiments/diagnose.py --what headroom` runs it; `reproduce.py --report_only` renders its table
into RESULTS.md).

For each fold, the `colt-pairs rule` row of seed 0 (its phi at the checkpoint its inner folds
chose, its selection rule and parameters) reads each held-out topic's pool as `rank` does
(`PairsRetriever.pool_heads`: the first N photos by similarity, r_i and p_ij); its list is rebuilt
by the row's own rule (`head_selection.select_from_heads`) from

* phi's r and p (the row itself: the check that this rebuilds the row's lists),
* the oracle p: p*_ij = 1 when photos i and j share a dGT cluster, else 0 (a photo without a
  cluster shares none), with phi's r, and phi's p mixed with it, (1 - a) p + a p*; and p*
  on the pairs of two photos with a cluster only (phi's p is P(same cluster | both
  relevant): on the others p* says "apart", which phi's p does not),
* the oracle r: r*_i = rGT (1 relevant, else 0), with phi's p, and phi's r mixed with it,
* both oracles,

and scored by the official scorer; each condition is paired per topic with phi's own lists.
An upper bound of what the rule can make of better heads, and the curve between: what pair
AUC would the lists need. It uses held-out ground truth by design and chooses nothing.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import significance
from colt_jax.inference import retriever as retriever_lib
from colt_jax.pairs import head_selection
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from colt_jax.reproduction.cross_validation import Reproduction
from colt_jax.reproduction.diagnostics import head_quality
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction import variants as variants_lib
from colt_jax.util.errors import InputError

VARIANT = 'colt-pairs rule'
# (label, share of the oracle in r, share of the oracle in p, where p takes the oracle): 0 =
# phi's head, 1 = the oracle; 'all' pairs, or 'clustered' (pairs of two photos with a dGT
# cluster, the pairs phi's p is defined on; phi's p elsewhere).
CONDITIONS = (('phi', 0.0, 0.0, 'all'),
              ('p mixed 10% oracle', 0.0, 0.1, 'all'),
              ('p mixed 25% oracle', 0.0, 0.25, 'all'),
              ('oracle p', 0.0, 1.0, 'all'),
              ('oracle p, clustered pairs only', 0.0, 1.0, 'clustered'),
              ('r mixed 5% oracle', 0.05, 0.0, 'all'),
              ('r mixed 10% oracle', 0.1, 0.0, 'all'),
              ('r mixed 25% oracle', 0.25, 0.0, 'all'),
              ('oracle r', 1.0, 0.0, 'all'),
              ('oracle r and p', 1.0, 1.0, 'all'))
METRICS = ('pair_auc', 'relevance_auc', 'P@20', 'CR@20', 'F1@20')


def headroom_path(dataset: str) -> str:
  """Where this diagnosis of `dataset` is kept (outside docs/results/<dataset>/, which
  reproduce.py replaces as a whole; the report reads it from here)."""
  return f'docs/results/{dataset}-headroom.json'


def oracle_heads(photo_ids: Sequence[str], relevance: Mapping[str, int],
                 clusters: Mapping[str, int]) -> tuple:
  """(r* [n], p* [n, n], clustered [n, n]) of the ground truth: r*_i = 1 for rGT 1 (else 0);
  p*_ij = 1 when i and j share a dGT cluster (p*_ii = 1 for a photo with one), else 0;
  clustered_ij: both photos have a cluster."""
  r = np.array([1.0 if relevance.get(pid) == 1 else 0.0 for pid in photo_ids], np.float32)
  cid = np.array([clusters.get(pid, -1) for pid in photo_ids], np.int64)
  clustered = (cid[:, None] >= 0) & (cid[None, :] >= 0)
  p = ((cid[:, None] == cid[None, :]) & clustered).astype(np.float32)
  return r, p, clustered


def condition_heads(r: np.ndarray, p: np.ndarray, oracle: tuple, condition: tuple) -> tuple:
  """The (r, p) a condition of CONDITIONS reads from phi's (r, p) and `oracle_heads`: each
  head mixed with its oracle, (1 - a) phi + a oracle (p on the pairs the condition names)."""
  r_star, p_star, clustered = oracle
  _, r_share, p_share, where = condition
  mixed = (1.0 - p_share) * p + p_share * p_star
  if where == 'clustered':
    mixed = np.where(clustered, mixed, p)
  return (1.0 - r_share) * r + r_share * r_star, mixed.astype(np.float32)


def listed(settings: PairsInferenceSettings, photo_ids: Sequence[str], r: np.ndarray,
           p: np.ndarray) -> list:
  """The photo ids of the row's rule's list from (r, p) over the pool's tokens, as
  `Retriever.rank` builds it."""
  valid = np.ones((1, len(photo_ids)), bool)
  picks, _ = head_selection.select_from_heads(r[None], p[None], valid, settings)
  return [photo_ids[i] for i in picks[0] if i >= 0]


def fold_scores(colt: retriever_lib.Retriever, held: tuple, held_viewed: tuple) -> dict:
  """topic -> {condition label: {metric: value}} over a fold's held-out topics."""
  split = held[0]
  runs = {c[0]: {} for c in CONDITIONS}
  scores = {}
  for topic, cands in head_quality.by_topic(*held_viewed).items():
    gt = split.ground_truth[topic]
    ids, r, p = colt.pool_heads(cands.query, cands.features, cands.photo_ids)
    oracle = oracle_heads(ids, gt.relevance, gt.clusters)
    for condition in CONDITIONS:
      rr, pp = condition_heads(r, p, oracle, condition)
      runs[condition[0]][topic] = [(pid, 0.0) for pid in listed(colt.settings, ids, rr, pp)]
      scores.setdefault(str(topic), {})[condition[0]] = {
          'pair_auc': head_quality.pair_auc(pp, ids, gt.clusters),
          'relevance_auc': head_quality.relevance_auc(rr, ids, gt.relevance)}
  for label, run in runs.items():
    for topic, m in evaluation.score(split, run).per_topic.items():
      scores[str(topic)][label].update({k: float(m[k]) for k in ('P@20', 'CR@20', 'F1@20')})
  return scores


def diagnose(cfg: ReproduceConfig, log: Callable = print, seed: int = 0) -> dict:
  """Every fold's held-out topics by `fold_scores` with that fold's row: {'variant', 'seed',
  'folds': [{'fold', 'tag', 'ttc_step', 'selection'}], 'of_folds', 'topics', 'row_check',
  'row_checked'}. `row_check`: the largest per-topic |F1@20| gap between phi's rebuilt lists
  and the row's saved scores over the `row_checked` topics both score (0 when the rebuilding
  is `rank`'s)."""
  variant = variants_lib.row(VARIANT)
  rep = Reproduction(cfg, log)
  rep.load()
  name = f'{variant.name} (seed {seed}, pool)'
  out = {'variant': variant.name, 'seed': seed, 'folds': [], 'topics': {}, 'row_check': 0.0,
         'row_checked': 0}
  for fold, tag, train, held, row in rep.fold_rows(name):
    params = evaluation.MethodParams(**row['params'])
    _, held_viewed = rep.viewed(variant.view_spec, train, held)
    colt = evaluation.colt_retriever(params)
    log(f' fold {fold.index}: {len(fold.test_topics)} held-out topics, rule '
        f'{colt.settings.selection}')
    scores = fold_scores(colt, held, held_viewed)
    add_fold(out, scores, row, {'fold': fold.index, 'tag': tag, 'ttc_step': params.ttc_step,
                                'selection': colt.settings.selection})
  return finished(out, rep.rows_root, name, cfg.folds)


def add_fold(out: dict, scores: Mapping, row: Mapping, fold: dict) -> None:
  """A fold's rebuilt lists into `out`: checked against the row's own (`check_row`), then its
  topics' scores and what the fold used (`fold`)."""
  check_row(out, scores, row, 'phi')
  out['topics'].update(scores)
  out['folds'].append(fold)


def finished(out: dict, rows_root: str, name: str, folds: int) -> dict:
  """`out` once every fold is in; refused when no topic could be checked against the row."""
  if not out['row_checked']:
    raise InputError(f'{rows_root}: the {name} rows score none of the topics rebuilt here '
                     '(per_topic): rerun experiments/reproduce.py')
  out['of_folds'] = folds
  return out


def check_row(out: dict, scores: Mapping, row: Mapping, label: str,
              metrics: Sequence[str] = ('F1@20',)) -> None:
  """Adds to `out`'s 'row_check' (the largest per-topic gap, over `metrics`, between the
  rebuilt lists' scores under `label` and the row's saved ones) and 'row_checked' (the topics
  compared): the check that a diagnosis rebuilds the row's own lists."""
  for topic, s in scores.items():
    saved = row['per_topic'].get(topic)
    if saved is None or any(s[label].get(m) is None for m in metrics):
      continue
    out['row_check'] = max([out['row_check']] + [abs(s[label][m] - float(saved[m]))
                                                 for m in metrics])
    out['row_checked'] += 1


def mean_of(topics: Mapping, label: str, metric: str) -> Optional[float]:
  values = [t[label][metric] for t in topics.values() if t[label].get(metric) is not None]
  return float(np.mean(values)) if values else None


def _column(topics: Mapping, label: str, metric: str) -> dict:
  """topic -> the condition's `metric`, over the topics that have it."""
  return {t: s[label][metric] for t, s in topics.items() if s[label].get(metric) is not None}


def summary_lines(result: Mapping) -> list:
  """Markdown: per condition, the mean AUCs, P@20, CR@20 and both F1@20 readings, and the
  paired differences from phi's own lists (official and paper F1@20)."""
  topics = result['topics']
  rules = ', '.join(f'fold {f["fold"]}: {f["selection"]}' for f in result['folds'])
  out = [f'Generated by `{result["command"]}` over {len(result["folds"])} of '
         f'{result["of_folds"]} folds ({len(topics)} held-out topics): the lists of '
         f'`{result["variant"]}` (seed {result["seed"]}, each fold\'s phi, rule and parameters; '
         f'rules {rules}) rebuilt from phi\'s heads with the relevance r, the pair probabilities '
         'p or both replaced by the ground truth (oracle: r* = rGT, p* = 1 for photos of one '
         'dGT cluster, 0 for any other pair; "clustered pairs only": p* where both photos have '
         'a cluster, phi\'s p elsewhere), or mixed with it ((1 - a) phi + a oracle). Rebuilt '
         'from phi\'s own heads, the lists score as the row (largest per-topic F1@20 gap '
         f'{result["row_check"]:.4f} over {result.get("row_checked", len(topics))} topics). '
         'Held-out ground truth by design: a bound, nothing chosen by it. Paired per topic '
         'with phi\'s own lists (95% bootstrap interval).', '',
         '| heads | pair AUC | relevance AUC | P@20 | CR@20 | F1@20 (official) | F1@20 (paper) '
         '| official - phi | paper - phi |', '|---|---|---|---|---|---|---|---|---|']
  for label, *_ in CONDITIONS:
    cells = [fmt(mean_of(topics, label, m)) for m in METRICS] + paired_cells(topics, label)
    out.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return out + ['']


def paired_cells(topics: Mapping, label: str, differences: Sequence[str] = ()) -> list:
  """A condition's table cells after its means: its paper F1@20 (the harmonic mean of its
  mean P@20 and CR@20), each metric of `differences` minus phi's, then its official and paper
  F1@20 minus phi's (paired per topic; '-' for phi itself)."""
  p, cr = mean_of(topics, label, 'P@20'), mean_of(topics, label, 'CR@20')
  cells = ['-' if p is None or cr is None else f'{float(significance.harmonic_mean(p, cr)):.4f}']
  for metric in tuple(differences) + ('F1@20',):
    column = _column(topics, label, metric)
    cells.append('-' if label == 'phi' or len(column) < 2 else significance.paired_difference(
        column, _column(topics, 'phi', metric)).text())
  if label == 'phi' or len(_column(topics, label, 'F1@20')) < 2:
    return cells + ['-']
  return cells + [significance.paired_paper_f1(
      _column(topics, label, 'P@20'), _column(topics, label, 'CR@20'),
      _column(topics, 'phi', 'P@20'), _column(topics, 'phi', 'CR@20')).text()]


def fmt(value: Optional[float]) -> str:
  return '-' if value is None else f'{value:.4f}'
