"""Two jax.distributed processes on this machine for the multi-process tests (two_processes)."""
import os
import subprocess
import sys

import pytest

from checkout import REPO  # pylint: disable=g-bad-import-order
from service_run import free_port  # pylint: disable=g-bad-import-order
from xla_env import xla_flags  # pylint: disable=g-bad-import-order


def two_processes(program: str, flags: list, logs) -> list:
  """Runs `program` as processes 0 and 1 of one job: [(returncode, stdout, stderr)] each.

  Their output goes to files under `logs` (a pipe left unread while waiting on the other
  process could fill and block its writer); a job that outlives the timeout is killed and
  the test fails with both processes' last lines."""
  port = free_port()
  env = dict(os.environ, PYTHONPATH=REPO,
             XLA_FLAGS=xla_flags(2))
  os.makedirs(logs, exist_ok=True)
  names = [(os.path.join(logs, f'{i}.out'), os.path.join(logs, f'{i}.err')) for i in range(2)]
  procs = []
  for i, (out, err) in enumerate(names):
    with open(out, 'w') as fo, open(err, 'w') as fe:
      procs.append(subprocess.Popen(
          [sys.executable, os.path.join(REPO, program), *flags,
           f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', f'--process_id={i}'],
          stdout=fo, stderr=fe, text=True, env=env))
  read = lambda path: open(path).read()
  try:
    for p in procs:
      p.wait(timeout=600)
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()
      p.wait()
    pytest.fail('the job hung; last lines:\n' + '\n'.join(
        f'process {i}: ' + read(err)[-1500:] for i, (_, err) in enumerate(names)))
  return [(p.returncode, read(out), read(err)) for p, (out, err) in zip(procs, names)]
