"""Small numerics shared by every layer: L2 normalisation (the project's one copy)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def l2_normalise(x, axis: int = -1, eps: float = 1e-12, dtype=None):
  """x / max(||x||_2, eps) along `axis`. NumPy arrays give NumPy (in `dtype`, default their
  own); JAX arrays and tracers give JAX (usable under jit)."""
  if isinstance(x, (jax.Array, jax.core.Tracer)):
    x = x if dtype is None else x.astype(dtype)
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
    return x / jnp.maximum(norm, eps)
  x = np.asarray(x, dtype)
  return x / np.maximum(np.linalg.norm(x, axis=axis, keepdims=True), eps)
