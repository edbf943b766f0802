"""Tests of colt_jax/reproduction/diagnostics/relevance_signals.py: the context features, the models fitted on
training pools alone, and the table."""
import numpy as np
import pytest

from colt_jax.reproduction.diagnostics import relevance_signals

PARTS = (('text', 3), ('CM', 2))


def test_context_features_average_each_photos_nearest_neighbours_r():
  # Photos 0-2 share a text direction, 3-5 another; the descriptors split them 0,3 | rest.
  text = np.array([[1, 0, 0], [1, .1, 0], [1, 0, .1], [0, 1, 0], [0, 1, .1], [.1, 1, 0]])
  desc = np.array([[1, 0], [0, 1], [0, 1], [1, .1], [0, 1], [0, 1]])
  r = np.array([0.9, 0.8, 0.7, 0.1, 0.2, 0.3])
  c = relevance_signals.context_features(np.concatenate([text, desc], 1), r, PARTS)
  assert c.shape == (6, 10)
  np.testing.assert_allclose(c[:, 0], r)
  # The 3 nearest by text of photo 0 are 1, 2 and one of the other group; its 10 nearest:
  # all 5 others (the pool has 6).
  np.testing.assert_allclose(c[0, 2], np.mean(r[1:]))
  assert c[0, 3] == pytest.approx(0.75, abs=0.02)  # weighted mean: its own group's r
  assert c[3, 3] == pytest.approx(0.25, abs=0.02)
  assert c[0, 6] == pytest.approx(0.1, abs=0.02)  # by the descriptors: photo 3's r
  np.testing.assert_allclose(c[:, 7], r.mean())
  np.testing.assert_allclose(c[:, 8], r.std())
  np.testing.assert_allclose(c[:, 9], (r - r.mean()) / (r.std() + 1e-6))
  # A text-only pool: the context of one similarity.
  assert relevance_signals.context_features(text, r, (('text', 3),)).shape == (6, 7)


def _pools(rng, topics, n=40, signal=True, first=100):
  """Pools whose relevance follows descriptor dim 0 and, given it, metadata column 0."""
  out = []
  for t in range(topics):
    feats = rng.normal(size=(n, 5))
    meta = rng.normal(size=(n, 2))
    y = ((feats[:, 3] + meta[:, 0] > 0) if signal else np.ones(n, bool)).astype(np.int64)
    y[0] = -1  # no rGT: left out
    out.append((first + t, rng.normal(size=5), feats.astype(np.float32), meta, y))
  return out


def test_fold_scores_fit_on_training_pools_and_score_held_out_topics():
  rng = np.random.default_rng(0)
  train, held = _pools(rng, 12), _pools(rng, 4)
  held.append((999, np.ones(5), np.ones((6, 5), np.float32), np.zeros((6, 2)),
               np.array([1, 1, 1, 1, 1, -1])))  # one class only: not scored
  scores = relevance_signals.fold_scores(train, held, PARTS)
  assert set(scores) == {'100', '101', '102', '103'}
  for s in scores.values():
    assert list(s) == list(relevance_signals.CONDITIONS)
    assert all(0.0 <= v <= 1.0 for v in s.values())
  mean = lambda c: np.mean([s[c] for s in scores.values()])
  # The metadata carries half the signal: the model given it does better.
  assert mean('model + photo metadata') > mean('model') + 0.05
  # Training pools alone: held-out labels never reach a model (permuting them leaves the
  # models' predictions, hence the AUC of the reversed labels, at 1 - AUC).
  flipped = [(t, q, f, m, np.where(y >= 0, 1 - y, y)) for t, q, f, m, y in held[:4]]
  again = relevance_signals.fold_scores(train, flipped, PARTS)
  for t in scores:
    for c in relevance_signals.CONDITIONS:
      assert again[t][c] == pytest.approx(1 - scores[t][c]), c


def test_the_context_model_learns_from_out_of_fold_r(monkeypatch):
  """The stacked model's training rows carry r of models that never saw their topic; the
  held-out rows, r of the model of every training topic."""
  rng = np.random.default_rng(2)
  train, held = _pools(rng, 9), _pools(rng, 2, first=200)
  fitted = {}  # id of a fitted model -> its topics
  predicted = []  # (topic, the model's topics)
  topic_of = {id(p[2]): p[0] for p in train + held}
  real_fit = relevance_signals._fit
  real_predict = relevance_signals.relevance_lib.RelevanceModel.predict

  def fit(pools, parts, config):
    model = real_fit(pools, parts, config)
    fitted[id(model)] = {p[0] for p in pools}
    return model

  def predict(model, query, features):
    predicted.append((topic_of[id(features)], fitted[id(model)]))
    return real_predict(model, query, features)

  stacked = []
  real_stacked = relevance_signals._stacked
  monkeypatch.setattr(relevance_signals, '_fit', fit)
  monkeypatch.setattr(relevance_signals.relevance_lib.RelevanceModel, 'predict', predict)
  monkeypatch.setattr(relevance_signals, '_stacked',
                      lambda pool, r, parts: stacked.append((pool[0], r)) or real_stacked(
                          pool, r, parts))
  relevance_signals.fold_scores(train, held, PARTS)
  train_topics = {p[0] for p in train}
  inner = [(t, m) for t, m in predicted if t in train_topics]
  assert sorted(t for t, _ in inner) == sorted(train_topics)  # each once
  assert all(t not in m and len(m) >= 5 for t, m in inner)  # by a model that never saw it
  assert all(m == train_topics for t, m in predicted if t not in train_topics)
  assert [t for t, _ in stacked] == [p[0] for p in train]  # the stacked training rows


