"""Diverse search without a model: the post-processing methods (top-k, MMR, MSD, DPP, UMONS)
over a store's candidates, their parameters as a request or a command line names them, their
defaults, and what to say when no learned model is at hand.

The default method and parameters for a store without a model are data shipped with the
package, `model_free.json` (read by experiments/search.py and experiments/serve.py alike):
`default_method()`, `default_params()`; its "why", "rule" and "evidence" say where they come
from. They are chosen by a rule fixed in advance, `colt_jax/reproduction/model_free_rule.py`,
written by `experiments/choose_model_free.py`, never by hand: on the training topics, each
method's parameters are the grid setting of least worst regret in F1@20 over several feature
sets (MiniLM text, TF-IDF text, MiniLM text + descriptors), so that they travel to an encoder
never tuned on; the method is the one whose parameters, so chosen on k-1 of k folds, score the
best F1@20 on the fold left out. docs/RESULTS.md ("Without training: parameters that travel")
says what it costs.
`rank(search, method, queries, params, length)` ranks queries over an
`inference.store_search.StoreSearch`'s candidates with the code `experiments/evaluate.py`
scores (`methods.rank_baseline`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from typing import Mapping, Optional

import numpy as np

from colt_jax.evaluation import methods as evaluation
from colt_jax.util.errors import InputError

METHODS = ('topk', 'mmr', 'msd', 'dpp', 'umons')
GREEDY = ('mmr', 'msd', 'dpp')  # one jitted program per list length: batched, padded
DEFAULTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'model_free.json')
# Each method's parameters: name -> (MethodParams field, low, high, integer, what it is).
PARAMS = {
    'topk': {},
    'mmr': {'lambda': ('diversity', 0.0, 1.0, False,
                       "MMR's trade-off: 0 = top-k, 1 = only novelty")},
    'msd': {'lambda': ('msd_tradeoff', 0.0, 1.0, False,
                       "MSD's trade-off: 0 = top-k, 1 = only the mean distance to the picks")},
    'dpp': {'theta': ('dpp_theta', 0.0, 1.0, False,
                      "DPP's trade-off: 1 = top-k, 0 = only the log-determinant")},
    'umons': {'eps': ('umons_eps', 0.0, 2.0, False,
                      "DBSCAN's radius (cosine distance), > 0"),
              'threshold': ('umons_threshold', 0.0, 1.0, False,
                            'relevance filter on min-max normalised similarity'),
              'min_samples': ('umons_min_samples', 1, 1000, True, "DBSCAN's min_samples")},
}


def param_error(method: str, name: str, value) -> Optional[str]:
  """Why `params.<name>` = value is not a parameter of `method` (one line naming it), or
  None when it is one, in range."""
  known = PARAMS.get(method, {})
  if name not in known:
    takes = ', '.join(sorted(known)) or 'none'
    return f'params.{name}: not a parameter of {method} (it takes {takes})'
  _, low, high, integer, _ = known[name]
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return f'params.{name}: must be a number, got {value!r}'
  if not math.isfinite(value) or not low <= value <= high or (name == 'eps' and value <= low):
    interval = f'({low}, {high}]' if name == 'eps' else f'[{low}, {high}]'
    return f'params.{name}: must be in {interval}, got {value:g}'
  if integer and value != int(value):
    return f'params.{name}: must be an integer, got {value:g}'
  return None


def with_params(base: evaluation.MethodParams, method: str,
                params: Mapping[str, float]) -> evaluation.MethodParams:
  """`base` with `method`'s parameters `params` (the request's names, `PARAMS`) set; a bad
  one is an InputError naming it."""
  changes = {}
  for name, value in params.items():
    error = param_error(method, name, value)
    if error:
      raise InputError(error)
    field, _, _, integer, _ = PARAMS[method][name]
    changes[field] = int(value) if integer else float(value)
  return dataclasses.replace(base, **changes) if changes else base


@functools.lru_cache(maxsize=None)
def defaults() -> dict:
  """model_free.json: {"method", "why", "params": {method: {name: value}}, "candidates"},
  checked (a broken install is one line naming the file)."""
  try:
    with open(DEFAULTS_FILE, encoding='utf-8') as f:
      data = json.load(f)
    method, params = data['method'], data['params']
    if method not in METHODS:
      raise ValueError(f'method {method!r} is none of {", ".join(METHODS)}')
    for name, given in params.items():
      if name not in METHODS:
        raise ValueError(f'params of {name!r}, none of {", ".join(METHODS)}')
      for key, value in given.items():
        error = param_error(name, key, value)
        if error:
          raise ValueError(f'{name} {error}')
    int(data['candidates'])
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise InputError(f'{DEFAULTS_FILE}: not the model-free defaults colt_jax ships ({e}); '
                     'reinstall (make install)') from None
  return data


def default_method() -> str:
  """The method of a store without a model (model_free.json)."""
  return defaults()['method']


def default_params() -> evaluation.MethodParams:
  """Every model-free method's default parameters (model_free.json) as MethodParams."""
  data = defaults()
  params = dataclasses.replace(evaluation.MethodParams(), mmr_candidates=int(data['candidates']),
                               umons_candidates=int(data['candidates']))
  for method, given in data['params'].items():
    params = with_params(params, method, given)
  return params


