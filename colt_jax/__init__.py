"""colt_jax: CoLT (keyword-based diverse image retrieval, SIGIR 2023) in JAX/Flax."""
