"""Tests of feature extraction (colt_jax/encoders/extract.py, data_prep/extract_features.py)."""
from __future__ import annotations

import collections
import os
import shutil
import sys

import jax
import numpy as np
import pytest

from colt_jax.util import outputs
from colt_jax.data import splits as data
from colt_jax import encoders
from colt_jax.data import features
from colt_jax.data import mediaeval
from colt_jax.data.vocabulary import CategoryVocabulary
from colt_jax.encoders import clip
from colt_jax.encoders import extract
from colt_jax.util.errors import InputError
from xla_env import xla_flags  # pylint: disable=g-bad-import-order
import preloaded
from extract_layout import PHOTO_IDS, IMAGE_ONLY_IN, build_split  # pylint: disable=g-bad-import-order
from checkout import REPO as _REPO  # pylint: disable=g-bad-import-order



class Counting:
  """An encoder wrapper that counts the items it prepares, per kind."""

  def __init__(self, encoder):
    self._encoder = encoder
    self.calls = collections.Counter()

  def __getattr__(self, name):
    return getattr(self._encoder, name)

  def prepare(self, kind, items):
    self.calls[kind] += len(items)
    return self._encoder.prepare(kind, items)


@pytest.fixture(scope='module')
def root(tmp_path_factory):
  return build_split(str(tmp_path_factory.mktemp('div400')))


@pytest.fixture(scope='module')
def split(root):
  return mediaeval.read_split('div400', root, 'test')


@pytest.fixture(scope='module')
def clip_encoder(tiny_clip_dir):
  return encoders.load('clip', tiny_clip_dir)


@pytest.fixture(scope='module')
def one_device_store(split, clip_encoder, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('stores') / 'one')
  extract.extract(split, clip_encoder, out, batch_size=4, shard_size=4,
                  devices=jax.local_devices()[:1], progress=False)
  return features.load(out)


def _image(split, pid):
  title = IMAGE_ONLY_IN.get(pid, 'Tower of Tests' if pid < '104' else 'Old Bridge')
  return clip.load_image(os.path.join(split.root, 'img', title, f'{pid}.jpg'))


