"""Orbax checkpoints of a training run, and their faults as one-line errors.

* A checkpoint that cannot be read (a missing or truncated file) is an `InputError` naming its
  folder and the file; on resume the newest intact step is used (damaged newer ones are moved
  aside to `<step>.damaged` with one warning line), and none intact is refused in one line.
* A checkpoint that cannot be written (a read-only folder, ...) raises `CheckpointWriteError`
  naming the folder and the last good step, a full disk `diskspace.DiskFullError` naming the
  step's folder and the free space; the partial write is removed. Saves are synchronous so
  that the error surfaces at the save.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
from typing import Any, Mapping, Optional

import jax

from colt_jax.util import atomic
from colt_jax.util import diskspace
from colt_jax.util.errors import InputError

_STATUS = {'NOT_FOUND': 'missing', 'OUT_OF_RANGE': 'truncated', 'DATA_LOSS': 'corrupt',
           'FAILED_PRECONDITION': 'corrupt', 'INVALID_ARGUMENT': 'corrupt'}


def _ocp():
  """orbax.checkpoint, imported on first use: a sixth of a command line's start-up (0.17 s of
  about 1.2 s), spent for nothing by the runs that touch no checkpoint (a refused flag, a
  baseline's evaluation)."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return ocp


class WriteError(InputError):
  """A file of a training run could not be written (disk full, read-only folder, ...): a fault
  of the environment that the user fixes, not of colt_jax, so it is reported in one line with
  exit status 2 like bad input."""


class CheckpointWriteError(WriteError):
  """A checkpoint could not be written; the message names the folder and the last good step."""


def _cause(e: BaseException, folder: str = '') -> str:
  """A short one-line cause of an OS, JSON, orbax or tensorstore error; paths inside
  `folder` relative to it."""
  if isinstance(e, OSError) and e.strerror:
    text = e.strerror + (f': {e.filename}' if e.filename else '')
  else:
    text = ' '.join(str(e).split()) or type(e).__name__
    text = re.sub(r'\s*\[tensorstore_spec=.*$', '', text)
    code = re.match(r'([A-Z_]+): ', text)
    files = re.findall(r'local file "([^"]+)"', text)
    if code and files:  # tensorstore: name the file it could not read
      name, status = files[-1], _STATUS.get(code.group(1), code.group(1).lower())
      text = (f'a data file under {name} is {status}' if name.endswith('/') else
              f'{name} is {status}')
      os_error = re.search(r': ([^:\[]+) \[os_error_code', str(e))
      if os_error:
        text = f'{name}: {os_error.group(1).strip()}'
    elif isinstance(e, json.JSONDecodeError):
      text = f'malformed JSON ({e.msg})'
  if folder:
    text = text.replace(folder.rstrip(os.sep) + os.sep, '').replace(folder, '.')
  return text[:300]


def _damage(step_dir: str, e: BaseException) -> str:
  """Why the checkpoint in `step_dir` cannot be read: the first unreadable metadata file
  (orbax does not name it), else the error's own cause."""
  if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
    for root, _, files in sorted(os.walk(step_dir)):
      for name in sorted(files):
        if name in ('_METADATA', 'metadata', '_sharding'):
          p = os.path.join(root, name)
          try:
            with open(p) as f:
              json.load(f)
          except (OSError, ValueError):
            return f'{os.path.relpath(p, step_dir)} is truncated or malformed'
  return _cause(e, step_dir)


_quiet = False


def _tensorstore_error(exc: Any) -> bool:
  return isinstance(exc, ValueError) and re.match(r'[A-Z_]+: ', str(exc)) is not None


class _AbandonedReads(logging.Filter):
  """Drops asyncio's 'Task (or Future) exception was never retrieved' of a tensorstore read."""

  def filter(self, record):
    exc = record.exc_info[1] if record.exc_info else None
    return not (re.match(r'(Task|Future) exception was never retrieved', str(record.msg)) and
                _tensorstore_error(exc))


def _quiet_abandoned_reads() -> None:
  """After one read (or write: a full disk) of a checkpoint fails, orbax stops waiting for the
  others; tensorstore still completes them and calls back into orbax's event loop, closed by
  then. Python would print each as a traceback on stderr ('Event loop is closed', or 'Task
  (Future) exception was never retrieved' when the task or future is collected): only those
  are dropped. Installed before a checkpoint is read or written, not once one has failed: an
  abandoned read can be collected, and printed, before the failure reaches the handler that
  reports it in one line."""
  global _quiet
  if _quiet:
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    exc = unraisable.exc_value
    if isinstance(exc, RuntimeError) and str(exc) == 'Event loop is closed':
      return
    previous(unraisable)

  sys.unraisablehook = hook
  previous_excepthook = sys.excepthook

  def excepthook(kind, value, tb):  # tensorstore's callback thread prints through this one
    if (threading.current_thread() is not threading.main_thread()
        and _loop_closed_in_callback(value, tb)):
      return
    previous_excepthook(kind, value, tb)

  sys.excepthook = excepthook
  logging.getLogger('asyncio').addFilter(_AbandonedReads())
  _quiet = True


def _loop_closed_in_callback(value: BaseException, tb: Any) -> bool:
  """Whether an error is asyncio's 'Event loop is closed' raised by a call into the loop
  from outside it (`call_soon_threadsafe`): a completed read calling back into orbax's loop."""
  if not (isinstance(value, RuntimeError) and str(value) == 'Event loop is closed'):
    return False
  names = []
  while tb is not None:
    names.append(tb.tb_frame.f_code.co_name)
    tb = tb.tb_next
  return 'call_soon_threadsafe' in names


class Checkpointer:
  """orbax `CheckpointManager` over `<workdir>/checkpoints`: state + the run's config.

  Saves are synchronous: a failed write raises `CheckpointWriteError` (a full disk
  `diskspace.DiskFullError`) at the save."""

  def __init__(self, directory: str, max_to_keep: int = 3):
    self.directory = os.path.abspath(directory)
    self._failed: Optional[int] = None  # the step whose save failed
    _quiet_abandoned_reads()  # a failed save abandons writes the same way
    ocp = _ocp()
    self.manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
            cleanup_tmp_directories=True))

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, config: Mapping[str, Any]) -> None:
    try:
      args = _ocp().args
      # A Ctrl-C or SIGTERM waits for the save (orbax's threads write while the main thread
      # waits; unwinding then left half a step behind and their tracebacks).
      with atomic.signals_deferred():
        self.manager.save(step, args=args.Composite(
            state=args.StandardSave(state), config=args.JsonSave(dict(config))))
        self.manager.wait_until_finished()
    except (OSError, ValueError) as e:
      if isinstance(e, ValueError) and not _tensorstore_error(e):
        raise  # not an I/O error of tensorstore: a bug
      self._discard_partial(step)
      self._failed = step
      last = self.manager.latest_step()
      kept = f'the last good checkpoint is step {last}' if last is not None else (
          'no checkpoint was saved before')
      if diskspace.is_full(e):
        raise diskspace.error(e, os.path.join(self.directory, str(step)),
                              f'; training stopped, {kept}') from None
      raise CheckpointWriteError(f'{self.directory}: cannot write the checkpoint of step '
                                 f'{step} ({_cause(e)}); training stopped, {kept}') from None
    except BaseException:  # stopped mid-save (Ctrl-C, SIGTERM): no half-written step left
      self._discard_partial(step)
      raise

  def _discard_partial(self, step: int) -> None:
    """Removes what a failed save of `step` left (orbax's temporary folder)."""
    if not os.path.isdir(self.directory):
      return
    for name in os.listdir(self.directory):
      if name.startswith(f'{step}.orbax-checkpoint-tmp'):
        shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

  def restore(self, template: Any, step: Optional[int] = None) -> Any:
    step = self.latest_step() if step is None else step
    args = _ocp().args
    out = self.manager.restore(step, args=args.Composite(state=args.StandardRestore(template)))
    return out.state

  def restore_intact(self, template: Any, set_aside: bool = True) -> tuple:
    """(state, [(damaged step, cause, where it went)]) from the newest checkpoint that can be
    read; the newer damaged ones are moved aside to `<step>.damaged` (when `set_aside`, else
    where = ''). None intact: an `InputError` naming each step and its cause."""
    damaged = []
    _quiet_abandoned_reads()
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        state = self.restore(template, step)
      except (KeyboardInterrupt, SystemExit):
        raise
      except Exception as e:  # pylint: disable=broad-except
        damaged.append((step, _damage(os.path.join(self.directory, str(step)), e)))
        continue
      damaged = [(bad, cause, os.path.basename(self._set_aside(bad)) if set_aside else '')
                 for bad, cause in damaged]
      if damaged:
        self.manager.reload()
      return state, damaged
    causes = '; '.join(f'step {s}: {c}' for s, c in damaged)
    raise InputError(f'{self.directory}: no intact checkpoint to resume from ({causes}); '
                     '--noresume starts over')

  def _set_aside(self, step: int) -> str:
    src = os.path.join(self.directory, str(step))
    dst, n = f'{src}.damaged', 1
    while os.path.exists(dst):
      dst, n = f'{src}.damaged-{n}', n + 1
    try:
      os.rename(src, dst)
    except OSError as e:
      raise InputError(f'{src}: a damaged checkpoint that cannot be moved aside '
                       f'({_cause(e)}); delete it, or --noresume to start over') from None
    return dst

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.close()
    if self._failed is not None:  # what the writes abandoned at the failure left since
      self._discard_partial(self._failed)


