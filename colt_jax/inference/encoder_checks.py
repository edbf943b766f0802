"""Whether features fit a model: one encoder f's name against another's, and the one message
for features of another dimension or encoder. A model knows the encoder its features came
from (the training store's meta.json 'encoder', recorded with phi and in model.json; None for
older checkpoints); two encoders are the same when their kind and model name agree.
"""
from __future__ import annotations

import os
from typing import Optional

from absl import logging

from colt_jax.util.errors import InputError


def spec_name(spec: Optional[dict]) -> Optional[str]:
  """'kind:model' (or 'kind') of a text encoder spec (`encoders.text_encoder_spec`)."""
  if not spec:
    return None
  return f'{spec["encoder"]}:{spec["model"]}' if spec.get('model') else str(spec['encoder'])


def same_encoder(a: str, b: str) -> bool:
  """Whether two encoder names ('clip:openai/clip-vit-base-patch32', 'minilm:...',
  'synthetic') are one encoder: the same kind and model name (the last part of a local path
  or a Hugging Face name, so a downloaded copy is the model it was downloaded from)."""
  def key(name):
    kind, _, model = str(name).partition(':')
    return kind, os.path.basename(model.rstrip('/\\'))
  return key(a) == key(b)


def mismatch_error(source: str, model_dim: int, model_encoder: Optional[str], dim: int,
                   encoder: Optional[str], what: str = 'the features') -> InputError:
  """The one message for features that do not fit a model: both dimensions and, where known,
  both encoders ("<source>: model expects 384-d minilm:m features, the store S has 512-d
  clip:c features")."""
  expects = f'{model_dim}-d {model_encoder + " " if model_encoder else ""}features'
  has = f'{dim}-d {encoder} features' if encoder else f'{dim}-d'
  return InputError(f'{source or "the model"}: model expects {expects}, {what} has {has}')


def trained_on(classifier, reencoder, source: str) -> Optional[str]:
  """The encoder f that phi's (`classifier`) or g's (`reencoder`, or None) training features
  came from, as recorded with them (None: unknown, e.g. an older checkpoint). Refuses a g and
  a phi of different feature dimensions or encoders; warns when phi was trained over another
  g than this one (its recorded digest)."""
  who = source or 'the model'
  if reencoder is not None and reencoder.feature_dim != classifier.feature_dim:
    raise InputError(f'{who}: g ({reencoder.path or "re-encoder"}) takes '
                     f'{reencoder.feature_dim}-d features but phi '
                     f'({classifier.path or "classifier"}) reads {classifier.feature_dim}-d')
  phi_f = getattr(classifier, 'encoder', None)
  g_f = getattr(reencoder, 'encoder', None) if reencoder is not None else None
  if phi_f and g_f and not same_encoder(phi_f, g_f):
    raise InputError(f'{who}: g ({reencoder.path or "re-encoder"}) was trained on {g_f} '
                     f'features but phi ({classifier.path or "classifier"}) on {phi_f} features')
  trained_over = getattr(classifier, 'g_sha256', None)
  if trained_over and reencoder is not None and reencoder.digest != trained_over:
    logging.warning('%s: phi (%s) was trained over another g than %s (its parameters differ); '
                    'its labels may not fit these features', who,
                    classifier.path or 'classifier', reencoder.path or 'g')
  return phi_f or g_f
