"""Tests of the synthetic Div400-like generator (colt_jax/data/synthetic.py)."""
import filecmp
import os

import numpy as np
import pytest

from colt_jax.baselines import rerankers
from colt_jax.data import splits as data
from colt_jax.data import features
from colt_jax.evaluation import metrics
from colt_jax.data import mediaeval
from colt_jax.data import synthetic
from colt_jax.data import vocabulary


@pytest.fixture(scope='module')
def default_dataset(tmp_path_factory):
  """The default generative model, fewer topics."""
  cfg = synthetic.SyntheticConfig(dev_topics=12, test_topics=12)
  return synthetic.generate(str(tmp_path_factory.mktemp('syn') / 'd'), seed=0, config=cfg)


def _same_tree(a, b):
  cmp = filecmp.dircmp(a, b)
  if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
    return False
  return all(_same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def test_deterministic_by_seed(tmp_path):
  cfg = synthetic.SyntheticConfig(dim=8, num_vocabulary=20, dev_topics=2, test_topics=2,
                                  min_photos=20, max_photos=30, mean_clusters=4)
  a = synthetic.generate(str(tmp_path / 'a'), seed=5, config=cfg)
  b = synthetic.generate(str(tmp_path / 'b'), seed=5, config=cfg)
  c = synthetic.generate(str(tmp_path / 'c'), seed=6, config=cfg)
  assert _same_tree(a, b)  # the same NumPy code, seed and machine: the same bytes
  assert not _same_tree(a, c)
  assert sorted(os.listdir(tmp_path)) == ['a', 'b', 'c']  # no temporary directories left


def test_layout_reads_as_div400_and_store_covers_it(default_dataset):
  for split in ('dev', 'test'):
    s = mediaeval.read_split('synthetic', default_dataset, split)
    assert len(s.topics) == 12
    store = features.load(os.path.join(default_dataset, 'features', split))
    data.check_store_covers(s, store)
    assert store.meta['encoder'] == 'synthetic' and store.meta['split'] == split
    for t in s.topics:
      ranks = [p.rank for p in s.photos[t.number]]
      assert ranks == list(range(1, len(ranks) + 1))
      assert all('<' not in p.description for p in s.photos[t.number])


def test_statistics_follow_div400(default_dataset):
  s = mediaeval.read_split('synthetic', default_dataset, 'test')
  sizes = [len(gt.relevance) for gt in s.ground_truth.values()]
  clusters = [gt.num_clusters for gt in s.ground_truth.values()]
  irrelevant = [np.mean([r != 1 for r in gt.relevance.values()])
                for gt in s.ground_truth.values()]
  assert 100 <= min(sizes) and max(sizes) <= 300
  assert 8 <= np.mean(clusters) <= 16
  assert 0.25 <= np.mean(irrelevant) <= 0.45
  # Long-tailed clusters: the largest cluster holds several times the median one.
  ratios = []
  for gt in s.ground_truth.values():
    counts = np.bincount(list(gt.clusters.values()))[1:]
    assert counts.min() >= 1
    ratios.append(counts.max() / np.median(counts))
  assert np.mean(ratios) >= 3


def test_cluster_names_come_from_the_store_vocabulary(default_dataset):
  s = mediaeval.read_split('synthetic', default_dataset, 'dev')
  store = features.load(os.path.join(default_dataset, 'features', 'dev'))
  names = set(str(n) for n in store.category_names)
  raw = [n for gt in s.ground_truth.values() for n in gt.cluster_names.values()]
  assert any(n != vocabulary.normalize_name(n) for n in raw)  # spelling variants exist
  assert {vocabulary.normalize_name(n) for n in raw} <= names


def test_topk_is_visibly_less_diverse_than_the_ground_truth_allows(default_dataset):
  """W1/W2: top-k over-samples common clusters; CR@20 well below what 20 photos allow."""
  s = mediaeval.read_split('synthetic', default_dataset, 'test')
  store = features.load(os.path.join(default_dataset, 'features', 'test'))
  run, best_cr = {}, []
  for t in s.topics:
    gt = s.ground_truth[t.number]
    ids = sorted(gt.relevance)
    ranking = rerankers.topk(store.query_feature(t.number),
                             np.asarray(store.photos)[store.rows_for(ids)], 20)
    run[t.number] = [ids[i] for i in ranking.indices]
    best_cr.append(min(20, gt.num_clusters) / gt.num_clusters)
  mean = metrics.evaluate_run(run, s.ground_truth).mean
  assert mean['P@20'] > 0.75  # the query is informative ...
  assert mean['CR@20'] < 0.7 < np.mean(best_cr) - 0.25  # ... but not diverse
  # W1: the query is closer to the photos of larger clusters.
  corr = []
  for t in s.topics:
    gt = s.ground_truth[t.number]
    ids = list(gt.clusters)
    sims = np.asarray(store.photos)[store.rows_for(ids)] @ store.query_feature(t.number)
    size = np.bincount(list(gt.clusters.values()))[[gt.clusters[p] for p in ids]]
    corr.append(np.corrcoef(sims, size)[0, 1])
  assert np.mean(corr) > 0.1
