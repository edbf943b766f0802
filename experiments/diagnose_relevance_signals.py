r"""Would pool context or photo metadata move the relevance model? Its relevance AUC on every
cross-validation fold's held-out topics, with each signal added (`relevance_signals.py`).

  python experiments/diagnose_relevance_signals.py --dataset div400 --data_dir ../shared/data/div400

Needs the MiniLM features (extracted first when missing), no trained phi. Writes --out
(default docs/results/<dataset>-relevance-signals.json) and prints the table; `reproduce.py
--report_only` adds it to docs/RESULTS.md. About 11 minutes on 2 cores. Every condition is
scored on held-out topics: it chooses nothing.
"""
from absl import flags
from absl import logging

from colt_jax.util import cli
import diagnosis_cli
import relevance_signals

flags.adopt_module_key_flags(diagnosis_cli)  # --dataset, --data_dir, --folds, --out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = diagnosis_cli.out_path(relevance_signals.signals_path)
  result = relevance_signals.diagnose(diagnosis_cli.reproduce_config(),
                                      log=lambda text: print(text, flush=True))
  result['command'] = diagnosis_cli.command('diagnose_relevance_signals.py')
  diagnosis_cli.write(out, result)
  print('\n'.join(relevance_signals.summary_lines(result)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
