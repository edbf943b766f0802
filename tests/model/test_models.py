"""Tests of the Flax modules g (colt_jax/model/reencoder.py), the paper's phi
(colt_jax/model/phi.py) and colt-pairs' phi (colt_jax/pairs/pairs_phi.py).

Two modules (or one with and without its heads) are two programs, which XLA may fuse and
round differently on another machine: their outputs and initial values are compared to
float32 rounding (float_compare), their parameter trees, shapes and dtypes exactly."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax.model import phi as phi_lib
from colt_jax.model import reencoder
from colt_jax.pairs import pairs_phi
from colt_jax.train.state import count_params
from float_compare import assert_close  # pylint: disable=g-bad-import-order


def test_reencoder_starts_at_identity_and_is_normalised():
  h = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
  h /= np.linalg.norm(h, axis=1, keepdims=True)
  g = reencoder.ReEncoder(beta=0.02)
  params = g.init(jax.random.PRNGKey(0), h)['params']
  np.testing.assert_allclose(g.apply({'params': params}, h), h, atol=1e-6)
  # Eq. 1 with a non-zero g: h^ = unit(h + beta * g(h)).
  params = jax.tree_util.tree_map(lambda x: x + 0.1, params)
  out = g.apply({'params': params}, h)
  raw = reencoder.ReEncoder(beta=0.02, normalise=False).apply({'params': params}, h)
  np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
  np.testing.assert_allclose(out, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
  assert not np.allclose(raw, h)
  hidden = params['Dense_0']['kernel'].shape
  assert hidden == (8, 16)  # hidden_dim 0 -> twice the feature dimension


def test_token_classifier_ignores_padding():
  """Valid tokens' logits do not depend on what the masked (padding) tokens contain."""
  rng = np.random.default_rng(1)
  phi = phi_lib.TokenClassifier(num_classes=7, num_layers=2, num_heads=2, model_dim=16,
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
  phi = phi_lib.TokenClassifier(num_classes=3, num_layers=1, num_heads=1, dropout=0.5)
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
  np.testing.assert_array_equal(c, d)  # the same computation twice: deterministic
  assert count_params(params) > 0


def test_padded_attention_equals_flax_dot_product_attention():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(2)
  q, k, v = (jnp.asarray(rng.normal(size=(3, 9, 4, 8)), jnp.float32) for _ in range(3))
  valid = np.arange(9)[None, :] < np.array([[9], [5], [1]])
  full = nn.make_attention_mask(valid, valid)
  want = nn.dot_product_attention(q, k, v, mask=full)
  np.testing.assert_allclose(phi_lib.padded_attention(q, k, v, mask=full), want, atol=1e-5)
  got = phi_lib.padded_attention(q, k, v, mask=jnp.asarray(valid)[:, None, None, :])
  np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid], atol=1e-5)
  assert np.isfinite(np.asarray(got)).all()  # padded rows too
  # Attention dropout: the same draws as flax's for the same key, broadcast or not.
  for broadcast in (True, False):
    kw = dict(dropout_rng=jax.random.PRNGKey(3), dropout_rate=0.3, deterministic=False,
              broadcast_dropout=broadcast)
    np.testing.assert_allclose(phi_lib.padded_attention(q, k, v, mask=full, **kw),
                               nn.dot_product_attention(q, k, v, mask=full, **kw), atol=1e-5)


