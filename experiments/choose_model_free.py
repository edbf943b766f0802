r"""Chooses the default of a store without a model and writes colt_jax/evaluation/model_free.json.

  python experiments/choose_model_free.py --data_dir $DIV400_ROOT

The rule, fixed in advance (colt_jax/reproduction/model_free_rule.py): on the training topics
(here every Div400 topic: the default is not evaluated on them, the reproduction's nested
table in docs/RESULTS.md is), each post-processing method's parameters are the grid setting
of least worst regret in mean F1@20 over the feature sets (MiniLM text, TF-IDF text, MiniLM
text + descriptors), and the method is the one whose parameters, so chosen on k-1 of k folds,
score the best F1@20 on the fold left out. The scores are the reproduction's `travel` records
(colt_jax/reproduction/travel.py: TF-IDF and the descriptors' statistics fitted per fold on
its training topics' photos; each topic is scored under the store of the fold that held it
out) in its row cache (--rows_dir, the committed row-cache/div400 by default), computed first
when missing or not fitted on its fold's training topics (MiniLM features extracted first
when absent; about 25 minutes on 2 cores). The file is written atomically, with the rule's
name and text and its evidence (every inner fold's choices and held-out scores).
"""
import os
import sys

from absl import flags
from absl import logging

from colt_jax.data import folds as folds_lib
from colt_jax.evaluation import model_free
from colt_jax.reproduction import model_free_rule
from colt_jax.reproduction import report_travel
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import travel
from colt_jax.util import atomic
from colt_jax.util import cli
from colt_jax.util import flagcheck

_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Div400 root in its official layout (default '
                                '$DIV400_ROOT); read only when a record is missing.')
_ROWS_DIR = flags.DEFINE_string(
    'rows_dir', row_cache.committed_rows_dir('div400'), 'The reproduction\'s row cache holding '
    'the travel records (reproduce.py --rows_dir).')
_FEATURES_ROOT = flags.DEFINE_string(
    'features_root', '', 'Folder of the MiniLM feature stores <split>/ (default '
    'work/features/div400-minilm; extracted there when missing).')
_OUT = flags.DEFINE_string('out', model_free.DEFAULTS_FILE, 'The model-free defaults file '
                           'written (default: the one the package ships).')
_INNER_FOLDS = flags.DEFINE_integer('inner_folds', model_free_rule.INNER_FOLDS, 'Folds of the rule\'s method choice.',
                                    lower_bound=2, upper_bound=flagcheck.MAX_COUNT)
_FOLDS = flags.DEFINE_integer('folds', 5, 'Cross-validation folds of the records (as '
                              'reproduce.py --folds).', lower_bound=2,
                              upper_bound=flagcheck.MAX_COUNT)
_FOLD_SEED = flags.DEFINE_integer('fold_seed', 0, 'Seed of the folds (the reproduction\'s).',
                                  lower_bound=0, upper_bound=flagcheck.MAX_SEED)


def _portable_args(args) -> list:
  """The command's arguments without this machine's folders (--data_dir, --features_root, in
  their `--flag=value` and `--flag value` forms)."""
  out, skip = [], False
  for a in args:
    if skip:
      skip = False
    elif a in ('--data_dir', '--features_root'):
      skip = True
    elif not a.startswith(('--data_dir=', '--features_root=')):
      out.append(a)
  return out


def _kfold(saved, cfg) -> list:
  return folds_lib.kfold(saved['minilm'][0]['topics'], cfg.folds, cfg.fold_seed)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  cfg = reproduce_config.ReproduceConfig(dataset='div400', data_dir=_DATA_DIR.value,
                                         folds=_FOLDS.value, fold_seed=_FOLD_SEED.value,
                                         rows_dir=_ROWS_DIR.value,
                                         features_root=_FEATURES_ROOT.value)
  saved = travel.saved_records(row_cache.RowCache(cfg.rows_dir, own_folder=False).saved_row,
                               cfg.folds, cfg.fold_seed)
  tables = None if travel.missing(saved) else travel.fold_tables(saved, _kfold(saved, cfg))
  if tables is None:  # a record missing, or not fitted on its fold's training topics
    from colt_jax.reproduction.cross_validation import Reproduction  # pylint: disable=g-import-not-at-top
    rep = Reproduction(cfg)
    rep.load()
    saved = travel.stage(rep)
    tables = travel.fold_tables(saved, _kfold(saved, cfg))
  kfold = _kfold(saved, cfg)
  choice = report_travel.shipped_choice(tables, kfold, _INNER_FOLDS.value, cfg.fold_seed)
  command = 'python experiments/choose_model_free.py ' + ' '.join(_portable_args(sys.argv[1:]))
  payload = model_free_rule.defaults_payload(
      choice, candidates=200, evidence={
          'command': command.strip(), 'dataset': 'div400',
          'topics': len(saved['minilm'][0]['topics']),
          'protocol': travel.PROTOCOL, 'feature_sets': [travel.LABELS[e]
                                                        for e in travel.FEATURE_SETS],
          'inner_folds': _INNER_FOLDS.value, 'seed': cfg.fold_seed, 'grids': travel.GRIDS,
          'records': f'{cfg.rows_dir}/{travel.KIND}'})
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  atomic.write_json(_OUT.value, payload, indent=1)
  print(f'wrote {_OUT.value}: default {choice.method} {choice.params[choice.method]}; '
        f'cross-validated F1@20 {choice.cv_scores}')


if __name__ == '__main__':
  cli.run(main)
