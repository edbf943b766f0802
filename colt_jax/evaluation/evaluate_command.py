"""What `experiments/evaluate.py` does with its flags: checks every flag and combination before
any data is read or folder made, reads colt's saved inference settings, then scores a run file
or runs the methods (`result_sets`), and says when global rows equal their pool rows."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import AbstractSet, NamedTuple

from colt_jax.data import splits as data_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.inference import settings as settings_lib
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.pairs.inference import pairs_settings
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError

# Every inference flag: the paper's settings and colt-pairs' selection.
INFERENCE_FLAGS = tuple(f.name for f in dataclasses.fields(pairs_settings.PairsInferenceSettings))
_PATHS = ('scl_checkpoint', 'ttc_checkpoint', 'model')  # MethodParams fields naming folders


@dataclasses.dataclass(frozen=True)
class EvaluateRequest:
  """evaluate.py's flags: the values, and which were given (`given`: flag names)."""
  dataset: str
  split: str
  methods: tuple
  protocols: tuple
  data_dir: str
  features_dir: str
  dev_features_dir: str
  out_dir: str  # a template: {dataset}, {split} and {run} are filled in
  tune: bool
  run_file: str
  params: evaluation.MethodParams
  given: AbstractSet[str] = frozenset()


class CheckedRequest(NamedTuple):
  """A request once checked: names parsed, colt's settings read, the output folder named."""
  methods: tuple
  protocols: tuple
  params: evaluation.MethodParams
  out_dir: str  # '' = write nothing
  note: str  # where colt's inference settings came from ('' when nothing was read)


def run_name(request: EvaluateRequest, methods, protocols,
             params: evaluation.MethodParams) -> str:
  """{run} of --out_dir: '<methods>-<protocols>-<digest>', the digest over everything that
  decides the rows (data, features, --tune, every method parameter; folders as absolute
  paths). The same command gets the same name; any other setting, another name."""
  absolute = lambda p: ','.join(os.path.abspath(q) for q in p.split(',')) if p else ''
  key = {'dataset': request.dataset, 'split': request.split, 'methods': list(methods),
         'protocols': list(protocols), 'tune': request.tune,
         'data_dir': absolute(request.data_dir), 'features_dir': absolute(request.features_dir),
         'dev_features_dir': absolute(request.dev_features_dir),
         'params': {k: absolute(v) if k in _PATHS else v
                    for k, v in dataclasses.asdict(params).items()}}
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
  return f'{"+".join(methods)}-{"+".join(protocols)}-{digest}'


def _out_dir(request: EvaluateRequest, run: str) -> str:
  try:
    return request.out_dir.format(dataset=request.dataset, split=request.split, run=run)
  except (KeyError, IndexError, ValueError) as e:
    raise InputError(f'--out_dir {request.out_dir!r}: only {{dataset}}, {{split}} and {{run}} '
                     f'are filled in ({type(e).__name__}: {e})') from None


def colt_settings(request: EvaluateRequest, methods) -> tuple:
  """(params, note): for --method colt with --ttc_checkpoint (and phi's lists, --post ttc),
  the inference settings saved beside phi (`settings_lib.checkpoint_settings`), each replaced
  by its flag when that flag is given; with --model, the model's own. The note says where
  they came from ('' when nothing was read)."""
  params, given = request.params, request.given
  if 'colt' in methods and params.model:
    # The model's own settings (recorded in results.json as what ran); flags that it replaces
    # would be ignored: refused.
    ignored = [f'--{n}' for n in INFERENCE_FLAGS + ('scl_checkpoint', 'ttc_checkpoint',
                                                     'ttc_step') if n in given]
    if ignored:
      raise InputError(f'--model runs with the settings saved in its {settings_lib.MODEL_FILE}: '
                       f'{", ".join(ignored)} would be ignored; drop them, or evaluate '
                       '--scl_checkpoint/--ttc_checkpoint, whose settings the flags replace')
    _, saved = settings_lib.read_model_info(params.model)
    params = dataclasses.replace(params, **dataclasses.asdict(saved))
    return params, ('colt: inference settings of '
                    f'{os.path.join(params.model, settings_lib.MODEL_FILE)}')
  if 'colt' not in methods or params.model or not params.ttc_checkpoint or params.post != 'ttc':
    return params, ''
  phi = params.ttc_checkpoint.split(',')[0]  # an ensemble: its first member's settings
  path = os.path.join(phi, settings_lib.SETTINGS_FILE)
  saved = settings_lib.saved_settings(phi)
  if saved is None:  # phi without saved settings: the flags' values
    return params, ''
  saved = pairs_settings.from_paper(saved)  # the paper's: selection 'category'
  flagged = {n: getattr(params, n) for n in INFERENCE_FLAGS if n in given}
  settings = settings_lib.checkpoint_settings(  # the flags are colt-pairs' (INFERENCE_FLAGS)
      phi, flagged, pairs_settings.PairsInferenceSettings.METHOD)
  params = dataclasses.replace(params, **dataclasses.asdict(settings))
  default = pairs_settings.PairsInferenceSettings()
  kept = [f'{n}={getattr(saved, n)}' for n in INFERENCE_FLAGS
          if n not in flagged and getattr(saved, n) != getattr(default, n)]
  note = (f'colt: inference settings of {path}'
          f'{" (" + ", ".join(kept) + ")" if kept else " (the defaults)"}'
          f'{"; given by flags: " + ", ".join("--" + n for n in flagged) if flagged else ""}')
  return params, note


