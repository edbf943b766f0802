"""`experiments/serve.py` started on a free 127.0.0.1 port as a child process, for the service's
benchmark, its screenshot and the tests to drive over HTTP.

* `free_port()`, `Service`: `experiments/serve.py` as a child of this process, its output in
  a log file; `Service.start` waits for `GET /healthz`, `Service.stop` sends SIGTERM and
  waits for the exit status (only the child it started is ever signalled).
* `get_json`, `post_json`: one request to it and its parsed answer.
"""
from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional, Sequence

from colt_jax.util.errors import InputError

# The service's main, relative to the working folder (the benchmarks run from the checkout's
# root); `Service(serve=...)` names another.
SERVE = os.path.join('experiments', 'serve.py')
HOST = '127.0.0.1'


def _package_parent() -> str:
  """The folder this process's colt_jax package was imported from."""
  spec = importlib.util.find_spec('colt_jax')
  return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))


def free_port() -> int:
  """A TCP port of 127.0.0.1 that nothing listens on now."""
  with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
    s.bind((HOST, 0))
    return s.getsockname()[1]


def get_json(port: int, path: str, timeout: float = 5.0) -> tuple:
  """(status, parsed JSON body or None) of `GET path` on 127.0.0.1:port."""
  conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
  try:
    conn.request('GET', path, headers={'Accept': 'application/json'})
    response = conn.getresponse()
    body = response.read()
  finally:
    conn.close()
  try:
    return response.status, json.loads(body)
  except ValueError:
    return response.status, None


def post_json(port: int, path: str, payload: dict, timeout: float = 60.0) -> tuple:
  """(status, parsed JSON body) of `POST path` with a JSON body on 127.0.0.1:port."""
  conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
  try:
    conn.request('POST', path, body=json.dumps(payload).encode(),
                 headers={'Content-Type': 'application/json'})
    response = conn.getresponse()
    body = response.read()
  finally:
    conn.close()
  return response.status, json.loads(body)


class Service:
  """`experiments/serve.py --store STORE --model MODEL ... --host 127.0.0.1 --port PORT` as
  a child process; its stdout and stderr go to `log_path`."""

  def __init__(self, store: str, model: str, log_path: str, extra_args: Sequence[str] = (),
               port: Optional[int] = None, env: Optional[dict] = None, serve: str = SERVE):
    self.port = port or free_port()
    self.log_path = log_path
    self.args = [sys.executable, os.path.abspath(serve), '--store', store, '--model', model,
                 '--host', HOST, '--port', str(self.port), *extra_args]
    self.env = dict(os.environ if env is None else env)
    # The child imports the colt_jax this process imports (the folder it was found in).
    self.env['PYTHONPATH'] = os.pathsep.join(
        [_package_parent()]
        + [p for p in self.env.get('PYTHONPATH', '').split(os.pathsep) if p])
    self.process: Optional[subprocess.Popen] = None
    self.exit_status: Optional[int] = None
    self.stop_seconds: Optional[float] = None

  @property
  def url(self) -> str:
    return f'http://{HOST}:{self.port}'

  def log_tail(self, lines: int = 15) -> str:
    try:
      with open(self.log_path, encoding='utf-8', errors='replace') as f:
        return ''.join(f.readlines()[-lines:]).rstrip()
    except OSError:
      return ''

  def start(self, timeout: float = 600.0) -> dict:
    """Starts the child and waits until `GET /healthz` answers 200; returns that answer.
    Raises `InputError` (with the log's last lines) when the child exits or the time runs
    out first."""
    os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
    log = open(self.log_path, 'wb')  # pylint: disable=consider-using-with
    try:
      self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=self.env)
    finally:
      log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if self.process.poll() is not None:
        raise InputError(f'experiments/serve.py exited with status {self.process.returncode} '
                         f'before answering /healthz; its log {self.log_path} ends:\n'
                         f'{self.log_tail()}')
      try:
        status, body = get_json(self.port, '/healthz', timeout=2.0)
        if status == 200:
          return body or {}
      except OSError:
        pass
      time.sleep(0.25)
    self.stop()
    raise InputError(f'experiments/serve.py did not answer /healthz within {timeout:.0f} s '
                     f'(--start_timeout); its log {self.log_path} ends:\n{self.log_tail()}')

  def stop(self, timeout: float = 60.0) -> Optional[int]:
    """SIGTERM to the child, then waits for it (SIGKILL after `timeout`); its exit status."""
    if self.process is None or self.exit_status is not None:
      return self.exit_status
    t0 = time.perf_counter()
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGTERM)
      try:
        self.process.wait(timeout)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    self.stop_seconds = time.perf_counter() - t0
    self.exit_status = self.process.returncode
    return self.exit_status

  def __enter__(self) -> 'Service':
    return self

  def __exit__(self, *exc) -> None:
    self.stop()