def test_store_rows_equal_per_item_encodings(split, clip_encoder, one_device_store,
                                             tiny_clip_dir):
  store = one_device_store
  assert list(store.photo_ids) == PHOTO_IDS  # 104 once; the last partial batch is kept
  assert store.photos.shape == (7, 16) and store.photos.dtype == np.float32
  for i, pid in enumerate(PHOTO_IDS):
    np.testing.assert_allclose(store.photos[i], clip_encoder.encode_images([_image(split, pid)])[0],
                               atol=1e-5, err_msg=pid)
  assert list(store.query_ids) == [11, 12]
  np.testing.assert_allclose(store.queries,
                             clip_encoder.encode_texts(['Tower of Tests', 'Old Bridge']), atol=1e-5)
  assert list(store.category_names) == ['close up', 'night view', 'side view']
  assert list(store.category_names) == list(CategoryVocabulary.from_splits([split]).names)
  np.testing.assert_allclose(store.categories,
                             clip_encoder.encode_texts(list(store.category_names)), atol=1e-5)
  meta = store.meta
  assert meta['encoder'] == f'clip:{tiny_clip_dir}'
  assert (meta['normalisation'], meta['dataset'], meta['split']) == ('l2', 'div400', 'test')
  assert meta['source'] == os.path.abspath(split.root) and meta['dim'] == 16
  assert meta['shared_photos'] == 1 and meta['missing_photos'] == []
  assert not os.path.exists(store.meta['path'] + '.partial')  # removed after the write
  np.testing.assert_allclose(np.linalg.norm(store.photos, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize('num_devices', [2, 4])
def test_more_devices_equal_one_device(split, clip_encoder, one_device_store, tmp_path,
                                       num_devices):
  assert jax.local_device_count() == 4, 'conftest sets 4 host devices'
  result = extract.extract(split, clip_encoder, str(tmp_path / 'many'), batch_size=3,
                           devices=jax.local_devices()[:num_devices], progress=False)
  # A batch of 3 becomes 4 (a multiple of the devices); the last batch is padded again.
  store = result.store
  assert list(store.photo_ids) == PHOTO_IDS
  for name in ('photos', 'queries', 'categories'):
    np.testing.assert_allclose(getattr(store, name), getattr(one_device_store, name),
                               atol=1e-5, err_msg=name)


def test_missing_photo_fails_with_its_id_and_count_unless_allowed(split, clip_encoder, root,
                                                                  tmp_path):
  copy = str(tmp_path / 'copy')
  shutil.copytree(root, copy)
  os.remove(os.path.join(copy, 'testset', 'keywords', 'img', 'Tower of Tests', '103.jpg'))
  split_copy = mediaeval.read_split('div400', copy, 'test')
  out = str(tmp_path / 'store')
  with pytest.raises(extract.MissingPhotosError, match=r'1 of 7 photos .*: 103\b') as e:
    extract.extract(split_copy, clip_encoder, out, batch_size=4, progress=False)
  assert e.value.photo_ids == ['103'] and 'allow_missing' in str(e.value)
  assert not os.path.exists(out) and not os.path.exists(out + '.partial')
  store = extract.extract(split_copy, clip_encoder, out, batch_size=4, allow_missing=True,
                          progress=False).store
  assert list(store.photo_ids) == [p for p in PHOTO_IDS if p != '103']
  assert features.load(out).meta['missing_photos'] == ['103']
  # Such a store does not cover the ground truth: loading it for training/evaluation fails.
  with pytest.raises(features.FeatureStoreError, match='have no feature'):
    data.check_store_covers(split_copy, features.load(out))


def _with_text_as_image(root, tmp_path):
  """A copy of the tiny testset whose 103.jpg is a text file (not an image)."""
  copy = str(tmp_path / 'copy')
  shutil.copytree(root, copy)
  with open(os.path.join(copy, 'testset', 'keywords', 'img', 'Tower of Tests', '103.jpg'),
            'w') as f:
    f.write('not an image\n')
  return copy


def test_unreadable_photo_fails_with_its_file_and_count_unless_allowed(
    clip_encoder, one_device_store, root, tmp_path):
  copy = _with_text_as_image(root, tmp_path)
  split_copy = mediaeval.read_split('div400', copy, 'test')
  bad_file = os.path.join(split_copy.root, 'img', 'Tower of Tests', '103.jpg')
  with pytest.raises(InputError, match='cannot read image'):  # one line, not an internal error
    clip.load_image(bad_file)
  out = str(tmp_path / 'store')
  for fraction in (None, 0.1):  # the default (0); 0.1 of 7 photos: none may be left out
    kwargs = {} if fraction is None else {'max_bad_fraction': fraction}
    with pytest.raises(extract.UnreadablePhotosError) as e:
      extract.extract(split_copy, clip_encoder, out, batch_size=4, progress=False, **kwargs)
    assert str(e.value).startswith(f'div400/test: 1 of 7 photos cannot be read, more than '
                                   f'--max_bad_fraction={fraction or 0:g} allows (0): '
                                   f'{bad_file} (photo 103): cannot read image ('), e.value
    assert not os.path.exists(out) and not os.path.exists(out + '.partial')  # no work done
  store = extract.extract(split_copy, clip_encoder, out, batch_size=4, shard_size=4,
                          devices=jax.local_devices()[:1], progress=False,
                          max_bad_fraction=0.2).store
  # Left out as a missing photo is: every other row is the photo's own.
  kept = [p for p in PHOTO_IDS if p != '103']
  assert list(store.photo_ids) == kept
  np.testing.assert_allclose(store.photos, one_device_store.photos[
      one_device_store.rows_for(kept)], atol=1e-5)
  meta = features.load(out).meta
  assert meta['missing_photos'] == [] and len(meta['bad_images']) == 1
  assert meta['bad_images'][0]['photo_id'] == '103'
  assert meta['bad_images'][0]['path'] == os.path.join('img', 'Tower of Tests', '103.jpg')
  assert meta['bad_images'][0]['reason'].startswith('cannot read image (')
  # 103 is in the ground truth: training and evaluation refuse the store, as with --allow_missing.
  with pytest.raises(features.FeatureStoreError, match=r'1 photos .* have no feature .*103'):
    data.check_store_covers(split_copy, features.load(out))


def test_cli_names_the_unreadable_photo_and_honours_max_bad_fraction(root, tiny_clip_dir,
                                                                     tmp_path):
  """extract_features.py over the official layout whose img/ holds a text file as a photo:
  one line naming the file and the count (status 2) and nothing written; with
  --max_bad_fraction allowing it, the store leaves it out and lists it."""
  from cli_run import assert_bad_input  # pylint: disable=g-import-not-at-top
  copy = _with_text_as_image(root, tmp_path)
  out = tmp_path / 'out'
  flags = (f'--data_dir={copy}', '--split=test', '--encoder=clip', f'--model={tiny_clip_dir}',
           f'--out={out}', '--vocabulary_splits=test')
  bad_file = os.path.join(copy, 'testset', 'keywords', 'img', 'Tower of Tests', '103.jpg')
  assert_bad_input(_extract_cli(*flags), '1 of 7 photos cannot be read', f'{bad_file} (photo '
                   '103): cannot read image', '--max_bad_fraction=0 allows (0)')
  assert sorted(os.listdir(tmp_path)) == ['copy']
  proc = _extract_cli(*flags, '--max_bad_fraction=0.2')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert '6 photos, 2 queries, 3 categories, 1 unreadable photos left out' in proc.stdout
  assert [b['photo_id'] for b in features.load(str(out)).meta['bad_images']] == ['103']


def test_interrupted_run_resumes_without_recomputing(split, clip_encoder, one_device_store,
                                                     tmp_path):
  out = str(tmp_path / 'store')
  partial = out + '.partial'
  first = Counting(clip_encoder)
  with pytest.raises(extract.ExtractionInterrupted):
    extract.extract(split, first, out, batch_size=4, shard_size=4,
                    devices=jax.local_devices()[:1], progress=False, stop_after_shards=1)
  assert first.calls == {'photos': 4}
  assert sorted(os.listdir(partial)) == [outputs.MANIFEST, 'photos-00000.npy', 'settings.json']
  assert not os.path.exists(out)

  second = Counting(clip_encoder)
  with pytest.raises(extract.ExtractionInterrupted):
    extract.extract(split, second, out, batch_size=4, shard_size=4,
                    devices=jax.local_devices()[:1], progress=False, stop_after_shards=2)
  assert second.calls == {'photos': 3, 'queries': 2}  # photos shard 0 was not recomputed

  third = Counting(clip_encoder)
  result = extract.extract(split, third, out, batch_size=4, shard_size=4,
                           devices=jax.local_devices()[:1], progress=False)
  assert third.calls == {'categories': 3}
  assert result.reused_shards == {'photos': 2, 'queries': 1, 'categories': 0}
  assert result.computed_shards == {'photos': 0, 'queries': 0, 'categories': 1}
  assert not os.path.exists(partial)
  store = features.load(out)
  assert list(store.photo_ids) == list(one_device_store.photo_ids)
  for name in ('photos', 'queries', 'categories'):
    np.testing.assert_array_equal(getattr(store, name), getattr(one_device_store, name))


def test_resume_with_different_settings_is_refused(split, clip_encoder, tmp_path):
  out = str(tmp_path / 'store')
  with pytest.raises(extract.ExtractionInterrupted):
    extract.extract(split, clip_encoder, out, batch_size=4, shard_size=4, progress=False,
                    stop_after_shards=1)
  with pytest.raises(extract.ResumeMismatchError, match=r'shard_size: 4 -> 5.*delete'):
    extract.extract(split, clip_encoder, out, batch_size=4, shard_size=5, progress=False)
  with pytest.raises(extract.ResumeMismatchError, match='allow_missing'):
    extract.extract(split, clip_encoder, out, batch_size=4, shard_size=4, progress=False,
                    allow_missing=True)
  assert os.path.isfile(os.path.join(out + '.partial', 'photos-00000.npy'))  # nothing lost
  # The batch size and the devices are not settings: the run resumes and completes.
  result = extract.extract(split, clip_encoder, out, batch_size=2, shard_size=4,
                           devices=jax.local_devices()[:2], progress=False)
  assert result.reused_shards['photos'] == 1 and len(result.store.photo_ids) == 7


@pytest.fixture(scope='module')
def minilm_encoder():
  return encoders.load('minilm')


@pytest.fixture(scope='module')
def minilm_store(split, minilm_encoder, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('stores') / 'minilm')
  extract.extract(split, minilm_encoder, out, batch_size=4, devices=jax.local_devices()[:1],
                  progress=False)
  return out


def test_minilm_store_is_usable_by_data_load(root, minilm_encoder, minilm_store):
  loaded_split, store = data.load('div400', 'test', data_dir=root, features_dir=minilm_store)
  assert store.dim == 384 and store.meta['encoder'] == 'minilm:all-MiniLM-L6-v2'
  assert list(store.photo_ids) == PHOTO_IDS
  photo = loaded_split.photos[11][0]
  assert photo.text == 'first tower night Night shot & more'  # metadata, HTML removed
  np.testing.assert_allclose(store.photos[0], minilm_encoder.encode([photo.text])[0], atol=1e-5)
  np.testing.assert_allclose(store.queries, minilm_encoder.encode(['Tower of Tests',
                                                                   'Old Bridge']), atol=1e-5)
  np.testing.assert_allclose(store.categories,
                             minilm_encoder.encode(list(store.category_names)), atol=1e-5)


def test_cli_writes_a_store(root, tiny_clip_dir, tmp_path):
  out = str(tmp_path / 'cli')
  cmd = [sys.executable, os.path.join(_REPO, 'data_prep', 'extract_features.py'),
         '--dataset=div400', f'--data_dir={root}', '--split=test', '--encoder=clip',
         f'--model={tiny_clip_dir}', f'--out={out}', '--batch_size=4',
         '--vocabulary_splits=test', '--noprogress']
  env = dict(os.environ, XLA_FLAGS=xla_flags(2),
             PYTHONPATH=_REPO)  # this checkout's colt_jax, not an installed one
  proc = preloaded.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'wrote' in proc.stdout and '7 photos, 2 queries, 3 categories' in proc.stdout
  store = features.load(out)
  assert store.meta['vocabulary_splits'] == ['test'] and store.dim == 16


def _with_dev(root, tmp_path):
  """The tiny testset plus a devset: its copy, descriptors changed (other statistics)."""
  both = tmp_path / 'div400'
  shutil.copytree(os.path.join(root, 'testset'), both / 'testset')
  dev = both / 'devset' / 'keywords'
  shutil.copytree(os.path.join(root, 'testset'), both / 'devset')
  os.rename(dev / 'testsetkeywords_topics.xml', dev / 'devsetkeywords_topics.xml')
  for csv in (dev / 'descvis' / 'img').iterdir():
    rows = [line.split(',') for line in csv.read_text().split()]
    csv.write_text(''.join(','.join([r[0]] + [repr(3 * float(v) + 5) for v in r[1:]]) + '\n'
                           for r in rows))
  return str(both)


def _extract_cli(*flags):
  cmd = [sys.executable, os.path.join(_REPO, 'data_prep', 'extract_features.py'),
         '--dataset=div400', '--batch_size=4', '--noprogress', *flags]
  env = dict(os.environ, PYTHONPATH=_REPO)  # this checkout's colt_jax, not an installed one
  env.pop('COLT_JAX_DEBUG', None)
  return preloaded.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_cli_writes_a_view_store_with_dev_statistics(root, tiny_clip_dir, tmp_path):
  """extract_features.py --views_* on test: the store is `views.apply` of the text store,
  the descriptor statistics fitted on dev's photos (--views_fit_split, default dev)."""
  from colt_jax.data import views  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import stores  # pylint: disable=g-import-not-at-top
  both = _with_dev(root, tmp_path)
  out = str(tmp_path / 'viewed')
  proc = _extract_cli(f'--data_dir={both}', '--split=test', '--encoder=clip',
                      f'--model={tiny_clip_dir}', f'--out={out}', '--views_descriptors=CM,HOG',
                      '--views_descriptor_weight=2', '--views_metadata_weight=0.5')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'views text+descvis2x2+meta0.5 (statistics of dev)' in proc.stdout
  got = features.load(out)
  text = stores.extract_split('div400', 'test', 'clip', str(tmp_path / 'text'), data_dir=both,
                              model=tiny_clip_dir, batch_size=4, progress=False).store
  dev, test = (mediaeval.read_split('div400', both, s) for s in ('dev', 'test'))
  spec = views.ViewSpec(descriptors=('CM', 'HOG'), descriptor_weight=2.0, metadata_weight=0.5)
  fitted = views.fit(spec, views.read_raw([dev], spec.descriptors), dev.all_photo_ids())
  raw_test = views.read_raw([test], spec.descriptors)
  want = views.apply(fitted, raw_test, text)
  assert got.dim == 16 + 5 + 2 * spec.buckets and list(got.photo_ids) == PHOTO_IDS
  for name in ('photos', 'queries', 'categories'):
    np.testing.assert_allclose(getattr(got, name), getattr(want, name), atol=1e-5, err_msg=name)
  # Test's own statistics would give other rows: the store took dev's.
  own = views.apply(views.fit(spec, raw_test, test.all_photo_ids()), raw_test, text)
  assert not np.allclose(own.photos, got.photos, atol=1e-3)
  info = got.meta['views']
  assert (info['name'], info['fit_split'], info['text_dim']) == ('text+descvis2x2+meta0.5',
                                                                  'dev', 16)
  stored = views.ViewTransform.from_dict(info['transform'])
  for d in spec.descriptors:
    np.testing.assert_allclose(stored.mean[d], fitted.mean[d])
    np.testing.assert_allclose(stored.std[d], fitted.std[d])
  assert got.meta['vocabulary_splits'] == ['dev', 'test']  # the text store's meta is kept
  assert got.meta['encoder'] == text.meta['encoder']


def test_cli_refuses_views_on_a_layout_without_descriptors(root, tmp_path):
  """--views_descriptors where descvis/ is missing: one line naming the flag, before any
  encoding, and nothing written."""
  from cli_run import assert_bad_input  # pylint: disable=g-import-not-at-top
  both = _with_dev(root, tmp_path)
  for split_name in ('testset', 'devset'):
    shutil.rmtree(os.path.join(both, split_name, 'keywords', 'descvis'))
  out = tmp_path / 'out'
  proc = _extract_cli(f'--data_dir={both}', '--split=test', '--encoder=minilm',
                      f'--out={out}', '--views_descriptors=CM')
  assert_bad_input(proc, '--views_descriptors', 'descvis')
  assert not out.exists() and not os.path.exists(f'{out}.partial')


def test_extract_split_is_extract_over_the_official_layout(root, minilm_store, tmp_path):
  """`stores.extract_split` (what the CLI and reproduce call) writes the store `extract` does
  for the split read from the official layout, and refuses a folder it did not create."""
  from colt_jax.encoders import stores  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / 'split')
  result = stores.extract_split('div400', 'test', 'minilm', out, data_dir=root,
                                vocabulary_splits=('test',), batch_size=4, num_devices=1,
                                progress=False)
  want, got = features.load(minilm_store), result.store
  np.testing.assert_allclose(got.photos, want.photos, atol=1e-6)
  assert list(got.photo_ids) == list(want.photo_ids)
  assert list(got.category_names) == list(want.category_names)
  assert got.meta['vocabulary_splits'] == ['test']
  foreign = tmp_path / 'foreign'
  foreign.mkdir()
  (foreign / 'notes.txt').write_text('mine')
  with pytest.raises(Exception, match='foreign'):
    stores.extract_split('div400', 'test', 'minilm', str(foreign), data_dir=root,
                         vocabulary_splits=('test',), progress=False)
  assert os.listdir(foreign) == ['notes.txt']
  from colt_jax.data import views  # pylint: disable=g-import-not-at-top
  assert stores.default_store_dir('div400', 'minilm', 'dev') == 'work/features/div400-minilm/dev'
  assert stores.default_store_dir('div400', 'minilm', 'dev', views.ViewSpec(('CM',))) == (
      'work/features/div400-minilm-text+descvis1x1/dev')


@pytest.mark.slow
def test_two_processes_extract_the_store_of_one(root, tiny_clip_dir, tmp_path):
  """Two local CPU processes (colt_jax.util.distributed), each encoding its share of the shards:
  the same store as one process."""
  from distributed_run import two_processes  # pylint: disable=g-import-not-at-top
  flags = ['--dataset=div400', f'--data_dir={root}', '--split=test', '--encoder=clip',
           f'--model={tiny_clip_dir}', '--batch_size=4', '--shard_size=2',
           '--vocabulary_splits=test', '--noprogress']
  outs = two_processes('data_prep/extract_features.py', flags + [f'--out={tmp_path / "two"}'],
                        tmp_path / 'logs')
  for code, _, err in outs:
    assert code == 0, err[-3000:]
  assert 'wrote' in outs[0][1] and 'wrote' not in outs[1][1]
  one = preloaded.run([sys.executable, os.path.join(_REPO, 'data_prep', 'extract_features.py'),
                       *flags, f'--out={tmp_path / "one"}'], capture_output=True, text=True,
                      timeout=300, env=dict(os.environ, PYTHONPATH=_REPO))
  assert one.returncode == 0, one.stderr[-3000:]
  a, b = features.load(str(tmp_path / 'one')), features.load(str(tmp_path / 'two'))
  assert list(a.photo_ids) == list(b.photo_ids)
  for name in ('photos', 'queries', 'categories'):
    np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)),
                               atol=1e-5)
