"""Tests for colt_jax.model.augment: deterministic helpers, then statistics of augment_sequence.

Exact comparisons here are of labels, masks and targets (integers, booleans) and of tokens
that the augmentations move, copy, zero or keep (gathers and selects: no arithmetic), so they
hold on every machine; mixed tokens (Eqs. 7 and 8) are compared with tolerances."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from colt_jax.model import augment
from colt_jax.inputs import labels as labels_lib
from colt_jax.pairs import pair_labels
import label_rule  # pylint: disable=g-bad-import-order

V = 3
IRR = V  # irrelevant_id
QRY = V + 1  # query_id
IDS = dict(irrelevant_id=IRR, query_id=QRY)


def _small():
  """T = 7: query, relevant(0), irrelevant, relevant(1), relevant(0), 2 padding slots."""
  labels = np.array([QRY, 0, IRR, 1, 0, -1, -1], np.int32)
  mask = np.array([1, 1, 1, 1, 1, 0, 0], bool)
  tokens = np.zeros((7, 3), np.float32)
  tokens[:5, 0] = np.arange(5) + 1.0  # which original token
  tokens[:5, 1] = labels[:5]
  tokens[:5, 2] = 10.0 * (np.arange(5) + 1.0)
  return tokens, labels, mask


def _b(*xs):
  return np.array(xs, bool)


def test_delete_tokens_exact():
  tokens, labels, mask = _small()
  # Position 0 (query) and position 5 (padding) are ignored even though flagged.
  t, l, m = augment.delete_tokens(tokens, labels, mask, _b(1, 0, 1, 0, 1, 1, 0))
  np.testing.assert_array_equal(m, _b(1, 1, 1, 0, 0, 0, 0))
  np.testing.assert_array_equal(l, [QRY, 0, 1, -1, -1, -1, -1])
  np.testing.assert_array_equal(t[:3], tokens[[0, 1, 3]])
  np.testing.assert_array_equal(t[3:], 0.0)


def test_delete_tokens_nothing_and_everything():
  tokens, labels, mask = _small()
  t, l, m = augment.delete_tokens(tokens, labels, mask, np.zeros(7, bool))
  np.testing.assert_array_equal(t, tokens)
  np.testing.assert_array_equal(l, labels)
  np.testing.assert_array_equal(m, mask)
  t, l, m = augment.delete_tokens(tokens, labels, mask, np.ones(7, bool), pad_label=9)
  np.testing.assert_array_equal(m, _b(1, 0, 0, 0, 0, 0, 0))
  np.testing.assert_array_equal(l, [QRY, 9, 9, 9, 9, 9, 9])
  np.testing.assert_array_equal(t[0], tokens[0])


def test_copy_tokens_exact():
  tokens, labels, mask = _small()
  # Query (position 0) and padding (position 5) copies are ignored.
  t, l, m = augment.copy_tokens(tokens, labels, mask, _b(1, 1, 0, 1, 0, 1, 0))
  order = [0, 1, 1, 2, 3, 3, 4]
  np.testing.assert_array_equal(m, np.ones(7, bool))
  np.testing.assert_array_equal(l, labels[order])
  np.testing.assert_array_equal(t, tokens[order])


def test_copy_tokens_truncates():
  tokens, labels, mask = _small()
  t, l, m = augment.copy_tokens(tokens, labels, mask, np.ones(7, bool))
  order = [0, 1, 1, 2, 2, 3, 3]  # token 4 and the second copy of 3... pushed past the end
  np.testing.assert_array_equal(m, np.ones(7, bool))
  np.testing.assert_array_equal(l, labels[order])
  np.testing.assert_array_equal(t, tokens[order])


def test_copy_tokens_fills_padding():
  tokens, labels, mask = _small()
  t, l, m = augment.copy_tokens(tokens, labels, mask, _b(0, 0, 0, 0, 1, 0, 0))
  order = [0, 1, 2, 3, 4, 4]
  np.testing.assert_array_equal(m, _b(1, 1, 1, 1, 1, 1, 0))
  np.testing.assert_array_equal(l[:6], labels[order])
  np.testing.assert_array_equal(t[:6], tokens[order])
  assert l[6] == -1 and np.all(t[6] == 0)


def test_perturb_query_exact():
  tokens, labels, mask = _small()
  for lam in (0.3, 0.7):  # max/min: the query always keeps the larger weight, 0.7
    t = augment.perturb_query(tokens, labels, mask, True, 3, lam, **IDS)
    np.testing.assert_allclose(t[0], 0.7 * tokens[0] + 0.3 * tokens[3], rtol=1e-6)
    np.testing.assert_array_equal(t[1:], tokens[1:])
  # No-ops: not applied; source irrelevant, padding, or the query itself.
  for apply, source in ((False, 3), (True, 2), (True, 5), (True, 0)):
    t = augment.perturb_query(tokens, labels, mask, apply, source, 0.3, **IDS)
    np.testing.assert_array_equal(t, tokens)


def test_perturb_images_exact():
  tokens, labels, mask = _small()
  lam = np.array([0.5, 0.1, 0.2, 0.6, 0.9, 0.5, 0.5], np.float32)
  t = augment.perturb_images(tokens, labels, mask, np.ones(7, bool), lam, **IDS)
  expected = tokens.copy()
  for i in (1, 3, 4):  # relevant image tokens only
    hi = max(lam[i], 1 - lam[i])
    expected[i] = hi * tokens[i] + (1 - hi) * tokens[0]
  np.testing.assert_allclose(t, expected, rtol=1e-6)
  t = augment.perturb_images(tokens, labels, mask, _b(0, 0, 1, 0, 1, 1, 0), lam, **IDS)
  expected = tokens.copy()
  expected[4] = 0.9 * tokens[4] + 0.1 * tokens[0]
  np.testing.assert_allclose(t, expected, rtol=1e-6)


# ------------------------------------------------------------------------ augment_sequence


def _long(num_images=20, length=41, d=None, seed=0):
  """Query + images with one-hot identity features; labels mix categories and irrelevant."""
  d = d or length + 1
  rng = np.random.default_rng(seed)
  labels = np.full((length,), -1, np.int32)
  labels[0] = QRY
  labels[1:num_images + 1] = rng.integers(0, V + 1, size=num_images)  # V == IRR
  mask = np.arange(length) < num_images + 1
  tokens = np.zeros((length, d), np.float32)
  tokens[np.arange(num_images + 1), np.arange(num_images + 1)] = 1.0
  tokens[mask, -1] = labels[mask]  # the label travels with the token
  return tokens, labels, mask


N_RUN = 2000  # one batch size (and one compilation) for every statistical test


@jax.jit
def _batched(rng, tokens, labels, mask, probs):
  p_q, p_v, p_d, p_c = probs  # traced: one compilation serves every setting
  return augment.augment_batch(rng, tokens, labels, mask, p_q=p_q, p_v=p_v, p_d=p_d, p_c=p_c,
                               **IDS)


def _run(seq, n, seed=0, **p):
  assert n <= N_RUN
  cfg = augment.AugmentConfig(**p)
  tile = lambda x: np.broadcast_to(x, (N_RUN,) + x.shape)
  probs = np.array([cfg.p_q, cfg.p_v, cfg.p_d, cfg.p_c], np.float32)
  out = _batched(jax.random.PRNGKey(seed), *(tile(x) for x in seq), probs)
  return tuple(np.asarray(x)[:n] for x in out)


def test_config_defaults_are_the_papers():
  cfg = augment.AugmentConfig()
  assert cfg.as_kwargs() == dict(p_q=0.5, p_v=0.2, p_d=0.2, p_c=0.2)
  with pytest.raises(dataclasses.FrozenInstanceError):
    cfg.p_q = 0.1  # pytype: disable=attribute-error


def test_all_zero_probabilities_is_identity():
  seq = _long()
  t, l, m = _run(seq, 8, p_q=0., p_v=0., p_d=0., p_c=0.)
  for i in range(8):
    np.testing.assert_array_equal(t[i], seq[0])
    np.testing.assert_array_equal(l[i], seq[1])
    np.testing.assert_array_equal(m[i], seq[2])


def test_shapes_query_position_and_label_alignment():
  seq = _long()
  n = 300
  t, l, m = _run(seq, n, seed=1, p_q=0., p_v=0., p_d=0.3, p_c=0.3)
  assert t.shape == (n,) + seq[0].shape and l.shape == (n, 41) and m.shape == (n, 41)
  np.testing.assert_array_equal(t[:, 0], np.broadcast_to(seq[0][0], (n, seq[0].shape[1])))
  assert np.all(l[:, 0] == QRY) and np.all(m[:, 0])
  for i in range(n):
    valid = m[i]
    count = valid.sum()
    assert np.all(valid[:count]) and not np.any(valid[count:])  # contiguous prefix
    np.testing.assert_array_equal(t[i, valid, -1], l[i, valid])  # labels follow tokens
    origin = np.argmax(t[i, valid, :-1], axis=1)
    assert np.all(np.diff(origin) >= 0)  # order preserved
    assert np.bincount(origin).max() <= 2  # at most one copy each
    assert np.all(t[i, ~valid] == 0) and np.all(l[i, ~valid] == -1)


def test_deletion_rate():
  seq = _long(num_images=40)
  t, l, m = _run(seq, 2000, seed=2, p_q=0., p_v=0., p_d=0.2, p_c=0.)
  rate = 1.0 - (m.sum(axis=1) - 1).mean() / 40
  assert abs(rate - 0.2) < 0.01


def test_copy_rate():
  seq = _long(num_images=20)  # room for every copy
  t, l, m = _run(seq, 2000, seed=3, p_q=0., p_v=0., p_d=0., p_c=0.3)
  rate = (m.sum(axis=1) - 21).mean() / 20
  assert abs(rate - 0.3) < 0.015


def test_query_unchanged_when_p_q_zero():
  seq = _long()
  t, l, m = _run(seq, 200, seed=4, p_q=0., p_v=1., p_d=0.2, p_c=0.2)
  np.testing.assert_array_equal(t[:, 0], np.broadcast_to(seq[0][0], t[:, 0].shape))


def test_query_perturbation_rate_and_form():
  seq = _long()
  tokens, labels, _ = seq
  relevant_dims = set(np.flatnonzero((labels >= 0) & (labels < V)).tolist())
  t, _, _ = _run(seq, 2000, seed=5, p_q=0.5, p_v=0., p_d=0., p_c=0.)
  q = t[:, 0, :-1]
  changed = q[:, 0] < 1.0
  assert abs(changed.mean() - 0.5) < 0.04
  weights = q[changed, 0]
  assert np.all(weights >= 0.5) and abs(weights.mean() - 0.75) < 0.01  # max(lam, 1-lam)
  np.testing.assert_allclose(q[changed].sum(axis=1), 1.0, rtol=1e-5)
  for row in q[changed]:
    others = set(np.flatnonzero(row[1:]) + 1)
    assert len(others) == 1 and others <= relevant_dims


def test_query_perturbation_noop_without_relevant_images():
  tokens, labels, mask = _long()
  labels = np.where((labels >= 0) & (labels < V), IRR, labels)
  t, _, _ = _run((tokens, labels, mask), 50, seed=6, p_q=1., p_v=1., p_d=0., p_c=0.)
  np.testing.assert_array_equal(t, np.broadcast_to(tokens, t.shape))


def test_image_perturbation_only_relevant_and_rate():
  seq = _long()
  tokens, labels, mask = seq
  t, l, m = _run(seq, 1000, seed=7, p_q=0., p_v=0.2, p_d=0., p_c=0.)
  changed = np.any(t != tokens[None], axis=2)
  relevant = (labels >= 0) & (labels < V) & mask
  relevant[0] = False
  assert not np.any(changed[:, ~relevant])
  assert abs(changed[:, relevant].mean() - 0.2) < 0.02
  # Changed relevant tokens keep weight max(lam, 1-lam) >= 0.5 on themselves.
  idx = np.flatnonzero(relevant)
  own = t[:, idx, idx]
  assert np.all(own[changed[:, idx]] >= 0.5 - 1e-6)


def test_jit_compiles_once():
  traces = []

  def fn(rng, tokens, labels, mask):
    traces.append(1)
    return augment.augment_sequence(rng, tokens, labels, mask, **IDS)

  jitted = jax.jit(fn)
  tokens, labels, mask = _long()
  for seed in range(5):
    out = jitted(jax.random.PRNGKey(seed), tokens, labels, mask)
    jax.block_until_ready(out)
  other_labels = labels.copy()
  other_labels[3] = IRR
  jitted(jax.random.PRNGKey(9), tokens + 1.0, other_labels, mask)
  assert len(traces) == 1


# ----------------------------------------------- targets after augmentation (Sec. 3.4, issue 12)


def test_local_targets_are_recomputed_after_deletion():
  """Group labels [q, 0, 1, irr, 1, 2], token 1 deleted: the rule gives [q, 0, irr, 0, 1]."""
  groups = 4
  q, irr = groups + 1, groups
  cats = np.array([QRY, 2, 0, IRR, 0, 1], np.int32)
  mask = np.ones(6, bool)
  tokens = np.eye(6, dtype=np.float32)
  delete = _b(0, 1, 0, 0, 0, 0)
  before = labels_lib.local_groups(cats, V, groups)
  np.testing.assert_array_equal(before, [q, 0, 1, irr, 1, 2])
  _, moved, _ = augment.delete_tokens(tokens, cats, mask, delete)
  np.testing.assert_array_equal(labels_lib.scheme_targets(moved, V, 'local', groups),
                                [q, 0, irr, 0, 1, -1])
  # Moving precomputed groups instead (the old pipeline) leaves them stale.
  _, stale, _ = augment.delete_tokens(tokens, before, mask, delete)
  np.testing.assert_array_equal(stale, [q, 1, irr, 1, 2, -1])


RULE_V, RULE_T = 6, 12
RULE_IDS = dict(irrelevant_id=RULE_V, query_id=RULE_V + 1)
SCHEMES = (('global', 0), ('local', 1), ('local', 2), ('local', 3), ('local', 8))


def _op(name, key, tokens, labels, mask):
  """One augmentation operation with random draws, on category-id labels."""
  k = jax.random.split(key, 2)
  length = tokens.shape[0]
  if name == 'query':
    relevant = augment.relevant_image_mask(labels, mask, **RULE_IDS)
    source = jax.numpy.argmax(jax.numpy.where(relevant, jax.random.gumbel(k[0], (length,)),
                                              -jax.numpy.inf))
    lam = jax.random.uniform(k[1], ())
    return augment.perturb_query(tokens, labels, mask, True, source, lam, **RULE_IDS), labels, mask
  if name == 'delete':
    return augment.delete_tokens(tokens, labels, mask, jax.random.bernoulli(k[0], 0.3, (length,)))
  if name == 'copy':
    return augment.copy_tokens(tokens, labels, mask, jax.random.bernoulli(k[0], 0.3, (length,)))
  if name == 'images':
    perturb = jax.random.bernoulli(k[0], 0.5, (length,))
    lam = jax.random.uniform(k[1], (length,))
    return augment.perturb_images(tokens, labels, mask, perturb, lam, **RULE_IDS), labels, mask
  assert name == 'full'
  return augment.augment_sequence(key, tokens, labels, mask, p_q=0.5, p_v=0.5, p_d=0.3,
                                  p_c=0.3, **RULE_IDS)


@pytest.mark.parametrize('op', ['query', 'delete', 'copy', 'images', 'full'])
def test_targets_after_augmentation_follow_the_rule(op):
  """For every label scheme, targets computed after `op` are the rule applied to the category
  ids of the augmented sequence (read off the tokens' origins, not off the labels)."""
  tokens, labels, mask = label_rule.random_sequences(np.random.default_rng(11), 256, RULE_T,
                                                     RULE_V)

  @jax.jit
  def run(rng, tokens, labels, mask):
    def one(key, t, l, m):
      t, l, m = _op(op, key, t, l, m)
      return t, m, tuple(labels_lib.scheme_targets(l, RULE_V, s, g) for s, g in SCHEMES)
    return jax.vmap(one)(jax.random.split(rng, tokens.shape[0]), tokens, labels, mask)

  t, m, got = run(jax.random.PRNGKey(0), tokens, labels, mask)
  cats = label_rule.labels_by_origin(t, m, labels)
  if op in ('delete', 'copy', 'full'):
    assert np.mean(np.any(cats != labels, axis=1)) > 0.5  # tokens did move
  else:
    assert np.mean(np.any(np.asarray(t) != tokens, axis=(1, 2))) > 0.3  # features did change
  for (scheme, groups), targets in zip(SCHEMES, got):
    np.testing.assert_array_equal(np.asarray(targets),
                                  label_rule.targets(cats, RULE_V, scheme, groups),
                                  err_msg=f'{op}: {scheme} {groups}')


# --------------------------------------- colt-pairs targets after augmentation (Sec. 3.4)


def test_head_targets_follow_deletion_and_copy_by_hand():
  """[q, a(c0), irr, b(c1), c(c0)]: deleting a, then copying b, gives [q, irr, b, b', c]; the
  copy b' is relevant and in b's cluster, a is in no pair, c pairs with nobody of its cluster."""
  from colt_jax.pairs import heads_step  # pylint: disable=g-import-not-at-top
  tokens, labels, mask = _small()
  t, l, m = augment.delete_tokens(tokens, labels, mask, _b(0, 1, 0, 0, 0, 0, 0))
  t, l, m = augment.copy_tokens(t, l, m, _b(0, 0, 1, 0, 0, 0, 0))
  np.testing.assert_array_equal(np.asarray(t)[:, 0], [1, 3, 4, 4, 5, 0, 0])  # origins
  relevant, weights = pair_labels.relevance_targets(l, m, V)
  np.testing.assert_array_equal(relevant, [0, 0, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(weights, [0, 1, 1, 1, 1, 0, 0])
  same, pairs = (np.asarray(x) for x in pair_labels.pair_targets(l, m, V))
  assert same[2, 3] and same[3, 2]  # b and its copy: one cluster
  assert pairs[2, 4] and not same[2, 4]  # b (c1) and c (c0): two clusters
  assert pairs.sum() == 6 and same.sum() == 2
  # The train step's helper: the same targets from the augmented sequence (no augmentation
  # here: the sequence given is the augmented one).
  _, _, targets = heads_step.augment_example_targets(jax.random.PRNGKey(0), t, l, m,
                                                   num_categories=V)
  np.testing.assert_array_equal(targets['same'], same)
  np.testing.assert_array_equal(targets['pair_weights'], pairs)
  np.testing.assert_array_equal(targets['relevant'], relevant)


def test_head_targets_after_augmentation_follow_the_tokens_origins():
  """Under the full jitted augmentation (deletion and copy move tokens), relevance and pair
  targets are the NumPy rule applied to the category ids of each token's ORIGIN: a copy has
  its source's relevance and is in its source's cluster, a deleted token is in no pair."""
  from colt_jax.pairs import heads_step  # pylint: disable=g-import-not-at-top
  tokens, labels, mask = label_rule.random_sequences(np.random.default_rng(4), 128, RULE_T,
                                                     RULE_V)
  aug = augment.AugmentConfig(p_q=0.5, p_v=0.5, p_d=0.3, p_c=0.3)
  fn = jax.jit(jax.vmap(lambda k, t, l, m: heads_step.augment_example_targets(
      k, t, l, m, num_categories=RULE_V, label_scheme='local', num_groups=3,
      augment_config=aug)))
  t, m, targets = fn(jax.random.split(jax.random.PRNGKey(2), 128), tokens, labels, mask)
  t, m = np.asarray(t), np.asarray(m)
  cats = label_rule.labels_by_origin(t, m, labels)
  assert np.mean(np.any(cats != labels, axis=1)) > 0.5  # tokens did move
  want_rel = label_rule.relevance_targets(cats, m, RULE_V)
  want_pair = label_rule.pair_targets(cats, m, RULE_V)
  np.testing.assert_array_equal(targets['relevant'], want_rel[0])
  np.testing.assert_array_equal(targets['relevance_weights'], want_rel[1])
  np.testing.assert_array_equal(targets['same'], want_pair[0])
  np.testing.assert_array_equal(targets['pair_weights'], want_pair[1])
  np.testing.assert_array_equal(targets['class'], label_rule.targets(cats, RULE_V, 'local', 3))
  # Copies: two slots with one origin are a positive pair whenever the origin is relevant.
  origin = np.argmax(t, -1)
  copies = 0
  for b in range(len(t)):
    valid = np.flatnonzero(m[b])[1:]
    for i in valid:
      for j in valid:
        if i != j and origin[b, i] == origin[b, j]:
          copies += 1
          relevant = 0 <= labels[b, origin[b, i]] < RULE_V
          assert bool(targets['same'][b, i, j]) == relevant
    # Deleted origins appear nowhere.
    assert set(origin[b, valid]) <= set(np.flatnonzero(mask[b])[1:])
  assert copies > 0
