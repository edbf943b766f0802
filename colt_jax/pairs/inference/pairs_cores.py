"""colt-pairs' jitted cores over the paper's (`inference.cores`): phi's relevance r and
same-cluster probability p of the N candidates (`heads`: `head_selection.head_probabilities`,
p blended), over a given pool (`token_heads`) or after exact search of an indexed collection
(`search_heads`)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from colt_jax.inference import cores
from colt_jax.inputs.labels import LabelSpace
from colt_jax.pairs import head_selection
from colt_jax.pairs import pairs_phi


def heads(params, tokens, mask, blend, *, module, space: LabelSpace, members: int = 0):
  """(r, p) of phi's heads (`head_probabilities`), p blended (`blend_pairs`); an ensemble's
  (`members` > 0: params stacked on a leading axis) are its members' r and p averaged."""

  def one(member_params):
    # every head's outputs: the class head's alone for the paper's phi
    return head_selection.head_probabilities(
        cores.apply_phi(member_params, tokens, mask, module=module,
                        outputs=pairs_phi.head_outputs), space)

  if members:
    r, p = jax.vmap(one)(params)
    r, p = jnp.mean(r, 0), jnp.mean(p, 0)
  else:
    r, p = one(params)
  return r, head_selection.blend_pairs(p, tokens, blend)


token_heads = jax.jit(heads, static_argnames=('module', 'space', 'members'))


@functools.partial(jax.jit, static_argnames=('module', 'space', 'n', 'num_rows', 'num_images',
                                             'members'))
def search_heads(params, queries, chunks, blend, *, module, space, n, num_rows, num_images,
                 members=0):
  """`cores.search_and_rank`'s search and phi, for `select_from_heads`: (rows [B, N] of the
  collection (-1 = none), scores [B, N], r [B, N], p [B, N, N] (`blend_pairs`), valid [B, N])."""
  tokens, mask, scores, idx = cores.search_tokens(queries, chunks, n, num_rows, num_images)
  r, p = heads(params, tokens, mask, blend, module=module, space=space, members=members)
  return idx, scores, r, p, mask[:, 1:]
