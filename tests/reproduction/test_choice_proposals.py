"""choose_steps proposes, never edits (issue 66 item 5): a choice writes its evidence and the
flagfile it proposes beside it, leaves the configuration byte-identical, and a reviewed
proposal is put in place only over the version it was made from. A protocol choice states
only what differs from its trainer flagfile, checked against the value it records."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from colt_jax.reproduction import choice_files
from colt_jax.reproduction import reproduce_config
from colt_jax.train import configs
from colt_jax.util.errors import ConfigError, InputError
from checkout import REPO  # pylint: disable=g-bad-import-order

SCL = {'what': 'scl', 'protocol': 'pool', 'held_out_topics': [1, 2], 'topk': 0.5,
       'train_topics': 5, 'best': {'beta': 0.5, 'learning_rate': 1e-3},
       'scores': [{'setting': {'beta': 0.5, 'learning_rate': 1e-3}, 'F1@20': 0.61},
                  {'setting': {'beta': 0.1, 'learning_rate': 1e-5}, 'F1@20': 0.6}]}
TTC = {'what': 'ttc', 'protocol': 'global', 'held_out_topics': [1, 2], 'topk': 0.5,
       'best': {'steps': 400, 'irrelevant_threshold': 0.7},
       'scores': [{'steps': 400, 'irrelevant_threshold': 0.7, 'F1@20': 0.6}]}


@pytest.fixture
def tuned(tmp_path):
  """A copy of the shipped tuned configuration (its manifest included)."""
  out = tmp_path / 'tuned'
  shutil.copytree(os.path.join(REPO, reproduce_config.CONFIG_DIR), out)
  return out


def _bytes(folder):
  return {n: (folder / n).read_bytes() for n in os.listdir(folder) if n.endswith('.flags')}


def test_a_choice_leaves_the_flagfiles_byte_identical_and_writes_its_proposal(tuned):
  before = _bytes(tuned)
  flagfile, evidence, proposal = choice_files.save(str(tuned), 'div400', 'div400', SCL, 'cmd')
  assert _bytes(tuned) == before  # nothing of the configuration moved
  assert flagfile == str(tuned / 'div400_scl.flags') and os.path.isfile(evidence)
  assert proposal == str(tuned / 'evidence' / 'div400_scl.proposed.flags')
  text = open(proposal).read()
  assert text.startswith('# Proposed by experiments/choose_steps.py for div400_scl.flags')
  # The proposal is the flagfile with its block replaced: the other flags as they were.
  assert choice_files.apply_proposal(proposal) == flagfile
  written = configs.from_flagfile(configs.SCLConfig, flagfile)
  shipped = configs.from_flagfile(configs.SCLConfig,
                                  os.path.join(REPO, reproduce_config.CONFIG_DIR,
                                               'div400_scl.flags'))
  assert (written.beta, written.learning_rate) == (0.5, 1e-3)
  assert (written.tau, written.alpha, written.num_steps) == (
      shipped.tau, shipped.alpha, shipped.num_steps)
  assert open(flagfile).read().count('--beta=') == 1
  # Applied once: the flagfile is no longer the version the proposal was made from.
  with pytest.raises(InputError, match='made from another version of .*div400_scl.flags'):
    choice_files.apply_proposal(proposal)


def test_a_protocol_choice_is_proposed_before_it_is_read(tuned):
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic', config_dir=str(tuned))
  assert cfg.protocol_choice('global') is None
  flagfile, _, proposal = choice_files.save(str(tuned), 'synthetic', 'synthetic', TTC, 'cmd')
  assert not os.path.exists(flagfile) and cfg.protocol_choice('global') is None
  choice_files.apply_proposal(proposal)
  choice = cfg.protocol_choice('global')
  assert (choice.num_steps, choice.irrelevant_threshold) == (400, 0.7)


def test_a_users_proposal_file_is_refused_before_any_work(tuned):
  """choose_steps checks its outputs first: a file it did not write where its proposal goes."""
  (tuned / 'evidence' / 'div400_scl.proposed.flags').write_text('mine\n')
  with pytest.raises(InputError, match='refusing to overwrite a file colt_jax did not write'):
    choice_files.check_outputs(str(tuned), 'div400', 'div400', 'scl', 'pool')


def test_choose_steps_apply_names_a_missing_proposal_in_one_line(tmp_path):
  done = subprocess.run(
      [sys.executable, os.path.join(REPO, 'experiments', 'choose_steps.py'),
       '--apply', str(tmp_path / 'none.proposed.flags')], capture_output=True, text=True,
      timeout=300, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu'))
  assert done.returncode == 2, done.stderr[-2000:]
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1 and 'none.proposed.flags: no such proposal' in lines[0], lines


def test_a_proposal_names_only_a_flagfile_of_its_own_folder(tuned):
  forged = tuned / 'evidence' / 'forged.proposed.flags'
  forged.write_text('# Proposed by experiments/choose_steps.py for ../../x.flags (made from '
                    'sha256 none): review it\n--beta=1\n')
  with pytest.raises(InputError, match='names no flagfile of its configuration folder'):
    choice_files.apply_proposal(str(forged))
  assert not (tuned.parent.parent / 'x.flags').exists()
  other = tuned / 'evidence' / 'notes.proposed.flags'
  other.write_text('my notes\n')
  with pytest.raises(InputError, match='not a proposal of experiments/choose_steps.py'):
    choice_files.apply_proposal(str(other))


def _stated(path):
  """The flags a flagfile states (name -> value)."""
  with open(path) as f:
    return dict(line.strip()[2:].partition('=')[::2] for line in f if line.startswith('--'))


def test_each_value_is_set_in_one_file():
  """A shipped protocol choice states no value equal to its trainer flagfile's (that one sets
  it), and each choice read back is the value its evidence chose."""
  folder = os.path.join(REPO, reproduce_config.CONFIG_DIR)
  for file in sorted(os.listdir(folder)):
    if not file.endswith('.choice.flags'):
      continue
    name, protocol = file[:-len('.choice.flags')].split('_phi_')
    trainer = _stated(choice_files.trainer_flagfile(folder, name))
    stated = _stated(os.path.join(folder, file))
    assert all(stated.get(f) != trainer[f] for f in choice_files.INHERITED), file
    choice = choice_files.read_protocol_choice(folder, name, protocol)
    with open(choice_files.evidence_path(folder, 'ttc', name, protocol)) as f:
      chosen = json.load(f)['chosen']
    assert dataclasses.asdict(choice) == chosen, file


def test_a_choice_equal_to_the_trainer_flagfile_leaves_the_value_there(tuned):
  same = dict(TTC, best={'steps': 300, 'irrelevant_threshold': 0.7})  # div400_ttc: 300 steps
  flagfile, _, proposal = choice_files.save(str(tuned), 'div400', 'div400', same, 'cmd')
  text = open(proposal).read()
  assert '--num_steps' not in text and '--irrelevant_threshold=0.7' in text
  assert 'Chosen equal to div400_ttc.flags, which sets it' in text
  choice_files.apply_proposal(proposal)
  assert configs.from_flagfile(configs.ProtocolChoice, flagfile).num_steps is None
  choice = choice_files.read_protocol_choice(str(tuned), 'div400', 'global')
  assert (choice.num_steps, choice.irrelevant_threshold) == (300, 0.7)
  other = dict(TTC, best={'steps': 200, 'irrelevant_threshold': 0.5})
  _, _, proposal = choice_files.save(str(tuned), 'div400', 'div400', other, 'cmd')
  assert '--num_steps=200' in open(proposal).read()
  # Proposed, not applied: its evidence is written, the choice in place still reads as it was.
  choice = choice_files.read_protocol_choice(str(tuned), 'div400', 'global')
  assert (choice.num_steps, choice.irrelevant_threshold) == (300, 0.7)
  choice_files.apply_proposal(proposal)
  choice = choice_files.read_protocol_choice(str(tuned), 'div400', 'global')
  assert (choice.num_steps, choice.irrelevant_threshold) == (200, 0.5)


def test_an_edit_of_the_trainer_flagfile_cannot_change_a_choice(tuned):
  """div400_phi_global takes its steps from div400_ttc.flags (300, as its evidence chose)."""
  trainer = tuned / 'div400_ttc.flags'
  trainer.write_text(trainer.read_text().replace('--num_steps=300', '--num_steps=500'))
  with pytest.raises(ConfigError) as e:
    choice_files.read_protocol_choice(str(tuned), 'div400', 'global')
  message = str(e.value)
  assert '\n' not in message and message.startswith(f'{trainer}: --num_steps=500')
  assert 'div400_phi_global.choice.flags chose 300' in message
  # a choice that states its steps is its own
  assert choice_files.read_protocol_choice(str(tuned), 'div400', 'pool').num_steps == 200
  trainer.write_text(trainer.read_text().replace('--num_steps=500', '--num_steps=300'))
  assert choice_files.read_protocol_choice(str(tuned), 'div400', 'global').num_steps == 300
  choice = tuned / 'div400_phi_global.choice.flags'
  choice.write_text(''.join(line for line in choice.read_text().splitlines(True)
                            if not line.startswith(choice_files.INHERITED_LINE)))
  with pytest.raises(ConfigError, match='states no --num_steps and records no value'):
    choice_files.read_protocol_choice(str(tuned), 'div400', 'global')
