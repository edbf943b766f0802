"""The train state: one pytree holding everything a step reads and writes.

Params, optimiser state, the SCL prototype bank (empty for the TTC), the step counter and the
base PRNG key all live here, so checkpoints and pmap see the whole state.
"""
from __future__ import annotations

from typing import Any, Optional

from flax.training import train_state
import jax


class TrainState(train_state.TrainState):
  """flax's TrainState plus the SCL bank and the run's base PRNG key."""
  bank: Optional[jax.Array]  # SCL prototypes [C, d]; None for the TTC
  rng: jax.Array


def create(apply_fn, params, tx, rng, bank=None) -> TrainState:
  """The state at step 0: `TrainState.create`'s, with the optimiser's state made by one
  compiled program (eagerly, each of its zero arrays compiles apart)."""
  return TrainState(step=0, apply_fn=apply_fn, params=params, tx=tx,
                    opt_state=jax.jit(tx.init)(params), rng=rng, bank=bank)


def example_keys(rng: jax.Array, example_index: jax.Array) -> jax.Array:
  """One key per example from its index in the global batch: independent of how the batch
  is split over devices."""
  return jax.vmap(jax.random.fold_in, (None, 0))(rng, example_index)


def count_params(params) -> int:
  """The number of scalars in a parameter tree."""
  return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))
