"""Trains the token classifier phi with token-wise augmentation (Sec. 3.3-3.4, Alg. 1).

  python experiments/train_ttc.py --flagfile=experiments/configs/synthetic_ttc.flags
  python experiments/train_ttc.py --flagfile=... --no_augment    # Table 3 ablation
  python experiments/train_ttc.py --flagfile=... --num_layers=6 --num_images=150
  python experiments/train_ttc.py --flagfile=... --scl_checkpoint=   # "without SCL"
"""
import os
import sys

from absl import app

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from colt_jax import configs  # pylint: disable=g-import-not-at-top
from colt_jax.train import cli  # pylint: disable=g-import-not-at-top
from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top

cli.define(configs.TTCConfig)

if __name__ == '__main__':
  app.run(cli.main_for(configs.TTCConfig, trainers.train_ttc, 'ttc'))
