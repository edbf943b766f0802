"""Your own photo collection into a feature store: a folder tree of images, or a CSV list.

`folder_items(root)` lists every JPEG/PNG/WebP file under `root` (sorted relative paths: the
photo ids); `list_items(path)` reads `path[,caption]` lines (a header `path,caption` is
optional; relative paths are relative to the CSV's folder). `index_collection(items, encoder,
out)` encodes them into a store of the project's one format (`colt_jax/features.py`): photos
only, no queries or categories (no labels are needed), batched and pmap-ed by
`batching.BatchRunner`, saved shard by shard in `<out>.partial/` so that an interrupted run
resumes where it stopped (with the same settings; others are refused), with a progress bar.

Images are decoded with their EXIF orientation applied (`clip.load_image`). An image that
cannot be read (missing, corrupt, truncated, not an image) is skipped: each shard first
encodes its images as a batch; when one fails, the shard's images are checked one by one and
the unreadable ones are left out. They are listed by path with their error in
`meta.json['bad_images']`, and counted in the log. When more than `max_bad_fraction` of the
collection is unreadable, the run stops with an error naming the first of them.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import time
from typing import Any, Callable, Optional, Sequence

from absl import logging
import jax
import numpy as np
import tqdm

from colt_jax import atomic
from colt_jax import distributed
from colt_jax import features as features_lib
from colt_jax import outputs
from colt_jax.encoders import batching
from colt_jax.encoders import shards
from colt_jax.errors import InputError

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.webp')
FORMAT = 'colt_jax.collection.partial/1'
_LIST_BAD = 10  # paths named in the error message


@dataclasses.dataclass(frozen=True)
class CollectionItem:
  """One photo of a collection (the fields `extract`'s encoders read)."""
  photo_id: str  # the path as listed (relative to the folder or the CSV)
  image_path: str  # absolute path of the file
  caption: str = ''
  read_image: Optional[Callable[[], bytes]] = None

  @property
  def text(self) -> str:
    """What a text encoder (minilm) reads: the caption, else the file name."""
    return self.caption or os.path.splitext(os.path.basename(self.photo_id))[0]


class TooManyBadImagesError(InputError):
  """More images could not be read than the run allows."""


def folder_items(root: str) -> list:
  """Every image file under `root` (suffixes IMAGE_SUFFIXES, any case), by relative path."""
  if not os.path.isdir(root):
    raise InputError(f'{root} (--images): no such folder')
  out = []
  for folder, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(files):
      if name.lower().endswith(IMAGE_SUFFIXES) and not name.startswith('.'):
        path = os.path.join(folder, name)
        out.append(CollectionItem(os.path.relpath(path, root).replace(os.sep, '/'),
                                  os.path.abspath(path)))
  if not out:
    raise InputError(f'{root} (--images): no {"/".join(IMAGE_SUFFIXES)} files in it')
  return out


def list_items(path: str) -> list:
  """The photos of a CSV list: `path[,caption]` per line; errors name the file and line."""
  try:
    with open(path, newline='', encoding='utf-8-sig') as f:
      rows = list(csv.reader(f))
  except FileNotFoundError:
    raise InputError(f'{path} (--list): no such file') from None
  except (UnicodeDecodeError, csv.Error) as e:
    raise InputError(f'{path}: not a UTF-8 CSV file ({e})') from None
  base = os.path.dirname(os.path.abspath(path))
  out, seen = [], {}
  for line, row in enumerate(rows, 1):
    if not row or not ''.join(row).strip():
      continue
    if line == 1 and [c.strip().lower() for c in row[:2]] in (['path'], ['path', 'caption']):
      continue  # header
    if len(row) > 2:
      raise InputError(f'{path}:{line}: expected path[,caption], got {len(row)} fields (quote '
                       'a caption that holds commas)')
    pid = row[0].strip()
    if not pid:
      raise InputError(f'{path}:{line}: empty path')
    if pid in seen:
      raise InputError(f'{path}:{line}: {pid} is listed twice (first at line {seen[pid]})')
    seen[pid] = line
    full = pid if os.path.isabs(pid) else os.path.join(base, pid)
    out.append(CollectionItem(pid, os.path.abspath(full), row[1].strip() if len(row) > 1 else ''))
  if not out:
    raise InputError(f'{path} (--list): no photos listed')
  return out


def _readable(item: CollectionItem) -> Optional[str]:
  """None when the image decodes, else the reason."""
  from colt_jax.encoders import clip  # pylint: disable=g-import-not-at-top
  try:
    clip.load_image(item.image_path)
    return None
  except ValueError as e:
    return str(e).split(': ', 1)[-1]
  except OSError as e:  # e.g. permissions
    return str(e)


def _encode_shard(runner: batching.BatchRunner, chunk: Sequence[CollectionItem],
                  needs_images: bool, on_batch) -> tuple:
  """(features of the readable items, [(photo id, reason)] of the unreadable ones)."""
  if not needs_images:
    return runner.encode('photos', chunk, on_batch), []
  try:
    return runner.encode('photos', chunk, on_batch), []
  except ValueError:
    pass  # some image failed: find which, then encode the rest
  bad, good = [], []
  for item in chunk:
    reason = _readable(item)
    if reason is None:
      good.append(item)
    else:
      bad.append((item.photo_id, reason))
  return runner.encode('photos', good, on_batch), bad


def index_collection(items: Sequence[CollectionItem], encoder: Any, out: str, *,
                     source: str, batch_size: int = 64, shard_size: int = 1024,
                     devices: Optional[Sequence[Any]] = None, max_bad_fraction: float = 0.01,
                     progress: bool = True,
                     stop_after_shards: Optional[int] = None) -> features_lib.FeatureStore:
  """Encodes a collection's photos into the store `out` (see the module docstring); `source`
  (the folder or the CSV) is recorded in meta.json."""
  if shard_size < 1 or batch_size < 1:
    raise InputError(f'--shard_size and --batch_size must be >= 1, got {shard_size}, '
                     f'{batch_size}')
  if not 0.0 <= max_bad_fraction <= 1.0:
    raise InputError(f'--max_bad_fraction must be in [0, 1], got {max_bad_fraction}')
  out = outputs.check_writable_dir(out, 'a feature store', flag='--out')
  partial = out + '.partial'
  outputs.check_writable_dir(partial, 'indexing shards')
  devices = list(devices) if devices else batching.default_devices()
  settings = {
      'format': FORMAT, 'encoder': encoder.name, 'dim': int(encoder.dim),
      'encoder_settings': dict(encoder.settings), 'source': os.path.abspath(source),
      'shard_size': shard_size,
      'items': {'count': len(items), 'sha256': shards.digest(
          [f'{it.photo_id}\t{it.image_path}\t{it.caption}' for it in items])}}
  chief = distributed.is_chief()
  starts = list(range(0, len(items), shard_size))
  shard_files = [os.path.basename(shards.shard_path(partial, 'photos', i)) + suffix
                 for i in range(len(starts)) for suffix in ('', '.json')]
  if chief and shards.check_or_record_settings(partial, settings, shard_files):
    logging.info('resuming from %s', partial)
  distributed.barrier('index: settings')
  if not chief:  # the chief recorded them: every process must agree
    shards.check_or_record_settings(partial, settings)
  runner = batching.BatchRunner(encoder, devices, batch_size)
  allowed = int(max_bad_fraction * len(items))
  rank, count = jax.process_index(), jax.process_count()
  written, seen_bad, t0 = 0, 0, time.perf_counter()
  mine = [i for i in range(len(starts)) if i % count == rank]  # shards of this process
  bar = tqdm.tqdm(total=sum(len(items[starts[i]:starts[i] + shard_size]) for i in mine),
                  desc=f'{encoder.name.split(":")[0]} photos', unit='photo',
                  disable=not (progress and chief), dynamic_ncols=True, mininterval=1.0)
  try:
    for index in mine:
      chunk = list(items[starts[index]:starts[index] + shard_size])
      path = shards.shard_path(partial, 'photos', index)
      done = _finished_shard(path, encoder.dim)
      if done is not None:
        bar.update(len(chunk))
        seen_bad += len(done[1]['bad'])
      else:
        before = bar.n
        shard, shard_bad = _encode_shard(runner, chunk, encoder.needs_images, bar.update)
        bar.update(len(chunk) - (bar.n - before))
        good = [it.photo_id for it in chunk if it.photo_id not in dict(shard_bad)]
        atomic.write_json(path + '.json', {'ids': good, 'bad': shard_bad})
        shards.save_shard(path, shard)
        written += 1
        seen_bad += len(shard_bad)
      if seen_bad > allowed:  # this process's shards alone are already too many
        _too_many(partial, source, len(items), allowed, max_bad_fraction)
      if stop_after_shards is not None and written >= stop_after_shards:
        raise shards.ExtractionInterrupted(f'stopped after {written} shard(s) (test hook)')
  finally:
    bar.close()
  distributed.barrier('index: shards')
  if not chief:
    return None
  feats, ids, bad = [], [], []
  for index in range(len(starts)):  # the chief assembles every process's shards
    shard, kept = _finished_shard(shards.shard_path(partial, 'photos', index), encoder.dim)
    feats.append(shard)
    ids += kept['ids']
    bad += [(p, r) for p, r in kept['bad']]
  if len(bad) > allowed:
    _too_many(partial, source, len(items), allowed, max_bad_fraction)
  if bad:
    logging.warning('%d of %d images could not be read and are left out (meta.json '
                    'bad_images lists them); first: %s', len(bad), len(items), bad[0])
  dim = encoder.dim
  store = features_lib.make_store(
      photos=np.concatenate(feats) if feats else np.zeros((0, dim), np.float32),
      photo_ids=ids, queries=np.zeros((0, dim), np.float32), query_ids=[],
      categories=np.zeros((0, dim), np.float32), category_names=[], encoder=encoder.name,
      dataset='collection', split='all', source=os.path.abspath(source), normalised=True,
      extra={'encoder_settings': dict(encoder.settings), 'shard_size': shard_size,
             'bad_images': [{'photo_id': p, 'reason': r} for p, r in bad],
             'seconds': time.perf_counter() - t0})
  features_lib.write(out, store)
  outputs.remove_owned(partial)
  return store


def _too_many(partial: str, source: str, total: int, allowed: int, fraction: float):
  bad = []
  for name in sorted(os.listdir(partial)):
    if name.endswith('.npy.json'):
      with open(os.path.join(partial, name)) as f:
        bad += [tuple(b) for b in json.load(f)['bad']]
  first = '; '.join(f'{p}: {r}' for p, r in bad[:_LIST_BAD])
  raise TooManyBadImagesError(
      f'{source}: {len(bad)} of {total} images cannot be read, more than '
      f'--max_bad_fraction={fraction} allows ({allowed}): {first}')


def _finished_shard(path: str, dim: int) -> Optional[tuple]:
  """(features, {'ids', 'bad'}) of a finished shard; None when it is not finished."""
  kept = _load_kept(path)
  if kept is None:
    return None
  feats = shards.load_shard(path, len(kept['ids']), dim)
  return None if feats is None else (feats, kept)


def _load_kept(path: str) -> Optional[dict]:
  """The ids (and unreadable images) of a finished shard, None when it is not finished."""
  try:
    with open(path + '.json') as f:
      kept = json.load(f)
  except (FileNotFoundError, json.JSONDecodeError):
    return None
  if not isinstance(kept, dict) or 'ids' not in kept or 'bad' not in kept:
    return None
  return kept

