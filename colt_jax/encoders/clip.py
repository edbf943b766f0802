"""CLIP as the frozen encoder f: transformers' FlaxCLIPModel on images and texts.

`ClipEncoder(model)` loads the model, the tokenizer and the image processor from one place
(a Hugging Face name or a local directory saved with `save_pretrained`). Flax weights are used
when present, else the PyTorch safetensors checkpoint is converted (`from_pt=True`).

Preprocessing is CLIP's own: `CLIPImageProcessor` (resize, centre crop, normalise) for photos,
the model's tokenizer for texts (padded to the model's `max_position_embeddings`, 77 for the
OpenAI models, and truncated there). Photos are encoded from their image files, or from the
encoded bytes that `PhotoItem.read_image` returns (a TFDS data source); queries (topic
titles) and categories (vocabulary names) as plain text, without a prompt template. Image
queries (`Retriever.search_image`) go through the same image path as PIL images. Features
are `get_image_features` / `get_text_features` (the projections into the joint space),
L2-normalised. Before encoding, extraction checks that every photo's image can be read
(`image_error`, at a reduced size); an image that cannot be read is bad input (`InputError`)
naming the file.
"""
from __future__ import annotations

import concurrent.futures
import io
import os
from typing import Any, Sequence, Union

from PIL import Image
from PIL import ImageOps
import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.encoders import extract
from colt_jax.encoders import weights
from colt_jax.util import numerics
from colt_jax.util.errors import InputError


def upright(image: Image.Image) -> Image.Image:
  """An RGB copy of `image` turned upright by its EXIF orientation (as photos are indexed)."""
  return ImageOps.exif_transpose(image).convert('RGB')


def load_image(source: Union[str, bytes], name: str = '') -> Image.Image:
  """An RGB image from a file path or from encoded bytes, turned upright by its EXIF
  orientation; a clear error names an unreadable file (or `name`, for bytes)."""
  try:
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as im:
      return upright(im)
  except (OSError, ValueError) as e:
    where = name or (source if isinstance(source, str) else f'{len(source)} image bytes')
    raise InputError(f'{where}: cannot read image ({e})') from None


def item_image(item: Union[extract.PhotoItem, Image.Image]) -> Image.Image:
  """The image of a photo item: from `read_image` when set, else from `image_path`; a PIL
  image (an image query, `Retriever.search_image`) is itself, upright."""
  if isinstance(item, Image.Image):
    return upright(item)
  if item.read_image is not None:
    return load_image(item.read_image(),
                      name=f'{item.image_path} (photo {item.photo_id}, from its image_reader)')
  return load_image(item.image_path)


def image_error(item: extract.PhotoItem) -> str:
  """'' when the photo's image can be read (decoded at a reduced size for a JPEG: cheap), else
  why not; extraction's check before any encoding (`extract.unreadable_photos`)."""
  from colt_jax.encoders import collection_records  # pylint: disable=g-import-not-at-top
  try:
    if item.read_image is not None:
      data = item.read_image()
    else:
      with open(item.image_path, 'rb') as f:
        data = f.read()
  except OSError as e:  # a folder, permissions
    return f'cannot read image ({e.strerror or e})'
  return collection_records.image_decode_error(data, os.path.basename(item.image_path or ''))


class ClipEncoder:
  """FlaxCLIPModel + CLIPImageProcessor + tokenizer, driven by `extract`."""

  needs_images = True

  def __init__(self, model: str, *, dtype: str = 'float32', image_threads: int = 4):
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    from transformers import CLIPImageProcessor  # pylint: disable=g-import-not-at-top
    from transformers import FlaxCLIPModel  # pylint: disable=g-import-not-at-top
    model = os.fspath(model)
    if os.path.isdir(model):  # a local folder: recorded absolute, so that the store's encoder
      model = os.path.abspath(model)  # loads (and compares equal) from any working folder
    self.model_name = model
    source = weights.model_source(model)  # a name: its cached folder when the Hub is away
    self.model, self.params = weights.load_flax_model(FlaxCLIPModel, source, dtype)
    self.tokenizer = AutoTokenizer.from_pretrained(source)
    self.image_processor = CLIPImageProcessor.from_pretrained(source)
    self.max_length = int(self.model.config.text_config.max_position_embeddings)
    self.dim = int(self.model.config.projection_dim)
    self.name = f'clip:{model}'
    self.image_threads = max(1, image_threads)
    self._jit_cache = {}
    self._forward = {}
    self.settings = {'model': model, 'dtype': str(jnp.dtype(dtype)),
                     'max_length': self.max_length}

  # --------------------------------------------------------------------------- host side

  def image_error(self, item: extract.PhotoItem) -> str:
    """'' when the photo's image can be read, else why not (`image_error`)."""
    return image_error(item)

  def pixel_values(self, images: Sequence[Image.Image]) -> np.ndarray:
    """float32 [n, 3, H, W] from CLIP's image processor."""
    return np.asarray(self.image_processor(images=list(images), return_tensors='np')
                      ['pixel_values'], np.float32)

  def tokenize(self, texts: Sequence[str]) -> dict:
    tok = self.tokenizer(list(texts), padding='max_length', truncation=True,
                         max_length=self.max_length, return_tensors='np')
    return {'input_ids': tok['input_ids'].astype(np.int32),
            'attention_mask': tok['attention_mask'].astype(np.int32)}

  def prepare(self, kind: str, items: Sequence[Any]) -> dict:
    if kind == 'photos':
      with concurrent.futures.ThreadPoolExecutor(min(self.image_threads, len(items))) as pool:
        images = list(pool.map(item_image, items))
      return {'pixel_values': self.pixel_values(images)}
    return self.tokenize(items)

  # --------------------------------------------------------------------------- device side

  def forward(self, kind: str):
    """The image function for photos, the text function for queries and categories (the
    same function object each time, so that compilations are shared)."""
    key = 'image' if kind == 'photos' else 'text'
    if key not in self._forward:
      model = self.model

      def image_fn(params, batch):
        return numerics.l2_normalise(
            model.get_image_features(batch['pixel_values'], params=params), dtype=jnp.float32)

      def text_fn(params, batch):
        return numerics.l2_normalise(model.get_text_features(
            batch['input_ids'], batch['attention_mask'], params=params), dtype=jnp.float32)
      self._forward = {'image': image_fn, 'text': text_fn}
    return self._forward[key]

  # --------------------------------------------------------------------------- direct use

  def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
    """Normalised image features on the default device (for checks and small jobs)."""
    return np.asarray(self._jitted('photos')(self.params,
                                             {'pixel_values': self.pixel_values(images)}))

  def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
    """Normalised text features on the default device (for checks and small jobs)."""
    return np.asarray(self._jitted('queries')(self.params, self.tokenize(texts)))

  def _jitted(self, kind: str):
    key = 'photos' if kind == 'photos' else 'texts'
    if key not in self._jit_cache:
      self._jit_cache[key] = jax.jit(self.forward(kind))
    return self._jit_cache[key]
