"""Flax (linen) modules of CoLT: the re-encoder g (Eq. 1) and the token classifier phi (Eq. 4).

Both are pure: all state is in `params`; nothing else is mutable.
"""
from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp


class ReEncoder(nn.Module):
  """The visual feature re-encoder: h^ = h + beta * g(h) (Eq. 1), g an MLP.

  The paper says only "a multi-layer perceptron". We use `num_layers` Dense layers with GELU
  between them (hidden width `hidden_dim`, default 2x the feature dimension via 0) and a
  zero-initialised last layer, so that training starts from h^ = h exactly (`zero_init=False`:
  flax's default initialisation, g active from the first step). `normalise` returns unit
  vectors, since every later stage compares features by cosine similarity.
  """
  beta: float = 0.02
  hidden_dim: int = 0  # 0: twice the input dimension
  num_layers: int = 2
  normalise: bool = True
  zero_init: bool = True

  @nn.compact
  def residual(self, h: jnp.ndarray) -> jnp.ndarray:
    """g(h), the MLP alone (h^ before normalisation is h + beta g(h))."""
    dim = h.shape[-1]
    x = h
    for _ in range(self.num_layers - 1):
      x = nn.gelu(nn.Dense(self.hidden_dim or 2 * dim)(x))
    init = nn.initializers.zeros if self.zero_init else nn.linear.default_kernel_init
    return nn.Dense(dim, kernel_init=init)(x)

  def __call__(self, h: jnp.ndarray) -> jnp.ndarray:
    g = self.residual(h)
    out = h + self.beta * g
    if self.normalise:
      out = out / jnp.maximum(jnp.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
    return out


def padded_attention(query, key, value, mask=None, broadcast_dropout: bool = True,
                     dropout_rng=None, dropout_rate: float = 0.0, deterministic: bool = False):
  """Scaled dot-product attention, a drop-in `attention_fn` for nn.MultiHeadDotProductAttention.

  The same function as `nn.dot_product_attention` (same weights, same dropout draws for the
  same key), computed heads-first ([batch, heads, tokens, head_dim], contiguous batched
  matrix products) with the mask added as a bias; a key-padding mask of shape
  [batch, 1, 1, tokens] then costs one broadcast add. On CPU this makes the attention core of
  a 201-token, 8-head layer ~3x faster than flax's default (benchmarks/bench_retrieval.py).
  """
  dtype = query.dtype
  q = jnp.swapaxes(query, -3, -2) * jnp.asarray(query.shape[-1] ** -0.5, dtype)
  k = jnp.swapaxes(key, -3, -2)
  v = jnp.swapaxes(value, -3, -2)
  logits = jnp.einsum('...hqd,...hkd->...hqk', q, k)
  if mask is not None:  # finite, so that fully masked (padding) rows stay finite
    logits = logits + jnp.where(mask, jnp.asarray(0, dtype), jnp.finfo(dtype).min / 2)
  weights = jax.nn.softmax(logits, axis=-1)
  if not deterministic and dropout_rate > 0.0:
    keep_prob = 1.0 - dropout_rate
    shape = ((1,) * (key.ndim - 2) + weights.shape[-2:]) if broadcast_dropout else weights.shape
    keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
    weights = weights * (keep.astype(dtype) / jnp.asarray(keep_prob, dtype))
  return jnp.swapaxes(jnp.einsum('...hqk,...hkd->...hqd', weights, v), -3, -2)


class EncoderLayer(nn.Module):
  """A pre-LayerNorm transformer encoder layer (Vaswani et al.) with a padding mask.

  Padding tokens are masked as keys only: no valid token attends to them, so valid tokens'
  outputs are those of the full [tokens, tokens] mask; padded tokens' own outputs are unused.
  """
  num_heads: int
  mlp_ratio: int = 4
  dropout: float = 0.1
  attention_dropout: float = 0.1  # on the attention weights

  @nn.compact
  def __call__(self, x, mask, *, deterministic: bool):
    dim = x.shape[-1]
    key_mask = mask[..., None, None, :].astype(bool)  # [batch, 1 (heads), 1 (queries), keys]
    y = nn.LayerNorm()(x)
    y = nn.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dropout_rate=self.attention_dropout,
        deterministic=deterministic, attention_fn=padded_attention)(y, y, mask=key_mask)
    x = x + nn.Dropout(self.dropout)(y, deterministic=deterministic)
    y = nn.LayerNorm()(x)
    y = nn.Dense(self.mlp_ratio * dim)(y)
    y = nn.gelu(y)
    y = nn.Dense(dim)(y)
    return x + nn.Dropout(self.dropout)(y, deterministic=deterministic)


def _position_init(key, shape, dtype=jnp.float32):
  """N(0, 0.02^2), drawn and then scaled as two steps (an optimization barrier between them):
  the same bits whether `init` runs eagerly or compiled as one program (fused, the scaling
  rounds differently in the last bit), so models initialised before stay reproducible."""
  return jax.lax.optimization_barrier(jax.random.normal(key, shape, dtype)) * 0.02


