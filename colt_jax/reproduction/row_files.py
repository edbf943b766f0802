"""The rows of the reproduction as data: one JSON file per named row.

  experiments/configs/paper/rows/<slug>.json   the paper's rows (its tables' ablations and the
                                               paper-faithful `colt-paper`)
  experiments/configs/tuned/rows/<slug>.json   this repository's rows (`colt`, `colt-pairs*`,
                                               ...); each says in `choices` where its choices
                                               and their evidence are

A file holds `name`, `table`, `description` and the `variants.Variant` fields that differ from
their defaults (JSON lists read as tuples; `views` may name a setting of `variants.NAMED`,
e.g. "descvis", instead of stating it); a tuned row's file adds `choices`, a list of
sentences that is no part of the row (nor of its cache key). The file name is `slug(name)`:
the name in lower case, every run of other characters than a-z and 0-9 one '-', none at
either end ('colt + descvis' -> colt-descvis.json, 'alpha=0.99' -> alpha-0-99.json); the file
stores the name itself, so the rule need not be reversible. `variants.ROW_ORDER` lists every
row once, in the order reports list them; a file it does not list is an error.

The folder is `CONFIGS_ROOT`, relative to the working folder as reproduce_config's flagfile
folders are: the commands run from the checkout's root. `variants` reads the files on the first
use of a row, not on import, so that a module importing the reproduction from elsewhere loads.
"""
from __future__ import annotations

import copy
import json
import os
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from colt_jax.util.errors import ConfigError

KINDS = ('paper', 'tuned')
CHOICES = 'choices'  # a tuned row's sentences on where its choices and evidence are
REQUIRED = ('name', 'table', 'description')
CONFIGS_ROOT = os.path.join('experiments', 'configs')  # relative to the working folder


def slug(name: str) -> str:
  """A row's file name, less '.json' (see the module docstring)."""
  return re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')


def configs_root() -> str:
  """`CONFIGS_ROOT`, when it holds the row files (else a one-line ConfigError)."""
  if all(os.path.isdir(os.path.join(CONFIGS_ROOT, kind, 'rows')) for kind in KINDS):
    return CONFIGS_ROOT
  raise ConfigError(f'no row files: {os.path.abspath(CONFIGS_ROOT)} does not hold '
                    f'{{{",".join(KINDS)}}}/rows/ (run from the checkout\'s root)')


def _number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


# What a JSON value must be for a field of the given annotation, and how it is read.
_KINDS = {
    'str': ('a string', lambda v: isinstance(v, str), lambda v: v),
    'int': ('an integer', lambda v: isinstance(v, int) and not isinstance(v, bool), lambda v: v),
    'bool': ('true or false', lambda v: isinstance(v, bool), lambda v: v),
    'float': ('a number', _number, float),
    'tuple': ('a list of numbers', lambda v: isinstance(v, list) and all(map(_number, v)),
              tuple),
    'Mapping[str, Any]': ('an object', lambda v: isinstance(v, dict), lambda v: _tuples(v)),
}