def test_token_classifier_matches_flax_default_attention_on_valid_tokens():
  """Swapping in flax's own attention (full padding mask) leaves valid tokens' logits alone."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  class FlaxDefaultLayer(nn.Module):
    num_heads: int
    mlp_ratio: int = 4
    dropout: float = 0.0
    attention_dropout: float = 0.0

    @nn.compact
    def __call__(self, x, mask, *, deterministic):
      y = nn.LayerNorm(name='LayerNorm_0')(x)
      y = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, deterministic=True,
                                          name='MultiHeadDotProductAttention_0')(
                                              y, y, mask=nn.make_attention_mask(mask, mask))
      x = x + y
      y = nn.LayerNorm(name='LayerNorm_1')(x)
      y = nn.Dense(self.mlp_ratio * x.shape[-1], name='Dense_0')(y)
      return x + nn.Dense(x.shape[-1], name='Dense_1')(nn.gelu(y))

  rng = np.random.default_rng(4)
  x = jnp.asarray(rng.normal(size=(2, 7, 16)), jnp.float32)
  mask = jnp.asarray(np.arange(7)[None, :] < np.array([[7], [4]]))
  layer = phi_lib.EncoderLayer(num_heads=4, dropout=0.0, attention_dropout=0.0)
  params = layer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  ours = layer.apply(params, x, mask, deterministic=True)
  ref = FlaxDefaultLayer(num_heads=4).apply(params, x, mask, deterministic=True)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(ours)[m], np.asarray(ref)[m], atol=1e-5)


def test_heads_shapes_symmetry_and_the_papers_parameters():
  """phi's relevance and pair heads (colt-pairs): [B, T] and symmetric [B, T, T] logits beside
  the class logits, which they leave unchanged; without heads phi holds exactly the paper's
  parameters and returns its class logits alone."""
  rng = np.random.default_rng(3)
  tokens = rng.normal(size=(2, 7, 12)).astype(np.float32)
  mask = np.arange(7)[None, :] < np.array([[5], [7]])
  kw = dict(num_classes=6, num_layers=1, num_heads=2, model_dim=16, dropout=0.0)
  paper = pairs_phi.PairsTokenClassifier(**kw)
  heads = pairs_phi.PairsTokenClassifier(**kw, relevance_head=True, pair_head=True, pair_dim=8)
  p_paper = paper.init(jax.random.PRNGKey(0), tokens, mask)['params']
  p_heads = heads.init(jax.random.PRNGKey(0), tokens, mask)['params']
  assert set(p_heads) - set(p_paper) == {'relevance_head', 'pair_head'}
  assert not paper.has_heads and heads.has_heads
  assert p_heads['pair_head']['query']['kernel'].shape == (16, 8)
  out = heads.apply({'params': p_heads}, tokens, mask, with_heads=True)
  assert set(out) == {'class', 'relevance', 'pair'}
  assert out['class'].shape == (2, 7, 6) and out['relevance'].shape == (2, 7)
  assert out['pair'].shape == (2, 7, 7)
  np.testing.assert_allclose(out['pair'], np.swapaxes(out['pair'], 1, 2), atol=1e-6)
  assert_close(out['class'], heads.apply({'params': p_heads}, tokens, mask), 'class')
  # The same encoder parameters give the same class logits with or without the heads.
  shared = {k: v for k, v in p_heads.items() if k in p_paper}
  np.testing.assert_allclose(paper.apply({'params': shared}, tokens, mask), out['class'],
                             atol=1e-6)
  only = paper.apply({'params': p_paper}, tokens, mask, with_heads=True)
  assert set(only) == {'class'}
  # The pair logit is the symmetrised scaled bilinear form of the final token outputs.
  x = None

  def grab(next_fun, args, kwargs, context):
    nonlocal x
    if context.module.name == 'pair_head' and context.method_name == '__call__':
      x = args[0]
    return next_fun(*args, **kwargs)

  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  with nn.intercept_methods(grab):
    heads.apply({'params': p_heads}, tokens, mask, with_heads=True)
  ph = p_heads['pair_head']
  a, b = np.asarray(x) @ ph['query']['kernel'], np.asarray(x) @ ph['key']['kernel']
  s = np.einsum('bid,bjd->bij', a, b) / np.sqrt(8)
  np.testing.assert_allclose(out['pair'], (s + np.swapaxes(s, 1, 2)) / 2 + ph['bias'],
                             atol=1e-5)
  # Padding does not reach the valid tokens' heads.
  other = tokens.copy()
  other[0, 5:] = 100.0
  out2 = heads.apply({'params': p_heads}, other, mask, with_heads=True)
  np.testing.assert_allclose(out2['relevance'][0, :5], out['relevance'][0, :5], atol=1e-5)
  np.testing.assert_allclose(out2['pair'][0, :5, :5], out['pair'][0, :5, :5], atol=1e-5)


def test_token_parts_each_view_its_projection_and_the_pair_head_reads_their_cosines():
  """Per-view token parts (--view_tokens): one projection + LayerNorm per part, summed; the
  pair head adds an MLP of each part's cosine of the pair (symmetric, padding-proof)."""
  rng = np.random.default_rng(4)
  sizes = (6, 3, 3)
  tokens = rng.normal(size=(2, 7, 12)).astype(np.float32)
  tokens[:, 0, 6:] = 0.0  # the query token: text only
  mask = np.arange(7)[None, :] < np.array([[5], [7]])
  kw = dict(num_classes=6, num_layers=1, num_heads=2, model_dim=16, dropout=0.0,
            relevance_head=True, pair_head=True, pair_dim=8, query_relative=True)
  module = pairs_phi.PairsTokenClassifier(**kw, token_parts=sizes)
  params = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  assert 'input_projection' not in params
  for i, size in enumerate(sizes):  # query_relative: each part and its offset from the query
    assert params[f'part_{i}_projection']['kernel'].shape == (2 * size, 16)
    assert f'part_{i}_norm' in params
  assert params['pair_head']['cosine_hidden']['kernel'].shape == (len(sizes), 16)
  out = module.apply({'params': params}, tokens, mask, with_heads=True)
  np.testing.assert_allclose(out['pair'], np.swapaxes(out['pair'], 1, 2), atol=1e-6)
  # The cosines, by hand: per part, zero parts give 0.
  cos = np.asarray(pairs_phi.part_cosines(pairs_phi.split_parts(jnp.asarray(tokens), sizes)))
  unit = lambda p: p / np.maximum(np.linalg.norm(p, axis=-1, keepdims=True), 1e-6)
  np.testing.assert_allclose(cos[..., 1], np.einsum('bid,bjd->bij', unit(tokens[..., 6:9]),
                                                   unit(tokens[..., 6:9])), atol=1e-5)
  assert np.all(cos[:, 0, 1:, 1] == 0)
  # A part's values reach the output only through its own projection: changing the third
  # part changes the outputs; a permutation of the parts' sizes is another model.
  other = tokens.copy()
  other[:, 1:, 9:] += 1.0
  changed = module.apply({'params': params}, other, mask, with_heads=True)
  assert not np.allclose(changed['pair'], out['pair'])
  # Padding does not reach the valid tokens.
  padded = tokens.copy()
  padded[0, 5:] = 100.0
  out2 = module.apply({'params': params}, padded, mask, with_heads=True)
  np.testing.assert_allclose(out2['pair'][0, :5, :5], out['pair'][0, :5, :5], atol=1e-5)
  np.testing.assert_allclose(out2['relevance'][0, :5], out['relevance'][0, :5], atol=1e-5)
  with pytest.raises(ValueError, match=r'token parts \(6, 3, 4\) sum to 13, tokens have 12'):
    pairs_phi.PairsTokenClassifier(**kw, token_parts=(6, 3, 4)).init(jax.random.PRNGKey(0),
                                                                     tokens, mask)