class TokenClassifier(nn.Module):
  """The transformer-based token classifier phi (Sec. 3.3, Eq. 4).

  Input: the token sequence I = [h_q, h^_1..h^_N] (images sorted by similarity to the query)
  and a validity mask (padding when a topic has fewer than N candidates). Output: per-token
  logits over `num_classes` = categories + 'irrelevant' + 'query'.

  Choices the paper leaves open: tokens are linearly projected to `model_dim` (0 = keep the
  feature dimension, as the paper feeds CLIP features directly); a learned position embedding
  is added (positions carry the similarity rank; `position_embedding=False` removes it); L
  pre-LN encoder layers; a final LayerNorm; one Dense classifier. `query_relative=True` (not
  in the paper) also feeds every token's offset from the query token.
  """
  num_classes: int
  num_layers: int = 8
  num_heads: int = 8
  model_dim: int = 0
  mlp_ratio: int = 4
  dropout: float = 0.1
  attention_dropout: float = 0.1
  max_len: int = 512
  position_embedding: bool = True
  query_relative: bool = False

  # Heads beyond the paper (the `colt-pairs` method): with neither, phi is the paper's and
  # holds exactly its parameters.
  relevance_head: bool = False
  pair_head: bool = False
  pair_dim: int = 0  # width of the pair head's projections (0 = the token width)
  # Sizes of the consecutive parts of a token (a view store's text, each descriptor, user,
  # day: `views.token_parts`); () = one part. With parts, each part has its own projection
  # and LayerNorm, summed into the token, and the pair head also reads the per-part cosines.
  token_parts: tuple = ()
  # Tokens described by their similarities alone (`relational_features`: per part, the cosine
  # to the query and to the other photos), never by the features themselves: nothing that
  # names a photo or a topic, so nothing of the training topics to memorise (not in the paper).
  relational: bool = False
  # With `relational`: indices of the parts that also enter by their own projection and
  # LayerNorm (the official descriptors: a photo's appearance, `appearance_tokens`).
  appearance_parts: tuple = ()
  appearance_dim: int = 0  # each such part through a bottleneck this wide first (0: none)

  @property
  def has_heads(self) -> bool:
    """Whether phi has a head beyond the class head (`__call__(..., with_heads=True)`)."""
    return self.relevance_head or self.pair_head

  @nn.compact
  def __call__(self, tokens, mask, *, deterministic: bool = True, with_heads: bool = False):
    """Class logits [..., T, num_classes] (Eq. 4); with `with_heads`, a dict of every head's
    output: 'class' (those logits), and where phi has them 'relevance' [..., T] (logit of
    P(relevant)) and 'pair' [..., T, T] (symmetric logits of P(same cluster),
    `PairHead`). The heads are computed (and their parameters created) whenever phi has
    them, so `init` without `with_heads` creates every parameter."""
    dim = self.model_dim or tokens.shape[-1]
    parts = split_parts(tokens, self.token_parts)
    # Each part's cosine of every pair of tokens, computed once for the relational features
    # and the pair head.
    cosines = (part_cosines(parts) if self.relational or (self.token_parts and self.pair_head)
               else None)
    if self.relational:
      x = nn.LayerNorm(name='relational_norm')(
          nn.Dense(dim, name='relational_projection')(relational_features(cosines, mask)))
      for i in self.appearance_parts:
        h = parts[i]
        if self.appearance_dim:
          h = nn.Dense(self.appearance_dim, name=f'part_{i}_bottleneck')(h)
        x = x + nn.LayerNorm(name=f'part_{i}_norm')(nn.Dense(dim, name=f'part_{i}_projection')(h))
    elif self.token_parts:
      # Every signal its own token part: a learned projection and LayerNorm per view, summed.
      x = sum(nn.LayerNorm(name=f'part_{i}_norm')(
          nn.Dense(dim, name=f'part_{i}_projection')(self._relative(p)))
              for i, p in enumerate(parts))
    else:
      x = nn.Dense(dim, name='input_projection')(self._relative(tokens))
    if self.position_embedding:
      if tokens.shape[-2] > self.max_len:
        raise ValueError(f'sequence length {tokens.shape[-2]} exceeds max_len={self.max_len}')
      pos = self.param('position_embedding', _position_init, (self.max_len, dim))
      x = x + pos[:tokens.shape[-2]]
    x = nn.Dropout(self.dropout)(x, deterministic=deterministic)
    for i in range(self.num_layers):
      x = EncoderLayer(self.num_heads, self.mlp_ratio, self.dropout, self.attention_dropout,
                       name=f'layer_{i}')(x, mask, deterministic=deterministic)
    x = nn.LayerNorm(name='final_norm')(x)
    logits = nn.Dense(self.num_classes, name='classifier')(x)
    out = {'class': logits}
    if self.relevance_head:
      out['relevance'] = nn.Dense(1, name='relevance_head')(x)[..., 0]
    if self.pair_head:
      out['pair'] = PairHead(self.pair_dim or dim, name='pair_head')(x, cosines)
    return out if with_heads else logits

  def _relative(self, tokens):
    """The tokens, and with `query_relative` each token's offset from the query token too (0
    for the query itself): what separates a photo from its query is shared across topics."""
    if not self.query_relative:
      return tokens
    return jnp.concatenate([tokens, tokens - tokens[..., :1, :]], axis=-1)


