"""The model-free methods' lists in the service (`searcher.Searcher`'s stage 3): one candidate
search for every request of a batch (`StoreSearch.candidates`: the Retriever's engine, else its
exact index over h^; without a model, the store's own features), a query photo left out of its
own candidates, then `evaluation.rank_baseline` (the code `experiments/evaluate.py` scores)
over each request's candidates, mmr, msd and dpp batched per list length and parameters and
padded to a fixed batch size. Each photo's score is its cosine similarity to the query, as
colt's is (`model_free.scored`); mmr's, msd's and dpp's own objective is `objective`."""
from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

import numpy as np

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.service import schemas


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
    """[(photo id, score)] per candidate list, by `evaluation.rank_baseline`; the batch of
    mmr, msd or dpp is padded to a fixed size like the other batched calls."""
    n = len(cands)
    size = self.padded(n) if method in model_free.GREEDY else n
    cands = [dataclasses.replace(cands[b] if b < n else cands[0], topic=b)
             for b in range(size)]
    run = evaluation.rank_baseline(method, cands, params, k=length)
    return [run[b] for b in range(n)]

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
      if r.method in model_free.GREEDY:  # batched per (method, list length, parameters)
        greedy.setdefault((r.method, r.list_length, self.params_for(r)), []).append(i)
        continue
      t1 = time.perf_counter()
      entries = self.rank_baseline(r.method, [cands[i]], self.params_for(r), r.list_length)[0]
      s['timing']['rerank'] = time.perf_counter() - t1
      s['results'] = _columns(model_free.scored(cands[i], entries, r.method))
    for (method, length, params), members in greedy.items():
      t1 = time.perf_counter()
      runs = self.rank_baseline(method, [cands[i] for i in members], params, length)
      seconds = time.perf_counter() - t1
      self._observe('rerank', seconds)
      for i, entries in zip(members, runs):
        states[i]['timing']['rerank'] = seconds
        states[i]['results'] = _columns(model_free.scored(cands[i], entries, method))


def _columns(scored: list) -> tuple:
  """(photo ids, scores, objectives, groups, category names) of a model-free list."""
  n = len(scored)
  return ([p for p, _, _ in scored], [s for _, s, _ in scored], [o for _, _, o in scored],
          [-1] * n, [None] * n)
