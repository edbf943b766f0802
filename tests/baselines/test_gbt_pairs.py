"""Tests for colt_jax.baselines.gbt_pairs (`gbt-pairs`) on a small synthetic official-layout dataset."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.data import folds
from colt_jax.baselines import gbt_pairs
from colt_jax.evaluation import runfile
from colt_jax.data import synthetic
from colt_jax.util.errors import InputError

FAST = gbt_pairs.LearnerConfig(max_iter=40, max_pairs=3000)


def _write_descriptors(root, split_name):
  """CM: the photo's dGT cluster one-hot plus noise (grouping signal); HOG: noise only."""
  split = data.load_split('synthetic', root, split_name)
  rng = np.random.default_rng(len(split.topics))
  folder = os.path.join(split.root, 'descvis', 'img')
  os.makedirs(folder, exist_ok=True)
  for t in split.topics:
    gt = split.ground_truth[t.number]
    ids = sorted(p.photo_id for p in split.photos[t.number])
    onehot = np.eye(12)[[gt.clusters.get(p, 0) % 12 for p in ids]]
    for name, values in (('CM', onehot + 0.5 * rng.normal(size=onehot.shape)),
                         ('HOG', rng.normal(size=(len(ids), 5)))):
      rows = [','.join([p] + [f'{v:.5f}' for v in row]) for p, row in zip(ids, values)]
      with open(os.path.join(folder, f'{t.title} {name}.csv'), 'w') as f:
        f.write('\n'.join(rows) + '\n')


@pytest.fixture(scope='module')
def clustered(tmp_path_factory):
  """Synthetic data whose clusters text features and the CM descriptor both reveal."""
  cfg = synthetic.SyntheticConfig(dim=16, num_vocabulary=30, dev_topics=6, test_topics=4,
                                  min_photos=40, max_photos=60, mean_clusters=5,
                                  category_weight=1.2, nuisance_weight=0.3, photo_noise=0.4)
  root = synthetic.generate(str(tmp_path_factory.mktemp('pairs') / 'data'), seed=1, config=cfg)
  for split in ('dev', 'test'):
    _write_descriptors(root, split)
  return root


def _pair_auc(split, scores):
  """AUC of P(same cluster) over the pairs of clustered photos of every topic."""
  labels, probs = [], []
  for s in scores:
    gt = split.ground_truth[s.topic]
    pos = np.array([i for i, p in enumerate(s.photo_ids) if p in gt.clusters])
    cluster = np.array([gt.clusters[s.photo_ids[i]] for i in pos])
    a, b = np.triu_indices(len(pos), 1)
    labels.append(cluster[a] == cluster[b])
    probs.append(s.pair_prob[pos[a], pos[b]])
  return roc_auc_score(np.concatenate(labels), np.concatenate(probs))


def test_learner_beats_chance_on_held_out_topics(clustered):
  dev, test = data.load('synthetic', 'dev', clustered), data.load('synthetic', 'test', clustered)
  learner = gbt_pairs.fit(*dev, 'pool', FAST)
  assert learner.descriptors == ('CM', 'HOG')  # found in descvis/img
  assert learner.transform.num_photos == len(dev[0].all_photo_ids())  # training photos only
  scores = learner.predict(*test, 'pool')
  assert [s.topic for s in scores] == test[0].topic_numbers
  assert _pair_auc(test[0], scores) > 0.8
  rel_labels = np.concatenate([[test[0].ground_truth[s.topic].relevance[p] == 1
                                for p in s.photo_ids] for s in scores])
  assert roc_auc_score(rel_labels, np.concatenate([s.relevance for s in scores])) > 0.7
  for s in scores:
    np.testing.assert_array_equal(s.pair_prob, s.pair_prob.T)  # each pair set once for both: exact
    assert np.all((s.pair_prob >= 0) & (s.pair_prob <= 1)) and np.all(np.diag(s.pair_prob) == 1)
  # Without descriptors the learner still works, on fewer features.
  text_only = gbt_pairs.fit(*dev, 'pool', dataclasses.replace(FAST, descriptors=()))
  assert text_only.pair_model.n_features_in_ == len(gbt_pairs.PAIR_FEATURES)
  assert learner.pair_model.n_features_in_ == len(gbt_pairs.PAIR_FEATURES) + 2


