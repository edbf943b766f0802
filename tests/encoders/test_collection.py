"""Tests of indexing your own collection (colt_jax/encoders/collection.py,
data_prep/index_collection.py) with a tiny random CLIP saved by the test."""
import hashlib
import io
import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

from colt_jax.engines import approximate as engines
from colt_jax.engines import qdrant_index
from colt_jax.engines import saved_engines
from colt_jax.data import features
from colt_jax.util import outputs
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from colt_jax.encoders import extract
from colt_jax.util.errors import InputError
from float_compare import assert_top_k
from tiny_clip import random_image
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order



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
  with outputs.exclusive(out, 'a feature store'):  # another command writing it now: refused,
    with pytest.raises(InputError, match='another colt_jax command'):  # its shards untouched
      collection.index_collection(items, encoder, out, **kwargs)
  encoded = []
  real = extract.BatchRunner.encode
  monkeypatch.setattr(extract.BatchRunner, 'encode',
                      lambda self, kind, chunk, on_batch=None: encoded.extend(
                          c.photo_id for c in chunk) or real(self, kind, chunk, on_batch))
  resumed = collection.index_collection(items, encoder, out, **kwargs)
  assert 'a.jpg' not in encoded  # the first shard came from <out>.partial
  whole = collection.index_collection(items, encoder, str(tmp_path / 'whole'), **kwargs)
  # Exact: both encode shard by shard, in the same batches, through the same compiled forward
  # in this process (deterministic), and the first shard is read back from the partial store.
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
                        (' ,cap\n', r'list.csv:1: empty path'), ('\n', 'no photos listed'),
                        ('a.jpg\n./a.jpg\n', r'list.csv:2: ./a.jpg is listed twice'),
                        ('caption,path\nx,a.jpg\n', r'list.csv:1: the header must be '
                         r'path\[,caption\], in that order'),
                        ('path;caption\na.jpg;one\n', r'list.csv:1: one field holding a '
                         'semicolon; the list is comma-separated'),
                        # an unclosed quote is an error, not the rest of the file as a caption
                        ('a.jpg,"big ben\nb.jpg,x\nc.jpg,y\n',
                         r'list.csv:3: malformed CSV \(unexpected end of data\)')):
    listing.write_text(text)
    with pytest.raises(InputError, match=message):
      collection.list_items(str(listing))
  with pytest.raises(InputError, match=r'\(--list\): a folder, not a CSV file'):
    collection.list_items(str(tmp_path))
  listing.write_bytes('path\na.jpg\nb\xe9.jpg\n'.encode('latin-1'))
  with pytest.raises(InputError, match=r'list.csv:3: not a UTF-8 CSV file'):
    collection.list_items(str(listing))


@pytest.mark.slow
def test_cli_indexes_a_folder_and_refuses_bad_flags(photo_dir, tiny_clip_dir, tmp_path):
  prog = os.path.join(REPO, 'data_prep', 'index_collection.py')
  env = dict(os.environ, PYTHONPATH=REPO)
  run = lambda *a: preloaded.run([sys.executable, prog, *a], capture_output=True, text=True,
                                 timeout=300, env=env)
  done = run(f'--images={photo_dir}', '--encoder=clip', f'--model={tiny_clip_dir}',
             f'--out={tmp_path / "store"}', '--max_bad_fraction=0.5', '--noprogress')
  assert done.returncode == 0, done.stderr[-2000:]
  assert '5 photos, 2 unreadable images skipped' in done.stdout
  both = run(f'--images={photo_dir}', '--list=x.csv', f'--out={tmp_path / "s2"}')
  assert both.returncode == 2 and 'exactly one of --images' in both.stderr
  strict = run(f'--images={photo_dir}', '--encoder=clip', f'--model={tiny_clip_dir}',
               f'--out={tmp_path / "s3"}', '--noprogress', '--max_bad_fraction=0.1')
  assert strict.returncode == 2 and 'cannot be read' in strict.stderr.strip().splitlines()[-1]


