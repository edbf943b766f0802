"""The real benchmark in one command: features, tuned baselines, CoLT + ablations, CV, report.

  python experiments/reproduce.py --dataset div400 --data_dir ../shared/data/div400

1. extracts MiniLM text features of dev and test (resumable; skipped when the stores exist),
2. runs k-fold cross-validation over all topics (the primary protocol, first), then scores
   the post-processing methods' grids under three feature sets ("without training:
   parameters that travel", colt_jax/reproduction/travel.py),
3. tunes the baselines on dev and scores them on test,
4. trains CoLT on dev (g by SCL, then phi) for every seed and the ablations (one seed),
under the pool and global protocols, and writes docs/results/<dataset>/results.json, the run
files, and docs/RESULTS.md. The settings chosen on dev (experiments/choose_steps.py) come from
experiments/configs/ (<dataset>_{scl,ttc}.flags, <dataset>_phi_<protocol>.choice.flags).
The feature settings beyond text (official visual descriptors, photo metadata: colt_jax/data/views.py)
are rows of the same run (`colt + descvis`, `colt + descvis + metadata`, the baselines on their
features), their statistics fitted on each row's training photos. Interrupted? Run the same
command again: trainings resume from their checkpoints and finished rows are reused
(work/reproduce/<dataset>/); finished rows are kept in row-cache/<dataset>/, which is
committed, so a later session resumes from them (its trainings start anew).
"""

from absl import flags
from absl import logging

from colt_jax.reproduction import pipeline as reproduce
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import variants
from colt_jax.train import configs
from colt_jax.util import cli
from colt_jax.util import flagcheck

_DATASET = flags.DEFINE_enum(
    'dataset', 'div400', ['div400', 'div150cred'],
    'MediaEval dataset to reproduce, in its official layout: div400 (Div400, 2014) or '
    'div150cred (Div150Cred, 2015).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT '
                                '/ $DIV150CRED_ROOT).')
_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'], 'Training seeds of the CoLT rows.')
_ABLATION_SEEDS = flags.DEFINE_integer(
    'ablation_seeds', 1, 'Seeds of the ablation rows (and of the --cv_ablations rows unless '
    '--cv_ablation_seeds is given): the first this many of --seeds (colt, colt-paper and '
    'colt-pairs run every seed).', lower_bound=1,
    upper_bound=flagcheck.MAX_COUNT)
_FOLDS = flags.DEFINE_integer('folds', 5, 'Cross-validation folds over all topics (0 = none).',
                               lower_bound=0, upper_bound=flagcheck.MAX_COUNT)
_PROTOCOLS = flags.DEFINE_list(
    'protocol', ['pool', 'global'], 'Candidate protocols to score, some of pool (each topic\'s '
    'own photos, the official task) and global (the most similar photos of the whole split).')
_VARIANTS = flags.DEFINE_list(
    'variants', list(variants.DEFAULT_VARIANTS),
    'CoLT rows to run (names of experiments/configs/{paper,tuned}/rows/*.json).')
_PER_VIEW = flags.DEFINE_bool(
    'per_view_ablations', False, 'Also the rows that remove one official descriptor each '
    '(colt-pairs without CM, ...; about 30 minutes more on div400): beyond the default budget.')
_CV_ABLATIONS = flags.DEFINE_bool(
    'cv_ablations', False, 'Also score colt-pairs\' ablations (no relevance, pair or class '
    'head; text-only tokens) in the cross-validation, at the --cv_ablation_seeds (20 more '
    'phi trainings a seed, about 80 minutes on div400): beyond the default budget.')
_CV_ABLATION_SEEDS = flags.DEFINE_integer(
    'cv_ablation_seeds', 0, 'Seeds of the --cv_ablations rows: the first this many of --seeds '
    '(0: --ablation_seeds), so that the cross-validation\'s ablations can run every seed while '
    'the dev -> test ablations keep to --ablation_seeds.', lower_bound=0,
    upper_bound=flagcheck.MAX_COUNT)
_DOC = flags.DEFINE_string('doc', '', 'The markdown report (default docs/RESULTS.md).')
_WORKDIR = flags.DEFINE_string('workdir', '', 'Checkpoints and row cache '
                               '(default work/reproduce/<dataset>).')
_ROWS_DIR = flags.DEFINE_string(
    'rows_dir', '', 'The row cache: every finished row and choice, keyed by its configuration '
    '(default row-cache/<dataset>, committed with the results, so that a later session '
    'or a fresh clone resumes from the rows finished before; with --workdir, <workdir>/rows).')
