"""Evaluates retrieval methods with the official MediaEval metrics (P, CR, F1 @ 5..50).

  python experiments/evaluate.py --dataset synthetic --split test --method topk,mmr,umons --tune
  python experiments/evaluate.py --dataset div400 --split dev --method flickr
  python experiments/evaluate.py --dataset div150cred --data_dir ... --features_dir ...
  python experiments/evaluate.py --method colt --scl_checkpoint runs/scl --ttc_checkpoint runs/ttc

Prints the P, CR and F1 @10/20/50 table; writes a TREC run file per method and protocol
(`--run_file`, may contain {method} {protocol} {dataset} {split}) and a JSON of all metrics.
"""
import os
import sys

from absl import app
from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from colt_jax import configs  # pylint: disable=g-import-not-at-top
from colt_jax import evaluation  # pylint: disable=g-import-not-at-top

_DATASET = flags.DEFINE_enum('dataset', 'synthetic', ['synthetic', 'div400', 'div150cred'],
                             'Dataset.')
_SPLIT = flags.DEFINE_enum('split', 'test', ['dev', 'test'], 'Split to evaluate.')
_METHOD = flags.DEFINE_list('method', ['flickr', 'topk', 'mmr', 'umons'],
                            f'Methods, comma-separated, of {evaluation.METHODS}.')
_PROTOCOL = flags.DEFINE_list('protocol', ['pool'],
                              'pool (official, the topic\'s photos) and/or global (the whole '
                              'collection, as the CoLT paper).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default per dataset).')
_FEATURES_DIR = flags.DEFINE_string('features_dir', '', 'Feature store of --split.')
_DEV_FEATURES_DIR = flags.DEFINE_string('dev_features_dir', '', 'Feature store of dev (--tune).')
_RUN_FILE = flags.DEFINE_string(
    'run_file', 'work/runs/{dataset}-{split}-{protocol}-{method}.txt', 'Run file path template.')
_RESULTS_JSON = flags.DEFINE_string('results_json', 'work/runs/{dataset}-{split}-results.json',
                                    'Where to write all metrics as JSON.')
_TUNE = flags.DEFINE_boolean('tune', False, 'Grid-search method parameters on dev (F1@20).')
configs.define_flags(evaluation.MethodParams)


def main(argv):
  del argv
  for m in _METHOD.value:
    if m not in evaluation.METHODS:
      raise app.UsageError(f'--method {m}: expected one of {evaluation.METHODS}')
  params = configs.from_flags(evaluation.MethodParams)
  fmt = dict(dataset=_DATASET.value, split=_SPLIT.value)
  evaluation.run_evaluation(
      dataset=_DATASET.value, split=_SPLIT.value, methods=_METHOD.value,
      protocols_=_PROTOCOL.value, params=params, data_dir=_DATA_DIR.value,
      features_dir=_FEATURES_DIR.value, dev_features_dir=_DEV_FEATURES_DIR.value,
      tune_methods=_TUNE.value, run_file=_RUN_FILE.value,
      results_json=_RESULTS_JSON.value.format(**fmt) if _RESULTS_JSON.value else '')


if __name__ == '__main__':
  app.run(main)
