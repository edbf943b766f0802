"""The batched search behind the service: a batch of requests through the Retriever's jitted
path, or the model-free methods, padded to a few fixed batch sizes so that nothing compiles
once they are warmed up.

`Searcher(source, catalog, max_batch_size=...)` holds an indexed `Retriever` (colt and the
model-free methods over its candidates), or a `StoreSearch` alone (a store without a model:
the model-free methods over the store's own features). `run(batch)` (the
`DynamicBatcher`'s handler) answers a batch of `Pending` requests (payload: a validated
`schemas.SearchRequest`), each future set to an answer whose ranked photos are five columns
(photo ids, scores, objectives, groups, category names: lists); `response(answer)` makes it the
JSON object of
`schemas.SearchResponse` (the photos' titles and files from the catalog). That second step is
left to the caller (the service's event loop), so that the worker thread, which runs the model,
starts the next batch sooner:

1. encode: the text queries through f's text tower (`StoreSearch.encode_queries`), in groups
   whose tokens have one shape alone (`_token_shape`: MiniLM pads a batch to its longest
   text's bucket), so a text's feature never depends on the texts batched with it; uploaded
   images through its image tower (CLIP stores); a photo_id's feature is the store's own;
2. colt: requests of the same (k, X) together through
   `Retriever.with_settings(...).search_rows`, the one inference path (exact search or the
   Retriever's engine, g's h^, phi, Eq. 6) that `search_batch` and `search_text` wrap, its
   arrays made the answer's columns with one `tolist` each per batch (not a `SearchResult`
   per request first: less of the work between two batches). The list is computed at its
   full length (`settings.LIST_LENGTH`) and cut to the request's `list_length`: Eq. 6's head,
   then the list's continuation, so that a list holds k photos whenever the candidates do
   (a head shorter than k, when phi labels few categories, is filled as search.py fills it),
   a query photo left out of it first;
3. topk / mmr / msd / dpp / umons: `baseline_lists.BaselineLists`.
A photo's score is its cosine similarity to the query over the features searched, for every
method.

Every batched call is padded (repeating its first query) to the smallest of `batch_sizes`
(2, 4, 8, 12, 16, 24, 32, 48, ..., up to max_batch_size: `LADDER`, fine enough that a batch
pads at most a third of its rows) that holds it; `warm_up` compiles each of them for the
settings the service expects, so nothing compiles while serving. A lone request runs at 2
rows, like `Retriever.search` alone (XLA's CPU backend computes a one-row matrix product by
another kernel, whose float32 sums differ in their last bits): per row, every padded size
gives the same bits on this machine's CPU, so a request's list is the same alone as in any
batch (tested up to float32 rounding, which is what holds on every machine).
An approximate engine finding fewer candidates than asked gives mmr, msd and dpp another
shape (a compilation on first use)."""
from __future__ import annotations

import dataclasses
import itertools
import math
import time
from typing import Optional, Sequence

import numpy as np

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import model_free
from colt_jax.inference import retriever as retriever_lib
from colt_jax.inference import settings as settings_lib
from colt_jax.inference import store_search
from colt_jax.service import baseline_lists
from colt_jax.service import schemas
from colt_jax.service.photos import PhotoCatalog
from colt_jax.util.errors import InputError

MAX_BATCH_SIZE = 64  # the Retriever's own batch (inference.cores.BATCH): one jitted call per batch
# The padded batch sizes, up to MAX_BATCH_SIZE: a batch of n runs at the smallest that holds
# it (17 at 24, not 32); each is compiled at start. It starts at 2: a lone query runs at 2 rows
# as in the Retriever (module docstring).
LADDER = (2, 4, 8, 12, 16, 24, 32, 48, 64)
LENGTH = baseline_lists.LENGTH  # mmr, msd and dpp lists are computed this long, then cut
# Rounds of the warm-up's timing of every padded size (`Searcher.warm_up`): each size's best.
COST_ROUNDS = 3
# Words of the probe texts whose token shapes (`Searcher._token_shape`) the warm-up compiles;
# FIRST_WORDS: those a service warming up 'first' compiles before it is ready (queries of up to
# 16 words), the others in the background (warm_up.py).
WORDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
FIRST_WORDS = (1, 2, 4, 8, 16)


def batch_sizes(max_batch_size: int) -> tuple:
  """The padded sizes (rows per batched call): `LADDER`'s below `max_batch_size`, then it
  (at least 2)."""
  if not 1 <= max_batch_size <= MAX_BATCH_SIZE:
    raise InputError(f'--max_batch_size must be in [1, {MAX_BATCH_SIZE}], got {max_batch_size}')
  return tuple(s for s in LADDER if s < max_batch_size) + (max(max_batch_size, LADDER[0]),)


