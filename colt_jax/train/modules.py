"""g and phi built from their configs: the flax modules a trainer initialises and a restored
checkpoint fills (`train/restore.py`)."""
from __future__ import annotations

from typing import Any

from colt_jax.inputs.labels import LabelSpace
from colt_jax.model.reencoder import ReEncoder
from colt_jax.train import configs
from colt_jax.train import recipes


def reencoder_module(cfg: configs.SCLConfig) -> ReEncoder:
  return ReEncoder(beta=cfg.beta, hidden_dim=cfg.hidden_dim, num_layers=cfg.mlp_layers,
                   zero_init=cfg.zero_init)


def classifier_module(cfg: configs.TTCConfig, space: LabelSpace, parts: tuple = ()) -> Any:
  """phi under `cfg`: the paper's TokenClassifier (Eq. 4) for a TTCConfig, a method's own for
  its subclass of TTCConfig (`recipes`); `parts`: the token parts it reads apart."""
  return recipes.recipe_for(cfg).module(cfg, space, parts)