def test_context_features_name_each_photos_nearest_by_each_similarity():
  """14 photos along an arc of text directions (the nearest of photo 0 are 1, 2, 3, ...) and
  of descriptor directions in a shuffled order; a pool of one photo has no neighbours."""
  n = 14
  theta = 0.1 * np.arange(n) + 0.001 * np.arange(n) ** 2
  perm = np.random.default_rng(0).permutation(n)
  phi = 0.1 * perm + 0.001 * perm ** 2
  x = np.concatenate([np.stack([np.cos(theta), np.sin(theta), np.zeros(n)], 1),
                      np.stack([np.cos(phi), np.sin(phi)], 1)], 1)
  r = np.random.default_rng(1).uniform(size=n)
  c = relevance_signals.context_features(x, r, PARTS)
  by_desc = np.argsort(np.abs(phi - phi[0]), kind='stable')[1:]
  np.testing.assert_allclose(c[0, 1], r[1:4].mean())
  np.testing.assert_allclose(c[0, 2], r[1:11].mean())
  np.testing.assert_allclose(c[0, relevance_signals.TEXT_NEAREST_10], r[1:11].mean())
  np.testing.assert_allclose(c[0, 4], r[by_desc[:3]].mean())
  np.testing.assert_allclose(c[0, 5], r[by_desc[:10]].mean())
  np.testing.assert_allclose(c[n - 1, 1], r[[n - 2, n - 3, n - 4]].mean())
  one = relevance_signals.context_features(x[:1], r[:1], PARTS)
  assert one.shape == (1, 10) and np.isnan(one[0, 1:7]).all() and one[0, 0] == r[0]


def test_summary_pairs_every_condition_with_the_model():
  topics = {str(t): {'model': 0.7 + 0.01 * t, 'model + pool context': 0.68 + 0.01 * t,
                     'model + photo metadata': 0.72 + 0.01 * t + 0.001 * (t % 2),
                     "neighbours' r alone": 0.6} for t in range(10)}
  result = {'command': 'python experiments/diagnose.py --what signals --dataset div400',
            'variant': 'colt-pairs relevance', 'views': 'text+descvis10x1+meta0.5',
            'num_images': 200, 'folds': [{}] * 5, 'of_folds': 5, 'topics': topics}
  text = '\n'.join(relevance_signals.summary_lines(result))
  assert 'diagnose.py --what signals --dataset div400` over 5 of 5 folds (10 held-out' in text
  assert 'N = 200' in text
  assert '| model | 0.7450 | - |' in text
  assert '| model + pool context | 0.7250 | -0.0200 [-0.0200, -0.0200], W/T/L 0/0/10 |' in text
  line = next(l for l in text.splitlines() if l.startswith('| model + photo metadata'))
  assert '+0.02' in line and 'W/T/L 10/0/0' in line


def test_topic_pools_hold_phis_candidates_in_its_token_order(tiny_synthetic):
  """Features, metadata and labels of one photo share a row: the order phi's tokens have
  (`token_sequences`: by similarity to the query), not the candidates' own."""
  from colt_jax.data import splits as data  # pylint: disable=g-import-not-at-top
  from colt_jax.baselines import gbt_pairs  # pylint: disable=g-import-not-at-top
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  pools = relevance_signals.topic_pools(split, store, 30)
  assert [p[0] for p in pools] == split.topic_numbers
  meta = gbt_pairs.photo_metadata(split)
  rank = gbt_pairs.PHOTO_FEATURES.index('log_flickr_rank') - 4  # past the cosine columns
  moved = 0
  for topic, query, feats, metadata, labels in pools:
    assert len(feats) == len(metadata) == len(labels) == 30
    sims = feats @ query
    assert np.all(np.diff(sims) <= 1e-6)  # phi's order: by similarity
    # Each row's photo: found by its features in the store, its rank and rGT read back.
    ids = [store.photo_ids[int(np.argmin(np.abs(store.photos - f).sum(1)))] for f in feats]
    np.testing.assert_allclose(metadata[:, rank], np.log([meta[str(p)].rank for p in ids]),
                               rtol=1e-6)
    rel = split.ground_truth[topic].relevance
    np.testing.assert_array_equal(labels, [rel.get(str(p), 0) for p in ids])
    moved += [meta[str(p)].rank for p in ids] != sorted(meta[str(p)].rank for p in ids)
  assert moved  # phi's order is not the Flickr order: a row taken in that order would fail