def test_photo_features_are_what_the_relevance_model_reads(clustered):
  from colt_jax.inputs import candidates as candidates_lib  # pylint: disable=g-import-not-at-top
  dev, test = data.load('synthetic', 'dev', clustered), data.load('synthetic', 'test', clustered)
  learner = gbt_pairs.fit(*dev, 'pool', FAST)
  meta = gbt_pairs.photo_metadata(test[0])
  assert set(meta) == set(test[0].all_photo_ids())
  cands = candidates_lib.build_candidates(*test, 'pool')
  for s, c in zip(learner.predict(*test, 'pool'), cands):
    x = gbt_pairs.photo_features(test[0], c, meta)
    assert x.shape == (len(c.photo_ids), len(gbt_pairs.PHOTO_FEATURES))
    np.testing.assert_allclose(learner.relevance_model.predict_proba(x)[:, 1], s.relevance,
                               rtol=1e-6)
    ranks = np.array([meta[p].rank for p in c.photo_ids], np.float64)
    np.testing.assert_allclose(x[:, gbt_pairs.PHOTO_FEATURES.index('log_flickr_rank')],
                               np.log(ranks), rtol=1e-6)
  # Exact: the same NumPy code on the same inputs (the metadata read here or given).
  np.testing.assert_array_equal(gbt_pairs.photo_features(test[0], cands[0]),
                                gbt_pairs.photo_features(test[0], cands[0], meta))


def test_a_cross_validation_folds_merged_split_reads_every_topics_descriptors(clustered):
  """The dev and test topics of a fold's training split keep their descriptors, each read
  from its own split directory (before, a merged split looked for all of them under the dev
  directory, found none and fitted without descriptors)."""
  dev, test = data.load('synthetic', 'dev', clustered), data.load('synthetic', 'test', clustered)
  split, store = folds.merge([dev, test], 'cv-train')
  assert gbt_pairs.available_descriptors(split) == ('CM', 'HOG')
  learner = gbt_pairs.fit(split, store, 'pool', FAST)
  assert learner.descriptors == ('CM', 'HOG')
  assert learner.transform.num_photos == len(split.all_photo_ids())


def test_deterministic_under_a_seed_and_runs_are_lists(clustered):
  dev, test = data.load('synthetic', 'dev', clustered), data.load('synthetic', 'test', clustered)
  cfg = dataclasses.replace(FAST, max_pairs=500, seed=4)
  learners = [gbt_pairs.fit(*dev, 'pool', cfg) for _ in range(2)]
  a, b = (learner.rank(*test, 'pool', k=50, weight=0.3) for learner in learners)
  assert a == b
  for topic, entries in a.items():
    ids = [p for p, _ in entries]
    assert len(ids) == len(set(ids)) == min(50, len(test[0].ground_truth[topic].relevance))
    assert set(ids) <= set(test[0].ground_truth[topic].relevance)
  # weight 1: by P(relevant), ties by candidate order.
  s = learners[0].predict(*test, 'pool')[0]
  by_relevance = [s.photo_ids[i] for i in np.argsort(-s.relevance, kind='stable')[:50]]
  assert [p for p, _ in gbt_pairs.select([s], weight=1.0)[s.topic]] == by_relevance


def test_global_protocol_and_missing_descriptors(clustered, tiny_synthetic):
  dev, test = data.load('synthetic', 'dev', clustered), data.load('synthetic', 'test', clustered)
  learner = gbt_pairs.fit(*dev, 'global', FAST)
  run = learner.rank(*test, 'global', k=20, weight=0.5)
  assert set(run) == set(test[0].topic_numbers) and all(len(r) == 20 for r in run.values())
  other = data.load('synthetic', 'test', tiny_synthetic)  # no descvis: the model needs CM, HOG
  with pytest.raises(InputError, match='descriptors'):
    learner.predict(*other, 'pool')


def test_evaluate_trains_on_dev_and_tunes_on_out_of_fold_predictions(clustered, tmp_path,
                                                                      monkeypatch):
  monkeypatch.setattr(gbt_pairs, 'DEFAULT', FAST)
  out = result_sets.run_evaluation(
      dataset='synthetic', split='test', methods=['gbt-pairs', 'msd', 'dpp'],
      protocols_=['pool'], params=evaluation.MethodParams(), data_dir=clustered,
      tune_methods=True, out_dir=str(tmp_path / 'out'), log=lambda *_: None)
  result = out['results']['gbt-pairs']
  weights = evaluation.LEARNED_GRIDS['gbt-pairs']['gbt_weight']
  assert [t['setting']['gbt_weight'] for t in result['tuning']] == weights
  assert result['params']['gbt_weight'] in weights
  split = data.load_split('synthetic', clustered, 'test')
  for name in ('gbt-pairs', 'msd', 'dpp'):
    runfile.validate_run(out['results'][name]['run_file'], split.topic_numbers,
                         result_sets.allowed_ids(split, 'pool'))
  with pytest.raises(InputError, match='training topics'):
    evaluation.rank('gbt-pairs', *data.load('synthetic', 'test', clustered), 'pool',
                    evaluation.MethodParams())
