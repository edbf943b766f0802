r"""Would a relevance model beside phi move colt-pairs' list rule? Its lists rebuilt with r from
models fitted on each fold's training topics.

  python experiments/diagnose_relevance.py --dataset div400 --data_dir ../shared/data/div400

After `experiments/reproduce.py` (its cross-validation rows and their trainings in the work
folder): per held-out topic, the `colt-pairs rule` row's lists rebuilt by its own rule with
phi's pair probabilities and the relevance of phi, of a logistic or gradient-boosted model of
the photo features with or without the ten official descriptors (fitted on the fold's
training topics), or of phi and a model half each (`experiments/relevance_models.py`), scored
by the official scorer; then, as a check of fairness, gbt-pairs refitted per fold with the
`colt-pairs relevance` row's own relevance model mixed into its r, against that row. Writes
--out (default docs/results/<dataset>-relevance.json), prints the tables; `reproduce.py
--report_only` adds them to docs/RESULTS.md. About 12 minutes on 2 cores. Every condition is
scored on held-out topics: it chooses nothing.
"""
from absl import flags
from absl import logging

from colt_jax.util import cli
import diagnosis_cli
import relevance_models

flags.adopt_module_key_flags(diagnosis_cli)  # --dataset, --data_dir, --folds, --out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = diagnosis_cli.out_path(relevance_models.relevance_path)
  cfg = diagnosis_cli.reproduce_config()
  log = lambda text: print(text, flush=True)
  rep = relevance_models.loaded(cfg, log)
  result = relevance_models.diagnose(cfg, log=log, rep=rep)
  result['command'] = diagnosis_cli.command('diagnose_relevance.py')
  result['gbt'] = relevance_models.diagnose_gbt(cfg, log=log, rep=rep)
  result['gbt']['command'] = result['command']
  diagnosis_cli.write(out, result)
  print('\n'.join(relevance_models.summary_lines(result)
                  + relevance_models.gbt_summary_lines(result['gbt'])))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
