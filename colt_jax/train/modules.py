"""g and phi built from their configs: the flax modules a trainer initialises and a restored
checkpoint fills (`train/restore.py`)."""
from __future__ import annotations

from colt_jax.data import features as features_lib
from colt_jax.data import views
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model.phi import TokenClassifier
from colt_jax.model.reencoder import ReEncoder
from colt_jax.pairs.phi import PairsTokenClassifier
from colt_jax.train import configs
from colt_jax.util.errors import InputError


def reencoder_module(cfg: configs.SCLConfig) -> ReEncoder:
  return ReEncoder(beta=cfg.beta, hidden_dim=cfg.hidden_dim, num_layers=cfg.mlp_layers,
                   zero_init=cfg.zero_init)


def token_parts(cfg: configs.TTCConfig, store: features_lib.FeatureStore) -> tuple:
  """((view, size), ...) of phi's per-view token parts under `cfg` (() without
  `view_tokens` or `relational_tokens`: one projection of the whole token)."""
  return views.token_parts(store) if cfg.view_tokens or cfg.relational_tokens else ()


def classifier_module(cfg: configs.TTCConfig, space: LabelSpace,
                      parts: tuple = ()) -> TokenClassifier:
  """The paper's phi, or colt-pairs' extension of it when `cfg` asks for heads or token
  parts (`PairsTokenClassifier`: the same parameters plus its own)."""
  paper = dict(num_classes=space.num_classes, num_layers=cfg.num_layers,
               num_heads=cfg.num_heads, model_dim=cfg.model_dim, mlp_ratio=cfg.mlp_ratio,
               dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
               max_len=max(512, cfg.num_images + 1),
               position_embedding=cfg.position_embedding, query_relative=cfg.query_relative)
  pairs = dict(relevance_head=cfg.relevance_weight > 0, pair_head=cfg.pair_weight > 0,
               pair_dim=cfg.pair_dim, token_parts=tuple(size for _, size in parts),
               relational=cfg.relational_tokens, appearance_parts=appearance_parts(cfg, parts),
               appearance_dim=cfg.appearance_dim)
  if not any(pairs.values()):
    return TokenClassifier(**paper)
  return PairsTokenClassifier(**paper, **pairs)


def appearance_parts(cfg: configs.TTCConfig, parts: tuple) -> tuple:
  """Indices of the official descriptors among `parts` under `appearance_tokens` (else ())."""
  if not cfg.appearance_tokens:
    return ()
  out = tuple(i for i, (name, _) in enumerate(parts) if name in views.ALL_DESCRIPTORS)
  if not out:
    raise InputError(f'--appearance_tokens: the feature store has no official descriptor '
                     f'parts (its parts: {", ".join(n for n, _ in parts) or "none"}); use a '
                     'view store with descriptors')
  return out
