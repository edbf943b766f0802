"""The default of a store without a model: a rule fixed in advance, applied to training topics.

RULE, over the training topics T and the feature sets E (encoders or view sets) scored on them,
every offered method (`METHODS`) with its small grid (`travel.GRIDS`), F1@20 pool protocol:

1. Parameters that travel: each method's setting is the one of least worst regret over E,
   argmin_theta max_e [max_theta' F1_e(theta') - F1_e(theta)] (mean F1@20 over T; ties: the
   first of the grid), so that no feature set pays much for a setting tuned on another.
2. The method: each method's setting is chosen by step 1 on k-1 of k folds of T and scored on
   the fold left out (every topic once, under every feature set); the method of the best mean
   of that cross-validated F1@20 over E and T wins (ties: the simpler, in `METHODS`' order).

The shipped default (`colt_jax/evaluation/model_free.json`, written by
`experiments/choose_model_free.py`) is RULE on every Div400 topic over MiniLM text, TF-IDF text
and MiniLM text + descriptors; the reproduction also applies it inside each cross-validation
fold, without the target's feature set, to measure what it costs a store of an encoder never
tuned on (`report_travel`).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from colt_jax.data import folds as folds_lib

# Offered methods, the simplest first (model_free.METHODS' order).
METHODS = ('topk', 'mmr', 'msd', 'dpp', 'umons')
INNER_FOLDS = 5  # step 2's folds
NAME = 'least-worst-regret parameters over feature sets; method by k-fold CV F1@20'
RULE = ('on the training topics only: each method\'s parameters are the grid setting of least '
        'worst regret in mean F1@20 over the feature sets (regret: the best setting\'s F1@20 '
        'on that feature set minus this one\'s; ties: the first of the grid); the method is '
        'the one whose parameters, so chosen on k-1 of k folds of the training topics, score '
        'the best mean F1@20 on the fold left out, over every feature set (ties: the simpler, '
        'in the order ' + ', '.join(METHODS) + '); pool protocol')

# scores[feature set][method] = [(setting, {topic: F1@20})] in grid order.
Scores = Mapping[str, Mapping[str, Sequence[tuple]]]


@dataclasses.dataclass(frozen=True)
class Choice:
  """RULE applied to one set of training topics."""
  method: str
  params: Mapping[str, dict]  # method -> its chosen setting (MethodParams field -> value)
  cv_scores: Mapping[str, float]  # method -> cross-validated mean F1@20 (step 2)
  # step 2's inner folds: {held_out, settings: {method: setting}, held_out_F1@20: {method: F1}}
  folds: Sequence[dict]


def _mean(per_topic: Mapping, topics: Sequence) -> float:
  return float(np.mean([per_topic[t] for t in topics]))


def travelling_index(grids: Sequence[Sequence[tuple]], topics: Sequence) -> int:
  """Step 1: the index of the setting of least worst regret over the feature sets' grids
  (the same settings in the same order on every feature set)."""
  means = np.array([[_mean(per_topic, topics) for _, per_topic in grid] for grid in grids])
  regret = (means.max(axis=1, keepdims=True) - means).max(axis=0)
  return int(np.flatnonzero(regret <= regret.min() + 1e-12)[0])


def choose(scores: Scores, topics: Sequence, folds: int = 5, seed: int = 0) -> Choice:
  """RULE on `topics` over the feature sets of `scores` (every one scoring every method of
  METHODS on the same grid)."""
  sets = list(scores)
  if not sets:
    raise ValueError('the rule needs at least one feature set')
  topics = sorted(topics)
  params = {m: dict(scores[sets[0]][m][travelling_index([scores[e][m] for e in sets],
                                                        topics)][0])
            for m in METHODS}
  held_score = {m: {} for m in METHODS}  # method -> (feature set, topic) -> F1@20
  evidence = []
  for fold in folds_lib.kfold(topics, folds, seed):
    chosen, fold_scores = {}, {}
    for m in METHODS:
      i = travelling_index([scores[e][m] for e in sets], fold.train_topics)
      chosen[m] = dict(scores[sets[0]][m][i][0])
      held = {(e, t): scores[e][m][i][1][t] for e in sets for t in fold.test_topics}
      held_score[m].update(held)
      fold_scores[m] = float(np.mean(list(held.values())))
    evidence.append({'held_out': [int(t) for t in fold.test_topics], 'settings': chosen,
                     'held_out_F1@20': fold_scores})
  cv = {m: float(np.mean(list(held_score[m].values()))) for m in METHODS}
  best = max(cv.values())
  method = next(m for m in METHODS if cv[m] >= best - 1e-12)
  return Choice(method, params, cv, evidence)


def request_names(method: str, setting: Mapping) -> dict:
  """A setting (MethodParams fields) under the names a request and model_free.json use."""
  from colt_jax.evaluation import model_free  # pylint: disable=g-import-not-at-top
  names = {field: name for name, (field, *_rest) in model_free.PARAMS[method].items()}
  return {names[k]: v for k, v in setting.items()}


def defaults_payload(choice: Choice, *, candidates: int, evidence: Mapping) -> dict:
  """model_free.json's content: the chosen method, every method's parameters (request names),
  the rule (name and text) and `evidence` with the rule's per-fold choices and scores."""
  params = {m: request_names(m, choice.params[m]) for m in METHODS if m != 'topk'}
  text = ', '.join(f'{m} {v:.4f}' for m, v in choice.cv_scores.items())
  why = (f'Chosen by a rule fixed in advance ({NAME}; colt_jax/reproduction/model_free_rule.py) '
         f'on {evidence.get("topics", "?")} {evidence.get("dataset", "")} topics over '
         f'{", ".join(evidence.get("feature_sets", ()))}: cross-validated F1@20 {text}; '
         'docs/RESULTS.md, "Without training: parameters that travel", says what it costs. '
         f'Written by {evidence.get("command", "experiments/choose_model_free.py")}.')
  folds = [{'held_out': f['held_out'], 'held_out_F1@20': f['held_out_F1@20'],
            'settings': {m: request_names(m, s) for m, s in f['settings'].items()}}
           for f in choice.folds]
  return {'method': choice.method, 'why': why, 'params': params, 'candidates': int(candidates),
          'rule': {'name': NAME, 'text': RULE},
          'evidence': dict(evidence, cv_F1_at_20=dict(choice.cv_scores), folds=folds)}
