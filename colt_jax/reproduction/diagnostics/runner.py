"""The one entry to the colt-pairs diagnostics (`experiments/diagnose.py --what ...`).

Each diagnosis reads the reproduction's cross-validation rows from its row cache (trainings
it needs are made in the reproduction's work folder, reused when there), writes one owned
JSON (`--out`, default the file `reproduce.py --report_only` renders into RESULTS.md) with
the command that wrote it, and returns the summary lines it prints.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

from colt_jax.reproduction.diagnostics import head_quality
from colt_jax.reproduction.diagnostics import headroom
from colt_jax.reproduction.diagnostics import relevance_models
from colt_jax.reproduction.diagnostics import relevance_signals
from colt_jax.reproduction.diagnostics import steps_quality
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction.row_cache import committed_rows_dir
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

WHATS = ('heads', 'headroom', 'relevance', 'signals', 'steps')
# The options each diagnosis takes beyond --dataset, --data_dir, --folds and --out.
OPTIONS = {'heads': ('seed', 'rows_dir'),
           'steps': ('steps', 'every', 'scored', 'num_layers', 'model_dim', 'num_heads',
                     'mlp_ratio', 'appearance_tokens', 'appearance_dim')}
# phi's settings `--what steps` may change (the colt-pairs row's other settings kept).
PHI_CHANGES = ('num_layers', 'model_dim', 'num_heads', 'mlp_ratio', 'appearance_tokens',
               'appearance_dim')


@dataclasses.dataclass(frozen=True)
class Request:
  """One diagnosis: `what` (WHATS) of the reproduction of `dataset`, and its options."""
  what: str
  dataset: str = 'div400'
  data_dir: str = ''
  folds: int = 5
  folds_given: bool = False  # recorded in the command only when given
  out: str = ''
  seed: int = 0  # heads: the colt-pairs rows' seed whose phi is read
  rows_dir: str = ''  # heads: the row cache (default: the committed one)
  steps: int = 1000  # steps: training steps of the longer phi
  every: int = 100  # steps: a checkpoint every this many steps
  scored: Sequence[str] = ('100', '200', '300', '500', '1000')  # steps: checkpoints scored
  phi_changes: Mapping = dataclasses.field(default_factory=dict)  # steps: PHI_CHANGES


@dataclasses.dataclass(frozen=True)
class Diagnosis:
  out: str  # the JSON written
  result: dict  # its content
  summary: list  # the lines printed


def check_options(what: str, given: Sequence[str]) -> None:
  """Refuses an option (flag name) given for a diagnosis that does not take it."""
  if what not in WHATS:
    raise InputError(f'--what: {what!r} is not one of {", ".join(WHATS)}')
  for name in given:
    owners = [w for w, names in OPTIONS.items() if name in names]
    if owners and what not in owners:
      raise InputError(f'--{name} applies to --what {" or ".join(owners)}, not {what}')


def out_path(req: Request) -> str:
  """--out, else the diagnosis' own file; refused before any work when it is not ours."""
  defaults = {'heads': head_quality.heads_path, 'headroom': headroom.headroom_path,
              'relevance': relevance_models.relevance_path,
              'signals': relevance_signals.signals_path}
  if req.out:
    out = req.out
  elif req.what == 'steps':
    out = steps_quality.steps_path(req.dataset, dict(req.phi_changes))
  else:
    out = defaults[req.what](req.dataset)
  outputs.check_writable_file(out, 'the diagnosis', flag='--out')
  return out


def reproduce_config(req: Request) -> ReproduceConfig:
  """The reproduction's config over its row cache (`rows_dir`, default the committed one)."""
  return ReproduceConfig(
      dataset=req.dataset, data_dir=req.data_dir, folds=req.folds,
      rows_dir=req.rows_dir or committed_rows_dir(req.dataset), progress=False)


def command(req: Request, *extra: str) -> str:
  """The command line recorded in the JSON."""
  return ' '.join(['python experiments/diagnose.py', f'--what {req.what}',
                   f'--dataset {req.dataset}']
                  + ([f'--folds {req.folds}'] if req.folds_given else []) + list(extra))


def run(req: Request, log: Callable[[str], None] = print) -> Diagnosis:
  """Runs the diagnosis `req.what` and writes its JSON (atomic; recorded as the project's)."""
  out = out_path(req)  # before any work
  cfg = reproduce_config(req)
  if req.what == 'heads':
    result = head_quality.diagnose(cfg, seed=req.seed)
    result['command'] = command(req, *([f'--seed {req.seed}'] if req.seed else []))
    summary = head_quality.summary_lines(result, result['command'])
  elif req.what == 'headroom':
    result = headroom.diagnose(cfg, log=log)
    result['command'] = command(req)
    summary = headroom.summary_lines(result)
  elif req.what == 'relevance':
    rep = relevance_models.loaded(cfg, log)
    result = relevance_models.diagnose(cfg, log=log, rep=rep)
    result['command'] = command(req)
    result['gbt'] = relevance_models.diagnose_gbt(cfg, log=log, rep=rep)
    result['gbt']['command'] = result['command']
    summary = (relevance_models.summary_lines(result)
               + relevance_models.gbt_summary_lines(result['gbt']))
  elif req.what == 'signals':
    result = relevance_signals.diagnose(cfg, log=log)
    result['command'] = command(req)
    summary = relevance_signals.summary_lines(result)
  else:
    result, summary = _steps(req, cfg, log)
  outputs.write_owned_json(out, result, 'the diagnosis', flag='--out')
  return Diagnosis(out, result, list(summary))


def _steps(req: Request, cfg: ReproduceConfig, log) -> tuple:
  changes = dict(req.phi_changes)
  scored = steps_quality.scored_steps(req.scored, req.steps, req.every)
  result = steps_quality.run(cfg, req.steps, req.every, scored, log=log, changes=changes)
  size = ''.join(f' --{k}' if v is True else f' --{k} {v}' for k, v in changes.items())
  result['command'] = (command(req) + f'{size} --steps {req.steps} --every {req.every} '
                       f'--scored {",".join(str(s) for s in scored)}')
  return result, steps_quality.summary_lines(result)


def phi_changes(values: Mapping[str, Optional[object]]) -> dict:
  """The given ones of PHI_CHANGES (None = not given; appearance_tokens only when True)."""
  changes = {}
  for name in PHI_CHANGES:
    value = values.get(name)
    if value is None or value is False:
      continue
    changes[name] = value
  return changes
