"""CoLT's inference settings (k and X of Eq. 6, the list length, the relevance threshold, the
fill rule) and the files that hold them: beside phi in its trainer workdir
(`<ttc workdir>/inference.json`: `save_settings`, `saved_settings`, `checkpoint_settings`) and
in a model directory's model.json (`read_model_info`).

A method beyond the paper subclasses `InferenceSettings` with its fields and registers the
class (`register`, when its module is imported); the package declares that module an entry
point of the group `colt_jax.inference` (pyproject.toml), which `settings_class` imports before
reading saved settings with fields beyond the paper's. Settings are saved flat: a file finds
its class by its fields (`settings_class`), as a saved TTC config does (`train.recipes`).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, NamedTuple, Optional, Type

from colt_jax.train import configs
from colt_jax.util import outputs
from colt_jax.util.errors import ConfigError
from colt_jax.util import plugins
from colt_jax.util.errors import InputError

MODEL_FORMAT = 'colt_jax.model/1'
MODEL_FILE = 'model.json'
SETTINGS_FORMAT = 'colt_jax.inference/1'
SETTINGS_FILE = 'inference.json'  # beside phi in its trainer workdir (`save_settings`)
LIST_LENGTH = 50  # the official task ranks up to 50 photos per topic


@dataclasses.dataclass(frozen=True)
class InferenceSettings:
  """How phi's labels become a ranked list (Eq. 6 and our choices around it)."""
  k: int = configs.option(20, 'The k of Eq. 6: the diverse head of the list.', low=1,
                          high=LIST_LENGTH)
  per_category: int = configs.option(1, 'X of Eq. 6: images per predicted category.', low=1)
  list_length: int = configs.option(LIST_LENGTH, 'Photos per list: Eq. 6\'s k, then its '
                                    'continuation (postprocess).', low=1, high=LIST_LENGTH)
  irrelevant_threshold: float = configs.option(
      0.0, 'An image is irrelevant only when phi gives that class more than this probability '
      '(0 = argmax, Eq. 4).', low=0.0, high=1.0)
  fill_excluded: bool = configs.option(False, 'Let images phi labels irrelevant fill Eq. 6\'s '
                                       'k slots.')

  def __post_init__(self):
    configs.validate(self)
    if self.per_category > self.k:
      raise ConfigError(f'--per_category ({self.per_category}) must be <= --k '
                                f'({self.k})')


_CLASSES = [InferenceSettings]
ENTRY_POINT_GROUP = 'colt_jax.inference'


def register(settings_class: Type[InferenceSettings]) -> None:
  """Makes saved settings with the fields of `settings_class` (a subclass of
  InferenceSettings) readable as it (`settings_class`)."""
  if not issubclass(settings_class, InferenceSettings):
    raise TypeError(f'{settings_class.__name__} is not an InferenceSettings')
  if settings_class not in _CLASSES:
    _CLASSES.append(settings_class)


def load_entry_points() -> None:
  """Imports, once, each module that installed packages declare in the group
  `colt_jax.inference` (each registers its settings, and its Retriever, when imported;
  `util.plugins`)."""
  plugins.load_group(ENTRY_POINT_GROUP)


def _names(cls) -> set:
  return {f.name for f in dataclasses.fields(cls)}


def settings_class(saved: Mapping[str, Any]) -> Type[InferenceSettings]:
  """The class saved settings (their fields) are read as: the registered class with the
  fewest fields that has every saved one, InferenceSettings when none has them all
  (`configs.from_dict` then names the unknown). The one place where saved settings find
  their class; settings with fields beyond the paper's first import the installed methods
  (`load_entry_points`)."""
  names = set(saved)
  if not names <= _names(InferenceSettings):
    load_entry_points()
  fits = [cls for cls in _CLASSES if names <= _names(cls)]
  return min(fits, key=lambda cls: len(dataclasses.fields(cls)), default=InferenceSettings)


def from_saved(saved: Mapping[str, Any]) -> InferenceSettings:
  """Saved settings (a flat dict, `dataclasses.asdict`) as their class (`settings_class`)."""
  return configs.from_dict(settings_class(saved), saved)


def paper_settings(settings: InferenceSettings) -> InferenceSettings:
  """The fields of Eq. 6 and its continuation that `settings` holds, as InferenceSettings."""
  return InferenceSettings(**{f.name: getattr(settings, f.name)
                              for f in dataclasses.fields(InferenceSettings)})


