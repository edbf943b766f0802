"""Checkpoint faults as a user meets them: every one is bad input (status 2, one line naming the
folder and the cause) or a clean fallback, never a traceback (see colt_jax/train/loop.py).

Subprocess tests cost 10-20 s each, so each case runs its command line once or twice; the
library-level checks are in test_train.py and test_retriever.py.
"""
import dataclasses
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from colt_jax.train import configs
from colt_jax.data import splits as data
from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError
from colt_jax.train import loop
from colt_jax.train import restore
from colt_jax.train import trainers
from cli_run import LOG_LINE, REPO  # pylint: disable=g-bad-import-order
from cli_run import assert_bad_input, run_cli, tree_digest
from cli_run import run_script, without_progress  # pylint: disable=g-bad-import-order


def truncate(path):
  raw = open(path, 'rb').read()
  with open(path, 'wb') as f:
    f.write(raw[:len(raw) // 2])


def data_files(step_dir):
  """The data files of an orbax checkpoint (OCDBT: `state/d/*`)."""
  files = sorted(glob.glob(os.path.join(step_dir, 'state', 'd', '*')))
  assert files, os.listdir(step_dir)
  return files


@pytest.fixture(scope='module')
def model_dir(tiny_colt, tmp_path_factory):
  """A model directory (g and phi of `tiny_colt`, 16-d features)."""
  scl, ttc = tiny_colt
  path = str(tmp_path_factory.mktemp('model') / 'colt')
  return retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).save_pretrained(path)


@pytest.fixture(scope='module')
def ttc_run(tiny_synthetic, tmp_path_factory):
  """(config, workdir) of phi trained 3 steps with a checkpoint at every step."""
  cfg = configs.TTCConfig(data_dir=tiny_synthetic, workdir=str(tmp_path_factory.mktemp('ttc') /
                                                               'run'),
                          num_steps=3, checkpoint_every=1, batch_size=4, num_images=16,
                          num_layers=1, num_heads=2, model_dim=16)
  trainers.train_ttc(cfg, progress=False)
  return cfg, cfg.workdir


def _flagfile(path, cfg, **changes):
  values = dict(dataclasses.asdict(cfg), **changes)
  path.write_text('\n'.join(configs.flag_lines(configs.TTCConfig, values)) + '\n')
  return f'--flagfile={path}'


def test_a_damaged_model_directory_is_bad_input(model_dir, tiny_synthetic, tmp_path):
  model = tmp_path / 'model'
  shutil.copytree(model_dir, model)
  truncate(data_files(glob.glob(str(model / 'phi' / 'checkpoints' / '[0-9]*'))[0])[0])
  before = tree_digest(model)
  store = os.path.join(tiny_synthetic, 'features', 'test')
  proc = run_script('experiments/search.py', '--store', store, '--model', model, '--query',
                    'x', cwd=tmp_path)
  line = assert_bad_input(proc, str(model / 'phi'), 'cannot be read', 'is truncated')
  assert 'NOT_FOUND' not in line and 'OUT_OF_RANGE' not in line
  assert tree_digest(model) == before
  assert sorted(os.listdir(tmp_path)) == ['model']


def test_a_model_of_another_dimension_is_bad_input(model_dir, tiny_synthetic, tmp_path):
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  pad = lambda x: np.concatenate([np.asarray(x), np.zeros((len(x), 8), np.float32)], 1)
  wide = features.write(str(tmp_path / 'wide'), features.make_store(
      photos=pad(store.photos), photo_ids=store.photo_ids, queries=pad(store.queries),
      query_ids=store.query_ids, categories=pad(store.categories),
      category_names=store.category_names, encoder='synthetic', dataset='synthetic',
      split='test', source='test'))
  before = tree_digest(model_dir), tree_digest(wide)
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', tiny_synthetic,
                 '--features_dir', wide, '--method', 'colt', '--model', model_dir,
                 '--out_dir', tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, model_dir, 'model expects 16-d synthetic features',
                   f'the store {wide} has 24-d synthetic features')
  assert (tree_digest(model_dir), tree_digest(wide)) == before
  assert sorted(os.listdir(tmp_path)) == ['wide']


