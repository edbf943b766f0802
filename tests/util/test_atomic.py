"""Tests of the atomic writers (colt_jax/util/atomic.py)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from colt_jax.util import atomic
from checkout import REPO  # pylint: disable=g-bad-import-order



def test_write_json_replaces_and_leaves_no_temporary(tmp_path):
  out = tmp_path / 'sub' / 'perf.json'
  atomic.write_json(str(out), {'a': 1})
  atomic.write_json(str(out), {'a': 2, 'b': [1.5]})
  assert json.loads(out.read_text()) == {'a': 2, 'b': [1.5]}
  assert os.listdir(out.parent) == ['perf.json']
  atomic.write_json(out, {'n': np.int64(3), 'x': np.float32(0.5), 'v': np.arange(2)})
  assert json.loads(out.read_text()) == {'n': 3, 'x': 0.5, 'v': [0, 1]}


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
  out = tmp_path / 'r.json'
  atomic.write_json(out, {'a': 1})
  with pytest.raises(TypeError, match='not JSON serialisable'):
    atomic.write_json(out, {'a': object()})

  def interrupted(*_):
    raise KeyboardInterrupt

  monkeypatch.setattr(os, 'replace', interrupted)  # killed between writing and renaming
  with pytest.raises(KeyboardInterrupt):
    atomic.write_json(out, {'a': 2})
  monkeypatch.undo()
  assert json.loads(out.read_text()) == {'a': 1}
  assert os.listdir(tmp_path) == ['r.json']


def test_files_get_the_umask_mode_not_a_private_one(tmp_path):
  out = tmp_path / 'doc.md'
  atomic.write_text(out, 'héllo\n')
  mask = os.umask(0)
  os.umask(mask)
  assert (os.stat(out).st_mode & 0o777) == (0o666 & ~mask)
  assert out.read_text(encoding='utf-8') == 'héllo\n'


@pytest.mark.parametrize('obj,key', [
    ({'a': {'b': [1.0, float('nan')]}}, r'a.b\[1\]'),
    ({'x': np.float32('inf')}, 'x'),
    ({'v': np.array([[0.0, 1.0], [-np.inf, 2.0]])}, r'v\[1, 0\]'),
    ([float('-inf')], r'\[0\]'),
])
def test_write_json_refuses_nan_and_infinity(tmp_path, obj, key):
  out = tmp_path / 'r.json'
  atomic.write_json(out, {'a': 1})
  with pytest.raises(ValueError, match=f'r.json: {key} is not a finite number'):
    atomic.write_json(out, obj)
  with pytest.raises(ValueError):
    atomic.write_json(out, obj, allow_nan=True)  # cannot be switched back on
  assert json.loads(out.read_text()) == {'a': 1}
  assert os.listdir(tmp_path) == ['r.json']


def test_signals_deferred_holds_sigterm_and_ctrl_c_until_the_block_ends(tmp_path):
  """A SIGTERM or Ctrl-C during the renames of a folder swap (outputs.replace_dir) takes
  effect after them (a fresh process: its main thread handles signals)."""
  program = textwrap.dedent('''
      import os, signal
      import numpy  # its threads leave the signals unblocked: the kernel may pick them
      from colt_jax.util import atomic
      seen = []
      for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: seen.append(number))
      with atomic.signals_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100000))  # bytecode at which a handler would otherwise run
        print(len(seen))
      print(sorted(seen) == sorted([signal.SIGTERM, signal.SIGINT]))
  ''')
  run = subprocess.run([sys.executable, '-c', program], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.split() == ['0', 'True']
