"""How many cells an IVF engine searches: the fewest that reach a target recall against exact
search (`tune_nprobe`), measured on sample rows of the collection as queries
(`sample_neighbours`); `recall` of a search against the exact top-n. `colt_jax.engines.approximate` uses
these when an engine is built with `target_recall`, and re-exports them."""
from __future__ import annotations

from typing import Optional

from absl import logging
import numpy as np

IVF_ENGINES = ('faiss-ivf', 'faiss-ivfsq', 'faiss-ivfpq')  # engines with cells to probe
TUNE_QUERIES = 100  # sample rows of the collection that pick nprobe for a target recall


def recall(found: np.ndarray, exact: np.ndarray) -> float:
  """Mean over queries of |found_i & exact_i| / |exact_i| (row indices; -1 ignored)."""
  hits = [len(set(f[f >= 0].tolist()) & set(e[e >= 0].tolist())) / max(1, int((e >= 0).sum()))
          for f, e in zip(np.asarray(found), np.asarray(exact))]
  return float(np.mean(hits))


def nprobe_ladder(nlist: int) -> list:
  """The nprobe values `tune_nprobe` tries, in order: 1, 2, 3, 4, 6, 8, 12, 16, ... (powers
  of two and three times them) below `nlist`, then `nlist` (every cell)."""
  steps = {1 << k for k in range(32)} | {3 << k for k in range(32)}
  return sorted(p for p in steps if p < nlist) + [max(1, nlist)]


def sample_neighbours(rows: np.ndarray, n: int, count: int = TUNE_QUERIES, seed: int = 0,
                      chunk: int = 1 << 18) -> tuple:
  """`count` sample rows of `rows` [M, d] as queries, with their exact top-n among the other
  rows (a NumPy scan, `chunk` rows at a time): (queries [B, d], exact rows [B, min(n, M - 1)],
  the queries' own rows [B]) for `tune_nprobe(..., exclude=own)`."""
  rows = np.asarray(rows, np.float32)
  m = rows.shape[0]
  own = np.sort(np.random.default_rng(seed).choice(m, min(count, m), replace=False))
  queries = rows[own]
  k = min(n + 1, m)  # the query's own row among them
  best_s = np.zeros((len(own), 0), np.float32)
  best_i = np.zeros((len(own), 0), np.int64)
  for start in range(0, m, chunk):
    part = rows[start:start + chunk]
    s = np.concatenate([best_s, queries @ part.T], 1)
    i = np.concatenate([best_i, np.broadcast_to(np.arange(start, start + len(part)),
                                                (len(own), len(part)))], 1)
    top = (np.argpartition(-s, k - 1, axis=1)[:, :k] if s.shape[1] > k
           else np.arange(s.shape[1])[None].repeat(len(own), 0))
    best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
  best_i = np.take_along_axis(best_i, np.argsort(-best_s, axis=1, kind='stable'), 1)
  exact = np.stack([r[r != o][:k - 1] for r, o in zip(best_i, own)])
  return queries, exact.reshape(len(own), k - 1), own


def tune_nprobe(engine, queries: np.ndarray, exact_rows: np.ndarray,
                target_recall: float, *, exclude: Optional[np.ndarray] = None,
                nprobes: Optional[list] = None) -> dict:
  """Sets `engine` (an IVF `FaissIndex`) to search the fewest cells whose recall of
  `exact_rows` [B, n] (the exact top-n of `queries` [B, d]) reaches `target_recall`, trying
  `nprobes` in order (default `nprobe_ladder`). When none reaches it (quantised scores cap the
  recall): the fewest cells that give the best recall tried, and `reached` is False.
  `exclude` [B]: a row each answer leaves out (a query that is itself a row). Returns the
  choice: nprobe, recall, target_recall, reached, n, queries and tried ([[nprobe, recall]])."""
  if engine.spec.name not in IVF_ENGINES:
    raise ValueError(f'tune_nprobe needs an IVF engine ({", ".join(IVF_ENGINES)}), not '
                     f'{engine.spec.name}')
  queries, exact_rows = np.asarray(queries, np.float32), np.asarray(exact_rows)
  if exact_rows.ndim != 2 or len(exact_rows) != len(queries):
    raise ValueError(f'expected exact rows [{len(queries)}, n], got {exact_rows.shape}')
  n = exact_rows.shape[1]
  nprobes = list(nprobes or nprobe_ladder(engine.params['nlist']))
  tried = []
  for nprobe in nprobes:
    engine.set_nprobe(nprobe)
    if n == 0:  # nothing to find (a collection of one row)
      tried.append([nprobe, 1.0])
      break
    found = engine.search(queries, n + (exclude is not None))[1]
    if exclude is not None:
      found = np.stack([f[f != e][:n] for f, e in zip(found, np.asarray(exclude))])
    tried.append([nprobe, recall(found, exact_rows)])
    if tried[-1][1] >= target_recall:
      break
  chosen = tried[-1]
  reached = chosen[1] >= target_recall
  if not reached:
    chosen = next(t for t in tried if t[1] >= max(r for _, r in tried))
    engine.set_nprobe(chosen[0])
    logging.warning('%s: recall@%d reaches %.3f at most (nprobe %d), short of the target %.3f',
                    engine.spec.name, n, chosen[1], chosen[0], target_recall)
  return {'nprobe': int(chosen[0]), 'recall': float(chosen[1]),
          'target_recall': float(target_recall), 'reached': bool(reached), 'n': int(n),
          'queries': int(len(queries)), 'tried': tried}
