"""The README's first command: synthetic data, CoLT trained on dev, every method on test.

  python experiments/demo.py [--seed 0] [--workdir work]
"""
import os
import sys

from absl import app
from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from colt_jax import demo  # pylint: disable=g-import-not-at-top

_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the synthetic dataset and of training.')
_WORKDIR = flags.DEFINE_string('workdir', 'work', 'Where data, checkpoints and runs go.')


def main(argv):
  del argv
  demo.run_demo(workdir=_WORKDIR.value, seed=_SEED.value)


if __name__ == '__main__':
  app.run(main)
