"""Trained g and phi restored from a trainer's workdir (orbax checkpoint + saved config).

`load_reencoder(workdir)` -> `ReEncoderBundle` (g, Eq. 1) and `load_classifier(workdir)` ->
`ClassifierBundle` (phi, Eq. 4); `load_classifier_ensemble(workdirs)` -> one bundle of several
phi of one configuration (their parameters stacked; the retriever averages their heads). The
config saved beside every checkpoint rebuilds the module (g: `train/modules.py`; phi: the
config class and recipe of the method the config names, `train/method_registry.py`, which
also reads the method of a config saved before methods were recorded); a checkpoint of the
other trainer is refused with a message that names the flag, and features of another
dimension than the model's (`feature_dim`) with one that names the checkpoint folder and both
dimensions, before the model runs.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from typing import Optional, Sequence

from flax import traverse_util
import jax
import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.data import views
from colt_jax.inputs.labels import LabelSpace
from colt_jax.model.phi import TokenClassifier
from colt_jax.model.reencoder import ReEncoder
from colt_jax.train import configs
from colt_jax.train import loop
from colt_jax.train import method_registry
from colt_jax.train import modules
from colt_jax.train import recipes
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError

_PAPER_FIELDS = frozenset(f.name for f in dataclasses.fields(configs.TTCConfig))
_CHUNK = 8192  # rows re-encoded per call (one compilation for any collection size)


@functools.partial(jax.jit, static_argnums=0)
def _reencode(module: ReEncoder, params, features):
  """h^ = module's Eq. 1 on [n, d] features: one program per (g's configuration, shape), shared
  by every bundle of that configuration (each restored g, each seed)."""
  return module.apply({'params': params}, features)


@functools.partial(jax.jit, static_argnums=0)
def _residual(module: ReEncoder, params, features):
  """g(h) of Eq. 1 (before beta) on [n, d] features, as one program."""
  return module.apply({'params': params}, features, method='residual')


def dimension_error(path: str, model_dim: int, dim: int, what: str = 'the features',
                    model_encoder: Optional[str] = None,
                    encoder: Optional[str] = None) -> InputError:
  """The one message for features that do not fit a model: both dimensions and, where known,
  both encoders ("model expects 384-d minilm:m features, the store S has 512-d clip:c
  features")."""
  expects = f'{model_dim}-d {model_encoder + " " if model_encoder else ""}features'
  has = f'{dim}-d {encoder} features' if encoder else f'{dim}-d'
  return InputError(f'{path}: model expects {expects}, {what} has {has}')


def _leading_dim(params, layer: str, path: str) -> int:
  try:
    return int(np.shape(params[layer]['kernel'])[0])
  except (KeyError, TypeError, IndexError):
    raise InputError(f'{path}: not a colt_jax checkpoint (its parameters have no '
                     f'{layer}/kernel)') from None


@dataclasses.dataclass(frozen=True)
class ReEncoderBundle:
  """A trained g: module, params, its SCL config and the folder it came from."""
  module: ReEncoder
  params: dict
  config: configs.SCLConfig
  path: str = ''
  encoder: Optional[str] = None  # the training store's meta.json 'encoder'; None: unknown

  @functools.cached_property  # once per g: every Retriever over it (`with_settings`) checks
  def digest(self) -> str:
    """sha256 of g's parameters (names, shapes, dtypes and values): which g a phi was
    trained over (train_ttc records it; a resume over another g is refused)."""
    h = hashlib.sha256()
    for path, leaf in sorted(jax.tree_util.tree_flatten_with_path(self.params)[0],
                             key=lambda kv: jax.tree_util.keystr(kv[0])):
      a = np.ascontiguousarray(np.asarray(leaf))
      h.update(f'{jax.tree_util.keystr(path)}|{a.shape}|{a.dtype}|'.encode())
      h.update(a.tobytes())
    return h.hexdigest()

  @property
  def feature_dim(self) -> int:
    """d of the features g re-encodes (h and h^ alike)."""
    return _leading_dim(self.params, 'Dense_0', self.path or self.config.workdir)

  def check_dim(self, dim: int, what: str = 'the features',
                encoder: Optional[str] = None) -> None:
    if int(dim) != self.feature_dim:
      raise dimension_error(self.path or self.config.workdir, self.feature_dim, dim, what,
                            self.encoder, encoder)

  def relative_change(self, features: np.ndarray) -> float:
    """g's effect size on [n, d] features: the mean of ||beta g(h)|| / ||h|| (Eq. 1)."""
    h = np.asarray(features, np.float32)
    self.check_dim(h.shape[-1])
    g = np.asarray(_residual(self.module, self.params, h))
    norms = np.maximum(np.linalg.norm(h, axis=-1), 1e-12)
    return float(np.mean(self.config.beta * np.linalg.norm(g, axis=-1) / norms))

  def __call__(self, features: np.ndarray) -> np.ndarray:
    """h^ for [n, d] features (Eq. 1), in chunks of fixed size (one compilation)."""
    features = np.asarray(features, np.float32)
    self.check_dim(features.shape[-1])
    out = np.empty_like(features)
    for s in range(0, features.shape[0], _CHUNK):
      chunk = features[s:s + _CHUNK]
      n = chunk.shape[0]
      if n < _CHUNK and features.shape[0] > _CHUNK:
        chunk = np.concatenate([chunk, np.zeros((_CHUNK - n, chunk.shape[1]), np.float32)])
      out[s:s + n] = np.asarray(_reencode(self.module, self.params, chunk))[:n]
    return out


@dataclasses.dataclass(frozen=True)
class ClassifierBundle:
  """A trained phi: module (the paper's TokenClassifier, or a method's subclass of it), params,
  label space and its TTC config (TTCConfig, or the method's subclass of it).

  `category_names`: the training vocabulary saved with phi (with global labels, class i is
  category_names[i]); None for a checkpoint saved without it. `path`: the folder it came from.
  """
  module: TokenClassifier
  params: dict
  space: LabelSpace
  config: configs.TTCConfig
  category_names: Optional[tuple] = None
  path: str = ''
  parts: tuple = ()  # ((view, size), ...) of per-view token parts; () = one projection
  encoder: Optional[str] = None  # the training store's meta.json 'encoder'; None: unknown
  # An ensemble (`load_classifier_ensemble`): `params` holds its members' parameters stacked
  # on a leading axis of this size; 0 = one phi.
  members: int = 0
  g_sha256: Optional[str] = None  # the digest of the g it was trained over; None: unknown

  def member_params(self, i: int = 0) -> dict:
    """The parameters of member i (of the one phi when not an ensemble)."""
    if not self.members:
      return self.params
    return jax.tree_util.tree_map(lambda x: x[i], self.params)

  @property
  def feature_dim(self) -> int:
    """d of the tokens phi reads (h_q and h^)."""
    if self.parts:
      return sum(size for _, size in self.parts)
    d = _leading_dim(self.member_params(), 'input_projection',
                     self.path or self.config.workdir)
    return recipes.recipe_for(self.config).feature_dim(self.config, d)

  def check_dim(self, dim: int, what: str = 'the features',
                encoder: Optional[str] = None) -> None:
    if int(dim) != self.feature_dim:
      raise dimension_error(self.path or self.config.workdir, self.feature_dim, dim, what,
                            self.encoder, encoder)

  def check_store(self, store: features_lib.FeatureStore) -> None:
    """Refuses a store of another dimension or, for per-view token parts, other views."""
    where = f'the store {store.meta.get("path", "")}'.rstrip()
    self.check_dim(store.dim, where, store.meta.get('encoder'))
    if self.parts and views.token_parts(store) != self.parts:
      raise InputError(f'{self.path or self.config.workdir}: phi reads the views '
                       f'{_part_names(self.parts)}, {where} has '
                       f'{_part_names(views.token_parts(store))}')


def _part_names(parts: tuple) -> str:
  return '+'.join(f'{name}({size})' for name, size in parts)


def _check_kind(path: str, config: dict, expected: str) -> None:
  """Refuses a checkpoint of the other trainer (g given for phi or the reverse)."""
  kind = 'ttc' if 'num_layers' in config else 'scl' if 'beta' in config else None
  names = {'scl': 'an SCL checkpoint (g, experiments/train_scl.py)',
           'ttc': 'a TTC checkpoint (phi, experiments/train_ttc.py)'}
  flag = {'scl': '--scl_checkpoint', 'ttc': '--ttc_checkpoint'}[expected]
  if kind != expected:
    found = names[kind] if kind else 'not a colt_jax checkpoint'
    raise InputError(f'{path} ({flag}): {found}, but {names[expected]} is expected here')


def load_reencoder(path: str, step: Optional[int] = None) -> ReEncoderBundle:
  state, cfg = loop.restore_checkpoint(path, step)
  _check_kind(path, cfg, 'scl')
  cfg = dict(cfg)
  encoder = cfg.pop('encoder', None)
  # g is the paper's in every method; a name none has is refused
  method_registry.check(cfg.pop(method_registry.FIELD, method_registry.PAPER), path)
  cfg = _saved_config(configs.SCLConfig, cfg, path)
  bundle = ReEncoderBundle(modules.reencoder_module(cfg), _params(state, path), cfg, path,
                           encoder)
  d = bundle.feature_dim  # refuses parameters that are not g's
  check_params_fit(bundle.module, bundle.params, (np.zeros((1, d), np.float32),), path, 'g')
  return bundle


def load_classifier(path: str, step: Optional[int] = None) -> ClassifierBundle:
  state, raw = loop.restore_checkpoint(path, step)
  _check_kind(path, raw, 'ttc')
  space = LabelSpace(int(raw.pop('num_categories')))
  names = raw.pop('category_names', None)
  encoder = raw.pop('encoder', None)
  g_sha256 = raw.pop('g_sha256', None)  # the g it was trained over (`ReEncoderBundle.digest`)
  members = raw.pop('members', 0)  # a saved ensemble (Retriever.save_pretrained)
  try:
    parts = tuple((str(n), int(k)) for n, k in raw.pop('token_parts', None) or ())
  except (TypeError, ValueError):
    raise InputError(f'{path}: malformed token_parts in its config') from None
  method = method_registry.saved_method(raw, set(raw) - {method_registry.FIELD},
                                        _PAPER_FIELDS, path)
  raw.pop(method_registry.FIELD, None)
  cfg = _saved_config(method_registry.config_class(method), raw, path)
  recipe = method_registry.recipe(method)
  if names is not None:
    names = tuple(str(n) for n in names)
    if cfg.label_scheme == 'global' and len(names) != space.num_categories:
      raise InputError(f'{path}: {len(names)} category names for a classifier of '
                       f'{space.num_categories} categories')
  recipe.check_parts(cfg, parts, path)
  if not isinstance(members, int) or members < 0:
    raise InputError(f'{path}: malformed members in its config ({members!r})')
  bundle = ClassifierBundle(recipe.module(cfg, space, parts), _params(state, path),
                            space, cfg, names, path, parts, encoder, members,
                            g_sha256 if isinstance(g_sha256, str) else None)
  d = bundle.feature_dim  # refuses parameters that are not phi's
  if not members:  # a saved ensemble's are stacked on a leading axis
    check_params_fit(bundle.module, bundle.params,
                     (np.zeros((1, 2, d), np.float32), np.ones((1, 2), bool)), path, 'phi')
  return bundle


def check_params_fit(module, params, example_inputs: tuple, path: str, what: str) -> None:
  """Refuses, in one line naming the checkpoint, parameters that are not those of the module
  its config describes (a config edited after training, another model's parameters): the
  first parameter missing, unexpected or of another shape. Shapes only, traced abstractly."""
  expected = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *example_inputs))
  want = {'/'.join(k): tuple(v.shape) for k, v in
          traverse_util.flatten_dict(expected['params']).items()}
  have = {'/'.join(k): tuple(np.shape(v)) for k, v in traverse_util.flatten_dict(params).items()}
  problems = ([f'{k} missing' for k in sorted(set(want) - set(have))]
              + [f'{k} unexpected' for k in sorted(set(have) - set(want))]
              + [f'{k} is {have[k]}, not {want[k]}' for k in sorted(set(want) & set(have))
                 if want[k] != have[k]])
  if problems:
    raise InputError(f'{path}: its parameters are not those of the {what} its config '
                     f'({loop.CONFIG_FILE} and the checkpoint\'s) describes: {problems[0]}'
                     + (f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''))