def test_cli_skips_and_prints_unreadable_images_by_default_and_refuses_a_tiny_ivfpq(
    photo_dir, tiny_clip_dir, tmp_path):
  prog = os.path.join(REPO, 'data_prep', 'index_collection.py')
  env = dict(os.environ, PYTHONPATH=REPO)
  run = lambda *a: preloaded.run([sys.executable, prog, f'--images={photo_dir}',
                                  '--encoder=clip', f'--model={tiny_clip_dir}',
                                  f'--out={tmp_path / "store"}', '--noprogress', *a],
                                 capture_output=True, text=True, timeout=300, env=env)
  pq = run('--engines=faiss-ivfpq')  # 5 readable photos: too few to train PQ codes
  assert pq.returncode == 2, pq.stderr[-2000:]
  assert pq.stderr.strip().splitlines()[-1].endswith(
      'faiss-ivfpq cannot be built for 5 photos (5 training rows): product quantisation '
      'needs at least 16 (256 for 8-bit codes); use faiss-ivf, faiss-hnsw or exact')
  assert not os.path.exists(tmp_path / 'store')
  done = run('--engines=faiss-ivf')  # the default --max_bad_fraction (0.5): skipped, listed
  assert done.returncode == 0, done.stderr[-2000:]
  lines = done.stdout.splitlines()
  assert '5 photos, 2 unreadable images skipped' in lines[0] and lines[0].startswith('wrote')
  assert any(l.startswith('  skipped trip/corrupt.jpg: cannot read image') for l in lines)
  assert any(l.startswith('  skipped trip/truncated.jpg: cannot read image') for l in lines)
  assert '  engine faiss-ivf: built (nlist 1)' in lines
  again = run()
  assert again.returncode == 0, again.stderr[-2000:]
  assert again.stdout.splitlines()[0].startswith('updated')
  assert '  photos up to date: nothing added, changed or removed' in again.stdout
  assert '  engine faiss-ivf: kept (nlist 1)' in again.stdout


# ----------------------------------------------------------------------------- following a folder


def _spy(monkeypatch):
  """The photo ids the encoder is asked to encode, in order."""
  encoded = []
  real = extract.BatchRunner.encode
  monkeypatch.setattr(extract.BatchRunner, 'encode',
                      lambda self, kind, chunk, on_batch=None: encoded.extend(
                          c.photo_id for c in chunk) or real(self, kind, chunk, on_batch))
  return encoded


def _folder(root, seeds):
  root.mkdir(exist_ok=True)
  for name, seed in seeds.items():
    os.makedirs(os.path.dirname(root / name), exist_ok=True)
    random_image(seed).save(root / name)
  return str(root)


def _rows(store):
  return {str(p): np.asarray(store.photos)[i] for i, p in enumerate(store.photo_ids)}


def test_a_store_whose_meta_records_malformed_engines_is_encoded_anew(encoder, tmp_path,
                                                                      monkeypatch):
  folder = _folder(tmp_path / 'photos', {f'p{i}.png': 200 + i for i in range(3)})
  out = str(tmp_path / 'store')
  kwargs = dict(source=folder, batch_size=4, progress=False)
  collection.index_collection(collection.folder_items(folder), encoder, out, **kwargs)
  meta = json.loads((tmp_path / 'store' / 'meta.json').read_text())
  (tmp_path / 'store' / 'meta.json').write_text(json.dumps(dict(meta, engines=[1])))
  encoded = _spy(monkeypatch)
  collection.index_collection(collection.folder_items(folder), encoder, out, **kwargs)
  assert sorted(encoded) == [f'p{i}.png' for i in range(3)]  # all of them, without a crash


