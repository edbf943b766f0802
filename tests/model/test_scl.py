"""Tests for colt_jax.model.scl: Eq. 2 against a loop transcription, Eq. 3 against image-by-image EMA."""
from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax.model import scl

TAU = 0.2


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _random_batch(seed, batch=6, m=7, c=5, d=8):
  """Examples with varying numbers of relevant / irrelevant / padding images."""
  rng = np.random.default_rng(seed)
  query = rng.normal(size=(batch, d)).astype(np.float32)
  images = rng.normal(size=(batch, m, d)).astype(np.float32)
  bank = _unit(rng.normal(size=(c, d))).astype(np.float32)
  relevant = np.zeros((batch, m), bool)
  valid = np.zeros((batch, m), bool)
  categories = np.full((batch, m), -1, np.int32)
  layouts = [(3, 2), (1, 0), (0, 4), (m, 0), (2, 5), (0, 0)]  # (num relevant, num irrelevant)
  for b in range(batch):
    n_rel, n_irr = layouts[b % len(layouts)]
    kinds = np.array([1] * n_rel + [0] * n_irr + [-1] * (m - n_rel - n_irr))
    rng.shuffle(kinds)  # padding may be interleaved; the loss only looks at the masks
    valid[b] = kinds >= 0
    relevant[b] = kinds == 1
    categories[b] = np.where(kinds == 1, rng.integers(0, c, size=m), -1)
  return query, images, relevant, categories, valid, bank


def _reference_loss(query, images, relevant, categories, valid, bank, tau, use_pair2, use_pair4):
  """Eq. 2 transcribed with explicit loops (cosine similarities), averaged over examples."""
  losses = []
  for b in range(query.shape[0]):
    q = _unit(query[b].astype(np.float64))
    t1 = t2 = t3 = t4 = 0.0
    n_rel = 0
    for i in range(images.shape[1]):
      if not valid[b, i]:
        continue
      h = _unit(images[b, i].astype(np.float64))
      if relevant[b, i]:
        n_rel += 1
        t1 += math.exp(q @ h / tau)
        if use_pair2:
          t2 += math.exp(_unit(bank[categories[b, i]].astype(np.float64)) @ h / tau)
      else:
        t3 += math.exp(q @ h / tau)
        if use_pair4:
          for j in range(bank.shape[0]):
            t4 += math.exp(_unit(bank[j].astype(np.float64)) @ h / tau)
    if n_rel == 0:
      continue
    num = t1 + t2
    den = t3 + t4 + t1 + t2
    losses.append(-math.log(num / den))
  return float(np.mean(losses)), len(losses)


@pytest.mark.parametrize('use_pair2,use_pair4', list(itertools.product([True, False], repeat=2)))
def test_scl_loss_matches_loop_transcription(use_pair2, use_pair4):
  for seed in range(3):
    args = _random_batch(seed)
    expected, count = _reference_loss(*args, TAU, use_pair2, use_pair4)
    loss, aux = scl.scl_loss(*args, tau=TAU, use_pair2=use_pair2, use_pair4=use_pair4)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5, atol=1e-5)
    assert int(aux['num_examples']) == count
    # Examples with no relevant image are masked out (booleans: exact).
    np.testing.assert_array_equal(np.asarray(aux['has_relevant']), (args[2] & args[4]).any(axis=1))


def test_scl_loss_per_example_zero_without_relevant():
  args = _random_batch(0)
  _, aux = scl.scl_loss(*args, tau=TAU)
  has_rel = np.asarray(aux['has_relevant'])
  assert not has_rel.all() and has_rel.any()
  assert np.all(np.asarray(aux['per_example'])[~has_rel] == 0.0)
  assert np.all(np.asarray(aux['per_example'])[has_rel] >= 0.0)  # 0 when nothing is irrelevant


def test_scl_loss_no_relevant_anywhere_is_zero_and_finite():
  query, images, relevant, categories, valid, bank = _random_batch(1)
  relevant = np.zeros_like(relevant)
  grad_fn = jax.grad(lambda im: scl.scl_loss(query, im, relevant, categories, valid, bank, TAU)[0])
  loss, _ = scl.scl_loss(query, images, relevant, categories, valid, bank, TAU)
  assert float(loss) == 0.0
  assert np.all(np.isfinite(np.asarray(grad_fn(jnp.asarray(images)))))


def test_scl_loss_gradient_finite_and_bank_constant():
  query, images, relevant, categories, valid, bank = _random_batch(2)

  def f(q, im, bk):
    return scl.scl_loss(q, im, relevant, categories, valid, bk, TAU)[0]

  gq, gim, gbank = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(query, images, bank)
  for g in (gq, gim):
    assert np.all(np.isfinite(np.asarray(g)))
    assert np.abs(np.asarray(g)).sum() > 0
  np.testing.assert_array_equal(np.asarray(gbank), 0.0)  # stop_gradient: exact zeros
  # Padding images receive no gradient.
  assert np.all(np.asarray(gim)[~valid] == 0.0)


