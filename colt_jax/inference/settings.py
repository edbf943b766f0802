"""CoLT's inference settings (k and X of Eq. 6, the list length, the relevance threshold, the
fill rule) and the files that hold them: beside phi in its trainer workdir
(`<ttc workdir>/inference.json`: `save_settings`, `saved_settings`, `checkpoint_settings`) and
in a model directory's model.json (`read_model_info`).

A method beyond the paper subclasses `InferenceSettings` with its fields (its class's `METHOD`
names it). Settings are saved flat in a file that names their method (`"method"`); the class
that reads them is that method's in `train.method_registry`, imported by path.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, NamedTuple, Optional

from colt_jax.train import configs
from colt_jax.train import method_registry
from colt_jax.util import outputs
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError

MODEL_FORMAT = 'colt_jax.model/1'
MODEL_FILE = 'model.json'
SETTINGS_FORMAT = 'colt_jax.inference/1'
SETTINGS_FILE = 'inference.json'  # beside phi in its trainer workdir (`save_settings`)
LIST_LENGTH = 50  # the official task ranks up to 50 photos per topic


@dataclasses.dataclass(frozen=True)
class InferenceSettings:
  """How phi's labels become a ranked list (Eq. 6 and our choices around it)."""
  METHOD = 'colt'  # the paper's (`method_registry`), recorded in the files that save them

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


_PAPER_FIELDS = frozenset(f.name for f in dataclasses.fields(InferenceSettings))


def from_saved(saved: Mapping[str, Any], method: str = method_registry.PAPER
               ) -> InferenceSettings:
  """Saved settings (a flat dict, `dataclasses.asdict`) as the settings class of `method`
  (`method_registry`); a field that class lacks is refused (`configs.from_dict`)."""
  return configs.from_dict(method_registry.settings_class(method), saved)


def _file_method(info: Mapping[str, Any], path: str) -> str:
  """The method a settings file (inference.json, model.json) names; for one written before
  methods were recorded, the one its settings' fields say (`method_registry.saved_method`)."""
  return method_registry.saved_method(info, info['settings'], _PAPER_FIELDS, path)


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
      {'format': SETTINGS_FORMAT, 'method': method_registry.method_of(settings),
       'settings': dataclasses.asdict(settings), 'chosen_by': chosen_by},
      "phi's inference settings")


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
    return from_saved(info['settings'], _file_method(info, path))
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
  method = _file_method(info, path)  # an unknown name: one line naming the file and field
  try:
    settings = from_saved(info['settings'], method)
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


def checkpoint_settings(ttc_workdir: str, overrides: Optional[dict] = None,
                        method: Optional[str] = None) -> InferenceSettings:
  """The settings phi in `ttc_workdir` runs with: those saved beside it (`saved_settings`;
  defaults when none), each of `overrides` (field -> value, e.g. the flags given on a command
  line) replacing its saved value, as the settings of `method` (default: the saved ones')."""
  base = saved_settings(ttc_workdir) or InferenceSettings()
  if not overrides and method is None:
    return base
  try:
    return from_saved(dict(dataclasses.asdict(base), **(overrides or {})),
                      method or method_registry.method_of(base))
  except ConfigError as e:
    raise ConfigError(f'{e} (with the settings saved in '
                      f'{os.path.join(ttc_workdir, SETTINGS_FILE)})') from None