def test_relational_tokens_see_similarities_only():
  """--relational_tokens: per part, a token's cosine to the query and the mean, max and top-5
  mean of its cosines to the other valid image tokens (NumPy transcription); phi's outputs do
  not change under a rotation of the features (they carry no feature identity)."""
  rng = np.random.default_rng(6)
  tokens = rng.normal(size=(2, 9, 10)).astype(np.float32)
  mask = np.arange(9)[None, :] < np.array([[7], [9]])
  sizes = (6, 4)
  got = np.asarray(pairs_phi.relational_features(
      pairs_phi.part_cosines(pairs_phi.split_parts(jnp.asarray(tokens), sizes)), jnp.asarray(mask)))
  assert got.shape == (2, 9, 4 * len(sizes))
  unit = lambda p: p / np.linalg.norm(p, axis=-1, keepdims=True)
  for b in range(2):
    n = int(mask[b].sum())
    for v, (start, stop) in enumerate(((0, 6), (6, 10))):
      u = unit(tokens[b, :, start:stop].astype(np.float64))
      c = u @ u.T
      for i in range(n):
        others = [c[i, j] for j in range(1, n) if j != i]
        top = sorted(others, reverse=True)[:pairs_phi.RELATIONAL_TOP]
        want = [c[i, 0], np.mean(others), max(others), np.mean(top)]
        np.testing.assert_allclose(got[b, i, v::len(sizes)], want, atol=1e-5)
  module = pairs_phi.PairsTokenClassifier(num_classes=5, num_layers=1, num_heads=2,
                                          model_dim=16, dropout=0.0, relational=True,
                                          relevance_head=True, pair_head=True,
                                          token_parts=sizes)
  params = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  rotation = np.linalg.qr(rng.normal(size=(6, 6)))[0].astype(np.float32)
  turned = tokens.copy()
  turned[..., :6] = tokens[..., :6] @ rotation
  a = module.apply({'params': params}, tokens, mask, with_heads=True)
  b = module.apply({'params': params}, turned, mask, with_heads=True)
  for name in ('class', 'relevance', 'pair'):
    np.testing.assert_allclose(np.asarray(a[name])[0, :7], np.asarray(b[name])[0, :7],
                               atol=2e-4)


