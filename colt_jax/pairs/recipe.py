"""How the trainers and `restore` build colt-pairs' phi and step: the recipe
(`train.recipes`) of `PairsTTCConfig`, which `train.method_registry` names for the method
`colt-pairs`."""
from __future__ import annotations

import functools
from typing import Callable, Optional

from colt_jax.data import features as features_lib
from colt_jax.data import views
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model import augment
from colt_jax.pairs import heads_step
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.pairs.pairs_phi import PairsTokenClassifier
from colt_jax.train import recipes
from colt_jax.util.errors import InputError


class PairsRecipe(recipes.PhiRecipe):
  """phi with colt-pairs' heads and token inputs (`PairsTokenClassifier`), its per-view
  token parts, and the step of its heads' losses (`heads_step.train_step`) when it has a
  head; with none of its options, the paper's phi and Eq. 5's step."""

  def token_parts(self, cfg: PairsTTCConfig, store: features_lib.FeatureStore) -> tuple:
    """((view, size), ...) of the store's views under `view_tokens` or `relational_tokens`
    (`views.token_parts`); () = whole tokens."""
    return views.token_parts(store) if cfg.reads_parts else ()

  def check_parts(self, cfg: PairsTTCConfig, parts: tuple, path: str) -> None:
    if cfg.reads_parts != bool(parts):
      names = '+'.join(f'{name}({size})' for name, size in parts)
      raise InputError(f'{path}: view_tokens/relational_tokens do not match its config\'s '
                       f'token_parts ({names or "none"})')

  def module(self, cfg: PairsTTCConfig, space: LabelSpace,
             parts: tuple = ()) -> PairsTokenClassifier:
    return PairsTokenClassifier(
        **self.phi_fields(cfg, space), query_relative=cfg.query_relative,
        relevance_head=cfg.relevance_weight > 0, pair_head=cfg.pair_weight > 0,
        pair_dim=cfg.pair_dim, token_parts=tuple(size for _, size in parts),
        relational=cfg.relational_tokens, appearance_parts=appearance_parts(cfg, parts),
        appearance_dim=cfg.appearance_dim)

  def feature_dim(self, cfg: PairsTTCConfig, input_rows: int) -> int:
    return input_rows // 2 if cfg.query_relative else input_rows

  def train_step(self, cfg: PairsTTCConfig, num_categories: int,
                 augment_config: Optional[augment.AugmentConfig]) -> Callable:
    """Eq. 5's step for phi without a head; with one, `heads_step.train_step` weighing the
    heads' losses by the config's weights."""
    if not cfg.has_heads:
      return super().train_step(cfg, num_categories, augment_config)
    return functools.partial(heads_step.train_step, num_categories=num_categories,
                             label_scheme=cfg.label_scheme, num_groups=cfg.num_groups,
                             augment_config=augment_config, dropout=cfg.dropout > 0,
                             class_weight=cfg.class_weight,
                             relevance_weight=cfg.relevance_weight,
                             pair_weight=cfg.pair_weight)


def appearance_parts(cfg: PairsTTCConfig, parts: tuple) -> tuple:
  """Indices of the official descriptors among `parts` under `appearance_tokens` (else ())."""
  if not cfg.appearance_tokens:
    return ()
  out = tuple(i for i, (name, _) in enumerate(parts) if name in views.ALL_DESCRIPTORS)
  if not out:
    raise InputError(f'--appearance_tokens: the feature store has no official descriptor '
                     f'parts (its parts: {", ".join(n for n, _ in parts) or "none"}); use a '
                     'view store with descriptors')
  return out


PAIRS_RECIPE = PairsRecipe()  # method `colt-pairs` (`train.method_registry`)
