r"""How far could better heads take colt-pairs' list rule? Its lists rebuilt from oracle heads.

  python experiments/diagnose_headroom.py --dataset div400 --data_dir ../shared/data/div400

After `experiments/reproduce.py` (its cross-validation rows and their trainings in the work
folder): per held-out topic, the `colt-pairs rule` row's lists rebuilt by its own rule from
phi's relevance and pair heads, from the ground truth in place of either or both, and from
phi's pair head mixed with the ground truth (`experiments/headroom.py`), scored by the
official scorer. Writes --out (default docs/results/<dataset>-headroom.json), prints the
table; `reproduce.py --report_only` adds it to docs/RESULTS.md. About 30 seconds in all on
2 cores. A bound that reads held-out ground truth: it chooses nothing.
"""
from absl import flags
from absl import logging

from colt_jax import cli
from colt_jax import configs
from colt_jax import outputs
import headroom
import variants

_DATASET = flags.DEFINE_enum('dataset', 'div400', list(configs.DATASETS),
                             'Dataset of the reproduction (official layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
_FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                              lower_bound=2, upper_bound=100)
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default '
                           'docs/results/<dataset>-headroom.json).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = _OUT.value or headroom.headroom_path(_DATASET.value)
  outputs.check_writable_file(out, 'the diagnosis', flag='--out')
  cfg = variants.ReproduceConfig(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
      rows_dir=f'docs/results/{_DATASET.value}-rows', progress=False)
  result = headroom.diagnose(cfg, log=lambda text: print(text, flush=True))
  result['command'] = f'python experiments/diagnose_headroom.py --dataset {_DATASET.value}'
  outputs.write_owned_json(out, result, 'the diagnosis', flag='--out')
  print('\n'.join(headroom.summary_lines(result)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
