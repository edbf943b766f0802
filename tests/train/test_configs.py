"""Tests of configs as data and the trainers' command lines (colt_jax/train/configs.py, experiments/)."""
import glob
import json
import os
import subprocess
import sys

import pytest

from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.train import configs
from xla_env import xla_flags  # pylint: disable=g-bad-import-order
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

FLAGFILES = sorted(glob.glob(os.path.join(REPO, 'experiments', 'configs', '*', '*.flags')))


def _kind(path: str) -> str:
  """'paper' (experiments/configs/paper/: the paper's values) or 'tuned'."""
  return os.path.basename(os.path.dirname(path))


def test_every_dataset_ships_both_flagfiles():
  names = {(_kind(f), os.path.basename(f)) for f in FLAGFILES}
  for kind, dataset in (('tuned', 'synthetic'), ('paper', 'div400'), ('tuned', 'div400'),
                        ('paper', 'div150cred')):
    assert {(kind, f'{dataset}_scl.flags'), (kind, f'{dataset}_ttc.flags')} <= names
  assert {_kind(f) for f in FLAGFILES} == {'paper', 'tuned'}


@pytest.mark.parametrize('path', FLAGFILES, ids=lambda p: f'{_kind(p)}/{os.path.basename(p)}')
def test_flagfiles_parse(path):
  if path.endswith('.choice.flags'):  # phi's steps and threshold chosen for one protocol
    choice = configs.from_flagfile(configs.ProtocolChoice, path)
    # num_steps unstated: chosen equal to the trainer's flagfile (choice_files), set there
    assert choice.num_steps is None or choice.num_steps >= 1
    assert 0 <= choice.irrelevant_threshold <= 1
    return
  paper = _kind(path) == 'paper'
  # The paper's flagfiles set no flag of an extension: they read as the paper's TTCConfig;
  # the tuned ones name their method (colt-pairs: query-relative tokens).
  ttc_cls = configs.TTCConfig if paper else PairsTTCConfig
  cls = configs.SCLConfig if path.endswith('_scl.flags') else ttc_cls
  cfg = configs.from_flagfile(cls, path)
  assert cfg.dataset in os.path.basename(path)
  if paper and cls is configs.SCLConfig:  # the paper's values
    assert (cfg.tau, cfg.alpha, cfg.beta, cfg.learning_rate, cfg.batch_size) == (
        0.2, 0.01, 0.02, 1e-5, 32)
  if paper and cls is configs.TTCConfig:
    assert (cfg.num_layers, cfg.num_images, cfg.learning_rate) == (8, 200, 1e-4)
    assert cfg.label_scheme == 'global'
    assert '--method' not in open(path).read()
  if cls is PairsTTCConfig:
    assert '--method=colt-pairs' in open(path).read().split()
  if _kind(path) == 'tuned' and 'div' in os.path.basename(path) and cls is configs.SCLConfig:
    # the tuned g keeps the paper's SCL terms
    assert (cfg.tau, cfg.alpha, cfg.batch_size) == (0.2, 0.01, 32)


def test_flagfile_errors_name_the_line(tmp_path):
  bad = tmp_path / 'bad.flags'
  bad.write_text('# comment\n--tau=0.1\n--nonsense=3\n')
  with pytest.raises(ValueError, match=r'bad.flags:3: SCLConfig has no field'):
    configs.from_flagfile(configs.SCLConfig, str(bad))
  bad.write_text('--tau=cold\n')
  with pytest.raises(ValueError, match=r'bad.flags:1: bad value'):
    configs.from_flagfile(configs.SCLConfig, str(bad))
  ok = tmp_path / 'ok.flags'
  ok.write_text('--no_pair2\n--batch_size=8\n')
  cfg = configs.from_flagfile(configs.SCLConfig, str(ok), seed=4)
  assert cfg.no_pair2 and cfg.batch_size == 8 and cfg.seed == 4
  with pytest.raises(ValueError, match='unknown fields'):
    configs.from_dict(configs.SCLConfig, {'tau': 0.1, 'colour': 'red'})


def test_a_flagfile_s_method_is_its_class_s(tmp_path):
  """A `--method` line names the method of the class that reads it (or of one it extends:
  colt-pairs reads the paper's flagfiles); another is refused naming the line."""
  path = tmp_path / 'ttc.flags'
  path.write_text('--method=colt-pairs\n--query_relative\n')
  assert configs.from_flagfile(PairsTTCConfig, str(path), workdir='w').query_relative
  path.write_text('--method=colt\n--num_layers=2\n')
  assert configs.from_flagfile(PairsTTCConfig, str(path), workdir='w').num_layers == 2
  assert configs.from_flagfile(configs.TTCConfig, str(path), workdir='w').num_layers == 2
  path.write_text('# colt-pairs\n--method=colt-pairs\n')
  with pytest.raises(ValueError, match=r'ttc.flags:2: --method=colt-pairs is not the method of '
                     r'TTCConfig \(colt\)'):
    configs.from_flagfile(configs.TTCConfig, str(path), workdir='w')


def _run(script, *args, cwd, devices=2):
  cmd = [sys.executable, os.path.join(REPO, 'experiments', script), *args]
  env = dict(os.environ, XLA_FLAGS=xla_flags(devices))
  return preloaded.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