def candidate_count(params: evaluation.MethodParams, num_photos: int) -> int:
  """Candidates per query the methods need: the most any of them ranks, at most the store's."""
  return max(1, min(max(params.mmr_candidates, params.umons_candidates), num_photos))


def rank(search, method: str, queries: np.ndarray, params: evaluation.MethodParams,
         length: int, exclude: Optional[list] = None) -> list:
  """[(photo id, score, objective)] per query [B, d] by `method` over `search`'s candidates
  (an `inference.store_search.StoreSearch`), at most `length` photos each (`scored`);
  `exclude`: a photo id per query left out of its candidates (the query photo), or None."""
  if method not in METHODS:
    raise InputError(f'--method: unknown method {method!r}; expected one of '
                     f'{", ".join(METHODS)} (or colt, with a model)')
  cands = search.candidates(queries, candidate_count(params, search.num_rows), exclude)
  run = evaluation.rank_baseline(method, cands, params, k=length)
  return [scored(c, run[b], method) for b, c in enumerate(cands)]


def scored(cands, entries, method: str) -> list:
  """[(photo id, score, objective)] of a method's list over `cands` (`TopicCandidates`):
  the score is the photo's cosine similarity to the query over the features searched (what
  colt's scores are, for every method); the objective, the method's own score when it picked
  the photo (mmr, msd, dpp), else None."""
  entries = list(entries)
  if not entries:
    return []
  where = {p: i for i, p in enumerate(cands.photo_ids)}
  rows = np.asarray(cands.features, np.float32)[[where[p] for p, _ in entries]]
  cosine = (rows @ np.asarray(cands.query, np.float32)).tolist()
  if method in GREEDY:
    return [(p, c, float(o)) for (p, o), c in zip(entries, cosine)]
  return [(p, c, None) for (p, _), c in zip(entries, cosine)]


def learned_model_hint(encoder: str) -> str:
  """How to get a learned (CoLT) model for a store of the encoder f named `encoder` (its
  meta.json's 'encoder': 'clip:...', 'minilm:...')."""
  kind = str(encoder or '').split(':', 1)[0]
  if kind == 'minilm':
    return ('for a learned model of MiniLM text stores, run `make model` and pass --model '
            'work/models/div400-minilm-colt-pairs-text-only')
  if kind == 'clip':
    return ('for a learned model of CLIP stores, train one on your own judgments '
            '(data_prep/make_dataset.py, then experiments/train_scl.py and train_ttc.py: see '
            'docs/COLLECTIONS.md, "Your own judgments")')
  return ('for a learned model, train one on judgments over this encoder\'s features (see '
          'docs/COLLECTIONS.md, "Your own judgments")')


def no_model_help(encoder: str) -> str:
  """For a store of the encoder f named `encoder`: what works without a model, and how to get
  a learned one."""
  others = ', '.join(m for m in METHODS if m != default_method())
  return (f'without a model, the model-free methods work now: {default_method()} (the '
          f'default), {others} (search.py --method, serve.py --methods); '
          f'{learned_model_hint(encoder)}')
