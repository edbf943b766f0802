"""Tests for colt_jax.evaluation.metrics."""
from __future__ import annotations

import dataclasses
import os
import random
import xml.etree.ElementTree as ET

import pytest

from colt_jax.evaluation import metrics
from colt_jax.data.types import TopicGroundTruth


def make_gt(relevance, clusters, num_clusters=None):
  if num_clusters is None:
    num_clusters = max(clusters.values(), default=0)
  return TopicGroundTruth(relevance=dict(relevance), clusters=dict(clusters),
                          cluster_names={}, num_clusters=num_clusters)


# a: 1 (cluster 1), b: 1 (cluster 3), c: 0, d: -1, e: 1 (cluster 1).
GT = make_gt({'a': 1, 'b': 1, 'c': 0, 'd': -1, 'e': 1}, {'a': 1, 'b': 3, 'e': 1})


def test_num_clusters_is_largest_id():
  assert GT.num_clusters == 3  # dGT ids {1, 3} => 3 clusters.


def test_short_list_is_penalised():
  m = metrics.topic_metrics(['a', 'b'], GT, cutoffs=(5, 10))
  assert m['P@5'] == pytest.approx(2 / 5)
  assert m['P@10'] == pytest.approx(2 / 10)
  assert m['CR@5'] == pytest.approx(2 / 3)
  assert m['F1@5'] == pytest.approx(2 * 0.4 * (2 / 3) / (0.4 + 2 / 3))


def test_duplicates_count_once_and_take_a_position():
  m = metrics.topic_metrics(['a', 'a', 'a', 'a', 'a', 'b'], GT, cutoffs=(5, 6))
  assert m['P@5'] == pytest.approx(1 / 5)
  assert m['CR@5'] == pytest.approx(1 / 3)
  assert m['P@6'] == pytest.approx(2 / 6)
  assert m['CR@6'] == pytest.approx(2 / 3)


def test_zero_minus_one_and_unknown_ids_are_not_relevant():
  m = metrics.topic_metrics(['c', 'd', 'zzz', 'other_topic_photo', 'e'], GT, cutoffs=(5,))
  assert m['P@5'] == pytest.approx(1 / 5)
  assert m['CR@5'] == pytest.approx(1 / 3)


def test_f1_zero_case():
  m = metrics.topic_metrics(['c', 'd', 'x'], GT, cutoffs=(5,))
  assert m == {'P@5': 0.0, 'CR@5': 0.0, 'F1@5': 0.0}
  assert metrics.topic_metrics([], GT, cutoffs=(5,))['F1@5'] == 0.0


def test_no_clusters_gives_zero_cr():
  gt = make_gt({'a': 1}, {}, num_clusters=0)
  m = metrics.topic_metrics(['a'], gt, cutoffs=(1,))
  assert m == {'P@1': 1.0, 'CR@1': 0.0, 'F1@1': 0.0}


def test_keys_and_default_cutoffs():
  m = metrics.topic_metrics(['a'], GT)
  assert list(m) == metrics.metric_names()
  assert set(m) == {f'{k}@{x}' for k in ('P', 'CR', 'F1') for x in metrics.CUTOFFS}


def test_bad_inputs():
  with pytest.raises(TypeError):
    metrics.topic_metrics([1, 2], GT)
  with pytest.raises(ValueError):
    metrics.topic_metrics(['a'], GT, cutoffs=(0,))
  with pytest.raises(ValueError):
    metrics.topic_metrics(['a'], GT, cutoffs=())


def test_mean_f1_is_not_f1_of_means():
  # Topic 1: P=1, CR=0 -> F1=0. Topic 2: P=0, CR=1 -> F1=0. F1 of means would be 0.5.
  gt1 = make_gt({'a': 1}, {}, num_clusters=1)
  gt2 = make_gt({'b': 0}, {'b': 1})
  res = metrics.evaluate_run({1: ['a'], 2: ['b']}, {1: gt1, 2: gt2}, cutoffs=(1,))
  assert res.per_topic[1] == {'P@1': 1.0, 'CR@1': 0.0, 'F1@1': 0.0}
  assert res.per_topic[2] == {'P@1': 0.0, 'CR@1': 1.0, 'F1@1': 0.0}
  assert res.mean == {'P@1': 0.5, 'CR@1': 0.5, 'F1@1': 0.0}
  assert metrics.f1_score(res.mean['P@1'], res.mean['CR@1']) == 0.5


def test_evaluate_run_topic_checks():
  gts = {1: GT, 2: GT}
  with pytest.raises(ValueError, match=r'\[2\]'):
    metrics.evaluate_run({1: ['a']}, gts)
  res = metrics.evaluate_run({1: ['a']}, gts, cutoffs=(1,), allow_missing=True)
  assert res.per_topic[2] == {'P@1': 0.0, 'CR@1': 0.0, 'F1@1': 0.0}
  assert res.mean['P@1'] == 0.5
  with pytest.raises(ValueError, match=r'\[3\]'):
    metrics.evaluate_run({1: ['a'], 2: ['a'], 3: ['a']}, gts)
  with pytest.raises(ValueError):
    metrics.evaluate_run({}, {})
  with pytest.raises(dataclasses.FrozenInstanceError):
    res.mean = {}


