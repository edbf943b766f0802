"""Tests for colt_jax.data.mediaeval (readers of the official MediaEval layouts)."""
from __future__ import annotations

import collections
import os
import re
import time

import numpy as np
import pytest

from colt_jax.data import mediaeval
from colt_jax.data import official_files
from colt_jax.data.official_files import DatasetFormatError
from colt_jax.data.vocabulary import CategoryVocabulary
from mediaeval_layout import build  # pylint: disable=g-bad-import-order
from mediaeval_layout import descriptor_value as _value  # pylint: disable=g-bad-import-order
from mediaeval_layout import HTML as _HTML  # pylint: disable=g-bad-import-order
from mediaeval_layout import HTML_CLEAN as _HTML_CLEAN  # pylint: disable=g-bad-import-order


# ----------------------------------------------------------------------------- synthetic format


def test_div400_layout_every_field(tmp_path):
  split_dir = build(str(tmp_path), 'div400')
  s = mediaeval.read_div400(str(tmp_path), 'dev')
  assert (s.dataset, s.split, s.root) == ('div400', 'dev', split_dir)
  assert s.topic_numbers == [7, 8]
  t = s.topic(7)
  assert (t.title, t.latitude, t.longitude, t.wiki) == ('Tower of Tests', 47.423056, -9.5,
                                                        'http://en.wikipedia.org/x')
  t8 = s.topic(8)
  assert (t8.title, t8.latitude, t8.longitude, t8.wiki) == ('Old Bridge', None, None, None)
  photos = s.photos[7]
  assert [p.photo_id for p in photos] == ['p1', 'p2', 'p3', 'p5']  # sorted by rank
  assert [p.rank for p in photos] == [1, 2, 3, 4]
  p1 = photos[0]
  assert (p1.topic, p1.title, p1.tags, p1.views, p1.user_id) == (7, 'first & best',
                                                                 'tower night', 995, 'bob')
  assert p1.description == _HTML_CLEAN
  assert p1.text == 'first & best tower night ' + _HTML_CLEAN
  # Div400 photos have no userid: username is the user; no username -> None.
  assert [p.user_id for p in photos] == ['bob', None, 'ann', 'eve']
  assert [p.views for p in photos] == [995, 0, 12, 7]
  assert p1.date_taken == '2010-08-14 18:23:36'
  gt = s.ground_truth[7]
  assert dict(gt.relevance) == {'p1': 1, 'p2': 0, 'p3': 1, 'p5': -1}
  assert list(gt.relevance) == ['p1', 'p2', 'p3', 'p5']  # file order
  assert dict(gt.clusters) == {'p1': 3, 'p3': 1}
  assert dict(gt.cluster_names) == {1: 'Night view ', 2: 'close up', 3: 'side  View'}
  assert gt.num_clusters == 3
  assert gt.relevant_ids == frozenset({'p1', 'p3'})
  gt8 = s.ground_truth[8]
  assert gt8.num_clusters == 2 and dict(gt8.clusters) == {'p4': 1, 'p5': 2}
  assert s.all_photo_ids() == ['p1', 'p2', 'p3', 'p5', 'p4']


def test_root_may_be_the_split_dir_and_read_split(tmp_path):
  split_dir = build(str(tmp_path), 'div400', split='test')
  direct = mediaeval.read_div400(split_dir, 'test')
  assert direct.root == split_dir and direct.topic_numbers == [7, 8]
  syn = mediaeval.read_split('synthetic', str(tmp_path), 'test')
  assert syn.dataset == 'synthetic' and syn.photos == direct.photos
  assert mediaeval.read_split('div400', str(tmp_path), 'test').ground_truth == direct.ground_truth
  with pytest.raises(DatasetFormatError, match='devsetkeywords_topics.xml'):
    mediaeval.read_div400(split_dir, 'dev')  # the test dir is not a dev split
  with pytest.raises(ValueError, match='split'):
    mediaeval.read_div400(str(tmp_path), 'train')
  with pytest.raises(ValueError, match='dataset'):
    mediaeval.read_split('div2000', str(tmp_path), 'test')


