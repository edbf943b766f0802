"""Trains the re-encoder g with semantics-aware contrastive learning (Sec. 3.2, Alg. 1).

  python experiments/train_scl.py --flagfile=experiments/configs/tuned/synthetic_scl.flags
  python experiments/train_scl.py --flagfile=... --no_pair2      # Table 4 ablation
  python experiments/train_scl.py --flagfile=... --noresume      # start over
"""

from colt_jax.util import cli
from colt_jax.train import configs
from colt_jax.train import trainer_cli as train_cli
from colt_jax.train import trainers

train_cli.define(configs.SCLConfig)

if __name__ == '__main__':
  cli.run(train_cli.main_for(configs.SCLConfig, trainers.train_scl, 'scl'))
