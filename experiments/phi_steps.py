"""Would more training move colt-pairs? Its phi trained longer, scored on held-out topics.

  python experiments/phi_steps.py --dataset div400 --data_dir ../shared/data/div400

After `experiments/reproduce.py` (its cross-validation rows): `steps_quality.run` trains, per
fold, the colt-pairs row's phi for --steps steps (a checkpoint every --every) and scores each
of --scored on the fold's held-out topics (pair and relevance AUC of its heads, F1@20 of the
row's list rule), paired per topic with the row's own phi. A diagnostic: nothing is chosen by
it. Writes --out (default docs/results/<dataset>-phi-steps.json, which `reproduce.py
--report_only` renders into RESULTS.md) and prints the table; trainings go to the
reproduction's work folder (reused when there). About 10 minutes per fold at 1000 steps on 2
cores.
"""
from __future__ import annotations

from absl import flags
from absl import logging

from colt_jax import cli
from colt_jax import outputs
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
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default '
                           'docs/results/<dataset>-phi-steps.json).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = _OUT.value or steps_quality.steps_path(_DATASET.value)
  outputs.check_writable_file(out, 'the table', flag='--out')
  scored = steps_quality.scored_steps(_SCORED.value, _STEPS.value, _EVERY.value)
  cfg = ReproduceConfig(dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
                        rows_dir=f'docs/results/{_DATASET.value}-rows', progress=False)
  result = steps_quality.run(cfg, _STEPS.value, _EVERY.value, scored,
                             log=lambda text: print(text, flush=True))
  result['command'] = (f'python experiments/phi_steps.py --dataset {_DATASET.value} --steps '
                       f'{_STEPS.value} --every {_EVERY.value}')
  outputs.write_owned_json(out, result, 'the table', flag='--out')
  print('\n'.join(steps_quality.summary_lines(result)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
