"""Search of a feature store without a model: f's query features and the store's candidates.

A `StoreSearch` holds a store's photo features (or a Retriever's h^ of them), their exact
index and, optionally, an approximate engine over them, the photos' ids and how to load the
store's encoder f (`encoders.text_encoder_spec`). It encodes text queries with f's text tower
and query photos with its image tower (CLIP stores), as `Retriever.search_text` and
`search_image` do, and finds each query's most similar photos (`candidates`): what the
post-processing methods (top-k, MMR, MSD, DPP, UMONS: `colt_jax.evaluation.model_free`) rank.

`StoreSearch.from_store(store, engine)` needs no model; `Retriever.store_search()` is the same
object over the Retriever's index, engine and query towers (the candidates colt ranks), so
that the service's baselines and colt share them.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from colt_jax import encoders
from colt_jax.data import features as features_lib
from colt_jax.engines import approximate as engines
from colt_jax.engines import exact as search_lib
from colt_jax.engines import saved_engines
from colt_jax.inference import query_encoding
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.util.errors import InputError


def check_searchable(store: features_lib.FeatureStore, where: str = '') -> None:
  """Refuses a store without photos (one line naming it)."""
  where = where or str(store.meta.get('path', '')) or 'the store'
  if len(store.photo_ids) == 0 or np.shape(store.photos)[0] == 0:
    raise InputError(f'{where}: the store has no photos to search (index a folder with '
                     'data_prep/index_collection.py --images FOLDER --out STORE)')


class StoreSearch:
  """Query encoding and candidate search over one indexed collection (module docstring)."""

  def __init__(self, index: search_lib.ExactIndex, photo_ids: Sequence[str],
               text_encoder: Optional[dict], engine=None,
               queries: Optional[query_encoding.QueryEncoders] = None,
               store: Optional[tuple] = None, source: str = '',
               photos: Optional[np.ndarray] = None):
    if len(photo_ids) != index.num_rows:
      raise InputError(f'{index.num_rows} photo features but {len(photo_ids)} ids')
    self.index = index
    # f's features of the photos, a photo query's feature (`photo_query`): the store's rows
    # (a Retriever's index holds g's h^ of them); None: the index's rows (no model).
    self._photos = photos
    self._rows = None  # photo id -> row, made on the first photo query
    self.engine = engine  # approximate candidate search over the index's rows, or None
    self.photo_ids = tuple(photo_ids)
    self.text_encoder = text_encoder  # how to load f's towers (None: no text tower here)
    self._queries = queries or query_encoding.QueryEncoders()
    self._store = store  # (path, encoder) of the store, for messages
    self.source = source  # the model, or '' without one

  @classmethod
  def from_store(cls, store: features_lib.FeatureStore,
                 engine: Optional[engines.EngineSpec] = None) -> 'StoreSearch':
    """Over the store's own features (f's, no g): exact search, or `engine` built over them."""
    check_searchable(store)
    photos = np.asarray(store.photos, np.float32)
    built = None
    if engine is not None and engine.name != 'exact':
      built = saved_engines.build(engine, photos)
    return cls(search_lib.ExactIndex(photos), [str(p) for p in store.photo_ids],
               encoders.text_encoder_spec(store.meta), built,
               store=(str(store.meta.get('path', '')), str(store.meta.get('encoder', ''))))

  @property
  def dim(self) -> int:
    """d of the features (photos and queries)."""
    return int(self.index.dim)

  @property
  def num_rows(self) -> int:
    return int(self.index.num_rows)

  @property
  def encoder_name(self) -> str:
    """The store's encoder f as its meta.json names it ('clip:...', 'minilm:...'; '' unknown)."""
    return (self._store or ('', ''))[1] or str((self.text_encoder or {}).get('encoder', ''))

  # -- queries

  def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised features [B, d] of text queries by f's text tower."""
    return self._queries.encode_texts(self.text_encoder, texts)

  def text_tower(self):
    """f's text tower as the queries are encoded with it (loaded on first use)."""
    return self._queries.runner(self.text_encoder, 'queries').encoder

  def encode_images(self, images: Sequence) -> np.ndarray:
    """L2-normalised features [B, d] of query photos (paths or PIL images) by f's image tower
    (a CLIP store's; a text store refuses, naming it)."""
    return self._queries.encode_images(self.text_encoder, images, self._store, self.source)

  def row_of(self, photo_id: str) -> Optional[int]:
    """The row of a photo of the store, None when it has no photo of that id."""
    if self._rows is None:
      self._rows = {p: i for i, p in enumerate(self.photo_ids)}
    return self._rows.get(str(photo_id))

  def photo_query(self, photo_id: str) -> np.ndarray:
    """The query feature [d] of a photo of the store: its stored f feature (no encoding)."""
    row = self.row_of(photo_id)
    if row is None:
      raise InputError(f'photo_id: no photo {photo_id!r} in the store')
    if self._photos is not None:
      return np.asarray(self._photos[row], np.float32)
    return np.asarray(self.index.rows(np.asarray([row])), np.float32)[0]

  def check_query_dim(self, dim: int) -> None:
    if int(dim) != self.dim:
      raise InputError(f'a query of {dim} numbers: the store\'s features are {self.dim}-d')

  # -- candidates

  def rows(self, queries: np.ndarray, count: int) -> np.ndarray:
    """The `count` most similar rows [B, count'] of each query [B, d] (the engine's, else
    exact; -1 where an engine finds fewer), most similar first."""
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    self.check_query_dim(queries.shape[-1])
    count = min(count, self.num_rows)
    if self.engine is not None:
      _, rows = self.engine.search(queries, count)
    else:
      _, rows = self.index.search(queries, count)
    return np.asarray(rows)

  def candidates(self, queries: np.ndarray, count: int,
                 exclude: Optional[Sequence[Optional[str]]] = None) -> list:
    """`TopicCandidates` per query [B, d] (topic b): its `count` most similar photos (`rows`)
    and their features, most similar first. `exclude`: a photo id per query (None: none) left
    out of its candidates (a query photo); given, `count` + 1 photos are searched for every
    query (one shape) and each keeps its first `count` others."""
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    rows = self.rows(queries, count + (exclude is not None))
    feats = np.asarray(self.index.rows(np.maximum(rows, 0)))
    out = []
    for b in range(len(rows)):
      keep = rows[b] >= 0
      if exclude is not None:
        skip = self.row_of(exclude[b]) if exclude[b] is not None else None
        keep &= rows[b] != (-2 if skip is None else skip)
        keep &= np.cumsum(keep) <= count
      out.append(TopicCandidates(topic=b, photo_ids=tuple(self.photo_ids[r] for r in rows[b][keep]),
                                 flickr_ranks=None, query=queries[b], features=feats[b][keep]))
    return out