def test_div150cred_layout(tmp_path):
  split_dir = build(str(tmp_path), 'div150cred')
  assert os.path.isfile(os.path.join(split_dir, 'devset_topics.xml'))
  for root in (str(tmp_path), split_dir):
    s = mediaeval.read_div150cred(root, 'dev')
    assert (s.dataset, s.root) == ('div150cred', split_dir)
  s = mediaeval.read_split('div150cred', str(tmp_path), 'dev')
  assert [t.title for t in s.topics] == ['angel_of_the_north', 'old_bridge']
  # userid wins over username; an empty userid falls back to username; neither -> None.
  assert [p.user_id for p in s.photos[7]] == ['bob', None, 'u1@N00', 'eve']
  assert [p.user_id for p in s.photos[8]] == ['u5', 'u4']
  assert s.photos[7][0].description == _HTML_CLEAN
  assert s.ground_truth[7].num_clusters == 3
  ids, x = mediaeval.read_visual_descriptors(s, ('CM',))
  assert x.shape == (5, 2)


def test_cluster_name_variants_share_one_vocabulary_id(tmp_path):
  build(str(tmp_path), 'div400')
  s = mediaeval.read_div400(str(tmp_path), 'dev')
  # dclusterGT is CRLF without a final newline: names keep trailing spaces, lose the CR.
  assert s.ground_truth[7].cluster_names[1] == 'Night view '
  assert s.ground_truth[8].cluster_names[2] == 'Close up'
  vocab = CategoryVocabulary.from_splits([s])
  assert vocab.names == ('close up', 'night view', 'side view')
  night = vocab.id_of('night view')
  assert vocab.id_of('Night view ') == vocab.id_of('night VIEW') == night
  assert vocab.originals(night) == ('Night view ', 'night VIEW')
  assert vocab.originals(vocab.id_of('close up')) == ('Close up', 'close up')
  assert vocab.topic_labels(s.ground_truth[7]) == {'p1': vocab.id_of('side view'),
                                                   'p3': night}
  assert vocab.topic_labels(s.ground_truth[8]) == {'p4': night, 'p5': vocab.id_of('close up')}


def test_visual_descriptors(tmp_path):
  build(str(tmp_path), 'div400')
  s = mediaeval.read_div400(str(tmp_path), 'dev')
  ids, x = mediaeval.read_visual_descriptors(s, ('CM', 'HOG'))
  # Topic order, then CSV row order (by id); 'p5' of topic 8 was already seen in topic 7.
  assert ids == ['p1', 'p2', 'p3', 'p5', 'p4']
  assert x.dtype == np.float32 and x.shape == (5, 5)
  for pid, row in zip(ids, x):
    want = [_value('CM', pid, j) for j in range(2)] + [_value('HOG', pid, j) for j in range(3)]
    np.testing.assert_array_equal(row, np.float32(want))  # parsed from the CSV text: exact
  ids2, x2 = mediaeval.read_visual_descriptors(s, ('HOG', 'CM'), unique=False)
  assert ids2 == ['p1', 'p2', 'p3', 'p5', 'p4', 'p5']
  np.testing.assert_array_equal(x2[:5], np.concatenate([x[:, 2:], x[:, :2]], axis=1))
  with pytest.raises(ValueError):
    mediaeval.read_visual_descriptors(s, ())
  with pytest.raises(DatasetFormatError, match='Tower of Tests LBP.csv'):
    mediaeval.read_visual_descriptors(s, ('CM', 'LBP'))


def test_clean_html():
  assert official_files.clean_html(_HTML) == _HTML_CLEAN
  assert official_files.clean_html('a <b>St</b>one <p>x</p>  y\n<!-- c -->z') == 'a Stone x y z'
  assert official_files.clean_html('1 < 2 > 0 & AT&T') == '1 < 2 > 0 & AT&T'
  assert official_files.clean_html('&amp;lt;i&amp;gt;it&amp;lt;/i&amp;gt;') == 'it'


# ----------------------------------------------------------------------------- bad input

