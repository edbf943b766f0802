"""A split of the official layout encoded into its feature store, in one call.

`extract_split` is what `data_prep/extract_features.py --source official` runs and what the
experiment drivers call when a store is missing: read the split (and the splits whose cluster
names make the category vocabulary), load the encoder, and run `extract.extract` (batched,
pmap-ed, resumable from `<out>.partial/`). The store's folder is checked before the encoder
loads, so a folder colt_jax did not create is refused without work.

With a `views.ViewSpec` beyond text the store written is the view store of the encoded one
(`view_transform`: `colt_jax.data.views` fitted on the photos of a training split), the features
the reproduction's view rows give the models.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping, Optional, Sequence

from colt_jax import encoders
from colt_jax.data import features as features_lib
from colt_jax.data import mediaeval
from colt_jax.data import splits as data
from colt_jax.data import views as views_lib
from colt_jax.data.types import Split
from colt_jax.data.vocabulary import CategoryVocabulary
from colt_jax.encoders import extract
from colt_jax.util import outputs
from colt_jax.util.errors import InputError


def default_store_dir(dataset: str, encoder: str, split: str,
                      views: Optional[views_lib.ViewSpec] = None) -> str:
  """work/features/<dataset>-<encoder>[-<view name>]/<split>: where stores live by default."""
  suffix = '' if views is None or views.text_only else f'-{views.name}'
  return f'work/features/{dataset}-{encoder}{suffix}/{split}'


def view_transform(spec: views_lib.ViewSpec, split: Split, fit_split: Split
                   ) -> Callable[[features_lib.FeatureStore], features_lib.FeatureStore]:
  """store -> its view store (`views.apply`), the statistics fitted (`views.fit`) on every
  photo of `fit_split` (the training split: a held-out store never takes its own).

  The descriptors and metadata are read now, so a layout without them fails before any
  encoding. The view store keeps the text store's meta and records under 'views' the fit
  split and the fitted transform (`views.ViewTransform.to_dict`).
  """
  if spec.uses_descriptors:
    for s in (split, fit_split):
      folders = {os.path.join(s.root_of(t.number), 'descvis', 'img') for t in s.topics}
      missing = sorted(f for f in folders if not os.path.isdir(f))
      if missing:
        raise InputError(f'--views_descriptors: {s.dataset}/{s.split} has no official visual '
                         f'descriptors ({missing[0]} does not exist)')
  names = spec.descriptors if spec.uses_descriptors else ()
  raw_fit = views_lib.read_raw([fit_split], names)
  fitted = views_lib.fit(spec, raw_fit, fit_split.all_photo_ids())
  # Read apart: a photo id that both splits hold keeps each split's own descriptors.
  raw = raw_fit if split is fit_split else views_lib.read_raw([split], names)

  def transform(store: features_lib.FeatureStore) -> features_lib.FeatureStore:
    viewed = views_lib.apply(fitted, raw, store)
    meta = dict(store.meta, **viewed.meta)
    meta['views'] = dict(viewed.meta['views'], fit_split=fit_split.split,
                         transform=fitted.to_dict())
    return dataclasses.replace(viewed, meta=meta)

  return transform


def extract_split(dataset: str, split_name: str, encoder: str, out: str, *, data_dir: str = '',
                  model: Optional[str] = None, dtype: str = 'float32',
                  max_length: Optional[int] = None,
                  vocabulary_splits: Sequence[str] = ('dev', 'test'),
                  views: Optional[views_lib.ViewSpec] = None, views_fit_split: str = 'dev',
                  batch_size: int = 64, shard_size: int = 1024, num_devices: int = 0,
                  allow_missing: bool = False, max_bad_fraction: float = 0.0,
                  progress: bool = True, extra_meta: Optional[Mapping[str, Any]] = None) -> extract.ExtractResult:
  """Encodes `split_name` of `dataset` (official layout under `data_dir`) into the store `out`.

  `views` beyond text writes the view store (`view_transform`), its statistics fitted on
  the photos of `views_fit_split`.
  """
  meta = dict(extra_meta or {}, vocabulary_splits=list(vocabulary_splits))
  root = data.resolve(dataset, split_name, data_dir).data_dir
  split = mediaeval.read_split(dataset, root, split_name)
  vocabulary = CategoryVocabulary.from_splits(
      [split if s == split_name else mediaeval.read_split(dataset, root, s)
       for s in vocabulary_splits])
  transform = None
  if views is not None and not views.text_only:
    fit = (split if views_fit_split == split_name
           else mediaeval.read_split(dataset, root, views_fit_split))
    transform = view_transform(views, split, fit)
  return encode_split(split, encoder, out, vocabulary=vocabulary, model=model, dtype=dtype,
                      max_length=max_length, transform=transform,
                      batch_size=batch_size, shard_size=shard_size, num_devices=num_devices,
                      allow_missing=allow_missing, max_bad_fraction=max_bad_fraction,
                      progress=progress, extra_meta=meta)


def encode_split(split, encoder: str, out: str, *, vocabulary: CategoryVocabulary,
                 model: Optional[str] = None, dtype: str = 'float32',
                 max_length: Optional[int] = None, num_devices: int = 0,
                 **extract_kwargs) -> extract.ExtractResult:
  """`split` (read from any source) encoded into the store `out` by the named encoder: the
  folder is checked before the encoder loads (a folder colt_jax did not create is refused
  without work), then `extract.extract(**extract_kwargs)` runs."""
  outputs.check_writable_dir(out, 'a feature store', flag='--out')
  model_ = encoders.load(encoder, model, dtype=dtype, max_length=max_length)
  return extract.extract(split, model_, out, vocabulary=vocabulary,
                         devices=extract.default_devices(num_devices), **extract_kwargs)