# TTCConfig fields in which the members of an ensemble may differ.
_MEMBER_FIELDS = ('seed', 'workdir', 'split', 'data_dir', 'features_dir', 'scl_checkpoint')


def load_classifier_ensemble(paths: Sequence[str], step: Optional[int] = None
                             ) -> ClassifierBundle:
  """phi of several trainings of one configuration (e.g. seeds) as one bundle whose heads
  the retriever averages: their parameters stacked on a leading axis (`members`), the first's
  module, label space, token parts and config. Members must agree on everything but
  `_MEMBER_FIELDS`; one that does not is refused naming it and the first field that differs."""
  if len(paths) < 2:
    raise InputError(f'an ensemble of phi needs at least two checkpoints, got {list(paths)}')
  bundles = [load_classifier(p, step) for p in paths]
  first = bundles[0]
  mine = {k: v for k, v in dataclasses.asdict(first.config).items() if k not in _MEMBER_FIELDS}
  for b in bundles[1:]:
    other = {k: v for k, v in dataclasses.asdict(b.config).items() if k not in _MEMBER_FIELDS}
    differ = [k for k in mine if mine[k] != other.get(k)]
    if b.space != first.space:
      differ.insert(0, 'num_categories')
    if b.parts != first.parts:
      differ.insert(0, 'token_parts')
    if b.encoder != first.encoder:
      differ.insert(0, 'encoder')
    if differ:
      raise InputError(f'{b.path}: not a member of one ensemble with {first.path} (they '
                       f'differ in {differ[0]})')
  params = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                                  *[b.params for b in bundles])
  return dataclasses.replace(first, params=params, path=','.join(paths),
                             members=len(bundles))


