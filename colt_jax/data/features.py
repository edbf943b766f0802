"""The feature store: precomputed encoder features for one split of a dataset.

One format serves every stage (extraction, SCL, TTC, evaluation). A store is a directory:

    meta.json            encoder, dim, normalisation, dataset, split, source, counts
    photos.npy           float32 [num_photos, dim]
    photo_ids.npy        unicode [num_photos]   (Flickr ids as text)
    queries.npy          float32 [num_topics, dim]
    query_ids.npy        int64   [num_topics]   (topic numbers)
    categories.npy       float32 [num_categories, dim]  (fine-grained description features)
    category_names.npy   unicode [num_categories]        (normalised vocabulary names)

Arrays are plain `.npy` files so that loading is memory-mapped (`np.load(mmap_mode='r')`) and
the store can be read by any tool. Writing is atomic: everything goes to a temporary sibling
directory which is renamed into place only once complete, so a reader never sees a
half-written store.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from colt_jax.util import atomic
from colt_jax.util import diskspace
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

FORMAT = 'colt_jax.features/1'
_ARRAYS = ('photos', 'photo_ids', 'queries', 'query_ids', 'categories', 'category_names')
_NORM_TOL = 1e-3


class FeatureStoreError(InputError):
  """A feature store is missing, malformed, or inconsistent with what is asked of it."""


@dataclasses.dataclass(frozen=True)
class FeatureStore:
  """Features of one split; arrays may be memory-mapped (read-only)."""
  photos: np.ndarray
  photo_ids: np.ndarray
  queries: np.ndarray
  query_ids: np.ndarray
  categories: np.ndarray
  category_names: np.ndarray
  meta: Mapping[str, Any]

  @property
  def dim(self) -> int:
    return int(self.photos.shape[1])

  def photo_index(self) -> dict:
    """Photo id -> row of `photos`."""
    return {str(p): i for i, p in enumerate(self.photo_ids)}

  def query_index(self) -> dict:
    """Topic number -> row of `queries`."""
    return {int(q): i for i, q in enumerate(self.query_ids)}

  def rows_for(self, photo_ids: Sequence[str], index: Optional[dict] = None) -> np.ndarray:
    """Rows of `photos` for the given ids; a clear error names the first unknown id."""
    index = self.photo_index() if index is None else index
    rows = np.empty(len(photo_ids), np.int64)
    for i, p in enumerate(photo_ids):
      try:
        rows[i] = index[str(p)]
      except KeyError:
        raise FeatureStoreError(
            f'{self.meta.get("path", "feature store")}: photo id {p!r} has no feature '
            f'({len(index)} photos in the store)') from None
    return rows

  def query_feature(self, topic: int) -> np.ndarray:
    rows = np.flatnonzero(self.query_ids == int(topic))
    if rows.size != 1:
      raise FeatureStoreError(
          f'{self.meta.get("path", "feature store")}: no query feature for topic {topic}')
    return np.asarray(self.queries[rows[0]])


def make_store(*, photos, photo_ids, queries, query_ids, categories, category_names,
               encoder: str, dataset: str, split: str, source: str,
               normalised: bool = True, extra: Optional[Mapping[str, Any]] = None,
               ) -> FeatureStore:
  """Builds an in-memory store with a complete `meta` sidecar, validating it."""
  photos = np.asarray(photos, np.float32)
  meta = {
      'format': FORMAT, 'encoder': encoder, 'dim': int(photos.shape[-1]),
      'normalisation': 'l2' if normalised else 'none', 'dataset': dataset,
      'split': split, 'source': source,
      'counts': {'photos': int(photos.shape[0]), 'queries': int(len(query_ids)),
                 'categories': int(len(category_names))},
  }
  if extra:
    meta.update(extra)
  store = FeatureStore(
      photos=photos, photo_ids=np.asarray([str(p) for p in photo_ids], dtype=str),
      queries=np.asarray(queries, np.float32),
      query_ids=np.asarray(query_ids, np.int64),
      categories=np.asarray(categories, np.float32).reshape(-1, photos.shape[-1]),
      category_names=np.asarray([str(c) for c in category_names], dtype=str), meta=meta)
  validate(store, where='new feature store')
  return store


def _value_text(v: float) -> str:
  return 'NaN' if np.isnan(v) else ('inf' if v > 0 else '-inf')


def _check_finite(arr: np.ndarray, ids: np.ndarray, name: str, ids_name: str,
                  where: str, folder: Optional[str]) -> None:
  """A FeatureStoreError naming the file (or array), row, id and column of the first NaN or
  infinite value."""
  finite = np.isfinite(np.asarray(arr))
  if finite.all():
    return
  bad_rows = np.flatnonzero(~finite.all(axis=1))
  r = int(bad_rows[0])
  c = int(np.flatnonzero(~finite[r])[0])
  file = os.path.join(folder, f'{name}.npy') if folder else f'{where}: {name}'
  raise FeatureStoreError(
      f'{file}: row {r} ({ids_name} {str(ids[r])!r}) is not finite: column {c} is '
      f'{_value_text(float(arr[r, c]))} ({bad_rows.size} row(s) hold NaN or infinite values)')


def validate(store: FeatureStore, where: str = 'feature store',
             folder: Optional[str] = None) -> None:
  """Checks shapes, dimensions, id uniqueness, finiteness and the normalisation claim;
  `folder`, when given, is the store's folder, whose files the messages name."""
  dim = store.meta.get('dim')
  for name in ('photos', 'queries', 'categories'):
    arr = getattr(store, name)
    if arr.ndim != 2:
      raise FeatureStoreError(f'{where}: {name} must be 2-D, got shape {arr.shape}')
    if arr.shape[1] != dim:
      raise FeatureStoreError(
          f'{where}: {name} has dimension {arr.shape[1]} but meta.json says dim={dim}')
  for feats, ids in (('photos', 'photo_ids'), ('queries', 'query_ids'),
                     ('categories', 'category_names')):
    n, m = getattr(store, feats).shape[0], getattr(store, ids).shape[0]
    if n != m:
      raise FeatureStoreError(f'{where}: {feats} has {n} rows but {ids} has {m} ids')
    values = [str(v) for v in getattr(store, ids)]
    if len(set(values)) != len(values):
      dup = next(v for v in values if values.count(v) > 1)
      raise FeatureStoreError(f'{where}: {ids} holds {dup!r} more than once')
  for name, ids in (('photos', 'photo_ids'), ('queries', 'query_ids'),
                    ('categories', 'category_names')):
    arr = getattr(store, name)
    if arr.size:
      _check_finite(arr, getattr(store, ids), name, ids[:-1].replace('_', ' '), where, folder)
    if store.meta.get('normalisation') == 'l2' and arr.size:
      norms = np.linalg.norm(np.asarray(arr, np.float64), axis=1)
      bad = np.flatnonzero(np.abs(norms - 1.0) > _NORM_TOL)
      if bad.size:
        raise FeatureStoreError(
            f'{where}: meta.json claims l2 normalisation but {name} row {bad[0]} has norm '
            f'{norms[bad[0]]:.4f}')


