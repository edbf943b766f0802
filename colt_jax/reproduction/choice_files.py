"""Choices made on training topics, kept as flagfiles beside the configurations they set.

`experiments/choose_steps.py` makes every setting of CoLT's configuration that is not the
paper's on a hold-out of the dev topics (never test). It writes the scores of every setting
it tried and a proposed change of the configuration, to review; it never edits a flagfile:

  <config_dir>/<stem>_scl.flags     --what scl: g's --beta and --learning_rate, a block of the
                                    trainer's flagfile (<stem>: `div400_colt`, `synthetic`)
  <config_dir>/<stem>_ttc.flags     --what label_scheme: phi's --label_scheme, likewise
  <config_dir>/<name>_phi_<protocol>.choice.flags
                                    --what ttc: phi's --num_steps and --irrelevant_threshold
                                    under one protocol (<name>: the dataset, `div400`,
                                    `synthetic`), a `configs.ProtocolChoice`
  <config_dir>/evidence/<key>.json  every setting tried, its held-out scores, the command
  <config_dir>/evidence/<key>.proposed.flags
                                    the flagfile above as the choice would make it (its first
                                    line names the flagfile and the version it was made from);
                                    `apply_proposal` (or a reviewer, by hand) puts it in place

Each value is set in one file. A protocol choice states only the flags whose chosen value
differs from the trainer's flagfile it refines (<stem>_ttc.flags); its line `INHERITED_LINE`
records the others as they were chosen (equal to that flagfile's), and `read_protocol_choice`
takes them from the trainer's flagfile, checking them against that line: an edit of the
trainer's flagfile cannot change a choice silently, and a newer choice's evidence, written
before its proposal is applied, is no part of the check. Every file is read with
`configs.from_flagfile`; nothing is read from docs/. In a trainer's flagfile the chosen
flags form one block between `# >>> choose_steps --what <what>` and `# <<< choose_steps
--what <what>`, which a proposal of the same choice replaces whole (any other line setting
those flags is removed, so the block is the only place they are set).
The block's comments name the command and summarise the evidence, without dates.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Mapping, Optional, Sequence

from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.train import configs
from colt_jax.util import outputs
from colt_jax.util.errors import ConfigError, InputError

WHATS = ('scl', 'label_scheme', 'ttc')
GENERATED = '# Written by experiments/choose_steps.py'  # first line of a choice flagfile
EVIDENCE_DIR = 'evidence'
PROPOSED = '.proposed.flags'
_PROPOSAL = '# Proposed by experiments/choose_steps.py for '  # a proposal's first line
# Fields of a protocol choice that the trainer's flagfile also sets (a choice equal to it
# leaves them there).
INHERITED = ('num_steps',)
_CLASS = {'scl': configs.SCLConfig, 'label_scheme': configs.TTCConfig,
          'ttc': configs.ProtocolChoice}


def protocol_choice_path(config_dir: str, name: str, protocol: str) -> str:
  """The flagfile of phi's steps and threshold for `name` (the dataset) and `protocol`."""
  return os.path.join(config_dir, f'{name}_phi_{protocol}.choice.flags')


def flagfile_path(config_dir: str, what: str, stem: str, name: str, protocol: str) -> str:
  """The flagfile a choice of `what` writes: the trainer's (`<stem>_scl.flags`,
  `<stem>_ttc.flags`) or the protocol choice's."""
  if what == 'scl':
    return os.path.join(config_dir, f'{stem}_scl.flags')
  if what == 'label_scheme':
    return os.path.join(config_dir, f'{stem}_ttc.flags')
  if what == 'ttc':
    return protocol_choice_path(config_dir, name, protocol)
  raise InputError(f'--what must be one of {", ".join(WHATS)}; got {what!r}')


def evidence_path(config_dir: str, what: str, name: str, protocol: str) -> str:
  """Where the scores behind a choice are kept."""
  key = f'{name}_phi_{protocol}' if what == 'ttc' else f'{name}_{what}'
  return os.path.join(config_dir, EVIDENCE_DIR, key + '.json')


