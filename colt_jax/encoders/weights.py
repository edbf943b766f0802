"""Loading a transformers Flax model's weights (CLIP, MiniLM) without downloads or torch."""
from __future__ import annotations

import os
import types
from typing import Optional

from absl import logging
from flax import traverse_util
import jax.numpy as jnp
import numpy as np

from colt_jax.util.errors import InputError


def load_flax_model(cls, model: str, dtype: str = 'float32') -> tuple:
  """(module wrapper, params) of a transformers Flax model class from `model`.

  Flax weights (`flax_model.msgpack`, or Flax-format safetensors) are used when present;
  otherwise the PyTorch-format `model.safetensors` is converted as `from_pt=True` would (no
  torch needed). For a local directory both ways skip transformers' random initialisation
  (`_do_init=False`), which costs more than the loading itself, and every parameter of the
  model must be in the checkpoint. A hub name is first `model_source`'s: its cached folder
  when the Hub cannot be reached, else `from_pretrained` by name (Flax first, then
  `from_pt=True`).
  """
  model = model_source(model)
  from safetensors import SafetensorError  # pylint: disable=g-import-not-at-top
  try:
    return _load(cls, model, jnp.dtype(dtype))
  except (OSError, ValueError, SafetensorError) as e:  # no model, no weights, a cut file
    what = ' '.join(str(e).split())
    raise InputError(f'{model}: cannot load {cls.__name__} weights from it ({what[:300]})'
                     ) from None


def model_source(model: str) -> str:
  """Where transformers' `from_pretrained` should load `model` from: a local folder itself; a
  Hugging Face name its snapshot in the local cache when the Hub cannot be reached (by name,
  from_pretrained would retry for minutes first), else the name. A name neither cached nor
  on a Hub that answers, or a path that is not a folder: one-line `InputError`."""
  model = os.fspath(model)
  if os.path.isdir(model):
    return model
  what = 'a model is a local folder saved with save_pretrained, or a Hugging Face name'
  if os.path.exists(model):
    raise InputError(f'{model}: not a folder ({what})')
  if model.startswith(('/', '.', '~')) or model.count('/') > 1:
    raise InputError(f'{model}: no such folder ({what})')
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  from huggingface_hub import errors  # pylint: disable=g-import-not-at-top
  import requests  # pylint: disable=g-import-not-at-top
  folder_hint = ('pass a local folder saved with save_pretrained (one downloaded elsewhere: '
                 f'`huggingface-cli download {model} --local-dir DIR`)')
  try:
    cached = huggingface_hub.snapshot_download(model, local_files_only=True)
  except errors.HFValidationError:
    raise InputError(f'{model}: not a local folder, nor a valid Hugging Face name; pass a local '
                     'folder saved with save_pretrained') from None
  except (errors.LocalEntryNotFoundError, OSError, ValueError):
    cached = ''
  try:
    huggingface_hub.model_info(model, timeout=10)
  except (errors.OfflineModeIsEnabled, requests.ConnectionError, requests.Timeout):
    if cached:
      return cached
    raise InputError(f'{model}: not a local folder, not in the Hugging Face cache, and the Hub '
                     f'cannot be reached to download it (offline?); {folder_hint}') from None
  except errors.RepositoryNotFoundError:
    if cached:
      return cached
    raise InputError(f'{model}: not a local folder, nor a model on the Hugging Face Hub (a '
                     f'private one needs `huggingface-cli login`); {folder_hint}') from None
  except (OSError, ValueError):  # gated, rate-limited, ...: from_pretrained says what
    pass
  return model


def _load(cls, model: str, dtype) -> tuple:
  if os.path.isdir(model):
    safetensors_file = os.path.join(model, 'model.safetensors')
    if (not os.path.isfile(os.path.join(model, 'flax_model.msgpack'))
        and os.path.isfile(safetensors_file)
        and _safetensors_format(safetensors_file) == 'pt'):
      return _from_pt_safetensors(cls, model, safetensors_file, dtype)
    try:
      return cls.from_pretrained(model, dtype=dtype, _do_init=False)
    except OSError as e:  # e.g. only pytorch_model.bin: needs torch
      logging.info('%s: no Flax weights (%s); retrying with from_pt=True', model, e)
  else:
    try:
      wrapper = cls.from_pretrained(model, dtype=dtype)
      return wrapper, wrapper.params
    except OSError as e:  # no Flax weights in the repository / cache
      logging.info('%s: no Flax weights (%s); retrying with from_pt=True', model, e)
  wrapper = cls.from_pretrained(model, dtype=dtype, from_pt=True)
  return wrapper, wrapper.params


def _safetensors_format(path: str) -> Optional[str]:
  from safetensors import safe_open  # pylint: disable=g-import-not-at-top
  with safe_open(path, framework='numpy') as f:
    return (f.metadata() or {}).get('format')


def _from_pt_safetensors(cls, directory: str, path: str, dtype) -> tuple:
  """transformers' PyTorch -> Flax conversion against the parameter shapes only."""
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  from transformers import modeling_flax_pytorch_utils  # pylint: disable=g-import-not-at-top
  config = cls.config_class.from_pretrained(directory)
  wrapper = cls(config, dtype=dtype, _do_init=False)
  shapes = wrapper.params_shape_tree
  stand_in = types.SimpleNamespace(params=shapes, base_model_prefix=wrapper.base_model_prefix)
  state = modeling_flax_pytorch_utils.convert_pytorch_state_dict_to_flax(load_file(path), stand_in)
  state = traverse_util.flatten_dict(state)
  wanted = traverse_util.flatten_dict(shapes)
  missing = sorted('.'.join(k) for k in wanted if k not in state)
  if missing:
    raise ValueError(f'{path}: {len(missing)} parameters of {cls.__name__} are not in the '
                     f'checkpoint (first: {missing[0]})')
  params = {}
  for key, spec in wanted.items():
    value = np.asarray(state[key])
    if value.shape != tuple(spec.shape):
      raise ValueError(f'{path}: parameter {".".join(key)} has shape {value.shape}, expected '
                       f'{tuple(spec.shape)}')
    params[key] = jnp.asarray(value, spec.dtype)
  # (PyTorch's position_ids are buffers, not weights: Flax computes them; not worth a line)
  unused = sorted('.'.join(k) for k in state
                  if k not in wanted and k[-1] != 'position_ids')
  if unused:
    logging.info('%s: unused checkpoint entries %s', path, unused[:5])
  return wrapper, traverse_util.unflatten_dict(params)
