"""Multi-view features f: the photos' text view plus official visual descriptors and metadata.

Relevance lives mostly in the text (MiniLM over title, tags, description) and grouping partly
in the visual descriptors and the photo metadata (issue 14's measurements). A view store
presents them to every method alike, as separate unit-norm parts of one L2-normalised row:

    photo  = [t, w_d * d, w_m * m] / sqrt(1 + w_d^2 + w_m^2)
    query  = [q, 0, 0]          category = [c, 0, 0]

* t: the store's text feature (unit norm).
* d (view `descvis`): each official descriptor (CM, CN, ..., LBP3x3) z-scored per dimension
  with the mean and std of the *training* photos (`fit`; held-out photos use the training
  statistics), L2-normalised per photo, the descriptors concatenated and divided by
  sqrt(#descriptors): a photo-photo cosine of this part is the mean of the descriptors' cosines.
* m (view `metadata`): one-hot of the photo's user and of the day it was taken (hashed into
  `buckets` bins each), divided by sqrt(2): its cosine is (same user + same day) / 2.

Because every part has norm 1 for every photo, a query-photo cosine is the text cosine times
the constant 1 / sqrt(1 + w_d^2 + w_m^2): the candidate order and every relevance score stay
text-only, while photo-photo cosines (clustering, MMR's redundancy, phi's attention) mix the
views with weights w. phi's input projection (`model.phi.TokenClassifier`) is one Dense layer over
the parts, i.e. a learned projection per view summed; with `--view_tokens` each part (text,
each descriptor, user, day: `token_parts`) has its own projection and LayerNorm, and phi's
pair head also reads each part's cosine of a pair. A fitted `ViewTransform` (spec and
statistics) is saved in a model directory beside g and phi (`to_dict`/`from_dict`).
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.data import mediaeval
from colt_jax.data.types import Split
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError

ALL_DESCRIPTORS = ('CM', 'CM3x3', 'CN', 'CN3x3', 'CSD', 'GLRLM', 'GLRLM3x3', 'HOG', 'LBP',
                   'LBP3x3')
FORMAT = 'colt_jax.views/1'


@dataclasses.dataclass(frozen=True)
class ViewSpec:
  """Which views join the text view, and their weights (configuration as data)."""
  descriptors: tuple = ()  # official descriptor names; () = no descvis view
  descriptor_weight: float = 1.0  # w_d
  metadata_weight: float = 0.0  # w_m; 0 = no metadata view
  buckets: int = 256  # hash bins of the user and the day one-hots

  def __post_init__(self):
    object.__setattr__(self, 'descriptors', tuple(self.descriptors))
    unknown = [d for d in self.descriptors if d not in ALL_DESCRIPTORS]
    if unknown or len(set(self.descriptors)) != len(self.descriptors):
      raise ConfigError(f'views: descriptors must be distinct names among {ALL_DESCRIPTORS}, '
                        f'got {self.descriptors}')
    if self.descriptor_weight < 0 or self.metadata_weight < 0 or self.buckets < 1:
      raise ConfigError(f'views: weights must be >= 0 and buckets >= 1, got {self}')

  @property
  def text_only(self) -> bool:
    return not self.uses_descriptors and not self.uses_metadata

  @property
  def uses_descriptors(self) -> bool:
    return bool(self.descriptors) and self.descriptor_weight > 0

  @property
  def uses_metadata(self) -> bool:
    return self.metadata_weight > 0

  @property
  def name(self) -> str:
    """A short name for logs and directories ('text', 'text+descvis10x1+meta0.5', ...)."""
    parts = ['text']
    if self.uses_descriptors:
      parts.append(f'descvis{len(self.descriptors)}x{self.descriptor_weight:g}')
    if self.uses_metadata:
      parts.append(f'meta{self.metadata_weight:g}')
    return '+'.join(parts)


@dataclasses.dataclass(frozen=True)
class RawViews:
  """The untransformed views of a set of photos, looked up by photo id."""
  photo_index: Mapping[str, int]
  descriptors: np.ndarray  # float32 [n, sum of descriptor dims] in `descriptor_names` order
  descriptor_names: tuple
  descriptor_dims: tuple
  users: tuple  # str or None per photo
  days: tuple  # 'YYYY-MM-DD' or None per photo

  def rows(self, photo_ids: Sequence[str], where: str = 'views') -> np.ndarray:
    try:
      return np.array([self.photo_index[str(p)] for p in photo_ids], np.int64)
    except KeyError as e:
      raise InputError(f'{where}: photo {e.args[0]} has no descriptors or metadata '
                       f'({len(self.photo_index)} photos read)') from None


def read_raw(splits: Sequence[Split], descriptors: Sequence[str] = ALL_DESCRIPTORS) -> RawViews:
  """Descriptors (`descvis/img/<title> <FEAT>.csv`) and metadata of every photo of `splits`."""
  ids, blocks, users, days, index = [], [], [], [], {}
  dims = None
  for split in splits:
    meta = {p.photo_id: p for photos in split.photos.values() for p in photos}
    if descriptors:
      split_ids, values = mediaeval.read_visual_descriptors(split, descriptors)
    else:
      split_ids, values = sorted(meta), np.zeros((len(meta), 0), np.float32)
    for i, p in enumerate(split_ids):
      if p in index:
        continue
      index[p] = len(ids)
      ids.append(p)
      blocks.append(values[i])
      photo = meta.get(p)
      users.append(photo.user_id if photo else None)
      days.append(photo.date_taken[:10] if photo and photo.date_taken else None)
  if descriptors:
    dims = tuple(_descriptor_dims(splits[0], descriptors))
  arr = np.stack(blocks).astype(np.float32) if blocks else np.zeros((0, sum(dims or ())))
  return RawViews(photo_index=index, descriptors=arr, descriptor_names=tuple(descriptors),
                  descriptor_dims=dims or (), users=tuple(users), days=tuple(days))


def _descriptor_dims(split: Split, descriptors: Sequence[str]) -> list:
  return [mediaeval.read_visual_descriptors(
      dataclasses.replace(split, topics=list(split.topics)[:1]), (d,))[1].shape[1]
          for d in descriptors]


@dataclasses.dataclass(frozen=True)
class ViewTransform:
  """A `ViewSpec` with the descriptor statistics of the training photos it was fitted on."""
  spec: ViewSpec
  mean: Mapping[str, np.ndarray]  # descriptor name -> per-dimension mean
  std: Mapping[str, np.ndarray]  # descriptor name -> per-dimension std (1 where constant)
  num_photos: int  # training photos the statistics come from

  def to_dict(self) -> dict:
    return {'format': FORMAT, 'spec': dataclasses.asdict(self.spec),
            'num_photos': self.num_photos,
            'mean': {k: [float(x) for x in v] for k, v in self.mean.items()},
            'std': {k: [float(x) for x in v] for k, v in self.std.items()}}

  @classmethod
  def from_dict(cls, info: Mapping, where: str = 'views') -> 'ViewTransform':
    if info.get('format') != FORMAT:
      raise InputError(f'{where}: format {info.get("format")!r}, expected {FORMAT!r}')
    try:
      spec = ViewSpec(**info['spec'])
      mean = {k: np.asarray(v, np.float64) for k, v in info['mean'].items()}
      std = {k: np.asarray(v, np.float64) for k, v in info['std'].items()}
      num_photos = int(info['num_photos'])
    except InputError:
      raise
    except (KeyError, TypeError, ValueError) as e:
      raise InputError(f'{where}: malformed view statistics ({e})') from None
    for field, stats in (('mean', mean), ('std', std)):
      for k, v in stats.items():
        if not np.isfinite(v).all():
          raise InputError(f'{where}: view statistics {field}[{k}] holds a non-finite value')
    return cls(spec, mean, std, num_photos)


def _blocks(raw: RawViews) -> dict:
  """descriptor name -> column slice of `raw.descriptors`."""
  out, start = {}, 0
  for name, dim in zip(raw.descriptor_names, raw.descriptor_dims):
    out[name] = slice(start, start + dim)
    start += dim
  return out


def fit(spec: ViewSpec, raw: RawViews, photo_ids: Sequence[str]) -> ViewTransform:
  """Statistics of the descriptors over the training photos `photo_ids` (nothing else)."""
  mean, std = {}, {}
  if spec.uses_descriptors:
    missing = [d for d in spec.descriptors if d not in raw.descriptor_names]
    if missing:
      raise InputError(f'views: descriptors {missing} were not read')
    rows = raw.rows(photo_ids, 'views (fitting)')
    if not len(rows):
      raise InputError('views: no training photos to fit the descriptor statistics on')
    blocks = _blocks(raw)
    for d in spec.descriptors:
      x = raw.descriptors[rows, blocks[d]].astype(np.float64)
      mean[d] = x.mean(axis=0)
      s = x.std(axis=0)
      std[d] = np.where(s > 1e-12, s, 1.0)
  return ViewTransform(spec, mean, std, len(photo_ids))


def _unit_rows(x: np.ndarray) -> np.ndarray:
  norms = np.linalg.norm(x, axis=1, keepdims=True)
  return np.where(norms > 1e-12, x / np.maximum(norms, 1e-12), 0.0)


def _one_hot(values: Sequence[Optional[str]], buckets: int, salt: str) -> np.ndarray:
  out = np.zeros((len(values), buckets), np.float64)
  for i, v in enumerate(values):
    if v:
      h = hashlib.blake2b(f'{salt}:{v}'.encode(), digest_size=8).digest()
      out[i, int.from_bytes(h, 'little') % buckets] = 1.0
  return out


def photo_parts(transform: ViewTransform, raw: RawViews, photo_ids: Sequence[str]) -> np.ndarray:
  """[w_d * d, w_m * m] of the photos (unscaled by the final normalisation), float64."""
  spec = transform.spec
  rows = raw.rows(photo_ids)
  parts = []
  if spec.uses_descriptors:
    blocks = _blocks(raw)
    ds = [_unit_rows((raw.descriptors[rows, blocks[d]] - transform.mean[d]) / transform.std[d])
          for d in spec.descriptors]
    parts.append(spec.descriptor_weight * np.concatenate(ds, axis=1) / np.sqrt(len(ds)))
  if spec.uses_metadata:
    meta = np.concatenate([_one_hot([raw.users[r] for r in rows], spec.buckets, 'user'),
                           _one_hot([raw.days[r] for r in rows], spec.buckets, 'day')], axis=1)
    parts.append(spec.metadata_weight * meta / np.sqrt(2.0))
  return (np.concatenate(parts, axis=1) if parts
          else np.zeros((len(photo_ids), 0), np.float64))


def apply(transform: ViewTransform, raw: RawViews,
          store: features_lib.FeatureStore) -> features_lib.FeatureStore:
  """The view store of `store` (text features) under `transform` (see the module docstring).

  A photo without metadata gets a zero metadata part, so its row's norm shrinks before the
  final normalisation; every photo of a Div400 store has descriptors and a user.
  """
  if transform.spec.text_only:
    return store
  ids = [str(p) for p in store.photo_ids]
  extra = photo_parts(transform, raw, ids)
  text = np.asarray(store.photos, np.float64)
  spec = transform.spec
  total = np.sqrt(1.0 + (spec.descriptor_weight ** 2 if spec.uses_descriptors else 0.0)
                  + (spec.metadata_weight ** 2 if spec.uses_metadata else 0.0))
  photos = np.concatenate([text, extra], axis=1) / total
  pad = lambda a: np.concatenate(
      [np.asarray(a, np.float32), np.zeros((len(a), extra.shape[1]), np.float32)], axis=1)
  meta = dict(store.meta)
  parts = [['text', int(store.dim)]]
  if spec.uses_descriptors:
    dims = dict(zip(raw.descriptor_names, raw.descriptor_dims))
    parts += [[d, int(dims[d])] for d in spec.descriptors]
  if spec.uses_metadata:
    parts += [['user', spec.buckets], ['day', spec.buckets]]
  return features_lib.make_store(
      photos=photos.astype(np.float32), photo_ids=ids, queries=pad(store.queries),
      query_ids=np.asarray(store.query_ids), categories=pad(store.categories),
      category_names=list(store.category_names), encoder=meta.get('encoder', ''),
      dataset=meta.get('dataset', ''), split=meta.get('split', ''),
      source=meta.get('source', ''), normalised=False,
      extra={'views': {'spec': dataclasses.asdict(spec), 'name': spec.name,
                       'text_dim': int(store.dim), 'stats_photos': transform.num_photos,
                       'parts': parts}})


def token_parts(store: features_lib.FeatureStore) -> tuple:
  """((name, size), ...): the consecutive parts of a store's rows (text, each descriptor,
  user, day) for phi's per-view token parts; one part for a store that is not a view store."""
  parts = (store.meta.get('views') or {}).get('parts')
  if not parts:
    return (('text', int(store.dim)),)
  out = tuple((str(name), int(size)) for name, size in parts)
  if sum(size for _, size in out) != store.dim:
    raise InputError(f'{store.meta.get("path", "the store")}: view parts {out} do not sum to '
                     f'its {store.dim} features')
  return out
