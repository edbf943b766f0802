"""Feature extraction: batching, pmap over devices, resumable shards, the feature store.

`extract(split, encoder, out)` encodes three kinds of items of one split and writes a feature
store (`colt_jax/data/features.py`) at `out`:

* `photos`: every photo id of the split once, in `Split.all_photo_ids()` order (a photo that
  several topics share, 61 in Div400's testset, gets one row; its metadata and image are taken
  from its first topic, the image from a later topic's folder if the first has none);
* `queries`: the topic titles (rows in topic order, ids = topic numbers);
* `categories`: the normalised category vocabulary names, sorted (`CategoryVocabulary.names`).

Work is cut into shards of `shard_size` items per kind, saved one by one in `<out>.partial/`
(`shards.py`: complete shard files, the run's settings, resuming). The settings are the
encoder, model, dataset, split, source, shard size, options and a digest of every input; a
later run with the same settings reuses the finished shards and computes only the rest, while
a run with different settings is refused (`ResumeMismatchError`) rather than mixing features.
The batch size and the devices are not settings: they change only float rounding. The partial
directory is removed once the store has been written (atomically, by `features.write`).

Within a shard, items are encoded in global batches pmap-ed over the devices
(`batching.BatchRunner`: texts grouped by length, the last batch padded, no item dropped,
host preparation overlapping the devices' work).

Photos without an image file (for encoders that read images) are reported by id and count and
stop the run (`MissingPhotosError`) unless `allow_missing`: then they are left out of the store
and listed in `meta['missing_photos']`. Such a store lacks rows that evaluation and training
need when those photos are in the ground truth (`colt_jax.data.splits.check_store_covers` refuses it
then); it is meant for inspection and partial experiments.

Photos whose image cannot be read (not an image, corrupt, truncated, unreadable) are found
before any encoding, by the encoder's `image_error` (CLIP's decodes every image at a reduced
size), and counted. A dataset's photo list is fixed by its metadata, so by default
(`max_bad_fraction=0`) any of them stops the run (`UnreadablePhotosError`: one line naming the
first file, its photo and the count) with nothing written. With more of them allowed (at most
`max_bad_fraction` of the split's photos) they are left out of the store as missing photos are
and listed in `meta['bad_images']` (photo id, image path relative to the split, reason); the
store then lacks their rows, and training and evaluation refuse it when they are in the ground
truth (`check_store_covers`), as they do a store with missing photos.

Images come from the files of the official layout, or from elsewhere through
`image_reader` (`colt_jax.data.tfds_splits.TfdsSplit.image_reader`: the image bytes of a
TFDS data source). Either way the items, their order and the resume settings are the same.

`transform` turns the encoded store into the one written, e.g. a view store
(`colt_jax.data.views`, `stores.view_transform`); the shards stay the encoder's own features, so
the same shards serve every transform.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from absl import logging
import jax
import numpy as np
import tqdm

from colt_jax.data import features as features_lib
from colt_jax.data.types import Photo, Split
from colt_jax.data.vocabulary import CategoryVocabulary
from colt_jax.encoders import batching
from colt_jax.encoders import shards
from colt_jax.util import distributed
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

# Re-exported for the callers of `extract.<name>` (the Retriever, collection.py, tests).
Encoder, BatchRunner, default_devices = (batching.Encoder, batching.BatchRunner,
                                         batching.default_devices)
ResumeMismatchError, ExtractionInterrupted = (shards.ResumeMismatchError,
                                              shards.ExtractionInterrupted)
SETTINGS_FILE, check_or_record_settings, shard_path = (shards.SETTINGS_FILE,
                                                       shards.check_or_record_settings,
                                                       shards.shard_path)

KINDS = ('photos', 'queries', 'categories')
PARTIAL_FORMAT = 'colt_jax.extract.partial/1'
IMAGE_EXTENSION = '.jpg'
_LIST_MISSING = 20  # ids named in a missing-photo message
_LIST_BAD = 3  # files named in an unreadable-photo message


class MissingPhotosError(InputError):
  """Photos of the split have no image file; `photo_ids` lists them."""

  def __init__(self, message: str, photo_ids: Sequence[str]):
    super().__init__(message)
    self.photo_ids = list(photo_ids)


class UnreadablePhotosError(InputError):
  """More photos of the split have an unreadable image than `max_bad_fraction` allows."""


@dataclasses.dataclass(frozen=True)
class PhotoItem:
  """One photo to encode: its metadata (first topic) and its image file (None if not looked
  up, or missing). With `read_image` (an `image_reader`'s), the encoded image comes from it
  and `image_path` only names the image by its place in the official layout."""
  photo_id: str
  photo: Photo
  image_path: Optional[str]
  read_image: Optional[Callable[[], bytes]] = None

  @property
  def text(self) -> str:
    return self.photo.text


@dataclasses.dataclass
class ExtractResult:
  """The written store and what the run did (for logs and speed reports)."""
  path: str
  store: features_lib.FeatureStore
  computed_shards: dict  # kind -> shards encoded by this run
  reused_shards: dict  # kind -> shards taken from <out>.partial
  computed_items: dict  # kind -> items encoded by this run
  seconds: dict  # kind -> seconds spent encoding (host preparation included)

  def items_per_second(self, kind: str) -> float:
    return self.computed_items[kind] / max(self.seconds[kind], 1e-9)


# ----------------------------------------------------------------------------- helpers


def unique_photos(split: Split) -> list:
  """(photo id, [Photo of each topic holding it]) in `split.all_photo_ids()` order."""
  seen = {}
  for t in split.topics:
    for p in split.photos[t.number]:
      seen.setdefault(p.photo_id, []).append(p)
  return list(seen.items())


def image_candidates(split: Split, photos: Sequence[Photo]) -> list:
  """Where the image of a photo may be: `<split root>/img/<topic title>/<id>.jpg` per topic."""
  titles = {t.number: t.title for t in split.topics}
  return [os.path.join(split.root_of(p.topic), 'img', titles[p.topic],
                       p.photo_id + IMAGE_EXTENSION)
          for p in photos]


def photo_items(split: Split, with_images: bool,
                image_reader: Optional[Callable[[Photo], Optional[Callable[[], bytes]]]] = None
                ) -> tuple:
  """(items, missing ids): one `PhotoItem` per unique photo; with `with_images`, photos
  without any image file are returned as missing instead. `image_reader(photo)`, when given,
  replaces the file lookup: a function reading the photo's image in its topic, or None."""
  items, missing = [], []
  for pid, occurrences in unique_photos(split):
    path, read = None, None
    if with_images:
      for candidate, photo in zip(image_candidates(split, occurrences), occurrences):
        if image_reader is None:
          found = os.path.isfile(candidate)
        else:
          read = image_reader(photo)
          found = read is not None
        if found:
          path = candidate
          break
      if path is None:
        missing.append(pid)
        continue
    items.append(PhotoItem(pid, occurrences[0], path, read))
  return items, missing


def unreadable_photos(items: Sequence[PhotoItem], encoder: Encoder, progress: bool = False
                      ) -> list:
  """[(item, reason)] of the photos whose image the encoder cannot read (its `image_error`:
  '' when readable), in item order; none for an encoder without images or that check."""
  check = getattr(encoder, 'image_error', None) if encoder.needs_images else None
  if check is None or not items:
    return []
  with concurrent.futures.ThreadPoolExecutor(min(8, 2 * (os.cpu_count() or 1))) as pool:
    reasons = list(tqdm.tqdm(pool.map(check, items), total=len(items), desc='checking images',
                             unit='image', disable=not (progress and jax.process_index() == 0),
                             dynamic_ncols=True, mininterval=1.0))
  return [(it, r) for it, r in zip(items, reasons) if r]


def _check_bad(split: Split, bad: Sequence[tuple], total: int, fraction: float) -> None:
  """Raises `UnreadablePhotosError` when more than `fraction` of the `total` photos are
  `bad`, else warns that they are left out."""
  allowed = int(fraction * total)
  listed = '; '.join(f'{it.image_path} (photo {it.photo_id}): {r}' for it, r in bad[:_LIST_BAD])
  if len(bad) > _LIST_BAD:
    listed += f'; and {len(bad) - _LIST_BAD} more'
  message = f'{split.dataset}/{split.split}: {len(bad)} of {total} photos cannot be read'
  if len(bad) > allowed:
    raise UnreadablePhotosError(
        f'{message}, more than --max_bad_fraction={fraction:g} allows ({allowed}): {listed}')
  logging.warning('%s, leaving them out of the store (meta.json bad_images): %s', message,
                  listed)


def _item_keys(kind: str, items: Sequence[Any], root: str) -> list:
  if kind == 'photos':
    return [f'{it.photo_id}\t{os.path.relpath(it.image_path, root) if it.image_path else ""}'
            f'\t{it.text}' for it in items]
  return [f'{i}\t{it}' for i, it in enumerate(items)]


# ----------------------------------------------------------------------------- extraction


def extract(split: Split, encoder: Encoder, out: str, *, batch_size: int = 64,
            shard_size: int = 1024, devices: Optional[Sequence[Any]] = None,
            allow_missing: bool = False, vocabulary: Optional[CategoryVocabulary] = None,
            transform: Optional[Callable[[features_lib.FeatureStore],
                                         features_lib.FeatureStore]] = None,
            progress: bool = True,
            extra_meta: Optional[Mapping[str, Any]] = None,
            stop_after_shards: Optional[int] = None,
            image_reader: Optional[Callable[[Photo], Optional[Callable[[], bytes]]]] = None,
            max_bad_fraction: float = 0.0) -> ExtractResult:
  """Encodes the split's photos, queries and categories and writes the store at `out`.

  Args:
    split: the split to encode (`mediaeval.read_split`).
    encoder: a loaded encoder (`colt_jax.encoders.load`).
    out: the feature store directory to write; shards go to `<out>.partial/`.
    batch_size: global batch (rounded up to a multiple of the device count).
    shard_size: items per resumable shard (a setting: resuming needs the same value).
    devices: devices to pmap over (default: all local devices).
    allow_missing: leave photos without an image file out instead of failing.
    vocabulary: the category vocabulary (default: the split's own cluster names). Stores of
      the splits of one dataset should share one, built over all of them.
    transform: the store written is `transform(store)` of the encoded one (e.g.
      `stores.view_transform`); not a setting: the shards are the encoder's features.
    progress: tqdm bars.
    extra_meta: more entries for meta.json.
    stop_after_shards: test hook: raise `ExtractionInterrupted` once this run has written
      this many new shards (as if killed).
    image_reader: where images come from instead of the files under `split.root` (see
      `photo_items`), e.g. `TfdsSplit.image_reader`; not a setting (the same photos, the same
      images).
    max_bad_fraction: the share of the split's photos whose image cannot be read that the run
      leaves out (module docstring); 0: any stops it.

  Returns:
    An `ExtractResult` (the store as written, shard and speed counts). With several processes
    (`colt_jax.util.distributed`) each encodes its share of the shards and only the chief writes
    the store (the others' result has `store` None).
  """
  if shard_size < 1:
    raise InputError(f'--shard_size must be >= 1, got {shard_size}')
  if batch_size < 1:
    raise InputError(f'--batch_size must be >= 1, got {batch_size}')
  if not 0.0 <= max_bad_fraction <= 1.0:
    raise InputError(f'--max_bad_fraction must be in [0, 1], got {max_bad_fraction}')
  out = outputs.check_writable_dir(out, 'a feature store', flag='--out')
  partial = out + '.partial'
  outputs.check_writable_dir(partial, 'extraction shards')
  devices = list(devices) if devices else default_devices()
  if vocabulary is None:
    vocabulary = CategoryVocabulary.from_splits([split])

  photos, missing = photo_items(split, encoder.needs_images, image_reader)
  shared = sum(1 for _, occ in unique_photos(split) if len(occ) > 1)
  if missing:
    where = os.path.join(split.root, 'img', '<topic title>', '<photo id>' + IMAGE_EXTENSION)
    if image_reader is not None:
      where = f'the images of {getattr(image_reader, "__self__", image_reader)}'
    total = len(photos) + len(missing)
    listed = ', '.join(missing[:_LIST_MISSING])
    if len(missing) > _LIST_MISSING:
      listed += f' and {len(missing) - _LIST_MISSING} more'
    message = (f'{split.dataset}/{split.split}: {len(missing)} of {total} photos have no image '
               f'file (looked for {where}): {listed}')
    if not allow_missing:
      raise MissingPhotosError(message + '. Pass allow_missing (--allow_missing) to leave '
                               'them out of the store.', missing)
    logging.warning('%s; leaving them out of the store (allow_missing)', message)

  bad = unreadable_photos(photos, encoder, progress)
  if bad:
    _check_bad(split, bad, len(photos) + len(missing), max_bad_fraction)
    left_out = {it.photo_id for it, _ in bad}
    photos = [it for it in photos if it.photo_id not in left_out]

  items = {'photos': photos, 'queries': [t.title for t in split.topics],
           'categories': list(vocabulary.names)}
  settings = {
      'format': PARTIAL_FORMAT, 'encoder': encoder.name, 'dim': int(encoder.dim),
      'encoder_settings': dict(encoder.settings), 'dataset': split.dataset,
      'split': split.split, 'source': os.path.abspath(split.root), 'shard_size': shard_size,
      'allow_missing': bool(allow_missing),
      # Always None: kept so that the partial dirs of earlier versions, which recorded their
      # appended descriptors here, still resume.
      'descriptors': None,
      'items': {k: {'count': len(v), 'sha256': shards.digest(_item_keys(k, v, split.root))}
                for k, v in items.items()},
  }
  jobs = [(kind, index, start) for kind in KINDS
          for index, start in enumerate(range(0, len(items[kind]), shard_size))]
  # A full disk keeps the finished shards for the next run (`shards.kept_on_full_disk`).
  with shards.kept_on_full_disk(partial):
    if jax.process_index() == 0 and check_or_record_settings(
        partial, settings, [os.path.basename(shard_path(partial, k, i)) for k, i, _ in jobs]):
      logging.info('resuming from %s', partial)
    distributed.barrier('extract: settings')
    if jax.process_index() != 0:  # the chief recorded them: every process must agree
      check_or_record_settings(partial, settings)

    runner = BatchRunner(encoder, devices, batch_size)
    logging.info('%s on %d device(s), global batch %d: %d photos, %d queries, %d categories',
                 encoder.name, len(devices), runner.batch_size, len(photos), len(items['queries']),
                 len(items['categories']))
    result = ExtractResult(out, None, {k: 0 for k in KINDS}, {k: 0 for k in KINDS},
                           {k: 0 for k in KINDS}, {k: 0.0 for k in KINDS})
    written = 0
    # Several processes (colt_jax.util.distributed): shard k of the run (counted over the kinds) is
    # encoded by process k % count; after a barrier the chief reads every shard and writes.
    rank, count = jax.process_index(), jax.process_count()
    chief = rank == 0
    mine = [job for number, job in enumerate(jobs) if number % count == rank]
    computed = {}  # (kind, index) -> features this process just encoded (not read back)
    bar = tqdm.tqdm(total=sum(len(items[k][s:s + shard_size]) for k, _, s in mine),
                    desc=f'{encoder.name.split(":")[0]} photos, queries, categories',
                    unit='item', disable=not (progress and chief), dynamic_ncols=True,
                    mininterval=1.0)
    try:
      for kind, index, start in mine:
        chunk = items[kind][start:start + shard_size]
        path = shard_path(partial, kind, index)
        if shards.load_shard(path, len(chunk), encoder.dim) is not None:
          result.reused_shards[kind] += 1
          bar.update(len(chunk))
          continue
        t0 = time.perf_counter()
        feats = runner.encode(kind, chunk, on_batch=bar.update)
        result.seconds[kind] += time.perf_counter() - t0
        result.computed_items[kind] += len(chunk)
        result.computed_shards[kind] += 1
        shards.save_shard(path, feats)
        computed[kind, index] = feats
        written += 1
        if stop_after_shards is not None and written >= stop_after_shards:
          raise ExtractionInterrupted(f'stopped after {written} shard(s) (test hook)')
    finally:
      bar.close()
    distributed.barrier('extract: shards')
    if not chief:
      return result
    arrays = {}
    for kind in KINDS:
      parts = [computed[kind, index] if (kind, index) in computed else
               shards.load_shard(shard_path(partial, kind, index),
                                 len(items[kind][s:s + shard_size]), encoder.dim)
               for index, s in enumerate(range(0, len(items[kind]), shard_size))]
      arrays[kind] = (np.concatenate(parts) if parts
                      else np.zeros((0, encoder.dim), np.float32))

    extra = {'encoder_settings': dict(encoder.settings), 'missing_photos': list(missing),
             'bad_images': [{'photo_id': it.photo_id, 'reason': r,
                             'path': os.path.relpath(it.image_path, split.root)}
                            for it, r in bad],
             'shared_photos': shared, 'shard_size': shard_size}
    extra.update(extra_meta or {})
    store = features_lib.make_store(
        photos=arrays['photos'], photo_ids=[p.photo_id for p in photos],
        queries=arrays['queries'], query_ids=[t.number for t in split.topics],
        categories=arrays['categories'], category_names=list(vocabulary.names),
        encoder=encoder.name, dataset=split.dataset,
        split=split.split, source=os.path.abspath(split.root), normalised=True, extra=extra)
    if transform is not None:
      store = transform(store)
    features_lib.write(out, store)
    outputs.remove_owned(partial)
    result.store = store
  return result