def test_appearance_parts_add_their_features_to_relational_tokens():
  """`appearance_parts`: the named parts also enter by their own projection and LayerNorm,
  so phi's outputs follow those parts' features (a rotation of them moves the outputs) while
  the other parts are still seen through their similarities alone."""
  rng = np.random.default_rng(7)
  tokens = rng.normal(size=(1, 9, 10)).astype(np.float32)
  mask = np.ones((1, 9), bool)
  kw = dict(num_classes=5, num_layers=1, num_heads=2, model_dim=16, dropout=0.0,
            relational=True, relevance_head=True, token_parts=(6, 4))
  module = pairs_phi.PairsTokenClassifier(**kw, appearance_parts=(1,))
  params = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  assert {'part_1_projection', 'part_1_norm'} <= set(params)
  assert 'part_0_projection' not in params
  plain = pairs_phi.PairsTokenClassifier(**kw).init(jax.random.PRNGKey(0), tokens, mask)[
      'params']
  assert set(params) - set(plain) == {'part_1_projection', 'part_1_norm'}
  out = lambda t: np.asarray(module.apply({'params': params}, t, mask, with_heads=True)[
      'relevance'])
  turned = tokens.copy()
  turned[..., :6] = tokens[..., :6] @ np.linalg.qr(rng.normal(size=(6, 6)))[0].astype(
      np.float32)
  np.testing.assert_allclose(out(turned), out(tokens), atol=2e-4)  # part 0: relational only
  moved = tokens.copy()
  moved[..., 6:] = tokens[..., 6:] @ np.linalg.qr(rng.normal(size=(4, 4)))[0].astype(np.float32)
  assert np.abs(out(moved) - out(tokens)).max() > 1e-2  # part 1: its features are seen
  # appearance_dim: the part goes through a bottleneck of that width first.
  narrow = pairs_phi.PairsTokenClassifier(**kw, appearance_parts=(1,), appearance_dim=2)
  p2 = narrow.init(jax.random.PRNGKey(0), tokens, mask)['params']
  assert p2['part_1_bottleneck']['kernel'].shape == (4, 2)
  assert p2['part_1_projection']['kernel'].shape == (2, 16)
  assert 'part_1_bottleneck' not in params


