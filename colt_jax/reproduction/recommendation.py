"""The recommended method: one learned row, chosen by a rule fixed in advance on training topics.

The rule (RULE): among CANDIDATES, the row whose own chosen setting scores the highest F1@20 on
the inner folds of the training topics; a tie goes to the candidate listed first (the simpler).
Each candidate already chooses its setting (w, the list rule, phi's checkpoint, a, ...) by an
inner k-fold over the training topics (`stages.Reproduction.coverage_choice`); the rule compares
those inner scores and nothing else.

- dev -> test: the training topics are dev; the inner scores are the `coverage choice <row>
  (<protocol>)` records of the official stage.
- Cross-validation: each fold applies the rule to its own training topics' inner scores (the
  fold's `choices`), and the `recommended` row takes each held-out topic from its fold's
  choice, seed by seed: a nested estimate of the choice, not of the best row in hindsight.
The other learned rows stay in the report as ablations.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax.reproduction import report_tables

# The learned rows that score their chosen setting on the training topics' inner folds, the
# simplest first. `colt-pairs ensemble` is not one: it averages every seed's phi under the
# setting `colt-pairs blend` chose and scores none of its own.
CANDIDATES = ('colt-pairs', 'colt-pairs rule', 'colt-pairs blend', 'colt-pairs dpp',
              'colt-pairs relevance')
RULE = ('the learned row whose chosen setting has the highest F1@20 on the inner folds of the '
        'training topics (ties: the simpler, in the order ' + ', '.join(CANDIDATES) + ')')
NAME = 'recommended'


@dataclasses.dataclass(frozen=True)
class Choice:
  """The rule applied to one set of training topics."""
  chosen: str  # a CANDIDATES row
  scores: Mapping[str, float]  # each candidate's inner-fold F1@20 on the training topics


def choose(scores: Mapping[str, Optional[float]]) -> Optional[Choice]:
  """RULE over `scores` (row -> inner F1@20); None when a candidate has no score."""
  known = {c: scores.get(c) for c in CANDIDATES}
  if any(v is None for v in known.values()):
    return None
  best = max(known.values())
  chosen = next(c for c in CANDIDATES if known[c] == best)
  return Choice(chosen, {c: float(v) for c, v in known.items()})


def fold_choices(folds: Sequence[Mapping[str, Any]], protocol: str) -> Optional[list]:
  """RULE per cross-validation fold (from its training topics' inner scores); None when a
  fold lacks them."""
  out = []
  for fold in folds:
    coverage = ((fold.get('choices') or {}).get(protocol) or {}).get('coverage') or {}
    choice = choose({c: (coverage.get(c) or {}).get('F1@20') for c in CANDIDATES})
    if choice is None:
      return None
    out.append(choice)
  return out


def official_choice(saved_row, protocol: str) -> Optional[Choice]:
  """RULE on dev: `saved_row(kind, name)` reads a cached record (`Reproduction.saved_row`)."""
  scores = {}
  for c in CANDIDATES:
    record = saved_row('official', f'coverage choice {c} ({protocol})')
    scores[c] = (max(s['F1@20'] for s in record['scores'])
                 if record and record.get('scores') else None)
  return choose(scores)


def _mean(per_topic: Mapping[str, Mapping[str, float]]) -> dict:
  keys = list(next(iter(per_topic.values()))) if per_topic else []
  return {k: float(np.mean([m[k] for m in per_topic.values()])) for k in keys}


def nested_rows(rows: Mapping[str, Mapping[str, Any]], folds: Sequence[Mapping[str, Any]],
                choices: Sequence[Choice], protocol: str) -> dict:
  """'recommended (seed s, <protocol>)' rows of the merged cross-validation `rows`: each
  held-out topic scored by its fold's chosen row of seed s."""
  seeds = sorted({s for name in rows for m, s, p in [report_tables.parse_row_name(name)]
                  if p == protocol and s is not None and m in CANDIDATES})
  out = {}
  for seed in seeds:
    topics = {}
    for fold, choice in zip(folds, choices):
      scores = rows.get(f'{choice.chosen} (seed {seed}, {protocol})', {}).get('per_topic', {})
      for t in fold['test_topics']:
        if str(t) in scores:
          topics[str(t)] = scores[str(t)]
    if topics:
      out[f'{NAME} (seed {seed}, {protocol})'] = {'protocol': protocol, 'per_topic': topics,
                                                  'mean': _mean(topics)}
  return out


def official_rows(rows: Mapping[str, Mapping[str, Any]], choice: Choice,
                  protocol: str) -> dict:
  """'recommended (seed s, <protocol>)': the dev choice's own test rows, renamed."""
  out = {}
  for name, row in rows.items():
    method, seed, prot = report_tables.parse_row_name(name)
    if method == choice.chosen and prot == protocol and seed is not None:
      out[f'{NAME} (seed {seed}, {protocol})'] = row
  return out
