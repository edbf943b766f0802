"""Tests for colt_jax.data.vocabulary (global category vocabulary)."""
from __future__ import annotations

import json
import os

import pytest

from colt_jax.data import mediaeval
from colt_jax.data.types import Split, Topic, TopicGroundTruth
from colt_jax.data.vocabulary import CategoryVocabulary, normalize_name


def _gt(names, clusters=None, relevance=None):
  clusters = clusters or {}
  relevance = relevance or {p: 1 for p in clusters}
  return TopicGroundTruth(relevance=relevance, clusters=clusters, cluster_names=names,
                          num_clusters=max(clusters.values(), default=0))


def _split(gts):
  topics = [Topic(n, f't{n}', None, None, None) for n in gts]
  return Split('synthetic', 'dev', '/nowhere', topics, {n: [] for n in gts}, gts)


def test_normalize_name():
  assert normalize_name('  Night \t View \r\n') == 'night view'
  assert normalize_name('close up') == 'close up'
  assert normalize_name('Close-Up') == 'close-up'  # punctuation is kept
  assert normalize_name(' \r\n') == ''


def test_ids_sorted_and_independent_of_order():
  raw = ['night view', 'Close up', 'close  up ', 'archway', 'Night View\r\n']
  a = CategoryVocabulary.from_names(raw)
  b = CategoryVocabulary.from_names(reversed(raw))
  assert a == b
  assert a.names == ('archway', 'close up', 'night view')
  assert len(a) == 3
  assert [a.id_of(n) for n in ('archway', 'CLOSE UP', 'night   view')] == [0, 1, 2]
  assert a.originals(1) == ('Close up', 'close  up ')
  assert a.originals(2) == ('Night View\r\n', 'night view')
  assert a.get('nope') is None and a.get('nope', -1) == -1 and a.get(' Archway') == 0
  assert 'ARCHWAY' in a and 'nope' not in a and 3 not in a


def test_unknown_name_and_bad_input():
  vocab = CategoryVocabulary.from_names(['a b'])
  with pytest.raises(KeyError, match="unknown category 'Night View'.*'night view'"):
    vocab.id_of('Night View')
  with pytest.raises(IndexError):
    vocab.originals(1)
  with pytest.raises(ValueError, match='empty'):
    CategoryVocabulary.from_names(['ok', ' \r\n'])
  with pytest.raises(ValueError, match='not normalised'):
    CategoryVocabulary(['Night view'])
  with pytest.raises(ValueError, match='distinct'):
    CategoryVocabulary(['a', 'a'])
  with pytest.raises(ValueError, match='does not normalise'):
    CategoryVocabulary(['a'], [['b']])


def test_from_splits_and_topic_labels():
  gt1 = _gt({1: 'Night view ', 2: 'close up', 3: 'unused'},
            clusters={'p1': 1, 'p2': 2, 'p3': 2, 'p9': 1},
            relevance={'p1': 1, 'p2': 1, 'p3': 1, 'p9': 0, 'p4': 0})
  gt2 = _gt({1: 'night  VIEW', 2: 'archway'}, clusters={'q1': 2, 'q2': 1})
  s1, s2 = _split({1: gt1}), _split({5: gt2})
  vocab = CategoryVocabulary.from_splits([s1, s2])
  assert vocab == CategoryVocabulary.from_splits([s2, s1])
  assert vocab.names == ('archway', 'close up', 'night view', 'unused')
  assert vocab.originals(2) == ('Night view ', 'night  VIEW')
  # Only relevant photos get a label (p9 is in dGT but not relevant).
  assert vocab.topic_labels(gt1) == {'p1': 2, 'p2': 1, 'p3': 1}
  assert vocab.topic_labels(gt2) == {'q1': 0, 'q2': 2}
  assert vocab.split_labels(s2) == {5: {'q1': 0, 'q2': 2}}
  other = CategoryVocabulary.from_splits([s2])
  with pytest.raises(KeyError, match='close up'):
    other.topic_labels(gt1)
  with pytest.raises(KeyError, match='cluster 7'):
    vocab.topic_labels(_gt({1: 'archway'}, clusters={'x': 7}))


def test_json_round_trip_and_atomic_save(tmp_path):
  vocab = CategoryVocabulary.from_names(['Night view ', 'night view', 'café', 'close up'])
  assert CategoryVocabulary.from_json(json.loads(json.dumps(vocab.to_json()))) == vocab
  path = tmp_path / 'vocab.json'
  path.write_text('old content')
  vocab.save(path)
  assert os.listdir(tmp_path) == ['vocab.json']  # no temporary file left behind
  loaded = CategoryVocabulary.load(path)
  assert loaded == vocab and loaded.names == ('café', 'close up', 'night view')
  assert loaded.originals(2) == ('Night view ', 'night view')
  obj = vocab.to_json()
  obj['categories'][0]['id'] = 5
  with pytest.raises(ValueError, match='ids must be'):
    CategoryVocabulary.from_json(obj)
  with pytest.raises(ValueError, match='format'):
    CategoryVocabulary.from_json({'format': 'other', 'version': 1, 'categories': []})


def test_real_div400_vocabulary(div400_root, tmp_path):
  splits = [mediaeval.read_div400(div400_root, s) for s in ('dev', 'test')]
  dev, test = (CategoryVocabulary.from_splits([s]) for s in splits)
  both = CategoryVocabulary.from_splits(splits)
  raw = {n for s in splits for gt in s.ground_truth.values() for n in gt.cluster_names.values()}
  # 157 of Div400's 396 locations; the paper counts 629 categories for the whole dataset.
  assert (len(dev), len(test), len(both), len(raw)) == (185, 825, 966, 1010)
  assert sum(len(both.originals(i)) for i in range(len(both))) == len(raw)
  night = both.id_of('night view')
  assert both.names[night] == 'night view'
  assert all(normalize_name(o) == 'night view' for o in both.originals(night))
  for s in splits:
    for number, gt in s.ground_truth.items():
      labels = both.topic_labels(gt)
      assert set(labels) == gt.relevant_ids
      assert len(set(labels.values())) == len({normalize_name(n) for n in
                                               gt.cluster_names.values()})
  both.save(tmp_path / 'v.json')
  assert CategoryVocabulary.load(tmp_path / 'v.json') == both
