"""Which model, if any, searches a store: experiments/search.py's and serve.py's --model,
--store and --method(s) into what they search with.

With --model, its Retriever (a model that does not fit the store is refused, one line naming
both). Without it, the recommended model `make model` writes when it is there and fits the
store; otherwise none: a `StoreSearch` over the store's own features, which the model-free
methods rank (`evaluation.model_free`). colt asked for without a model that fits is one line
saying, for the store's encoder, what works now and how to get a learned model.
"""
from __future__ import annotations

from typing import Callable, Optional

from colt_jax.data import features
from colt_jax.engines import approximate as engines
from colt_jax.evaluation import model_free
from colt_jax.inference import default_model
from colt_jax.inference import retriever
from colt_jax.inference import store_search
from colt_jax.util.errors import InputError


def load(model: str, store: str, colt: Optional[bool], engine: engines.EngineSpec,
         log: Callable[[str], None] = print, flag: str = '--method',
         check: Optional[Callable] = None) -> tuple:
  """(source, store, store_dir, model_dir) for --model `model`, --store `store` and `engine`:
  source an indexed Retriever (model_dir its directory) or, without a model, a StoreSearch
  (model_dir ''). `colt`: True when colt is asked for (a model is required), False when only
  model-free methods are (the recommended model is not loaded), None when the method is
  left to the default (colt when a model fits). `log`: where a note goes when the
  recommended model does not fit the store; `flag`: the flag that asked for colt, for
  messages; `check(store, store_dir)`: the caller's checks of the store, before any model
  loads."""
  model_dir, store_dir = default_model.search_inputs(model, store)
  found = features.load(store_dir)
  store_search.check_searchable(found, store_dir)
  if check is not None:
    check(found, store_dir)
  encoder = str(found.meta.get('encoder', ''))
  if model_dir and (model or colt is not False):
    loaded = retriever.Retriever.from_pretrained(model_dir)
    try:
      loaded.check_store(found)
    except InputError as e:
      if model:
        raise  # the model asked for does not fit: refused, naming both
      if colt:
        raise InputError(f'{flag}: colt needs a CoLT model that fits the store: {e}; '
                         f'{model_free.no_model_help(encoder)}') from None
      log(f'note: the recommended model does not fit this store ({e}); searching without a '
          f'model: {model_free.learned_model_hint(encoder)}')
    else:
      return loaded.index(found, engine), found, store_dir, model_dir
  if colt:
    raise InputError(f'{flag}: colt needs a CoLT model that fits the store, and no --model is '
                     f'given (nor is the recommended model {default_model.RECOMMENDED_MODEL} '
                     f'there); {model_free.no_model_help(encoder)}')
  return store_search.StoreSearch.from_store(found, engine), found, store_dir, ''
