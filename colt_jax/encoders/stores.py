"""A split of the official layout encoded into its feature store, in one call.

`extract_split` is what `data_prep/extract_features.py --source official` runs and what the
experiment drivers call when a store is missing: read the split (and the splits whose cluster
names make the category vocabulary), load the encoder, and run `extract.extract` (batched,
pmap-ed, resumable from `<out>.partial/`). The store's folder is checked before the encoder
loads, so a folder colt_jax did not create is refused without work.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from colt_jax import data
from colt_jax import encoders
from colt_jax import outputs
from colt_jax.datasets import mediaeval
from colt_jax.datasets.vocabulary import CategoryVocabulary
from colt_jax.encoders import extract


def default_store_dir(dataset: str, encoder: str, split: str,
                      with_descriptors: bool = False) -> str:
  """work/features/<dataset>-<encoder>[-descvis]/<split>: where stores live by default."""
  return f'work/features/{dataset}-{encoder}{"-descvis" if with_descriptors else ""}/{split}'


def extract_split(dataset: str, split_name: str, encoder: str, out: str, *, data_dir: str = '',
                  model: Optional[str] = None, dtype: str = 'float32',
                  max_length: Optional[int] = None,
                  vocabulary_splits: Sequence[str] = ('dev', 'test'),
                  descriptor_features: Optional[Sequence[str]] = None,
                  descriptor_weight: float = 1.0, descriptor_stats_split: str = 'dev',
                  batch_size: int = 64, shard_size: int = 1024, num_devices: int = 0,
                  allow_missing: bool = False, progress: bool = True,
                  extra_meta: Optional[Mapping[str, Any]] = None) -> extract.ExtractResult:
  """Encodes `split_name` of `dataset` (official layout under `data_dir`) into the store `out`.

  `descriptor_features` (names of mediaeval.VISUAL_FEATURES) appends the official visual
  descriptors, standardised with the photos of `descriptor_stats_split` (never the split's own
  statistics when it is a held-out split).
  """
  meta = dict(extra_meta or {}, vocabulary_splits=list(vocabulary_splits))
  root = data.resolve(dataset, split_name, data_dir).data_dir
  split = mediaeval.read_split(dataset, root, split_name)
  vocabulary = CategoryVocabulary.from_splits(
      [split if s == split_name else mediaeval.read_split(dataset, root, s)
       for s in vocabulary_splits])
  descriptors = stats = None
  if descriptor_features:
    descriptors = extract.DescriptorOptions(tuple(descriptor_features), descriptor_weight)
    meta['descriptor_stats_split'] = descriptor_stats_split
    if descriptor_stats_split != split_name:
      stats = mediaeval.read_split(dataset, root, descriptor_stats_split)
  return encode_split(split, encoder, out, vocabulary=vocabulary, model=model, dtype=dtype,
                      max_length=max_length, descriptors=descriptors, descriptor_stats=stats,
                      batch_size=batch_size, shard_size=shard_size, num_devices=num_devices,
                      allow_missing=allow_missing, progress=progress, extra_meta=meta)


def encode_split(split, encoder: str, out: str, *, vocabulary: CategoryVocabulary,
                 model: Optional[str] = None, dtype: str = 'float32',
                 max_length: Optional[int] = None, num_devices: int = 0,
                 **extract_kwargs) -> extract.ExtractResult:
  """`split` (read from any source) encoded into the store `out` by the named encoder: the
  folder is checked before the encoder loads (a folder colt_jax did not create is refused
  without work), then `extract.extract(**extract_kwargs)` runs."""
  outputs.check_writable_dir(out, 'a feature store', legacy=('meta.json',), flag='--out')
  model_ = encoders.load(encoder, model, dtype=dtype, max_length=max_length)
  return extract.extract(split, model_, out, vocabulary=vocabulary,
                         devices=extract.default_devices(num_devices), **extract_kwargs)
