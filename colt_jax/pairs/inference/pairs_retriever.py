"""colt-pairs' Retriever (beyond the paper): Alg. 2 whose list, under a selection other than
'category', is built from phi's relevance r and same-cluster probability p of the N candidates
(`pairs_cores`, `head_selection.select_from_heads`: coverage, clusters or a DPP) instead of Eq. 6,
each photo named by its predicted group; with an optional relevance model beside phi whose
share a of r mixes into the selections' r (`with_relevance_model`, `relevance_model.py`). It
runs `PairsInferenceSettings` (`train.method_registry` names the two for `colt-pairs`);
under selection 'category' its lists are the paper's (up to ties within float32 rounding).
"""
from __future__ import annotations

import copy
import os
from typing import Callable, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from colt_jax.data import views as views_lib
from colt_jax.inference import retriever
from colt_jax.inference import settings as settings_lib
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.inputs.examples import token_sequences
from colt_jax.pairs import head_selection
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.pairs.inference import pairs_cores
from colt_jax.pairs.inference import pairs_settings
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from colt_jax.train import restore
from colt_jax.util.errors import InputError

RELEVANCE_DIR = 'relevance'  # a model directory's relevance model (`save_beside`)


class PairsRetriever(retriever.Retriever):
  """The paper's Retriever, whose lists under a selection from phi's heads are colt-pairs'
  (module docstring). `relevance_model`, `relevance_mix`: a relevance model beside phi and a,
  its share of r: the selections read r = (1 - a) r_phi + a r_model (a = 0: phi alone)."""

  def __init__(self, classifier: restore.ClassifierBundle,
               reencoder: Optional[restore.ReEncoderBundle] = None,
               settings: Optional[PairsInferenceSettings] = None,
               category_names: Optional[Sequence[str]] = None,
               text_encoder: Optional[dict] = None, source: str = '',
               encoder: Optional[str] = None,
               relevance_model: Optional[relevance_lib.RelevanceModel] = None,
               relevance_mix: float = 0.0):
    self.relevance_model, self.relevance_mix = relevance_model, float(relevance_mix)
    # select_from_heads' groups; -1: none
    self._group_names = tuple(f'group {i}' for i in range(classifier.config.num_images)) + (
        'ungrouped',)
    super().__init__(classifier, reencoder,
                     pairs_settings.from_paper(settings or PairsInferenceSettings()),
                     category_names, text_encoder, source, encoder)

  def _check_settings(self) -> None:
    """Refuses a list made from a head phi was not trained to give (`head_selection`)."""
    head_selection.check_selection(self.classifier, self.settings.selection,
                                   self.relevance_model, self.relevance_mix, self.source)

  @property
  def label_names(self) -> tuple:
    """Eq. 6's label names (the paper's), or under a selection from phi's heads each
    candidate's group ('group i'), then 'ungrouped'."""
    return self._group_names if self.settings.from_heads else super().label_names

  @property
  def named_labels(self) -> int:
    return self.num_images if self.settings.from_heads else super().named_labels

  def with_relevance_model(self, model: Optional[relevance_lib.RelevanceModel],
                           mix: float = 0.0) -> 'PairsRetriever':
    """A copy with `model` beside phi and its share `mix` of r (None, 0: phi alone; g, phi
    and the index shared). The model reads the tokens phi sees: fit it on the features phi
    reads (a store re-encoded by g, when the Retriever has one)."""
    other = copy.copy(self)
    other.relevance_model, other.relevance_mix = model, float(mix)
    other._check_settings()  # pylint: disable=protected-access
    return other

  def check_store(self, store) -> None:
    """The paper's checks, and a relevance model's views against the store's: refused at
    `index`, before any search, when they differ."""
    super().check_store(store)
    if self.relevance_model is not None:
      parts = views_lib.token_parts(store)
      if tuple(self.relevance_model.parts) != tuple(parts):
        raise InputError(f'{self.source or "the model"}: its relevance model reads the views '
                         f'{tuple(self.relevance_model.parts)}, the store '
                         f'{store.meta.get("path", "")} has {parts}')

  # -- the model directory: the relevance model beside phi

  @classmethod
  def model_dir_arguments(cls, model_dir: str, info: dict) -> dict:
    """The relevance model (`relevance/`) and its share a that model.json names."""
    path = os.path.join(model_dir, settings_lib.MODEL_FILE)
    if not isinstance(info.get('relevance_model', False), bool):
      raise InputError(f'{path}: relevance_model must be true or false, got '
                       f'{info["relevance_model"]!r}')
    relevance = (relevance_lib.load(os.path.join(model_dir, RELEVANCE_DIR))
                 if info.get('relevance_model') else None)
    try:
      mix = float(info.get('relevance_mix', 0.0))
    except (TypeError, ValueError):
      raise InputError(f'{path}: relevance_mix must be a number') from None
    return dict(relevance_model=relevance, relevance_mix=mix)

  def save_beside(self, path: Callable[[str], str]) -> dict:
    """Writes the relevance model (if any) to `relevance/`; model.json says whether it is
    there and its share a."""
    if self.relevance_model is not None:
      self.relevance_model.save(path(RELEVANCE_DIR))
    return {'relevance_model': self.relevance_model is not None,
            'relevance_mix': self.relevance_mix}

  # -- the lists from phi's heads

  def _mixed(self, r, tokens, valid) -> np.ndarray:
    return head_selection.mix_relevance(self.relevance_model, self.relevance_mix, r, tokens,
                                        valid)

  def _token_lists(self, tokens: np.ndarray, mask: np.ndarray, scores: np.ndarray) -> tuple:
    """The paper's lists (Eq. 6), or those of the selection from phi's heads: (picks, groups)."""
    if not self.settings.from_heads:
      return super()._token_lists(tokens, mask, scores)
    c = self.classifier
    r, p = pairs_cores.token_heads(c.params, jnp.asarray(tokens), jnp.asarray(mask),
                                   np.float32(self.settings.pair_blend), module=c.module,
                                   space=c.space, members=c.members)
    r = self._mixed(r, tokens, mask[:, 1:])
    return head_selection.select_from_heads(r, p, mask[:, 1:], self.settings)

  def _search_lists(self, queries: np.ndarray, n: int) -> tuple:
    """The paper's search (Eq. 6), or `search_rows` of a batch with
    `head_selection.select_from_heads`: (rows, scores, groups) [B, L]."""
    if not self.settings.from_heads:
      return super()._search_lists(queries, n)
    ix = self._index
    c = self.classifier
    out = pairs_cores.search_heads(c.params, jnp.asarray(queries), ix.chunks,
                                   np.float32(self.settings.pair_blend), module=c.module,
                                   space=c.space, n=n, num_rows=ix.num_rows,
                                   num_images=self.num_images, members=c.members)
    idx, scores, r, p, valid = (np.asarray(a) for a in out)
    if self.relevance_mix:  # the model over the tokens phi saw (padded query rows: none)
      valid = valid & np.any(queries != 0, axis=1)[:, None]
      tokens = np.concatenate([queries[:, None], np.asarray(ix.rows(np.maximum(idx, 0)))], 1)
      r = self._mixed(r, tokens, valid)
    picks, groups = head_selection.select_from_heads(r, p, valid, self.settings)
    safe = np.maximum(picks, 0)
    take = lambda a: np.take_along_axis(a, safe, 1)
    return (np.where(picks >= 0, take(idx), -1), np.where(picks >= 0, take(scores), -np.inf),
            np.where(picks >= 0, take(groups), -1))

  def pool_heads(self, query_feature: np.ndarray, features: np.ndarray,
                 photo_ids: Sequence[str]) -> tuple:
    """What phi's heads say of one query's candidates, as `rank` feeds them to phi (re-encoded,
    ordered by similarity, the first N): (token photo ids [n], r [n] = P(relevant), p [n, n] =
    P(same cluster | both relevant)) by `head_selection.head_probabilities` (the class head's
    reading when phi has no relevance or pair head), p blended with the feature cosine as the
    settings' `pair_blend` says (`head_selection.blend_pairs`), r mixed with the relevance
    model's. What the selections read."""
    query = np.atleast_2d(np.asarray(query_feature, np.float32))
    self.check_dim(query.shape[-1], 'a query')
    self.check_dim(np.shape(features)[-1], 'a candidate photo')
    hat = self.reencode(np.asarray(features, np.float32))
    seqs = token_sequences([TopicCandidates(topic=0, photo_ids=tuple(photo_ids),
                                            flickr_ranks=None, query=query[0], features=hat)],
                           self.num_images)
    c = self.classifier
    r, p = pairs_cores.token_heads(c.params, jnp.asarray(seqs.tokens), jnp.asarray(seqs.mask),
                                   np.float32(self.settings.pair_blend), module=c.module,
                                   space=c.space, members=c.members)
    r = self._mixed(r, seqs.tokens, seqs.mask[:, 1:])
    n = len(seqs.photo_ids[0])
    return (tuple(seqs.photo_ids[0]), np.asarray(r[0, :n], np.float32),
            np.asarray(p[0, :n, :n], np.float32))

