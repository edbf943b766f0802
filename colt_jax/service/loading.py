"""A store and a model directory into an indexed Retriever, as `experiments/search.py` loads
them: the model refuses a store of another dimension or encoder (one line naming both), and
the candidate engine is built over the store's re-encoded photos."""
from __future__ import annotations

from colt_jax.data import features
from colt_jax.engines import approximate as engines
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError

def load(store_dir: str, model_dir: str, engine: engines.EngineSpec) -> tuple:
  """(the Retriever of `model_dir` indexed over the store at `store_dir` with `engine`, the
  store)."""
  if not store_dir or not model_dir:
    raise InputError('--store and --model are required')
  store = features.load(store_dir)
  colt = retriever.Retriever.from_pretrained(model_dir).index(store, engine)
  return colt, store
