"""Trains the token classifier phi with token-wise augmentation (Sec. 3.3-3.4, Alg. 1).

  python experiments/train_ttc.py --flagfile=experiments/configs/paper/div400_ttc.flags
  python experiments/train_ttc.py --flagfile=experiments/configs/tuned/synthetic_ttc.flags
  python experiments/train_ttc.py --flagfile=... --no_augment    # Table 3 ablation
  python experiments/train_ttc.py --flagfile=... --num_layers=6 --num_images=150
  python experiments/train_ttc.py --flagfile=... --scl_checkpoint=   # "without SCL"
  python experiments/train_ttc.py --flagfile=... --eval_split=test  # F1@20 at checkpoints
  python experiments/train_ttc.py --method=colt-pairs --query_relative ...  # the extension

The method trained is named by --method (on the command line or in a flagfile; the tuned
flagfiles name `colt-pairs`): `colt` (the default) is the paper's phi from TTCConfig and its
flags, and this program then imports nothing of colt_jax/pairs/; `colt-pairs` adds the flags
of colt_jax/pairs/ (query-relative tokens, relevance and pair heads, token inputs). The method
is read before the flags are defined (`trainer_cli.method_from_argv`) and recorded in every
checkpoint's config (`train.method_registry`).

Losses, and with --eval_split that split's P/CR/F1@20 at every checkpoint, go to
<workdir>/metrics.jsonl ("test/F1@20") and TensorBoard ("test/F1_20": its tags have no '@'):
`tensorboard --logdir <workdir>/tensorboard` (pip install tensorboard==2.21.0: not installed by make install).
"""
import sys

from absl import flags

from colt_jax.util import cli
from colt_jax.data import splits as data
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError
from colt_jax.train import method_registry
from colt_jax.train import trainer_cli as train_cli
from colt_jax.train import trainers

METHOD = train_cli.method_from_argv(sys.argv)
CONFIG = method_registry.config_class(METHOD)
train_cli.define(CONFIG, method=METHOD)
_EVAL_SPLIT = flags.DEFINE_enum(
    'eval_split', '', ['', 'dev', 'test'], 'Also score each checkpoint on this split (pool '
    'protocol, F1@20 etc. as "<split>/F1@20"). With the training split it is a training '
    'curve; choose steps on held-out topics (experiments/choose_steps.py), never on test.')
_EVAL_FEATURES = flags.DEFINE_string('eval_features_dir', '', 'Feature store of --eval_split '
                                     '(default: the dataset\'s default store of that split).')


def _train(cfg, **kwargs):
  scorer = None
  if _EVAL_FEATURES.value and not _EVAL_SPLIT.value:
    raise InputError('--eval_features_dir is the store of --eval_split: it needs --eval_split')
  if _EVAL_SPLIT.value:
    # The evaluation (its baselines are colt-pairs' too) is imported only to score.
    from colt_jax.evaluation import methods as evaluation  # pylint: disable=g-import-not-at-top
    split, store = data.load(cfg.dataset, _EVAL_SPLIT.value, cfg.data_dir,
                             _EVAL_FEATURES.value)
    train_dim = flagcheck.default_store_dim(cfg.dataset, cfg.split, cfg.data_dir,
                                            cfg.features_dir)
    if train_dim and train_dim != store.dim:
      raise InputError(f'--eval_features_dir: the {_EVAL_SPLIT.value} store '
                       f'{store.meta.get("path", "?")} has feature dimension {store.dim}, the '
                       f'training store (--features_dir) {train_dim}; score on features of '
                       'the same encoder')
    scorer = evaluation.checkpoint_scorer(cfg, split, store)
  return trainers.train_ttc(cfg, on_checkpoint=scorer, **kwargs)


if __name__ == '__main__':
  cli.run(train_cli.main_for(CONFIG, _train, 'ttc'))
