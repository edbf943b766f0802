"""colt-pairs' lists from phi's heads (beyond the paper): the relevance r and same-cluster
probability p of each candidate (`head_probabilities`, from phi's relevance and pair heads or,
without them, from its class head), p blended with the photos' cosine (`blend_pairs`), and the
list built from them by coverage, clusters or a DPP (`select_from_heads`, over
`colt_jax.pairs.selection`), with each photo's predicted group in place of a category.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.inputs.labels import LabelSpace
from colt_jax.baselines import greedy
from colt_jax.pairs import selection
from colt_jax.util.errors import InputError

RULES = ('coverage', 'cluster', 'dpp')  # the selections made from phi's heads
RULES_TEXT = ', '.join(RULES[:-1]) + ' or ' + RULES[-1]


def head_probabilities(outputs, space: LabelSpace):
  """(r [B, N], p [B, N, N]) of the N image tokens from phi's outputs (`with_heads=True`):
  r_i = P(image i is relevant), p_ij = P(i and j are in the same cluster | both relevant).

  From the relevance and pair heads where phi has them (the colt-pairs method: sigmoid of
  their logits); otherwise from the class head (Eq. 4's softmax P_i over LabelSpace): r_i =
  sum_{c < V} P_i(c), and p_ij = sum_{c < V} P_i(c) P_j(c) / (r_i r_j), the probability that
  two relevant images fall in one class (in [0, 1])."""
  probs = jax.nn.softmax(jnp.asarray(outputs['class'], jnp.float32)[:, 1:], -1)
  cats = probs[..., :space.num_categories]
  class_r = jnp.sum(cats, -1)
  if 'relevance' in outputs:
    r = jax.nn.sigmoid(jnp.asarray(outputs['relevance'], jnp.float32)[:, 1:])
  else:
    r = class_r
  if 'pair' in outputs:
    p = jax.nn.sigmoid(jnp.asarray(outputs['pair'], jnp.float32)[:, 1:, 1:])
  else:
    joint = jnp.einsum('bic,bjc->bij', cats, cats)
    p = jnp.clip(joint / jnp.maximum(class_r[:, :, None] * class_r[:, None, :], 1e-12), 0, 1)
  return r, p


def blend_pairs(p, tokens, blend):
  """b p_ij + (1 - b) max(cos_ij, 0) over the image tokens (tokens [B, 1+N, d], the query
  first): phi's pair probabilities [B, N, N] blended with the photos' feature cosine (padding:
  cosine 0). b = 1 returns p unchanged, without computing the cosines (`lax.cond`: one
  compiled program for every b, the N x N x d product only where b < 1)."""

  def blended():
    images = jnp.asarray(tokens, jnp.float32)[:, 1:]
    norm = jnp.maximum(jnp.linalg.norm(images, axis=-1, keepdims=True), 1e-12)
    unit = images / norm
    cos = jnp.maximum(jnp.einsum('bid,bjd->bij', unit, unit), 0.0)
    return (blend * p + (1.0 - blend) * cos).astype(p.dtype)

  return jax.lax.cond(blend < 1.0, blended, lambda: p)


def select_from_heads(r, p, valid, settings) -> tuple:
  """The lists of `settings.selection` (an `InferenceSettings`) 'coverage' or 'cluster' from
  (r [B, N], p [B, N, N], valid [B, N]) (`head_probabilities`): (picks [B, L] positions among the N images, -1 =
  none; groups [B, N] each image's predicted group, -1 = none).

  coverage: `greedy.expected_coverage` (w = `coverage_weight`, L picks); an image's group
  is the pick-order index of the first listed photo j with p_ij > 0.5 (itself, if none
  before it). dpp: `selection.dpp_select` (theta = `selection_theta`), groups as coverage's.
  cluster: `selection.cluster_select` (threshold `cluster_threshold`, X = `per_category`) over
  the images with r > 0.5, then the other valid images by r; the group is cluster_select's
  (none for the images listed after it).
  """
  r, p, valid = np.asarray(r, np.float32), np.asarray(p, np.float32), np.asarray(valid, bool)
  length, (b, n) = settings.list_length, r.shape
  if settings.selection in ('coverage', 'dpp'):
    if settings.selection == 'dpp':
      picks = selection.dpp_select(r, p, valid, theta=settings.selection_theta, k=length).indices
    else:
      picks = greedy.expected_coverage_batch(r, p, valid, weight=settings.coverage_weight,
                                                k=length).indices
    safe = np.maximum(picks, 0)
    together = np.take_along_axis(p, np.broadcast_to(safe[:, None, :], (b, n, length)), 2)
    match = ((together > 0.5) | (safe[:, None, :] == np.arange(n)[None, :, None]))
    match &= (picks >= 0)[:, None, :]
    groups = np.where(match.any(-1), np.argmax(match, -1), -1)
    return picks, groups
  picks = np.full((b, length), -1, np.int64)
  groups = np.full((b, n), -1, np.int64)
  for i in range(b):
    relevant = valid[i] & (r[i] > 0.5)
    grouped = selection.cluster_select(r[i], p[i], relevant, threshold=settings.cluster_threshold,
                                       per_cluster=settings.per_category, k=length)
    head = grouped.indices[grouped.indices >= 0]
    groups[i, head] = grouped.groups[:len(head)]
    rest = np.flatnonzero(valid[i] & ~relevant)
    rest = rest[np.argsort(-r[i, rest], kind='stable')]
    order = np.concatenate([head, rest])[:length]
    picks[i, :len(order)] = order
  return picks, groups


def check_selection(classifier, selection_rule: str, relevance_model, relevance_mix: float,
                    source: str) -> None:
  """Refuses a list made from a head phi was not trained to give: `classifier` (a
  `restore.ClassifierBundle`) under `selection_rule` ('category' = Eq. 6, or one of RULES),
  with `relevance_model` beside it at share `relevance_mix` of r; `source` names the model."""
  cfg, who = classifier.config, source or 'the model'
  if not 0.0 <= relevance_mix <= 1.0:
    raise InputError(f'{who}: relevance_mix {relevance_mix:g} is a share of r, in [0, 1]')
  if relevance_mix > 0 and (relevance_model is None or selection_rule == 'category'):
    raise InputError(f'{who}: relevance_mix {relevance_mix:g} mixes a relevance model into '
                     f'the r of --selection={RULES_TEXT}: '
                     + ('the model has none' if relevance_model is None
                        else f'not {selection_rule}'))
  if (relevance_model is not None and classifier.parts
      and tuple(relevance_model.parts) != tuple(classifier.parts)):
    raise InputError(f'{who}: the relevance model reads the views {relevance_model.parts}, '
                     f'phi {classifier.parts}')
  if classifier.members and selection_rule == 'category':
    raise InputError(f'{who}: an ensemble of {classifier.members} phi averages their relevance '
                     f'and pair heads: use --selection={RULES_TEXT}')
  class_weight = getattr(cfg, 'class_weight', 1.0)  # the paper's config trains the class head
  if class_weight == 0 and selection_rule == 'category':
    raise InputError(f'{who}: phi was trained without its class head (--class_weight=0): '
                     f'Eq. 6 needs it; use --selection={RULES_TEXT}')
  if (class_weight == 0 and selection_rule != 'category'
      and not getattr(classifier.module, 'relevance_head', False)):
    raise InputError(f'{who}: phi has neither a trained class head nor a relevance head to '
                     'rank by')


def mix_relevance(model, mix: float, r, tokens, valid) -> np.ndarray:
  """phi's r [B, N] mixed with the relevance `model`'s over the token sequences [B, 1 + N, d]:
  (1 - a) r + a r_model with a = `mix` (r itself when a is 0)."""
  if not mix:
    return r
  model_r = model.predict_tokens(np.asarray(tokens), np.asarray(valid))
  return ((1.0 - mix) * np.asarray(r, np.float32) + mix * model_r).astype(np.float32)