def test_reindex_encodes_only_new_and_changed_photos_and_updates_engines(
    encoder, tmp_path, monkeypatch):
  root = tmp_path / 'photos'
  folder = _folder(root, {f'p{i}.png': 200 + i for i in range(8)})
  (root / 'broken.jpg').write_bytes(b'never an image')
  out = str(tmp_path / 'store')
  kwargs = dict(source=folder, batch_size=4, shard_size=3, progress=False)
  encoded = _spy(monkeypatch)
  first = collection.index_collection(
      collection.folder_items(folder), encoder, out,
      engines=['faiss-ivf', 'faiss-hnsw', 'qdrant'], **kwargs)
  assert sorted(encoded) == [f'p{i}.png' for i in range(8)]  # broken.jpg: found by the check
  assert first.meta['changes']['added'] == 8 and first.meta['changes']['previous'] == 'none'
  assert {n: e['action'] for n, e in first.meta['engines'].items()} == {
      'faiss-ivf': 'built', 'faiss-hnsw': 'built', 'qdrant': 'built'}
  before = _rows(first)

  os.unlink(root / 'p1.png')  # removed
  (root / 'sub').mkdir()
  os.rename(root / 'p2.png', root / 'sub' / 'p2-moved.png')  # renamed
  random_image(999).save(root / 'p3.png')  # changed content, same path
  os.utime(root / 'p4.png', ns=(1, 1))  # touched: same content, other mtime
  _folder(root, {'new-a.png': 300, 'sub/new-b.png': 301})  # added
  (root / 'broken.jpg').write_bytes(b'still not an image!')  # changed, still unreadable
  encoded.clear()
  items = collection.folder_items(folder)
  updated = collection.index_collection(items, encoder, out, **kwargs)
  assert sorted(encoded) == ['new-a.png', 'p3.png', 'sub/new-b.png']
  after = _rows(updated)
  assert list(updated.photo_ids) == [it.photo_id for it in items if it.photo_id != 'broken.jpg']
  assert 'p1.png' not in after and 'p2.png' not in after
  for pid in ('p0.png', 'p4.png', 'p5.png', 'p6.png', 'p7.png'):  # rows copied: exact
    np.testing.assert_array_equal(after[pid], before[pid])  # kept: the very same features
  np.testing.assert_array_equal(after['sub/p2-moved.png'], before['p2.png'])  # renamed
  assert not np.allclose(after['p3.png'], before['p3.png'], atol=1e-3)
  c = updated.meta['changes']
  assert {k: c[k] for k in ('added', 'removed', 'changed', 'renamed', 'kept', 'encoded',
                            'reused', 'unreadable', 'previous_photos', 'previous')} == {
      'added': 2, 'removed': 1, 'changed': 1, 'renamed': 1, 'kept': 5, 'encoded': 3,
      'reused': 6, 'unreadable': 1, 'previous_photos': 8, 'previous': 'reused'}
  # the store's rows, each counted once: added + changed + renamed + kept = encoded + reused
  assert sum(c[k] for k in ('added', 'changed', 'renamed', 'kept')) == len(updated.photo_ids)
  assert c['added_ids'] == ['new-a.png', 'sub/new-b.png'] and c['removed_ids'] == ['p1.png']
  assert c['changed_ids'] == ['p3.png']  # broken.jpg, unreadable, counts as unreadable
  assert c['renamed_ids'] == [['p2.png', 'sub/p2-moved.png']] and c['time'].endswith('Z')
  assert [b['photo_id'] for b in updated.meta['bad_images']] == ['broken.jpg']

  # the updated store is the store a fresh index of the folder makes
  fresh = collection.index_collection(items, encoder, str(tmp_path / 'fresh'), **kwargs)
  assert list(fresh.photo_ids) == list(updated.photo_ids)
  np.testing.assert_allclose(np.asarray(updated.photos), np.asarray(fresh.photos), atol=2e-5)

  # the saved engines hold the new rows: their answers are the exact search's
  photos = np.asarray(updated.photos)
  queries = photos[:4] + 0.01
  queries /= np.linalg.norm(queries, axis=1, keepdims=True)
  exact_scores = queries @ photos.T
  assert set(updated.meta['engines']) == {'faiss-ivf', 'faiss-hnsw', 'qdrant'}
  for name, info in updated.meta['engines'].items():
    assert info['rows'] == len(photos) and info['action'] in ('rebuilt', 'updated')
    engine = saved_engines.load_saved(os.path.join(out, info['path']))
    scores, rows = engine.search(queries, 5)
    assert_top_k(rows, exact_scores, name, atol=1e-4)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ photos.T, rows, 1),
                               atol=1e-4)
    if isinstance(engine, qdrant_index.QdrantIndex):
      engine.close()
  assert updated.meta['changes']['engines'] == {
      n: e['action'] for n, e in updated.meta['engines'].items()}

  # nothing changed: nothing encoded, the arrays and engines stay as they are
  mtime = os.stat(os.path.join(out, 'photos.npy')).st_mtime_ns
  encoded.clear()
  same = collection.index_collection(items, encoder, out, **kwargs)
  assert encoded == [] and os.stat(os.path.join(out, 'photos.npy')).st_mtime_ns == mtime
  assert same.meta['changes']['encoded'] == 0 and same.meta['changes']['kept'] == 9
  assert same.meta['changes']['engines'] == dict.fromkeys(updated.meta['engines'], 'kept')
  np.testing.assert_array_equal(np.asarray(same.photos), photos)  # read back: exact

  # engines follow --engines: dropped ones go, with their files
  fewer = collection.index_collection(items, encoder, out, engines=['faiss-hnsw'], **kwargs)
  assert encoded == [] and set(fewer.meta['engines']) == {'faiss-hnsw'}
  assert fewer.meta['changes']['engines_dropped'] == ['faiss-ivf', 'qdrant']
  assert sorted(os.listdir(os.path.join(out, 'engines'))) == ['faiss-hnsw']


