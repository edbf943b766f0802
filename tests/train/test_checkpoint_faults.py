"""Checkpoint faults (colt_jax/train/): unreadable checkpoints named, fall-back to the newest
intact one, failed saves stop training, and a run's identity."""
import errno
import json
import os
import shutil

import numpy as np
import pytest

from colt_jax.util import diskspace
from colt_jax.util.errors import InputError
from colt_jax.train import loop
from colt_jax.train import restore
from colt_jax.train import trainers
from train_configs import scl_config  # pylint: disable=g-bad-import-order


def _saved_steps(directory, steps=(1, 2, 3)):
  """A `Checkpointer` folder with a small state saved at `steps` (no training)."""
  ckpt = loop.Checkpointer(str(directory))
  for s in steps:
    ckpt.save(s, {'w': np.full(64, s, np.float32), 'step': np.array(s, np.int32)}, {'beta': 0.5})
  ckpt.close()
  return str(directory)

def _data_file(step_dir):
  return sorted((step_dir / 'state' / 'd').iterdir())[0]

def _truncate(path):
  raw = path.read_bytes()
  path.write_bytes(raw[:len(raw) // 2])

def test_unreadable_checkpoints_name_the_folder_and_the_file(tmp_path):
  directory = tmp_path / 'checkpoints'
  _saved_steps(directory, steps=(1,))
  step = directory / '1'
  fresh = tmp_path / 'fresh'
  shutil.copytree(directory, fresh)
  _truncate(_data_file(step))
  with pytest.raises(InputError, match=r'checkpoints: the checkpoint of step 1 cannot be '
                     r'read \(state/d/\w+ is truncated\)'):
    loop.restore_checkpoint(str(directory))
  _data_file(step).unlink()
  with pytest.raises(InputError, match=r'state/d/\w+ is missing'):
    loop.restore_checkpoint(str(directory))
  shutil.rmtree(directory)
  shutil.copytree(fresh, directory)
  _truncate(step / 'state' / '_METADATA')
  with pytest.raises(InputError, match=r'state/_METADATA is truncated or malformed'):
    loop.restore_checkpoint(str(directory))
  (step / 'config' / 'metadata').write_text('')
  shutil.copy(fresh / '1' / 'state' / '_METADATA', step / 'state' / '_METADATA')
  with pytest.raises(InputError, match=r'config/metadata is truncated or malformed'):
    restore.load_reencoder(str(directory))

def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path):
  directory = tmp_path / 'checkpoints'
  _saved_steps(directory)
  _truncate(_data_file(directory / '3'))
  template = {'w': np.zeros(64, np.float32), 'step': np.array(0, np.int32)}
  ckpt = loop.Checkpointer(str(directory))
  state, damaged = ckpt.restore_intact(template)
  assert int(state['step']) == 2 and state['w'][0] == 2
  assert [(s, w) for s, _, w in damaged] == [(3, '3.damaged')]
  assert 'is truncated' in damaged[0][1]
  assert ckpt.latest_step() == 2 and sorted(os.listdir(directory)) == ['1', '2', '3.damaged']
  ckpt.save(3, state, {})  # the step is saved again, next to the damaged one
  ckpt.close()
  for s in ('1', '2', '3'):
    _truncate(_data_file(directory / s))
  ckpt = loop.Checkpointer(str(directory))
  with pytest.raises(InputError, match=r'no intact checkpoint to resume from \(step 3: .*'
                     r'step 2: .*step 1: .*--noresume'):
    ckpt.restore_intact(template)
  assert sorted(os.listdir(directory)) == ['1', '2', '3', '3.damaged']  # nothing moved

def test_a_failed_save_stops_training_at_that_step(tiny_synthetic, dev_data, tmp_path,
                                                   monkeypatch):
  import orbax.checkpoint as orbax_checkpoint  # pylint: disable=g-import-not-at-top
  original = orbax_checkpoint.CheckpointManager.save
  calls = []

  def save(self, step, *args, **kwargs):
    calls.append(step)
    if step == 2:
      raise PermissionError(errno.EACCES, 'Permission denied', str(tmp_path / 'x'))
    return original(self, step, *args, **kwargs)

  monkeypatch.setattr(orbax_checkpoint.CheckpointManager, 'save', save)
  cfg = scl_config(tiny_synthetic, tmp_path / 'w', num_steps=6, checkpoint_every=1)
  with pytest.raises(loop.CheckpointWriteError,
                     match=r'checkpoints: cannot write the checkpoint of step 2 \(Permission '
                     r'denied: .*x\); training stopped, the last good checkpoint is step 1'):
    trainers.train_scl(cfg, progress=False, split_data=dev_data)
  assert calls == [1, 2]
  assert [json.loads(l)['step'] for l in open(tmp_path / 'w' / 'metrics.jsonl')] == [1, 2]
  assert sorted(os.listdir(tmp_path / 'w' / 'checkpoints')) == ['1']
  assert int(loop.restore_checkpoint(str(tmp_path / 'w'))[0]['step']) == 1

def test_only_write_faults_of_a_save_are_bad_input(tmp_path, monkeypatch):
  ckpt = loop.Checkpointer(str(tmp_path / 'checkpoints'))
  for error, expected in [
      (ValueError('RESOURCE_EXHAUSTED: Failed writing: "f": No space left on device '
                  "[os_error_code='28']"), diskspace.DiskFullError),
      (OSError(errno.ENOSPC, 'No space left on device'), diskspace.DiskFullError),
      (OSError(errno.EROFS, 'Read-only file system'), loop.CheckpointWriteError),
      (ValueError('a bug'), ValueError)]:
    monkeypatch.setattr(ckpt.manager, 'save', lambda *a, error=error, **k: _raise(error))
    with pytest.raises(expected) as info:
      ckpt.save(1, {'w': np.zeros(2)}, {})
    assert info.type is expected
    if expected is diskspace.DiskFullError:  # the step's folder and the free space
      assert str(info.value).startswith(
          f'no space left on device writing {tmp_path / "checkpoints" / "1"} (')
    elif expected is loop.CheckpointWriteError:
      assert 'Read-only file system' in str(info.value)
    if expected is not ValueError:
      assert 'no checkpoint was saved before' in str(info.value)
  ckpt.close()

def _raise(error):
  raise error

def test_run_identity_ignores_the_workdir_and_paths_inside_it(tmp_path):
  old = tmp_path / 'a' / 'run'
  old.mkdir(parents=True)
  saved = dict(workdir=str(old), features_dir=str(old / 'feats'), data_dir='/data', tau=0.2,
               num_steps=4)
  (old / loop.CONFIG_FILE).write_text(json.dumps(saved))
  new = tmp_path / 'b' / 'run'
  shutil.copytree(old, new)
  moved = dict(saved, workdir=str(new), features_dir=str(new / 'feats'), num_steps=8)
  loop.check_resumable(str(new), moved)  # a moved (or copied) workdir is the same run
  assert loop.run_identity(saved) == loop.run_identity(moved) == dict(
      features_dir='<workdir>/feats', data_dir='/data', tau=0.2)
  with pytest.raises(InputError, match=r'features_dir: .* -> .*other.*--noresume'):
    loop.check_resumable(str(new), dict(moved, features_dir=str(tmp_path / 'other')))
  with pytest.raises(InputError, match=r'tau: 0.2 -> 0.5'):
    loop.check_resumable(str(new), dict(moved, tau=0.5))
  (new / loop.CONFIG_FILE).write_text('{"tau": ')
  with pytest.raises(InputError, match=r'config.json: cannot read the saved configuration '
                     r'\(malformed JSON'):
    loop.check_resumable(str(new), moved)
