"""Command lines of the tests, started without paying for JAX's import each time.

A test runs `python SCRIPT ARGS` as a user does, in a process of its own, and reads its exit
status, stdout and stderr (`run`: `subprocess.run`'s arguments and result). The suite starts
about 290 of them, many of them refusals that end within 0.2 s of their start, after about
1.2 s of importing jax, flax and optax. Here a server process imports those libraries once
(`PRELOAD`: nothing else, no colt_jax module, no absl flag, no JAX backend) and forks a child
per command line. The child takes the command's working folder, environment, argv and
sys.path, reads /dev/null and writes the files the caller reads, runs the script as
`__main__` (runpy) and exits through the interpreter's normal shutdown (threads joined,
atexit run): its status and output are those of `python SCRIPT` (tests/test_preloaded.py).

The fork must equal a fresh interpreter:
- Environment variables read at the preloaded libraries' import (`_IMPORT_ENV`: JAX_PLATFORMS,
  the compilation cache, thread counts) get one server per set of values. XLA_FLAGS (device
  counts) is read when a backend starts, which happens in the child.
- Interpreter options, `-c` and `-m`, output not captured, a working folder that is not
  there or other arguments of subprocess.run run as a plain subprocess, as does every command
  when its server could not start or holds threads, a command while another thread's runs,
  and every command under COLT_JAX_TEST_NO_PRELOAD=1.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

PRELOAD = ('numpy', 'jax', 'jax.numpy', 'flax.linen', 'optax')
# Read when the preloaded libraries are imported: one server per set of their values.
_IMPORT_ENV = ('JAX_', 'TF_', 'XLA_PYTHON_', 'PYTHON', 'OMP_', 'OPENBLAS_', 'MKL_')
_EXEMPT = ('PYTHONPATH',)  # applied by the child (its sys.path)
_FORKED_ARGS = {'capture_output', 'text', 'timeout', 'cwd', 'env', 'check'}


def _pythonpath(env) -> list:
  return [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]


def _import_env(env) -> dict:
  return {k: v for k, v in env.items()
          if k.startswith(_IMPORT_ENV) and k not in _EXEMPT}


# ------------------------------------------------------------------------- the server


_SERVER_PYTHONPATH = []  # the server's own PYTHONPATH entries (not its children's)


def _child(request: dict) -> None:
  """In the forked child: runs `python SCRIPT ARGS` (module docstring). The server's loop
  ends after it, and the interpreter exits as it would after SCRIPT."""
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  for fd, path in ((1, request['stdout']), (2, request['stderr'])):
    out = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.dup2(out, fd)
    os.close(out)
  os.close(null)
  os.close(request['reply_fd'])
  signal.signal(signal.SIGINT, signal.default_int_handler)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  script = os.path.abspath(request['argv'][0])
  sys.path[:] = [os.path.dirname(script)] + _pythonpath(request['env']) + [
      p for p in sys.path[1:] if p not in _SERVER_PYTHONPATH]
  sys.argv = list(request['argv'])
  import runpy  # pylint: disable=g-import-not-at-top
  runpy.run_path(script, run_name='__main__')


def serve() -> None:
  """The server's loop: one JSON request a line on stdin, one fork each; replies on the pipe
  whose descriptor is its argument."""
  _SERVER_PYTHONPATH.extend(_pythonpath(os.environ))
  for name in PRELOAD:
    __import__(name)
  reply = int(sys.argv[1])
  os.write(reply, (json.dumps({'ready': threading.active_count() == 1}) + '\n').encode())
  while True:
    line = sys.stdin.buffer.readline()
    if not line:
      return
    request = json.loads(line)
    request['reply_fd'] = reply
    pid = os.fork()
    if pid == 0:
      _child(request)
      raise SystemExit(0)  # the script ended normally (its SystemExit passes through)
    os.write(reply, (json.dumps({'pid': pid}) + '\n').encode())
    _, status = os.waitpid(pid, 0)
    os.write(reply, (json.dumps({'status': os.waitstatus_to_exitcode(status)}) + '\n').encode())


# ------------------------------------------------------------------------- the client


class _Server:
  """This test process's server (started at the first `run`)."""

  def __init__(self, env: dict):
    read, write = os.pipe()
    self.proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(write)], stdin=subprocess.PIPE,
        env=env, pass_fds=(write,))
    os.close(write)
    self.replies, self.buffer = read, b''
    self.lock = threading.Lock()
    ready = self._reply(120)
    self.usable = bool(ready and ready.get('ready'))

  def _reply(self, timeout):
    """The server's next reply; None after `timeout` seconds, EOFError if it is gone."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while b'\n' not in self.buffer:
      left = None if deadline is None else max(0.0, deadline - time.monotonic())
      if not select.select([self.replies], [], [], left)[0]:
        return None
      chunk = os.read(self.replies, 65536)
      if not chunk:
        raise EOFError('the preloaded server ended')
      self.buffer += chunk
    line, self.buffer = self.buffer.split(b'\n', 1)
    return json.loads(line)

  def run(self, argv, cwd, env, timeout):
    with tempfile.TemporaryDirectory(prefix='preloaded_') as tmp:
      paths = [os.path.join(tmp, n) for n in ('stdout', 'stderr')]
      for p in paths:
        open(p, 'wb').close()
      request = {'argv': argv, 'cwd': cwd, 'env': env, 'stdout': paths[0],
                 'stderr': paths[1]}
      self.proc.stdin.write((json.dumps(request) + '\n').encode())
      self.proc.stdin.flush()
      started = self._reply(60)
      if started is None:
        raise RuntimeError(f'the preloaded server did not start {argv[0]} within 60 s')
      pid = started['pid']
      done = self._reply(timeout)
      if done is None:
        os.kill(pid, signal.SIGKILL)
        self._reply(60)
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
      out, err = (open(p, 'rb').read() for p in paths)
    return done['status'], out, err


_SERVERS = {}  # import environment (`_import_env`) -> _Server, or None where it cannot start
_SERVERS_LOCK = threading.Lock()


def _server(env: dict):
  """The server for `env`'s import environment (started at its first command)."""
  key = tuple(sorted(_import_env(env).items()))
  with _SERVERS_LOCK:
    if key not in _SERVERS:
      try:
        server = _Server(env)
      except (OSError, EOFError, ValueError):
        server = None
      if server is not None and not server.usable:
        server.proc.kill()
        server.proc.wait()
        server = None
      _SERVERS[key] = server
    return _SERVERS[key]


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
  """`subprocess.run(cmd, **kwargs)`; `[sys.executable, SCRIPT, *ARGS]` with captured output
  (and no arguments but capture_output, text, timeout, cwd, env and check) is forked from the
  preloaded server (module docstring) instead."""
  cmd = [str(c) for c in cmd]
  env = dict(os.environ if kwargs.get('env') is None else kwargs['env'])
  cwd = os.path.abspath(kwargs.get('cwd') or os.getcwd())
  forkable = (kwargs.get('capture_output') and set(kwargs) <= _FORKED_ARGS
              and len(cmd) >= 2 and cmd[0] == sys.executable and not cmd[1].startswith('-')
              and os.path.isdir(cwd) and not os.environ.get('COLT_JAX_TEST_NO_PRELOAD'))
  server = _server(env) if forkable else None
  if server is None or not server.lock.acquire(blocking=False):
    return subprocess.run(cmd, **kwargs)
  try:
    status, out, err = server.run(cmd[1:], cwd, env, kwargs.get('timeout'))
  finally:
    server.lock.release()
  if kwargs.get('text'):  # as subprocess's text mode: UTF-8 here, universal newlines
    out, err = (b.decode().replace('\r\n', '\n').replace('\r', '\n') for b in (out, err))
  done = subprocess.CompletedProcess(cmd, status, out, err)
  if kwargs.get('check'):
    done.check_returncode()
  return done


if __name__ == '__main__':
  serve()
