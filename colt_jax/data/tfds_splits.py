"""A built TFDS dataset of the official layout (`tfds_builders`) read back: `prepare` builds it
once, `load_split` gives the Split and its photos' examples (`TfdsSplit`) in the order the
official reader gives them (`split_from_examples`)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
import threading
from typing import Any, Callable, Mapping, Optional

from absl import logging
import tensorflow_datasets as tfds

from colt_jax.data import mediaeval
from colt_jax.data import tfds_builders
from colt_jax.data.types import Photo, Split, Topic, TopicGroundTruth
from colt_jax.util import outputs
from colt_jax.util.errors import InputError


_READ_CHUNK = 1024  # examples per read when rebuilding a Split (bounds memory with images)


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def split_from_examples(dataset: str, split: str, metadata: Mapping[str, Any],
                        examples, where: str = 'TFDS dataset') -> Split:
  """The `Split` that a data source's examples (in order) and metadata describe."""
  if metadata.get('format') != tfds_builders.METADATA_FORMAT or split not in metadata.get('splits', {}):
    raise ValueError(
        f'{where}: metadata.json is not {tfds_builders.METADATA_FORMAT} with split {split!r} '
        f'(format {metadata.get("format")!r}); rebuild the dataset')
  meta = metadata['splits'][split]
  topics, photos, titles = [], {}, {}
  relevance, clusters = {}, {}
  for t in meta['topics']:
    topics.append(Topic(number=t['number'], title=t['title'], latitude=t['latitude'],
                        longitude=t['longitude'], wiki=t['wiki']))
    photos[t['number']], titles[t['number']] = [], t['title']
    relevance[t['number']] = {}
    clusters[t['number']] = {}
  for i, ex in enumerate(examples):
    topic, pid = int(ex['topic']), _text(ex['photo_id'])
    if titles.get(topic) != _text(ex['topic_title']):
      raise ValueError(f'{where}: example {i} ({topic}/{pid}) has topic title '
                       f'{_text(ex["topic_title"])!r}; metadata.json has {titles.get(topic)!r}')
    user = _text(ex['user'])
    photo = Photo(photo_id=pid, topic=topic, title=_text(ex['title']), tags=_text(ex['tags']),
                  description=_text(ex['description']), views=int(ex['views']),
                  rank=int(ex['rank']), user_id=user or None,
                  date_taken=_text(ex['date_taken']) or None, url=_text(ex['url']) or None,
                  latitude=float(_text(ex['latitude'])) if _text(ex['latitude']) else None,
                  longitude=float(_text(ex['longitude'])) if _text(ex['longitude']) else None)
    if photo.text != _text(ex['text']):
      raise ValueError(f'{where}: example {i} ({topic}/{pid}): text does not join title, tags '
                       'and description')
    photos[topic].append(photo)
    if int(ex['relevance']) != tfds_builders.NOT_IN_RGT:
      relevance[topic][pid] = int(ex['relevance'])
    if int(ex['cluster_id']) != tfds_builders.NO_CLUSTER:
      clusters[topic][pid] = int(ex['cluster_id'])
  ground_truth = {}
  for t in meta['topics']:
    n = t['number']
    relevance[n].update((p, r) for p, r in t['relevance_without_photo'])
    clusters[n].update((p, c) for p, c in t['clusters_without_photo'])
    ground_truth[n] = TopicGroundTruth(
        relevance=relevance[n], clusters=clusters[n],
        cluster_names={int(c): name for c, name in t['cluster_names']},
        num_clusters=t['num_clusters'])
  return Split(dataset=dataset, split=split, root=meta['source'], topics=topics,
               photos=photos, ground_truth=ground_truth)


