"""Real servers for tests: the service in a thread (`ThreadedServer`) or serve.py in a
process (`start_serve`), each on a free port (`free_port`)."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import uvicorn

from checkout import REPO  # pylint: disable=g-bad-import-order


class ThreadedServer:
  """A real uvicorn server of `app` over the HTTP protocol `http` (`protocol.configured`) in a
  thread, on a free 127.0.0.1 port, for a `with` block."""

  def __init__(self, app, http, **config):
    self.port = free_port()
    self.server = uvicorn.Server(uvicorn.Config(app, host='127.0.0.1', port=self.port,
                                                log_level='critical', http=http, **config))
    self.thread = threading.Thread(target=self.server.run, daemon=True)

  def __enter__(self):
    self.thread.start()
    deadline = time.monotonic() + 120
    while not self.server.started:
      assert self.thread.is_alive() and time.monotonic() < deadline, 'the server did not start'
      threading.Event().wait(0.01)
    return self

  def __exit__(self, *_):
    self.server.should_exit = True
    self.thread.join(30)


def free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def serve_command(*args):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return [sys.executable, os.path.join(REPO, 'experiments', 'serve.py'), *map(str, args)], env


def start_serve(log_path, *args):
  """`serve.py ARGS --port P` started on a free port P, its output in `log_path`, once its
  /healthz answers (within 240 s): (the process, its URL, /healthz's answer)."""
  port = free_port()
  cmd, env = serve_command(*args, '--port', port)
  with open(log_path, 'w') as log:
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
  url = f'http://127.0.0.1:{port}'
  deadline = time.time() + 240
  while True:
    if proc.poll() is not None or time.time() > deadline:
      proc.kill()
      raise AssertionError(open(log_path).read()[-3000:])
    try:
      with urllib.request.urlopen(url + '/healthz', timeout=2) as r:
        return proc, url, json.load(r)
    except OSError:
      time.sleep(0.5)
