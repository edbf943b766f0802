"""The shared body of the two trainer command lines (experiments/train_{scl,ttc}.py)."""
from __future__ import annotations

import sys
from typing import Callable

from absl import flags
from absl import logging

from colt_jax.train import configs
from colt_jax.util import distributed
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError


def define(config_cls) -> None:
  """One flag per config field, plus --resume and the multi-process flags."""
  configs.define_flags(config_cls)
  flags.DEFINE_boolean('resume', True, 'Continue from the latest checkpoint of --workdir '
                       '(--noresume starts over).', module_name=sys.argv[0])
  distributed.define_flags()


def main_for(config_cls, train: Callable, name: str) -> Callable:
  """An absl `main` that builds the config from flags, trains, and reports where it went."""
  def main(argv):
    if len(argv) > 1:
      raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
    cfg = configs.from_flags(config_cls)
    flagcheck.check_training_memory(cfg)  # before any data is read or folder made
    distributed.initialize_from_flags()
    logging.info('config: %s', cfg)
    state = train(cfg, resume=flags.FLAGS.resume)
    if distributed.is_chief():
      print(f'{name}: trained {int(state.step)} steps; checkpoints in {cfg.workdir}/checkpoints')
    distributed.finish()
  return main