def proposal_path(config_dir: str, what: str, name: str, protocol: str) -> str:
  """Where the change a choice proposes is kept (beside its evidence)."""
  return evidence_path(config_dir, what, name, protocol)[:-len('.json')] + PROPOSED


def trainer_flagfile(config_dir: str, stem: str) -> str:
  """The trainer's flagfile a protocol choice refines (phi's, `<stem>_ttc.flags`)."""
  return os.path.join(config_dir, f'{stem}_ttc.flags')


# A protocol choice's record of the values it takes from the trainer's flagfile:
# '# Chosen equal to <trainer>, which sets it (...): num_steps 300.'
INHERITED_LINE = '# Chosen equal to '


def _inherited_record(path: str) -> dict:
  """field -> the value (as text) the choice file `path` records it was chosen with, from its
  `INHERITED_LINE` (empty when it has none)."""
  with open(path) as f:
    line = next((l for l in f if l.startswith(INHERITED_LINE)), '')
  pairs = line.rstrip().rstrip('.').rpartition('): ')[2]
  return dict(p.split(' ', 1) for p in pairs.split(', ') if ' ' in p) if line else {}


def _trainer_values(path: str) -> dict:
  """The fields of a protocol choice that the trainer's flagfile `path` sets (its value)."""
  ttc = configs.from_flagfile(PairsTTCConfig, path)
  return {f: getattr(ttc, f) for f in INHERITED}


def read_protocol_choice(config_dir: str, name: str, protocol: str,
                         stem: str = '') -> Optional[configs.ProtocolChoice]:
  """phi's chosen steps and threshold for `name` under `protocol`; None when none was made.
  A value the choice file does not state is the trainer flagfile's (`<stem>_ttc.flags`;
  `stem` default `name`), which must equal the value its evidence recorded (else a one-line
  ConfigError naming both files)."""
  path = protocol_choice_path(config_dir, name, protocol)
  if not os.path.isfile(path):
    return None
  choice = configs.from_flagfile(configs.ProtocolChoice, path)
  missing = [f for f in INHERITED if getattr(choice, f) is None]
  if not missing:
    return choice
  trainer = trainer_flagfile(config_dir, stem or name)
  values = _trainer_values(trainer)
  recorded = _inherited_record(path)
  for field in missing:
    if field not in recorded:
      raise ConfigError(f'{path}: states no --{field} and records no value it was chosen with '
                        f'(a line "{INHERITED_LINE}...: {field} N."): state --{field}')
    if recorded[field] != str(values[field]):
      raise ConfigError(f'{trainer}: --{field}={values[field]}, but {path} chose '
                        f'{recorded[field]} and takes the value from there: set '
                        f'--{field}={recorded[field]} in {path} or rerun '
                        'experiments/choose_steps.py --what ttc')
  return dataclasses.replace(choice, **{f: values[f] for f in missing})


def chosen_values(result: Mapping[str, Any]) -> dict:
  """The flags a choice sets (field name -> value), from its result's `best`."""
  best = result['best']
  what = result.get('what', 'ttc')
  if what == 'scl':
    return {'beta': best['beta'], 'learning_rate': best['learning_rate']}
  if what == 'label_scheme':
    return {'label_scheme': best['label_scheme']}
  return {'num_steps': int(best['steps']),
          'irrelevant_threshold': float(best['irrelevant_threshold'])}


def _setting_text(values: Mapping[str, Any]) -> str:
  return ', '.join(f'{k} {v}' for k, v in values.items())


