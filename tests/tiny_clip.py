"""A tiny, randomly initialised CLIP saved with `save_pretrained`, and random test images.

Shared by the encoder and extraction tests (no weights can be downloaded here).
"""
from __future__ import annotations

import json
import os

from flax import traverse_util
import numpy as np
from PIL import Image
import transformers
from transformers.models.clip import tokenization_clip


def write_tiny_clip(path: str, seed: int = 0) -> str:
  """A randomly initialised tiny FlaxCLIPModel with a hand-made BPE tokenizer and a 32-pixel
  image processor, saved with `save_pretrained` (everything offline)."""
  os.makedirs(path, exist_ok=True)
  chars = list(tokenization_clip.bytes_to_unicode().values())
  merges = [('t', 'h'), ('th', 'e</w>'), ('o', 'f</w>'), ('v', 'i'), ('vi', 'e'), ('vie', 'w</w>')]
  tokens = chars + [c + '</w>' for c in chars] + [a + b for a, b in merges]
  tokens += ['<|startoftext|>', '<|endoftext|>']  # eos last: its id is the largest
  vocab = {t: i for i, t in enumerate(tokens)}
  with open(os.path.join(path, 'vocab.json'), 'w', encoding='utf-8') as f:
    json.dump(vocab, f)
  with open(os.path.join(path, 'merges.txt'), 'w', encoding='utf-8') as f:
    f.write('#version: 0.2\n' + ''.join(f'{a} {b}\n' for a, b in merges))
  tokenizer = transformers.CLIPTokenizer(os.path.join(path, 'vocab.json'),
                                         os.path.join(path, 'merges.txt'),
                                         model_max_length=16)
  eos = vocab['<|endoftext|>']
  config = transformers.CLIPConfig(
      text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=16,
                       bos_token_id=vocab['<|startoftext|>'], eos_token_id=eos,
                       pad_token_id=eos),
      vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, image_size=32, patch_size=8),
      projection_dim=16)
  # Random parameters drawn directly (transformers' own init runs op by op: far slower).
  model = transformers.FlaxCLIPModel(config, _do_init=False)
  rng = np.random.default_rng(seed)
  flat = traverse_util.flatten_dict(model.params_shape_tree)
  params = {}
  for key, spec in flat.items():
    if key[-1] == 'scale':  # LayerNorm
      value = 1.0 + 0.1 * rng.standard_normal(spec.shape)
    elif key[-1] == 'logit_scale':
      value = np.full(spec.shape, np.log(1 / 0.07))
    else:
      value = 0.2 * rng.standard_normal(spec.shape)
    params[key] = np.asarray(value, spec.dtype)
  model.save_pretrained(path, params=traverse_util.unflatten_dict(params))
  tokenizer.save_pretrained(path)
  transformers.CLIPImageProcessor(size=32, crop_size=32).save_pretrained(path)
  return path


def random_image(seed: int, size=(40, 30)) -> Image.Image:
  rng = np.random.default_rng(seed)
  return Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8))


def indexed_photos_and_model(root, tiny_clip_dir: str, tiny_colt, first_seed: int,
                             **image_args) -> tuple:
  """(store dir, model dir) under `root`: 12 generated photos (seeds from `first_seed`)
  indexed by the tiny CLIP, and the tiny CoLT model (`tiny_colt`'s g and phi) claiming the
  tiny CLIP as its encoder (as if trained on its features), so that the store fits it."""
  from colt_jax.data import features  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import clip, collection  # pylint: disable=g-import-not-at-top
  from colt_jax.inference import retriever  # pylint: disable=g-import-not-at-top
  photos = os.path.join(root, 'photos')
  os.makedirs(photos)
  for i in range(12):
    random_image(first_seed + i, **image_args).save(os.path.join(photos, f'p{i:02d}.png'))
  store_dir = os.path.join(root, 'store')
  collection.index_collection(collection.folder_items(photos), clip.ClipEncoder(tiny_clip_dir),
                              store_dir, source=photos, progress=False)
  scl, ttc = tiny_colt
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  colt.encoder = features.load(store_dir).meta['encoder']
  return store_dir, colt.save_pretrained(os.path.join(root, 'model'))
