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

from colt_jax import cli
from colt_jax import configs
from colt_jax import outputs
import relevance_signals
import variants

_DATASET = flags.DEFINE_enum('dataset', 'div400', list(configs.DATASETS),
                             'Dataset of the reproduction (official layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
_FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                              lower_bound=2, upper_bound=100)
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default '
                           'docs/results/<dataset>-relevance-signals.json).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = _OUT.value or relevance_signals.signals_path(_DATASET.value)
  outputs.check_writable_file(out, 'the diagnosis', flag='--out')
  cfg = variants.ReproduceConfig(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
      rows_dir=f'docs/results/{_DATASET.value}-rows', progress=False)
  result = relevance_signals.diagnose(cfg, log=lambda text: print(text, flush=True))
  result['command'] = ('python experiments/diagnose_relevance_signals.py --dataset '
                       f'{_DATASET.value}' + (f' --folds {_FOLDS.value}' if _FOLDS.present
                                              else ''))
  outputs.write_owned_json(out, result, 'the diagnosis', flag='--out')
  print('\n'.join(relevance_signals.summary_lines(result)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
