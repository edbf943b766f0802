"""What the service knows of each photo besides its features: its file and its title.

A store indexed from a folder (`data_prep/index_collection.py --images DIR`) records the
folder as meta.json's 'source' and each photo's path relative to it as its id; one indexed
from a list (`--list photos.csv`) records the CSV, whose lines give each photo's path and
caption (`encoders.collection.list_items`). The file of a photo is then known, and its title
is its caption, else its file name (what a text encoder read). Other stores (a dataset's
split, synthetic features) have neither: titles are None and `GET /photos` answers 404.

A file is served only while it is the one indexed: a regular file whose resolved path lies
inside the indexed folder (a list's relative paths: inside the list's folder; its absolute
paths: with no symbolic link on the way), and, for a store of image content, whose size and
modification time match its record or whose sha256 still does (`files.json`, read at start).
A photo swapped for a link out of the folder, or changed since it was indexed, is refused
(404, logged) until the store is indexed again.
"""
from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import stat
from typing import Optional, Sequence

from absl import logging

from colt_jax.encoders import collection
from colt_jax.encoders import collection_records
from colt_jax.util.errors import InputError


class PhotoCatalog:
  """photo id -> (file path or None, title or None), for the photos of one store."""

  def __init__(self, photo_ids: Sequence[str], meta: Optional[dict] = None,
               records: Optional[dict] = None):
    """`records`: the store's file records (`read_records`), to check a file's content."""
    meta = meta or {}
    self._ids = {str(p): i for i, p in enumerate(photo_ids)}
    self._folder = None
    self._root = None  # the folder every served file must resolve into (None: see `_inside`)
    self._listed = {}  # photo id -> (absolute path, title), for a store indexed from a list
    self._indexed = {}  # photo id -> (size, mtime_ns, sha256) of the file content indexed
    self._by_digest = None  # sha256 -> photo id, made on first use (`photo_of_bytes`)
    if records and records.get('content') == 'file':
      self._indexed = {str(r[0]): (int(r[1]), int(r[2]), str(r[3]))
                       for r in records.get('photos', [])}
    source = str(meta.get('source') or '')
    if meta.get('dataset') != 'collection' or not source:
      return
    if os.path.isdir(source):
      self._folder = source
      self._root = os.path.realpath(source)
    elif os.path.isfile(source):
      try:
        items = collection.list_items(source)
      except InputError as e:
        logging.warning('%s: the list the store was indexed from cannot be read (%s); photos '
                        'have no files or titles', source, e)
        return
      self._listed = {it.photo_id: (it.image_path, it.text) for it in items
                      if it.photo_id in self._ids}
      self._root = os.path.realpath(os.path.dirname(os.path.abspath(source)))
    else:
      logging.warning('%s: the folder or list the store was indexed from is gone; photos have '
                      'no files', source)

  def __len__(self) -> int:
    return len(self._ids)

  def __contains__(self, photo_id: str) -> bool:
    return photo_id in self._ids

  @property
  def has_files(self) -> bool:
    """Whether the store's photos were indexed from files (a folder or a list)."""
    return self._folder is not None or bool(self._listed)

  def _recorded(self, photo_id: str) -> Optional[str]:
    """The image file the store records for the photo (JPEG, PNG or WebP), else None."""
    if photo_id not in self._ids:
      return None
    if self._folder is not None:
      path = os.path.join(self._folder, *photo_id.split('/'))
    elif photo_id in self._listed:
      path = self._listed[photo_id][0]
    else:
      return None
    return path if path.lower().endswith(collection.IMAGE_SUFFIXES) else None

  def has_image(self, photo_id: str) -> bool:
    """Whether the store records an image file for the photo (`path` finds it while the file
    is there); no file system access, so answering a search reads no disk."""
    return self._recorded(photo_id) is not None

  def path(self, photo_id: str) -> Optional[str]:
    """The photo's image file (its resolved path) when the store records one and it is the
    file indexed (module docstring), else None; a refused file is logged with why."""
    path = self._recorded(photo_id)
    if path is None or not os.path.lexists(path):
      return None
    real = os.path.realpath(path)
    if not self._inside(photo_id, path, real):
      logging.warning('GET /photos/%s: %s resolves to %s, outside the indexed folder: refused',
                      photo_id, path, real)
      return None
    try:
      st = os.stat(real)
    except OSError:
      return None
    if not stat.S_ISREG(st.st_mode):
      logging.warning('GET /photos/%s: %s is not a regular file: refused', photo_id, path)
      return None
    if photo_id in self._indexed and not self._unchanged(self._indexed[photo_id], real, st):
      logging.warning('GET /photos/%s: %s changed since the store was indexed: refused (index '
                      'the store again)', photo_id, path)
      return None
    return real

  def _inside(self, photo_id: str, path: str, real: str) -> bool:
    if self._folder is None and os.path.isabs(photo_id):  # a list's id is its path as listed
      return real == os.path.abspath(path)  # an absolute list entry: no link on the way
    return self._root is not None and real.startswith(self._root.rstrip(os.sep) + os.sep)

  @staticmethod
  def _unchanged(record: tuple, real: str, st: os.stat_result) -> bool:
    size, mtime_ns, sha256 = record
    if st.st_size == size and st.st_mtime_ns == mtime_ns:
      return True
    digest = hashlib.sha256()
    try:
      with open(real, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
          digest.update(block)
    except OSError:
      return False
    return digest.hexdigest() == sha256

  def title(self, photo_id: str) -> Optional[str]:
    """The photo's caption, else its file name without suffix; None for other stores."""
    if photo_id in self._listed and self._listed[photo_id][1]:
      return self._listed[photo_id][1]
    if (self._folder is not None or photo_id in self._listed) and photo_id in self._ids:
      return os.path.splitext(os.path.basename(photo_id))[0]
    return None

  def photo_of_bytes(self, raw: bytes) -> Optional[str]:
    """The photo of the store whose indexed file has these bytes (its sha256 in the store's
    file records), else None: an uploaded image that is one of the store's photos."""
    if not self._indexed:
      return None
    if self._by_digest is None:
      self._by_digest = {r[2]: p for p, r in self._indexed.items()}
    return self._by_digest.get(hashlib.sha256(raw).hexdigest())

  def photo_of_file(self, path: str) -> Optional[str]:
    """The photo of the store that a file is: the file indexed for it (the same resolved
    path), or one of the same bytes (`photo_of_bytes`); else None."""
    real = os.path.realpath(path)
    for photo_id in self._ids:
      recorded = self._recorded(photo_id)
      if recorded is not None and os.path.realpath(recorded) == real:
        return photo_id
    try:
      with open(path, 'rb') as f:
        return self.photo_of_bytes(f.read())
    except OSError:
      return None

  @staticmethod
  def media_type(path: str) -> str:
    return mimetypes.guess_type(path)[0] or 'application/octet-stream'


def read_records(store_dir: str) -> Optional[dict]:
  """The file records an indexed store keeps (`files.json`), None when it has none."""
  path = os.path.join(store_dir, collection_records.RECORDS_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      records = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as e:
    raise InputError(f'{path}: unreadable file records ({e})') from None
  if not isinstance(records, dict) or records.get('format') != collection_records.RECORDS_FORMAT:
    raise InputError(f'{path}: not a store\'s file records (format '
                     f'{records.get("format") if isinstance(records, dict) else None!r})')
  if records.get('content') == 'file':  # rows [photo id, size, mtime_ns, sha256]
    rows = records.get('photos', [])
    if not isinstance(rows, list):
      raise InputError(f'{path}: photos must be a list of [id, size, mtime_ns, sha256] rows')
    for i, row in enumerate(rows):
      if not (isinstance(row, list) and len(row) in (4, 5) and isinstance(row[0], str)
              and all(isinstance(v, int) and not isinstance(v, bool) for v in row[1:3])
              and isinstance(row[3], str)):
        raise InputError(f'{path}: photos[{i}] is not an [id, size, mtime_ns, sha256] row '
                         f'({str(row)[:80]})')
  return records
