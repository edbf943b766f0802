"""A store, and a model directory when there is one, into what the service serves, as
`experiments/search.py` loads them: with a model, its Retriever indexed over the store (a
model refuses a store of another dimension or encoder, one line naming both); without one, a
`StoreSearch` over the store's own features (the model-free methods). The candidate engine is
built over the photos the methods rank."""
from __future__ import annotations

from colt_jax.data import features
from colt_jax.engines import approximate as engines
from colt_jax.inference import retriever
from colt_jax.inference import store_search
from colt_jax.util.errors import InputError


def load(store_dir: str, model_dir: str, engine: engines.EngineSpec) -> tuple:
  """(the Retriever of `model_dir` indexed over the store at `store_dir` with `engine`, or
  without `model_dir` a `StoreSearch` over the store, the store)."""
  if not store_dir:
    raise InputError('--store is required')
  store = features.load(store_dir)
  store_search.check_searchable(store, store_dir)
  if not model_dir:
    return store_search.StoreSearch.from_store(store, engine), store
  colt = retriever.Retriever.from_pretrained(model_dir).index(store, engine)
  return colt, store