def save_settings(ttc_workdir: str, settings: InferenceSettings, chosen_by: str = '') -> str:
  """Writes `settings` beside phi as `<ttc_workdir>/inference.json`, so that they travel with
  the model: `Retriever.from_checkpoints` and `evaluate.py --ttc_checkpoint` use them unless
  given other settings (flags). The file is recorded in the workdir's manifest
  (`outputs.write_owned_json`): a file of that name colt_jax did not write is refused, never
  overwritten. `chosen_by`: who decided them (kept in the file for the reader). Returns the
  file's path."""
  return outputs.write_owned_json(
      os.path.join(ttc_workdir, SETTINGS_FILE),
      {'format': SETTINGS_FORMAT, 'settings': dataclasses.asdict(settings),
       'chosen_by': chosen_by}, "phi's inference settings")


def saved_settings(ttc_workdir: str) -> Optional[InferenceSettings]:
  """The settings `save_settings` wrote beside phi; None when the workdir has none."""
  path = os.path.join(ttc_workdir, SETTINGS_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      info = json.load(f)
  except (FileNotFoundError, NotADirectoryError):
    return None
  except json.JSONDecodeError as e:
    raise InputError(f'{path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: cannot be read ({e})') from None
  if not isinstance(info, dict) or info.get('format') != SETTINGS_FORMAT:
    found = info.get('format') if isinstance(info, dict) else None
    raise InputError(f'{path}: format {found!r}, expected {SETTINGS_FORMAT!r}')
  if not isinstance(info.get('settings'), dict):
    raise InputError(f'{path}: missing required key \'settings\' (an object)')
  try:
    return from_saved(info['settings'])
  except (ConfigError, TypeError) as e:
    raise InputError(f'{path}: {e}') from None


class ModelInfo(NamedTuple):
  """What a model directory's model.json says (`read_model_info`)."""
  info: dict  # model.json, every field checked
  settings: InferenceSettings


def read_model_info(model_dir: str) -> ModelInfo:
  """model.json of a model directory (`save_pretrained`) and its InferenceSettings, every field
  of the right kind; anything else is an `InputError` naming the file."""
  path = os.path.join(model_dir, MODEL_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      info = json.load(f)
  except (FileNotFoundError, NotADirectoryError):
    raise InputError(f'{model_dir}: not a CoLT model directory (no {MODEL_FILE})') from None
  except json.JSONDecodeError as e:
    raise InputError(f'{path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: cannot be read ({e})') from None
  if not isinstance(info, dict) or info.get('format') != MODEL_FORMAT:
    raise InputError(f'{path}: format {info.get("format") if isinstance(info, dict) else None!r},'
                     f' expected {MODEL_FORMAT!r}')
  for key in ('settings', 'category_names'):
    if key not in info:
      raise InputError(f'{path}: missing required key {key!r}')
  if not isinstance(info['settings'], dict):
    raise InputError(f'{path}: settings must be an object, got {info["settings"]!r}')
  try:
    settings = from_saved(info['settings'])
  except (ConfigError, TypeError, ValueError) as e:
    raise InputError(f'{path}: settings: {e}') from None
  names = info['category_names']
  if not (isinstance(names, list) and all(isinstance(n, str) for n in names)
          and len(set(names)) == len(names)):
    raise InputError(f'{path}: category_names must be a list of distinct names')
  if not isinstance(info.get('encoder'), (str, type(None))):
    raise InputError(f'{path}: encoder must be a name or null, got {info["encoder"]!r}')
  if not isinstance(info.get('text_encoder'), (dict, type(None))):  # how to load f's towers
    raise InputError(f'{path}: text_encoder must be an object or null, got '
                     f'{info["text_encoder"]!r}')
  if not isinstance(info.get('g', False), bool):
    raise InputError(f'{path}: g must be true or false, got {info["g"]!r}')
  return ModelInfo(info, settings)


def checkpoint_settings(ttc_workdir: str, overrides: Optional[dict] = None) -> InferenceSettings:
  """The settings phi in `ttc_workdir` runs with: those saved beside it (`saved_settings`;
  defaults when none), each of `overrides` (field -> value, e.g. the flags given on a command
  line) replacing its saved value; the class is the one of the fields then held
  (`settings_class`)."""
  base = saved_settings(ttc_workdir) or InferenceSettings()
  if not overrides:
    return base
  try:
    return from_saved(dict(dataclasses.asdict(base), **overrides))
  except ConfigError as e:
    raise ConfigError(f'{e} (with the settings saved in '
                      f'{os.path.join(ttc_workdir, SETTINGS_FILE)})') from None
