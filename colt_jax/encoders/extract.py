"""Feature extraction: batching, pmap over devices, resumable shards, the feature store.

`extract(split, encoder, out)` encodes three kinds of items of one split and writes a feature
store (`colt_jax/features.py`) at `out`:

* `photos`: every photo id of the split once, in `Split.all_photo_ids()` order (a photo that
  several topics share, 61 in Div400's testset, gets one row; its metadata and image are taken
  from its first topic, the image from a later topic's folder if the first has none);
* `queries`: the topic titles (rows in topic order, ids = topic numbers);
* `categories`: the normalised category vocabulary names, sorted (`CategoryVocabulary.names`).

Work is cut into shards of `shard_size` items per kind. Each finished shard is saved as
`<out>.partial/<kind>-<index>.npy` (temporary name, then `os.replace`, so a shard file is always
complete). The run's settings (encoder, model, dataset, split, source, shard size, options and a
digest of every input) are saved as `<out>.partial/settings.json`; a later run with the same
settings reuses the finished shards and computes only the rest, while a run with different
settings is refused (`ResumeMismatchError`) rather than mixing features. The batch size and
the devices are not settings: they change only float rounding. The partial directory is removed
once the store has been written (atomically, by `features.write`).

Within a shard, items go in global batches of `batch_size` (rounded up to a multiple of the
device count), split evenly over the devices by `jax.pmap`. An encoder that defines
`lengths(kind, items)` (token counts) gets the shard's items sorted by length first, so that a
batch holds texts of similar length and is padded little; rows go back to item order. The last
batch is padded by repeating its last item and the padded rows are dropped after the call: no
item is ever dropped. Host-side preparation (tokenising, image decoding) of the next batch
overlaps the devices' work.

Photos without an image file (for encoders that read images) are reported by id and count and
stop the run (`MissingPhotosError`) unless `allow_missing`: then they are left out of the store
and listed in `meta['missing_photos']`. Such a store lacks rows that evaluation and training
need when those photos are in the ground truth (`colt_jax.data.check_store_covers` refuses it
then); it is meant for inspection and partial experiments.

Images come from the files of the official layout, or from elsewhere through
`image_reader` (`colt_jax.datasets.tfds_builders.TfdsSplit.image_reader`: the image bytes of a
TFDS data source). Either way the items, their order and the resume settings are the same.

`transform` turns the encoded store into the one written, e.g. a view store
(`colt_jax.views`, `stores.view_transform`); the shards stay the encoder's own features, so
the same shards serve every transform.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import time
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from absl import logging
import jax
import numpy as np
import tqdm

from colt_jax import atomic
from colt_jax import devices as devices_lib
from colt_jax import distributed
from colt_jax import features as features_lib
from colt_jax import outputs
from colt_jax.datasets.types import Photo, Split
from colt_jax.datasets.vocabulary import CategoryVocabulary
from colt_jax.errors import InputError

KINDS = ('photos', 'queries', 'categories')
PARTIAL_FORMAT = 'colt_jax.extract.partial/1'
SETTINGS_FILE = 'settings.json'
IMAGE_EXTENSION = '.jpg'
_LIST_MISSING = 20  # ids named in a missing-photo message


class MissingPhotosError(InputError):
  """Photos of the split have no image file; `photo_ids` lists them."""

  def __init__(self, message: str, photo_ids: Sequence[str]):
    super().__init__(message)
    self.photo_ids = list(photo_ids)


class ResumeMismatchError(InputError):
  """`<out>.partial` holds shards made with other settings than the current run's."""


class ExtractionInterrupted(RuntimeError):
  """Raised by the `stop_after_shards` test hook (stands in for a killed run)."""


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


