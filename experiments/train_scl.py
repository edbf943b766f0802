"""Trains the re-encoder g with semantics-aware contrastive learning (Sec. 3.2, Alg. 1).

  python experiments/train_scl.py --flagfile=experiments/configs/synthetic_scl.flags
  python experiments/train_scl.py --flagfile=... --no_pair2      # Table 4 ablation
  python experiments/train_scl.py --flagfile=... --noresume      # start over
"""
import os
import sys

from absl import app

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from colt_jax import configs  # pylint: disable=g-import-not-at-top
from colt_jax.train import cli  # pylint: disable=g-import-not-at-top
from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top

cli.define(configs.SCLConfig)

if __name__ == '__main__':
  app.run(cli.main_for(configs.SCLConfig, trainers.train_scl, 'scl'))
