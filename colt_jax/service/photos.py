"""What the service knows of each photo besides its features: its file and its title.

A store indexed from a folder (`data_prep/index_collection.py --images DIR`) records the
folder as meta.json's 'source' and each photo's path relative to it as its id; one indexed
from a list (`--list photos.csv`) records the CSV, whose lines give each photo's path and
caption (`encoders.collection.list_items`). The file of a photo is then known, and its title
is its caption, else its file name (what a text encoder read). Other stores (a dataset's
split, synthetic features) have neither: titles are None and `GET /photos` answers 404.
"""
from __future__ import annotations

import mimetypes
import os
from typing import Optional, Sequence

from absl import logging

from colt_jax.encoders import collection
from colt_jax.util.errors import InputError


class PhotoCatalog:
  """photo id -> (file path or None, title or None), for the photos of one store."""

  def __init__(self, photo_ids: Sequence[str], meta: Optional[dict] = None):
    meta = meta or {}
    self._ids = {str(p): i for i, p in enumerate(photo_ids)}
    self._folder = None
    self._listed = {}  # photo id -> (absolute path, title), for a store indexed from a list
    source = str(meta.get('source') or '')
    if meta.get('dataset') != 'collection' or not source:
      return
    if os.path.isdir(source):
      self._folder = source
    elif os.path.isfile(source):
      try:
        items = collection.list_items(source)
      except InputError as e:
        logging.warning('%s: the list the store was indexed from cannot be read (%s); photos '
                        'have no files or titles', source, e)
        return
      self._listed = {it.photo_id: (it.image_path, it.text) for it in items
                      if it.photo_id in self._ids}
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
    """The photo's image file when the store records one and it exists now, else None."""
    path = self._recorded(photo_id)
    return path if path is not None and os.path.isfile(path) else None

  def title(self, photo_id: str) -> Optional[str]:
    """The photo's caption, else its file name without suffix; None for other stores."""
    if photo_id in self._listed:
      return self._listed[photo_id][1]
    if self._folder is not None and photo_id in self._ids:
      return os.path.splitext(os.path.basename(photo_id))[0]
    return None

  @staticmethod
  def media_type(path: str) -> str:
    return mimetypes.guess_type(path)[0] or 'application/octet-stream'
