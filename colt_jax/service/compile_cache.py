"""JAX's persistent compilation cache for the service: a second start of `serve.py` loads the
warm-up's programs from disk instead of compiling them again (docs/SERVICE.md, "Start-up").

The cache is a folder colt_jax owns (default `default_dir()`: `$XDG_CACHE_HOME/colt_jax/
compilation-cache`, else `~/.cache/colt_jax/compilation-cache`; `--compilation_cache_dir`; a
JAX_COMPILATION_CACHE_DIR of the environment is JAX's own, left as it is: `configure`):
its manifest (`colt_jax.util.outputs`) records it as `WHAT`, and JAX writes its entries in
the tree `TREE` inside it. Every program is cached (no minimum compile time or size): the
service's programs each compile in about a second, under JAX's default threshold.

The cache never stops the service from starting or serving (`enable` returns what it did, one
line for the log):

* a folder colt_jax did not create (not empty, no manifest) given by the flag is refused (one
  line naming it, as every other output folder); at the default place it is left alone and the
  service runs without the cache;
* a folder that is not writable (read-only, another user's) is read, and nothing is written
  (JAX's warning per unwritten entry silenced: the one line says it);
* a write that fails (a full disk) is JAX's warning and no entry: the program was compiled and
  serves as it would without a cache; an entry that cannot be read is compiled again.
"""
from __future__ import annotations

import os
import threading
import warnings
from typing import Optional

import jax
from jax import monitoring
from jax._src import compilation_cache as jax_cache  # reset_cache: the dir is read once

from colt_jax.util import outputs
from colt_jax.util.errors import InputError
from colt_jax.util.manifest import Manifest

WHAT = 'a JAX compilation cache'
TREE = 'jax'
# One per program JAX loads from the persistent cache instead of compiling it.
HIT_EVENT = '/jax/compilation_cache/cache_hits'
_UNWRITTEN = r'Error writing persistent compilation cache entry'


def default_dir() -> str:
  """Where the service's cache lives unless told: the user's cache folder (XDG)."""
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'colt_jax', 'compilation-cache')


def configure(flag_dir: Optional[str], use: bool = True) -> str:
  """serve.py's flags: off (`use` False), the folder named (`flag_dir`), else one that the
  environment names for JAX (JAX_COMPILATION_CACHE_DIR, left as JAX reads it), else
  `default_dir()`. Returns `enable`'s line."""
  if not use:
    return enable(None, explicit=False)
  if flag_dir is not None:
    return enable(flag_dir, explicit=True)
  env = os.environ.get('JAX_COMPILATION_CACHE_DIR')
  if env:
    return f'compilation cache {env} (JAX_COMPILATION_CACHE_DIR)'
  return enable(default_dir(), explicit=False)


def _ours(path: str) -> bool:
  try:
    manifest = Manifest.load(path)
  except InputError:
    return False
  return manifest is not None and manifest.what == WHAT and TREE in manifest.trees


def enable(path: Optional[str], *, explicit: bool, flag: str = '--compilation_cache_dir') -> str:
  """Points JAX's persistent cache at `path`'s tree (before the process's first compilation
  counts; a cache set earlier is replaced). `path` None or '': off. `explicit`: the user named
  `path` (a foreign folder is then an InputError, else the cache is off). Returns one line
  saying what the cache does."""
  if not path:
    _configure(None)
    return 'compilation cache off'
  path = os.path.abspath(os.path.expanduser(path))
  tree = os.path.join(path, TREE)
  try:
    if os.path.isdir(tree) and _ours(path) and not os.access(tree, os.W_OK | os.X_OK):
      raise OSError(f'{tree} is not writable')
    outputs.claim_dir(path, WHAT, trees=[TREE], flag=flag if explicit else '')
    os.makedirs(tree, exist_ok=True)
  except (InputError, OSError) as e:
    if os.path.isdir(tree) and _ours(path):
      _configure(tree)
      warnings.filterwarnings('ignore', message=_UNWRITTEN)
      return f'compilation cache {path}: read only (new programs are not saved: {e})'
    if explicit and isinstance(e, InputError) and 'refusing' in str(e):
      raise
    _configure(None)
    return f'compilation cache off: {e}'
  _configure(tree)
  return f'compilation cache {path}'


def _configure(tree: Optional[str]) -> None:
  jax.config.update('jax_compilation_cache_dir', tree)
  if tree:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)  # -1: every entry
  jax_cache.reset_cache()


class HitCounter:
  """Counts programs loaded from the persistent cache in this process while active; of them,
  `background`: those of the threads marked by `mark_background` (as
  `prometheus_metrics.CompileCounter`)."""

  def __init__(self):
    self.count = 0
    self.background = 0
    self.background_threads = set()
    self._lock = threading.Lock()
    self._active = False

  def mark_background(self) -> None:
    self.background_threads.add(threading.get_ident())

  def _listener(self, event: str, **kwargs) -> None:
    del kwargs
    if event == HIT_EVENT:
      with self._lock:
        self.count += 1
        if threading.get_ident() in self.background_threads:
          self.background += 1

  def start(self) -> 'HitCounter':
    if not self._active:
      monitoring.register_event_listener(self._listener)
      self._active = True
    return self

  def stop(self) -> None:
    if self._active:
      monitoring.unregister_event_listener(self._listener)
      self._active = False
