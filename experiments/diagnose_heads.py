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

from colt_jax.util import cli
import diagnosis_cli
import head_quality

flags.adopt_module_key_flags(diagnosis_cli)  # --dataset, --data_dir, --folds, --out

_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the colt-pairs rows whose phi is read.',
                             lower_bound=0)
_ROWS_DIR = flags.DEFINE_string('rows_dir', '', 'The reproduction\'s row cache (default '
                                'docs/results/<dataset>-rows).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = diagnosis_cli.out_path(head_quality.heads_path)
  result = head_quality.diagnose(diagnosis_cli.reproduce_config(_ROWS_DIR.value),
                                 seed=_SEED.value)
  command = diagnosis_cli.command('diagnose_heads.py',
                                  *([f'--seed {_SEED.value}'] if _SEED.value else []))
  result['command'] = command
  diagnosis_cli.write(out, result)
  print('\n'.join(head_quality.summary_lines(result, command)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