def write(path: str, store: FeatureStore) -> str:
  """Writes `store` to directory `path` atomically (temp dir + rename); returns `path`.

  An existing `path` is replaced only when it is a feature store, empty, or another folder
  colt_jax created (`outputs` rule); anything else is refused."""
  validate(store, where=f'{path} (before writing)')
  path = outputs.check_writable_dir(path, 'a feature store')
  tmp = outputs.staging_dir(path)
  try:
    for name in _ARRAYS:
      file = os.path.join(tmp, name + '.npy')
      with open(file, 'wb') as f:
        diskspace.save_npy(f, np.asarray(getattr(store, name)))
      outputs.usual_mode(file)
    meta = {k: v for k, v in store.meta.items() if k != 'path'}
    atomic.write_json(os.path.join(tmp, 'meta.json'), meta)
    outputs.replace_dir(tmp, path, 'a feature store')
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return path


REQUIRED_META = ('format', 'encoder', 'dim', 'normalisation', 'dataset', 'split')


def load(path: str, mmap: bool = True) -> FeatureStore:
  """Loads a store (memory-mapped by default) and validates it; every problem is a
  `FeatureStoreError` naming the file."""
  meta_path = os.path.join(path, 'meta.json')
  if not os.path.isfile(meta_path):
    raise FeatureStoreError(f'{path}: not a feature store (no meta.json)')
  try:
    with open(meta_path) as f:
      text = f.read()
    meta = json.loads(text, parse_constant=_no_constant)
  except json.JSONDecodeError as e:
    raise FeatureStoreError(f'{meta_path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except _NonFinite as e:
    m = re.search(r'(?<![\w"])' + re.escape(e.args[0]) + r'(?![\w"])', text)
    line = f':{text.count(chr(10), 0, m.start()) + 1}' if m else ''
    raise FeatureStoreError(f'{meta_path}{line}: {e.args[0]} is not a finite number (JSON '
                            'holds no NaN or infinity)') from None
  except UnicodeDecodeError as e:
    raise FeatureStoreError(f'{meta_path}: not valid UTF-8 ({e.reason})') from None
  if not isinstance(meta, dict):
    raise FeatureStoreError(f'{meta_path}: expected a JSON object, got {type(meta).__name__}')
  if meta.get('format') != FORMAT:
    raise FeatureStoreError(f'{meta_path}: format {meta.get("format")!r}, expected {FORMAT!r}')
  missing = [k for k in REQUIRED_META if k not in meta]
  if missing:
    raise FeatureStoreError(f'{meta_path}: missing required key(s) {", ".join(missing)}')
  arrays = {}
  for name in _ARRAYS:
    file = os.path.join(path, name + '.npy')
    if not os.path.isfile(file):
      raise FeatureStoreError(f'{path}: missing {name}.npy')
    try:
      arrays[name] = np.load(file, mmap_mode='r' if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
      raise FeatureStoreError(f'{file}: not a readable .npy array ({" ".join(str(e).split())})'
                              ) from None
    kind = arrays[name].dtype.kind
    expected = _KINDS[name]
    if kind not in expected:
      raise FeatureStoreError(f'{file}: expected {_KIND_NAMES[expected]} values, got dtype '
                              f'{arrays[name].dtype}')
  meta['path'] = path
  store = FeatureStore(meta=meta, **arrays)
  validate(store, where=path, folder=path)
  return store


class _NonFinite(ValueError):
  """json's NaN, Infinity or -Infinity, which a feature store never holds."""


def _no_constant(name: str):
  raise _NonFinite(name)


_KINDS = {'photos': 'f', 'queries': 'f', 'categories': 'f', 'photo_ids': 'U',
          'query_ids': 'iu', 'category_names': 'U'}
_KIND_NAMES = {'f': 'floating-point', 'U': 'text', 'iu': 'integer'}
