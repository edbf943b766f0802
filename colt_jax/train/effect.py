"""g's effect size: how much a trained g (Eq. 1) changes the features and the candidates the
later stages see."""
from __future__ import annotations

import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.train import restore


def reencoder_effect(split, store: features_lib.FeatureStore, scl_checkpoint: str,
                     protocol: str = 'pool', k: int = 20) -> dict:
  """How much g changes what later stages see: {'relative_change': mean ||beta g(h)|| / ||h||
  over the store's photos (Eq. 1), 'top_k_changed': the fraction of the split's topics whose
  top-k by query similarity holds other photos with h^ than with h, 'k'}."""
  reencoder = restore.load_reencoder(scl_checkpoint)
  raw = candidates_lib.build_candidates(split, store, protocol)
  hat = candidates_lib.build_candidates(split, restore.reencode_store(store, reencoder),
                                        protocol)
  changed = [set(_top(a, k)) != set(_top(b, k)) for a, b in zip(raw, hat)]
  return {'relative_change': reencoder.relative_change(np.asarray(store.photos)),
          'top_k_changed': float(np.mean(changed)) if changed else 0.0, 'k': k}


def _top(cands, k: int) -> list:
  """The ids of the `k` candidates most similar to the query (ties: candidate order), as
  top-k ranks them; the pool protocol's candidates come in Flickr order, not by similarity."""
  sims = np.asarray(cands.features) @ np.asarray(cands.query)
  order = np.lexsort((np.arange(len(sims)), -sims))[:k]
  return [cands.photo_ids[i] for i in order]
