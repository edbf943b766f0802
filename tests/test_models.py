"""Tests of the Flax modules g and phi (colt_jax/models.py)."""
import jax
import jax.numpy as jnp
import numpy as np

from colt_jax import models


def test_reencoder_starts_at_identity_and_is_normalised():
  h = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
  h /= np.linalg.norm(h, axis=1, keepdims=True)
  g = models.ReEncoder(beta=0.02)
  params = g.init(jax.random.PRNGKey(0), h)['params']
  np.testing.assert_allclose(g.apply({'params': params}, h), h, atol=1e-6)
  # Eq. 1 with a non-zero g: h^ = unit(h + beta * g(h)).
  params = jax.tree_util.tree_map(lambda x: x + 0.1, params)
  out = g.apply({'params': params}, h)
  raw = models.ReEncoder(beta=0.02, normalise=False).apply({'params': params}, h)
  np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
  np.testing.assert_allclose(out, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
  assert not np.allclose(raw, h)
  hidden = params['Dense_0']['kernel'].shape
  assert hidden == (8, 16)  # hidden_dim 0 -> twice the feature dimension


def test_token_classifier_ignores_padding():
  """Valid tokens' logits do not depend on what the masked (padding) tokens contain."""
  rng = np.random.default_rng(1)
  phi = models.TokenClassifier(num_classes=7, num_layers=2, num_heads=2, model_dim=16,
                               dropout=0.0)
  tokens = rng.normal(size=(2, 10, 12)).astype(np.float32)
  mask = np.arange(10)[None, :] < np.array([[6], [10]])
  params = phi.init(jax.random.PRNGKey(0), tokens, mask)['params']
  out = phi.apply({'params': params}, tokens, mask)
  assert out.shape == (2, 10, 7)
  other = tokens.copy()
  other[0, 6:] = rng.normal(size=(4, 12)) * 100
  out2 = phi.apply({'params': params}, other, mask)
  np.testing.assert_allclose(out[0, :6], out2[0, :6], atol=1e-5)
  np.testing.assert_allclose(out[1], out2[1], atol=1e-6)
  # The sequence is not a bag: positions matter (learned position embedding).
  swapped = tokens.copy()
  swapped[1, [1, 2]] = swapped[1, [2, 1]]
  out3 = phi.apply({'params': params}, swapped, mask)
  assert not np.allclose(out3[1, 1], out[1, 2], atol=1e-4)


def test_token_classifier_dropout_is_rng_driven():
  phi = models.TokenClassifier(num_classes=3, num_layers=1, num_heads=1, dropout=0.5)
  x = jnp.ones((1, 4, 8))
  m = jnp.ones((1, 4), bool)
  params = phi.init(jax.random.PRNGKey(0), x, m)['params']
  a = phi.apply({'params': params}, x, m, deterministic=False,
                rngs={'dropout': jax.random.PRNGKey(1)})
  b = phi.apply({'params': params}, x, m, deterministic=False,
                rngs={'dropout': jax.random.PRNGKey(2)})
  c = phi.apply({'params': params}, x, m, deterministic=True)
  d = phi.apply({'params': params}, x, m, deterministic=True)
  assert not np.allclose(a, b)
  np.testing.assert_array_equal(c, d)
  assert models.count_params(params) > 0
