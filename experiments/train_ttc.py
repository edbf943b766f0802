"""Trains the token classifier phi with token-wise augmentation (Sec. 3.3-3.4, Alg. 1).

  python experiments/train_ttc.py --flagfile=experiments/configs/synthetic_ttc.flags
  python experiments/train_ttc.py --flagfile=... --no_augment    # Table 3 ablation
  python experiments/train_ttc.py --flagfile=... --num_layers=6 --num_images=150
  python experiments/train_ttc.py --flagfile=... --scl_checkpoint=   # "without SCL"
"""

from colt_jax import cli
from colt_jax import configs
from colt_jax.train import cli as train_cli
from colt_jax.train import trainers

train_cli.define(configs.TTCConfig)

if __name__ == '__main__':
  cli.run(train_cli.main_for(configs.TTCConfig, trainers.train_ttc, 'ttc'))
