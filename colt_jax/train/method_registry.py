"""The methods colt_jax trains and runs, by name: one explicit registry of import paths.

Every file that a trainer or a model directory saves records the method that wrote it (a
checkpoint's config and config.json, inference.json, model.json: `"method": "colt"`), and
whoever reads the file finds the method's classes here by that name, importing their modules
by path (`importlib`, as big_vision imports `big_vision.models.<config.model_name>`): no
installed entry points, no import of a method before it is named, no guess from a file's
fields. A method's classes say their name back (`METHOD`, `method_of`).

`colt` is the paper's (TTCConfig, phi of Eq. 4 trained by Eq. 5's step, Alg. 2 with Eq. 6);
`colt-pairs` is this repository's extension (colt_jax/pairs/: query-relative tokens,
relevance and pair heads, lists from them). g (SCL, Sec. 3.2) is the paper's in both.

Files written before methods were recorded hold no "method": `saved_method` reads theirs, the
one place that does (docs/DESIGN.md, "Methods by name").
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Iterable, Mapping

from colt_jax.util.errors import InputError

PAPER = 'colt'
PAIRS = 'colt-pairs'
FIELD = 'method'  # the key of a saved file that names its method


@dataclasses.dataclass(frozen=True)
class Method:
  """Where a method's parts are: 'module:attribute' import paths."""
  config: str  # its TTC config class (TTCConfig or a subclass)
  recipe: str  # how the trainers and restore build its phi and step (`recipes.PhiRecipe`)
  settings: str  # its inference settings class (InferenceSettings or a subclass)
  retriever: str  # the Retriever class that runs those settings


METHODS = {
    PAPER: Method(config='colt_jax.train.configs:TTCConfig',
                  recipe='colt_jax.train.recipes:PAPER_RECIPE',
                  settings='colt_jax.inference.settings:InferenceSettings',
                  retriever='colt_jax.inference.retriever:Retriever'),
    PAIRS: Method(config='colt_jax.pairs.config:PairsTTCConfig',
                  recipe='colt_jax.pairs.recipe:PAIRS_RECIPE',
                  settings='colt_jax.pairs.inference.pairs_settings:PairsInferenceSettings',
                  retriever='colt_jax.pairs.inference.pairs_retriever:PairsRetriever'),
}


def check(name: Any, where: str = '') -> str:
  """`name` when it names a method; else an InputError, one line naming `where` (the file)
  and its field."""
  if not isinstance(name, str) or name not in METHODS:
    prefix = f'{where}: ' if where else ''
    raise InputError(f'{prefix}field {FIELD} is {name!r}, not a method of colt_jax (one of '
                     f'{", ".join(METHODS)})')
  return name


def resolve(name: str, part: str, where: str = '') -> Any:
  """The object `part` ('config', 'recipe', 'settings' or 'retriever') of method `name`,
  its module imported by path."""
  path = getattr(METHODS[check(name, where)], part)
  module, _, attribute = path.partition(':')
  return getattr(importlib.import_module(module), attribute)


def config_class(name: str, where: str = '') -> type:
  """The TTC config class of method `name`."""
  return resolve(name, 'config', where)


def recipe(name: str, where: str = '') -> Any:
  """The recipe (`recipes.PhiRecipe`) of method `name`."""
  return resolve(name, 'recipe', where)


def settings_class(name: str, where: str = '') -> type:
  """The inference settings class of method `name`."""
  return resolve(name, 'settings', where)


def retriever_class(name: str, where: str = '') -> type:
  """The Retriever class of method `name`."""
  return resolve(name, 'retriever', where)


def method_of(obj: Any) -> str:
  """The method of a TTC config or inference settings: its class's `METHOD`."""
  return check(getattr(type(obj), 'METHOD', None), type(obj).__name__)


def saved_method(record: Mapping[str, Any], fields: Iterable[str], paper_fields: Iterable[str],
                 where: str) -> str:
  """The method of a saved file `record` (`where`: its path): its "method" field when it has
  one (checked: an unknown name is one line naming the file and the field).

  The one place that reads the method of a file written before methods were recorded (no
  "method"): configs and settings were saved flat, those of colt-pairs' classes
  (PairsTTCConfig, PairsInferenceSettings: the command lines', the reproduction's and the
  evaluation's; query_relative always saved) with fields beyond the paper's, those of the
  paper's classes with the paper's alone. So a file whose `fields` (its config's or settings'
  names) go beyond the paper's (`paper_fields`) is colt-pairs', one within them the paper's:
  the class it was saved from, read as before (the same classes, the same outputs)."""
  if FIELD in record:
    return check(record[FIELD], where)
  return PAIRS if set(fields) - set(paper_fields) else PAPER
