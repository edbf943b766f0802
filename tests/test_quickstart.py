"""The quick start of docs/COLLECTIONS.md (issue 65 item 3), as a user runs it: a folder of
photos indexed with a CLIP model given as a local folder or a Hugging Face name (transformers'
from_pretrained, with the tiny CLIP the tests save), searched with no model; a name that
cannot be fetched offline; `make model ROWS=...`; a --model of a row not built yet."""
import json
import re
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from colt_jax.data import features
from colt_jax.inference import default_model
from colt_jax.reproduction import full_models
from float_compare import assert_close  # pylint: disable=g-bad-import-order
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
from tiny_clip import random_image
import preloaded

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ('a.jpg', 'b.png', 'trip/day1/c.jpg', 'trip/day1/d.jpg', 'trip/day2/e.webp',
          'trip/day2/f.JPG', 'home/g.jpg', 'home/h.png')
QUERY = 'the view of the tower'
HUB_NAME = 'colt-test/tiny-clip'  # in a private Hugging Face cache (HF_HOME), never fetched
CLOSED = 'http://127.0.0.1:9'  # a Hub address nothing answers (HF_ENDPOINT): refused at once


def _run(script, *args, **env):
  environ = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu', **env)
  environ.pop('COLT_JAX_DEBUG', None)
  return preloaded.run([sys.executable, os.path.join(REPO, script), *map(str, args)],
                       capture_output=True, text=True, timeout=300, env=environ)


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  """A folder tree of 8 photos (JPEG, PNG, WebP; nested) and one file that is not an image."""
  root = tmp_path_factory.mktemp('quickstart') / 'photos'
  for i, name in enumerate(PHOTOS):
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    random_image(300 + i, size=(40 + 3 * i, 30)).save(root / name)
  (root / 'home' / 'broken.jpg').write_bytes(b'\xff\xd8\xff\xe0 cut short')
  return root


@pytest.fixture(scope='module')
def hf_home(tiny_clip_dir, tmp_path_factory):
  """A Hugging Face cache (HF_HOME) holding the tiny CLIP as HUB_NAME, laid out as
  huggingface_hub's downloads are (refs/main naming a snapshot)."""
  home = tmp_path_factory.mktemp('hf_home')
  repo = home / 'hub' / ('models--' + HUB_NAME.replace('/', '--'))
  revision = '0123456789abcdef0123456789abcdef01234567'
  shutil.copytree(tiny_clip_dir, repo / 'snapshots' / revision)
  (repo / 'refs').mkdir()
  (repo / 'refs' / 'main').write_text(revision)
  return home


