r"""Chooses CoLT's settings on dev alone (a dev-internal hold-out); test data is never read.

  python experiments/choose_steps.py --dataset div400 --data_dir ../shared/data/div400 \
      --what scl                        # g: beta x learning rate, scored as SCL + top-k
  python experiments/choose_steps.py ... --what label_scheme  # phi: local vs global labels
  python experiments/choose_steps.py ... --what ttc   # phi: steps x irrelevant_threshold
  python experiments/choose_steps.py ... --what ttc --protocol global  # the global protocol's
  python experiments/choose_steps.py --dataset synthetic --data_dir work/synthetic-seed0 \
      --what scl                        # the synthetic default, on its dev split

Trains on dev minus --holdout topics and scores on the held-out dev topics (F1@20, --protocol;
phi is trained under the protocol it is scored on). The command writes the scores of every
setting tried into experiments/configs/tuned/evidence/ and, beside them, the flagfile it
proposes (colt_jax/reproduction/choice_files.py; it prints the change as a diff): --what scl
a block of experiments/configs/tuned/<stem>_scl.flags (<stem>: the dataset, e.g. div400 or
synthetic), --what label_scheme one of <stem>_ttc.flags, --what ttc
<dataset>_phi_<protocol>.choice.flags (stating only the values that differ from <stem>_ttc.flags, which sets the others).
It never edits a flagfile: review the proposal, then put it in place with

  python experiments/choose_steps.py --apply experiments/configs/tuned/evidence/<key>.proposed.flags

(refused when the flagfile changed since). reproduce.py and the trainers read those flagfiles.
Run the choices in the order above: each trains with those applied before.
"""
import json
import shlex
import sys

from absl import flags
from absl import logging

from colt_jax.reproduction import choice_files
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import tuning
from colt_jax.train import configs
from colt_jax.util import cli
from colt_jax.util import flagcheck

_DATASET = flags.DEFINE_enum(
    'dataset', 'div400', list(configs.DATASETS),
    'Dataset whose dev split the choice is made on: synthetic (the generated default, '
    '--data_dir its folder), div400 or div150cred (official MediaEval layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Root of the dataset (official layout; '
                                'default $DIV400_ROOT / $DIV150CRED_ROOT, work/synthetic-seed0).')
_FEATURES_ROOT = flags.DEFINE_string(
    'features_root', '', 'Folder of the feature stores <split>/ (default '
    'work/features/<dataset>-minilm/), e.g. the stores of a dataset made by '
    'data_prep/make_dataset.py.')
_HOLDOUT = flags.DEFINE_integer('holdout', 7, 'Dev topics held out of training and scored '
                                '(fewer than the dev topics).', lower_bound=1,
                                upper_bound=flagcheck.MAX_COUNT)
_STEPS = flags.DEFINE_list('steps', ['100', '200', '300', '400', '600'],
                           'phi checkpoints scored (--what ttc, label_scheme).')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the hold-out draw and of training.',
                             lower_bound=0, upper_bound=flagcheck.MAX_SEED)
_WHAT = flags.DEFINE_enum(
    'what', 'ttc', ['scl', 'label_scheme', 'ttc'],
    'What to choose: scl = g\'s beta x learning rate; label_scheme = phi\'s labels, local vs '
    'global; ttc = phi\'s steps x irrelevant_threshold for --protocol.')
_PROTOCOL = flags.DEFINE_enum(
    'protocol', 'pool', list(configs.PROTOCOLS),
    'Protocol phi is trained for and scored under: pool = each topic\'s own photos, global = '
    'the most similar photos of the whole split.')
_PROGRESS = flags.DEFINE_bool('progress', True, 'Progress bars.')
_COMPILATION_CACHE = flags.DEFINE_bool(
    'compilation_cache', True, 'Keep XLA\'s compiled programs in <workdir>/jax_cache, so that '
    'trainings of the same shapes (and reruns) skip compiling.')
_CONFIG_DIR = flags.DEFINE_string('config_dir', reproduce_config.CONFIG_DIR,
                                  'Folder of the flagfiles read and of the choices written '
                                  '(relative to the working folder: run from the checkout\'s '
                                  'root).')
_WORKDIR = flags.DEFINE_string('workdir', '', 'Checkpoints (default '
                               'work/reproduce/<dataset>).')
_APPLY = flags.DEFINE_string('apply', '', 'Choose nothing: put the flagfile a reviewed '
                             'proposal (<config_dir>/evidence/<key>.proposed.flags) proposes '
                             'in place.')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  if _APPLY.value:
    print(f'applied {_APPLY.value}: wrote {choice_files.apply_proposal(_APPLY.value)}')
    return
  # Every flag parsed and bounded before any data is read or folder made (--holdout against
  # the dev topics: tuning._dev).
  steps = list(flagcheck.parse_ints('--steps', _STEPS.value, low=1, high=flagcheck.MAX_STEPS))
  if _WHAT.value == 'scl' and _STEPS.present:
    raise flagcheck.ConfigError('--steps are phi\'s checkpoints: --what scl trains g only; '
                                'drop --steps')
  cfg = reproduce_config.ReproduceConfig(
      dataset=_DATASET.value, data_dir=_DATA_DIR.value, features_root=_FEATURES_ROOT.value,
      progress=_PROGRESS.value, compilation_cache=_COMPILATION_CACHE.value,
      config_dir=_CONFIG_DIR.value, workdir=_WORKDIR.value)
  # Where the choice will be written, checked before anything is trained.
  choice_files.check_outputs(cfg.config_dir, cfg.colt_stem, cfg.dataset, _WHAT.value,
                             _PROTOCOL.value)
  if _WHAT.value == 'scl':
    result = tuning.choose_scl(cfg, _HOLDOUT.value, _SEED.value, protocol=_PROTOCOL.value)
  elif _WHAT.value == 'label_scheme':
    result = tuning.choose_label_scheme(cfg, _HOLDOUT.value, steps, _SEED.value,
                                           protocol=_PROTOCOL.value)
  else:
    result = tuning.choose_steps(cfg, _HOLDOUT.value, steps, _SEED.value,
                                    protocol=_PROTOCOL.value)
  command = ' '.join(['python experiments/choose_steps.py'] +
                     [shlex.quote(a) for a in sys.argv[1:]])
  tuning.write_choice(cfg, result, command)
  print(json.dumps(result, indent=1, allow_nan=False))


if __name__ == '__main__':
  cli.run(main)