def restore_checkpoint(path: str, step: Optional[int] = None) -> tuple:
  """(state as nested dicts of numpy arrays, config dict) from a trainer's workdir or its
  `checkpoints` directory; the latest step unless `step` is given. A checkpoint that cannot
  be read (a missing or truncated file) is an `InputError` naming the folder and the file."""
  directory = path
  if os.path.isdir(os.path.join(path, 'checkpoints')):
    directory = os.path.join(path, 'checkpoints')
  if not os.path.isdir(directory):
    raise InputError(f'{path}: no such checkpoint folder (a trainer\'s --workdir)')
  ocp = _ocp()
  manager = ocp.CheckpointManager(os.path.abspath(directory))
  try:
    steps = manager.all_steps()
    if not steps:
      raise InputError(f'{directory}: no checkpoint saved yet (not a trainer\'s --workdir?)')
    if step is not None and step not in steps:
      raise InputError(f'{directory}: no checkpoint at step {step} (saved: {sorted(steps)})')
    step = manager.latest_step() if step is None else step
    _quiet_abandoned_reads()
    try:
      out = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                          config=ocp.args.JsonRestore()))
    except Exception as e:  # pylint: disable=broad-except
      cause = _damage(os.path.join(os.path.abspath(directory), str(step)), e)
      raise InputError(f'{directory}: the checkpoint of step {step} cannot be read ({cause})'
                       ) from None
    if not isinstance(out.config, Mapping):
      raise InputError(f'{directory}: the checkpoint of step {step} has no saved config')
    return jax.device_get(out.state), dict(out.config)
  finally:
    manager.close()


def weights_digest(workdir: str) -> str:
  """A SHA-256 of every file under `workdir`/checkpoints (relative paths and bytes, in sorted
  order): equal digests mean the same trained weights, whatever the folder's name or dates.
  Recorded with each result (colt_jax/reproduction/stages.py) so that rows said to share a training can
  be checked to have read the same one. 'none' when the folder holds no checkpoints."""
  root = os.path.join(workdir, 'checkpoints')
  if not os.path.isdir(root):
    return 'none'
  digest = hashlib.sha256()
  for folder, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(files):
      path = os.path.join(folder, name)
      digest.update(os.path.relpath(path, root).encode() + b'\0')
      with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
          digest.update(block)
  return digest.hexdigest()[:16]
