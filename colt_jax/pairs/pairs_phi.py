"""phi beyond the paper: the paper's token classifier (`model/phi.py`, Eq. 4) extended with
query-relative tokens (the `colt` row's input) and colt-pairs' relevance head, pairwise
same-cluster head, per-view token parts and relational tokens. With none of them it is the
paper's phi, parameter for parameter and, to float32 rounding, output for output; the parameter names of every part are
those checkpoints were saved with.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from colt_jax.model.phi import TokenClassifier


class PairsTokenClassifier(TokenClassifier):
  """phi with query-relative tokens, colt-pairs' heads and token parts (its fields below; the
  paper's in `TokenClassifier`)."""
  # Every token also carries its offset from the query token (0 for the query itself): what
  # separates a photo from its query is shared across topics.
  query_relative: bool = False
  relevance_head: bool = False
  pair_head: bool = False
  pair_dim: int = 0  # width of the pair head's projections (0 = the token width)
  # Sizes of the consecutive parts of a token (a view store's text, each descriptor, user,
  # day: `views.token_parts`); () = one part. With parts, each part has its own projection
  # and LayerNorm, summed into the token, and the pair head also reads the per-part cosines.
  token_parts: tuple = ()
  # Tokens described by their similarities alone (`relational_features`: per part, the cosine
  # to the query and to the other photos), never by the features themselves: nothing that
  # names a photo or a topic, so nothing of the training topics to memorise.
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
    P(relevant)) and 'pair' [..., T, T] (symmetric logits of P(same cluster), `PairHead`).
    The heads are computed (and their parameters created) whenever phi has them, so `init`
    without `with_heads` creates every parameter."""
    dim = self.model_dim or tokens.shape[-1]
    parts = split_parts(tokens, self.token_parts)
    # Each part's cosine of every pair of tokens, computed once for the relational features
    # and the pair head.
    cosines = (part_cosines(parts) if self.relational or (self.token_parts and self.pair_head)
               else None)
    x = self._embed_parts(tokens, mask, dim, parts, cosines)
    x = self.encode(x, mask, deterministic=deterministic)
    out = {'class': self.classify(x)}
    if self.relevance_head:
      out['relevance'] = nn.Dense(1, name='relevance_head')(x)[..., 0]
    if self.pair_head:
      out['pair'] = PairHead(self.pair_dim or dim, name='pair_head')(x, cosines)
    return out if with_heads else out['class']

  def _embed_parts(self, tokens, mask, dim: int, parts: list, cosines):
    """The tokens at phi's width: relational features (plus appearance parts), each part's
    own projection and LayerNorm summed, or the paper's one projection (of the tokens and,
    with `query_relative`, their offsets)."""
    if self.relational:
      x = nn.LayerNorm(name='relational_norm')(
          nn.Dense(dim, name='relational_projection')(relational_features(cosines, mask)))
      for i in self.appearance_parts:
        h = parts[i]
        if self.appearance_dim:
          h = nn.Dense(self.appearance_dim, name=f'part_{i}_bottleneck')(h)
        x = x + nn.LayerNorm(name=f'part_{i}_norm')(
            nn.Dense(dim, name=f'part_{i}_projection')(h))
      return x
    if self.token_parts:
      # Every signal its own token part: a learned projection and LayerNorm per view, summed.
      return sum(nn.LayerNorm(name=f'part_{i}_norm')(
          nn.Dense(dim, name=f'part_{i}_projection')(self._relative(p)))
                 for i, p in enumerate(parts))
    return self.embed(self._relative(tokens), dim)

  def _relative(self, tokens):
    """The tokens, and with `query_relative` each token's offset from the query token too."""
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


def head_outputs(module: TokenClassifier, variables, tokens, mask, **kwargs) -> dict:
  """Every head's outputs of phi (`module.apply(variables, tokens, mask, **kwargs)`): 'class'
  (Eq. 4's logits) and, where phi has them, 'relevance' and 'pair'; the paper's phi has the
  class head alone."""
  if isinstance(module, PairsTokenClassifier):
    return module.apply(variables, tokens, mask, with_heads=True, **kwargs)
  return {'class': module.apply(variables, tokens, mask, **kwargs)}
