"""Your own photo collection into a feature store: a folder tree of images, or a CSV list.

`folder_items(root)` lists every JPEG/PNG/WebP file under `root` (sorted relative paths: the
photo ids); `list_items(path)` reads `path[,caption]` lines (a header `path,caption` is
optional; relative paths are relative to the CSV's folder). `index_collection(items, encoder,
out)` encodes them into a store of the project's one format (`colt_jax/data/features.py`): photos
only, no queries or categories (no labels are needed), batched and pmap-ed by
`batching.BatchRunner`, saved shard by shard in `<out>.partial/` so that an interrupted run
resumes where it stopped (with the same settings; others are refused), with a progress bar.

The store follows the folder. It records every photo's file (`files.json`: relative path,
size, modification time, sha256 of the content; for a text encoder the sha256 of the text it
reads). A run over a store of the same encoder encodes only what it does not hold yet: a new
path, or a path whose content changed. A photo whose content the store already holds under
another path (renamed, moved, copied) takes those features; removed photos are dropped. A file
whose size and modification time match its record is not read again (`rehash` reads every
file). Rows follow the listing (sorted paths), so an updated store equals a fresh index of
the folder. `meta.json['changes']` says what changed: counts of added, removed, changed,
renamed and kept photos, how many were encoded, the first ids of each, and the time. Saved
engines (`engines`: FAISS indexes, a Qdrant collection; `colt_jax.engines.approximate`) are rebuilt over
the new rows, or updated (an IVF engine keeps its trained cells when little changed), in the
same atomic write of the store (`meta.json['engines']`). A run that finds nothing changed
rewrites no array: it refreshes `files.json` and `meta.json['changes']`.

Images are decoded with their EXIF orientation applied (`clip.load_image`). Unreadable images
(missing, corrupt, truncated, not an image) are found before any encoding: every file read for
its hash is also decoded at a reduced size; an image that still fails when encoded is found
then (its shard's images are checked one by one). They are skipped and listed by path with
their reason in `meta.json['bad_images']`. When more than `max_bad_fraction` of the collection
is unreadable, the run stops as soon as that many are found (during the check, before the
encoder runs), with an error naming the first of them.

This module lists the items and runs the indexing; the records, the check and the plan are in
`collection_records.py`, the writing of the store and its engines in `collection_store.py`.
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import time
from typing import Any, Iterable, Optional, Sequence

from absl import logging
import jax
import tqdm

from colt_jax.util import atomic
from colt_jax.util import distributed
from colt_jax.engines import approximate as engines_lib
from colt_jax.data import features as features_lib
from colt_jax.util import outputs
from colt_jax.encoders import batching
from colt_jax.encoders import collection_records as records_lib
from colt_jax.encoders import collection_store as store_lib
from colt_jax.encoders import shards
# Re-exported: the items, their records and the error are this module's API.
from colt_jax.encoders.collection_records import LIST_IDS, RECORDS_FILE, RECORDS_FORMAT  # pylint: disable=unused-import
from colt_jax.encoders.collection_records import CollectionItem, FileRecord, TooManyBadImagesError, scan  # pylint: disable=unused-import
from colt_jax.encoders.collection_store import ENGINES_DIR  # pylint: disable=unused-import
from colt_jax.util.errors import InputError

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.webp')
FORMAT = 'colt_jax.collection.partial/2'
PLAN_FILE = 'plan.json'


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
      reader = csv.reader(f, strict=True)  # an unclosed quote is an error, not one long field
      try:
        rows = list(reader)
      except csv.Error as e:
        raise InputError(f'{path}:{reader.line_num}: malformed CSV ({e})') from None
  except FileNotFoundError:
    raise InputError(f'{path} (--list): no such file') from None
  except IsADirectoryError:
    raise InputError(f'{path} (--list): a folder, not a CSV file') from None
  except UnicodeDecodeError as e:
    raise InputError(f'{path}:{_first_non_utf8_line(path)}: not a UTF-8 CSV file '
                     f'({e.reason})') from None
  base = os.path.dirname(os.path.abspath(path))
  out, seen = [], {}
  for line, row in enumerate(rows, 1):
    if not row or not ''.join(row).strip():
      continue
    names = [c.strip().lower() for c in row]
    if line == 1 and names in (['path'], ['path', 'caption']):
      continue  # header
    if line == 1 and {'path', 'caption'} & set(names):
      raise InputError(f'{path}:1: the header must be path[,caption], in that order; got '
                       f'{",".join(row)}')
    if len(row) == 1 and (';' in row[0] or '\t' in row[0]):
      sep = 'a semicolon' if ';' in row[0] else 'a tab'
      raise InputError(f'{path}:{line}: one field holding {sep}; the list is comma-separated: '
                       'path[,caption] (quote a path that holds one)')
    if len(row) > 2:
      raise InputError(f'{path}:{line}: expected path[,caption], got {len(row)} fields (quote '
                       'a caption that holds commas)')
    pid = row[0].strip()
    if not pid:
      raise InputError(f'{path}:{line}: empty path')
    key = os.path.normpath(pid)  # ./a.jpg and a.jpg are one photo
    if key in seen:
      raise InputError(f'{path}:{line}: {pid} is listed twice (first at line {seen[key]})')
    seen[key] = line
    full = pid if os.path.isabs(pid) else os.path.join(base, pid)
    out.append(CollectionItem(pid, os.path.abspath(full), row[1].strip() if len(row) > 1 else ''))
  if not out:
    raise InputError(f'{path} (--list): no photos listed')
  return out


def _first_non_utf8_line(path: str) -> int:
  with open(path, 'rb') as f:
    for line, raw in enumerate(f, 1):
      try:
        raw.decode('utf-8')
      except UnicodeDecodeError:
        return line
  return 1


# ----------------------------------------------------------------------------- encoding


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
                     devices: Optional[Sequence[Any]] = None, max_bad_fraction: float = 0.5,
                     progress: bool = True, engines: Optional[Iterable[Any]] = None,
                     rehash: bool = False,
                     stop_after_shards: Optional[int] = None) -> features_lib.FeatureStore:
  """Encodes a collection's photos into the store `out`, or brings the store there up to date
  with them (see the module docstring); `source` (the folder or the CSV) is recorded in
  meta.json. `engines`: the engines to save with the store (names or `EngineSpec`s; None:
  those it has). Returns the store (None on a process other than the chief). One command
  writes a store at a time (`outputs.exclusive`): a second one would take the first one's
  live shards for an interrupted run's."""
  lock = (outputs.exclusive(out, 'a feature store', flag='--out') if distributed.is_chief()
          else contextlib.nullcontext())
  # A full disk keeps the finished shards for the next run (`shards.kept_on_full_disk`).
  with lock, shards.kept_on_full_disk(os.path.abspath(out) + '.partial'):
    return _index_collection(items, encoder, out, source, batch_size, shard_size, devices,
                             max_bad_fraction, progress, engines, rehash, stop_after_shards)