def spec_transcription(ranked, gt, cutoffs):
  """The spec's rules written out again, separately, with plain loops."""
  out = {}
  for x in cutoffs:
    n = min(x, len(ranked))
    distinct = []
    for i in range(n):
      if ranked[i] not in distinct:
        distinct.append(ranked[i])
    rel = 0
    for p in distinct:
      if p in gt.relevance and gt.relevance[p] == 1:
        rel += 1
    cl = []
    for p in distinct:
      if p in gt.clusters and gt.clusters[p] not in cl:
        cl.append(gt.clusters[p])
    p_x = rel / x
    cr_x = len(cl) / gt.num_clusters if gt.num_clusters else 0.0
    f_x = 0.0 if p_x + cr_x == 0 else 2 * p_x * cr_x / (p_x + cr_x)
    out[f'P@{x}'], out[f'CR@{x}'], out[f'F1@{x}'] = p_x, cr_x, f_x
  return out


def test_randomized_against_spec_transcription():
  rng = random.Random(0)
  for _ in range(300):
    pool = [str(1000 + i) for i in range(rng.randint(1, 80))]
    rel = {p: rng.choice([1, 1, 0, -1]) for p in pool if rng.random() < 0.9}
    k = rng.randint(1, 12)
    clusters = {p: rng.randint(1, k) for p, r in rel.items() if r == 1}
    gt = make_gt(rel, clusters, num_clusters=max(clusters.values(), default=0))
    extra = [f'x{i}' for i in range(10)]
    ranked = [rng.choice(pool + extra) for _ in range(rng.randint(0, 60))]
    cutoffs = tuple(sorted(rng.sample(range(1, 61), rng.randint(1, 6))))
    got = metrics.topic_metrics(ranked, gt, cutoffs)
    want = spec_transcription(ranked, gt, cutoffs)
    assert set(got) == set(want)
    for key in want:
      assert got[key] == pytest.approx(want[key], abs=1e-12), key


def test_format_table():
  rows = {'flickr': {'P@10': 0.688, 'P@20': 0.674, 'CR@10': 0.4635, 'CR@20': 0.6625,
                     'F1@10': 0.52934, 'F1@20': 0.62949},
          'colt-long-name': {'P@10': 1.0}}
  text = metrics.format_table(rows)
  lines = text.splitlines()
  assert len(lines) == 4
  assert lines[0].split() == ['method', 'P@10', 'P@20', 'P@50', 'CR@10', 'CR@20', 'CR@50',
                              'F1@10', 'F1@20', 'F1@50']
  assert lines[2].split() == ['flickr', '0.6880', '0.6740', '-', '0.4635', '0.6625', '-',
                              '0.5293', '0.6295', '-']
  assert lines[3].split() == ['colt-long-name', '1.0000'] + ['-'] * 8
  assert len({len(l) for l in lines[:3]}) == 1  # aligned
  md = metrics.format_markdown_table(rows, columns=('P@10', 'F1@20'), digits=3)
  assert md.splitlines() == [
      '| method | P@10 | F1@20 |',
      '|:---|---:|---:|',
      '| flickr | 0.688 | 0.629 |',
      '| colt-long-name | 1.000 | - |',
  ]


# Official scorer, Div400 devset keywords, Flickr's original order (spec reference values).
REFERENCE = {
    'P@5': .744, 'P@10': .688, 'P@20': .674, 'P@30': .684, 'P@40': .666, 'P@50': .6392,
    'CR@5': .305, 'CR@10': .4635, 'CR@20': .6625, 'CR@30': .7756, 'CR@40': .8521,
    'CR@50': .8871,
    'F1@5': .4148, 'F1@10': .5293, 'F1@20': .6295, 'F1@30': .6895, 'F1@40': .705,
    'F1@50': .7003,
}


def _read_div400_dev(root):
  """A minimal reader of the official layout (independent of colt_jax.data)."""
  base = os.path.join(root, 'devset', 'keywords')
  if not os.path.isdir(base):
    pytest.skip(f'{base} is not a directory')
  topics = ET.parse(os.path.join(base, 'devsetkeywords_topics.xml')).getroot()
  run, gts = {}, {}
  for t in topics.iter('topic'):
    number, title = int(t.findtext('number')), t.findtext('title').strip()
    photos = ET.parse(os.path.join(base, 'xml', f'{title}.xml')).getroot()
    ranked = sorted(photos.iter('photo'), key=lambda p: int(p.get('rank')))
    run[number] = [p.get('id') for p in ranked][:50]
    rel, cl = {}, {}
    with open(os.path.join(base, 'gt', 'rGT', f'{title} rGT.txt')) as f:
      for line in f:
        if line.strip():
          pid, r = line.strip().split(',')
          rel[pid] = int(r)
    with open(os.path.join(base, 'gt', 'dGT', f'{title} dGT.txt')) as f:
      for line in f:
        if line.strip():
          pid, c = line.strip().split(',')
          cl[pid] = int(c)
    gts[number] = make_gt(rel, cl)
  return run, gts


def test_div400_reference_values(div400_root, tmp_path):
  from colt_jax.evaluation import runfile
  run, gts = _read_div400_dev(div400_root)
  assert len(gts) == 25
  allowed = {t: set(g.relevance) for t, g in gts.items()}
  path = tmp_path / 'flickr.txt'
  runfile.write_run(path, {t: ids for t, ids in run.items()}, 'flickr', allowed)
  parsed = runfile.validate_run(path, gts.keys(), allowed)
  assert parsed == run
  res = metrics.evaluate_run(parsed, gts)
  for key, want in REFERENCE.items():
    assert abs(res.mean[key] - want) <= 5e-5 + 1e-9, (key, res.mean[key], want)
  # The scorer's mean F1 (.6295) is not the F1 of the mean P and CR (.6682).
  assert abs(metrics.f1_score(res.mean['P@20'], res.mean['CR@20']) - 0.6682) < 5e-5
