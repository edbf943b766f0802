r"""Real CoLT models for MiniLM text features, in one command (`make model`).

  python experiments/make_model.py --data_dir ../shared/data/div400
  make model ROWS=colt-pairs-text-only    # one row (make passes ROWS to --rows)

Trains on all 157 Div400 topics (dev and test together) with MiniLM text features (extracted
first into --features_root, the repository's work/features/div400-minilm/, when it lacks
them; resumable), for the rows of --rows (default all three, in this order: first the one a
collection of your own can use):

* `colt-pairs-text-only` (formerly `colt-pairs`, still accepted): phi with relevance and pair
  heads on the text features alone, the list by greedy expected coverage
  (w = --coverage_weight): the row for your own collections, which have no official
  descriptors (`experiments/search.py --store <a store indexed with --encoder minilm> --model
  work/models/div400-minilm-colt-pairs-text-only`).
* `recommended` (work/models/div400-minilm-recommended, search.py's and serve.py's default
  --model): the method that docs/RESULTS.md's headline names, chosen without the test
  topics. The rule, fixed in advance (colt_jax/reproduction/recommendation.py): among the
  learned colt-pairs rows, the one whose own chosen setting scores the highest F1@20 on the
  inner folds of the dev topics (ties: the simpler). It is read from the reproduction's
  committed row cache (--rows_dir, row-cache/div400: the official `coverage choice <row>
  (pool)` records), never from test scores; it chose `colt-pairs relevance` (so did every
  cross-validation fold). The row is trained with the setting it chose on dev's inner folds
  (list rule and its parameters, phi's checkpoint, a), on its feature views (text, the ten
  official descriptors, user and day: a view store of all topics written to
  work/features/div400-minilm-<views>/all, statistics of every photo, and named in the model
  directory as search.py's and serve.py's default --store), with its relevance model fitted
  on every topic.
* `colt`: the paper's method in this repo's configuration (experiments/configs/tuned/div400_*
  flagfiles, phi's steps and relevance threshold as chosen on dev:
  div400_phi_pool.choice.flags); phi labels topic-local groups ("group i"), never the
  training topics' category names.

Each is saved as a model directory (g, phi, the inference settings, any relevance model) under
--out (work/models/ by default: <out>/div400-minilm-<row>). Interrupted? Run it again:
trainings resume from their checkpoints; finished ones are reused.
"""
import os

from absl import flags
from absl import logging

from colt_jax.reproduction import full_models
from colt_jax.reproduction import reproduce_config
from colt_jax.util import cli
from colt_jax.util import flagcheck

_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Div400 root in its official layout (default '
                                '$DIV400_ROOT).')
_OUT = flags.DEFINE_string('out', full_models.DEFAULT_OUT, 'Folder of the model directories '
                           '(search.py and serve.py look for the recommended one there). Every '
                           'folder is relative to the working folder: run from the checkout\'s '
                           'root, as `make model` does.')
_WORKDIR = flags.DEFINE_string('workdir', '', 'Trainings (checkpoints; default '
                               '<out>/training).')
_FEATURES_ROOT = flags.DEFINE_string(
    'features_root', os.path.join('work', 'features', 'div400-minilm'),
    'Folder of the MiniLM feature stores <split>/ (extracted there when missing; reproduce.py '
    'and choose_steps.py read work/features/div400-minilm/ too).')
_SEED = flags.DEFINE_integer('seed', 0, 'Training seed.', lower_bound=0,
                             upper_bound=flagcheck.MAX_SEED)
_ROWS = flags.DEFINE_list('rows', list(full_models.ROWS), 'Rows to train, in this order: '
                          + ', '.join(full_models.ROWS) + ' (colt-pairs: the text-only row\'s '
                          'former name); `make model ROWS=...` passes its ROWS here.')
_ROWS_DIR = flags.DEFINE_string(
    'rows_dir', full_models.DEFAULT_ROWS_DIR, 'The reproduction\'s row cache whose dev choice '
    'records name the recommended row and its setting (reproduce.py --rows_dir).')
_COVERAGE_WEIGHT = flags.DEFINE_float(
    'coverage_weight', 0.5, 'w of the text-only colt-pairs row\'s expected-coverage lists (0: '
    'coverage only, 1: relevance only).', lower_bound=0.0, upper_bound=1.0)
_PROGRESS = flags.DEFINE_bool('progress', True, 'Progress bars.')
_COMPILATION_CACHE = flags.DEFINE_bool(
    'compilation_cache', True, 'Keep XLA\'s compiled programs in <workdir>/jax_cache, so that '
    'trainings of the same shapes (and reruns) skip compiling.')

def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  rows = flagcheck.parse_names('--rows', _ROWS.value,
                               list(full_models.ROWS) + list(full_models.OLD_NAMES))
  cfg = reproduce_config.ReproduceConfig(dataset='div400', data_dir=_DATA_DIR.value,
                                 seeds=(_SEED.value,), progress=_PROGRESS.value,
                                 compilation_cache=_COMPILATION_CACHE.value,
                                 features_root=_FEATURES_ROOT.value)
  full_models.build(cfg, _OUT.value, _WORKDIR.value, _SEED.value, tuple(rows),
                    _COVERAGE_WEIGHT.value, _ROWS_DIR.value)


if __name__ == '__main__':
  cli.run(main)