def test_scl_loss_large_similarities_stable():
  query, images, relevant, categories, valid, bank = _random_batch(3)
  loss, _ = scl.scl_loss(query, images, relevant, categories, valid, bank, tau=1e-3)
  assert np.isfinite(float(loss))


def test_init_bank_normalises():
  feats = np.random.default_rng(0).normal(size=(4, 6)) * 3
  bank = np.asarray(scl.init_bank(feats))
  np.testing.assert_allclose(np.linalg.norm(bank, axis=1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(bank, _unit(feats), rtol=1e-5, atol=1e-6)


def _reference_update(bank, images, categories, mask, alpha):
  """Eq. 3 applied image by image, in flattened order; then touched prototypes normalised."""
  bank = bank.astype(np.float64).copy()
  touched = set()
  d = bank.shape[1]
  for h, c, m in zip(images.reshape(-1, d), categories.reshape(-1), mask.reshape(-1)):
    if not m or not 0 <= c < bank.shape[0]:
      continue
    bank[c] = alpha * bank[c] + (1 - alpha) * _unit(h.astype(np.float64))
    touched.add(int(c))
  for c in touched:
    bank[c] = _unit(bank[c])
  return bank


@pytest.mark.parametrize('alpha', [0.01, 0.5, 0.9, 0.0, 1.0])
def test_update_bank_matches_sequential_ema(alpha):
  rng = np.random.default_rng(7)
  c, d = 6, 5
  bank = _unit(rng.normal(size=(c, d))).astype(np.float32)
  images = rng.normal(size=(4, 9, d)).astype(np.float32)
  # Few categories, so several images per category; category 5 never appears; -1 ignored.
  categories = rng.integers(-1, 4, size=(4, 9)).astype(np.int32)
  mask = rng.random(size=(4, 9)) < 0.7
  expected = _reference_update(bank, images, categories, mask, alpha)
  got = np.asarray(jax.jit(scl.update_bank)(bank, images, categories, mask, alpha))
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  # Untouched prototypes are bit-for-bit unchanged (selected, not recomputed: exact).
  np.testing.assert_array_equal(got[4:], bank[4:])


def test_update_bank_order_matters_and_is_row_major():
  bank = np.eye(3, dtype=np.float32)
  images = np.array([[[0., 1., 0.], [0., 0., 1.]]], np.float32)
  cats = np.array([[0, 0]], np.int32)
  mask = np.ones((1, 2), bool)
  got = np.asarray(scl.update_bank(bank, images, cats, mask, 0.5, normalise=False))
  # ((e0 * .5 + .5 e1) * .5 + .5 e2)
  np.testing.assert_allclose(got[0], [0.25, 0.25, 0.5], rtol=1e-6)
  got_rev = np.asarray(scl.update_bank(bank, images[:, ::-1], cats, mask, 0.5, normalise=False))
  np.testing.assert_allclose(got_rev[0], [0.25, 0.5, 0.25], rtol=1e-6)


def test_update_bank_masked_images_do_not_change_bank():
  rng = np.random.default_rng(3)
  bank = _unit(rng.normal(size=(4, 5))).astype(np.float32)
  images = rng.normal(size=(10, 5)).astype(np.float32)
  cats = rng.integers(0, 4, size=(10,)).astype(np.int32)
  got = np.asarray(scl.update_bank(bank, images, cats, np.zeros(10, bool), 0.01))
  np.testing.assert_array_equal(got, bank)  # nothing updated: the bank as it was, exactly
  # Masked images in between do not change the result of the unmasked ones.
  mask = np.arange(10) % 2 == 0
  full = np.asarray(scl.update_bank(bank, images, cats, mask, 0.3))
  sub = np.asarray(scl.update_bank(bank, images[mask], cats[mask], np.ones(5, bool), 0.3))
  np.testing.assert_allclose(full, sub, rtol=1e-6, atol=1e-6)


def test_update_bank_under_pmap_with_all_gather_keeps_replicas_equal():
  rng = np.random.default_rng(5)
  bank = _unit(rng.normal(size=(3, 4))).astype(np.float32)
  n_dev = jax.local_device_count()
  images = rng.normal(size=(n_dev, 6, 4)).astype(np.float32)
  cats = rng.integers(0, 3, size=(n_dev, 6)).astype(np.int32)
  mask = np.ones((n_dev, 6), bool)

  def step(bk, im, ct, mk):
    gather = lambda x: jax.lax.all_gather(x, 'dev')
    return scl.update_bank(bk, gather(im), gather(ct), gather(mk), 0.01)

  out = jax.pmap(step, axis_name='dev')(np.stack([bank] * n_dev), images, cats, mask)
  expected = _reference_update(bank, images, cats, mask, 0.01)
  for r in range(n_dev):
    np.testing.assert_allclose(np.asarray(out[r]), expected, rtol=1e-5, atol=1e-5)
