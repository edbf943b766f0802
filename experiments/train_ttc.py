"""Trains the token classifier phi with token-wise augmentation (Sec. 3.3-3.4, Alg. 1).

  python experiments/train_ttc.py --flagfile=experiments/configs/synthetic_ttc.flags
  python experiments/train_ttc.py --flagfile=... --no_augment    # Table 3 ablation
  python experiments/train_ttc.py --flagfile=... --resume        # continue after a kill
"""
import os
import sys

from absl import app
from absl import flags
from absl import logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from colt_jax import configs  # pylint: disable=g-import-not-at-top
from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top

configs.define_flags(configs.TTCConfig)
_RESUME = flags.DEFINE_boolean('resume', True, 'Continue from the latest checkpoint of workdir.')


def main(argv):
  del argv
  cfg = configs.from_flags(configs.TTCConfig)
  logging.info('config: %s', cfg)
  state = trainers.train_ttc(cfg, resume=_RESUME.value)
  print(f'ttc: trained {int(state.step)} steps; checkpoints in {cfg.workdir}/checkpoints')


if __name__ == '__main__':
  app.run(main)