def _tuples(value: Any) -> Any:
  """JSON lists as tuples, at any depth (as the rows' Python literals held them)."""
  if isinstance(value, dict):
    return {k: _tuples(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  return value


def _field_value(path: str, name: str, annotation: str, value: Any,
                 named: Optional[Mapping[str, Any]] = None) -> Any:
  """The value of field `name` read from the row file `path`; a string where the field
  takes a named setting (`named`: its name -> value) is that setting."""
  if named is not None and isinstance(value, str):
    if value not in named:
      raise ConfigError(f'{path}: field {name!r} names no setting {value!r} (one of '
                        f'{", ".join(named)}, or the setting itself)')
    return copy.deepcopy(named[value])
  optional = annotation.startswith('Optional[')
  kind = annotation[len('Optional['):-1] if optional else annotation
  if optional and value is None:
    return None
  what, ok, read = _KINDS[kind]
  if not ok(value):
    shown = json.dumps(value)
    shown = shown if len(shown) <= 40 else shown[:37] + '...'
    raise ConfigError(f'{path}: field {name!r} must be {what}{" or null" if optional else ""}'
                      f', got {shown}')
  return read(value)


class _DuplicateKey(ValueError):
  pass


def _unique_keys(pairs: list) -> dict:
  """A JSON object whose keys are distinct (json.load keeps the last of a repeated key)."""
  out = {}
  for key, value in pairs:
    if key in out:
      raise _DuplicateKey(key)
    out[key] = value
  return out


def read_row(path: str, fields: dict, kind: str,
             named: Optional[Mapping[str, Mapping[str, Any]]] = None) -> tuple:
  """(the field values of the row in `path`, its `choices`); `fields`: field name -> its
  annotation (the row class's); `named`: field -> {name: value} of the settings a file may
  name instead of stating them. One-line ConfigErrors name the file and the field."""
  named = named or {}
  try:
    with open(path) as f:
      data = json.load(f, object_pairs_hook=_unique_keys)
  except OSError as e:
    raise ConfigError(f'{path}: cannot read the row file ({e.strerror})') from None
  except json.JSONDecodeError as e:
    raise ConfigError(f'{path}:{e.lineno}: not JSON ({e.msg})') from None
  except _DuplicateKey as e:
    raise ConfigError(f'{path}: field {e.args[0]!r} is given twice') from None
  if not isinstance(data, dict):
    raise ConfigError(f'{path}: a row file holds one JSON object')
  for name in REQUIRED:
    if name not in data:
      raise ConfigError(f'{path}: field {name!r} is missing')
  choices = data.pop(CHOICES, None)
  if kind == 'tuned' and choices is None:
    raise ConfigError(f'{path}: field {CHOICES!r} is missing (a tuned row says where its '
                      'choices and their evidence are)')
  if choices is not None and (not isinstance(choices, list) or not choices
                              or not all(isinstance(c, str) for c in choices)):
    raise ConfigError(f'{path}: field {CHOICES!r} must be a non-empty list of strings')
  unknown = sorted(set(data) - set(fields))
  if unknown:
    raise ConfigError(f'{path}: unknown field {unknown[0]!r} (a row field or {CHOICES!r})')
  values = {name: _field_value(path, name, fields[name], value, named.get(name))
            for name, value in data.items()}
  if os.path.basename(path) != slug(values['name']) + '.json':
    raise ConfigError(f'{path}: field \'name\' {values["name"]!r} needs the file name '
                      f'{slug(values["name"])}.json')
  return values, tuple(choices or ())


def load_rows(make: Callable[..., Any], fields: dict, order: Sequence[str],
              root: str = '', named: Optional[Mapping[str, Mapping[str, Any]]] = None) -> tuple:
  """(rows in `order`, name -> file path, name -> choices) from the files under `root`
  (default `configs_root()`): `make(**values)` builds a row (its errors are named with the
  file). Every file must be listed in `order` and every name there must have one file."""
  root = root or configs_root()
  paths = {}
  for kind in KINDS:
    folder = os.path.join(root, kind, 'rows')
    for file in sorted(os.listdir(folder)):
      if file.endswith('.json'):
        paths.setdefault(file[:-len('.json')], []).append((kind, os.path.join(folder, file)))
  listed = {slug(name): name for name in order}
  if len(listed) != len(order):
    twice = next(n for i, n in enumerate(order) if slug(n) in map(slug, order[:i]))
    raise ConfigError(f'variants.ROW_ORDER lists {twice!r} twice (or two names of one file '
                      'name)')
  for key, found in sorted(paths.items()):
    if len(found) > 1:
      raise ConfigError(f'{found[0][1]} and {found[1][1]}: one row in two files')
    if key not in listed:
      raise ConfigError(f'{found[0][1]}: not a row of variants.ROW_ORDER (list its name '
                        'there, where reports order the rows)')
  rows, files, choices = [], {}, {}
  for name in order:
    if slug(name) not in paths:
      raise ConfigError(f'no row file for {name!r} (variants.ROW_ORDER lists it): expected '
                        + ' or '.join(os.path.join(root, k, 'rows', slug(name) + '.json')
                                      for k in KINDS))
    kind, path = paths[slug(name)][0]
    values, choices[name] = read_row(path, fields, kind, named)
    if values['name'] != name:
      raise ConfigError(f'{path}: field \'name\' is {values["name"]!r}; variants.ROW_ORDER '
                        f'lists {name!r}')
    try:
      rows.append(make(**values))
    except ConfigError as e:
      raise ConfigError(f'{path}: {e}') from None
    except (TypeError, ValueError) as e:
      raise ConfigError(f'{path}: {e}') from None
    files[name] = path
  return tuple(rows), files, choices