_T, _B = 'Tower of Tests', 'Old Bridge'


def _replace(rel, old, new):
  def mutate(split_dir):
    path = os.path.join(split_dir, rel)
    with open(path, 'rb') as f:
      data = f.read()
    assert old.encode() in data, (rel, old)
    with open(path, 'wb') as f:
      f.write(data.replace(old.encode(), new.encode(), 1))
  return mutate


def _remove(rel):
  return lambda split_dir: os.remove(os.path.join(split_dir, rel))


def _write(rel, text):
  def mutate(split_dir):
    with open(os.path.join(split_dir, rel), 'w', encoding='utf-8') as f:
      f.write(text)
  return mutate


_RGT, _DGT = f'gt/rGT/{_T} rGT.txt', f'gt/dGT/{_T} dGT.txt'
_DCL, _XML = f'gt/dGT/{_T} dclusterGT.txt', f'xml/{_T}.xml'
_TOPICS = 'devsetkeywords_topics.xml'

# (case, mutation, file named in the message, line number or None, message fragment)
_BAD_SPLITS = [
    ('missing rGT', _remove(_RGT), f'{_T} rGT.txt', None, 'missing rGT'),
    ('missing dGT', _remove(_DGT), f'{_T} dGT.txt', None, 'missing dGT'),
    ('missing dclusterGT', _remove(_DCL), f'{_T} dclusterGT.txt', None, 'missing dclusterGT'),
    ('missing topics', _remove(_TOPICS), _TOPICS, None, 'missing topics'),
    ('no metadata XML', _remove(f'xml/{_B}.xml'), f'{_B}.xml', None, 'missing photo metadata'),
    ('dGT photo not in rGT', _replace(_DGT, 'p3,1', 'p9,1'), f'{_T} dGT.txt', 2,
     f'photo p9 is not in .*{_T} rGT.txt'),
    ('rGT field count', _replace(_RGT, 'p2,0', 'p2,0,1'), f'{_T} rGT.txt', 2, '2 comma-sep'),
    ('rGT one field', _replace(_RGT, 'p5,-1', 'p5'), f'{_T} rGT.txt', 5, '2 comma-sep'),
    ('rGT not an integer', _replace(_RGT, 'p2,0', 'p2,yes'), f'{_T} rGT.txt', 2,
     "not an integer: 'yes'"),
    ('unknown relevance', _replace(_RGT, 'p3,1', 'p3,2'), f'{_T} rGT.txt', 4,
     "unknown relevance value '2'"),
    ('rGT duplicate', _replace(_RGT, 'p3,1', 'p1,1'), f'{_T} rGT.txt', 4, 'duplicate'),
    ('dGT not an integer', _replace(_DGT, 'p3,1', 'p3,one'), f'{_T} dGT.txt', 2,
     'not an integer'),
    ('dGT cluster 0', _replace(_DGT, 'p3,1', 'p3,0'), f'{_T} dGT.txt', 2, 'positive'),
    ('dGT cluster without name', _replace(_DGT, 'p3,1', 'p3,4'), f'{_T} dGT.txt', 2,
     'cluster 4 has no name'),
    ('dclusterGT no name', _replace(_DCL, '2,close up', '2'), f'{_T} dclusterGT.txt', 2,
     '2 comma-sep'),
    ('dclusterGT bad id', _replace(_DCL, '3,side', 'x3,side'), f'{_T} dclusterGT.txt', 3,
     'not an integer'),
    ('broken photo XML', _replace(_XML, '<photo ', '<photo <'), f'{_T}.xml', 3,
     'malformed XML'),
    ('unclosed photo XML', _replace(_XML, '</photos>', ''), f'{_T}.xml', 8, 'malformed XML'),
    ('broken topics XML', _replace(_TOPICS, '</topic>', '</topik>'), _TOPICS, 9,
     'malformed XML'),
    ('topic number', _replace(_TOPICS, '<number>8<', '<number>eight<'), _TOPICS, 10,
     'topic number is not an integer'),
    ('photo rank', _replace(_XML, 'rank="2"', 'rank="two"'), f'{_T}.xml', 5,
     'rank is not an integer'),
    ('photo views', _replace(_XML, 'views="12"', 'views="many"'), f'{_T}.xml', 3,
     'views is not an integer'),
    ('duplicate photo', _replace(_XML, 'id="p2"', 'id="p1"'), f'{_T}.xml', 5, 'duplicate'),
    ('rGT photo not in the XML', _replace(_RGT, 'p2,0', 'p8,0'), f'{_T} rGT.txt', 2,
     f'photo p8 is not in .*{_T}.xml'),
    ('empty photo XML', _write(_XML, '<?xml version="1.0"?>\n<photos monument="x">\n</photos>\n'),
     f'{_T}.xml', None, r'no photos, but .* rGT.txt lists 4'),
    # Non-finite or impossible metadata numbers.
    ('topic latitude NaN', _replace(_TOPICS, '>47.423056<', '>nan<'), _TOPICS, 3,
     "topic 7: latitude is not a finite number: 'nan'"),
    ('topic longitude -inf', _replace(_TOPICS, '>-9.5<', '>-inf<'), _TOPICS, 3,
     "topic 7: longitude is not a finite number: '-inf'"),
    ('topic latitude out of range', _replace(_TOPICS, '>47.423056<', '>123<'), _TOPICS, 3,
     r'topic 7: latitude 123 is outside \[-90, 90\]'),
    ('photo latitude NaN', _replace(_XML, 'id="p1" latitude="0"', 'id="p1" latitude="NaN"'),
     f'{_T}.xml', 4, "photo p1: latitude is not a finite number: 'NaN'"),
    ('photo longitude inf', _replace(_XML, 'longitude="0"', 'longitude="Infinity"'),
     f'{_T}.xml', 3, "photo p3: longitude is not a finite number: 'Infinity'"),
    ('photo longitude overflow', _replace(_XML, 'longitude="0"', 'longitude="1e999"'),
     f'{_T}.xml', 3, "photo p3: longitude is not a finite number: '1e999'"),
    ('photo latitude text', _replace(_XML, 'latitude="0"', 'latitude="north"'),
     f'{_T}.xml', 3, "photo p3: latitude is not a number: 'north'"),
    ('photo date_taken', _replace(_XML, 'date_taken="2010-08-14 18:23:36"', 'date_taken="nan"'),
     f'{_T}.xml', 3, "photo p3: date_taken is not a date .*'nan'"),
    ('photo views NaN', _replace(_XML, 'views="12"', 'views="nan"'), f'{_T}.xml', 3,
     "views is not an integer: 'nan'"),
    ('photo rank inf', _replace(_XML, 'rank="2"', 'rank="inf"'), f'{_T}.xml', 5,
     "rank is not an integer: 'inf'"),
    # Names that would lead file paths outside the data directory.
    ('title with ..', _replace(_TOPICS, f'<title>{_B}<', '<title>../../outside<'), _TOPICS, 10,
     "topic 8: title '../../outside' is not a plain file name"),
    ('absolute title', _replace(_TOPICS, f'<title>{_B}<', '<title>/etc/passwd<'), _TOPICS, 10,
     "topic 8: title '/etc/passwd' is not a plain file name"),
    ('title ..', _replace(_TOPICS, f'<title>{_B}<', '<title>..<'), _TOPICS, 10,
     "topic 8: title '..' is not a plain file name"),
    ('title with a backslash', _replace(_TOPICS, f'<title>{_B}<', '<title>a\\b<'), _TOPICS,
     10, r"topic 8: title 'a\\\\b' is not a plain file name"),
    ('photo id with ..', _replace(_XML, 'id="p2"', 'id="../../p2"'), f'{_T}.xml', 5,
     "photo id '../../p2' is not a plain file name"),
    ('rGT photo id absolute', _replace(_RGT, 'p2,0', '/tmp/p2,0'), f'{_T} rGT.txt', 2,
     "photo id '/tmp/p2' is not a plain file name"),
]


