"""The tests' forked command lines (tests/preloaded.py) return what `python SCRIPT` returns."""
import os
import subprocess
import sys
import time

import pytest

import preloaded

SCRIPT = r'''
import atexit, json, os, sys
atexit.register(lambda: print('atexit ran', flush=True))
import jax
print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'path0': sys.path[0],
                  'mine': os.environ.get('MINE'), 'devices': jax.device_count(),
                  'platforms': jax.config.jax_platforms, 'main': __name__}))
print('to stderr', file=sys.stderr)
if sys.argv[1] == 'exit':
  sys.exit(int(sys.argv[2]))
if sys.argv[1] == 'raise':
  raise ValueError('boom')
if sys.argv[1] == 'sleep':
  import time; time.sleep(60)
'''


@pytest.fixture
def script(tmp_path):
  path = tmp_path / 'bin' / 'prog.py'
  path.parent.mkdir()
  path.write_text(SCRIPT)
  return str(path)


def _both(script, *args, **kw):
  cmd = [sys.executable, script, *args]
  forked = preloaded.run(cmd, capture_output=True, text=True, timeout=120, **kw)
  plain = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
  return forked, plain


@pytest.mark.parametrize('args', [('ok', 'a b'), ('exit', '3'), ('exit', '0'), ('raise',)])
def test_a_forked_command_returns_what_a_fresh_interpreter_returns(script, tmp_path, args):
  env = dict(os.environ, MINE='x', XLA_FLAGS='--xla_force_host_platform_device_count=3',
             JAX_PLATFORMS='cpu')
  forked, plain = _both(script, *args, cwd=tmp_path, env=env)
  assert forked.returncode == plain.returncode
  assert forked.stdout == plain.stdout
  assert forked.stdout.endswith('atexit ran\n')
  assert '"devices": 3' in forked.stdout and '"mine": "x"' in forked.stdout
  assert f'"cwd": "{tmp_path}"' in forked.stdout and '"main": "__main__"' in forked.stdout
  assert f'"path0": "{os.path.dirname(script)}"' in forked.stdout
  if args[0] == 'raise':  # the traceback names the script's own line, as python prints it
    assert forked.stderr.splitlines()[-1] == 'ValueError: boom' == plain.stderr.splitlines()[-1]
    assert f'File "{script}", line' in forked.stderr
  else:
    assert forked.stderr == plain.stderr == 'to stderr\n'


def test_each_import_environment_has_its_own_server(script, tmp_path):
  """JAX reads JAX_PLATFORMS at its import: a command with another value is not forked from a
  server that imported JAX with the first."""
  for platforms in ('cpu', ''):
    env = dict(os.environ, JAX_PLATFORMS=platforms)
    forked, plain = _both(script, 'ok', cwd=tmp_path, env=env)
    assert forked.returncode == plain.returncode == 0 and forked.stdout == plain.stdout
  servers = preloaded._SERVERS  # pylint: disable=protected-access
  keys = [dict(k).get('JAX_PLATFORMS') for k, server in servers.items() if server]
  assert 'cpu' in keys and '' in keys


def test_a_command_past_its_timeout_is_killed(script, tmp_path):
  t0 = time.perf_counter()
  with pytest.raises(subprocess.TimeoutExpired):
    preloaded.run([sys.executable, script, 'sleep'], capture_output=True, timeout=3, cwd=tmp_path)
  assert time.perf_counter() - t0 < 30
  # ... and the server answers the next command.
  done = preloaded.run([sys.executable, script, 'exit', '5'], capture_output=True, cwd=tmp_path)
  assert done.returncode == 5


def test_interpreter_options_and_uncaptured_output_run_plainly(script, tmp_path, monkeypatch):
  calls = []
  real = subprocess.run
  monkeypatch.setattr(subprocess, 'run', lambda *a, **k: calls.append(a[0]) or real(*a, **k))
  preloaded.run([sys.executable, '-c', 'pass'], capture_output=True)
  preloaded.run([sys.executable, script, 'exit', '0'], stdout=subprocess.DEVNULL)
  assert len(calls) == 2
  with pytest.raises(FileNotFoundError):  # as subprocess.run raises it
    preloaded.run([sys.executable, script, 'exit', '0'], capture_output=True,
                  cwd=tmp_path / 'missing')
  assert len(calls) == 3
  preloaded.run([sys.executable, script, 'exit', '0'], capture_output=True, cwd=tmp_path)
  assert len(calls) == 3  # forked
