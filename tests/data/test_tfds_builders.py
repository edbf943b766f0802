"""Tests for colt_jax.data.tfds_builders (TFDS builders div400 / div150cred, the reader
the extractor uses) and extraction through them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from colt_jax import encoders
from colt_jax.data import features
from colt_jax.data import mediaeval
from colt_jax.data import official_files
from colt_jax.data import tfds_builders
from colt_jax.data import tfds_splits
from colt_jax.data.vocabulary import CategoryVocabulary
from colt_jax.data.vocabulary import normalize_name
from colt_jax.encoders import extract
from mediaeval_layout import build  # pylint: disable=g-bad-import-order
from tiny_clip import random_image  # pylint: disable=g-bad-import-order
from xla_env import xla_flags  # pylint: disable=g-bad-import-order
import preloaded
from checkout import REPO as _REPO  # pylint: disable=g-bad-import-order

_STYLES = ('div400', 'div150cred')
# Photo files of each split: (topic number, photo id). 'p5' (topics 7 and 8) has its file only
# in topic 8's folder; 'p2' has none.
_IMAGES = {'dev': [(7, 'p1'), (8, 'p4')],
           'test': [(7, 'p1'), (7, 'p3'), (8, 'p5'), (8, 'p4')]}


def _append(path: str, text: str) -> None:
  with open(path, 'a', encoding='utf-8', newline='') as f:
    f.write(text)


def _add_ground_truth_corner_cases(split_dir: str, title7: str, title8: str) -> None:
  """p2 (topic 7) leaves rGT; topic 8 gains cluster names without photos (3, 4). (A ground
  truth photo missing from the topic's XML is an error of the reader, see test_mediaeval.)"""
  rgt7 = os.path.join(split_dir, 'gt', 'rGT', f'{title7} rGT.txt')
  with open(rgt7, encoding='utf-8') as f:
    text = f.read()
  with open(rgt7, 'w', encoding='utf-8', newline='') as f:
    f.write(text.replace('p2,0\n', ''))
  _append(os.path.join(split_dir, 'gt', 'dGT', f'{title8} dclusterGT.txt'),
          '\r\n3,Far  view\r\n4,unused name')


def _write_layout(root: str, style: str) -> str:
  """Both splits of a tiny dataset with some photo files; ground-truth corner cases in dev."""
  for split in ('dev', 'test'):
    split_dir = build(root, style, split)
    titles = {t.number: t.title for t in mediaeval.read_split(style, root, split).topics}
    for topic, pid in _IMAGES[split]:
      path = tfds_builders.image_path(split_dir, titles[topic], pid)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      random_image(int(pid[1:]) + 10 * topic, size=(30 + int(pid[1:]), 24)).save(path,
                                                                                 quality=90)
    if split == 'dev':
      _add_ground_truth_corner_cases(split_dir, titles[7], titles[8])
  return root


@pytest.fixture(scope='module')
def built(tmp_path_factory):
  """style -> (official root, TFDS data_dir holding the prepared dataset)."""
  out = {}
  for style in _STYLES:
    base = tmp_path_factory.mktemp(style)
    root = _write_layout(str(base / 'official'), style)
    data_dir = str(base / 'tfds')
    tfds_splits.prepare(style, data_dir, root)
    out[style] = (root, data_dir)
  return out


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else value


@pytest.mark.parametrize('split_name', ['dev', 'test'])
@pytest.mark.parametrize('style', _STYLES)
def test_every_field_of_every_example_matches_the_official_reader(built, style, split_name):
  root, data_dir = built[style]
  split = mediaeval.read_split(style, root, split_name)
  source = tfds.data_source(style, split=split_name, data_dir=data_dir, download=False)
  expected = [(t, p) for t in split.topics for p in split.photos[t.number]]
  assert len(source) == len(expected) == 6  # p5 once per topic: one example per (topic, photo)
  for i, (topic, photo) in enumerate(expected):  # official order: topics file, then rank
    ex = source[i]
    gt = split.ground_truth[topic.number]
    cid = gt.clusters.get(photo.photo_id, tfds_builders.NO_CLUSTER)
    path = os.path.join(split.root, 'img', topic.title, photo.photo_id + '.jpg')
    image = b''
    if os.path.isfile(path):
      with open(path, 'rb') as f:
        image = f.read()
    got = {k: v if k == 'image' else _text(v) for k, v in ex.items()}
    assert got == {
        'photo_id': photo.photo_id, 'topic': topic.number, 'topic_title': topic.title,
        'text': photo.text, 'title': photo.title, 'tags': photo.tags,
        'description': photo.description, 'views': photo.views, 'user': photo.user_id or '',
        'date_taken': photo.date_taken or '', 'url': photo.url or '', 'rank': photo.rank,
        'latitude': '' if photo.latitude is None else repr(photo.latitude),
        'longitude': '' if photo.longitude is None else repr(photo.longitude),
        'relevance': gt.relevance.get(photo.photo_id, tfds_builders.NOT_IN_RGT),
        'cluster_id': cid,
        'cluster_name': normalize_name(gt.cluster_names[cid]) if cid else '',
        'has_image': os.path.isfile(path), 'image': image,
    }, f'{style}/{split_name} example {i}'
  has_image = {(int(source[i]['topic']), _text(source[i]['photo_id']))
               for i in range(len(source)) if source[i]['has_image']}
  assert has_image == set(_IMAGES[split_name])
  for i in range(len(source)):  # the photo file's bytes, or nothing
    assert (len(source[i]['image']) > 0) == bool(source[i]['has_image'])


def test_corner_cases_and_shared_photo(built):
  root, data_dir = built['div150cred']
  source = tfds.data_source('div150cred', split='dev', data_dir=data_dir, download=False)
  by_key = {(int(ex['topic']), _text(ex['photo_id'])): ex for ex in source}
  assert by_key[(7, 'p2')]['relevance'] == tfds_builders.NOT_IN_RGT  # not in rGT any more
  assert by_key[(7, 'p1')]['cluster_name'] == b'side view'  # 'side  View', normalised
  assert by_key[(7, 'p2')]['cluster_id'] == tfds_builders.NO_CLUSTER
  assert by_key[(7, 'p5')]['relevance'] == -1 and by_key[(8, 'p5')]['relevance'] == 1
  assert by_key[(8, 'p5')]['cluster_name'] == b'close up'
  assert by_key[(7, 'p1')]['user'] == b'bob' and by_key[(8, 'p4')]['user'] == b'u4'
  meta = tfds.builder('div150cred', data_dir=data_dir).info.metadata
  topic8 = meta['splits']['dev']['topics'][1]
  assert topic8['relevance_without_photo'] == [] and topic8['clusters_without_photo'] == []
  assert topic8['num_clusters'] == 2 and topic8['cluster_names'][-1] == [4, 'unused name']
  assert meta['splits']['dev']['source'] == os.path.join(root, 'devset')


@pytest.mark.parametrize('split_name', ['dev', 'test'])
@pytest.mark.parametrize('style', _STYLES)
def test_load_split_equals_the_official_split(built, style, split_name):
  root, data_dir = built[style]
  read = tfds_splits.load_split(style, split_name, data_dir)
  official = mediaeval.read_split(style, root, split_name)
  assert read.split == official  # topics, photos in order, ground truth, root
  assert read.name == f'{style}/1.2.0' and str(read).startswith(f'TFDS {style}/1.2.0')
  for t in official.topics:
    for p in official.photos[t.number]:
      path = os.path.join(official.root, 'img', t.title, p.photo_id + '.jpg')
      reader = read.image_reader(p)
      if os.path.isfile(path):
        with open(path, 'rb') as f:
          assert reader() == f.read()
      else:
        assert reader is None
  assert CategoryVocabulary.from_splits([read.split]) == CategoryVocabulary.from_splits(
      [official])


def test_reading_a_dataset_built_from_another_directory_warns(built, tmp_path, caplog):
  _, data_dir = built['div400']
  other = str(tmp_path / 'elsewhere')
  read = tfds_splits.load_split('div400', 'dev', data_dir, manual_dir=other)
  assert read.split.root.startswith(built['div400'][0])  # reused as it is
  assert any('was built from' in r.getMessage() and other in r.getMessage()
             for r in caplog.records)


_NO_TENSORFLOW = r'''
import importlib.machinery, importlib.util, json, sys
sys.path.insert(0, sys.argv[1])

class PathFinderWithoutTensorFlow(importlib.machinery.PathFinder):
  """The standard path finder, blind to tensorflow: `import tensorflow` must fail."""
  @classmethod
  def find_spec(cls, fullname, path=None, target=None):
    if fullname.partition('.')[0] == 'tensorflow':
      return None
    return super().find_spec(fullname, path, target)

sys.meta_path[:] = [PathFinderWithoutTensorFlow if f is importlib.machinery.PathFinder else f
                    for f in sys.meta_path]
assert importlib.util.find_spec('tensorflow') is None
try:
  import tensorflow
  raise SystemExit('tensorflow imported')
except ImportError:
  pass

import tensorflow_datasets as tfds
from colt_jax.data import tfds_builders  # registers div400, div150cred
from colt_jax.data import tfds_splits

root, data_dir = sys.argv[2], sys.argv[3]
config = tfds.download.DownloadConfig(manual_dir=root)
# Built by tfds.data_source itself, then read.
dev = tfds.data_source('div400', split='dev', data_dir=data_dir,
                       download_and_prepare_kwargs={'download_config': config})
test = tfds_builders.Div400(data_dir=data_dir).as_data_source(split='test')
out = {name: [[ex['photo_id'].decode(), int(ex['topic']), ex['text'].decode(),
               bool(ex['has_image']), len(ex['image'])] for ex in source]
       for name, source in (('dev', dev), ('test', test))}
out['tensorflow_loaded'] = sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow')
out['file_format'] = str(tfds.builder('div400', data_dir=data_dir).info.file_format.value)
print('RESULT ' + json.dumps(out))
'''


def test_build_and_read_without_tensorflow(built, tmp_path):
  root, _ = built['div400']
  proc = subprocess.run([sys.executable, '-c', _NO_TENSORFLOW, _REPO, root, str(tmp_path)],
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [s for s in proc.stdout.splitlines() if s.startswith('RESULT ')][-1]
  out = json.loads(line[len('RESULT '):])
  assert out['tensorflow_loaded'] == [] and out['file_format'] == 'array_record'
  for name in ('dev', 'test'):
    split = mediaeval.read_split('div400', root, name)
    want = [[p.photo_id, t.number, p.text, (t.number, p.photo_id) in _IMAGES[name]]
            for t in split.topics for p in split.photos[t.number]]
    assert [row[:4] for row in out[name]] == want
    assert all((size > 0) == has for *_, has, size in out[name])
  assert os.path.isdir(os.path.join(tmp_path, 'div400', '1.2.0'))


def test_missing_or_wrong_manual_dir_names_the_path(tmp_path):
  missing = str(tmp_path / 'nowhere')
  with pytest.raises(AssertionError, match=f'Manual directory {missing} does not exist'):
    tfds_splits.prepare('div400', str(tmp_path / 'tfds'), missing)
  wrong = tmp_path / 'wrong'
  (wrong / 'devset').mkdir(parents=True)
  (wrong / 'README').write_text('not the official layout')
  with pytest.raises(official_files.DatasetFormatError) as e:
    tfds_splits.prepare('div400', str(tmp_path / 'tfds'), str(wrong))
  message = str(e.value)
  assert message.startswith(os.path.join(str(wrong), 'devset', 'keywords',
                                         'devsetkeywords_topics.xml'))
  assert 'missing topics file' in message and f'manual directory {wrong}' in message
  assert not os.path.exists(tmp_path / 'tfds' / 'div400' / '1.2.0')  # nothing half-written


def test_preparing_leaves_no_temporary_or_download_folder(tmp_path, monkeypatch):
  # tfds's own DatasetInfo looks for the dataset in gs://tfds-data through a new temporary
  # folder that it never removes; the builders skip that lookup.
  scratch = tmp_path / 'scratch'
  scratch.mkdir()
  monkeypatch.setattr(tempfile, 'tempdir', str(scratch))
  root = _write_layout(str(tmp_path / 'official'), 'div400')
  tfds_splits.prepare('div400', str(tmp_path / 'tfds'), root)
  tfds.builder('div150cred', data_dir=str(tmp_path / 'other'))
  assert os.listdir(scratch) == []
  assert os.path.isdir(tmp_path / 'tfds' / 'div400' / '1.2.0')
  # nor a download folder beside the dataset's (nothing is downloaded)
  assert os.listdir(tmp_path / 'tfds') == ['div400']


def test_builders_are_registered_array_record_only(tmp_path):
  assert isinstance(tfds.builder('div150cred', data_dir=str(tmp_path)),
                    tfds_builders.Div150Cred)
  assert tfds_builders.Div400.VERSION == '1.2.0' and '1.2.0' in tfds_builders.Div400.RELEASE_NOTES
  assert 'devsetkeywords_topics.xml' in tfds_builders.Div400.MANUAL_DOWNLOAD_INSTRUCTIONS
  assert 'devset_topics.xml' in tfds_builders.Div150Cred.MANUAL_DOWNLOAD_INSTRUCTIONS
  with pytest.raises(ValueError, match='array_record'):
    tfds_builders.Div400(data_dir=str(tmp_path), file_format='tfrecord')


# ----------------------------------------------------------------------------- extraction


def _settings(out: str) -> dict:
  with open(os.path.join(out + '.partial', extract.SETTINGS_FILE)) as f:
    return json.load(f)


def _extract_both_ways(encoder, official, via_tfds, tmp_path, **kwargs) -> tuple:
  """(official store, TFDS store, official settings, TFDS settings): each run is interrupted
  after its first shard (to read its resume settings), then completed."""
  stores, settings = [], []
  for name, split, reader in (('official', official, None),
                              ('tfds', via_tfds.split, via_tfds.image_reader)):
    out = str(tmp_path / name)
    with pytest.raises(extract.ExtractionInterrupted):
      extract.extract(split, encoder, out, shard_size=4, progress=False, stop_after_shards=1,
                      image_reader=reader, **kwargs)
    settings.append(_settings(out))
    extract.extract(split, encoder, out, shard_size=4, progress=False, image_reader=reader,
                    **kwargs)
    stores.append(features.load(out))
  return (*stores, *settings)


def _assert_same_store(a, b):
  assert list(a.photo_ids) == list(b.photo_ids)
  assert list(a.query_ids) == list(b.query_ids)
  assert list(a.category_names) == list(b.category_names)
  for name in ('photos', 'queries', 'categories'):
    np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-6, err_msg=name)
  strip = lambda m: {k: v for k, v in m.items() if k != 'path'}
  assert strip(a.meta) == strip(b.meta)


def test_clip_extraction_through_tfds_equals_the_official_one(built, tiny_clip_dir, tmp_path):
  root, data_dir = built['div400']
  encoder = encoders.load('clip', tiny_clip_dir)
  official = mediaeval.read_split('div400', root, 'test')
  via_tfds = tfds_splits.load_split('div400', 'test', data_dir)
  a, b, settings_a, settings_b = _extract_both_ways(
      encoder, official, via_tfds, tmp_path, batch_size=4, allow_missing=True,
      devices=jax.local_devices()[:1])
  assert settings_a == settings_b  # digest of ids, image names and texts included
  _assert_same_store(a, b)
  assert list(a.photo_ids) == ['p1', 'p3', 'p5', 'p4']  # p5's image from topic 8's folder
  assert a.meta['missing_photos'] == ['p2']
  with pytest.raises(extract.MissingPhotosError, match=r'1 of 5 photos .*TFDS div400/1\.2\.0'):
    extract.extract(via_tfds.split, encoder, str(tmp_path / 'strict'), progress=False,
                    image_reader=via_tfds.image_reader)


def test_minilm_extraction_through_tfds_equals_the_official_one(built, tmp_path):
  root, data_dir = built['div150cred']
  encoder = encoders.load('minilm')
  official = mediaeval.read_split('div150cred', root, 'dev')
  via_tfds = tfds_splits.load_split('div150cred', 'dev', data_dir)
  a, b, settings_a, settings_b = _extract_both_ways(
      encoder, official, via_tfds, tmp_path, batch_size=8, devices=jax.local_devices()[:1])
  assert settings_a == settings_b
  assert settings_a['items']['photos']['count'] == 5
  _assert_same_store(a, b)


def test_cli_source_tfds_writes_the_official_store(built, tiny_clip_dir, tmp_path):
  root, _ = built['div400']
  out, tfds_dir = str(tmp_path / 'store-tfds'), str(tmp_path / 'tfds-data')
  cmd = [sys.executable, os.path.join(_REPO, 'data_prep', 'extract_features.py'),
         '--dataset=div400', f'--data_dir={root}', '--split=test', '--encoder=clip',
         f'--model={tiny_clip_dir}', f'--out={out}', '--batch_size=4', '--allow_missing',
         '--noprogress', '--source=tfds', f'--tfds_data_dir={tfds_dir}']
  env = dict(os.environ, XLA_FLAGS=xla_flags(1),
             PYTHONPATH=_REPO)  # this checkout's colt_jax, not an installed one
  proc = preloaded.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert '4 photos, 2 queries' in proc.stdout and '1 missing photos left out' in proc.stdout
  assert os.path.isdir(os.path.join(tfds_dir, 'div400', '1.2.0'))  # built by the CLI
  via_tfds = features.load(out)
  assert via_tfds.meta.pop('tfds') == {'name': 'div400/1.2.0',
                                       'data_dir': os.path.join(tfds_dir, 'div400', '1.2.0')}
  # What the CLI does with --source official (the default), in process.
  splits = [mediaeval.read_split('div400', root, s) for s in ('dev', 'test')]
  official = extract.extract(
      splits[1], encoders.load('clip', tiny_clip_dir), str(tmp_path / 'store-official'),
      batch_size=4, devices=jax.local_devices()[:1], allow_missing=True, progress=False,
      vocabulary=CategoryVocabulary.from_splits(splits),
      extra_meta={'vocabulary_splits': ['dev', 'test']}).store
  _assert_same_store(official, via_tfds)


# ----------------------------------------------------------------------------- real data


@pytest.mark.slow
def test_real_div400(div400_root, tmp_path):
  builder = tfds_splits.prepare('div400', str(tmp_path), div400_root)
  splits = builder.info.splits
  assert (splits['dev'].num_examples, splits['test'].num_examples) == (2281, 13220)
  for name, topics in (('dev', 25), ('test', 132)):
    read = tfds_splits.load_split('div400', name, str(tmp_path))
    assert len(read.split.topics) == topics and not read.image_index  # no photo files here
    assert read.split == mediaeval.read_split('div400', os.path.abspath(div400_root), name)
  # One example per (topic, photo): 61 testset photos are in several topics (57 in two, 4 in
  # three), so 13,220 examples hold 13,155 distinct photos.
  assert len(read.split.all_photo_ids()) == 13155
  assert len(extract.unique_photos(read.split)) == 13155
  assert sum(len(occ) > 1 for _, occ in extract.unique_photos(read.split)) == 61
