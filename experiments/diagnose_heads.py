r"""What colt-pairs' heads predict on held-out topics, against the baselines' signals.

  python experiments/diagnose_heads.py --dataset div400 --data_dir ../shared/data/div400

After `experiments/reproduce.py` (its cross-validation rows and their trainings in the work
folder): per held-out topic, the ROC AUC of same-cluster pairs and of relevance as scored by
colt-pairs' phi, by gbt-pairs (refitted on each fold's training topics) and by the cosines of
the text features and of colt-pairs' feature setting (`experiments/head_quality.py`). Writes
--out (default docs/results/<dataset>-heads.json), prints the table; `reproduce.py
--report_only` adds it to docs/RESULTS.md. About a minute per fold on 2 cores.
"""
from absl import flags
from absl import logging

from colt_jax import cli
from colt_jax import configs
from colt_jax import outputs
import head_quality
import variants

_DATASET = flags.DEFINE_enum('dataset', 'div400', list(configs.DATASETS),
                             'Dataset of the reproduction (official layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
_FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                              lower_bound=2, upper_bound=100)
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the colt-pairs rows whose phi is read.',
                             lower_bound=0)
_ROWS_DIR = flags.DEFINE_string('rows_dir', '', 'The reproduction\'s row cache (default '
                                'docs/results/<dataset>-rows).')
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default '
                           'docs/results/<dataset>-heads.json).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = _OUT.value or head_quality.heads_path(_DATASET.value)
  outputs.check_writable_file(out, 'the diagnosis', flag='--out')
  cfg = variants.ReproduceConfig(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
      rows_dir=_ROWS_DIR.value or f'docs/results/{_DATASET.value}-rows', progress=False)
  result = head_quality.diagnose(cfg, seed=_SEED.value)
  command = ' '.join(['python experiments/diagnose_heads.py', f'--dataset {_DATASET.value}'] +
                     ([f'--seed {_SEED.value}'] if _SEED.value else []))
  result['command'] = command
  outputs.write_owned_json(out, result, 'the diagnosis', flag='--out')
  print('\n'.join(head_quality.summary_lines(result, command)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
