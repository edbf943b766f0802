"""The two trainers of Alg. 1: SCL for the re-encoder g, then the token classifier phi."""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from colt_jax.data import splits as data
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inputs import examples as examples_lib
from colt_jax.inputs import labels as labels_lib
from colt_jax.model import augment
from colt_jax.model import scl
from colt_jax.train import configs
from colt_jax.train import loop
from colt_jax.train import method_registry
from colt_jax.train import modules
from colt_jax.train import recipes
from colt_jax.train import restore
from colt_jax.train import scl_step
from colt_jax.train import state as state_lib
from colt_jax.util import flagcheck


@functools.partial(jax.jit, static_argnums=(0,))
def _init_params(module, key: jax.Array, *inputs):
  """`module`'s initial parameters for `key` as one compiled program (flax's `init` run
  eagerly compiles each of its dozens of operations apart, seconds of compiling per process;
  the same values, tested). The key is made outside: a seed traced as int32 would refuse
  seeds of 2**31 and above, which configs accept."""
  return module.init(key, *inputs)['params']


@functools.lru_cache(maxsize=None)
def adam(learning_rate: float) -> optax.GradientTransformation:
  """Adam at `learning_rate`, one object per rate: the train state carries its optimiser as
  static data, so two trainings at the same rate (e.g. seeds) trace and compile their step
  once (`loop.train`) instead of once each."""
  return optax.adam(learning_rate)


_modules = {}


def shared_module(module):
  """The first module created equal to `module` (flax modules compare by their fields): a
  bound method compares its object by identity, so two trainings of one configuration carry
  equal `apply_fn`s, and their train step is traced once (`adam`)."""
  return _modules.setdefault(module, module)


def scl_setup(cfg: configs.SCLConfig, split_data=None):
  """(initial state, make_batch, train_step) for SCL on the configured split."""
  return _scl_setup(cfg, split_data)[:3]


class SCLSetup(NamedTuple):
  """What SCL trains from (`_scl_setup`)."""
  state: Any  # the initial TrainState, the bank included
  make_batch: Callable  # step -> batch
  train_step: Callable  # (state, batch, rng) -> (state, metrics)
  encoder: Optional[str]  # the training store's f (its meta.json 'encoder')


class TTCSetup(NamedTuple):
  """What the TTC trains from (`_ttc_setup`)."""
  state: Any
  make_batch: Callable
  train_step: Callable
  space: Any  # the classifier's LabelSpace
  vocab: Any  # the training vocabulary (global labels are its ids)
  parts: tuple  # ((view, size), ...) of phi's token parts; () for one part
  encoder: Optional[str]  # the training store's f
  reencoder: Any  # g phi is trained over (None: without SCL)


def _scl_setup(cfg: configs.SCLConfig, split_data=None) -> SCLSetup:
  """`scl_setup`, plus the encoder of the training store (its meta.json 'encoder')."""
  split, store = split_data or data.load(cfg.dataset, cfg.split, cfg.data_dir, cfg.features_dir)
  flagcheck.check_training_memory(cfg, store.dim, len(split.topics))
  vocab = labels_lib.training_vocabulary(split, store, cfg.vocabulary)
  cands = candidates_lib.build_candidates(split, store, cfg.protocol, cfg.global_candidates)
  labels = labels_lib.photo_labels(split, vocab)
  relevance = {t: gt.relevance for t, gt in split.ground_truth.items()}
  examples = examples_lib.scl_examples(cands, labels, relevance)
  module = shared_module(modules.reencoder_module(cfg))
  params = _init_params(module, jax.random.PRNGKey(cfg.seed), jnp.zeros((1, store.dim)))
  state = state_lib.create(module.apply, params, adam(cfg.learning_rate),
                           rng=jax.random.PRNGKey(cfg.seed + 1),
                           bank=scl.init_bank(labels_lib.category_features(store, vocab)))
  make_batch = examples_lib.scl_batches(examples, cfg.seed, cfg.batch_size,
                                        cfg.images_per_query)
  step_fn = functools.partial(scl_step.train_step, tau=cfg.tau, alpha=cfg.alpha,
                              use_pair2=not cfg.no_pair2, use_pair4=not cfg.no_pair4)
  return SCLSetup(state, make_batch, step_fn, store.meta.get('encoder'))


def train_scl(cfg: configs.SCLConfig, *, devices=None, stop_after: Optional[int] = None,
              resume: bool = True, progress: bool = True, split_data=None):
  """Trains g by SCL (Alg. 1 L3-L9); returns the final state (checkpointed in cfg.workdir,
  its config recording method `colt`: g is the paper's in every method)."""
  setup = _scl_setup(cfg, split_data)
  return loop.train(state=setup.state, train_step=setup.train_step,
                    make_batch=setup.make_batch, num_steps=cfg.num_steps, workdir=cfg.workdir,
                    config=dict(configs.saved_dict(cfg), encoder=setup.encoder,
                                method=method_registry.PAPER),
                    checkpoint_every=cfg.checkpoint_every,
                    max_to_keep=cfg.max_to_keep, resume=resume, log_every=cfg.log_every,
                    devices=devices, stop_after=stop_after, desc='scl', progress=progress)


