r"""Diagnostics of colt-pairs on the reproduction's cross-validation rows; nothing is chosen by
them (`colt_jax/reproduction/diagnostics/`).

  python experiments/diagnose.py --what heads --dataset div400 --data_dir ../shared/data/div400
  python experiments/diagnose.py --what steps --num_layers 8 --steps 300 --scored 100,200,300

--what heads: per held-out topic, the ROC AUC of same-cluster pairs and of relevance as scored
by colt-pairs' phi, by gbt-pairs and by the features' cosines (about a minute per fold).
--what headroom: colt-pairs' lists rebuilt from oracle heads (about 30 seconds in all).
--what relevance: its lists rebuilt with a relevance model beside phi (about 12 minutes).
--what signals: that model's AUC with pool context or photo metadata (about 11 minutes).
--what steps: phi trained longer (or larger: --num_layers, --model_dim, ...) and scored per
checkpoint (about 10 minutes per fold at 1000 steps). Times on 2 cores.
Run after `experiments/reproduce.py`; each writes --out (default the JSON that `reproduce.py
--report_only` renders into docs/RESULTS.md) and prints its table.
"""
from absl import flags
from absl import logging

from colt_jax.reproduction.diagnostics import runner
from colt_jax.train import configs
from colt_jax.util import cli

_WHAT = flags.DEFINE_enum('what', None, runner.WHATS, 'The diagnosis.')
_DATASET = flags.DEFINE_enum('dataset', 'div400', list(configs.DATASETS),
                             'Dataset of the reproduction (official layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
_FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                              lower_bound=2, upper_bound=100)
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default: the diagnosis\' own file, '
                           'which the report reads).')
_SEED = flags.DEFINE_integer('seed', 0, 'heads: seed of the colt-pairs rows whose phi is read.',
                             lower_bound=0)
_ROWS_DIR = flags.DEFINE_string('rows_dir', '', 'heads: the reproduction\'s row cache '
                                '(default: the committed one).')
_STEPS = flags.DEFINE_integer('steps', 1000, 'steps: training steps of the longer phi.',
                              lower_bound=1, upper_bound=1_000_000)
_EVERY = flags.DEFINE_integer('every', 100, 'steps: a checkpoint every this many steps.',
                              lower_bound=1, upper_bound=1_000_000)
_SCORED = flags.DEFINE_list('scored', ['100', '200', '300', '500', '1000'],
                            'steps: checkpoints scored (multiples of --every, <= --steps).')
_NUM_LAYERS = flags.DEFINE_integer('num_layers', None, 'steps: phi\'s layers (default: the '
                                   'row\'s).', lower_bound=1, upper_bound=64)
_MODEL_DIM = flags.DEFINE_integer('model_dim', None, 'steps: phi\'s width (default: the '
                                  'row\'s).', lower_bound=1, upper_bound=4096)
_NUM_HEADS = flags.DEFINE_integer('num_heads', None, 'steps: phi\'s attention heads (default: '
                                  'the row\'s).', lower_bound=1, upper_bound=64)
_MLP_RATIO = flags.DEFINE_integer('mlp_ratio', None, 'steps: phi\'s MLP width over its width '
                                  '(default: the row\'s).', lower_bound=1, upper_bound=16)
_APPEARANCE = flags.DEFINE_bool('appearance_tokens', False, 'steps: phi with each official '
                                'descriptor also as a token part of its own.')
_APPEARANCE_DIM = flags.DEFINE_integer('appearance_dim', None, 'steps: with '
                                       '--appearance_tokens, each descriptor part through a '
                                       'bottleneck this wide.', lower_bound=1, upper_bound=4096)
flags.mark_flag_as_required('what')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  options = [n for names in runner.OPTIONS.values() for n in names]
  runner.check_options(_WHAT.value, [n for n in options if flags.FLAGS[n].present])
  changes = runner.phi_changes({n: flags.FLAGS[n].value for n in runner.PHI_CHANGES})
  request = runner.Request(
      what=_WHAT.value, dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
      folds_given=_FOLDS.present, out=_OUT.value, seed=_SEED.value, rows_dir=_ROWS_DIR.value,
      steps=_STEPS.value, every=_EVERY.value, scored=tuple(_SCORED.value), phi_changes=changes)
  diagnosis = runner.run(request, log=lambda text: print(text, flush=True))
  print('\n'.join(diagnosis.summary))
  print(f'wrote {diagnosis.out}')


if __name__ == '__main__':
  cli.run(main)
