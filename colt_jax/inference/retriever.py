"""CoLT inference (Alg. 2): the one path that evaluation, the demo, the benchmark and users run.

A `Retriever` holds g (Eq. 1; None = "without SCL"), phi (Eq. 4) and the inference settings
(`inference/settings.py`). For a query feature h_q and candidate photos it re-encodes the
candidates with g, orders them by cosine similarity to h_q, keeps phi's N, labels every token
with phi and builds the ranked list with post-processing t (Eq. 6, then its continuation up
to the list length), in the jitted cores of `inference/cores.py`.

Candidates come from one of the two protocols (`protocols`):
* `search(query)` / `search_batch(queries)` / `search_rows(queries)`: the N photos of an indexed
  collection (`index(store)`) most similar to h_q, by exact search over h^ or an engine (the
  paper's protocol, and the public API);
* `rank(query, features, ids)` / `rank_batch(...)`: a given candidate set (the official
  protocol's per-topic pool).

A list is never empty: when phi labels every candidate irrelevant and nothing may fill the
list, it holds the single most similar candidate (a run file must name every topic). A model
directory (`save_pretrained`, `from_pretrained`; `inference/model_dirs.py`) holds g, phi and
the settings. Features of another dimension or encoder than the model's are refused before the
model runs (`inference/encoder_checks.py`). Queries are features [B, d], texts (`search_text`:
f's text tower) or photos (`search_image`: f's image tower; `inference/query_encoding.py`).

A method beyond the paper subclasses `InferenceSettings` with its fields and `Retriever` with
the lists it makes from phi's outputs (`_token_lists`, `_search_lists`), what it keeps beside
phi (`save_beside`, `model_dir_arguments`) and the names of its labels (`label_names`);
`train.method_registry` names the pair. `from_checkpoints` and `from_pretrained` build the
class of the settings' method (`retriever_class`), and a Retriever refuses settings another
class runs.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Optional, Sequence, Type

import jax.numpy as jnp
import numpy as np

from colt_jax import encoders
from colt_jax.data import features as features_lib
from colt_jax.engines import approximate as engines
from colt_jax.engines import exact as search_lib
from colt_jax.engines import saved_engines
from colt_jax.inference import cores
from colt_jax.inference import encoder_checks
from colt_jax.inference import model_dirs
from colt_jax.inference import pool_ranking
from colt_jax.inference import query_encoding
from colt_jax.inference import settings as settings_lib
from colt_jax.inference import store_search as store_search_lib
from colt_jax.inference.search_result import SearchResult
from colt_jax.train import method_registry
from colt_jax.train import restore
from colt_jax.util import host_memory
from colt_jax.util.errors import InputError


class Retriever(pool_ranking.PoolRanking):
  """CoLT (Alg. 2): g, phi and the inference settings; see the module docstring. Ranking a
  given pool (the official protocol): `pool_ranking.PoolRanking`."""

  def __init__(self, classifier: restore.ClassifierBundle,
               reencoder: Optional[restore.ReEncoderBundle] = None,
               settings: Optional[settings_lib.InferenceSettings] = None,
               category_names: Optional[Sequence[str]] = None,
               text_encoder: Optional[dict] = None, source: str = '',
               encoder: Optional[str] = None):
    host_memory.keep_freed_buffers()  # its batched calls reuse their host buffers
    self.classifier = classifier
    self.reencoder = reencoder
    self.source = source or classifier.path  # the model directory (or phi's workdir)
    # The encoder f of the training features: given, else recorded with phi or g (None:
    # unknown, e.g. an older checkpoint).
    self.encoder = encoder or encoder_checks.trained_on(classifier, reencoder, self.source)
    self.settings = settings or settings_lib.InferenceSettings()
    runs = retriever_class(self.settings)
    if not isinstance(self, runs):
      raise TypeError(f'{type(self.settings).__name__} are run by {runs.__name__}, not '
                      f'{type(self).__name__}: build it with that class, from_checkpoints or '
                      'from_pretrained')
    space = classifier.space
    local = classifier.config.label_scheme == 'local'
    if category_names is None and not local:
      category_names = classifier.category_names  # the training vocabulary saved with phi
    if category_names is None:
      prefix = 'group' if local else 'category'
      category_names = [f'{prefix} {i}' for i in range(space.num_categories)]
    if len(category_names) != space.num_categories:
      raise InputError(f'{len(category_names)} category names for a classifier of '
                       f'{space.num_categories} categories')
    self.category_names = tuple(str(n) for n in category_names)
    self._check_settings()
    self._index = None
    self._engine = None
    self._photo_ids = None
    self._photo_features = None
    self.text_encoder = text_encoder  # how to load f's towers (encoders.text_encoder_spec)
    self._queries = query_encoding.QueryEncoders()  # f's towers, loaded on first use
    self._store = None  # (path, encoder) of the indexed store

  def _check_settings(self) -> None:
    """Refuses settings phi cannot run: Eq. 6 reads one phi's labels, not an ensemble's."""
    c = self.classifier
    if c.members:
      raise InputError(f'{self.source or "the model"}: an ensemble of {c.members} phi has no '
                       "one phi's labels for Eq. 6")

  @property
  def label_names(self) -> tuple:
    """The name of each label of a list (`SearchResult.categories`): the categories, then
    'irrelevant' and 'query' (LabelSpace)."""
    return self.category_names + ('irrelevant', 'query')

  @property
  def named_labels(self) -> int:
    """Labels below this name a category (a group for a method's lists); those above
    (irrelevant, query, ...) name none."""
    return len(self.category_names)

  # -- construction

  @classmethod
  def _build(cls, arguments: dict, extra: Callable[[type], dict] = lambda klass: {}):
    """The class that runs `arguments['settings']` (`retriever_class`; `cls` itself when that
    is no subclass of it) built from `arguments` and what `extra(class)` adds."""
    klass = retriever_class(arguments['settings'])
    klass = klass if issubclass(klass, cls) else cls
    return klass(**arguments, **extra(klass))

  @classmethod
  def from_checkpoints(cls, scl_checkpoint: Optional[str], ttc_checkpoint: str,
                       settings: Optional[settings_lib.InferenceSettings] = None,
                       ttc_step: Optional[int] = None,
                       category_names: Optional[Sequence[str]] = None) -> 'Retriever':
    """From trainer workdirs (`model_dirs.load_checkpoints`: `scl_checkpoint` empty or None is
    "without SCL"; several comma-separated phi workdirs are an ensemble)."""
    return cls._build(model_dirs.load_checkpoints(scl_checkpoint, ttc_checkpoint, settings,
                                                  ttc_step, category_names))

  @classmethod
  def from_pretrained(cls, model_dir: str) -> 'Retriever':
    """From a model directory written by `save_pretrained` (`model_dirs.load_model_dir`)."""
    arguments, info = model_dirs.load_model_dir(model_dir)
    return cls._build(arguments, lambda klass: klass.model_dir_arguments(model_dir, info))

  @classmethod
  def model_dir_arguments(cls, model_dir: str, info: dict) -> dict:
    """The constructor's arguments beyond g, phi and the settings that a model directory
    holds (`save_beside`; `info`: its model.json): none for the paper's Retriever."""
    del model_dir, info
    return {}

  def save_beside(self, path: Callable[[str], str]) -> dict:
    """Writes what the Retriever keeps beside phi in a model directory (its files under
    `path(name)`) and returns the keys it adds to model.json: nothing for the paper's."""
    del path
    return {}

  def save_pretrained(self, model_dir: str, store: str = '') -> str:
    """Writes g, phi (orbax checkpoints with their configs), the settings and what the
    Retriever keeps beside them (`save_beside`) to `model_dir`, whole or not at all
    (`model_dirs.save_model_dir`; `store`: the feature store it was made for,
    `model_dirs.recorded_store`); its path."""
    return model_dirs.save_model_dir(self, model_dir, store)

  def with_settings(self, **changes) -> 'Retriever':
    """A copy with some inference settings changed (g, phi and the index are shared)."""
    other = copy.copy(self)
    other.settings = dataclasses.replace(self.settings, **changes)
    other._check_settings()  # pylint: disable=protected-access
    return other

  @property
  def collection_index(self) -> Optional[search_lib.ExactIndex]:
    """The exact index over the indexed collection's h^ (None before `index`)."""
    return self._index

  @property
  def num_images(self) -> int:
    """N: candidates per query that phi sees."""
    return self.classifier.config.num_images

  @property
  def feature_dim(self) -> int:
    """d of the features (photos and queries) the model takes."""
    return self.classifier.feature_dim

  @property
  def _encoder_name(self) -> Optional[str]:
    """The model's encoder for messages: `encoder`, else its text tower's (model.json)."""
    return self.encoder or encoder_checks.spec_name(self.text_encoder)

  def check_dim(self, dim: int, what: str = 'the features') -> None:
    """Refuses features of another dimension than the model's, naming both."""
    if int(dim) != self.feature_dim:
      raise encoder_checks.mismatch_error(self.source, self.feature_dim, self._encoder_name,
                                          dim, None, what)

  def check_store(self, store: features_lib.FeatureStore) -> None:
    """Refuses a store of another dimension or another encoder than the model's (module
    docstring), or, for per-view token parts, of other views: one line naming both."""
    where = f'the store {store.meta.get("path", "")}'.rstrip()
    store_f = str(store.meta['encoder']) if store.meta.get('encoder') else None
    if self.encoder and store_f:
      differs = not encoder_checks.same_encoder(self.encoder, store_f)
    else:  # an older model: the text tower it was saved with, if any
      mine, theirs = encoder_checks.spec_name(self.text_encoder), encoder_checks.spec_name(
          encoders.text_encoder_spec(store.meta))
      differs = bool(mine and theirs and not encoder_checks.same_encoder(mine, theirs))
    if differs or int(store.dim) != self.feature_dim:
      raise encoder_checks.mismatch_error(self.source, self.feature_dim, self._encoder_name,
                                          store.dim, store_f, where)
    self.classifier.check_store(store)

  def reencode(self, features: np.ndarray) -> np.ndarray:
    """h^ (Eq. 1) of [n, d] photo features; the features themselves without g."""
    features = np.asarray(features, np.float32)
    return features if self.reencoder is None else self.reencoder(features)

  # -- the collection protocol: search

  def index(self, store: features_lib.FeatureStore,
            engine: Optional[engines.EngineSpec] = None) -> 'Retriever':
    """Indexes the store's photos (re-encoded once) for `search`; returns self. A store of
    another dimension or encoder is refused (`check_store`). The store's encoder becomes the
    text (and, for CLIP, image) tower of `search_text` and `search_image` unless the model
    names one. `engine`: the candidate engine over h^ (`colt_jax.engines.approximate`; default
    exact)."""
    self.check_store(store)
    self.text_encoder = self.text_encoder or encoders.text_encoder_spec(store.meta)
    self.index_features(np.asarray(store.photos), [str(p) for p in store.photo_ids], engine)
    self._store = (str(store.meta.get('path', '')), str(store.meta.get('encoder', '')))
    return self

  def store_search(self) -> store_search_lib.StoreSearch:
    """The indexed collection's query towers and candidate search (h^: exact, or the engine)
    without phi: what the post-processing methods rank (`inference/store_search.py`)."""
    if self._index is None:
      raise InputError('Retriever.store_search needs a collection: call index(store) first')
    return store_search_lib.StoreSearch(self._index, self._photo_ids, self.text_encoder,
                                        self._engine, self._queries, self._store, self.source,
                                        photos=self._photo_features)

  # -- text queries

  def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised features [B, d] of text queries by f's text tower."""
    return self._queries.encode_texts(self.text_encoder, texts)

  def text_tower(self):
    """f's text tower as the queries are encoded with it (loaded on first use)."""
    return self._queries.runner(self.text_encoder, 'queries').encoder

  def encode_images(self, images: Sequence) -> np.ndarray:
    """L2-normalised features [B, d] of query photos (paths or PIL images) by f's image tower
    (`QueryEncoders.encode_images`)."""
    return self._queries.encode_images(self.text_encoder, images, self._store, self.source)

  def search_images(self, images: Sequence) -> list:
    """`SearchResult` per query photo (path or PIL image) over the indexed collection (Alg. 2
    after f's image tower): photos like it, diverse."""
    if self._index is None:
      raise InputError('Retriever.search needs a collection: call index(store) first')
    images = list(images)
    return self.search_batch(self.encode_images(images)) if images else []

  def search_image(self, image) -> SearchResult:
    """The ranked list of one query photo (a file path or a PIL image) over the indexed
    collection; the same result type as `search_text`."""
    return self.search_images([image])[0]

  def search_texts(self, texts: Sequence[str]) -> list:
    """`SearchResult` per text query over the indexed collection (Alg. 2 after f's text
    tower)."""
    return self.search_batch(self.encode_queries(texts))

  def search_text(self, text: str) -> SearchResult:
    """The ranked list of one text query ("big ben") over the indexed collection."""
    return self.search_texts([text])[0]

  def index_features(self, photos: np.ndarray, photo_ids: Sequence[str],
                     engine: Optional[engines.EngineSpec] = None) -> 'Retriever':
    if len(photo_ids) != photos.shape[0]:
      raise InputError(f'{photos.shape[0]} photo features but {len(photo_ids)} ids')
    self.check_dim(np.shape(photos)[-1], 'a photo')
    hat = self.reencode(photos)
    self._engine = None
    if engine is not None and engine.name != 'exact':
      self._engine = saved_engines.build(engine, hat)
    index = search_lib.ExactIndex(hat)
    if min(self.num_images, index.num_rows) > index.chunk_rows:  # a chunk must hold N rows
      index = search_lib.ExactIndex(hat, max_chunk_rows=index.num_rows)
    self._index = index
    self._photo_ids = tuple(photo_ids)
    self._photo_features = photos  # f's, a photo query's feature (StoreSearch.photo_query)
    return self

  def _engine_rows(self, queries: np.ndarray) -> tuple:
    """`search_rows` with an approximate engine: its top N, re-ordered by exact cosine, then
    phi and Eq. 6 as `rank` runs them. A batch that repeats a query (a padded one) does each
    distinct query's work once; phi still runs at the batch's size (its compiled shape)."""
    return engines.distinct_rows(
        queries, lambda distinct: self._engine_rows_of(distinct, pad_to=len(queries)))

  def _engine_rows_of(self, queries: np.ndarray, pad_to: int = 0) -> tuple:
    n = min(self.num_images, self._index.num_rows)
    _, rows = self._engine.search(queries, n)
    rows = np.asarray(rows)
    hat = np.asarray(self._index.rows(np.maximum(rows, 0)))
    feats = [hat[b][rows[b] >= 0] for b in range(len(rows))]
    ids = [[str(r) for r in rr if r >= 0] for rr in rows]
    results = self._rank_pools(queries, feats, ids, reencoded=True, pad_to=pad_to)[0]
    length = self.settings.list_length
    out_rows = np.full((len(rows), length), -1, np.int64)
    out_scores = np.full((len(rows), length), -np.inf, np.float32)
    out_labels = np.full((len(rows), length), -1, np.int64)
    for b, r in enumerate(results):
      m = len(r.photo_ids)
      out_rows[b, :m] = [int(p) for p in r.photo_ids]
      out_scores[b, :m] = r.scores
      out_labels[b, :m] = r.categories
    return out_rows, out_scores, out_labels

  def search_rows(self, queries: np.ndarray) -> tuple:
    """(rows [B, L] of the indexed collection, -1 = none; scores [B, L]; labels [B, L]) for
    L2-normalised query features [B, d]: the whole of Alg. 2 in one jitted call per batch."""
    if self._index is None:
      raise InputError('Retriever.search needs a collection: call index(store) first')
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    self.check_dim(queries.shape[-1], 'a query')
    if self._engine is not None:
      return self._engine_rows(queries)
    ix = self._index
    n = min(self.num_images, ix.num_rows)
    outs = []
    for start, stop, size in cores.batches(queries.shape[0]):
      out = self._search_lists(cores.pad_rows(queries[start:stop], size), n)
      outs.append([np.asarray(a)[:stop - start] for a in out])
    return tuple(np.concatenate(parts) for parts in zip(*outs))

  def _search_lists(self, queries: np.ndarray, n: int) -> tuple:
    """`search_rows` of a padded batch of queries [B, d] over the n most similar rows: exact
    search, phi and t in one jitted call (`cores.search_and_rank`): (rows, scores, labels)
    [B, L]."""
    ix, c = self._index, self.classifier
    static, threshold = cores.static_settings(self.settings)
    return cores.search_and_rank(c.params, jnp.asarray(queries), ix.chunks, threshold,
                                 module=c.module, space=c.space, settings=static, n=n,
                                 num_rows=ix.num_rows, num_images=self.num_images)

  def search_batch(self, queries: np.ndarray) -> list:
    """`SearchResult` per query feature [B, d] over the indexed collection."""
    rows, scores, labels = self.search_rows(queries)
    ids = self._photo_ids
    return [self._result([ids[r] for r in rr if r >= 0], s, l)
            for rr, s, l in zip(np.asarray(rows).tolist(), scores, labels)]

  def search(self, query_feature: np.ndarray) -> SearchResult:
    """The ranked list for one L2-normalised query feature [d]."""
    return self.search_batch(np.asarray(query_feature)[None])[0]

  # -- the pool protocol: given candidates

  def _result(self, ids, scores, labels) -> SearchResult:
    n = len(ids)
    cats = tuple(np.asarray(labels)[:n].tolist())  # Python ints and floats, in one C call each
    names = self.label_names
    return SearchResult(photo_ids=tuple(ids), categories=cats,
                        category_names=tuple(names[c] for c in cats),
                        scores=tuple(np.asarray(scores)[:n].tolist()))


def retriever_class(settings: settings_lib.InferenceSettings) -> Type[Retriever]:
  """The Retriever class that runs `settings`: their method's (`method_registry`; the
  paper's for InferenceSettings), imported by path."""
  return method_registry.retriever_class(method_registry.method_of(settings))
