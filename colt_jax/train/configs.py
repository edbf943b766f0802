"""Configurations as data: frozen dataclasses, one absl flag per field, saved as JSON.

`define_flags(SCLConfig)` declares a flag per field (so flagfiles work), and
`from_flags(SCLConfig)` reads them back. Every checkpoint stores `saved_dict(config)`.
Paper defaults (Sec. 4.3): Adam, lr 1e-5 for g and 1e-4 for phi, batch 32, tau 0.2,
alpha 0.01, beta 0.02, L 8, N 200, X 1, p_q 0.5, p_v = p_d = p_c = 0.2.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Mapping, Optional, Sequence, Type, TypeVar

from absl import flags
import numpy as np

from colt_jax.util import flagcheck
from colt_jax.util.errors import ConfigError

T = TypeVar('T')


DATASETS = ('synthetic', 'div400', 'div150cred')
SPLITS = ('dev', 'test')
PROTOCOLS = ('pool', 'global')
LABEL_SCHEMES = ('global', 'local')
VOCABULARIES = ('train', 'all')
_VOCABULARY_HELP = ('Category vocabulary: train = the training topics\' cluster names only; all '
                    '= every name of the feature store, held-out ones included (ablation).')


def option(default: Any, help: str, *, choices: Sequence[str] | None = None,  # pylint: disable=redefined-builtin
           low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False) -> Any:
  """A config field with its flag's one-line help and its allowed values (checked by
  `validate`): `choices` for enumerations, [low, high] (open ends with `*_open`) for numbers."""
  return dataclasses.field(default=default, metadata=dict(
      help=help, choices=tuple(choices) if choices else None, low=low, high=high,
      low_open=low_open, high_open=high_open))


def same_as(cls: Type[Any], name: str) -> Any:
  """A field with the default, help and range of `cls`'s field `name` (one definition for a
  setting that two configs expose, e.g. the inference settings as evaluation flags)."""
  field = cls.__dataclass_fields__[name]
  return dataclasses.field(default=field.default, metadata=field.metadata)


def _num(x: float) -> str:
  return str(x) if isinstance(x, int) else f'{x:g}'


def _range_text(meta: Mapping[str, Any]) -> str:
  low, high = meta.get('low'), meta.get('high')
  if low is not None and high is not None:
    return (f'in {"(" if meta["low_open"] else "["}{_num(low)}, {_num(high)}'
            f'{")" if meta["high_open"] else "]"}')
  if low is not None:
    return f'{">" if meta["low_open"] else ">="} {_num(low)}'
  return f'{"<" if meta["high_open"] else "<="} {_num(high)}'


def field_kind(field: dataclasses.Field) -> tuple:
  """(the field's type name, e.g. 'int', whether it is Optional[...]: None = not set)."""
  kind = field.type if isinstance(field.type, str) else getattr(field.type, '__name__', '')
  if kind.startswith('Optional[') and kind.endswith(']'):
    return kind[len('Optional['):-1], True
  return kind, False


def validate(config: Any) -> None:
  """Checks every field of a config dataclass against its `option` metadata (type, choices,
  range); raises `ConfigError` naming the flag, e.g. `--num_layers must be >= 1, got 0`.
  An Optional field may be None (not set)."""
  for field in dataclasses.fields(config):
    meta = field.metadata
    value = getattr(config, field.name)
    where = f'--{field.name} ({type(config).__name__}.{field.name})'
    kind, optional = field_kind(field)
    if optional and value is None:
      continue
    if kind == 'bool' and not isinstance(value, (bool, np.bool_)):
      raise ConfigError(f'{where} must be true or false, got {value!r}')
    if kind in ('int', 'float'):
      if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ConfigError(f'{where} must be a number, got {value!r}')
      if kind == 'int' and float(value) != int(value):
        raise ConfigError(f'{where} must be an integer, got {value!r}')
      if not math.isfinite(float(value)):
        raise ConfigError(f'{where} must be finite, got {value!r}')
    if not meta:
      continue
    if meta.get('choices') and value not in meta['choices']:
      raise ConfigError(f'{where} must be one of {", ".join(meta["choices"])}; got {value!r}')
    low, high = meta.get('low'), meta.get('high')
    if low is not None and (value < low or (meta['low_open'] and value == low)):
      raise ConfigError(f'{where} must be {_range_text(meta)}, got {value!r}')
    if high is not None and (value > high or (meta['high_open'] and value == high)):
      raise ConfigError(f'{where} must be {_range_text(meta)}, got {value!r}')


def help_text(field: dataclasses.Field) -> str:
  """The flag's one-line help: the field's description and its range (enum flags list their
  values themselves)."""
  meta = field.metadata
  text = meta.get('help') or field.name.replace('_', ' ')
  if meta.get('low') is not None or meta.get('high') is not None:
    text += f' ({_range_text(meta)})'
  return text


PROBABILITY = dict(low=0.0, high=1.0)
# Sizes and counts: at least `low`, at most what an int32 index addresses (the trainers also
# check the memory a config needs: `flagcheck.check_training_memory`).
COUNT = dict(low=1, high=flagcheck.MAX_COUNT)
STEPS = dict(low=1, high=flagcheck.MAX_STEPS)
LAYERS = dict(low=1, high=flagcheck.MAX_LAYERS)
SEED = dict(low=0, high=flagcheck.MAX_SEED)


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the training data comes from (shared by both trainers)."""
  dataset: str = option('synthetic', 'Dataset to train on.', choices=DATASETS)
  data_dir: str = option('', 'Root of the dataset in the official MediaEval layout (default: '
                         'work/synthetic-seed0, $DIV400_ROOT or $DIV150CRED_ROOT).')
  features_dir: str = option('', 'Feature store of the training split (default: the '
                             'dataset\'s store under work/).')
  split: str = option('dev', 'Split whose topics train the model: dev or test (fold names '
                      'in cross-validation).')
  protocol: str = option('pool', 'Candidates per topic: pool = the topic\'s own photos, global '
                         '= the most similar photos of the whole split.', choices=PROTOCOLS)
  workdir: str = option('', 'Folder for checkpoints, config.json and metrics.jsonl.')
  seed: int = option(0, 'Seed of initialisation, batch sampling, augmentation and dropout.',
                     **SEED)
  checkpoint_every: int = option(200, 'Save a checkpoint every this many steps.', **STEPS)
  max_to_keep: int = option(3, 'Checkpoints kept on disk.', **COUNT)
  log_every: int = option(10, 'Log the training metrics every this many steps.', **STEPS)

  def __post_init__(self):
    validate(self)
    if not self.workdir:
      raise ConfigError(f'--workdir ({type(self).__name__}.workdir) must name a folder')


@dataclasses.dataclass(frozen=True)
class SCLConfig(DataConfig):
  """The re-encoder g and its semantics-aware contrastive training (Sec. 3.2)."""
  workdir: str = option('runs/scl', 'Folder for g\'s checkpoints, config.json and metrics.')
  beta: float = option(0.02, 'Weight of g\'s residual in h^ = h + beta g(h) (Eq. 1).', low=0.0)
  hidden_dim: int = option(0, 'Hidden width of g\'s MLP (0 = twice the feature dimension).',
                           low=0, high=flagcheck.MAX_COUNT)
  mlp_layers: int = option(2, 'Layers of g\'s MLP.', **LAYERS)
  tau: float = option(0.2, 'Temperature of the contrastive loss (Eq. 2).', low=0.0,
                      low_open=True)
  alpha: float = option(0.01, 'Weight of the old prototype in the bank update (Eq. 3).',
                        **PROBABILITY)
  learning_rate: float = option(1e-5, 'Adam learning rate of g.', low=0.0, low_open=True)
  batch_size: int = option(32, 'Queries per training step.', **COUNT)
  images_per_query: int = option(64, 'Photos sampled per query (relevant and irrelevant).',
                                 **COUNT)
  num_steps: int = option(1000, 'Training steps.', **STEPS)
  no_pair2: bool = option(False, 'Drop pair (2) of Eq. 2: query vs. its relevant images '
                          '(Table 4 ablation).')
  no_pair4: bool = option(False, 'Drop pair (4) of Eq. 2: images vs. other categories\' '
                          'prototypes (Table 4 ablation).')
  global_candidates: int = option(500, 'Photos per query under the global protocol.', **COUNT)
  vocabulary: str = option('train', _VOCABULARY_HELP + ' Rows of the SCL bank (Eq. 3).',
                           choices=VOCABULARIES)
  zero_init: bool = option(True, 'g\'s last layer starts at zero, so that training starts '
                           'from h^ = h (false: the default initialisation, g active from '
                           'step 0).')

  # Left out of a saved config while at its default (checkpoints predating it stay valid).
  OMITTED_AT_DEFAULT = ('zero_init',)


@dataclasses.dataclass(frozen=True)
class TTCConfig(DataConfig):
  """The token classifier phi (Sec. 3.3) and its token-wise augmentation (Sec. 3.4): the
  paper's settings, and this repository's where the paper is vague (phi's width, the label
  scheme, the vocabulary). A method beyond the paper adds its own in a subclass whose `METHOD`
  names it; the trainers find its phi and train step by that name (`train/method_registry.py`).
  """
  METHOD = 'colt'  # the paper's (`method_registry`), recorded in every config a trainer saves

  workdir: str = option('runs/ttc', 'Folder for phi\'s checkpoints, config.json and metrics.')
  scl_checkpoint: str = option('', 'Workdir of a trained g (train_scl.py); empty = phi on the '
                               'raw f features ("without SCL").')
  num_layers: int = option(8, 'Transformer encoder layers of phi (L).', **LAYERS)
  num_heads: int = option(8, 'Attention heads per layer.', **LAYERS)
  model_dim: int = option(0, 'Width of phi\'s tokens (0 = the feature dimension).', low=0,
                          high=flagcheck.MAX_COUNT)
  mlp_ratio: int = option(4, 'Hidden width of each layer\'s MLP, as a multiple of the width.',
                          **LAYERS)
  dropout: float = option(0.1, 'Dropout rate on phi\'s activations.', low=0.0, high=1.0,
                          high_open=True)
  attention_dropout: float = option(0.1, 'Dropout rate on attention weights.', low=0.0,
                                    high=1.0, high_open=True)
  position_embedding: bool = option(True, 'Add a learned position embedding (tokens are '
                                    'ordered by similarity).')
  label_scheme: str = option('global', 'What phi predicts: global = vocabulary categories (the '
                             'paper), local = topic-local groups.', choices=LABEL_SCHEMES)
  num_groups: int = option(32, 'Groups per topic with --label_scheme=local.', **COUNT)
  vocabulary: str = option('train', _VOCABULARY_HELP + ' Global labels are its ids.',
                           choices=VOCABULARIES)
  num_images: int = option(200, 'Candidate images per query fed to phi (N).', **COUNT)
  learning_rate: float = option(1e-4, 'Adam learning rate of phi.', low=0.0, low_open=True)
  batch_size: int = option(32, 'Sequences per training step.', **COUNT)
  num_steps: int = option(2000, 'Training steps.', **STEPS)
  no_augment: bool = option(False, 'Train without token-wise augmentation (Table 3 '
                            'ablation).')
  p_q: float = option(0.5, 'Probability of query perturbation per sequence (Sec. 3.4).',
                      **PROBABILITY)
  p_v: float = option(0.2, 'Probability of image perturbation per relevant image (Eq. 8).',
                      **PROBABILITY)
  p_d: float = option(0.2, 'Probability of deleting each image token (Sec. 3.4).',
                      **PROBABILITY)
  p_c: float = option(0.2, 'Probability of copying each image token (Sec. 3.4).',
                      **PROBABILITY)

  @property
  def token_inputs(self) -> int:
    """Feature vectors of d that each token feeds phi's input projection: 1, h (Eq. 4); a
    method beyond the paper may feed more (the trainers' memory check reads it)."""
    return 1

  def __post_init__(self):
    super().__post_init__()
    if self.model_dim and self.model_dim % self.num_heads:
      raise ConfigError(f'--model_dim ({self.model_dim}) must be divisible by --num_heads '
                        f'({self.num_heads})')


@dataclasses.dataclass(frozen=True)
class ProtocolChoice:
  """phi of the CoLT configuration under one protocol and feature setting: its training steps
  and its relevance threshold, chosen on training topics (experiments/choose_steps.py --what
  ttc writes them as `experiments/configs/tuned/<name>_phi_<protocol>.choice.flags`).
  num_steps None: chosen equal to the trainer flagfile's, which sets it (the file states only
  what differs; `choice_files.read_protocol_choice` fills it in and checks it)."""
  num_steps: Optional[int] = dataclasses.field(
      default=None, metadata=TTCConfig.__dataclass_fields__['num_steps'].metadata)
  irrelevant_threshold: float = option(
      0.0, 'An image is irrelevant only when phi gives that class more than this probability '
      '(0 = argmax, Eq. 4).', **PROBABILITY)

  def __post_init__(self):
    validate(self)


def flag_lines(cls: Type[Any], values: Mapping[str, Any]) -> list:
  """`values` (fields of `cls`, checked by building a `cls` with them) as flagfile lines that
  `from_flagfile` and absl read back to the same values: `--name=value`, booleans as
  `--name` / `--noname`, floats in their shortest exact form."""
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise ConfigError(f'{cls.__name__} has no fields {unknown}')
  cls(**values)  # raises ConfigError naming the flag of a bad value
  lines = []
  for name, value in values.items():
    kind = field_kind(fields[name])[0]
    if kind in ('bool', bool):
      lines.append(f'--{name}' if value else f'--no{name}')
    elif kind in ('float', float):
      lines.append(f'--{name}={float(value)!r}')
    else:
      lines.append(f'--{name}={value}')
  return lines


def define_flags(cls: Type[Any], overrides: Mapping[str, Any] | None = None,
                 module_name: str | None = None) -> None:
  """Declares one absl flag per field of `cls` (default: the field's default), with the
  field's one-line help; enumerations become enum flags. The flags belong to `module_name`
  (default: the main program, so that `--helpshort` lists them)."""
  overrides = dict(overrides or {})
  module_name = module_name or sys.argv[0]
  for field in dataclasses.fields(cls):
    default = overrides.get(field.name, field.default)
    kwargs = dict(module_name=module_name)
    helptext = help_text(field)
    if field.metadata.get('choices'):
      flags.DEFINE_enum(field.name, default, list(field.metadata['choices']), helptext,
                        **kwargs)
    elif field.type in ('bool', bool):
      flags.DEFINE_boolean(field.name, default, helptext, **kwargs)
    elif field.type in ('int', int):
      flags.DEFINE_integer(field.name, default, helptext, **kwargs)
    elif field.type in ('float', float):
      flags.DEFINE_float(field.name, default, helptext, **kwargs)
    else:
      flags.DEFINE_string(field.name, default, helptext, **kwargs)


def from_flags(cls: Type[T]) -> T:
  values = {f.name: getattr(flags.FLAGS, f.name) for f in dataclasses.fields(cls)}
  return cls(**values)


def from_flagfile(cls: Type[T], path: str, **overrides: Any) -> T:
  """A config from an absl flagfile (`--name=value` lines, `#` comments) plus overrides.

  Lets library code (the demo, tests) read the very flagfiles the CLIs take. A `--method`
  line (train_ttc.py's) must name the method of `cls` or of a class it extends (the
  extension reads the paper's flagfiles); it sets no field."""
  fields = {f.name: f for f in dataclasses.fields(cls)}
  values, line_of = {}, {}
  try:
    with open(path) as f:
      lines = f.readlines()
  except OSError as e:
    raise ConfigError(f'{path}: cannot read the flagfile ({e.strerror})') from None
  for number, line in enumerate(lines, start=1):
    line = line.strip()
    if not line or line.startswith('#'):
      continue
    if not line.startswith('--'):
      raise ConfigError(f'{path}:{number}: expected --name=value, got {line!r}')
    name, _, value = line[2:].partition('=')
    if name == 'method':
      methods = [getattr(c, 'METHOD', None) for c in cls.__mro__]
      if value not in methods:
        raise ConfigError(f'{path}:{number}: --method={value} is not the method of '
                          f'{cls.__name__} ({methods[0]})')
      continue
    negated = name.startswith('no') and name[2:] in fields and not _
    if negated:
      name, value = name[2:], 'false'
    if name not in fields:
      raise ConfigError(f'{path}:{number}: {cls.__name__} has no field {name!r}')
    kind = field_kind(fields[name])[0]
    try:
      if kind in ('bool', bool):
        if value.lower() not in ('', 'true', 'false', '1', '0'):
          raise ValueError(value)
        values[name] = value.lower() in ('', 'true', '1')
      elif kind in ('int', int):
        values[name] = int(value)
      elif kind in ('float', float):
        values[name] = float(value)
      else:
        values[name] = value
    except ValueError:
      raise ConfigError(f'{path}:{number}: bad value {value!r} for {name}') from None
    line_of[name] = number
  values.update(overrides)
  try:
    return cls(**values)
  except ConfigError as e:
    where = next((n for n in line_of if str(e).startswith(f'--{n} ')), None)
    if where is None or where in overrides:
      raise
    raise ConfigError(f'{path}:{line_of[where]}: {e}') from None


def saved_dict(config: Any) -> dict:
  """`dataclasses.asdict(config)` without the fields of its class's `OMITTED_AT_DEFAULT` that
  hold their defaults (`from_dict` reads them back as defaults): what checkpoints and run
  digests keep, unchanged for configurations that predate those fields."""
  out = dataclasses.asdict(config)
  fields = {f.name: f for f in dataclasses.fields(config)}
  for name in getattr(type(config), 'OMITTED_AT_DEFAULT', ()):
    if out[name] == fields[name].default:
      del out[name]
  return out


def from_dict(cls: Type[T], values: Mapping[str, Any]) -> T:
  """Builds a config from a saved dict; unknown keys are an error, missing ones default."""
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - names)
  if unknown:
    raise ConfigError(f'{cls.__name__}: unknown fields {unknown}')
  return cls(**dict(values))
