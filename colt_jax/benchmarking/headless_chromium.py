"""Debian's Chromium, headless, with everything it writes kept in a temporary folder.

Chromium keeps its settings, disk cache and crash reports under the user's XDG folders:
~/.config/chromium, ~/.config/chromium-headless, ~/.cache/dconf and, for every run, a
`~/.cache/chromium-headless/scoped_dir*` cache that it leaves behind, even with a temporary
profile (Playwright's). `private_env()` points XDG_CONFIG_HOME and XDG_CACHE_HOME at a
temporary folder of its own and removes that folder afterwards, so a screenshot
(benchmarks/service_screenshot.py) or a test leaves nothing in the user's home.

    with headless_chromium.private_env() as env:
      subprocess.run([CHROMIUM, *ARGS, '--screenshot=shot.png', url], env=env)
      # or: sync_playwright().chromium.launch(executable_path=CHROMIUM, args=ARGS, env=env)
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator, Mapping, Optional

CHROMIUM = '/usr/bin/chromium'
ARGS = ('--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync')


@contextlib.contextmanager
def private_env(base: Optional[Mapping[str, str]] = None) -> Iterator[dict]:
  """The environment to start Chromium in (`base`, default os.environ, with its XDG config
  and cache folders in a new temporary folder), removed when the block ends."""
  folder = tempfile.mkdtemp(prefix='colt_jax_chromium_')
  try:
    env = dict(os.environ if base is None else base)
    env['XDG_CONFIG_HOME'] = os.path.join(folder, 'config')
    env['XDG_CACHE_HOME'] = os.path.join(folder, 'cache')
    yield env
  finally:
    shutil.rmtree(folder, ignore_errors=True)