@pytest.mark.parametrize('case,mutate,name,line,fragment', _BAD_SPLITS,
                         ids=[c[0] for c in _BAD_SPLITS])
def test_bad_split_raises_with_file_and_line(tmp_path, case, mutate, name, line, fragment):
  split_dir = build(str(tmp_path), 'div400')
  mutate(split_dir)
  with pytest.raises(DatasetFormatError) as info:
    mediaeval.read_div400(str(tmp_path), 'dev')
  msg = str(info.value)
  where = f'{name}:{line}: ' if line is not None else f'{name}: '
  assert where in msg, msg
  assert re.search(fragment, msg), msg
  assert info.value.line == line
  assert isinstance(info.value, ValueError)


def test_bad_utf8_names_the_line(tmp_path):
  split_dir = build(str(tmp_path), 'div400')
  path = os.path.join(split_dir, _RGT)
  with open(path, 'ab') as f:
    f.write(b'p6,\xff1\n')
  with pytest.raises(DatasetFormatError, match=re.escape(f'{_T} rGT.txt:6: not valid UTF-8')):
    mediaeval.read_div400(str(tmp_path), 'dev')


_CM, _HOG = f'descvis/img/{_T} CM.csv', f'descvis/img/{_T} HOG.csv'
_BAD_DESCRIPTORS = [
    ('wrong dim', _replace(_HOG, 'p2,12.0,12.25,12.5', 'p2,12.0,12.25'), f'{_T} HOG.csv', 2,
     'has 2 values, expected 3'),
    ('not a number', _replace(_HOG, 'p3,13.0', 'p3,abc'), f'{_T} HOG.csv', 3,
     "not a number: 'abc'"),
    ('empty value', _replace(_CM, 'p3,3.0,', 'p3,,'), f'{_T} CM.csv', 3, "not a number: ''"),
    ('extra photo', _replace(_HOG, 'p2,', 'p9,'), f'{_T} HOG.csv', 2,
     f'photo p9 is not in .*{_T} CM.csv'),
    ('missing photo', _replace(_HOG, 'p5,15.0,15.25,15.5\n', ''), f'{_T} HOG.csv', None,
     f'no row for photo p5 .*{_T} CM.csv:4'),
    ('duplicate photo', _replace(_CM, 'p2,', 'p1,'), f'{_T} CM.csv', 2, 'duplicate'),
    ('dim differs across topics', _replace(f'descvis/img/{_B} CM.csv', 'p4,4.0,4.25',
                                           'p4,4.0,4.25,4.5'),
     f'{_B} CM.csv', 1, 'expected 2'),
    ('missing file', _remove(_HOG), f'{_T} HOG.csv', None, 'missing HOG descriptor'),
    ('NaN value', _replace(_HOG, 'p3,13.0', 'p3,nan'), f'{_T} HOG.csv', 3,
     r"HOG value 1 \(column 2\) of photo p3 is not a finite number: 'nan'"),
    ('inf value', _replace(_CM, 'p3,3.0,3.25', 'p3,3.0,inf'), f'{_T} CM.csv', 3,
     r"CM value 2 \(column 3\) of photo p3 is not a finite number: 'inf'"),
    ('-Infinity value', _replace(f'descvis/img/{_B} HOG.csv', 'p5,15.0,15.25,15.5',
                                 'p5,15.0,15.25,-Infinity'),
     f'{_B} HOG.csv', 2, "HOG value 3 .* of photo p5 is not a finite number: '-Infinity'"),
    ('overflow', _replace(_CM, 'p2,2.0', 'p2, 1e999'), f'{_T} CM.csv', 2,
     "CM value 1 .* of photo p2 is not a finite number: '1e999'"),
]


