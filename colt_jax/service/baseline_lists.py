"""The model-free methods' lists in the service (`searcher.Searcher`'s stage 3): one candidate
search for every request of a batch (`StoreSearch.candidates`: the Retriever's engine, else its
exact index over h^; without a model, the store's own features), a query photo left out of its
own candidates, then `evaluation.rank_baseline` (the code `experiments/evaluate.py` scores)
over each request's candidates, mmr, msd and dpp batched per parameters, padded to a fixed
batch size and computed at the full list length, then cut to the request's (the first picks
are the shorter list: no length compiles). Each photo's score is its cosine similarity to the query, as
colt's is (`model_free.scored`); mmr's, msd's and dpp's own objective is `objective`."""
from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

import numpy as np

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.inference import settings as settings_lib
from colt_jax.service import schemas


LENGTH = settings_lib.LIST_LENGTH  # mmr, msd and dpp lists are computed this long, then cut


def pad(rows: np.ndarray, size: int) -> np.ndarray:
  """`rows` [n, d] repeated from its first to `size` rows (a padded batch)."""
  if rows.shape[0] == size:
    return rows
  return np.concatenate([rows, np.repeat(rows[:1], size - rows.shape[0], 0)])


class BaselineLists:
  """The `Searcher`'s model-free stage (module docstring); it sets `search`, `method_params`,
  `num_candidates`, `padded` and `_observe`."""

  def candidates(self, queries: np.ndarray,
                 exclude: Optional[Sequence[Optional[str]]] = None) -> list:
    """`TopicCandidates` per query [n, d], most similar first, each without its `exclude`d
    photo (`StoreSearch.candidates`; always searched as with one, so that every batch has one
    shape); searched at a padded size."""
    n = queries.shape[0]
    exclude = list(exclude or [None] * n)
    size = self.padded(n)
    return self.search.candidates(pad(queries, size), self.num_candidates,
                                  exclude + [exclude[0]] * (size - n))[:n]

  def params_for(self, request: schemas.SearchRequest) -> evaluation.MethodParams:
    return model_free.with_params(self.method_params, request.method, request.params)

  def rank_baseline(self, method: str, cands: list, params: evaluation.MethodParams,
                    length: int) -> list:
    """[(photo id, score)] per candidate list, by `evaluation.rank_baseline`; mmr, msd and
    dpp padded to a fixed batch size and computed at the full list length, then cut (their
    first picks are the shorter list: one program serves every length)."""
    n, greedy = len(cands), method in model_free.GREEDY
    cands = [dataclasses.replace(cands[b] if b < n else cands[0], topic=b)
             for b in range(self.padded(n) if greedy else n)]
    full = max(length, LENGTH) if greedy else length
    run = evaluation.rank_baseline(method, cands, params, k=full)
    return [run[b][:length] for b in range(n)]

  def _run_baselines(self, states: list, queries: np.ndarray) -> None:
    t0 = time.perf_counter()
    cands = self.candidates(queries, [s['exclude'] for s in states])
    seconds = time.perf_counter() - t0
    self._observe('candidates', seconds)
    greedy = {}
    for i, s in enumerate(states):
      s['timing']['candidates'] = seconds
      s['batch_size'] = len(states)
      r = s['request']
      if r.method in model_free.GREEDY:  # batched per (method, parameters), cut per request
        greedy.setdefault((r.method, self.params_for(r)), []).append(i)
        continue
      t1 = time.perf_counter()
      entries = self.rank_baseline(r.method, [cands[i]], self.params_for(r), r.list_length)[0]
      s['timing']['rerank'] = time.perf_counter() - t1
      s['results'] = _columns(model_free.scored(cands[i], entries, r.method))
    for (method, params), members in greedy.items():
      t1 = time.perf_counter()
      runs = self.rank_baseline(method, [cands[i] for i in members], params, LENGTH)
      seconds = time.perf_counter() - t1
      self._observe('rerank', seconds)
      for i, entries in zip(members, runs):
        states[i]['timing']['rerank'] = seconds
        length = states[i]['request'].list_length
        states[i]['results'] = _columns(model_free.scored(cands[i], entries[:length], method))


def _columns(scored: list) -> tuple:
  """(photo ids, scores, objectives, groups, category names) of a model-free list."""
  n = len(scored)
  return ([p for p, _, _ in scored], [s for _, s, _ in scored], [o for _, _, o in scored],
          [-1] * n, [None] * n)