class Encoder(Protocol):
  """A frozen encoder f as the extraction machinery drives it.

  `prepare` runs on the host (tokenising, image decoding) and returns arrays with a leading
  batch dimension; `forward(kind)` is a pure `(params, batch) -> [b, dim]` function of those
  arrays, run under `jax.pmap`, returning L2-normalised float32 features. Optionally,
  `lengths(kind, items)` gives each item's length so that batches group similar lengths.
  """
  name: str  # meta 'encoder', e.g. 'clip:openai/clip-vit-base-patch32'
  dim: int
  params: Any
  needs_images: bool  # photos are encoded from image files (else from their metadata text)
  settings: Mapping[str, Any]  # JSON-serialisable; part of the resume settings and meta

  def prepare(self, kind: str, items: Sequence[Any]) -> dict:
    ...

  def forward(self, kind: str) -> Callable[[Any, Mapping[str, Any]], jax.Array]:
    ...


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
  return [os.path.join(split.root, 'img', titles[p.topic], p.photo_id + IMAGE_EXTENSION)
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


def _digest(lines: Sequence[str]) -> str:
  h = hashlib.sha256()
  for s in lines:
    h.update(s.encode('utf-8', 'surrogatepass'))
    h.update(b'\0')
  return h.hexdigest()


def _item_keys(kind: str, items: Sequence[Any], root: str) -> list:
  if kind == 'photos':
    return [f'{it.photo_id}\t{os.path.relpath(it.image_path, root) if it.image_path else ""}'
            f'\t{it.text}' for it in items]
  return [f'{i}\t{it}' for i, it in enumerate(items)]


def _save_atomic(path: str, array: np.ndarray) -> None:
  tmp = os.path.join(os.path.dirname(path), f'.{os.path.basename(path)}.{os.getpid()}.tmp')
  try:
    with open(tmp, 'wb') as f:
      np.save(f, array)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def _differences(old: Mapping, new: Mapping, prefix: str = '') -> list:
  out = []
  for k in sorted(set(old) | set(new)):
    a, b = old.get(k), new.get(k)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += _differences(a, b, f'{prefix}{k}.')
    elif a != b:
      out.append(f'{prefix}{k}: {a!r} -> {b!r}')
  return out


def check_or_record_settings(partial_dir: str, settings: Mapping[str, Any],
                             shard_files: Sequence[str] = ()) -> bool:
  """Records `settings` in a new partial dir, or checks them against a resumed one; the
  chief passes `shard_files` (the names of every shard the run will write there), which are
  recorded in the folder's manifest before any is written (`colt_jax.outputs`).

  Returns True when resuming. Raises `ResumeMismatchError` naming what differs.
  """
  settings = json.loads(json.dumps(settings, allow_nan=False))
  path = os.path.join(partial_dir, SETTINGS_FILE)
  if shard_files:
    outputs.claim_dir(partial_dir, 'extraction shards', files=(SETTINGS_FILE, *shard_files))
  if os.path.isfile(path):
    try:
      with open(path) as f:
        old = json.load(f)
    except json.JSONDecodeError as e:
      raise ResumeMismatchError(f'{path}: unreadable settings ({e.msg}); delete {partial_dir} '
                                'to start over') from None
    if old != settings:
      diff = _differences(old, settings)
      raise ResumeMismatchError(
          f'{partial_dir} holds shards of a run with different settings ('
          + '; '.join(diff[:6]) + (f'; ... {len(diff) - 6} more' if len(diff) > 6 else '')
          + f'). Rerun with the same settings to resume, or delete {partial_dir} to start over.')
    return True
  os.makedirs(partial_dir, exist_ok=True)
  atomic.write_json(path, settings)
  return False


def shard_path(partial_dir: str, kind: str, index: int) -> str:
  return os.path.join(partial_dir, f'{kind}-{index:05d}.npy')


def _load_shard(path: str, rows: int, dim: int) -> Optional[np.ndarray]:
  if not os.path.isfile(path):
    return None
  try:
    arr = np.load(path, allow_pickle=False)
  except (ValueError, OSError) as e:
    logging.warning('%s: unreadable shard (%s); recomputing it', path, e)
    return None
  if arr.shape != (rows, dim) or arr.dtype != np.float32 or not np.isfinite(arr).all():
    logging.warning('%s: shard has shape %s %s, expected (%d, %d) float32; recomputing it',
                    path, arr.shape, arr.dtype, rows, dim)
    return None
  return arr


# ----------------------------------------------------------------------------- batching


class BatchRunner:
  """Runs an encoder's `forward` pmap-ed over `devices` on lists of items of any length."""

  def __init__(self, encoder: Encoder, devices: Sequence[Any], batch_size: int):
    self.encoder = encoder
    self.devices = list(devices)
    n = len(self.devices)
    self.batch_size = -(-max(1, batch_size) // n) * n  # a multiple of the device count
    self._sharding = devices_lib.device_sharding(self.devices)
    self._params = devices_lib.replicate(encoder.params, self.devices)
    self._fns = []

  def _fn(self, kind: str):
    forward = self.encoder.forward(kind)
    for fn, pmapped in self._fns:  # kinds sharing a forward function share its compilations
      if fn is forward:
        return pmapped
    pmapped = jax.pmap(forward, axis_name=devices_lib.AXIS, devices=self.devices)
    self._fns.append((forward, pmapped))
    return pmapped

  def _prepare(self, kind: str, items: Sequence[Any]) -> tuple:
    """Host side of one batch: padded to the global batch by repeating the last item."""
    arrays = self.encoder.prepare(kind, items)
    n, pad = len(items), self.batch_size - len(items)
    out = {}
    for k, v in arrays.items():
      v = np.asarray(v)
      if v.shape[0] != n:
        raise ValueError(f'{self.encoder.name}: prepare({kind!r}) gave {k} with {v.shape[0]} '
                         f'rows for {n} items')
      if pad:
        v = np.concatenate([v, np.repeat(v[-1:], pad, axis=0)])
      out[k] = v
    return devices_lib.shard(out, len(self.devices)), n

  def encode(self, kind: str, items: Sequence[Any],
             on_batch: Optional[Callable[[int], None]] = None) -> np.ndarray:
    """float32 [len(items), dim], row i = features of items[i]."""
    dim = self.encoder.dim
    if not items:
      return np.zeros((0, dim), np.float32)
    fn = self._fn(kind)
    order = None
    lengths = getattr(self.encoder, 'lengths', None)
    if lengths is not None:  # similar lengths in a batch: less padding
      order = np.argsort(np.asarray(lengths(kind, items)), kind='stable')
      items = [items[i] for i in order]
    starts = range(0, len(items), self.batch_size)
    batches = [items[s:s + self.batch_size] for s in starts]
    outs, pending = [], None

    def collect(entry):
      out, n = entry
      rows = np.asarray(jax.device_get(out), np.float32).reshape(-1, dim)[:n]
      outs.append(rows)
      if on_batch:
        on_batch(n)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      future = pool.submit(self._prepare, kind, batches[0])
      for j in range(len(batches)):
        batch, n = future.result()
        if j + 1 < len(batches):
          future = pool.submit(self._prepare, kind, batches[j + 1])
        out = fn(self._params, jax.device_put(batch, self._sharding))
        if pending is not None:
          collect(pending)
        pending = (out, n)
      collect(pending)
    feats = np.concatenate(outs)
    if order is not None:
      restored = np.empty_like(feats)
      restored[order] = feats
      feats = restored
    return feats


# ----------------------------------------------------------------------------- extraction


def default_devices(num_devices: int = 0) -> list:
  devices = jax.local_devices()
  return devices[:num_devices] if num_devices > 0 else devices


def extract(split: Split, encoder: Encoder, out: str, *, batch_size: int = 64,
            shard_size: int = 1024, devices: Optional[Sequence[Any]] = None,
            allow_missing: bool = False, vocabulary: Optional[CategoryVocabulary] = None,
            transform: Optional[Callable[[features_lib.FeatureStore],
                                         features_lib.FeatureStore]] = None,
            progress: bool = True,
            extra_meta: Optional[Mapping[str, Any]] = None,
            stop_after_shards: Optional[int] = None,
            image_reader: Optional[Callable[[Photo], Optional[Callable[[], bytes]]]] = None
            ) -> ExtractResult:
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

  Returns:
    An `ExtractResult` (the store as written, shard and speed counts). With several processes
    (`colt_jax.distributed`) each encodes its share of the shards and only the chief writes
    the store (the others' result has `store` None).
  """
  if shard_size < 1:
    raise InputError(f'--shard_size must be >= 1, got {shard_size}')
  if batch_size < 1:
    raise InputError(f'--batch_size must be >= 1, got {batch_size}')
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
      'items': {k: {'count': len(v), 'sha256': _digest(_item_keys(k, v, split.root))}
                for k, v in items.items()},
  }
  jobs = [(kind, index, start) for kind in KINDS
          for index, start in enumerate(range(0, len(items[kind]), shard_size))]
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
  # Several processes (colt_jax.distributed): shard k of the run (counted over the kinds) is
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
      if _load_shard(path, len(chunk), encoder.dim) is not None:
        result.reused_shards[kind] += 1
        bar.update(len(chunk))
        continue
      t0 = time.perf_counter()
      feats = runner.encode(kind, chunk, on_batch=bar.update)
      result.seconds[kind] += time.perf_counter() - t0
      result.computed_items[kind] += len(chunk)
      result.computed_shards[kind] += 1
      _save_atomic(path, feats)
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
             _load_shard(shard_path(partial, kind, index), len(items[kind][s:s + shard_size]),
                         encoder.dim)
             for index, s in enumerate(range(0, len(items[kind]), shard_size))]
    arrays[kind] = (np.concatenate(parts) if parts
                    else np.zeros((0, encoder.dim), np.float32))

  extra = {'encoder_settings': dict(encoder.settings), 'missing_photos': list(missing),
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
