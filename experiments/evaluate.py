"""Evaluates retrieval methods with the official MediaEval metrics (P, CR, F1 @ 5..50).

  python experiments/evaluate.py --dataset synthetic --split test --method topk,mmr,umons --tune
  python experiments/evaluate.py --dataset div400 --split dev --method flickr
  python experiments/evaluate.py --dataset div400 --split test --method msd,dpp,gbt-pairs --tune
  python experiments/evaluate.py --dataset div150cred --data_dir ... --features_dir ...
  python experiments/evaluate.py --method colt --scl_checkpoint runs/scl --ttc_checkpoint runs/ttc
  python experiments/evaluate.py --dataset div400 --split test --run_file RUN   # score a run

Prints the P, CR and F1 @10/20/50 table and writes, into --out_dir as one set (all or
nothing), a TREC run file per method and protocol and results.json with all metrics. The
default --out_dir is one folder per command, work/runs/<dataset>-<split>/<run> (<run>: the
methods, the protocols and a digest of every setting), so successive commands keep each
other's results and rerunning a command replaces its own. With --run_file it validates an
existing run file by the official scorer's rules and scores it; given --out_dir too, it
writes there results.json and a copy of the run file.

--method colt with --ttc_checkpoint runs phi with the inference settings saved beside it
(<ttc_checkpoint>/inference.json, written by the demo: colt_jax/reproduction/demo_table.py), each
replaced by its flag when given (--k, --irrelevant_threshold, ...); without that file, the
flags' defaults. --model DIR carries its own settings (model.json).
Bad input exits with status 2 and a one-line message (--debug shows the traceback); every
flag is checked before any data is read or folder made (colt_jax/evaluation/evaluate_command.py).
"""
from absl import flags

from colt_jax.evaluation import evaluate_command
from colt_jax.evaluation import methods as evaluation
from colt_jax.train import configs
from colt_jax.util import cli
from colt_jax.util.errors import InputError

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
_OUT_DIR = flags.DEFINE_string('out_dir', 'work/runs/{dataset}-{split}/{run}',
                               'Folder for the run files and results.json, replaced as a whole '
                               '({dataset}, {split} and {run} are filled in; {run}: the methods, '
                               'protocols and a digest of every setting, so another command '
                               'writes another folder; empty = write nothing). With --run_file: '
                               'written only when given ({run}: the run file\'s name).')
_TUNE = flags.DEFINE_boolean('tune', False, 'Grid-search the baselines\' parameters on dev '
                             '(F1@20; gbt-pairs: its weight, on out-of-fold predictions) '
                             'before scoring --split.')
_RUN_FILE = flags.DEFINE_string('run_file', '', 'Score this existing run file (any system\'s) '
                                'instead of running methods: validated as the official scorer '
                                'does, under the first --protocol.')
configs.define_flags(evaluation.MethodParams)


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  evaluate_command.evaluate(evaluate_command.EvaluateRequest(
      dataset=_DATASET.value, split=_SPLIT.value, methods=tuple(_METHOD.value),
      protocols=tuple(_PROTOCOL.value), data_dir=_DATA_DIR.value,
      features_dir=_FEATURES_DIR.value, dev_features_dir=_DEV_FEATURES_DIR.value,
      out_dir=_OUT_DIR.value, tune=_TUNE.value, run_file=_RUN_FILE.value,
      params=configs.from_flags(evaluation.MethodParams),
      given=frozenset(name for name in flags.FLAGS if flags.FLAGS[name].present)))


if __name__ == '__main__':
  cli.run(main)