def ttc_sequences(cfg: configs.TTCConfig, split, store, reencoder, vocab,
                  with_labels: bool = True):
  """The TTC's token sequences of a split: [h_q, N most similar h^] per topic.

  Returns (sequences, categories): labels (if any) are category ids in `categories` =
  LabelSpace(len(vocab)) of the training vocabulary `vocab`; the train step turns them into
  the label scheme's targets after augmentation (`ttc_step.augment_example`).
  """
  labels_lib.check_label_scheme(cfg.label_scheme)
  store_hat = restore.reencode_store(store, reencoder)
  categories = labels_lib.LabelSpace(len(vocab))
  cands = candidates_lib.build_candidates(split, store_hat, cfg.protocol, cfg.num_images)
  labels = labels_lib.photo_labels(split, vocab) if with_labels else None
  return examples_lib.token_sequences(cands, cfg.num_images, categories, labels), categories


def ttc_setup(cfg: configs.TTCConfig, split_data=None):
  """(initial state, make_batch, train_step, the classifier's label space) for the TTC."""
  return _ttc_setup(cfg, split_data)[:4]


def _ttc_setup(cfg: configs.TTCConfig, split_data=None) -> TTCSetup:
  """`ttc_setup`, plus the training vocabulary (global labels are its ids). phi, its token
  parts and its train step are those of the config's recipe (`recipes`): the paper's phi
  (Eq. 4) and Eq. 5's step for a TTCConfig."""
  recipe = recipes.recipe_for(cfg)
  split, store = split_data or data.load(cfg.dataset, cfg.split, cfg.data_dir, cfg.features_dir)
  flagcheck.check_training_memory(cfg, store.dim, len(split.topics))
  reencoder = restore.load_reencoder(cfg.scl_checkpoint) if cfg.scl_checkpoint else None
  vocab = labels_lib.training_vocabulary(split, store, cfg.vocabulary)
  seqs, categories = ttc_sequences(cfg, split, store, reencoder, vocab)
  space = labels_lib.scheme_space(cfg.label_scheme, categories.num_categories, cfg.num_groups)
  parts = recipe.token_parts(cfg, store)
  module = shared_module(recipe.module(cfg, space, parts))
  params = _init_params(module, jax.random.PRNGKey(cfg.seed), jnp.asarray(seqs.tokens[:1]),
                        jnp.asarray(seqs.mask[:1]))
  state = state_lib.create(module.apply, params, adam(cfg.learning_rate),
                           rng=jax.random.PRNGKey(cfg.seed + 1))
  make_batch = examples_lib.ttc_batches(seqs, cfg.seed, cfg.batch_size)
  aug = None if cfg.no_augment else augment.AugmentConfig(p_q=cfg.p_q, p_v=cfg.p_v,
                                                           p_d=cfg.p_d, p_c=cfg.p_c)
  step_fn = recipe.train_step(cfg, categories.num_categories, aug)
  return TTCSetup(state, make_batch, step_fn, space, vocab, parts, store.meta.get('encoder'),
                  reencoder)


def train_ttc(cfg: configs.TTCConfig, *, devices=None, stop_after: Optional[int] = None,
              resume: bool = True, progress: bool = True, split_data=None,
              on_checkpoint=None):
  """Trains phi with token-wise augmentation (Alg. 1 L10-L16); returns the final state.

  `on_checkpoint`: step -> scalars logged at each checkpoint (`loop.train`).

  The checkpoint's config also holds `method` (the name of the config's method,
  `method_registry`: what reads the checkpoint back), `num_categories` (phi's label space) and
  `category_names` (the training vocabulary: class i of global labels is its name i) and,
  when phi reads parts of a token apart, `token_parts` (the store's views and their sizes).
  """
  setup = _ttc_setup(cfg, split_data)
  saved = dict(configs.saved_dict(cfg), method=method_registry.method_of(cfg),
               num_categories=setup.space.num_categories,
               category_names=list(setup.vocab.names), encoder=setup.encoder)
  if setup.reencoder is not None:  # the g phi is trained over: a resume over another g is refused
    saved['g_sha256'] = setup.reencoder.digest
  if setup.parts:
    saved['token_parts'] = [list(p) for p in setup.parts]
  return loop.train(state=setup.state, train_step=setup.train_step, make_batch=setup.make_batch,
                    num_steps=cfg.num_steps, workdir=cfg.workdir, config=saved,
                    checkpoint_every=cfg.checkpoint_every, max_to_keep=cfg.max_to_keep,
                    resume=resume, log_every=cfg.log_every, devices=devices,
                    stop_after=stop_after, desc='ttc', progress=progress,
                    on_checkpoint=on_checkpoint)
