"""How a TTC config becomes phi and its train step: the paper's recipe, which a method beyond
the paper subclasses.

`PhiRecipe` is the paper's (method `colt`): phi of Eq. 4 (`model.phi.TokenClassifier`) over
whole tokens, trained by Eq. 5's step (`ttc_step.train_step`). A method beyond the paper
subclasses `TTCConfig` with its fields (its class's `METHOD` names it) and `PhiRecipe` with its
phi, token parts and step; `method_registry` names where both are. The trainers, `restore` and
`modules` find a config's recipe by its method (`recipe_for`), importing it by path, so the
paper's code never imports such a method.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from colt_jax.data import features as features_lib
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model import augment
from colt_jax.model.phi import TokenClassifier
from colt_jax.train import configs
from colt_jax.train import method_registry
from colt_jax.train import ttc_step
from colt_jax.util.errors import InputError


class PhiRecipe:
  """The paper's phi (Eq. 4) over whole tokens, trained by Eq. 5's step."""

  def token_parts(self, cfg: configs.TTCConfig, store: features_lib.FeatureStore) -> tuple:
    """((view, size), ...) of the parts of a token that phi reads apart (saved with phi as
    `token_parts`); () = whole tokens."""
    del cfg, store
    return ()

  def check_parts(self, cfg: configs.TTCConfig, parts: tuple, path: str) -> None:
    """Refuses token parts saved with phi that the phi of `cfg` does not read."""
    del cfg
    if parts:
      raise InputError(f'{path}: its config names token_parts, but its phi reads whole tokens')

  def phi_fields(self, cfg: configs.TTCConfig, space: LabelSpace) -> dict:
    """The fields of the paper's phi (`TokenClassifier`) under `cfg`."""
    return dict(num_classes=space.num_classes, num_layers=cfg.num_layers,
                num_heads=cfg.num_heads, model_dim=cfg.model_dim, mlp_ratio=cfg.mlp_ratio,
                dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                max_len=max(512, cfg.num_images + 1),
                position_embedding=cfg.position_embedding)

  def module(self, cfg: configs.TTCConfig, space: LabelSpace, parts: tuple = ()) -> Any:
    """phi under `cfg`, classifying into `space`, reading tokens of `parts` (`token_parts`)."""
    del parts
    return TokenClassifier(**self.phi_fields(cfg, space))

  def feature_dim(self, cfg: configs.TTCConfig, input_rows: int) -> int:
    """d of the features phi reads, from the rows of its input projection."""
    del cfg
    return input_rows

  def train_step(self, cfg: configs.TTCConfig, num_categories: int,
                 augment_config: Optional[augment.AugmentConfig]) -> Callable:
    """The pure step `(state, batch, rng) -> (state, metrics)` of `cfg`: Eq. 5's."""
    return functools.partial(ttc_step.train_step, num_categories=num_categories,
                             label_scheme=cfg.label_scheme, num_groups=cfg.num_groups,
                             augment_config=augment_config, dropout=cfg.dropout > 0)


PAPER_RECIPE = PhiRecipe()  # method `colt` (`method_registry`)


def recipe_for(cfg: configs.TTCConfig) -> PhiRecipe:
  """The recipe of `cfg`'s method (its class's `METHOD`, found in `method_registry`): the
  paper's for a TTCConfig."""
  return method_registry.recipe(method_registry.method_of(cfg))
