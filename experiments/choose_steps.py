"""Chooses the TTC's number of training steps on dev alone (a dev-internal hold-out).

  python experiments/choose_steps.py --dataset div400 --data_dir ../shared/data/div400
  python experiments/choose_steps.py ... --variant 'global labels'   # the label scheme

Trains CoLT (experiments/configs/<dataset>_colt_*.flags) on dev minus --holdout topics and
scores each checkpoint in --steps on the held-out dev topics (F1@20, pool protocol). The
chosen value goes into <dataset>_colt_ttc.flags by hand; test data is never read.
"""
import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from colt_jax import reproduce  # pylint: disable=g-import-not-at-top

_DATASET = flags.DEFINE_enum('dataset', 'div400', ['div400', 'div150cred'], 'Dataset.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root.')
_HOLDOUT = flags.DEFINE_integer('holdout', 7, 'Dev topics held out.')
_STEPS = flags.DEFINE_list('steps', ['100', '200', '300', '400', '600'], 'Checkpoints scored.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the hold-out draw and of training.')
_VARIANT = flags.DEFINE_string('variant', 'colt', 'The CoLT row (colt_jax/reproduce.py '
                               'VARIANTS) whose schedule is scored.')
_OUT = flags.DEFINE_string('out', 'docs/results/{dataset}/choose_steps{suffix}.json',
                           'Write the scores as JSON here (read by the results report).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  cfg = reproduce.ReproduceConfig(dataset=_DATASET.value, data_dir=_DATA_DIR.value)
  result = reproduce.choose_steps(cfg, _HOLDOUT.value, [int(s) for s in _STEPS.value],
                                  _SEED.value, variant=_VARIANT.value)
  result['variant'] = _VARIANT.value
  if _OUT.value:
    suffix = '' if _VARIANT.value == 'colt' else '-' + _VARIANT.value.replace(' ', '_')
    reproduce._write_json(_OUT.value.format(dataset=_DATASET.value, suffix=suffix), result)  # pylint: disable=protected-access
  print(json.dumps(result, indent=1))


if __name__ == '__main__':
  app.run(main)
