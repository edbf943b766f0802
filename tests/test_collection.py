"""Tests of indexing your own collection (colt_jax/encoders/collection.py,
data_prep/index_collection.py) with a tiny random CLIP saved by the test."""
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from colt_jax import features
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from colt_jax.encoders import extract
from colt_jax.errors import InputError
from tiny_clip import random_image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def encoder(tiny_clip_dir):
  return clip.ClipEncoder(tiny_clip_dir)


def _rotated_jpeg(path, seed):
  """A JPEG stored sideways with EXIF orientation 6 (display: rotate 90 degrees clockwise)."""
  exif = Image.Exif()
  exif[0x0112] = 6
  random_image(seed, (30, 40)).save(path, exif=exif.tobytes())


@pytest.fixture(scope='module')
def photo_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('photos')
  (root / 'trip' / 'day2').mkdir(parents=True)
  random_image(1).save(root / 'a.jpg')
  random_image(2).save(root / 'trip' / 'b.PNG')
  random_image(3).save(root / 'trip' / 'day2' / 'c.webp')
  random_image(4).save(root / 'trip' / 'd.jpeg')
  _rotated_jpeg(root / 'trip' / 'rotated.jpg', 5)
  (root / 'trip' / 'corrupt.jpg').write_bytes(b'not an image at all')
  good = io.BytesIO()
  random_image(6).save(good, format='JPEG')
  (root / 'trip' / 'truncated.jpg').write_bytes(good.getvalue()[:200])
  (root / 'notes.txt').write_text('not a photo')
  return str(root)


def test_folder_lists_images_by_relative_path(photo_dir):
  ids = [it.photo_id for it in collection.folder_items(photo_dir)]
  assert ids == ['a.jpg', 'trip/b.PNG', 'trip/corrupt.jpg', 'trip/d.jpeg', 'trip/rotated.jpg',
                 'trip/truncated.jpg', 'trip/day2/c.webp']
  with pytest.raises(InputError, match='no such folder'):
    collection.folder_items(os.path.join(photo_dir, 'nope'))


def test_index_skips_unreadable_images_and_honours_exif(photo_dir, encoder, tmp_path):
  items = collection.folder_items(photo_dir)
  store = collection.index_collection(items, encoder, str(tmp_path / 'store'),
                                      source=photo_dir, batch_size=2, shard_size=3,
                                      max_bad_fraction=0.5, progress=False)
  assert list(store.photo_ids) == ['a.jpg', 'trip/b.PNG', 'trip/d.jpeg', 'trip/rotated.jpg',
                                   'trip/day2/c.webp']
  bad = {b['photo_id']: b['reason'] for b in store.meta['bad_images']}
  assert set(bad) == {'trip/corrupt.jpg', 'trip/truncated.jpg'} and all(bad.values())
  assert store.dim == 16 and len(store.query_ids) == 0 and len(store.category_names) == 0
  files = [os.path.join(photo_dir, p) for p in store.photo_ids]
  with Image.open(files[3]) as im:  # stored sideways: shown rotated 90 degrees clockwise
    sideways = im.convert('RGB')
  images = [Image.open(f).convert('RGB') for f in files]
  images[3] = sideways.transpose(Image.Transpose.ROTATE_270)
  assert images[3].size == (40, 30) and sideways.size == (30, 40)
  np.testing.assert_allclose(np.asarray(store.photos), encoder.encode_images(images),
                             atol=2e-5)
  assert not np.allclose(store.photos[3], encoder.encode_images([sideways])[0], atol=1e-3)
  again = features.load(str(tmp_path / 'store'))
  assert list(again.photo_ids) == list(store.photo_ids)
  assert not os.path.exists(str(tmp_path / 'store') + '.partial')


def test_interrupted_index_resumes_without_recomputing(photo_dir, encoder, tmp_path,
                                                       monkeypatch):
  items = collection.folder_items(photo_dir)
  out = str(tmp_path / 'store')
  kwargs = dict(source=photo_dir, batch_size=2, shard_size=3, max_bad_fraction=0.5,
                progress=False)
  with pytest.raises(extract.ExtractionInterrupted):
    collection.index_collection(items, encoder, out, stop_after_shards=1, **kwargs)
  encoded = []
  real = extract.BatchRunner.encode
  monkeypatch.setattr(extract.BatchRunner, 'encode',
                      lambda self, kind, chunk, on_batch=None: encoded.extend(
                          c.photo_id for c in chunk) or real(self, kind, chunk, on_batch))
  resumed = collection.index_collection(items, encoder, out, **kwargs)
  assert 'a.jpg' not in encoded  # the first shard came from <out>.partial
  whole = collection.index_collection(items, encoder, str(tmp_path / 'whole'), **kwargs)
  np.testing.assert_array_equal(np.asarray(resumed.photos), np.asarray(whole.photos))
  assert resumed.meta['bad_images'] == whole.meta['bad_images']


def test_too_many_bad_images_stop_the_run(photo_dir, encoder, tmp_path):
  with pytest.raises(collection.TooManyBadImagesError, match='trip/corrupt.jpg'):
    collection.index_collection(collection.folder_items(photo_dir), encoder,
                                str(tmp_path / 'store'), source=photo_dir, shard_size=3,
                                max_bad_fraction=0.1, progress=False)
  assert not os.path.exists(tmp_path / 'store' / 'meta.json')


def test_csv_lists_paths_and_captions(photo_dir, tmp_path):
  listing = tmp_path / 'list.csv'
  listing.write_text(f'path,caption\na.jpg,"big ben, at night"\n{photo_dir}/trip/b.PNG\n\n')
  items = collection.list_items(str(listing))
  assert [(i.photo_id, i.caption) for i in items] == [('a.jpg', 'big ben, at night'),
                                                      (f'{photo_dir}/trip/b.PNG', '')]
  assert items[0].image_path == str(tmp_path / 'a.jpg') and items[1].text == 'b'
  for text, message in (('a.jpg\na.jpg\n', r'list.csv:2: a.jpg is listed twice'),
                        ('a.jpg,x,y\n', r'list.csv:1: expected path\[,caption\]'),
                        (' ,cap\n', r'list.csv:1: empty path'), ('\n', 'no photos listed')):
    listing.write_text(text)
    with pytest.raises(InputError, match=message):
      collection.list_items(str(listing))


def test_cli_indexes_a_folder_and_refuses_bad_flags(photo_dir, tiny_clip_dir, tmp_path):
  prog = os.path.join(REPO, 'data_prep', 'index_collection.py')
  env = dict(os.environ, PYTHONPATH=REPO)
  run = lambda *a: subprocess.run([sys.executable, prog, *a], capture_output=True, text=True,
                                  timeout=300, env=env)
  done = run(f'--images={photo_dir}', '--encoder=clip', f'--model={tiny_clip_dir}',
             f'--out={tmp_path / "store"}', '--max_bad_fraction=0.5', '--noprogress')
  assert done.returncode == 0, done.stderr[-2000:]
  assert '5 photos, 2 unreadable images skipped' in done.stdout
  both = run(f'--images={photo_dir}', '--list=x.csv', f'--out={tmp_path / "s2"}')
  assert both.returncode == 2 and 'exactly one of --images' in both.stderr
  strict = run(f'--images={photo_dir}', '--encoder=clip', f'--model={tiny_clip_dir}',
               f'--out={tmp_path / "s3"}', '--noprogress')
  assert strict.returncode == 2 and 'cannot be read' in strict.stderr.strip().splitlines()[-1]

