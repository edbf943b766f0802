"""Tests of tests/conftest.py's compilation cache folders: what a stopped run leaves is removed
by the next run, by its recorded owner, and nothing else is."""
import json
import os
import subprocess
import sys

import conftest


def _cache(base, name, owner=None):
  path = base / (conftest.CACHE_PREFIX + name)
  path.mkdir()
  (path / 'jit_f-cache').write_bytes(b'x')
  if owner is not None:
    (path / conftest.CACHE_OWNER).write_text(json.dumps(owner))
  return path


def test_stale_caches_of_stopped_runs_are_removed_and_nothing_else(tmp_path, monkeypatch):
  monkeypatch.setattr('tempfile.tempdir', str(tmp_path))
  gone = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True)
  dead = int(gone.stdout)
  me = os.getpid()
  stale = _cache(tmp_path, 'stale', {'pid': dead, 'started': conftest._process_start(me)})
  reused = _cache(tmp_path, 'reused', {'pid': me, 'started': -1})  # pid reused since
  live = _cache(tmp_path, 'live', {'pid': me, 'started': conftest._process_start(me)})
  unrecorded = _cache(tmp_path, 'unrecorded')
  garbled = _cache(tmp_path, 'garbled')
  (garbled / conftest.CACHE_OWNER).write_text('{')
  other = tmp_path / 'someone_elses'
  other.mkdir()
  conftest._remove_stale_caches()
  assert conftest._process_start(dead) is None and conftest._process_start(me) is not None
  assert not stale.exists() and not reused.exists()
  assert live.exists() and unrecorded.exists() and garbled.exists() and other.exists()