def _check_paths(request: EvaluateRequest) -> None:
  """The run file and the folders of g, phi or a model exist: checked before the data is read
  (or the synthetic default generated), in the words of the readers that open them."""
  run_file, params = request.run_file, request.params
  if run_file and not os.path.isfile(run_file):
    why = 'a folder, not a file' if os.path.isdir(run_file) else 'no such file'
    raise InputError(f'{run_file} (--run_file): cannot read ({why})')
  if params.model and not os.path.isfile(os.path.join(params.model, settings_lib.MODEL_FILE)):
    raise InputError(f'{params.model} (--model): not a CoLT model directory (no '
                     f'{settings_lib.MODEL_FILE})')
  for name in ('scl_checkpoint', 'ttc_checkpoint'):
    for path in filter(None, getattr(params, name).split(',')):
      if not os.path.isdir(path):
        raise InputError(f'{path} (--{name}): no such checkpoint folder (a trainer\'s '
                         '--workdir)')


def check(request: EvaluateRequest) -> CheckedRequest:
  """Every flag and combination checked; `params` with colt's saved inference settings."""
  methods = tuple(flagcheck.parse_names('--method', list(request.methods), evaluation.METHODS))
  protocols = tuple(flagcheck.parse_names('--protocol', list(request.protocols),
                                          candidates_lib.PROTOCOLS))
  if request.run_file:
    ignored = [f'--{n}' for n in ('method', 'tune', 'features_dir', 'dev_features_dir')
               if n in request.given]
    if ignored:
      raise InputError(f'--run_file scores an existing run: {", ".join(ignored)} would be '
                       'ignored; drop them')
    if len(protocols) > 1:
      raise InputError(f'--protocol: --run_file is scored under one protocol, got '
                       f'{",".join(protocols)}')
    out_dir = _out_dir(request, os.path.splitext(os.path.basename(request.run_file))[0])
    out_dir = out_dir if 'out_dir' in request.given else ''  # the default holds evaluations
    _check_paths(request)
    return CheckedRequest(methods, protocols, request.params, out_dir, '')
  if request.dev_features_dir and not request.tune:
    raise InputError('--dev_features_dir is the store --tune tunes on; it needs --tune')
  _check_paths(request)
  params, note = colt_settings(request, methods)
  return CheckedRequest(methods, protocols, params,
                        _out_dir(request, run_name(request, methods, protocols, params)), note)


def same_as_pool(payload: dict, protocols) -> list:
  """The rows of the global protocol whose per-topic scores equal their pool row's."""
  if not {'pool', 'global'} <= set(protocols):
    return []
  rows = payload['results']
  return [name for name, r in rows.items()
          if r['protocol'] == 'global' and name.endswith(' (global)')
          and rows.get(name[:-len(' (global)')] + ' (pool)', {}).get('per_topic')
          == r['per_topic']]


def protocol_note(same: list, lead) -> str:
  """Why global rows equal their pool rows, from `candidates.pool_lead` of the split."""
  names = ', '.join(n[:-len(' (global)')] for n in same)
  why = ''
  if len(lead) and min(lead) > 0:
    why = (f': in every topic the {min(lead)} photos of the whole collection most similar to '
           'the query (by f\'s features) are the topic\'s own, its pool, so lists drawn from '
           'the most similar photos come out the same under both protocols')
  return f'note: {names} (global) scored per topic exactly as under the pool protocol{why}'


def evaluate(request: EvaluateRequest, log=print) -> None:
  """evaluate.py: scores --run_file, or runs the methods and writes their result set."""
  checked = check(request)
  if request.run_file:
    out = result_sets.score_run_file(dataset=request.dataset, split=request.split,
                                     run_file=request.run_file, protocol=checked.protocols[0],
                                     data_dir=request.data_dir, out_dir=checked.out_dir)
    log(f'{request.run_file}: valid run file ({out["protocol"]} protocol), '
        f'{len(out["per_topic"])} topics of {request.dataset}/{request.split}')
    log(out['table'])
    return
  if checked.note:
    log(checked.note)
  payload = result_sets.run_evaluation(
      dataset=request.dataset, split=request.split, methods=list(checked.methods),
      protocols_=list(checked.protocols), params=checked.params, data_dir=request.data_dir,
      features_dir=request.features_dir, dev_features_dir=request.dev_features_dir,
      tune_methods=request.tune, out_dir=checked.out_dir)
  same = same_as_pool(payload, checked.protocols)
  if same:
    split, store = data_lib.load(request.dataset, request.split, request.data_dir,
                                 request.features_dir)
    log(protocol_note(same, candidates_lib.pool_lead(split, store)))
