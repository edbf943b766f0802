"""Evaluates retrieval methods with the official MediaEval metrics (P, CR, F1 @ 5..50).

  python experiments/evaluate.py --dataset synthetic --split test --method topk,mmr,umons --tune
  python experiments/evaluate.py --dataset div400 --split dev --method flickr
  python experiments/evaluate.py --dataset div150cred --data_dir ... --features_dir ...
  python experiments/evaluate.py --method colt --scl_checkpoint runs/scl --ttc_checkpoint runs/ttc
  python experiments/evaluate.py --dataset div400 --split test --run_file RUN   # score a run

Prints the P, CR and F1 @10/20/50 table and writes, into --out_dir as one set (all or
nothing), a TREC run file per method and protocol and results.json with all metrics. With
--run_file it validates an existing run file by the official scorer's rules and scores it.
Bad input exits with status 2 and a one-line message (--debug shows the traceback).
"""
from absl import flags

from colt_jax import cli
from colt_jax import configs
from colt_jax import evaluation
from colt_jax.errors import InputError

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
                               '({dataset} and {split} are filled in; empty = write nothing).')
_TUNE = flags.DEFINE_boolean('tune', False, 'Grid-search MMR\'s and UMONS\'s parameters on dev '
                             '(F1@20) before scoring --split.')
_RUN_FILE = flags.DEFINE_string('run_file', '', 'Score this existing run file (any system\'s) '
                                'instead of running methods: validated as the official scorer '
                                'does, under the first --protocol.')
configs.define_flags(evaluation.MethodParams)


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  params = configs.from_flags(evaluation.MethodParams)
  if _RUN_FILE.value:
    out = evaluation.score_run_file(dataset=_DATASET.value, split=_SPLIT.value,
                                    run_file=_RUN_FILE.value, protocol=_PROTOCOL.value[0]
                                    if _PROTOCOL.value else '', data_dir=_DATA_DIR.value)
    print(f'{_RUN_FILE.value}: valid run file ({out["protocol"]} protocol), '
          f'{len(out["per_topic"])} topics of {_DATASET.value}/{_SPLIT.value}')
    print(out['table'])
    return
  out_dir = _OUT_DIR.value.format(dataset=_DATASET.value, split=_SPLIT.value)
  evaluation.run_evaluation(
      dataset=_DATASET.value, split=_SPLIT.value, methods=_METHOD.value,
      protocols_=_PROTOCOL.value, params=params, data_dir=_DATA_DIR.value,
      features_dir=_FEATURES_DIR.value, dev_features_dir=_DEV_FEATURES_DIR.value,
      tune_methods=_TUNE.value, out_dir=out_dir)


if __name__ == '__main__':
  cli.run(main)
