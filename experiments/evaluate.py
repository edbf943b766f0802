"""Evaluates retrieval methods with the official MediaEval metrics (P, CR, F1 @ 5..50).

  python experiments/evaluate.py --dataset synthetic --split test --method topk,mmr,umons --tune
  python experiments/evaluate.py --dataset div400 --split dev --method flickr
  python experiments/evaluate.py --dataset div400 --split test --method msd,dpp,gbt-pairs --tune
  python experiments/evaluate.py --dataset div150cred --data_dir ... --features_dir ...
  python experiments/evaluate.py --method colt --scl_checkpoint runs/scl --ttc_checkpoint runs/ttc
  python experiments/evaluate.py --dataset div400 --split test --run_file RUN   # score a run

Prints the P, CR and F1 @10/20/50 table and writes, into --out_dir as one set (all or
nothing), a TREC run file per method and protocol and results.json with all metrics. With
--run_file it validates an existing run file by the official scorer's rules and scores it;
given --out_dir too, it writes there results.json and a copy of the run file.
Bad input exits with status 2 and a one-line message (--debug shows the traceback); every
flag is checked before any data is read or folder made.
"""
from absl import flags

from colt_jax import cli
from colt_jax import configs
from colt_jax import evaluation
from colt_jax import flagcheck
from colt_jax.errors import InputError
from colt_jax.inputs import candidates as candidates_lib

_DATASET = flags.DEFINE_enum('dataset', 'synthetic', list(configs.DATASETS),
                             'Dataset to evaluate on (synthetic is generated on first use).')
_SPLIT = flags.DEFINE_enum('split', 'test', list(configs.SPLITS), 'Split to evaluate.')
_METHOD = flags.DEFINE_list('method', ['flickr', 'topk', 'mmr', 'umons'],
                            f'Methods, comma-separated; some of: {", ".join(evaluation.METHODS)}.')
_PROTOCOL = flags.DEFINE_list('protocol', ['pool'],
                              'Protocols, comma-separated; some of: pool (the topic\'s own '
                              'photos, official), global (the whole collection, the paper\'s).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Root of the dataset in the official layout '
                                '(default: work/synthetic-seed0, $DIV400_ROOT, '
                                '$DIV150CRED_ROOT).')
_FEATURES_DIR = flags.DEFINE_string('features_dir', '', 'Feature store of --split (default: '
                                    'the dataset\'s store under work/).')
_DEV_FEATURES_DIR = flags.DEFINE_string('dev_features_dir', '', 'Feature store of the dev '
                                        'split, for --tune (default: as --features_dir).')
_OUT_DIR = flags.DEFINE_string('out_dir', 'work/runs/{dataset}-{split}',
                               'Folder for the run files and results.json, replaced as a whole '
                               '({dataset} and {split} are filled in; empty = write nothing). '
                               'With --run_file: written only when given.')
_TUNE = flags.DEFINE_boolean('tune', False, 'Grid-search the baselines\' parameters on dev '
                             '(F1@20; gbt-pairs: its weight, on out-of-fold predictions) '
                             'before scoring --split.')
_RUN_FILE = flags.DEFINE_string('run_file', '', 'Score this existing run file (any system\'s) '
                                'instead of running methods: validated as the official scorer '
                                'does, under the first --protocol.')
configs.define_flags(evaluation.MethodParams)


def _out_dir() -> str:
  try:
    return _OUT_DIR.value.format(dataset=_DATASET.value, split=_SPLIT.value)
  except (KeyError, IndexError, ValueError) as e:
    raise InputError(f'--out_dir {_OUT_DIR.value!r}: only {{dataset}} and {{split}} are filled '
                     f'in ({type(e).__name__}: {e})') from None


def _check_flags() -> tuple:
  """(methods, protocols, out_dir) once every flag and combination is checked."""
  methods = flagcheck.parse_names('--method', _METHOD.value, evaluation.METHODS)
  protocols = flagcheck.parse_names('--protocol', _PROTOCOL.value, candidates_lib.PROTOCOLS)
  out_dir = _out_dir()
  if _RUN_FILE.value:
    ignored = [f'--{n}' for n in ('method', 'tune', 'features_dir', 'dev_features_dir')
               if flags.FLAGS[n].present]
    if ignored:
      raise InputError(f'--run_file scores an existing run: {", ".join(ignored)} would be '
                       'ignored; drop them')
    if len(protocols) > 1:
      raise InputError(f'--protocol: --run_file is scored under one protocol, got '
                       f'{",".join(protocols)}')
    out_dir = out_dir if _OUT_DIR.present else ''  # the default folder holds evaluations
  elif _DEV_FEATURES_DIR.value and not _TUNE.value:
    raise InputError('--dev_features_dir is the store --tune tunes on; it needs --tune')
  return methods, protocols, out_dir


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  params = configs.from_flags(evaluation.MethodParams)
  methods, protocols, out_dir = _check_flags()
  if _RUN_FILE.value:
    out = evaluation.score_run_file(dataset=_DATASET.value, split=_SPLIT.value,
                                    run_file=_RUN_FILE.value, protocol=protocols[0],
                                    data_dir=_DATA_DIR.value, out_dir=out_dir)
    print(f'{_RUN_FILE.value}: valid run file ({out["protocol"]} protocol), '
          f'{len(out["per_topic"])} topics of {_DATASET.value}/{_SPLIT.value}')
    print(out['table'])
    return
  evaluation.run_evaluation(
      dataset=_DATASET.value, split=_SPLIT.value, methods=list(methods),
      protocols_=list(protocols), params=params, data_dir=_DATA_DIR.value,
      features_dir=_FEATURES_DIR.value, dev_features_dir=_DEV_FEATURES_DIR.value,
      tune_methods=_TUNE.value, out_dir=out_dir)


if __name__ == '__main__':
  cli.run(main)
