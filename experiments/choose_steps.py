"""Chooses CoLT's settings on dev alone (a dev-internal hold-out); test data is never read.

  python experiments/choose_steps.py --dataset div400 --data_dir ../shared/data/div400 \
      --what scl                        # g: beta x learning rate, scored as SCL + top-k
  python experiments/choose_steps.py ... --what ttc   # phi: steps x irrelevant_threshold
  python experiments/choose_steps.py ... --what ttc --protocol global  # phi for the global protocol
  python experiments/choose_steps.py ... --what ttc --variant 'global labels'

Trains on dev minus --holdout topics and scores on the held-out dev topics (F1@20, --protocol;
phi is trained under the protocol it is scored on), writing docs/results/<dataset>/choose_*.json (shown in docs/RESULTS.md). The chosen
values go into experiments/configs/<dataset>_colt_*.flags and ReproduceConfig by hand.
"""
import json

from absl import flags
from absl import logging

from colt_jax import atomic
from colt_jax import cli
from colt_jax import reproduce

_DATASET = flags.DEFINE_enum('dataset', 'div400', ['div400', 'div150cred'], 'Dataset.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root.')
_HOLDOUT = flags.DEFINE_integer('holdout', 7, 'Dev topics held out of training and scored.',
                                lower_bound=1)
_STEPS = flags.DEFINE_list('steps', ['100', '200', '300', '400', '600'], 'Checkpoints scored.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the hold-out draw and of training.',
                             lower_bound=0)
_WHAT = flags.DEFINE_enum('what', 'ttc', ['ttc', 'scl'], 'What to choose.')
_VARIANT = flags.DEFINE_string('variant', 'colt', 'The CoLT row (colt_jax/reproduce.py '
                               'VARIANTS) whose schedule is scored.')
_PROTOCOL = flags.DEFINE_enum('protocol', 'pool', ['pool', 'global'],
                               'Protocol phi is trained for and scored under.')
_PROGRESS = flags.DEFINE_bool('progress', True, 'Progress bars.')
_WITH_DESCRIPTORS = flags.DEFINE_bool(
    'with_descriptors', False, 'Features with the official visual descriptors appended '
    '(extract_features.py --with_descriptors); work, results and report under <dataset>-descvis.')
_OUT = flags.DEFINE_string('out', '', 'Write the scores as JSON here (default where the '
                           'results report and reproduce.py read them: '
                           'docs/results/<dataset>[-descvis]/choose_steps<suffix>.json).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  cfg = reproduce.ReproduceConfig(dataset=_DATASET.value, data_dir=_DATA_DIR.value,
                                  progress=_PROGRESS.value,
                                  with_descriptors=_WITH_DESCRIPTORS.value)
  if _WHAT.value == 'scl':
    result = reproduce.choose_scl(cfg, _HOLDOUT.value, _SEED.value, protocol=_PROTOCOL.value)
  else:
    result = reproduce.choose_steps(cfg, _HOLDOUT.value, [int(s) for s in _STEPS.value],
                                    _SEED.value, protocol=_PROTOCOL.value,
                                    variant=_VARIANT.value)
  out = _OUT.value or reproduce.choice_path(cfg, _WHAT.value, _PROTOCOL.value, _VARIANT.value)
  atomic.write_json(out, result)
  print(json.dumps(result, indent=1))


if __name__ == '__main__':
  cli.run(main)
