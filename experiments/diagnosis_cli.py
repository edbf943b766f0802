"""The command line the `diagnose_*.py` scripts share: --dataset, --data_dir, --folds and
--out; the reproduction's config over the committed row cache, the --out check before any
work, the owned JSON written after it and the command recorded in it."""
from absl import flags

from colt_jax.train import configs
from colt_jax.util import outputs
import variants

DATASET = flags.DEFINE_enum('dataset', 'div400', list(configs.DATASETS),
                            'Dataset of the reproduction (official layout).')
DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                             lower_bound=2, upper_bound=100)
OUT = flags.DEFINE_string('out', '', 'The JSON written (default: the diagnosis\' own '
                          'docs/results/<dataset>-<name>.json, which the report reads).')


def out_path(default_path) -> str:
  """--out, else `default_path(dataset)`; refused before any work when it is not ours."""
  out = OUT.value or default_path(DATASET.value)
  outputs.check_writable_file(out, 'the diagnosis', flag='--out')
  return out


def reproduce_config(rows_dir: str = '') -> variants.ReproduceConfig:
  """The reproduction's config: its row cache `rows_dir`, default the committed one."""
  return variants.ReproduceConfig(
      dataset=DATASET.value, data_dir=DATA_DIR.value, folds=FOLDS.value,
      rows_dir=rows_dir or f'docs/results/{DATASET.value}-rows', progress=False)


def command(script: str, *extra: str) -> str:
  """The command line recorded in the JSON (--folds when given, then `extra`)."""
  return ' '.join([f'python experiments/{script}', f'--dataset {DATASET.value}']
                  + ([f'--folds {FOLDS.value}'] if FOLDS.present else []) + list(extra))


def write(out: str, result: dict) -> None:
  """`result` as the JSON `out` (atomic; recorded as the project's)."""
  outputs.write_owned_json(out, result, 'the diagnosis', flag='--out')
