"""Two local CPU processes as one job (colt_jax/util/distributed.py, the trainers' multi-process
flags): the same parameters as one process with all the devices."""
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from colt_jax.train import configs
from colt_jax.data import splits as data
from colt_jax.util import distributed
from colt_jax.util.errors import InputError
from colt_jax.train import loop
from colt_jax.train import trainers
from xla_env import xla_flags  # pylint: disable=g-bad-import-order
from service_run import free_port  # pylint: disable=g-bad-import-order
from distributed_run import two_processes  # pylint: disable=g-bad-import-order
from checkout import REPO  # pylint: disable=g-bad-import-order





@pytest.mark.slow
@pytest.mark.parametrize('which', ['scl', 'ttc'])
def test_two_processes_train_the_parameters_of_one(tiny_synthetic, tmp_path, which):
  common = dict(dataset='synthetic', data_dir=tiny_synthetic, batch_size=8, num_steps=4,
                checkpoint_every=2, learning_rate=1e-3)
  if which == 'scl':
    extra = dict(images_per_query=16, beta=0.5)
    cls, train, program = configs.SCLConfig, trainers.train_scl, 'experiments/train_scl.py'
  else:
    extra = dict(num_images=24, num_layers=1, num_heads=2, model_dim=16, dropout=0.1)
    cls, train, program = configs.TTCConfig, trainers.train_ttc, 'experiments/train_ttc.py'
  one = cls(workdir=str(tmp_path / 'one'), **common, **extra)
  dev = data.load('synthetic', 'dev', tiny_synthetic)
  reference = train(one, devices=jax.local_devices()[:4], progress=False, split_data=dev)
  flags = [f'--{k}={v}' for k, v in dict(common, **extra).items()]
  outs = two_processes(program, flags + [f'--workdir={tmp_path / "two"}'], tmp_path / 'logs')
  for code, out, err in outs:
    assert code == 0, err[-3000:]
  assert 'trained 4 steps' in outs[0][1] and 'trained' not in outs[1][1]  # the chief reports
  state, _ = loop.restore_checkpoint(str(tmp_path / 'two'))
  leaves = jax.tree_util.tree_leaves(state['params'])
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(jax.device_get(reference.params)),
                          leaves):
    name = jax.tree_util.keystr(path)
    if "['key']['bias']" in name:  # a zero gradient: rounding noise, as in test_train.py
      continue
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4, err_msg=name)
  lines = open(tmp_path / 'two' / 'metrics.jsonl').read().splitlines()
  assert len(lines) == len(open(tmp_path / 'one' / 'metrics.jsonl').read().splitlines())


def test_one_process_is_a_no_op_and_bad_flags_are_named():
  distributed.initialize('', 1, 0)
  assert distributed.is_chief() and not distributed.is_multiprocess()
  assert distributed.process_rows(8) == slice(0, 8)
  distributed.barrier('nothing to wait for')
  with pytest.raises(InputError, match='--coordinator_address'):
    distributed.initialize('', 2, 0)
  with pytest.raises(InputError, match='--process_id'):
    distributed.initialize('127.0.0.1:1', 2, 5)


@pytest.mark.slow
def test_two_processes_index_the_store_of_one(tiny_clip_dir, tmp_path):
  from colt_jax.data import features  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import clip  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import collection  # pylint: disable=g-import-not-at-top
  from tiny_clip import random_image  # pylint: disable=g-import-not-at-top
  photos = tmp_path / 'photos'
  photos.mkdir()
  for i in range(7):
    random_image(50 + i).save(photos / f'p{i}.png')
  (photos / 'broken.jpg').write_bytes(b'nope')
  one = collection.index_collection(collection.folder_items(str(photos)),
                                    clip.ClipEncoder(tiny_clip_dir), str(tmp_path / 'one'),
                                    source=str(photos), shard_size=2, max_bad_fraction=0.5,
                                    progress=False)
  outs = two_processes('data_prep/index_collection.py', [
      f'--images={photos}', '--encoder=clip', f'--model={tiny_clip_dir}',
      f'--out={tmp_path / "two"}', '--shard_size=2', '--max_bad_fraction=0.5',
      '--noprogress'], tmp_path / 'logs')
  for code, _, err in outs:
    assert code == 0, err[-3000:]
  assert 'wrote' in outs[0][1] and 'wrote' not in outs[1][1]
  two = features.load(str(tmp_path / 'two'))
  assert list(two.photo_ids) == list(one.photo_ids)
  assert two.meta['bad_images'] == one.meta['bad_images']
  np.testing.assert_allclose(np.asarray(two.photos), np.asarray(one.photos), atol=1e-5)


@pytest.mark.slow
def test_sigterm_stops_every_process_of_a_job_with_its_checkpoints_intact(tiny_synthetic,
                                                                         tmp_path):
  """JAX's preemption service would take SIGTERM and the job would train on; with it off, each
  process unwinds (colt_jax.util.cli: status 143) and no half-written checkpoint is left."""
  port, work = free_port(), tmp_path / 'job'
  env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=xla_flags(2))
  procs = [subprocess.Popen(
      [sys.executable, os.path.join(REPO, 'experiments/train_scl.py'), '--dataset=synthetic',
       f'--data_dir={tiny_synthetic}', '--batch_size=8', '--images_per_query=16',
       '--num_steps=1000000', '--checkpoint_every=20', f'--workdir={work}',
       f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', f'--process_id={i}'],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
  try:
    deadline = time.time() + 300
    while not (work / 'checkpoints' / '20').is_dir():  # training is under way
      assert time.time() < deadline and all(p.poll() is None for p in procs), [
          p.stderr.read()[-1500:] for p in procs if p.poll() is not None]
      time.sleep(0.2)
    for p in procs:
      p.send_signal(signal.SIGTERM)
    errs = [p.communicate(timeout=120)[1] for p in procs]
  finally:
    for p in procs:
      p.kill()
  assert [p.returncode for p in procs] == [143, 143], [e[-1500:] for e in errs]
  assert all('terminated by SIGTERM' in e for e in errs)
  steps = os.listdir(work / 'checkpoints')
  assert steps and all(s.isdigit() for s in steps), steps  # no orbax temporary left