@dataclasses.dataclass(frozen=True)
class ListShape:
  """The settings a colt call is compiled for: Eq. 6's k, X and the list length."""
  k: int = 20
  per_category: int = 1
  list_length: int = settings_lib.LIST_LENGTH

  @classmethod
  def parse(cls, text: str, flag: str = '--warm_settings') -> 'ListShape':
    """'k:X:L', e.g. '20:1:50'."""
    parts = text.split(':')
    try:
      k, x, length = (int(p) for p in parts)
    except ValueError:
      raise InputError(f'{flag}: expected k:per_category:list_length (e.g. 20:1:50), got '
                       f'{text!r}') from None
    try:
      schemas.SearchRequest(vector=[1.0], k=k, per_category=x, list_length=length)
    except Exception as e:  # pylint: disable=broad-except
      message = schemas.error_message(e.errors())[1] if hasattr(e, 'errors') else str(e)
      raise InputError(f'{flag}: {text}: {message}') from None
    return cls(k, x, length)


_pad = baseline_lists.pad


class Searcher(baseline_lists.BaselineLists):
  """Answers batches of search requests with one Retriever, or without a model over one
  store (module docstring)."""

  def __init__(self, source, catalog: Optional[PhotoCatalog] = None, *,
               max_batch_size: int = 32,
               method_params: Optional[evaluation.MethodParams] = None,
               metrics=None):
    if isinstance(source, retriever_lib.Retriever):
      if source.collection_index is None:
        raise InputError('the service needs an indexed Retriever: call index(store) first')
      self.colt, self.search = source, source.store_search()
    elif isinstance(source, store_search.StoreSearch):
      self.colt, self.search = None, source
    else:
      raise TypeError(f'expected an indexed Retriever or a StoreSearch, got {type(source)}')
    self.sizes = batch_sizes(max_batch_size)
    self.batch_seconds = {}  # {padded size: seconds of a colt call}, measured by `warm_up`
    self.num_photos = self.search.num_rows
    self.photo_ids = self.search.photo_ids
    self.catalog = catalog or PhotoCatalog(self.photo_ids)
    self.method_params = method_params or model_free.default_params()  # model_free.json's
    self.num_candidates = model_free.candidate_count(self.method_params, self.num_photos)
    self.metrics = metrics
    self._colts = {}
    self._tables = {}  # ListShape -> `_label_tables`
    # Called with a token shape before its texts are encoded: a background warm-up's wait
    # until it has compiled that shape (warm_up.py); None: nothing to wait for.
    self.token_wait = None

  @property
  def default_method(self) -> str:
    """A request's method when it names none: colt with a model, else model_free.json's."""
    return 'colt' if self.colt is not None else model_free.default_method()

  @property
  def text_queries(self) -> bool:
    return bool(self.search.text_encoder)

  @property
  def dim(self) -> int:
    return self.search.dim

  def padded(self, n: int) -> int:
    return next(s for s in self.sizes if s >= n)

  def colt_for(self, shape: ListShape) -> retriever_lib.Retriever:
    if shape not in self._colts:
      self._colts[shape] = self.colt.with_settings(
          k=shape.k, per_category=shape.per_category, list_length=shape.list_length)
    return self._colts[shape]

  # -- the stages

  def _token_shape(self, text: str) -> tuple:
    """The shapes of one text's tokens alone: texts of equal shapes batch without padding
    each other."""
    encoder = self.search.text_tower()
    arrays = encoder.prepare('queries', [text])
    return tuple(sorted((k, np.shape(v)[1:]) for k, v in arrays.items()))

  def encode(self, texts: Sequence[str]) -> tuple:
    """(features [n, d], seconds per text) of text queries, in groups of one token shape."""
    feats = np.zeros((len(texts), self.dim), np.float32)
    seconds = np.zeros(len(texts))
    groups = {}
    for i, t in enumerate(texts):
      groups.setdefault(self._token_shape(t), []).append(i)
    for key, members in groups.items():
      if self.token_wait is not None:
        self.token_wait(key)
      t0 = time.perf_counter()
      feats[members] = self.search.encode_queries([texts[i] for i in members])
      seconds[members] = time.perf_counter() - t0
      self._observe('encode', seconds[members[0]])
    return feats, seconds

  def search_colt(self, shape: ListShape, queries: np.ndarray) -> tuple:
    """(rows, scores, labels) [n, L] of queries [n, d]: `Retriever.search_rows` (what
    `search_batch` wraps in `SearchResult`s) at a padded size."""
    n = queries.shape[0]
    out = self.colt_for(shape).search_rows(_pad(queries, self.padded(n)))
    return tuple(a[:n] for a in out)

  def _label_tables(self, shape: ListShape) -> tuple:
    """(group, category name) by phi's label + 1 (label -1 included) for a colt list shape,
    as `Retriever.search_batch` names them: the group -1 for a label that is no category or
    group, named as phi names it ('irrelevant', 'query': phi's query class, ...)."""
    if shape not in self._tables:
      colt = self.colt_for(shape)
      limit, names = colt.named_labels, colt.label_names
      groups = [-1] + [c if c < limit else -1 for c in range(len(names))]
      self._tables[shape] = (groups, [None] + list(names))
    return self._tables[shape]

  # -- a batch of requests

  def run(self, batch: list) -> None:
    """Answers a batch of `request_batching.Pending` requests: sets each future to its answer (a
    dict for `response`) or to the error of its part of the batch."""
    start = time.perf_counter()
    if self.metrics is not None:
      self.metrics.batch_size.observe(len(batch))
    refused = [(p, schemas.with_default_method(p.payload, self.default_method)) for p in batch]
    for p, error in refused:  # a request without a method, its params not the default's
      if error:
        p.future.set_exception(InputError(error))
    batch = [p for p, error in refused if not error]
    states = [{'pending': p, 'request': p.payload, 'timing': {
        'queue': start - p.arrived, 'encode': 0.0, 'candidates': 0.0, 'rerank': 0.0},
               'batch_size': 1, 'exclude': schemas.query_photo(p.payload)} for p in batch]
    feats = np.zeros((len(states), self.dim), np.float32)
    for i, s in enumerate(states):
      r = s['request']
      if r.vector is not None:
        feats[i] = np.asarray(r.vector, np.float32)
      elif r.photo_id is not None:
        feats[i] = self.search.photo_query(r.photo_id)
    for kind in ('query', 'image'):
      members = [i for i, s in enumerate(states) if getattr(s['request'], kind) is not None]
      if not members:
        continue
      try:
        if kind == 'query':
          got, seconds = self.encode([states[i]['request'].query for i in members])
        else:
          t0 = time.perf_counter()
          got = self.search.encode_images([schemas.picture(states[i]['request'])
                                           for i in members])
          seconds = [time.perf_counter() - t0] * len(members)
          self._observe('encode', seconds[0])
      except Exception as e:  # pylint: disable=broad-except
        for i in members:
          states[i]['pending'].future.set_exception(e)
        kept = [i for i in range(len(states)) if i not in set(members)]
        states, feats = [states[i] for i in kept], feats[kept]
      else:
        feats[members] = got
        for i, sec in zip(members, seconds):
          states[i]['timing']['encode'] = sec
    groups = {}
    for i, s in enumerate(states):
      r = s['request']
      key = (ListShape(r.k, r.per_category) if r.method == 'colt' else 'baselines')
      groups.setdefault(key, []).append(i)
    for key, members in groups.items():
      try:
        if key == 'baselines':
          self._run_baselines([states[i] for i in members], feats[members])
        else:
          self._run_colt(key, [states[i] for i in members], feats[members])
      except Exception as e:  # pylint: disable=broad-except
        for i in members:
          if not states[i]['pending'].future.done():
            states[i]['pending'].future.set_exception(e)
        continue
      for i in members:
        self._answer(states[i])

  def _run_colt(self, shape: ListShape, states: list, queries: np.ndarray) -> None:
    t0 = time.perf_counter()
    rows, scores, labels = self.search_colt(shape, queries)
    seconds = time.perf_counter() - t0
    self._observe('rerank', seconds)
    # A list's photos come first, then -1 rows (`search_batch` keeps the photos and as many
    # scores and labels); each array is made Python lists in one call.
    counts = (rows >= 0).sum(1).tolist()
    rows, scores, labels = rows.tolist(), scores.tolist(), labels.tolist()
    groups, names = self._label_tables(shape)
    ids = self.photo_ids
    for s, m, rr, ss, ll in zip(states, counts, rows, scores, labels):
      s['timing']['rerank'] = seconds
      s['batch_size'] = len(states)
      if s['exclude'] is not None:  # the query photo leaves its list
        skip = self.search.row_of(s['exclude'])
        kept = [j for j in range(m) if rr[j] != skip]
        rr, ss, ll = ([a[j] for j in kept] for a in (rr, ss, ll))
        m = len(kept)
      m = min(m, s['request'].list_length)  # the full list's first list_length photos
      ll = ll[:m]
      s['results'] = ([ids[r] for r in rr[:m]], ss[:m], [None] * m,
                      [groups[c + 1] for c in ll], [names[c + 1] for c in ll])

  def response(self, answer: dict) -> dict:
    """The JSON object of `schemas.SearchResponse` for an answer of `run` (module
    docstring): each ranked photo with its rank, title and whether it has an image."""
    # Stores without files (synthetic features, a dataset) have no titles and no images:
    # no lookups per photo.
    out = dict(answer)
    columns = zip(itertools.count(1), *answer['results'])
    if self.catalog.has_files:
      title, has_image = self.catalog.title, self.catalog.has_image
      out['results'] = [
          {'rank': rank, 'photo_id': pid, 'score': score, 'objective': objective,
           'group': group, 'category': name, 'title': title(pid), 'has_image': has_image(pid)}
          for rank, pid, score, objective, group, name in columns]
    else:
      out['results'] = [
          {'rank': rank, 'photo_id': pid, 'score': score, 'objective': objective,
           'group': group, 'category': name, 'title': None, 'has_image': False}
          for rank, pid, score, objective, group, name in columns]
    return out

  def _answer(self, state: dict) -> None:
    r, p = state['request'], state['pending']
    timing = {k: round(float(v) * 1000.0, 3) for k, v in state['timing'].items()}
    timing['total'] = round((time.perf_counter() - p.arrived) * 1000.0, 3)
    p.future.set_result({
        'query': r.query, 'photo_id': state['exclude'], 'method': r.method, 'k': r.k, 'per_category': r.per_category,
        'list_length': r.list_length, 'results': state['results'], 'timing_ms': timing,
        'batch_size': state['batch_size']})

  def _observe(self, stage: str, seconds: float) -> None:
    if self.metrics is not None:
      self.metrics.stage.labels(stage).observe(seconds)

  # -- warm-up

  def _seconds(self, shape: ListShape, queries: np.ndarray) -> float:
    t0 = time.perf_counter()
    self.search_colt(shape, queries)
    return time.perf_counter() - t0

  def warm_up(self, shapes: Sequence[ListShape], methods: Sequence[str],
              sizes: Optional[Sequence[int]] = None, words: Sequence[int] = WORDS) -> None:
    """Compiles the padded batch `sizes` (default: every one) of the methods' calls, for
    `shapes` (colt's k and X; lists at full length), and the text tower's token shapes of
    texts of `words` words; times each size's colt call (`batch_seconds`)."""
    sizes = self.sizes if sizes is None else tuple(sizes)
    colt_shapes = list(dict.fromkeys(dataclasses.replace(
        s, list_length=settings_lib.LIST_LENGTH) for s in shapes))
    if self.colt is None:
      colt_shapes = []
    probe = np.zeros((1, self.dim), np.float32)
    probe[0, 0] = 1.0
    if self.text_queries:
      seen = set()
      for n in words:
        text = ' '.join(['photo'] * n)
        key = self._token_shape(text)
        if key not in seen:
          seen.add(key)
          self.encode([text])
    for size in sizes:
      queries = np.repeat(probe, size, 0)
      if 'colt' in methods:
        for shape in colt_shapes:
          self.search_colt(shape, queries)
      if set(methods) & set(model_free.METHODS):
        cands = self.candidates(queries)
        for method in {'topk', 'umons'} & set(methods):  # numpy: nothing compiles per length
          self.rank_baseline(method, cands[:1], self.method_params, LENGTH)
        for method in set(model_free.GREEDY) & set(methods):  # every length: `rank_baseline`
          self.rank_baseline(method, cands, self.method_params, LENGTH)
    if 'colt' in methods and colt_shapes:
      # What a batch of each size costs, compiled (the batcher's cut: request_batching.py): the best
      # of COST_ROUNDS rounds over every size in turn, so that a moment of contention (another
      # process, a collection) does not make one size look dearer than it is for good.
      for _ in range(COST_ROUNDS):
        for size in sizes:
          seconds = self._seconds(colt_shapes[0], np.repeat(probe, size, 0))
          self.batch_seconds[size] = min(self.batch_seconds.get(size, math.inf), seconds)
