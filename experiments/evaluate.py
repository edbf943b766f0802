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
flag is checked before any data is read or folder made.
"""
import dataclasses
import hashlib
import json
import os

from absl import flags

from colt_jax.util import cli
from colt_jax.train import configs
from colt_jax.data import splits as data_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inference import settings as settings_lib
from colt_jax.pairs.inference import settings as pairs_settings

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


# Every inference flag: the paper's settings and colt-pairs' selection.
_INFERENCE = tuple(f.name for f in dataclasses.fields(pairs_settings.PairsInferenceSettings))
_PATHS = ('scl_checkpoint', 'ttc_checkpoint', 'model')  # MethodParams fields naming folders


def _run_name(methods, protocols, params: evaluation.MethodParams) -> str:
  """{run} of --out_dir: '<methods>-<protocols>-<digest>', the digest over everything that
  decides the rows (data, features, --tune, every method parameter; folders as absolute
  paths). The same command gets the same name; any other setting, another name."""
  absolute = lambda p: ','.join(os.path.abspath(q) for q in p.split(',')) if p else ''
  key = {'dataset': _DATASET.value, 'split': _SPLIT.value, 'methods': list(methods),
         'protocols': list(protocols), 'tune': _TUNE.value,
         'data_dir': absolute(_DATA_DIR.value), 'features_dir': absolute(_FEATURES_DIR.value),
         'dev_features_dir': absolute(_DEV_FEATURES_DIR.value),
         'params': {k: absolute(v) if k in _PATHS else v
                    for k, v in dataclasses.asdict(params).items()}}
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
  return f'{"+".join(methods)}-{"+".join(protocols)}-{digest}'


def _out_dir(run: str) -> str:
  try:
    return _OUT_DIR.value.format(dataset=_DATASET.value, split=_SPLIT.value, run=run)
  except (KeyError, IndexError, ValueError) as e:
    raise InputError(f'--out_dir {_OUT_DIR.value!r}: only {{dataset}}, {{split}} and {{run}} '
                     f'are filled in ({type(e).__name__}: {e})') from None


def _colt_settings(methods, params: evaluation.MethodParams) -> tuple:
  """(params, note): for --method colt with --ttc_checkpoint (and phi's lists, --post ttc),
  the inference settings saved beside phi (`settings_lib.checkpoint_settings`), each replaced by
  its flag when that flag is given; the note says where they came from ('' when nothing was
  read)."""
  if 'colt' in methods and params.model:
    # The model's own settings (recorded in results.json as what ran); flags that it replaces
    # would be ignored: refused.
    ignored = [f'--{n}' for n in _INFERENCE + ('scl_checkpoint', 'ttc_checkpoint', 'ttc_step')
               if flags.FLAGS[n].present]
    if ignored:
      raise InputError(f'--model runs with the settings saved in its {settings_lib.MODEL_FILE}: '
                       f'{", ".join(ignored)} would be ignored; drop them, or evaluate '
                       '--scl_checkpoint/--ttc_checkpoint, whose settings the flags replace')
    _, saved = settings_lib.read_model_info(params.model)
    params = dataclasses.replace(params, **dataclasses.asdict(saved))
    return params, f'colt: inference settings of {os.path.join(params.model, settings_lib.MODEL_FILE)}'
  if 'colt' not in methods or params.model or not params.ttc_checkpoint or params.post != 'ttc':
    return params, ''
  phi = params.ttc_checkpoint.split(',')[0]  # an ensemble: its first member's settings
  path = os.path.join(phi, settings_lib.SETTINGS_FILE)
  saved = settings_lib.saved_settings(phi)
  if saved is None:  # phi without saved settings: the flags' values
    return params, ''
  saved = pairs_settings.from_paper(saved)  # the paper's: selection 'category'
  given = {n: getattr(params, n) for n in _INFERENCE if flags.FLAGS[n].present}
  settings = settings_lib.checkpoint_settings(phi, given)
  params = dataclasses.replace(params, **dataclasses.asdict(settings))
  default = pairs_settings.PairsInferenceSettings()
  kept = [f'{n}={getattr(saved, n)}' for n in _INFERENCE
          if n not in given and getattr(saved, n) != getattr(default, n)]
  note = (f'colt: inference settings of {path}'
          f'{" (" + ", ".join(kept) + ")" if kept else " (the defaults)"}'
          f'{"; given by flags: " + ", ".join("--" + n for n in given) if given else ""}')
  return params, note


def _check_paths(params: evaluation.MethodParams) -> None:
  """The run file and the folders of g, phi or a model exist: checked before the data is read
  (or the synthetic default generated), in the words of the readers that open them."""
  if _RUN_FILE.value and not os.path.isfile(_RUN_FILE.value):
    why = 'a folder, not a file' if os.path.isdir(_RUN_FILE.value) else 'no such file'
    raise InputError(f'{_RUN_FILE.value} (--run_file): cannot read ({why})')
  if params.model and not os.path.isfile(os.path.join(params.model, settings_lib.MODEL_FILE)):
    raise InputError(f'{params.model} (--model): not a CoLT model directory (no '
                     f'{settings_lib.MODEL_FILE})')
  for name in ('scl_checkpoint', 'ttc_checkpoint'):
    for path in filter(None, getattr(params, name).split(',')):
      if not os.path.isdir(path):
        raise InputError(f'{path} (--{name}): no such checkpoint folder (a trainer\'s '
                         '--workdir)')


def _check_flags(params: evaluation.MethodParams) -> tuple:
  """(methods, protocols, params, out_dir, note) once every flag and combination is checked;
  `params` with colt's saved inference settings (`_colt_settings`)."""
  methods = flagcheck.parse_names('--method', _METHOD.value, evaluation.METHODS)
  protocols = flagcheck.parse_names('--protocol', _PROTOCOL.value, candidates_lib.PROTOCOLS)
  if _RUN_FILE.value:
    ignored = [f'--{n}' for n in ('method', 'tune', 'features_dir', 'dev_features_dir')
               if flags.FLAGS[n].present]
    if ignored:
      raise InputError(f'--run_file scores an existing run: {", ".join(ignored)} would be '
                       'ignored; drop them')
    if len(protocols) > 1:
      raise InputError(f'--protocol: --run_file is scored under one protocol, got '
                       f'{",".join(protocols)}')
    out_dir = _out_dir(os.path.splitext(os.path.basename(_RUN_FILE.value))[0])
    out_dir = out_dir if _OUT_DIR.present else ''  # the default folder holds evaluations
    _check_paths(params)
    return methods, protocols, params, out_dir, ''
  if _DEV_FEATURES_DIR.value and not _TUNE.value:
    raise InputError('--dev_features_dir is the store --tune tunes on; it needs --tune')
  _check_paths(params)
  params, note = _colt_settings(methods, params)
  return methods, protocols, params, _out_dir(_run_name(methods, protocols, params)), note


def _same_as_pool(payload: dict, protocols) -> list:
  """The rows of the global protocol whose per-topic scores equal their pool row's."""
  if not {'pool', 'global'} <= set(protocols):
    return []
  rows = payload['results']
  return [name for name, r in rows.items()
          if r['protocol'] == 'global' and name.endswith(' (global)')
          and rows.get(name[:-len(' (global)')] + ' (pool)', {}).get('per_topic')
          == r['per_topic']]


def _protocol_note(same: list, lead) -> str:
  """Why global rows equal their pool rows, from `candidates.pool_lead` of the split."""
  names = ', '.join(n[:-len(' (global)')] for n in same)
  why = ''
  if len(lead) and min(lead) > 0:
    why = (f': in every topic the {min(lead)} photos of the whole collection most similar to '
           'the query (by f\'s features) are the topic\'s own, its pool, so lists drawn from '
           'the most similar photos come out the same under both protocols')
  return f'note: {names} (global) scored per topic exactly as under the pool protocol{why}'


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  params = configs.from_flags(evaluation.MethodParams)
  methods, protocols, params, out_dir, note = _check_flags(params)
  if _RUN_FILE.value:
    out = result_sets.score_run_file(dataset=_DATASET.value, split=_SPLIT.value,
                                    run_file=_RUN_FILE.value, protocol=protocols[0],
                                    data_dir=_DATA_DIR.value, out_dir=out_dir)
    print(f'{_RUN_FILE.value}: valid run file ({out["protocol"]} protocol), '
          f'{len(out["per_topic"])} topics of {_DATASET.value}/{_SPLIT.value}')
    print(out['table'])
    return
  if note:
    print(note)
  payload = result_sets.run_evaluation(
      dataset=_DATASET.value, split=_SPLIT.value, methods=list(methods),
      protocols_=list(protocols), params=params, data_dir=_DATA_DIR.value,
      features_dir=_FEATURES_DIR.value, dev_features_dir=_DEV_FEATURES_DIR.value,
      tune_methods=_TUNE.value, out_dir=out_dir)
  same = _same_as_pool(payload, protocols)
  if same:
    split, store = data_lib.load(_DATASET.value, _SPLIT.value, _DATA_DIR.value,
                                 _FEATURES_DIR.value)
    print(_protocol_note(same, candidates_lib.pool_lead(split, store)))


if __name__ == '__main__':
  cli.run(main)