_RESULTS_DIR = flags.DEFINE_string('results_dir', '', 'results.json and run files '
                                   '(default docs/results/<dataset>).')
_CONFIG_DIR = flags.DEFINE_string(
    'config_dir', reproduce_config.CONFIG_DIR, 'This repository\'s tuned flagfiles and choices '
    '(the `colt` row\'s). Every folder is relative to the working folder: run from the '
    'checkout\'s root.')
_PAPER_CONFIG_DIR = flags.DEFINE_string(
    'paper_config_dir', reproduce_config.PAPER_CONFIG_DIR, 'The paper\'s values (the '
    '`colt-paper` row\'s flagfiles).')
_INNER_FOLDS = flags.DEFINE_integer(
    'inner_folds', 3, 'Inner folds over each cross-validation fold\'s training topics that '
    'choose its settings.', lower_bound=2, upper_bound=flagcheck.MAX_COUNT)
_CV_CHOOSE = flags.DEFINE_multi_enum(
    'cv_choose', list(reproduce_config.CV_DEFAULT_CHOICES), list(reproduce_config.CV_CHOICES),
    'What each cross-validation fold chooses by its inner k-fold: ttc (phi\'s steps x '
    'irrelevant_threshold, always), label_scheme, X (images per category), scl (g\'s beta x '
    'learning rate).')
_PAIRS_STEPS = flags.DEFINE_integer(
    'pairs_steps', 300, 'phi\'s steps of the colt-pairs rows in every protocol and fold (the '
    'checkpoint among the last three, every 100 steps, chosen with w on the training topics); '
    '0: the `colt` row\'s steps.', lower_bound=0, upper_bound=flagcheck.MAX_STEPS)
_PROGRESS = flags.DEFINE_bool('progress', True, 'Progress bars.')
_COMPILATION_CACHE = flags.DEFINE_bool(
    'compilation_cache', True, 'Keep XLA\'s compiled programs in <workdir>/jax_cache, so that '
    'trainings of the same shapes (and reruns) skip compiling.')
_PREVIOUS = flags.DEFINE_string(
    'previous_results', '', 'An earlier results.json the report\'s "what changed" section '
    'compares every row with (kept in the new results.json; default: the comparison the '
    'replaced results.json carried).')
_REPORT_ONLY = flags.DEFINE_bool(
    'report_only', False, 'Only rewrite --doc from the existing '
    'results.json (after a change to colt_jax/reproduction/report.py).')


def _rows_dir() -> str:
  """--rows_dir, or its default: the committed row-cache/<dataset> unless --workdir
  names a work folder of its own ('' = <workdir>/rows)."""
  if _ROWS_DIR.value or _WORKDIR.value:
    return _ROWS_DIR.value
  return row_cache.committed_rows_dir(_DATASET.value)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  # Every list flag parsed and bounded before any data is read or folder made.
  seeds = flagcheck.parse_ints('--seeds', _SEEDS.value, low=0, high=flagcheck.MAX_SEED)
  protocols = flagcheck.parse_names('--protocol', _PROTOCOLS.value, configs.PROTOCOLS)
  rows = flagcheck.parse_names('--variants', _VARIANTS.value,
                               variants.ROW_ORDER)
  if _PER_VIEW.value:
    rows = tuple(dict.fromkeys(tuple(rows) + variants.OPT_IN_VARIANTS))
  cfg = reproduce_config.ReproduceConfig(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value, seeds=seeds,
      ablation_seeds=min(_ABLATION_SEEDS.value, len(seeds)),
      cv_ablation_seeds=min(_CV_ABLATION_SEEDS.value, len(seeds)), folds=_FOLDS.value,
      protocols=protocols, variants=rows, cv_ablations=_CV_ABLATIONS.value, doc=_DOC.value,
      workdir=_WORKDIR.value, rows_dir=_rows_dir(),
      results_dir=_RESULTS_DIR.value, progress=_PROGRESS.value,
      config_dir=_CONFIG_DIR.value, paper_config_dir=_PAPER_CONFIG_DIR.value,
      compilation_cache=_COMPILATION_CACHE.value,
      inner_folds=_INNER_FOLDS.value, pairs_steps=_PAIRS_STEPS.value,
      cv_choose=tuple(dict.fromkeys(['ttc'] + _CV_CHOOSE.value)))
  if _REPORT_ONLY.value:
    reproduce.write_report(cfg, previous_results=_PREVIOUS.value)
  else:
    reproduce.run(cfg, previous_results=_PREVIOUS.value)


if __name__ == '__main__':
  cli.run(main)
