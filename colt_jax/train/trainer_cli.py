"""The shared body of the two trainer command lines (experiments/train_{scl,ttc}.py), and how
train_ttc.py learns which method it trains (`method_from_argv`) before it defines its flags."""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable, Optional, Sequence

from absl import flags
from absl import logging

from colt_jax.train import configs
from colt_jax.train import method_registry
from colt_jax.util import cli
from colt_jax.util import distributed
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError


def _flag_value(arg: str, name: str, following: Optional[str]) -> tuple:
  """(value or None, whether `following` was consumed) of `--name=value` / `--name value`."""
  if arg.startswith(f'--{name}='):
    return arg.split('=', 1)[1], False
  if arg == f'--{name}' and following is not None:
    return following, True
  return None, False


def _method_in(args: Sequence[str], depth: int = 0) -> Optional[str]:
  """The last --method of `args`, flagfiles (`--flagfile`, read as absl does: one flag a
  line, `#` comments, flagfiles inside them) included."""
  method, i = None, 0
  while i < len(args):
    following = args[i + 1] if i + 1 < len(args) else None
    value, skip = _flag_value(args[i], 'method', following)
    if value is not None:
      method = value
    flagfile, skip_file = _flag_value(args[i], 'flagfile', following)
    if flagfile and depth < 8:
      try:
        with open(os.path.expanduser(flagfile), encoding='utf-8') as f:
          lines = [l.strip() for l in f if l.strip() and not l.lstrip().startswith('#')]
      except (OSError, UnicodeDecodeError):
        lines = []  # absl reports the unreadable flagfile when it parses
      method = _method_in(lines, depth + 1) or method
    i += 2 if skip or skip_file else 1
  return method


def method_from_argv(argv: Sequence[str]) -> str:
  """The method a trainer command line names (`--method`, on it or in a flagfile; default
  the paper's, `colt`), read before absl parses it: train_ttc.py defines the flags of that
  method's config alone, so the paper's trainer imports nothing of another method. A name
  that no method has reads as the paper's here; absl then refuses it naming --method."""
  method = _method_in(list(argv[1:]))
  return method if method in method_registry.METHODS else method_registry.PAPER


def other_method_flag(method: str) -> Callable[[str], str]:
  """A hint for a flag that `method`'s trainer does not define (`cli.add_unknown_flag_hint`):
  the other methods whose config has it ('a flag of --method=colt-pairs'). Their configs are
  imported only then, as the command line is refused."""
  def hint(name: str) -> str:
    if not name:
      return ''
    others = [m for m in method_registry.METHODS if m != method
              and name in {f.name for f in dataclasses.fields(method_registry.config_class(m))}]
    return f'a flag of --method={" or --method=".join(others)}' if others else ''
  return hint


def define(config_cls, method: Optional[str] = None) -> None:
  """One flag per config field, plus --resume and the multi-process flags; with `method`,
  also --method (its value read before, `method_from_argv`)."""
  configs.define_flags(config_cls)
  if method is not None:
    cli.add_unknown_flag_hint(other_method_flag(method))
    flags.DEFINE_enum('method', method, list(method_registry.METHODS), 'The method to train '
                      f'(its flags: {method_registry.PAPER} = the paper\'s phi, TTCConfig; '
                      f'{method_registry.PAIRS} = this repository\'s extension, colt_jax/pairs/).',
                      module_name=sys.argv[0])
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
