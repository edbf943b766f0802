"""The README's first command: synthetic data, CoLT trained on dev, every method on test.

  python experiments/demo.py [--seed 0] [--workdir work]
  python experiments/demo.py --seeds 0,1,2 --doc docs/SYNTHETIC.md   # mean over seeds
"""

from absl import flags
from absl import logging

from colt_jax import cli
import synthetic_demo as demo

_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the synthetic dataset and of training.',
                             lower_bound=0)
_SEEDS = flags.DEFINE_list('seeds', [], 'Several seeds: run each, report mean and spread.')
_DOC = flags.DEFINE_string('doc', '', 'With --seeds: also write this markdown report.')
_WORKDIR = flags.DEFINE_string('workdir', 'work', 'Where data, checkpoints and runs go.')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # the demo reports its own progress
  if _SEEDS.value:
    demo.run_seeds([int(s) for s in _SEEDS.value], workdir=_WORKDIR.value, doc=_DOC.value)
  else:
    demo.run_demo(workdir=_WORKDIR.value, seed=_SEED.value)


if __name__ == '__main__':
  cli.run(main)