@pytest.mark.parametrize('case,mutate,name,line,fragment', _BAD_DESCRIPTORS,
                         ids=[c[0] for c in _BAD_DESCRIPTORS])
def test_bad_descriptors_raise_with_file_and_line(tmp_path, case, mutate, name, line,
                                                  fragment):
  split_dir = build(str(tmp_path), 'div400')
  s = mediaeval.read_div400(str(tmp_path), 'dev')
  mutate(split_dir)
  with pytest.raises(DatasetFormatError) as info:
    mediaeval.read_visual_descriptors(s, ('CM', 'HOG'))
  msg = str(info.value)
  where = f'{name}:{line}: ' if line is not None else f'{name}: '
  assert where in msg, msg
  assert re.search(fragment, msg), msg


def test_descriptor_paths_stay_inside_the_split(tmp_path):
  """A split read elsewhere (TFDS) with an unsafe title is refused before any file is read."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  build(str(tmp_path / 'data'), 'div400')
  s = mediaeval.read_div400(str(tmp_path / 'data'), 'dev')
  outside = tmp_path / 'x CM.csv'  # descvis/img/../../../../x -> tmp_path/x
  outside.write_text('p1,1.0,2.0\n')
  bad = dataclasses.replace(s, topics=[dataclasses.replace(s.topics[0], title='../../../../x')])
  with pytest.raises(DatasetFormatError, match=r"descvis/img: topic 7: title '../../../../x' is "
                     'not a plain file name'):
    mediaeval.read_visual_descriptors(bad, ('CM',))


def test_format_error_pickles():
  import pickle
  e = pickle.loads(pickle.dumps(DatasetFormatError('/a/b rGT.txt', 7, 'bad')))
  assert str(e) == '/a/b rGT.txt:7: bad' and e.line == 7


# ----------------------------------------------------------------------------- real Div400


@pytest.fixture(scope='module')
def real(div400_root):
  out, times = {}, {}
  for split in ('dev', 'test'):
    start = time.perf_counter()
    out[split] = mediaeval.read_div400(div400_root, split)
    times[split] = time.perf_counter() - start
  out['times'] = times
  return out


def test_real_split_sizes(real):
  dev, test = real['dev'], real['test']
  assert len(dev.topics) == 25 and dev.topic_numbers == list(range(26, 51))
  assert sum(len(p) for p in dev.photos.values()) == 2281
  assert len(test.topics) == 132 and test.topic_numbers[0] == 262
  assert test.topic_numbers[-1] == 396
  assert sum(len(p) for p in test.photos.values()) == 13220
  assert len(test.all_photo_ids()) == 13155  # 61 photos belong to several test topics
  assert real['times']['test'] < 15.0  # a few seconds in practice


def test_real_abbey_of_saint_gall(real):
  s = real['dev']
  t = s.topic(26)
  assert (t.title, t.latitude, t.longitude) == ('Abbey of Saint Gall', 47.423056, 9.377222)
  assert t.wiki == 'http://en.wikipedia.org/wiki/Abbey_of_Saint_Gall'
  assert s.root.endswith(os.path.join('devset', 'keywords'))
  photos = s.photos[26]
  assert len(photos) == 72 and [p.rank for p in photos] == list(range(1, 73))
  first, second = photos[0], photos[1]
  assert (first.photo_id, first.rank, first.views) == ('4914949671', 1, 995)
  assert first.user_id == 'Fergal Mac Eoinin' and first.title == 'GALL ÓGLAIGH (Gallowglass)'
  assert first.date_taken == '2010-08-14 18:23:36'
  assert first.url.startswith('http') and first.url.endswith('.jpg')
  assert first.description.startswith('GALLOWGLASS WARRIORS AT ROSCOMMON ABBEY Bonnaught')
  assert (second.photo_id, second.views) == ('6162261886', 498)
  assert second.title == 'MILLTOWN - The Dominicans in Cavan'
  gt = s.ground_truth[26]
  assert len(gt.relevance) == 72 and len(gt.relevant_ids) == 57
  assert collections.Counter(gt.relevance.values()) == {1: 57, 0: 15}
  assert gt.relevance['3338743092'] == 1 and gt.relevance['3664416473'] == 0
  assert gt.clusters['3338743092'] == 3 and gt.clusters['5315894983'] == 17
  assert gt.num_clusters == 17 and len(gt.cluster_names) == 17
  assert gt.cluster_names[1] == 'outside statue' and gt.cluster_names[17] == 'winter'
  assert gt.cluster_names[3] == 'partial frontal view'


def test_real_descriptions_have_no_html(real):
  tag = re.compile(r'</?[A-Za-z][^<>]*>|&(quot|amp|lt|gt|nbsp|#\d+);')
  for split in ('dev', 'test'):
    for photos in real[split].photos.values():
      for p in photos:
        assert not tag.search(p.description), (p.photo_id, p.description)
        assert '  ' not in p.description and p.description == p.description.strip()


def test_real_relevance_and_clusters(real):
  counts = {}
  for split in ('dev', 'test'):
    s = real[split]
    counts[split] = collections.Counter(v for gt in s.ground_truth.values()
                                        for v in gt.relevance.values())
    for number, gt in s.ground_truth.items():
      assert set(gt.relevance) == {p.photo_id for p in s.photos[number]}
      assert set(gt.clusters) == gt.relevant_ids
      assert set(gt.clusters.values()) == set(range(1, gt.num_clusters + 1))
  assert counts['dev'] == {1: 1558, 0: 723}
  assert counts['test'] == {1: 7489, 0: 5717, -1: 14}
  mean = {k: np.mean([g.num_clusters for g in real[k].ground_truth.values()])
          for k in ('dev', 'test')}
  assert mean['dev'] == pytest.approx(10.44)
  assert mean['test'] == pytest.approx(1595 / 132)


def test_real_visual_descriptors(real):
  s = real['dev']
  ids, x = mediaeval.read_visual_descriptors(s)
  assert x.shape == (2281, 9 + 11 + 64 + 81 + 16) and x.dtype == np.float32
  assert sum(mediaeval.VISUAL_FEATURE_DIMS.values()) == x.shape[1]
  assert sorted(ids) == sorted(s.all_photo_ids())
  assert ids[0] == '3338743092'  # first row of 'Abbey of Saint Gall CM.csv'
  assert x[0, 0] == np.float32(0.51934475780470812)
  hog = x[:, 9 + 11 + 64:9 + 11 + 64 + 81]
  assert hog[0, 0] == np.float32(0.40012357869131326)
  assert hog[ids.index('4914949671'), 0] == np.float32(0.28236713121884177)
  assert np.isfinite(x).all()


def test_a_cluster_for_a_photo_rgt_marks_not_relevant_is_named_and_scored_as_the_scorer_does(
    tmp_path, caplog):
  """A dGT line giving a cluster to a photo that rGT marks 0 was accepted silently: it is now
  named (file:line) in a warning, and kept, as the official scorer keeps it (CR counts it)."""
  split_dir = build(str(tmp_path), 'div400')
  _replace(_DGT, 'p3,1', 'p2,1')(split_dir)
  with caplog.at_level('WARNING'):
    split = mediaeval.read_div400(str(tmp_path), 'dev')
  dgt = os.path.join(split_dir, _DGT)
  assert f'{dgt}:2: photo p2 has cluster 1' in caplog.text and 'not relevant' in caplog.text
  gt = next(g for g in split.ground_truth.values() if 'p2' in g.relevance and
            g.relevance['p2'] == 0)
  assert gt.clusters['p2'] == 1


def test_many_disagreeing_dgt_lines_give_one_warning_a_file(tmp_path, caplog):
  """Every such dGT line is kept as the scorer keeps it, but named once per file (its first
  line and how many more), not once per photo."""
  split_dir = build(str(tmp_path), 'div400')
  _replace(_DGT, 'p3,1', 'p2,1')(split_dir)
  _replace(_DGT, 'p1,3', 'p5,3')(split_dir)
  with caplog.at_level('WARNING'):
    split = mediaeval.read_div400(str(tmp_path), 'dev')
  warnings = [r for r in caplog.records if 'not relevant' in r.getMessage()]
  assert len(warnings) == 1
  assert '(and 1 more such lines)' in warnings[0].getMessage()
  gt = next(g for g in split.ground_truth.values() if 'p2' in g.clusters)
  assert gt.clusters == {'p5': 3, 'p2': 1}