def test_an_interrupted_update_resumes(encoder, tmp_path, monkeypatch):
  root = tmp_path / 'photos'
  folder = _folder(root, {f'p{i}.png': 400 + i for i in range(4)})
  out = str(tmp_path / 'store')
  kwargs = dict(source=folder, batch_size=2, shard_size=1, progress=False)
  collection.index_collection(collection.folder_items(folder), encoder, out, **kwargs)
  _folder(root, {'q0.png': 500, 'q1.png': 501, 'q2.png': 502})
  items = collection.folder_items(folder)
  with pytest.raises(extract.ExtractionInterrupted):
    collection.index_collection(items, encoder, out, stop_after_shards=1, **kwargs)
  assert len(features.load(out).photo_ids) == 4  # the store is untouched until the end
  encoded = _spy(monkeypatch)
  resumed = collection.index_collection(items, encoder, out, **kwargs)
  assert encoded == ['q1.png', 'q2.png']  # q0's shard came from <out>.partial
  assert len(resumed.photo_ids) == 7 and resumed.meta['changes']['added'] == 3
  assert not os.path.exists(out + '.partial')
  # the folder changed again after an interruption: the stale shards are started over
  _folder(root, {'r0.png': 600, 'r1.png': 601})
  items = collection.folder_items(folder)
  with pytest.raises(extract.ExtractionInterrupted):
    collection.index_collection(items, encoder, out, stop_after_shards=1, **kwargs)
  os.unlink(root / 'r1.png')
  encoded.clear()
  final = collection.index_collection(collection.folder_items(folder), encoder, out, **kwargs)
  assert encoded == ['r0.png'] and len(final.photo_ids) == 8
  # a store without file records (made before stores followed folders) is encoded anew
  os.unlink(os.path.join(out, collection.RECORDS_FILE))
  encoded.clear()
  anew = collection.index_collection(collection.folder_items(folder), encoder, out, **kwargs)
  assert len(encoded) == 8 and anew.meta['changes']['previous'].startswith(
      'not reused: the store there has no files.json')
  np.testing.assert_allclose(np.asarray(anew.photos), np.asarray(final.photos), atol=2e-5)


def test_too_many_unreadable_images_stop_before_any_encoding(encoder, tmp_path, monkeypatch):
  root = tmp_path / 'photos'
  folder = _folder(root, {f'a{i}.png': 700 + i for i in range(7)})
  for i in range(3):  # 30% unreadable, listed last: found by the check, not by the encoder
    (root / f'z{i}.jpg').write_bytes(b'garbage' * (i + 1))
  encoded = _spy(monkeypatch)
  with pytest.raises(collection.TooManyBadImagesError,
                     match=r'3 of 10 images cannot be read, more than '
                           r'--max_bad_fraction=0.2 allows \(2\): z0.jpg: cannot read image'):
    collection.index_collection(collection.folder_items(folder), encoder,
                                str(tmp_path / 'store'), source=folder, shard_size=2,
                                max_bad_fraction=0.2, progress=False)
  assert encoded == [] and not os.path.exists(tmp_path / 'store')
  assert not os.path.exists(str(tmp_path / 'store') + '.partial')
  store = collection.index_collection(collection.folder_items(folder), encoder,
                                      str(tmp_path / 'store'), source=folder, shard_size=2,
                                      max_bad_fraction=0.3, progress=False)
  assert len(store.photo_ids) == 7 and sorted(encoded) == [f'a{i}.png' for i in range(7)]
  assert [b['photo_id'] for b in store.meta['bad_images']] == ['z0.jpg', 'z1.jpg', 'z2.jpg']


def test_a_tiny_collection_refuses_ivfpq_before_encoding(encoder, tmp_path, monkeypatch):
  folder = _folder(tmp_path / 'photos', {f'p{i}.png': 800 + i for i in range(6)})
  encoded = _spy(monkeypatch)
  with pytest.raises(engines.EngineSizeError,
                     match=r'^faiss-ivfpq cannot be built for 6 photos \(6 training rows\)'):
    collection.index_collection(collection.folder_items(folder), encoder,
                                str(tmp_path / 'store'), source=folder, progress=False,
                                engines=['faiss-ivfpq'])
  assert encoded == [] and not os.path.exists(tmp_path / 'store')
  with pytest.raises(InputError, match='exact search needs no index'):
    collection.index_collection(collection.folder_items(folder), encoder,
                                str(tmp_path / 'store'), source=folder, progress=False,
                                engines=['exact'])


def test_text_records_hash_what_a_text_encoder_reads(tmp_path):
  items = [collection.CollectionItem('a.jpg', str(tmp_path / 'a.jpg'), 'big ben'),
           collection.CollectionItem('b.jpg', str(tmp_path / 'missing.jpg'))]
  records = collection.scan(items, False, {})
  assert [r.sha256 for r in records] == [hashlib.sha256(b'big ben').hexdigest(),
                                         hashlib.sha256(b'b').hexdigest()]
  assert not any(r.bad for r in records)  # files are not read for a text encoder
  images = collection.scan(items, True, {})
  assert images[1].bad.startswith('cannot read image (No such file')