def _index_collection(items, encoder, out, source, batch_size, shard_size, devices,
                      max_bad_fraction, progress, engines, rehash, stop_after_shards):
  if shard_size < 1 or batch_size < 1:
    raise InputError(f'--shard_size and --batch_size must be >= 1, got {shard_size}, '
                     f'{batch_size}')
  if not 0.0 <= max_bad_fraction <= 1.0:
    raise InputError(f'--max_bad_fraction must be in [0, 1], got {max_bad_fraction}')
  t0 = time.perf_counter()
  out = outputs.check_writable_dir(out, 'a feature store', flag='--out')
  partial = out + '.partial'
  outputs.check_writable_dir(partial, 'extraction shards')
  source = os.path.abspath(source)
  needs_images = bool(encoder.needs_images)
  allowed = int(max_bad_fraction * len(items))
  chief = distributed.is_chief()
  encoder_settings = {
      'format': FORMAT, 'encoder': encoder.name, 'dim': int(encoder.dim),
      'encoder_settings': dict(encoder.settings), 'shard_size': shard_size}
  prev = plan = todo = None
  specs = []
  if chief:
    prev = records_lib.read_previous(out, encoder)
    specs = store_lib.engine_specs(engines, prev)
    cache = {}
    if prev.records is not None and prev.source == source and not rehash:
      cache.update(prev.records)
    cache.update({} if rehash else _partial_records(partial, source))
    records = scan(items, needs_images, cache, allowed_bad=allowed if needs_images else None,
                   source=source, fraction=max_bad_fraction, progress=progress)
    plan = records_lib.make_plan(items, records, prev)
    expected = len(items) - len(plan.bad)
    if not expected:
      raise InputError(f'{source}: none of the {len(items)} images can be read; first: '
                       f'{records_lib.first_bad(sorted(plan.bad.items()), items)}')
    for spec in specs:  # an engine that cannot be built for this size: refused before encoding
      engines_lib.fit(spec, expected, int(encoder.dim))
    if not distributed.is_multiprocess() and records_lib.up_to_date(items, plan, prev, specs):
      return store_lib.refresh(out, prev, plan, items, source, partial, encoder)
    todo = [(items[i], plan.records[i].sha256) for i in plan.encode]
  known_bad = len(plan.bad) if plan is not None else 0
  if distributed.is_multiprocess() or todo:
    if chief:
      settings = _settings(encoder_settings, todo)
      _drop_stale_partial(partial, settings)
      shard_files = [os.path.basename(shards.shard_path(partial, 'photos', i)) + suffix
                     for i in range(-(-len(todo) // shard_size)) for suffix in ('', '.json')]
      if shards.check_or_record_settings(partial, settings, shard_files + [PLAN_FILE]):
        logging.info('resuming from %s', partial)
      atomic.write_json(os.path.join(partial, PLAN_FILE), {
          'source': source, 'records': [r.row() for r in plan.records],
          'known_bad': known_bad, 'encode': [[it.photo_id, sha] for it, sha in todo]},
          indent=None, separators=(',', ':'))
    distributed.barrier('index: settings')
    if not chief:  # the chief recorded the plan and its settings: every process must agree
      saved = _read_plan(partial)
      by_id = {it.photo_id: it for it in items}
      todo = [(by_id[pid], sha) for pid, sha in saved['encode']]
      known_bad = saved['known_bad']
      shards.check_or_record_settings(partial, _settings(encoder_settings, todo))
  todo = [it for it, _ in todo]
  starts = list(range(0, len(todo), shard_size))
  rank, count = jax.process_index(), jax.process_count()
  written, seen_bad = 0, known_bad
  mine = [i for i in range(len(starts)) if i % count == rank]  # shards of this process
  runner = batching.BatchRunner(encoder, devices or batching.default_devices(),
                                batch_size) if mine else None
  bar = tqdm.tqdm(total=sum(len(todo[starts[i]:starts[i] + shard_size]) for i in mine),
                  desc=f'{encoder.name.split(":")[0]} photos', unit='photo',
                  disable=not (progress and chief and mine), dynamic_ncols=True,
                  mininterval=1.0)
  try:
    for index in mine:
      chunk = list(todo[starts[index]:starts[index] + shard_size])
      path = shards.shard_path(partial, 'photos', index)
      done = store_lib.finished_shard(path, encoder.dim)
      if done is not None:
        bar.update(len(chunk))
        seen_bad += len(done[1]['bad'])
      else:
        before = bar.n
        shard, shard_bad = _encode_shard(runner, chunk, needs_images, bar.update)
        bar.update(len(chunk) - (bar.n - before))
        good = [it.photo_id for it in chunk if it.photo_id not in dict(shard_bad)]
        atomic.write_json(path + '.json', {'ids': good, 'bad': shard_bad})
        shards.save_shard(path, shard)
        written += 1
        seen_bad += len(shard_bad)
      if seen_bad > allowed:  # already too many: stop now, not after every shard
        raise records_lib.too_many(source, len(items), allowed, max_bad_fraction,
                                   store_lib.all_bad(plan, items, partial))
      if stop_after_shards is not None and written >= stop_after_shards:
        raise shards.ExtractionInterrupted(f'stopped after {written} shard(s) (test hook)')
  finally:
    bar.close()
  distributed.barrier('index: shards')
  if not chief:
    return None
  return store_lib.assemble(out, partial, encoder, items, todo, starts, plan, prev, specs,
                            source, shard_size, allowed, max_bad_fraction, t0)


def _settings(encoder_settings: dict, todo: Sequence[tuple]) -> dict:
  """The resume settings: the encoder's, and a digest of the photos to encode."""
  return dict(encoder_settings, items={'count': len(todo), 'sha256': shards.digest(
      [f'{it.photo_id}\t{sha}' for it, sha in todo])})


def _read_plan(partial: str) -> dict:
  try:
    with open(os.path.join(partial, PLAN_FILE)) as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f'{partial}: the indexing plan is unreadable ({e}); delete {partial} to '
                     'start over') from None


def _partial_records(partial: str, source: str) -> dict:
  """The records an interrupted run saved (a cache of hashes), {} when none."""
  try:
    with open(os.path.join(partial, PLAN_FILE)) as f:
      saved = json.load(f)
    if saved.get('source') != source:
      return {}
    return {r.photo_id: r for r in map(FileRecord.from_row, saved['records'])}
  except (OSError, ValueError, KeyError, TypeError, IndexError):
    return {}


def _drop_stale_partial(partial: str, settings: dict) -> None:
  """Removes the shards of an interrupted run over other photos with the same encoder (its
  other settings differing are refused by `shards.check_or_record_settings`)."""
  try:
    with open(os.path.join(partial, shards.SETTINGS_FILE)) as f:
      old = json.load(f)
  except (OSError, ValueError):
    return
  settings = json.loads(json.dumps(settings))
  same_encoder = isinstance(old, dict) and all(
      old.get(k) == settings[k] for k in ('encoder', 'dim', 'encoder_settings', 'shard_size'))
  if same_encoder and old != settings:
    logging.info('%s: the photos changed since the interrupted run; starting its encoding '
                 'over', partial)
    outputs.remove_owned(partial)
