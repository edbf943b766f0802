"""What a collection's store knows of each photo (`collection.py` indexes with it): the item,
its file's record, the check that finds unreadable images, the previous store, and the plan.

A `FileRecord` per photo: relative path, size, modification time, sha256 of the content (for a
text encoder the sha256 of the text it reads), and why it cannot be read. `scan` makes them:
a file whose size and modification time match its earlier record is not read again; every file
read for its hash is also decoded at a reduced size, so unreadable images are found before any
encoding. `read_previous` says what of the store already at `out` can be reused (its records
are its `files.json`, RECORDS_FORMAT); `make_plan` says what to reuse, what to encode, and what
changed (`meta.json['changes']`).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import io
import json
import os
from typing import Any, Callable, Optional, Sequence

from absl import logging
import tqdm

from colt_jax.data import features as features_lib
from colt_jax.engines import approximate as engines_lib
from colt_jax.engines import saved_engines
from colt_jax.util.errors import InputError

RECORDS_FILE = 'files.json'
RECORDS_FORMAT = 'colt_jax.collection.files/1'
LIST_IDS = 100  # ids named per kind of change in meta.json['changes']
_LIST_BAD = 10  # paths named in the error message
_CHECK_SIZE = (64, 64)  # JPEGs are decoded at a reduced size by the readability check
_SCAN_CHUNK = 1024


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


@dataclasses.dataclass(frozen=True)
class FileRecord:
  """What the store knows of one photo's file: `sha256` of its content (of its text for a
  text encoder), and `bad`, why it cannot be read ('' when it can)."""
  photo_id: str
  size: int
  mtime_ns: int
  sha256: str
  bad: str = ''

  def row(self) -> list:
    return [self.photo_id, self.size, self.mtime_ns, self.sha256] + ([self.bad] if self.bad
                                                                     else [])

  @classmethod
  def from_row(cls, row) -> 'FileRecord':
    pid, size, mtime, sha = row[:4]
    return cls(str(pid), int(size), int(mtime), str(sha), str(row[4]) if len(row) > 4 else '')


class TooManyBadImagesError(InputError):
  """More images could not be read than the run allows."""


# ----------------------------------------------------------------------------- checking files


def image_decode_error(data: bytes, path: str) -> str:
  """'' when the bytes of the file `path` decode as an image (JPEGs at a reduced size:
  cheap), else why not."""
  from PIL import Image, ImageOps  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO(data)
  try:
    with Image.open(buf) as im:
      im.draft('RGB', _CHECK_SIZE)
      ImageOps.exif_transpose(im).convert('RGB')
    return ''
  except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
    return f'cannot read image ({str(e).replace(repr(buf), repr(path))})'


def _record(item: CollectionItem, needs_images: bool, cached: Optional[FileRecord]
            ) -> FileRecord:
  """The item's record: `cached` when its size and modification time still match, else
  read, hashed and (images) checked."""
  if not needs_images:
    text = item.text.encode('utf-8', 'surrogatepass')
    return FileRecord(item.photo_id, len(text), 0, hashlib.sha256(text).hexdigest())
  try:
    if item.read_image is not None:
      data, mtime = item.read_image(), 0
    else:
      st = os.stat(item.image_path)
      if (cached is not None and cached.size == st.st_size and cached.mtime_ns == st.st_mtime_ns
          and cached.sha256):
        return cached
      with open(item.image_path, 'rb') as f:
        data = f.read()
      mtime = st.st_mtime_ns
  except OSError as e:  # missing, a folder, permissions
    return FileRecord(item.photo_id, 0, 0, '', f'cannot read image ({e.strerror or e})')
  return FileRecord(item.photo_id, len(data), mtime, hashlib.sha256(data).hexdigest(),
                    image_decode_error(data, item.image_path))


def scan(items: Sequence[CollectionItem], needs_images: bool, cache: dict, *,
         allowed_bad: Optional[int] = None, source: str = '', fraction: float = 1.0,
         progress: bool = False) -> list:
  """A `FileRecord` per item (`cache`: photo id -> an earlier record, reused while the file's
  size and modification time match). Raises `TooManyBadImagesError` as soon as more than
  `allowed_bad` images are unreadable."""
  records, bad = [], []
  workers = min(8, 2 * (os.cpu_count() or 1))
  bar = tqdm.tqdm(total=len(items), desc='checking files', unit='file', disable=not progress,
                  dynamic_ncols=True, mininterval=1.0)
  pool = concurrent.futures.ThreadPoolExecutor(workers)
  try:
    for start in range(0, len(items), _SCAN_CHUNK):
      chunk = items[start:start + _SCAN_CHUNK]
      for rec in pool.map(lambda it: _record(it, needs_images, cache.get(it.photo_id)), chunk):
        records.append(rec)
        if rec.bad:
          bad.append((rec.photo_id, rec.bad))
          if allowed_bad is not None and len(bad) > allowed_bad:
            raise too_many(source, len(items), allowed_bad, fraction, bad,
                           checked=len(records))
      bar.update(len(chunk))
  finally:
    pool.shutdown(wait=False, cancel_futures=True)  # a refusal does not wait for the rest
    bar.close()
  return records


def too_many(source: str, total: int, allowed: int, fraction: float, bad: Sequence[tuple],
             checked: Optional[int] = None) -> TooManyBadImagesError:
  first = '; '.join(f'{p}: {r}' for p, r in bad[:_LIST_BAD])
  so_far = f' (after checking {checked})' if checked is not None and checked < total else ''
  return TooManyBadImagesError(
      f'{source}: {len(bad)} of {total} images cannot be read{so_far}, more than '
      f'--max_bad_fraction={fraction} allows ({allowed}): {first}')


# ----------------------------------------------------------------------------- the previous store


@dataclasses.dataclass
class Previous:
  """The store at `out` before this run: what of it can be reused."""
  store: Optional[features_lib.FeatureStore] = None
  records: Optional[dict] = None  # photo id -> FileRecord (readable and unreadable)
  engines: dict = dataclasses.field(default_factory=dict)  # name -> saved folder
  engine_specs: dict = dataclasses.field(default_factory=dict)  # name -> its saved EngineSpec
  source: Optional[str] = None  # the folder or list its records were made from
  reason: str = ''  # why its features cannot be reused ('' = they can)

  @property
  def reusable(self) -> bool:
    return self.store is not None and self.records is not None and not self.reason


def read_previous(out: str, encoder: Any) -> Previous:
  if not os.path.isfile(os.path.join(out, 'meta.json')):
    return Previous(reason='no store yet')
  try:
    store = features_lib.load(out)
  except InputError as e:
    logging.warning('%s: the store there cannot be read (%s); encoding everything anew', out, e)
    return Previous(reason=f'the store there cannot be read ({e})')
  prev = Previous(store=store)
  saved = store.meta.get('engines') or {}
  if not isinstance(saved, dict) or not all(isinstance(i, dict) for i in saved.values()):
    reason = 'meta.json: engines must map each engine to an object'
    logging.warning('%s: the store there cannot be read (%s); encoding everything anew', out,
                    reason)
    return Previous(reason=f'the store there cannot be read ({reason})')
  for name, info in saved.items():
    folder = os.path.join(out, str(info.get('path', '')))
    if name in engines_lib.SAVED_ENGINES and os.path.isfile(
        os.path.join(folder, engines_lib.ENGINE_FILE)):
      prev.engines[name] = folder
  meta = store.meta
  if meta.get('dataset') != 'collection':
    prev.reason = f'the store there is of dataset {meta.get("dataset")!r}, not a collection'
  elif (meta.get('encoder') != encoder.name or meta.get('dim') != int(encoder.dim)
        or meta.get('encoder_settings') != json.loads(json.dumps(dict(encoder.settings)))):
    prev.reason = (f'the store there was made by {meta.get("encoder")} '
                   f'{meta.get("encoder_settings")}, not {encoder.name} '
                   f'{dict(encoder.settings)}')
  if prev.reason:
    return prev
  try:
    with open(os.path.join(out, RECORDS_FILE)) as f:
      saved = json.load(f)
    records = [FileRecord.from_row(r) for r in saved['photos']]
    unreadable = [FileRecord.from_row(r) for r in saved.get('unreadable', [])]
  except FileNotFoundError:
    prev.reason = f'the store there has no {RECORDS_FILE} (made before stores followed folders)'
    return prev
  except (ValueError, KeyError, TypeError, IndexError) as e:
    prev.reason = f'its {RECORDS_FILE} is unreadable ({e})'
    return prev
  if [r.photo_id for r in records] != [str(p) for p in store.photo_ids]:
    prev.reason = f'its {RECORDS_FILE} does not match its photo_ids'
    return prev
  if saved.get('content') != content_kind(encoder):
    prev.reason = (f'its {RECORDS_FILE} hashes {saved.get("content")}, not '
                   f'{content_kind(encoder)}')
    return prev
  prev.records = {r.photo_id: r for r in records + unreadable}
  prev.source = saved.get('source')
  return prev


def content_kind(encoder: Any) -> str:
  return 'file' if encoder.needs_images else 'text'


# ----------------------------------------------------------------------------- the plan


@dataclasses.dataclass
class Plan:
  records: list  # FileRecord per item
  reuse: dict  # item index -> row of the previous store
  encode: list  # item indices to encode, in order
  bad: dict  # item index -> reason (known before encoding)
  changes: dict


def make_plan(items: Sequence[CollectionItem], records: Sequence[FileRecord],
              prev: Previous) -> Plan:
  """What to reuse, what to encode, and what changed since the previous store."""
  old = prev.records if prev.reusable else {}
  rows = {str(p): i for i, p in enumerate(prev.store.photo_ids)} if prev.reusable else {}
  by_sha = {}
  for pid in rows:
    by_sha.setdefault(old[pid].sha256, pid)
  current = {it.photo_id for it in items}
  kinds = {'added': [], 'changed': [], 'renamed': [], 'kept': []}
  reuse, encode, bad = {}, [], {}
  for i, (item, rec) in enumerate(zip(items, records)):
    before = old.get(item.photo_id)
    same_file = before is not None and before.sha256 == rec.sha256 and rec.sha256
    source = None
    if rec.bad:
      bad[i] = rec.bad
    elif same_file and item.photo_id in rows:
      source = item.photo_id
    elif rec.sha256 in by_sha:  # its content is in the store under another path
      source = by_sha[rec.sha256]
    if source is not None:
      reuse[i] = rows[source]
    elif not rec.bad:
      encode.append(i)
    if rec.bad:  # counted as unreadable, not as added, changed or kept
      continue
    if before is None:
      if source is not None and source not in current:
        kinds['renamed'].append([source, item.photo_id])
      else:
        kinds['added'].append(item.photo_id)
    else:
      kinds['kept' if same_file else 'changed'].append(item.photo_id)
  removed = sorted(p for p in old if p not in current)
  renamed_from = {a for a, _ in kinds['renamed']}
  removed = [p for p in removed if p not in renamed_from]
  changes = {k: len(v) for k, v in kinds.items()}
  changes.update(
      removed=len(removed),
      encoded=len(encode),
      reused=len(reuse),
      unreadable=len(bad),
      time=saved_engines._utc_now(),  # pylint: disable=protected-access
      previous_photos=0 if prev.store is None else len(prev.store.photo_ids),
      previous='reused' if prev.reusable else
      ('none' if prev.store is None else f'not reused: {prev.reason}'))
  for k in ('added', 'changed', 'renamed'):
    changes[f'{k}_ids'] = kinds[k][:LIST_IDS]
  changes['removed_ids'] = removed[:LIST_IDS]
  return Plan(list(records), reuse, encode, bad, changes)


def up_to_date(items, plan: Plan, prev: Previous, specs: Sequence[Any]) -> bool:
  """Whether the new store would be the previous one: same rows, same engines."""
  c = plan.changes
  if not prev.reusable or plan.encode or c['added'] or c['changed'] or c['renamed'] or c[
      'removed']:
    return False
  kept = [i for i in range(len(items)) if i not in plan.bad]
  return ([items[i].photo_id for i in kept] == [str(p) for p in prev.store.photo_ids]
          and all(plan.reuse.get(i) == k for k, i in enumerate(kept))
          and {s.name: s for s in specs} == prev.engine_specs)


def first_bad(bad: Sequence[tuple], items) -> str:
  if not bad:
    return ''
  key, reason = bad[0]
  pid = items[key].photo_id if isinstance(key, int) else key
  return f'{pid}: {reason}'


def records_json(records: Sequence[FileRecord], ids: Sequence[str], source: str,
                 content: str) -> dict:
  by_id = {r.photo_id: r for r in records}
  return {'format': RECORDS_FORMAT, 'source': source, 'content': content,
          'fields': ['photo_id', 'size', 'mtime_ns', 'sha256', 'reason (unreadable only)'],
          'photos': [by_id[p].row() for p in ids],
          'unreadable': [r.row() for r in records if r.bad]}