def test_resume_skips_a_damaged_checkpoint_or_refuses(ttc_run, tmp_path):
  cfg, workdir = ttc_run
  straight, _ = loop.restore_checkpoint(workdir)  # step 3 of the uninterrupted run
  run = tmp_path / 'run'
  shutil.copytree(workdir, run)
  truncate(data_files(run / 'checkpoints' / '3')[0])
  damaged = tree_digest(run / 'checkpoints' / '3')
  flags = _flagfile(tmp_path / 'ttc.flags', cfg, workdir=str(run))
  proc = run_cli('train_ttc', flags, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  warnings = [l for l in proc.stderr.splitlines() if 'newest intact checkpoint' in l]
  assert len(warnings) == 1 and LOG_LINE.match(warnings[0]), proc.stderr[-3000:]
  assert 'resuming from step 2' in warnings[0] and 'step 3 cannot be read' in warnings[0]
  assert 'Traceback' not in proc.stderr
  assert tree_digest(run / 'checkpoints' / '3.damaged') == damaged  # kept aside, as it was
  resumed, _ = loop.restore_checkpoint(str(run))  # step 3 again, from step 2
  assert int(resumed['step']) == 3
  # Exact: step 3 computed again by the command line, on this machine, by the program this
  # process ran (the same step, shapes and XLA_FLAGS, inherited) from step 2's parameters read
  # back: deterministic. (A tolerance would not do: Adam moves a parameter whose gradient is
  # rounding noise by its learning rate, whichever way the noise goes.)
  straight_leaves, resumed_leaves = jax_leaves(straight['params']), jax_leaves(resumed['params'])
  assert len(straight_leaves) == len(resumed_leaves)
  for a, b in zip(straight_leaves, resumed_leaves):
    np.testing.assert_array_equal(a, b)
  # Every checkpoint damaged: refused in one line, the folder untouched.
  for step in ('1', '2', '3'):
    truncate(data_files(run / 'checkpoints' / step)[0])
  before = tree_digest(run)
  proc = run_cli('train_ttc', flags, '--num_steps', '4', cwd=tmp_path)
  assert_bad_input(proc, str(run / 'checkpoints'), 'no intact checkpoint', 'step 3:',
                   'step 1:', '--noresume')
  assert tree_digest(run) == before


def test_abandoned_tensorstore_reads_are_dropped_from_asyncio_log(caplog):
  """A failed read leaves tensorstore futures and tasks nobody awaits; asyncio logs each as
  'Future (Task) exception was never retrieved' through its default handler. Those are
  dropped once quieted; any other asyncio error still shows."""
  import asyncio  # pylint: disable=g-import-not-at-top
  from colt_jax.train import checkpoints  # pylint: disable=g-import-not-at-top
  checkpoints._quiet_abandoned_reads()  # pylint: disable=protected-access
  read_error = ValueError('OUT_OF_RANGE: Error opening "zarr" driver: Requested byte range')
  loop = asyncio.new_event_loop()
  try:
    with caplog.at_level('ERROR', logger='asyncio'):
      for message in ('Future exception was never retrieved',
                      'Task exception was never retrieved'):
        loop.default_exception_handler({'message': message, 'exception': read_error})
      assert not caplog.records
      loop.default_exception_handler({'message': 'Future exception was never retrieved',
                                      'exception': ValueError('a bug')})
      loop.default_exception_handler({'message': 'Unclosed client session',
                                      'exception': read_error})
  finally:
    loop.close()
  assert [r.getMessage().splitlines()[0] for r in caplog.records] == [
      'Future exception was never retrieved', 'Unclosed client session']


def test_a_read_abandoned_before_the_failure_is_caught_is_not_printed(tiny_colt, caplog,
                                                                     monkeypatch):
  """An abandoned read can be collected, and logged by asyncio, while the read is still
  failing (before colt_jax's handler sees the error): the quieting is in place before any
  read, so the one-line error is all that shows."""
  import asyncio  # pylint: disable=g-import-not-at-top
  import logging  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from colt_jax.train import checkpoints  # pylint: disable=g-import-not-at-top
  asyncio_log = logging.getLogger('asyncio')
  monkeypatch.setattr(asyncio_log, 'filters', [])  # as in a fresh process
  monkeypatch.setattr(checkpoints, '_quiet', False)
  monkeypatch.setattr(sys, 'unraisablehook', sys.unraisablehook)
  monkeypatch.setattr(sys, 'excepthook', sys.excepthook)
  read_error = ValueError('OUT_OF_RANGE: Error opening "zarr" driver: Requested byte range')

  def failing_read(*_, **__):
    loop = asyncio.new_event_loop()
    try:  # a sibling read, collected while this one fails
      loop.default_exception_handler({'message': 'Task exception was never retrieved',
                                      'exception': read_error})
    finally:
      loop.close()
    raise read_error

  monkeypatch.setattr(ocp.CheckpointManager, 'restore', failing_read)
  scl, _ = tiny_colt
  with caplog.at_level('ERROR', logger='asyncio'):
    with pytest.raises(InputError, match='the checkpoint of step .* cannot be read'):
      checkpoints.restore_checkpoint(scl.workdir)
    state = trainers.scl_setup(scl)[0]
    ckpt = checkpoints.Checkpointer(os.path.join(scl.workdir, 'checkpoints'), 3)
    try:
      with pytest.raises(InputError, match='no intact checkpoint'):
        ckpt.restore_intact(state, set_aside=False)
    finally:
      ckpt.close()
  assert not caplog.records


def test_a_closed_loop_called_back_from_a_read_thread_is_not_printed(monkeypatch):
  """tensorstore's thread prints a read's late callback into orbax's closed loop through
  sys.excepthook; once quieted, that one error is dropped off the main thread and any other
  is still printed."""
  import asyncio  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  from colt_jax.train import checkpoints  # pylint: disable=g-import-not-at-top
  printed = []
  monkeypatch.setattr(sys, 'excepthook', lambda kind, value, tb: printed.append(str(value)))
  monkeypatch.setattr(sys, 'unraisablehook', sys.unraisablehook)
  monkeypatch.setattr(checkpoints, '_quiet', False)
  checkpoints._quiet_abandoned_reads()  # pylint: disable=protected-access
  loop = asyncio.new_event_loop()
  loop.close()

  def caught(call):
    try:
      call()
    except RuntimeError as e:
      return e
    raise AssertionError('no error')

  late = caught(lambda: loop.call_soon_threadsafe(print))
  other = caught(loop.run_forever)  # closed, but not a callback into it
  bug = RuntimeError('something else')

  def from_a_read_thread():
    for e in (late, other, bug):
      sys.excepthook(RuntimeError, e, e.__traceback__)

  thread = threading.Thread(target=from_a_read_thread)
  thread.start()
  thread.join()
  assert printed == ['Event loop is closed', 'something else']  # `late` dropped
  sys.excepthook(RuntimeError, late, late.__traceback__)  # on the main thread: shown
  assert printed[-1] == 'Event loop is closed' and len(printed) == 3


def jax_leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


_ENOSPC_WRAPPER = '''
import errno, runpy, sys
import orbax.checkpoint as ocp
saves = []
original = ocp.CheckpointManager.save
def save(self, step, *args, **kwargs):
  saves.append(step)
  if len(saves) == 2:  # the disk fills up at the second checkpoint
    raise OSError(errno.ENOSPC, 'No space left on device')
  return original(self, step, *args, **kwargs)
ocp.CheckpointManager.save = save
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name='__main__')
'''


def test_a_failed_checkpoint_write_stops_training(tiny_synthetic, tmp_path):
  wrapper = tmp_path / 'enospc.py'
  wrapper.write_text(_ENOSPC_WRAPPER)
  work = tmp_path / 'scl'
  proc = run_script(str(wrapper), os.path.join(REPO, 'experiments', 'train_scl.py'),
                    '--data_dir', tiny_synthetic, '--workdir', work, '--num_steps', '5',
                    '--checkpoint_every', '1', '--log_every', '1', '--batch_size', '4',
                    '--images_per_query', '8', cwd=tmp_path)
  assert_bad_input(without_progress(proc), str(work / 'checkpoints' / '2'),
                   'no space left on device', 'free on', 'training stopped',
                   'last good checkpoint is step 1')
  assert sorted(os.listdir(work / 'checkpoints')) == ['1']  # no partial step 2
  assert int(loop.restore_checkpoint(str(work))[0]['step']) == 1
  logged = [l for l in (work / 'metrics.jsonl').read_text().splitlines() if l]
  assert len(logged) == 2  # stopped at the failed save, not steps later


def test_a_moved_workdir_resumes(ttc_run, tmp_path):
  cfg, workdir = ttc_run
  moved = tmp_path / 'elsewhere' / 'run'
  shutil.copytree(workdir, moved)
  state = trainers.train_ttc(dataclasses.replace(cfg, workdir=str(moved), num_steps=4),
                             progress=False)
  assert int(state.step) == 4
  assert sorted(os.listdir(moved / 'checkpoints'))[-1] == '4'
  # Its identity is still checked: another configuration is refused.
  with pytest.raises(ValueError, match=r'learning_rate.*--noresume'):
    trainers.train_ttc(dataclasses.replace(cfg, workdir=str(moved), learning_rate=0.5),
                       progress=False)


def test_weights_digest_names_the_weights_not_the_folder(tmp_path):
  from colt_jax.train import checkpoints as ckpt  # pylint: disable=g-import-not-at-top
  for name in ('a', 'b'):
    step = tmp_path / name / 'checkpoints' / '300' / 'state'
    step.mkdir(parents=True)
    (step / 'data').write_bytes(b'\x00\x01weights')
    (step.parent / 'meta.json').write_text('{"step": 300}')
  (tmp_path / 'b' / 'metrics.jsonl').write_text('not weights')  # outside checkpoints/
  first = ckpt.weights_digest(str(tmp_path / 'a'))
  assert first == ckpt.weights_digest(str(tmp_path / 'b')) and len(first) == 16
  (tmp_path / 'b' / 'checkpoints' / '300' / 'state' / 'data').write_bytes(b'\x00\x02weights')
  assert ckpt.weights_digest(str(tmp_path / 'b')) != first
  os.rename(tmp_path / 'a' / 'checkpoints' / '300', tmp_path / 'a' / 'checkpoints' / '200')
  assert ckpt.weights_digest(str(tmp_path / 'a')) != first  # the step is part of it
  assert ckpt.weights_digest(str(tmp_path / 'none')) == 'none'


def test_orbax_is_imported_when_a_checkpoint_is_first_touched(tmp_path):
  """A command line that reads or writes no checkpoint (a refused flag, a baseline) does not
  pay for importing orbax (about a sixth of its start-up); the first Checkpointer imports it."""
  program = (
      'import sys\n'
      'from colt_jax.evaluation import methods\n'
      'from colt_jax.inference import retriever\n'
      'from colt_jax.engines import exact\n'
      'from colt_jax.train import checkpoints, loop, trainers\n'
      'loaded = lambda: any(m.split(".")[0] == "orbax" for m in sys.modules)\n'
      'print(loaded())\n'
      'checkpoints.Checkpointer(sys.argv[1])\n'
      'print(loaded(), sys.modules["orbax.checkpoint"].__name__)\n')
  run = subprocess.run([sys.executable, '-c', program, str(tmp_path / 'ckpt')],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.split() == ['False', 'True', 'orbax.checkpoint']


def test_a_checkpoint_whose_config_was_edited_is_refused_naming_it(ttc_run, tmp_path):
  """phi's checkpoint config edited after training (1 -> 2 layers) was an internal error
  (ScopeParamNotFoundError); now one line naming the checkpoint and the first parameter that
  does not fit."""
  _, workdir = ttc_run
  run = tmp_path / 'run'
  shutil.copytree(workdir, run)
  edited = 0
  for path in glob.glob(str(run / 'checkpoints' / '*' / 'config' / '*')) + [
      str(run / 'config.json')]:
    if os.path.isfile(path):
      text = open(path).read()
      if '"num_layers": 1' in text:
        open(path, 'w').write(text.replace('"num_layers": 1', '"num_layers": 2'))
        edited += 1
  assert edited
  with pytest.raises(InputError, match=rf'^{run}: its parameters are not those of the phi its '
                     r'config .* describes: layer_1/\S+ missing'):
    restore.load_classifier(str(run))
  assert restore.load_classifier(workdir).config.num_layers == 1  # the original still loads


def test_a_saved_config_value_that_fails_its_check_names_the_checkpoint_not_a_flag(tiny_colt,
                                                                                  tmp_path):
  """g's saved num_steps edited to 0 was refused as `--num_steps must be ...`, a flag the user
  never gave (as --beta was in the issue); now one line naming the checkpoint and the config's
  field. (A same-length edit: orbax refuses a checkpoint whose files changed size.)"""
  scl, _ = tiny_colt
  run = tmp_path / 'scl'
  shutil.copytree(scl.workdir, run)
  edited = 0
  for path in glob.glob(str(run / 'checkpoints' / '*' / 'config' / '*')) + [
      str(run / 'config.json')]:
    text = open(path).read() if os.path.isfile(path) else ''
    if '"num_steps": 3' in text:
      open(path, 'w').write(text.replace('"num_steps": 3', '"num_steps": 0'))
      edited += 1
  assert edited
  with pytest.raises(InputError, match=rf'^{run}: its saved config \(config.json and the '
                     r"checkpoint's\) is not valid: field num_steps ") as info:
    restore.load_reencoder(str(run))
  assert '--num_steps' not in str(info.value)
