"""The README's first command: synthetic data, CoLT trained on dev, every method on test.

  python experiments/demo.py [--seed 0] [--workdir work]
  python experiments/demo.py --seeds 0,1,2 --doc docs/SYNTHETIC.md   # mean over seeds
"""

from absl import flags
from absl import logging

from colt_jax.util import cli
from colt_jax.util import flagcheck
from colt_jax.util import outputs
from colt_jax.util.errors import InputError
from colt_jax.reproduction import demo_table as demo
from colt_jax.reproduction import reproduce_config

_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the synthetic dataset and of training.',
                             lower_bound=0, upper_bound=flagcheck.MAX_SEED)
_SEEDS = flags.DEFINE_list('seeds', [], 'Several seeds: run each, report mean and spread.')
_DOC = flags.DEFINE_string('doc', '', 'With --seeds: also write this markdown report.')
_WORKDIR = flags.DEFINE_string('workdir', 'work', 'Where data, checkpoints and runs go.')
_CONFIG_DIR = flags.DEFINE_string(
    'config_dir', reproduce_config.CONFIG_DIR, 'The synthetic flagfiles and choice '
    '(synthetic_{scl,ttc}.flags, synthetic_phi_pool.choice.flags). Every folder is relative '
    'to the working folder: run from the checkout\'s root, as `make demo` does.')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # the demo reports its own progress
  seeds = flagcheck.parse_ints('--seeds', _SEEDS.value, low=0, high=flagcheck.MAX_SEED,
                               nonempty=False)
  if seeds and flags.FLAGS['seed'].present:
    raise InputError('pass one of --seed and --seeds')
  if _DOC.value and not seeds:
    raise InputError('--doc is the report over several seeds: it needs --seeds')
  if _DOC.value:  # checked now, written after every seed
    outputs.check_writable_file(_DOC.value, 'the report', flag='--doc')
  if seeds:
    demo.run_seeds(list(seeds), workdir=_WORKDIR.value, doc=_DOC.value,
                   config_dir=_CONFIG_DIR.value)
  else:
    demo.run_demo(workdir=_WORKDIR.value, seed=_SEED.value, config_dir=_CONFIG_DIR.value)


if __name__ == '__main__':
  cli.run(main)
