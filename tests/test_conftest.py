"""Tests of tests/conftest.py's compilation cache folders: what a stopped run leaves is removed
by the next run, by its recorded owner, and nothing else is."""
import json
import os
import subprocess
import sys

import pytest

ROOT_CONFTEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'conftest.py')


@pytest.fixture
def conftest(pytestconfig):
  """tests/conftest.py as pytest loaded it (`import conftest` may find a folder's own)."""
  found = [m for m in pytestconfig.pluginmanager.get_plugins()
           if os.path.abspath(getattr(m, '__file__', '') or '') == ROOT_CONFTEST]
  assert len(found) == 1, found
  return found[0]


def _cache(conftest, base, name, owner=None):
  path = base / (conftest.CACHE_PREFIX + name)
  path.mkdir()
  (path / 'jit_f-cache').write_bytes(b'x')
  if owner is not None:
    (path / conftest.CACHE_OWNER).write_text(json.dumps(owner))
  return path


def test_stale_caches_of_stopped_runs_are_removed_and_nothing_else(conftest, tmp_path,
                                                                  monkeypatch):
  monkeypatch.setattr('tempfile.tempdir', str(tmp_path))
  gone = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True)
  dead = int(gone.stdout)
  me = os.getpid()
  stale = _cache(conftest, tmp_path, 'stale', {'pid': dead, 'started': conftest._process_start(me)})
  reused = _cache(conftest, tmp_path, 'reused', {'pid': me, 'started': -1})  # pid reused since
  live = _cache(conftest, tmp_path, 'live', {'pid': me, 'started': conftest._process_start(me)})
  unrecorded = _cache(conftest, tmp_path, 'unrecorded')
  garbled = _cache(conftest, tmp_path, 'garbled')
  (garbled / conftest.CACHE_OWNER).write_text('{')
  other = tmp_path / 'someone_elses'
  other.mkdir()
  conftest._remove_stale_caches()
  assert conftest._process_start(dead) is None and conftest._process_start(me) is not None
  assert not stale.exists() and not reused.exists()
  assert live.exists() and unrecorded.exists() and garbled.exists() and other.exists()