def split_parts(tokens, sizes: tuple) -> list:
  """The consecutive parts of the last axis of `tokens` ([tokens] when `sizes` is ())."""
  if not sizes:
    return [tokens]
  if sum(sizes) != tokens.shape[-1]:
    raise ValueError(f'token parts {tuple(sizes)} sum to {sum(sizes)}, tokens have '
                     f'{tokens.shape[-1]} features')
  bounds = [0]
  for size in sizes:
    bounds.append(bounds[-1] + int(size))
  return [tokens[..., a:b] for a, b in zip(bounds[:-1], bounds[1:])]


RELATIONAL_TOP = 5  # neighbours averaged in `relational_features`


def relational_features(cos, mask):
  """[..., T, 4 P] from the per-part cosines `cos` [..., T, T, P] (`part_cosines`) and the
  validity mask: for each token and each part, its cosine to the query token (token 0),
  and the mean, the maximum and the mean of the top 5 of its cosines to the other valid image
  tokens (how typical the photo is of the topic, in each view)."""
  tokens = cos.shape[-2]
  by_part = jnp.swapaxes(cos, -1, -2)  # [..., i, P, j]: every reduction on the last axis
  valid = mask.astype(bool)[..., None, :] & ~jnp.eye(tokens, dtype=bool)
  valid = valid & (jnp.arange(tokens) > 0)  # image tokens only
  valid = valid[..., None, :]
  count = jnp.maximum(valid.sum(-1), 1)
  mean = jnp.where(valid, by_part, 0.0).sum(-1) / count
  top = _largest(jnp.where(valid, by_part, -1.0), min(RELATIONAL_TOP, tokens))
  out = [cos[..., 0, :], mean, top[..., 0], top.mean(-1)]
  return jnp.concatenate(out, axis=-1)


def _largest(x, k: int):
  """The k largest values of the last axis, in descending order (ties repeated), as
  `jax.lax.top_k` gives them: k passes of max-and-remove, ~8x faster than top_k on XLA's CPU
  backend over phi's [32, 201, 13, 201] cosines (it dominated colt-pairs' train step)."""
  index = jnp.arange(x.shape[-1])
  out = []
  for _ in range(k):
    out.append(x.max(-1))
    x = jnp.where(index == jnp.argmax(x, axis=-1)[..., None], -jnp.inf, x)
  return jnp.stack(out, axis=-1)


def part_cosines(parts: list):
  """[..., T, T, P]: the cosine of every pair of tokens within each part (0 where a part is
  zero, e.g. the query token's descriptor parts)."""
  out = []
  for p in parts:
    unit = p / jnp.maximum(jnp.linalg.norm(p, axis=-1, keepdims=True), 1e-6)
    out.append(jnp.einsum('...id,...jd->...ij', unit, unit))
  return jnp.stack(out, axis=-1)


class PairHead(nn.Module):
  """Logits of P(tokens i and j are in the same cluster) from phi's token outputs t [.., T, D]:

    s_ij = ((W_a t_i) . (W_b t_j) + (W_a t_j) . (W_b t_i)) / (2 sqrt(d)) + b,

  a scaled bilinear form, symmetrised (s_ij = s_ji), plus a learned bias b; given the
  per-part cosines c_ij [.., T, T, P] of the raw tokens (`part_cosines`), plus a small MLP of
  them (each view's similarity of the pair, a pair-level input). Not in the paper:
  whether two photos share a cluster is a statement about the pair that transfers to topics
  whose clusters phi has never seen, unlike a class id (global categories, local groups).
  """
  dim: int
  cosine_hidden: int = 16

  @nn.compact
  def __call__(self, x, cosines=None):
    a = nn.Dense(self.dim, use_bias=False, name='query')(x)
    b = nn.Dense(self.dim, use_bias=False, name='key')(x)
    s = jnp.einsum('...id,...jd->...ij', a, b) * jnp.asarray(self.dim ** -0.5, x.dtype)
    bias = self.param('bias', nn.initializers.zeros, (), x.dtype)
    s = 0.5 * (s + jnp.swapaxes(s, -1, -2)) + bias
    if cosines is not None:  # symmetric already: c_ij = c_ji
      h = nn.gelu(nn.Dense(self.cosine_hidden, name='cosine_hidden')(cosines))
      s = s + nn.Dense(1, name='cosine_out')(h)[..., 0]
    return s


def count_params(params) -> int:
  import jax  # pylint: disable=g-import-not-at-top
  return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))
