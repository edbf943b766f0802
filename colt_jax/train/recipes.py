"""How a TTC config becomes phi and its train step: the paper's recipe, and where a method
beyond the paper registers its own.

`PhiRecipe` is the paper's: phi of Eq. 4 (`model.phi.TokenClassifier`) over whole tokens,
trained by Eq. 5's step (`ttc_step.train_step`). A method beyond the paper subclasses
`TTCConfig` with its fields and `PhiRecipe` with its phi, token parts and step, and registers
the pair (`register`, when its module is imported); the package declares that module as an
entry point of the group `colt_jax.recipes` (pyproject.toml), which `config_class` imports
before reading a saved config, so that a checkpoint restores without its method having been
imported first. The trainers, `restore` and `modules` find a config's recipe by its class
(`recipe_for`) and a saved config's class by its fields (`config_class`), so the paper's code
never imports such a method.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional, Type

from colt_jax.data import features as features_lib
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model import augment
from colt_jax.model.phi import TokenClassifier
from colt_jax.train import configs
from colt_jax.train import ttc_step
from colt_jax.util import plugins
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


_RECIPES = {configs.TTCConfig: PhiRecipe()}
ENTRY_POINT_GROUP = 'colt_jax.recipes'


def load_entry_points() -> None:
  """Imports, once, each module that installed packages declare in the group
  `colt_jax.recipes` (each registers its recipe when imported; `util.plugins`)."""
  plugins.load_group(ENTRY_POINT_GROUP)


def register(config_class: Type[configs.TTCConfig], recipe: PhiRecipe) -> None:
  """Makes `recipe` the one of `config_class` (a subclass of TTCConfig) and its subclasses."""
  if not issubclass(config_class, configs.TTCConfig):
    raise TypeError(f'{config_class.__name__} is not a TTCConfig')
  _RECIPES[config_class] = recipe


def recipe_for(cfg: configs.TTCConfig) -> PhiRecipe:
  """The recipe of `cfg`'s class (the paper's for a TTCConfig)."""
  for cls in type(cfg).__mro__:
    if cls in _RECIPES:
      return _RECIPES[cls]
  raise TypeError(f'{type(cfg).__name__} is not a TTCConfig')


def added_defaults() -> dict:
  """{field: default} of the fields that registered config classes add to TTCConfig: a TTC
  config saved without one of them holds its default (a run resumes across classes,
  `loop.check_resumable`)."""
  paper = {f.name for f in dataclasses.fields(configs.TTCConfig)}
  return {f.name: f.default for cls in _RECIPES for f in dataclasses.fields(cls)
          if f.name not in paper}


def config_class(saved: Mapping[str, Any]) -> Type[configs.TTCConfig]:
  """The config class a saved TTC config (its fields; a checkpoint's config without the
  trainer's records) is read as: the registered class with the fewest fields that has every
  saved one, TTCConfig when none has them all (`configs.from_dict` then names the unknown).

  The one place where a saved config finds its class. Configs are saved flat (`saved_dict`),
  and those saved before the paper's fields had a class of their own hold a method's fields
  too: they are read as the registered class that has them, whose phi holds their parameters
  under the names they were saved with (docs/DESIGN.md, colt-pairs). A saved config with
  fields beyond the paper's first imports the installed recipes (`load_entry_points`)."""
  names = set(saved)
  if not names <= {f.name for f in dataclasses.fields(configs.TTCConfig)}:
    load_entry_points()
  fits = [cls for cls in _RECIPES if names <= {f.name for f in dataclasses.fields(cls)}]
  return min(fits, key=lambda cls: len(dataclasses.fields(cls)), default=configs.TTCConfig)
