"""The model search.py and serve.py search with when no --model is given: the recommended
model `make model` writes (`experiments/make_model.py`), at a path relative to the working
folder (run the commands from the checkout's root, as `make` does), and the store it names.

Here, not in the reproduction that trains it, so that searching imports nothing of the
research protocol (tests/test_layers.py checks search.py's and serve.py's imports).
"""
import os

from colt_jax.inference import model_dirs
from colt_jax.inference import settings as settings_lib
from colt_jax.util.errors import InputError

# Where `make model` writes its model directories (make_model.py --out), relative to the
# working folder.
MODELS_DIR = os.path.join('work', 'models')
RECOMMENDED_NAME = 'div400-minilm-recommended'
RECOMMENDED_MODEL = os.path.join(MODELS_DIR, RECOMMENDED_NAME)
# The rows `make model` builds, in its order (reproduction/full_models.py's ROWS), and the
# documented names of rows since renamed: what a hint may tell a user to build.
MAKE_MODEL_ROWS = ('colt-pairs-text-only', 'recommended', 'colt')
RENAMED_ROWS = {'colt-pairs': 'colt-pairs-text-only'}


def build_hint(model: str) -> str:
  """How to build `model` when it names a row of `make model` (<out>/div400-minilm-<row>, by
  its folder's name), else ''."""
  name = os.path.basename(os.path.normpath(model))
  for row in MAKE_MODEL_ROWS + tuple(RENAMED_ROWS):
    if name == f'div400-minilm-{row}':
      row = RENAMED_ROWS.get(row, row)
      out = os.path.dirname(os.path.normpath(model)) or '.'
      if os.path.abspath(out) == os.path.abspath(MODELS_DIR):
        return f'build it with `make model ROWS={row}`'
      return f'build it with `python experiments/make_model.py --rows {row} --out {out}`'
  return ''


def search_inputs(model: str = '', store: str = '') -> tuple:
  """(model directory, store) of search.py and serve.py: `model` default the recommended
  model `make model` writes (RECOMMENDED_MODEL; '' when it is not there and a store is given:
  the model-free methods search it), `store` default the store the model names
  (`model_dirs.recorded_store`); a missing default is a one-line InputError saying what to
  run."""
  if not model:
    model = RECOMMENDED_MODEL
    if not os.path.isfile(os.path.join(model, settings_lib.MODEL_FILE)):
      if store:
        return '', store
      raise InputError(f'no --store and no --model given, and the recommended model {model} is '
                       'not there: run `make model` from the checkout\'s root (it and its Div400 '
                       'store; the path is relative to the working folder), or index your photos '
                       '(data_prep/index_collection.py --images FOLDER --encoder clip --out '
                       'STORE) and pass --store STORE: no model is needed')
  elif not os.path.exists(os.path.join(model, settings_lib.MODEL_FILE)):
    hint = build_hint(model)
    if hint:
      raise InputError(f'{model} (--model): not built yet; {hint}')
  if not store:
    store = model_dirs.recorded_store(model)
    if not store:
      raise InputError(f'--store is required: the model {model} names no feature store')
    if not os.path.isfile(os.path.join(store, 'meta.json')):
      raise InputError(f'{store}, the store the model {model} names, is not there: run `make '
                       'model` (or pass --store STORE)')
  return model, store
