"""Configurations as data: frozen dataclasses, one absl flag per field, saved as JSON.

`define_flags(SCLConfig)` declares a flag per field (so flagfiles work), and
`from_flags(SCLConfig)` reads them back. Every checkpoint stores `dataclasses.asdict(config)`.
Paper defaults (Sec. 4.3): Adam, lr 1e-5 for g and 1e-4 for phi, batch 32, tau 0.2,
alpha 0.01, beta 0.02, L 8, N 200, X 1, p_q 0.5, p_v = p_d = p_c = 0.2.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Type, TypeVar

from absl import flags

T = TypeVar('T')


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the training data comes from (shared by both trainers)."""
  dataset: str = 'synthetic'  # synthetic | div400 | div150cred
  data_dir: str = ''  # official layout root ('' = the dataset's default)
  features_dir: str = ''  # feature store of the split ('' = the dataset's default)
  split: str = 'dev'
  protocol: str = 'pool'  # pool (the topic's photos) | global (whole collection)
  workdir: str = ''
  seed: int = 0
  checkpoint_every: int = 200
  max_to_keep: int = 3
  log_every: int = 10


@dataclasses.dataclass(frozen=True)
class SCLConfig(DataConfig):
  """The re-encoder g and its semantics-aware contrastive training (Sec. 3.2)."""
  workdir: str = 'runs/scl'
  beta: float = 0.02  # Eq. 1
  hidden_dim: int = 0  # g's hidden width (0 = 2x the feature dimension)
  mlp_layers: int = 2
  tau: float = 0.2  # Eq. 2
  alpha: float = 0.01  # Eq. 3
  learning_rate: float = 1e-5
  batch_size: int = 32  # queries per step
  images_per_query: int = 64  # photos sampled per query (relevant and irrelevant)
  num_steps: int = 1000
  no_pair2: bool = False  # drop pair (2) of Eq. 2 (Table 4)
  no_pair4: bool = False  # drop pair (4) of Eq. 2 (Table 4)
  global_candidates: int = 500  # photos per query under the global protocol


@dataclasses.dataclass(frozen=True)
class TTCConfig(DataConfig):
  """The token classifier phi (Sec. 3.3) and its token-wise augmentation (Sec. 3.4)."""
  workdir: str = 'runs/ttc'
  scl_checkpoint: str = ''  # re-encoder workdir; '' = raw f features ("without SCL")
  num_layers: int = 8  # L
  num_heads: int = 8
  model_dim: int = 0  # 0 = the feature dimension
  mlp_ratio: int = 4
  dropout: float = 0.1
  attention_dropout: float = 0.1  # on attention weights; B*heads*T*T random draws per layer
  position_embedding: bool = True
  query_relative: bool = False  # feed token - h_q too (not in the paper)
  label_scheme: str = 'global'  # global: vocabulary categories (paper) | local: topic groups
  num_groups: int = 32  # label_scheme=local: groups per topic (see sequences.local_groups)
  num_images: int = 200  # N
  learning_rate: float = 1e-4
  batch_size: int = 32
  num_steps: int = 2000
  no_augment: bool = False
  p_q: float = 0.5
  p_v: float = 0.2
  p_d: float = 0.2
  p_c: float = 0.2


def define_flags(cls: Type[Any], overrides: Mapping[str, Any] | None = None) -> None:
  """Declares one absl flag per field of `cls` (default: the field's default)."""
  overrides = dict(overrides or {})
  for field in dataclasses.fields(cls):
    default = overrides.get(field.name, field.default)
    helptext = f'{cls.__name__}.{field.name}'
    if field.type in ('bool', bool):
      flags.DEFINE_boolean(field.name, default, helptext)
    elif field.type in ('int', int):
      flags.DEFINE_integer(field.name, default, helptext)
    elif field.type in ('float', float):
      flags.DEFINE_float(field.name, default, helptext)
    else:
      flags.DEFINE_string(field.name, default, helptext)


def from_flags(cls: Type[T]) -> T:
  values = {f.name: getattr(flags.FLAGS, f.name) for f in dataclasses.fields(cls)}
  return cls(**values)


def from_flagfile(cls: Type[T], path: str, **overrides: Any) -> T:
  """A config from an absl flagfile (`--name=value` lines, `#` comments) plus overrides.

  Lets library code (the demo, tests) read the very flagfiles the CLIs take."""
  fields = {f.name: f for f in dataclasses.fields(cls)}
  values = {}
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      line = line.strip()
      if not line or line.startswith('#'):
        continue
      if not line.startswith('--'):
        raise ValueError(f'{path}:{number}: expected --name=value, got {line!r}')
      name, _, value = line[2:].partition('=')
      negated = name.startswith('no') and name[2:] in fields and not _
      if negated:
        name, value = name[2:], 'false'
      if name not in fields:
        raise ValueError(f'{path}:{number}: {cls.__name__} has no field {name!r}')
      kind = fields[name].type
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
        raise ValueError(f'{path}:{number}: bad value {value!r} for {name}') from None
  values.update(overrides)
  return cls(**values)


def from_dict(cls: Type[T], values: Mapping[str, Any]) -> T:
  """Builds a config from a saved dict; unknown keys are an error, missing ones default."""
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - names)
  if unknown:
    raise ValueError(f'{cls.__name__}: unknown fields {unknown}')
  return cls(**dict(values))