def summary(result: Mapping[str, Any]) -> list:
  """Date-free comment lines summarising a choice's evidence."""
  what = result.get('what', 'ttc')
  held = len(result['held_out_topics'])
  trained = result.get('train_topics')
  lines = [f'Dev hold-out (seed {result.get("seed", 0)}): trained on '
           f'{trained if trained is not None else "the other"} dev topics, scored on {held} '
           f'held-out dev topics; F1@20, {result["protocol"]} protocol; never test.']
  if what == 'scl':
    best = max(result['scores'], key=lambda r: r['F1@20'])
    lines.append(f'{len(result["scores"])} settings of beta x learning_rate, scored as SCL + '
                 f'top-k; best F1@20 {best["F1@20"]:.4f} ({_setting_text(best["setting"])}).')
  elif what == 'label_scheme':
    for scheme, sub in sorted(result['schemes'].items()):
      best = max(sub['scores'], key=lambda r: r['F1@20'])
      lines.append(f'label_scheme={scheme}: best F1@20 {best["F1@20"]:.4f} of '
                   f'{len(sub["scores"])} settings (steps {best["steps"]}, '
                   f'irrelevant_threshold {best["irrelevant_threshold"]}).')
  else:
    best = max(result['scores'], key=lambda r: r['F1@20'])
    lines.append(f'{len(result["scores"])} settings of steps x irrelevant_threshold of the '
                 f'`{result.get("variant", "colt")}` row; best F1@20 {best["F1@20"]:.4f} '
                 f'(steps {best["steps"]}, irrelevant_threshold '
                 f'{best["irrelevant_threshold"]}).')
  lines.append(f'Top-k over f on the same topics: F1@20 {result["topk"]:.4f}.')
  return lines


def _header(what: str, command: str, result: Mapping[str, Any], evidence: str) -> list:
  out = [f'Command: {command}'] + summary(result)
  out.append(f'Evidence (every setting and its scores): {evidence}')
  return ['# ' + line for line in out]


def check_outputs(config_dir: str, stem: str, name: str, what: str, protocol: str) -> None:
  """Refuses, before any work, a choice `save` could not write: a trainer flagfile that is
  missing, or an evidence or proposal file colt_jax did not write (not in its folder's
  manifest)."""
  flagfile = flagfile_path(config_dir, what, stem, name, protocol)
  if what != 'ttc' and not os.path.isfile(flagfile):
    raise InputError(f'{flagfile}: no such flagfile (the configuration this choice sets)')
  outputs.check_writable_file(evidence_path(config_dir, what, name, protocol),
                              'the evidence of a choice', flag='--config_dir')
  outputs.check_writable_file(proposal_path(config_dir, what, name, protocol),
                              'the proposal of a choice', flag='--config_dir')


def save(config_dir: str, stem: str, name: str, result: Mapping[str, Any],
         command: str) -> tuple:
  """Writes a choice: its evidence (the whole `result` plus the command), then the flagfile it
  proposes (`proposal_path`); the flagfile itself is left as it is. Returns (flagfile path,
  evidence path, proposal path)."""
  what = result.get('what', 'ttc')
  protocol = result.get('protocol', 'pool')
  flagfile = flagfile_path(config_dir, what, stem, name, protocol)
  evidence = evidence_path(config_dir, what, name, protocol)
  proposal = proposal_path(config_dir, what, name, protocol)
  values = chosen_values(result)
  lines = configs.flag_lines(_CLASS[what], values)  # checks the values first
  trainer = trainer_flagfile(config_dir, stem)
  same = {}  # the chosen values a protocol choice takes from the trainer's flagfile
  if what == 'ttc' and os.path.isfile(trainer):
    same = {f: v for f, v in _trainer_values(trainer).items() if values.get(f) == v}
    lines = configs.flag_lines(_CLASS[what], {k: v for k, v in values.items() if k not in same})
  if what != 'ttc' and not os.path.isfile(flagfile):
    raise InputError(f'{flagfile}: no such flagfile (the configuration this choice sets)')
  # A file colt_jax did not write (not in its folder's manifest) is refused, not replaced.
  outputs.check_writable_file(evidence, 'the evidence of a choice')
  outputs.check_writable_file(proposal, 'the proposal of a choice')
  record = dict(result, command=command, flagfile=os.path.basename(flagfile), name=name,
                chosen=values)
  outputs.write_owned_json(evidence, record, 'the evidence of a choice')
  header = _header(what, command, result, os.path.relpath(evidence, config_dir))
  if what == 'ttc':
    inherited = [f'{INHERITED_LINE}{os.path.basename(trainer)}, which sets it (read from '
                 f'there and checked against this line): {_setting_text(same)}.'] if same else []
    text = '\n'.join([f'{GENERATED} (--what ttc): phi of the CoLT configuration ({name}) '
                      f'under the {protocol} protocol.'] + header + inherited + lines) + '\n'
  else:
    text = block_text(flagfile, what, header, lines)
  base = _digest(flagfile)
  outputs.write_owned_text(proposal, f'{_PROPOSAL}{os.path.basename(flagfile)} (made from '
                           f'sha256 {base}): review it, then apply it (experiments/'
                           'choose_steps.py --apply <this file>) or copy it over without this '
                           'line\n'
                           + text, 'the proposal of a choice')
  return flagfile, evidence, proposal


