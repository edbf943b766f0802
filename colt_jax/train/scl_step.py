"""The SCL train step: re-encode (Eq. 1), loss (Eq. 2), Adam update, EMA bank update (Eq. 3)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from colt_jax.model import scl
from colt_jax.train import state as state_lib


def train_step(state: state_lib.TrainState, batch: dict, rng: jax.Array, *, tau: float, alpha: float,
               use_pair2: bool = True, use_pair4: bool = True, axis_name: str = 'batch'):
  """One data-parallel SCL step: `(state, batch, rng) -> (state, metrics)`; run under pmap.

  SCL draws no random numbers inside the step (`rng` is accepted for the common loop
  signature); batches are sampled on the host as a function of (seed, step).

  The loss is the mean of Eq. 2 over the global batch's examples with a relevant image:
  every device differentiates its local sum and the sums and counts are `psum`-ed, so the
  update equals a single-device step on the whole batch. The bank is updated with the images
  of every device (`all_gather` in global order), so all replicas hold the same bank.
  """
  del rng

  def local_sum(params):
    images = state.apply_fn({'params': params}, batch['images'])
    _, aux = scl.scl_loss(batch['query'], images, batch['relevant'], batch['categories'],
                          batch['valid'], state.bank, tau, use_pair2=use_pair2,
                          use_pair4=use_pair4)
    return jnp.sum(aux['per_example']), (aux, images)

  (loss_sum, (aux, images)), grads = jax.value_and_grad(local_sum, has_aux=True)(state.params)
  count = jnp.maximum(jax.lax.psum(aux['num_examples'], axis_name), 1)
  grads = jax.tree_util.tree_map(lambda g: jax.lax.psum(g, axis_name) / count, grads)
  new_state = state.apply_gradients(grads=grads)
  gather = functools.partial(jax.lax.all_gather, axis_name=axis_name, tiled=True)
  relevant = batch['relevant'] & batch['valid']
  bank = scl.update_bank(state.bank, gather(jax.lax.stop_gradient(images)),
                         gather(batch['categories']), gather(relevant), alpha)
  new_state = new_state.replace(bank=bank)
  # How far the prototypes moved this step (Eq. 3): the mean L2 change of the updated ones.
  moved = jnp.linalg.norm(bank - state.bank, axis=-1)
  updated = moved > 0
  metrics = {'loss': jax.lax.psum(loss_sum, axis_name) / count,
             'bank_drift': jnp.sum(moved) / jnp.maximum(jnp.sum(updated), 1),
             'bank_updated': jnp.sum(updated),
             'relevant': jax.lax.psum(aux['num_relevant'], axis_name),
             'irrelevant': jax.lax.psum(aux['num_irrelevant'], axis_name)}
  return new_state, metrics