def _saved_config(cls, values: dict, path: str):
  """The config saved with a checkpoint; a value that fails its check is named as the
  checkpoint's config field (the user gave no flag), in one line naming the checkpoint."""
  try:
    return configs.from_dict(cls, values)
  except (ConfigError, TypeError, ValueError) as e:
    text = ' '.join(str(e).split())
    text = re.sub(r'^--(\w+)', r'field \1', text)  # a flag's name, where it is the config's field
    raise InputError(f'{path}: its saved config ({loop.CONFIG_FILE} and the checkpoint\'s) is '
                     f'not valid: {text}') from None


def _params(state, path: str) -> dict:
  if not isinstance(state, dict) or not isinstance(state.get('params'), dict):
    raise InputError(f'{path}: not a colt_jax checkpoint (no parameters in it)')
  return state['params']


def reencode_store(store: features_lib.FeatureStore,
                   reencoder: Optional[ReEncoderBundle]) -> features_lib.FeatureStore:
  """The store with photos replaced by h^ (unchanged when `reencoder` is None)."""
  if reencoder is None:
    return store
  reencoder.check_dim(store.dim, f'the store {store.meta.get("path", "")}'.rstrip(),
                      store.meta.get('encoder'))
  meta = dict(store.meta, reencoded_by=reencoder.config.workdir)
  return dataclasses.replace(store, photos=reencoder(np.asarray(store.photos)), meta=meta)
