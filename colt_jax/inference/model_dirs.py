"""Model directories and trainer workdirs as a Retriever's g, phi and settings (Alg. 2's
inputs): `save_model_dir` writes g and phi (orbax checkpoints with their configs), the
inference settings, what the Retriever keeps beside them (`Retriever.save_beside`: nothing for
the paper's) and model.json ('colt_jax.model/1', naming the method whose Retriever runs it;
g's and phi's configs name theirs: `train.method_registry`), whole or not at all;
`load_model_dir` and `load_checkpoints` read them back as the Retriever's arguments.
Beside each of g's and phi's checkpoints, config.json repeats the checkpoint's own config as a
file a person can read (the layout of a trainer's workdir); loading reads the checkpoint's copy.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import jax

from colt_jax.inference import settings as settings_lib
from colt_jax.train import loop
from colt_jax.train import method_registry
from colt_jax.train import restore
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError


def load_checkpoints(scl_checkpoint: Optional[str], ttc_checkpoint: str,
                   settings: Optional[settings_lib.InferenceSettings] = None,
                   ttc_step: Optional[int] = None,
                   category_names: Optional[Sequence[str]] = None) -> dict:
  """The Retriever's arguments from trainer workdirs (`scl_checkpoint` empty or None:
  without SCL).

  `ttc_checkpoint` may name several phi workdirs, comma-separated: an ensemble (one
  configuration, e.g. its seeds; `restore.load_classifier_ensemble`) whose outputs a
  Retriever beyond the paper's may average. `settings` default: those saved
  beside phi (`<ttc_checkpoint>/inference.json` of the first, `settings_lib.save_settings`), else
  `settings_lib.InferenceSettings()`. `category_names` default: with global labels, the training
  vocabulary saved with phi (categories of held-out topics that it lacks are unseen: phi
  never predicts them); with local labels, 'group i'.
  """
  reencoder = restore.load_reencoder(scl_checkpoint) if scl_checkpoint else None
  paths = [p for p in ttc_checkpoint.split(',') if p] if ',' in ttc_checkpoint else []
  if settings is None:
    settings = settings_lib.checkpoint_settings(paths[0] if paths else ttc_checkpoint)
  classifier = (restore.load_classifier_ensemble(paths, ttc_step) if paths else
                restore.load_classifier(ttc_checkpoint, ttc_step))
  return dict(classifier=classifier, reencoder=reencoder, settings=settings,
              category_names=category_names, source=ttc_checkpoint)


def load_model_dir(model_dir: str) -> tuple:
  """(the Retriever's arguments, model.json) from a model directory written by
  `save_model_dir`."""
  info, settings = settings_lib.read_model_info(model_dir)
  reencoder = restore.load_reencoder(os.path.join(model_dir, 'g')) if info.get('g') else None
  return dict(classifier=restore.load_classifier(os.path.join(model_dir, 'phi')),
              reencoder=reencoder, settings=settings, category_names=info['category_names'],
              text_encoder=info.get('text_encoder'), source=model_dir,
              encoder=info.get('encoder')), info


def save_model_dir(colt, model_dir: str, store: str = '') -> str:
  """Writes g, phi (orbax checkpoints with their configs), the settings and what `colt` keeps
  beside them (`save_beside(path)`: its files under `path(name)`, model.json's keys it
  returns) to `model_dir`, whole or not at all; returns its path. `store`: the feature store
  the model was made for (`recorded_store`), kept relative to `model_dir`."""
  with outputs.ResultSet(model_dir, 'a CoLT model') as out:
    if colt.reencoder is not None:
      save_params(out.path('g'), colt.reencoder.params,
                  dict(dataclasses.asdict(colt.reencoder.config), method=method_registry.PAPER))
    phi_config = dict(dataclasses.asdict(colt.classifier.config),
                      method=method_registry.method_of(colt.classifier.config),
                      num_categories=colt.classifier.space.num_categories)
    if colt.classifier.category_names is not None:
      phi_config['category_names'] = list(colt.classifier.category_names)
    if colt.classifier.parts:
      phi_config['token_parts'] = [list(p) for p in colt.classifier.parts]
    if colt.classifier.members:  # the members' parameters, stacked
      phi_config['members'] = colt.classifier.members
    save_params(out.path('phi'), colt.classifier.params, phi_config)
    beside = colt.save_beside(out.path)
    atomic.write_json(out.path(settings_lib.MODEL_FILE), dict({
        'format': settings_lib.MODEL_FORMAT,
        'method': method_registry.method_of(colt.settings),  # whose Retriever runs it
        'g': colt.reencoder is not None, 'phi': True,
        'settings': dataclasses.asdict(colt.settings),
        'category_names': list(colt.category_names),
        'num_images': colt.num_images, 'label_scheme': colt.classifier.config.label_scheme,
        'text_encoder': colt.text_encoder, 'encoder': colt.encoder}, **beside,
        **({'store': os.path.relpath(os.path.abspath(store), os.path.abspath(model_dir))}
           if store else {})))
  return out.final


def recorded_store(model_dir: str) -> str:
  """The feature store model.json names (`save_model_dir`'s `store`; '' when none): a model
  over a view store searches a store of the same views."""
  store = settings_lib.read_model_info(model_dir)[0].get('store')
  if not store:
    return ''
  if not isinstance(store, str):
    raise InputError(f'{os.path.join(model_dir, settings_lib.MODEL_FILE)}: store must be a '
                     f'path, got {store!r}')
  return os.path.normpath(os.path.join(model_dir, store))


def save_params(workdir: str, params, config: dict) -> None:
  """An orbax checkpoint of `params` with its config, as a trainer's workdir holds it."""
  ckpt = loop.Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=1)
  try:
    ckpt.save(0, {'params': jax.device_get(params)}, config)
    ckpt.wait()
  finally:
    ckpt.close()
  atomic.write_json(os.path.join(workdir, loop.CONFIG_FILE), config)