def _transformers_features(model_dir, paths, texts):
  """Image and text features of transformers' own FlaxCLIPModel and processors, normalised."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  model = transformers.FlaxCLIPModel.from_pretrained(model_dir)
  processor = transformers.CLIPImageProcessor.from_pretrained(model_dir)
  tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
  images = [Image.open(p).convert('RGB') for p in paths]
  photos = np.asarray(model.get_image_features(
      processor(images=images, return_tensors='np')['pixel_values']))
  tok = tokenizer(list(texts), padding='max_length', truncation=True,
                  max_length=model.config.text_config.max_position_embeddings,
                  return_tensors='np')
  words = np.asarray(model.get_text_features(tok['input_ids'], tok['attention_mask']))
  norm = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
  return norm(photos), norm(words)


@pytest.fixture(scope='module')
def indexed(folder, tiny_clip_dir, tmp_path_factory):
  """(store, index_collection.py's run): the folder indexed with the tiny CLIP's folder."""
  store = tmp_path_factory.mktemp('indexed') / 'store'
  proc = _run('data_prep/index_collection.py', f'--images={folder}', f'--model={tiny_clip_dir}',
              f'--out={store}', '--noprogress')
  return store, proc


@pytest.mark.slow
def test_a_folder_indexed_with_a_local_clip_folder_is_searched_with_no_model(
    folder, tiny_clip_dir, indexed):
  """Index (the unreadable file skipped and named), then search on the command line with no
  model: the store holds transformers' own CLIP features of every photo, top-k is their
  cosine order to the query's text feature, and the default (DPP) lists k photos of it."""
  store, proc = indexed
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'skipped home/broken.jpg' in proc.stdout
  found = features.load(str(store))
  assert found.meta['encoder'] == f'clip:{os.path.abspath(tiny_clip_dir)}'
  assert sorted(found.photo_ids) == sorted(PHOTOS)
  photos, (query,) = _transformers_features(
      tiny_clip_dir, [folder / p for p in found.photo_ids], [QUERY])
  assert_close(np.asarray(found.photos, np.float32), photos.astype(np.float32))

  topk = _run('experiments/search.py', f'--store={store}', f'--query={QUERY}', '--k=5',
              '--method=topk', '--json')
  assert topk.returncode == 0, topk.stderr[-3000:]
  listed = json.loads(topk.stdout)['results']
  cosine = photos @ query
  order = np.argsort(-cosine, kind='stable')[:5]
  assert_same_ranking([r['photo_id'] for r in listed], [r['score'] for r in listed],
                      [found.photo_ids[i] for i in order], cosine[order])

  table = _run('experiments/search.py', f'--store={store}', f'--query={QUERY}', '--k=5')
  assert table.returncode == 0, table.stderr[-3000:]
  lines = table.stdout.strip().splitlines()
  assert lines[0] == f'{QUERY}: 5 photos by dpp'
  shown = [l.split()[-1] for l in lines[1:]]
  assert len(shown) == len(set(shown)) == 5 and set(shown) <= set(PHOTOS)


@pytest.mark.slow
def test_a_hugging_face_name_loads_from_the_cache_offline_as_its_folder_does(
    folder, tiny_clip_dir, hf_home, tmp_path):
  """A name (not a folder) goes through from_pretrained: found in the cache while the Hub
  cannot be reached (its address a closed port), it gives the local folder's features at once
  (no retries), and the store records the name; so it does in offline mode."""
  by_name, by_folder = tmp_path / 'by-name', tmp_path / 'by-folder'
  offline = dict(HF_HOME=str(hf_home), HF_ENDPOINT=CLOSED)
  for model, out in ((HUB_NAME, by_name), (tiny_clip_dir, by_folder)):
    proc = _run('data_prep/index_collection.py', f'--images={folder}', f'--model={model}',
                f'--out={out}', '--noprogress', **offline)
    assert proc.returncode == 0, proc.stderr[-3000:]
  named, local = features.load(str(by_name)), features.load(str(by_folder))
  assert named.meta['encoder'] == f'clip:{HUB_NAME}'
  assert list(named.photo_ids) == list(local.photo_ids)
  assert_close(np.asarray(named.photos), np.asarray(local.photos))
  # The store's queries are encoded by the same name, from the cache too.
  proc = _run('experiments/search.py', f'--store={by_name}', f'--query={QUERY}', '--k=3',
              '--method=topk', '--json', HF_HOME=str(hf_home), HF_HUB_OFFLINE='1')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert len(json.loads(proc.stdout)['results']) == 3


OFFLINE = ('not in the Hugging Face cache', 'cannot be reached',
           'pass a local folder saved with save_pretrained',
           'huggingface-cli download openai/clip-vit-base-patch32')


@pytest.mark.parametrize('model, hub, needles', [
    ('openai/clip-vit-base-patch32', {'HF_HUB_OFFLINE': '1'}, OFFLINE),
    ('openai/clip-vit-base-patch32', {'HF_ENDPOINT': CLOSED}, OFFLINE),
    ('./no-such-clip', {}, ('no such folder', 'a local folder saved with save_pretrained')),
    ('bad name!', {}, ('nor a valid Hugging Face name', 'pass a local folder')),
])
def test_a_clip_model_that_cannot_be_had_offline_is_one_line_before_anything_is_written(
    folder, hf_home, tmp_path, model, hub, needles):
  out = tmp_path / 'store'
  proc = _run('data_prep/index_collection.py', f'--images={folder}', f'--model={model}',
              f'--out={out}', '--noprogress', HF_HOME=str(hf_home), **hub)
  assert_bad_input(proc, f'{model}: ', *needles)
  assert not out.exists() and not (tmp_path / 'store.partial').exists()


def test_a_file_or_a_missing_path_given_as_the_model_is_refused_naming_it(tmp_path):
  from colt_jax.encoders import weights  # pylint: disable=g-import-not-at-top
  from colt_jax.util.errors import InputError  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'clip.msgpack'
  path.write_bytes(b'x')
  with pytest.raises(InputError, match=f'^{path}: not a folder \\('):
    weights.model_source(str(path))
  with pytest.raises(InputError, match=f'^{tmp_path / "a" / "b"}: no such folder \\('):
    weights.model_source(str(tmp_path / 'a' / 'b'))
  assert weights.model_source(str(tmp_path)) == str(tmp_path)  # a folder is itself


@pytest.mark.skipif(shutil.which('make') is None, reason='needs make')
@pytest.mark.parametrize('rows, expected', [
    ('', 'experiments/make_model.py \n'),
    ('colt-pairs-text-only', 'experiments/make_model.py --rows=colt-pairs-text-only\n'),
    ('colt,recommended', 'experiments/make_model.py --rows=colt,recommended\n'),
])
def test_make_model_passes_rows_to_make_model_py(rows, expected):
  """`make model ROWS=...` is make_model.py --rows (none: its default, every row); the recipe
  says first how to build one row."""
  # As a user's shell runs it: under `make test` the make variables of the outer make would
  # make this one a sub-make (its "Entering directory" lines and inherited flags).
  env = {k: v for k, v in os.environ.items() if k not in ('MAKELEVEL', 'MAKEFLAGS', 'MFLAGS')}
  proc = subprocess.run(['make', '-n', 'model'] + ([f'ROWS={rows}'] if rows else []),
                        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
                        env=env)
  assert proc.stdout.endswith(expected), proc.stdout
  usage = proc.stdout.splitlines()[-2]
  assert usage.startswith("echo 'make model: building ")
  assert (f'ROWS={rows}' if rows else 'make model ROWS=colt-pairs-text-only') in usage


def test_make_model_builds_the_row_a_collection_can_use_first():
  assert list(full_models.ROWS)[0] == full_models.TEXT_ONLY


@pytest.mark.parametrize('script', ['experiments/search.py', 'experiments/serve.py'])
def test_a_model_of_a_row_not_built_yet_says_how_to_build_it(tmp_path, script):
  rng = np.random.default_rng(0)
  photos = rng.normal(size=(6, 16)).astype(np.float32)
  store = features.write(str(tmp_path / 'store'), features.make_store(
      photos=photos / np.linalg.norm(photos, axis=1, keepdims=True),
      photo_ids=[f'p{i}' for i in range(6)], queries=np.zeros((0, 16), np.float32),
      query_ids=[], categories=np.zeros((0, 16), np.float32), category_names=[],
      encoder='synthetic', dataset='collection', split='all', source='test'))
  model = tmp_path / 'models' / 'div400-minilm-colt-pairs-text-only'
  args = ['--query=x'] if script.endswith('search.py') else ['--port=0']
  assert_bad_input(_run(script, f'--store={store}', f'--model={model}', *args),
                   f'{model} (--model): not built yet; build it with `python '
                   f'experiments/make_model.py --rows colt-pairs-text-only --out '
                   f'{tmp_path / "models"}`')
  # In make model's own folder, by its former name too: the make command.
  default = os.path.join(full_models.DEFAULT_OUT, 'div400-minilm-colt-pairs')
  assert default_model.build_hint(default) == (
      'build it with `make model ROWS=colt-pairs-text-only`')
  assert default_model.build_hint(str(tmp_path / 'mine')) == ''
  other = tmp_path / 'mine'
  assert_bad_input(_run(script, f'--store={store}', f'--model={other}', *args),
                   f'{other}', 'not a CoLT model directory')


def _doc(*path):
  with open(os.path.join(REPO, *path), encoding='utf-8') as f:
    return f.read()


# Each number of docs/COLLECTIONS.md's upgrades, and the row of RESULTS.md (written by
# reproduce.py --report_only) or of the README's headline (the report's own) that states it.
UPGRADE_NUMBERS = [
    ('0.6658', 'RESULTS.md', '| DPP (tuned on dev) |'),
    ('0.6878', 'RESULTS.md', '| DPP (tuned on the training folds) |'),
    ('0.6429', 'RESULTS.md', '| top-k (f) |'),
    ('0.6522', 'README.md', '| top-k over f |'),
    ('0.6410 ± 0.0046', 'RESULTS.md', '| colt-pairs text-only tokens |'),
    ('0.6514 ± 0.0031', 'RESULTS.md', '| colt-pairs text-only tokens |'),
    ('0.6406 ± 0.0020', 'RESULTS.md', '| colt (3 seeds) |'),
    ('0.6455', 'README.md', '| CoLT, tuned here (`colt`) |'),
    ('0.6828 ± 0.0008', 'RESULTS.md', '| colt-pairs relevance |'),
    ('0.7047', 'README.md', '| recommended: `colt-pairs relevance` |'),
    ('+0.0266 [+0.0107, +0.0428]', 'README.md', '| strongest post-processing baseline |'),
]


def test_the_upgrades_numbers_are_the_reports():
  """Every number of the upgrades is on the report's row it names; none is quoted without."""
  collections = _doc('docs', 'COLLECTIONS.md')
  section = collections.split('## Upgrades: learned models')[1].split('\n## ')[0]
  sources = {'RESULTS.md': _doc('docs', 'RESULTS.md'), 'README.md': _doc('README.md')}
  for number, source, row in UPGRADE_NUMBERS:
    assert number in section, number
    lines = [l for l in sources[source].splitlines() if l.startswith(row)]
    assert any(number in l for l in lines), (number, source, row)
  quoted = set(re.findall(r'[+]?\d\.\d{4}', section))
  assert quoted <= {n for u in UPGRADE_NUMBERS for n in re.findall(r'[+]?\d\.\d{4}', u[0])}
  readme = _doc('README.md')
  assert '(docs/COLLECTIONS.md#three-commands-from-a-folder-to-a-page)' in readme
  assert collections.startswith('# Your own photos and judgments\n\n## Three commands: from a '
                                'folder to a page\n')