def _digest(path: str) -> str:
  """sha256 of the file `path` ('none' when there is none)."""
  if not os.path.isfile(path):
    return 'none'
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def apply_proposal(proposal: str) -> str:
  """Puts the flagfile a reviewed proposal (`save`) names in place, when that flagfile is
  still the version the proposal was made from (else a one-line InputError naming both).
  Returns the flagfile's path."""
  if not os.path.isfile(proposal):
    raise InputError(f'{proposal}: no such proposal (experiments/choose_steps.py writes them '
                     f'in <config_dir>/{EVIDENCE_DIR}/)')
  with open(proposal) as f:
    first, _, text = f.read().partition('\n')
  if not first.startswith(_PROPOSAL):
    raise InputError(f'{proposal}:1: not a proposal of experiments/choose_steps.py')
  name, _, rest = first[len(_PROPOSAL):].partition(' (made from sha256 ')
  base = rest.partition(')')[0]
  if not name or os.path.basename(name) != name:
    raise InputError(f'{proposal}:1: names no flagfile of its configuration folder ({name!r})')
  flagfile = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(proposal))), name)
  if _digest(flagfile) != base:
    raise InputError(f'{proposal}: made from another version of {flagfile} (changed since): '
                     'rerun experiments/choose_steps.py')
  outputs.write_owned_text(flagfile, text, 'a choice flagfile')
  return flagfile


def _flag_name(line: str) -> Optional[str]:
  line = line.strip()
  if not line.startswith('--'):
    return None
  return line[2:].partition('=')[0]


def block_text(path: str, what: str, comments: Sequence[str], lines: Sequence[str]) -> str:
  """The flagfile `path` with its `what` block (appended when absent) holding `comments` and
  the flag `lines`; other lines that set the same flags are removed."""
  names = {_flag_name(line) for line in lines}
  names |= {'no' + n for n in names}
  begin, end = f'# >>> choose_steps --what {what}', f'# <<< choose_steps --what {what}'
  with open(path) as f:
    old = f.read().splitlines()
  kept, inside, position = [], False, None
  for line in old:
    if line.startswith(begin):
      inside, position = True, len(kept)
      continue
    if inside:
      inside = not line.startswith(end)
      continue
    if _flag_name(line) in names:
      continue
    kept.append(line)
  if inside:
    raise InputError(f'{path}: the block "{begin}" has no end line "{end}"')
  block = [f'{begin} (proposed by that command and applied; rerun it to propose a change)',
           *comments, *lines, end]
  if position is None:
    position = len(kept)
  new = kept[:position] + block + kept[position:]
  return '\n'.join(new) + '\n'


def evidence_for(config_dir: str, flagfiles: Sequence[str]) -> list:
  """The evidence of every choice written into one of `flagfiles` (paths or base names),
  sorted by file name."""
  wanted = {os.path.basename(f) for f in flagfiles}
  folder = os.path.join(config_dir, EVIDENCE_DIR)
  out = []
  for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
    if not name.endswith('.json'):
      continue
    with open(os.path.join(folder, name)) as f:
      record = json.load(f)
    if record.get('flagfile') in wanted:
      out.append(record)
  return out