@pytest.mark.slow
def test_trainers_run_from_flagfiles_and_resume(tiny_synthetic, tmp_path):
  scl = _run('train_scl.py', f'--flagfile={REPO}/experiments/configs/tuned/synthetic_scl.flags',
             f'--data_dir={tiny_synthetic}', f'--workdir={tmp_path}/scl', '--num_steps=2',
             '--batch_size=4', '--images_per_query=8', cwd=tmp_path)
  assert scl.returncode == 0, scl.stderr[-3000:]
  assert 'scl: trained 2 steps' in scl.stdout
  assert json.load(open(tmp_path / 'scl' / 'config.json'))['batch_size'] == 4
  ttc_args = [f'--flagfile={REPO}/experiments/configs/tuned/synthetic_ttc.flags',
              f'--data_dir={tiny_synthetic}', f'--workdir={tmp_path}/ttc',
              f'--scl_checkpoint={tmp_path}/scl', '--batch_size=4', '--num_images=32',
              '--num_layers=1', '--model_dim=16', '--num_heads=2', '--checkpoint_every=1']
  ttc = _run('train_ttc.py', *ttc_args, '--num_steps=2', cwd=tmp_path)
  assert ttc.returncode == 0, ttc.stderr[-3000:]
  assert 'ttc: trained 2 steps' in ttc.stdout
  assert '2 device(s)' in ttc.stderr
  more = _run('train_ttc.py', *ttc_args, '--num_steps=3', cwd=tmp_path)
  assert more.returncode == 0, more.stderr[-3000:]
  assert 'resumed from step 2' in more.stderr and 'ttc: trained 3 steps' in more.stdout
  lines = [json.loads(l) for l in open(tmp_path / 'ttc' / 'metrics.jsonl')]
  assert [l['step'] for l in lines][-1] == 3 and all('loss' in l for l in lines)


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(tiny_synthetic, tmp_path):
  """A real kill -9 in the middle of training; --resume ends with the same parameters."""
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from colt_jax.train import loop  # pylint: disable=g-import-not-at-top
  args = [f'--flagfile={REPO}/experiments/configs/tuned/synthetic_scl.flags',
          f'--data_dir={tiny_synthetic}', '--batch_size=4', '--images_per_query=8',
          '--checkpoint_every=1', '--num_steps=60']  # a save per step: ~0.1 s each
  env = dict(os.environ, XLA_FLAGS=xla_flags(1))
  killed = tmp_path / 'killed'
  proc = subprocess.Popen([sys.executable, os.path.join(REPO, 'experiments', 'train_scl.py'),
                           *args, f'--workdir={killed}'], cwd=tmp_path, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 240
  while time.time() < deadline:
    done = [d for d in (killed / 'checkpoints').glob('*') if d.name.isdigit()]
    if len(done) >= 3:
      break
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  assert proc.wait() == -signal.SIGKILL, 'the run ended before it could be killed'
  assert len(done) >= 3, 'training did not checkpoint in time'
  resumed = _run('train_scl.py', *args, f'--workdir={killed}', cwd=tmp_path, devices=1)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'resumed from step' in resumed.stderr
  straight = _run('train_scl.py', *args, f'--workdir={tmp_path / "straight"}', cwd=tmp_path,
                  devices=1)
  assert straight.returncode == 0, straight.stderr[-3000:]
  a, _ = loop.restore_checkpoint(str(killed))
  b, _ = loop.restore_checkpoint(str(tmp_path / 'straight'))
  assert int(a['step']) == int(b['step']) == 60
  # Exact: the same command line on this machine, one device, the same programs on the same
  # inputs (resumed from a checkpoint read back): deterministic.
  for x, y in zip(jax_leaves(a), jax_leaves(b)):
    np.testing.assert_array_equal(x, y)


def jax_leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree_util.tree_leaves(tree)


def test_the_research_folders_are_the_working_folders(tmp_path, monkeypatch):
  """The reproduction's defaults (configs, work/, row-cache/, models) are relative to the
  working folder, never computed from where colt_jax lies: run from another folder, the
  commands read that folder's flagfiles."""
  import shutil  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import full_models  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import reproduce_config  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import row_training  # pylint: disable=g-import-not-at-top
  for path in (reproduce_config.CONFIG_DIR, reproduce_config.PAPER_CONFIG_DIR,
               full_models.DEFAULT_OUT, full_models.DEFAULT_ROWS_DIR):
    assert not os.path.isabs(path), path
  repo = REPO
  shutil.copytree(os.path.join(repo, 'experiments', 'configs'),
                  tmp_path / 'experiments' / 'configs')
  flagfile = tmp_path / 'experiments' / 'configs' / 'tuned' / 'synthetic_scl.flags'
  flagfile.write_text(flagfile.read_text().replace('--tau=0.2', '--tau=0.3'))
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic')
  monkeypatch.chdir(repo)
  assert row_training.base_configs(cfg, paper=False)[0].tau == 0.2
  monkeypatch.chdir(tmp_path)
  assert row_training.base_configs(cfg, paper=False)[0].tau == 0.3
