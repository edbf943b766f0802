"""Would more training, or a larger phi, move colt-pairs? Its phi trained longer (or larger),
scored on held-out topics.

  python experiments/phi_steps.py --dataset div400 --data_dir ../shared/data/div400
  python experiments/phi_steps.py --dataset div400 --num_layers 8 --steps 300 \
      --scored 100,200,300

After `experiments/reproduce.py` (its cross-validation rows): `steps_quality.run` trains, per
fold, the colt-pairs row's phi for --steps steps (a checkpoint every --every) and scores each
of --scored on the fold's held-out topics (pair and relevance AUC of its heads, F1@20 of the
row's list rule), paired per topic with the row's own phi. A diagnostic: nothing is chosen by
it. Writes --out (default docs/results/<dataset>-phi-steps.json, which `reproduce.py
--report_only` renders into RESULTS.md) and prints the table; trainings go to the
reproduction's work folder (reused when there). About 10 minutes per fold at 1000 steps on 2
cores. --num_layers, --model_dim, --num_heads and --mlp_ratio train phi at another size, and
--appearance_tokens with the descriptors as token parts of their own (the row's other settings
kept); each has a table in a file of its own (docs/results/<dataset>-phi-steps-num_layers8.json,
docs/results/<dataset>-phi-steps-appearance_tokens1.json, ...).
"""
from __future__ import annotations

from absl import flags
from absl import logging

from colt_jax.util import cli
from colt_jax.util import outputs
import steps_quality
from variants import ReproduceConfig

_DATASET = flags.DEFINE_enum('dataset', 'div400', ['div400', 'div150cred'],
                             'Dataset of the reproduction (official layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
_FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                              lower_bound=2, upper_bound=100)
_STEPS = flags.DEFINE_integer('steps', 1000, 'Training steps of the longer phi.',
                              lower_bound=1, upper_bound=1_000_000)
_EVERY = flags.DEFINE_integer('every', 100, 'A checkpoint every this many steps.',
                              lower_bound=1, upper_bound=1_000_000)
_SCORED = flags.DEFINE_list('scored', ['100', '200', '300', '500', '1000'],
                            'Checkpoints scored (steps: multiples of --every, <= --steps).')
_NUM_LAYERS = flags.DEFINE_integer('num_layers', None, 'phi\'s layers (default: the row\'s).',
                                   lower_bound=1, upper_bound=64)
_MODEL_DIM = flags.DEFINE_integer('model_dim', None, 'phi\'s width (default: the row\'s).',
                                  lower_bound=1, upper_bound=4096)
_NUM_HEADS = flags.DEFINE_integer('num_heads', None, 'phi\'s attention heads (default: the '
                                  'row\'s).', lower_bound=1, upper_bound=64)
_MLP_RATIO = flags.DEFINE_integer('mlp_ratio', None, 'phi\'s MLP width over its width '
                                  '(default: the row\'s).', lower_bound=1, upper_bound=16)
_APPEARANCE = flags.DEFINE_bool('appearance_tokens', False, 'Train phi with each official '
                                'descriptor also as a token part of its own (TTCConfig.'
                                'appearance_tokens; the row: off).')
_APPEARANCE_DIM = flags.DEFINE_integer('appearance_dim', None, 'With --appearance_tokens: '
                                       'each descriptor part through a bottleneck this wide '
                                       '(TTCConfig.appearance_dim).', lower_bound=1,
                                       upper_bound=4096)
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default '
                           'docs/results/<dataset>-phi-steps.json, at another size '
                           'docs/results/<dataset>-phi-steps-num_layers8.json and the like).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  given = {'num_layers': _NUM_LAYERS.value, 'model_dim': _MODEL_DIM.value,
           'num_heads': _NUM_HEADS.value, 'mlp_ratio': _MLP_RATIO.value}
  changes = {k: v for k, v in given.items() if v is not None}
  if _APPEARANCE.value:
    changes['appearance_tokens'] = True
  if _APPEARANCE_DIM.value is not None:
    changes['appearance_dim'] = _APPEARANCE_DIM.value
  out = _OUT.value or steps_quality.steps_path(_DATASET.value, changes)
  outputs.check_writable_file(out, 'the table', flag='--out')
  scored = steps_quality.scored_steps(_SCORED.value, _STEPS.value, _EVERY.value)
  cfg = ReproduceConfig(dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
                        rows_dir=f'docs/results/{_DATASET.value}-rows', progress=False)
  result = steps_quality.run(cfg, _STEPS.value, _EVERY.value, scored,
                             log=lambda text: print(text, flush=True), changes=changes)
  size = ''.join(f' --{k}' if v is True else f' --{k} {v}' for k, v in changes.items())
  result['command'] = (f'python experiments/phi_steps.py --dataset {_DATASET.value}{size} '
                       f'--steps {_STEPS.value} --every {_EVERY.value} --scored '
                       f'{",".join(str(s) for s in scored)}')
  outputs.write_owned_json(out, result, 'the table', flag='--out')
  print('\n'.join(steps_quality.summary_lines(result)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