def prepare(dataset: str, data_dir: str = tfds_builders.DEFAULT_DATA_DIR,
            manual_dir: Optional[str] = None) -> tfds.core.DatasetBuilder:
  """The builder of `dataset` in `data_dir`, built from `manual_dir` unless already there.

  Without `manual_dir`, an unbuilt dataset is looked for in tfds's default
  `<data_dir>/downloads/manual` (tfds names the path when it is missing).
  """
  if dataset not in tfds_builders.BUILDERS:
    raise InputError(
        f'no TFDS builder for {dataset!r}; expected one of {tuple(tfds_builders.BUILDERS)}')
  # tfds writes <data_dir>/<name>/<version>; that folder must be new or colt_jax's own.
  name = tfds_builders.BUILDERS[dataset].name
  outputs.claim_dir(os.path.join(os.fspath(data_dir), name), f'the TFDS dataset {name}',
                    trees=(str(tfds_builders.BUILDERS[dataset].VERSION),), flag='--tfds_data_dir')
  builder = tfds_builders.BUILDERS[dataset](data_dir=os.fspath(data_dir))
  # Nothing is downloaded, but tfds makes its download folder (<data_dir>/downloads/extracted
  # by default, outside the dataset's own folder): a temporary one, removed after. Without
  # `manual_dir` tfds's default manual folder, <data_dir>/downloads/manual, is the user's.
  with (tempfile.TemporaryDirectory(prefix='colt_jax_tfds_downloads_') if manual_dir
        else contextlib.nullcontext()) as downloads:
    builder.download_and_prepare(
        download_dir=downloads,
        download_config=tfds.download.DownloadConfig(
            manual_dir=os.fspath(manual_dir) if manual_dir else None))
  return builder


@dataclasses.dataclass(repr=False)
class TfdsSplit:
  """A split read through its TFDS data source: the `Split` and the photos' image bytes."""
  split: Split  # equal to mediaeval.read_split(...) of the directory it was built from
  data_source: Any  # the split's tfds ArrayRecordDataSource
  name: str  # '<dataset>/<version>'
  data_dir: str  # the prepared dataset's directory
  image_index: Mapping[tuple, int]  # (topic, photo id) -> example index, photos with an image
  _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

  def __str__(self) -> str:
    return f'TFDS {self.name} split {self.split.split} at {self.data_dir}'

  def __repr__(self) -> str:
    return f'TfdsSplit({self.name!r}, {self.split.split!r}, {self.data_dir!r})'

  def image_bytes(self, topic: int, photo_id: str) -> bytes:
    """The encoded image of a photo in a topic; KeyError when it has none."""
    index = self.image_index[(topic, photo_id)]
    with self._lock:  # one reader, shared by the extractor's image threads
      return self.data_source[index]['image']

  def image_reader(self, photo: Photo) -> Optional[Callable[[], bytes]]:
    """A function reading `photo`'s image (in its topic), or None when it has none: the
    `image_reader` of `extract.extract`."""
    if (photo.topic, photo.photo_id) not in self.image_index:
      return None
    return functools.partial(self.image_bytes, photo.topic, photo.photo_id)


def load_split(dataset: str, split: str, data_dir: str = tfds_builders.DEFAULT_DATA_DIR,
               manual_dir: Optional[str] = None) -> TfdsSplit:
  """Split 'dev' | 'test' of 'div400' | 'div150cred' read from its TFDS data source (built
  first from `manual_dir` when `data_dir` does not hold it yet)."""
  if split not in mediaeval.SPLITS:
    raise ValueError(f'split must be one of {mediaeval.SPLITS}, got {split!r}')
  builder = prepare(dataset, data_dir, manual_dir)
  where = os.fspath(builder.data_dir)
  source = builder.as_data_source(split=split)
  metadata = builder.info.metadata or {}
  recorded = metadata.get('splits', {}).get(split, {}).get('source')
  manual = os.path.abspath(manual_dir) if manual_dir else None
  if manual and recorded and os.path.commonpath([recorded, manual]) != manual:
    logging.warning('%s was built from %s, not from %s; delete it to rebuild', where,
                    recorded, manual_dir)
  image_index = {}

  def examples():
    for start in range(0, len(source), _READ_CHUNK):
      indices = list(range(start, min(start + _READ_CHUNK, len(source))))
      for i, ex in zip(indices, source.__getitems__(indices)):
        if ex['has_image']:
          image_index[(int(ex['topic']), _text(ex['photo_id']))] = i
        ex.pop('image')
        yield ex

  result = split_from_examples(dataset, split, metadata, examples(), where)
  return TfdsSplit(split=result, data_source=source, name=f'{builder.name}/{builder.version}',
                   data_dir=where, image_index=image_index)