def test_largest_matches_top_k_with_ties():
  """`_largest` (relational_features' top 5) gives what jax.lax.top_k gives, ties repeated."""
  rng = np.random.default_rng(3)
  x = rng.integers(0, 4, size=(3, 5, 11)).astype(np.float32)  # many ties
  x[0, 0, :] = -1.0  # all equal
  want = jax.lax.top_k(jnp.asarray(x), 5)[0]
  # Exact: both select values (no arithmetic on them).
  np.testing.assert_array_equal(np.asarray(pairs_phi._largest(jnp.asarray(x), 5)), want)


def test_colt_pairs_phi_without_options_is_the_papers_phi():
  """colt-pairs' phi with none of its options holds the paper's parameters (names, shapes and
  dtypes exactly, initial values to float32 rounding) and gives the paper's phi's logits to
  float32 rounding, with dropout too (the same dropout masks: a logit dropped in one and kept in
  the other would differ by far more)."""
  rng = np.random.default_rng(5)
  tokens = rng.normal(size=(2, 9, 12)).astype(np.float32)
  mask = np.arange(9)[None, :] < np.array([[6], [9]])
  kw = dict(num_classes=6, num_layers=2, num_heads=2, model_dim=16, dropout=0.2)
  paper, ours = phi_lib.TokenClassifier(**kw), pairs_phi.PairsTokenClassifier(**kw)
  p_paper = jax.jit(paper.init)(jax.random.PRNGKey(0), tokens, mask)['params']
  p_ours = jax.jit(ours.init)(jax.random.PRNGKey(0), tokens, mask)['params']
  assert jax.tree_util.tree_structure(p_paper) == jax.tree_util.tree_structure(p_ours)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(p_paper),
                         jax.tree_util.tree_leaves(p_ours)):
    assert_close(b, a, jax.tree_util.keystr(path))
  for kwargs in (dict(), dict(deterministic=False, rngs={'dropout': jax.random.PRNGKey(1)})):
    want = jax.jit(lambda p, t, m, kw=kwargs: paper.apply({'params': p}, t, m, **kw))(
        p_paper, tokens, mask)
    got = jax.jit(lambda p, t, m, kw=kwargs: ours.apply({'params': p}, t, m, **kw))(
        p_paper, tokens, mask)
    assert_close(got, want, f'logits {kwargs}')


def test_head_outputs_of_the_papers_phi_are_its_class_head():
  """`pairs.pairs_phi.head_outputs`: the paper's phi gives its class head alone; colt-pairs' phi
  with no option the same logits (to float32 rounding: another module); with heads, every
  head."""
  rng = np.random.default_rng(9)
  tokens = rng.normal(size=(2, 7, 12)).astype(np.float32)
  mask = np.arange(7)[None, :] < np.array([[5], [7]])
  kw = dict(num_classes=6, num_layers=1, num_heads=2, model_dim=16, dropout=0.0)
  paper = phi_lib.TokenClassifier(**kw)
  params = {'params': paper.init(jax.random.PRNGKey(0), tokens, mask)['params']}
  out = pairs_phi.head_outputs(paper, params, tokens, mask, deterministic=True)
  assert set(out) == {'class'}
  # Exact: the same module applied to the same inputs, op by op: deterministic.
  np.testing.assert_array_equal(out['class'], paper.apply(params, tokens, mask))
  ours = pairs_phi.head_outputs(pairs_phi.PairsTokenClassifier(**kw), params, tokens, mask,
                                deterministic=True)
  assert set(ours) == {'class'}
  assert_close(ours['class'], out['class'], 'class')
  heads = pairs_phi.PairsTokenClassifier(**kw, relevance_head=True, pair_head=True)
  assert set(pairs_phi.head_outputs(heads, heads.init(jax.random.PRNGKey(0), tokens, mask),
                                    tokens, mask)) == {'class', 'relevance', 'pair'}
