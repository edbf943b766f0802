"""The visual feature re-encoder g of CoLT (Eq. 1), a Flax (linen) module; all state is in
`params`."""
from __future__ import annotations

import flax.linen as nn
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
