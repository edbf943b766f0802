"""Tests of colt_jax/benchmarking/headless_chromium.py: Chromium leaves nothing in the user's home."""
import os
import subprocess

import pytest

from colt_jax.benchmarking import headless_chromium


def test_private_env_keeps_chromium_out_of_the_home_folder(tmp_path):
  if not os.path.exists(headless_chromium.CHROMIUM):
    pytest.skip(f'no browser: {headless_chromium.CHROMIUM} is missing (apt-get install -y '
                'chromium)')
  home = tmp_path / 'home'
  home.mkdir()
  base = {k: v for k, v in os.environ.items() if not k.startswith('XDG_')}
  base['HOME'] = str(home)
  page, shot = tmp_path / 'page.html', tmp_path / 'shot.png'
  page.write_text('<html><body><h1>colt_jax</h1></body></html>')
  with headless_chromium.private_env(base) as env:
    folder = os.path.dirname(env['XDG_CONFIG_HOME'])
    assert env['HOME'] == str(home) and env['XDG_CACHE_HOME'].startswith(folder)
    run = subprocess.run([headless_chromium.CHROMIUM, *headless_chromium.ARGS,
                          '--window-size=300,200', f'--screenshot={shot}', page.as_uri()],
                         capture_output=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert os.listdir(folder)  # what Chromium wrote went here
  assert shot.stat().st_size > 0
  assert not {'.cache', '.config'} & set(os.listdir(home))
  assert not os.path.exists(folder)  # and is gone
  # Without it, the same run writes its settings and caches into the home folder.
  run = subprocess.run([headless_chromium.CHROMIUM, *headless_chromium.ARGS,
                        f'--screenshot={shot}', page.as_uri()], capture_output=True,
                       timeout=120, env=base, cwd=tmp_path)
  assert run.returncode == 0 and {'.cache', '.config'} <= set(os.listdir(home))
