"""Data-parallel device helpers shared by training, feature extraction and inference:
pmap's axis name, its input/output layout, replication and sharding of a global batch."""
from __future__ import annotations

import os
from typing import Any, Mapping

import jax
import numpy as np

AXIS = 'batch'  # the pmap axis name the train steps' collectives use


def device_sharding(devices) -> jax.sharding.NamedSharding:
  """The layout pmap gives its outputs (a mesh axis named like the pmap axis): inputs placed
  this way match the outputs of the previous step, so the step never recompiles."""
  mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def replicate(tree: Any, devices) -> Any:
  """A copy of `tree` per device, stacked on a new leading axis (pmap's layout)."""
  sharding = device_sharding(devices)
  stack = lambda x: np.broadcast_to(np.asarray(x)[None], (len(devices),) + np.shape(x))
  return jax.device_put(jax.tree_util.tree_map(stack, jax.device_get(tree)), sharding)


def unreplicate(tree: Any) -> Any:
  """The first of this process's copies, as numpy arrays.

  It reads a local shard and runs no computation: with several processes, pmap's outputs
  span every process's devices, and indexing them (`x[0]`) is a computation over all of them
  that can interleave with another process's collective (orbax's save barrier) and hang both.
  """
  def first(x):
    if isinstance(x, jax.Array):
      return np.asarray(x.addressable_data(0))[0]
    return np.asarray(x)[0]
  return jax.tree_util.tree_map(first, tree)


def shard(batch: Mapping[str, np.ndarray], num_devices: int) -> dict:
  """[B, ...] -> [num_devices, B / num_devices, ...] (contiguous chunks, global order kept)."""
  def split(x):
    x = np.asarray(x)
    if x.shape[0] % num_devices:
      raise ValueError(f'global batch {x.shape[0]} is not divisible by {num_devices} devices')
    return x.reshape(num_devices, x.shape[0] // num_devices, *x.shape[1:])
  return {k: split(v) for k, v in batch.items()}


COMPILATION_CACHE_MAX_BYTES = 4 << 30  # oldest entries evicted past this


def use_compilation_cache(path: str, max_bytes: int = COMPILATION_CACHE_MAX_BYTES,
                          min_compile_secs: float = 1.0) -> str:
  """Turns on JAX's persistent compilation cache in `path` (a folder the caller owns) for
  this process; returns the folder in use. A long command (reproduce, make_model) trains many
  models of the same shapes, each step function built anew: from the second on, XLA's
  compilation (tens of seconds per train step on 2 CPU cores) is read back instead. An
  explicit JAX_COMPILATION_CACHE_DIR is left as it is."""
  explicit = os.environ.get('JAX_COMPILATION_CACHE_DIR')
  if explicit:
    return explicit
  os.makedirs(path, exist_ok=True)
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_compilation_cache_max_size', int(max_bytes))
  jax.config.update('jax_persistent_cache_min_compile_time_secs', float(min_compile_secs))
  return path
