"""f at query time (Alg. 2's h_q): text queries through f's text tower and query photos through
its image tower (CLIP only), each loaded once and run in small fixed batches, so that a query
gets the same float bits whatever else is encoded with it.
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import jax
import numpy as np

from colt_jax import encoders
from colt_jax.util.errors import InputError

TEXT_BATCH = 8  # text queries per call of f's text tower (padded): the same shapes, same bits


class QueryEncoders:
  """f's towers for queries, from a model's text encoder spec (`encoders.text_encoder_spec`:
  how to load them), loaded on first use and shared by every copy of a Retriever."""

  def __init__(self):
    self._runners = {}  # (f's spec, kind) -> BatchRunner of f's text or image tower

  def encode_texts(self, text_encoder: Optional[dict], texts: Sequence[str]) -> np.ndarray:
    """L2-normalised features [B, d] of text queries by f's text tower (loaded once, the path
    extraction encodes topic titles with)."""
    if not text_encoder:
      raise InputError('this model knows no text encoder: index a store made by '
                       'data_prep/index_collection.py or extract_features.py (clip or minilm), '
                       'or pass query features to search()')
    return _padded(text_encoder, self.runner(text_encoder, 'queries').encode(
        'queries', [str(t) for t in texts]))

  def runner(self, text_encoder: dict, kind: str):
    """f's BatchRunner for `kind` ('queries': the text tower; 'photos': the image tower), on
    one device; f is loaded once for both."""
    from colt_jax.encoders import batching  # pylint: disable=g-import-not-at-top
    spec = json.dumps(text_encoder, sort_keys=True)
    if (spec, kind) not in self._runners:
      loaded = [r.encoder for (s, _), r in self._runners.items() if s == spec]
      encoder = loaded[0] if loaded else encoders.load_text_encoder(text_encoder)
      self._runners[spec, kind] = batching.BatchRunner(encoder, jax.local_devices()[:1],
                                                       TEXT_BATCH)
    return self._runners[spec, kind]

  @staticmethod
  def check_image_tower(text_encoder: Optional[dict], store: Optional[tuple],
                        source: str) -> None:
    """Refuses image queries unless f is CLIP (it has an image tower in the query space).
    `store`: (path, encoder) of the indexed store, or None; `source`: the model, for messages."""
    path, store_f = store or ('', '')
    kind = (text_encoder or {}).get('encoder')
    if kind == 'clip':
      return
    if kind:
      what = f'{kind} text features'
    elif store_f:
      what = f'{store_f} features, of no image tower colt_jax can run'
    else:
      raise InputError(f'{source or "this model"} knows no image encoder: index a store '
                       'made with the clip encoder (data_prep/index_collection.py --encoder '
                       'clip), or pass query features to search()')
    where = f'store {path}' if path else f'{source or "this model"}: f'
    raise InputError(f'{where} has {what}: image queries need a CLIP store')

  def encode_images(self, text_encoder: Optional[dict], images: Sequence,
                    store: Optional[tuple] = None, source: str = '') -> np.ndarray:
    """L2-normalised features [B, d] of query photos (file paths or PIL images) by f's image
    tower: the indexed CLIP store's recorded model, with the indexing's preprocessing (EXIF
    orientation, CLIP's image processor, `encoders.clip`). A missing or unreadable file is
    one line naming it; a store of a text encoder (minilm) refuses."""
    self.check_image_tower(text_encoder, store, source)
    from colt_jax.encoders import clip  # pylint: disable=g-import-not-at-top
    from PIL import Image  # pylint: disable=g-import-not-at-top
    pictures = []
    for image in images:
      if isinstance(image, Image.Image):
        pictures.append(image)
        continue
      path = os.fspath(image)
      if not os.path.isfile(path):
        raise InputError(f'{path}: no such file' if not os.path.exists(path)
                         else f'{path}: not a file')
      try:
        pictures.append(clip.load_image(path))
      except ValueError as e:
        raise InputError(str(e)) from None
    return _padded(text_encoder, self.runner(text_encoder, 'photos').encode('photos', pictures))


def _padded(text_encoder: dict, features: np.ndarray) -> np.ndarray:
  """f's features as a view store's queries are: [q, 0, ...] up to its 'pad_to' width."""
  width = int(text_encoder.get('pad_to') or 0)
  features = np.asarray(features, np.float32)
  if width <= features.shape[1]:
    return features
  return np.pad(features, ((0, 0), (0, width - features.shape[1])))
