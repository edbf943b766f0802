"""Alg. 2 over a given candidate pool (the official protocol: each topic's own photos), as a
part of the `Retriever`: g re-encodes the pool, the candidates are ordered by similarity to
h_q, phi labels phi's N and post-processing t (Eq. 6) builds the list (`rank`,
`rank_batch`); what phi says of a pool (`candidate_labels`).
"""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from colt_jax.inference import cores
from colt_jax.inference.search_result import SearchResult
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.inputs.examples import token_sequences


class PoolRanking:
  """The Retriever's methods over given pools (it supplies `reencode`, `settings`, `classifier`,
  `num_images`, `label_names` and `_result`)."""

  def rank_batch(self, queries: np.ndarray, features: Sequence[np.ndarray],
                 photo_ids: Sequence[Sequence[str]]) -> list:
    """`SearchResult` per query [B, d], each over its own candidates (raw f features [n_b, d]
    and ids): re-encoded, ordered by similarity, phi's N kept."""
    return self._rank_pools(queries, features, photo_ids)[0]

  def candidate_labels(self, query_feature: np.ndarray, features: np.ndarray,
                       photo_ids: Sequence[str]) -> dict:
    """phi's label (Eq. 4, with the inference threshold) of each of the N candidates it sees
    for one query, as `rank` computes them: photo id -> category name ('irrelevant' too)."""
    _, (seq_ids, labels) = self._rank_pools(np.asarray(query_feature)[None], [features],
                                            [photo_ids])
    return {p: self.label_names[int(c)] for p, c in zip(seq_ids[0], labels[0])}

  def _rank_pools(self, queries, features, photo_ids, reencoded: bool = False,
                  pad_to: int = 0) -> tuple:
    """(results, (token photo ids per query, phi's labels of those tokens per query));
    `reencoded`: the features are h^ already; `pad_to`: phi's batch at least this many rows
    (at most cores.BATCH)."""
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    self.check_dim(queries.shape[-1], 'a query')
    for f in features:
      if len(f):
        self.check_dim(np.shape(f)[-1], 'a candidate photo')
    sizes = [len(f) for f in features]
    hat = np.concatenate([np.asarray(f, np.float32) for f in features])
    if not reencoded:
      hat = self.reencode(hat)
    cands, start = [], 0
    for b, size in enumerate(sizes):
      cands.append(TopicCandidates(topic=b, photo_ids=tuple(photo_ids[b]), flickr_ranks=None,
                                   query=queries[b], features=hat[start:start + size]))
      start += size
    seqs = token_sequences(cands, self.num_images)
    results, token_labels = [], []
    for start, stop, size in cores.batches(len(cands), pad_to):
      picks, labels = self._token_lists(cores.pad_rows(seqs.tokens[start:stop], size),
                                        cores.pad_rows(seqs.mask[start:stop], size),
                                        cores.pad_rows(seqs.scores[start:stop], size))
      picks, labels = np.asarray(picks), np.asarray(labels)
      for i in range(stop - start):
        b = start + i
        pp = [int(p) for p in picks[i] if p >= 0]
        results.append(self._result([seqs.photo_ids[b][p] for p in pp], seqs.scores[b, pp],
                                    labels[i, pp]))
        token_labels.append(labels[i, :len(seqs.photo_ids[b])])
    return results, ([list(ids) for ids in seqs.photo_ids], token_labels)

  def _token_lists(self, tokens: np.ndarray, mask: np.ndarray, scores: np.ndarray) -> tuple:
    """(picks [B, L] positions among the N images, -1 = none; labels [B, N]) of padded token
    sequences (tokens [B, 1 + N, d], mask [B, 1 + N], scores [B, N]): phi's labels (Eq. 4) and
    post-processing t (Eq. 6), one jitted call (`cores.rank_tokens`)."""
    static, threshold = cores.static_settings(self.settings)
    c = self.classifier
    return cores.rank_tokens(c.params, jnp.asarray(tokens), jnp.asarray(mask),
                             jnp.asarray(scores), threshold, module=c.module, space=c.space,
                             settings=static)

  def rank(self, query_feature: np.ndarray, features: np.ndarray,
           photo_ids: Sequence[str]) -> SearchResult:
    """The ranked list of one query over its own candidate photos."""
    return self.rank_batch(np.asarray(query_feature)[None], [features], [photo_ids])[0]
