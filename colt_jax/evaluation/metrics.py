"""Official MediaEval diverse-retrieval metrics: P@X, CR@X and F1@X.

A transcription of the rules of the official 2013 scorer (div_eval.jar), see
`shared/spec/mediaeval-eval.md`. For one topic and a cutoff X, let L be the first
min(X, len) photos of the topic's ranked list:

* P@X = distinct photos of L whose rGT value is 1, divided by X (not by len(L): a short
  list is penalised). rGT values 0 and -1, and ids absent from rGT (for example photos of
  other topics under the whole-collection protocol), are not relevant.
* CR@X = distinct dGT cluster ids among the photos of L, divided by the topic's number of
  clusters (the largest dGT cluster id). Photos absent from dGT have no cluster. A topic
  with no clusters (num_clusters == 0) has CR@X = 0.
* F1@X = 2 * P * CR / (P + CR), and 0 when P + CR == 0.

Averages are arithmetic means over topics of the per-topic values; in particular the mean
F1 is the mean of per-topic F1 values, not the F1 of the mean P and mean CR.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from colt_jax.data.types import TopicGroundTruth

CUTOFFS = (5, 10, 20, 30, 40, 50)
# Columns of the printed tables: the paper's cutoffs 10 and 20, and the official list length 50.
DEFAULT_COLUMNS = ('P@10', 'P@20', 'P@50', 'CR@10', 'CR@20', 'CR@50', 'F1@10', 'F1@20',
                   'F1@50')


def metric_names(cutoffs: Sequence[int] = CUTOFFS) -> list[str]:
  """Metric keys in the scorer's order: all P@X, then all CR@X, then all F1@X."""
  return ([f'P@{x}' for x in cutoffs] + [f'CR@{x}' for x in cutoffs] +
          [f'F1@{x}' for x in cutoffs])


def _check_cutoffs(cutoffs: Sequence[int]) -> None:
  if not cutoffs:
    raise ValueError('cutoffs must not be empty')
  for x in cutoffs:
    if isinstance(x, bool) or not isinstance(x, int) or x <= 0:
      raise ValueError(f'cutoffs must be positive ints, got {x!r}')


def f1_score(p: float, cr: float) -> float:
  """Harmonic mean of P and CR; 0 when both are 0."""
  s = p + cr
  return 2.0 * p * cr / s if s > 0 else 0.0


def topic_metrics(ranked_ids: Sequence[str],
                  gt: TopicGroundTruth,
                  cutoffs: Sequence[int] = CUTOFFS) -> dict[str, float]:
  """P@X, CR@X and F1@X of one topic's ranked list (keys as in `metric_names`).

  Args:
    ranked_ids: the topic's photo ids, best first. Duplicates take a position in the list
      but are counted once.
    gt: the topic's ground truth.
    cutoffs: the cutoffs X.

  Returns:
    A dict from 'P@X', 'CR@X', 'F1@X' to floats in [0, 1].
  """
  _check_cutoffs(cutoffs)
  ranked_ids = list(ranked_ids[:max(cutoffs)])
  for p in ranked_ids:
    if not isinstance(p, str):
      raise TypeError(f'photo ids must be str, got {type(p).__name__} {p!r}')
  p_at, cr_at = {}, {}
  for x in cutoffs:
    top = set(ranked_ids[:x])
    p_at[x] = sum(1 for p in top if gt.relevance.get(p) == 1) / x
    if gt.num_clusters > 0:
      found = {gt.clusters[p] for p in top if p in gt.clusters}
      cr_at[x] = len(found) / gt.num_clusters
    else:
      cr_at[x] = 0.0
  out = {}
  for x in cutoffs:
    out[f'P@{x}'] = p_at[x]
  for x in cutoffs:
    out[f'CR@{x}'] = cr_at[x]
  for x in cutoffs:
    out[f'F1@{x}'] = f1_score(p_at[x], cr_at[x])
  return out


@dataclasses.dataclass(frozen=True)
class EvalResult:
  """Per-topic metrics and their arithmetic means over topics."""
  per_topic: dict[int, dict[str, float]]
  mean: dict[str, float]


def evaluate_run(run: Mapping[int, Sequence[str]],
                 ground_truth: Mapping[int, TopicGroundTruth],
                 cutoffs: Sequence[int] = CUTOFFS,
                 allow_missing: bool = False) -> EvalResult:
  """Scores every topic of `ground_truth` and averages over them.

  Args:
    run: topic number -> ranked photo ids (for example `runfile.validate_run`'s result).
    ground_truth: topic number -> ground truth; every topic here is scored.
    cutoffs: the cutoffs X.
    allow_missing: when True, a topic of `ground_truth` absent from `run` is scored as an
      empty list (all metrics 0) and counts in the means; when False it is an error.

  Returns:
    The per-topic metrics (in `ground_truth`'s topic order) and their means.

  Raises:
    ValueError: `run` has a topic that is not in `ground_truth`, `run` lacks topics of
      `ground_truth` and `allow_missing` is False, or `ground_truth` is empty.
  """
  _check_cutoffs(cutoffs)
  if not ground_truth:
    raise ValueError('ground_truth has no topics')
  extra = sorted(set(run) - set(ground_truth))
  if extra:
    raise ValueError(f'run has topics without ground truth: {extra}')
  missing = [t for t in ground_truth if t not in run]
  if missing and not allow_missing:
    raise ValueError(f'run lacks topics of the ground truth: {sorted(missing)} '
                     '(pass allow_missing=True to score them as empty lists)')
  per_topic = {t: topic_metrics(run.get(t, ()), gt, cutoffs)
               for t, gt in ground_truth.items()}
  names = metric_names(cutoffs)
  n = len(per_topic)
  mean = {k: sum(m[k] for m in per_topic.values()) / n for k in names}
  return EvalResult(per_topic=per_topic, mean=mean)


def _cells(rows: Mapping[str, Mapping[str, float]], columns: Sequence[str],
           digits: int) -> list[list[str]]:
  out = []
  for name, values in rows.items():
    row = [str(name)]
    for c in columns:
      v = values.get(c)
      row.append('-' if v is None else f'{v:.{digits}f}')
    out.append(row)
  return out


def format_table(rows: Mapping[str, Mapping[str, float]],
                 columns: Sequence[str] = DEFAULT_COLUMNS,
                 digits: int = 4) -> str:
  """A plain aligned text table: one row per method, values as fractions ('0.6295').

  A value missing from a row prints as '-'.
  """
  header = ['method'] + list(columns)
  body = _cells(rows, columns, digits)
  widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]

  def line(r):
    first = r[0].ljust(widths[0])
    rest = [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
    return '  '.join([first] + rest).rstrip()

  sep = '  '.join('-' * w for w in widths)
  return '\n'.join([line(header), sep] + [line(r) for r in body])


def format_markdown_table(rows: Mapping[str, Mapping[str, float]],
                          columns: Sequence[str] = DEFAULT_COLUMNS,
                          digits: int = 4) -> str:
  """The same table as GitHub markdown (method column left, values right aligned)."""
  header = ['method'] + list(columns)
  body = _cells(rows, columns, digits)
  esc = lambda s: s.replace('|', '\\|')
  lines = ['| ' + ' | '.join(esc(c) for c in header) + ' |',
           '|' + '|'.join([':---'] + ['---:'] * len(columns)) + '|']
  lines += ['| ' + ' | '.join(esc(c) for c in r) + ' |' for r in body]
  return '\n'.join(lines)
