"""The data-parallel training loop shared by both trainers: pmap, orbax, logs, progress.

A run is a pure function of (config, seed): the batch of step s is `make_batch(s)`, the step's
key is fold_in(state.rng, s), and the whole state (params, optimiser state, bank, step, key) is
checkpointed. So `resume=True` after a crash or kill continues from the latest checkpoint and
ends with exactly the parameters of an uninterrupted run.

Checkpoint faults are bad input or a clean fallback, never a traceback:
* a checkpoint that cannot be read (a missing or truncated file) is an `InputError` naming its
  folder and the file; resuming skips it (moved aside to `<step>.damaged`, one warning line)
  for the newest intact one, and refuses in one line when none is intact;
* a checkpoint that cannot be written (disk full, read-only folder) stops training at once
  with a `CheckpointWriteError` naming the folder (exit 2: the environment is at fault, and the
  user can fix it); the partial write is removed and the last good checkpoint kept. Saves are
  synchronous so that the error surfaces at the save, not steps later in a background thread;
* a run's identity on resume ignores its own folder: a copied or moved workdir resumes.
"""
from __future__ import annotations

import json
import logging as pylogging
import os
import re
import shutil
import sys
import time
from typing import Any, Callable, Mapping, Optional

from absl import logging
import jax
import orbax.checkpoint as ocp
import tqdm

from colt_jax import atomic
from colt_jax import devices as devices_lib
from colt_jax import distributed
from colt_jax import outputs
from colt_jax.errors import InputError
from colt_jax.models import count_params

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.jsonl'
TENSORBOARD_DIR = 'tensorboard'
# Fields that may change when a run is resumed (they do not change what a step computes).
RESUMABLE_CHANGES = frozenset({'num_steps', 'checkpoint_every', 'log_every', 'max_to_keep'})


_STATUS = {'NOT_FOUND': 'missing', 'OUT_OF_RANGE': 'truncated', 'DATA_LOSS': 'corrupt',
           'FAILED_PRECONDITION': 'corrupt', 'INVALID_ARGUMENT': 'corrupt'}


class WriteError(InputError):
  """A file of a training run could not be written (disk full, read-only folder, ...): a fault
  of the environment that the user fixes, not of colt_jax, so it is reported in one line with
  exit status 2 like bad input."""


class CheckpointWriteError(WriteError):
  """A checkpoint could not be written; the message names the folder and the last good step."""


def _inside(value: Any, workdir: str) -> Any:
  """`value` with a path inside `workdir` made relative to it (`<workdir>/...`)."""
  if not isinstance(value, str) or not value or not workdir:
    return value
  v, w = os.path.normpath(value), os.path.normpath(workdir)
  if v == w:
    return '<workdir>'
  if v.startswith(w.rstrip(os.sep) + os.sep):
    return '<workdir>/' + os.path.relpath(v, w).replace(os.sep, '/')
  return value


def run_identity(config: Mapping[str, Any], workdir: str = '') -> dict:
  """The fields of a run's config that decide what its steps compute: not the resumable ones,
  not the run's own folder (`workdir`), and paths inside that folder relative to it, so that
  a copied or moved workdir is the same run."""
  workdir = config.get('workdir') or workdir
  return {k: _inside(v, workdir) for k, v in config.items()
          if k not in RESUMABLE_CHANGES and k != 'workdir'}


def check_resumable(workdir: str, config: Mapping[str, Any]) -> None:
  """Refuses to resume a run whose saved config differs from `config` in a field that
  changes the computation (so a changed flagfile never silently continues an old run). The
  workdir's own path is no part of it (`run_identity`)."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(path):
    return
  try:
    with open(path) as f:
      saved = json.load(f)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise InputError(f'{path}: cannot read the saved configuration ({_cause(e)}); use a new '
                     '--workdir, or --noresume to start over') from None
  if not isinstance(saved, dict):
    raise InputError(f'{path}: not a saved configuration (a JSON object); use a new '
                     '--workdir, or --noresume to start over')
  old, new = run_identity(saved, workdir), run_identity(config, workdir)
  changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
  if changed:
    diff = ', '.join(f'{k}: {saved.get(k)!r} -> {config.get(k)!r}' for k in changed)
    raise InputError(f'{workdir} holds a run with another configuration ({diff}); use a new '
                     '--workdir, or --noresume to start over')


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


class _AbandonedReads(pylogging.Filter):
  """Drops asyncio's 'Task exception was never retrieved' of a tensorstore read."""

  def filter(self, record):
    exc = record.exc_info[1] if record.exc_info else None
    return not (str(record.msg).startswith('Task exception was never retrieved') and
                _tensorstore_error(exc))


def _quiet_abandoned_reads() -> None:
  """After one read of a checkpoint fails, orbax stops waiting for the others; tensorstore
  still completes them and calls back into orbax's event loop, closed by then. Python would
  print each as a traceback on stderr ('Event loop is closed', or 'Task exception was never
  retrieved' when the task is collected): only those are dropped, once a read has failed."""
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
  pylogging.getLogger('asyncio').addFilter(_AbandonedReads())
  _quiet = True


class Checkpointer:
  """orbax `CheckpointManager` over `<workdir>/checkpoints`: state + the run's config.

  Saves are synchronous: a failed write raises `CheckpointWriteError` at the save."""

  def __init__(self, directory: str, max_to_keep: int = 3):
    self.directory = os.path.abspath(directory)
    self.manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
            cleanup_tmp_directories=True))

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, config: Mapping[str, Any]) -> None:
    try:
      self.manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), config=ocp.args.JsonSave(dict(config))))
      self.manager.wait_until_finished()
    except (OSError, ValueError) as e:
      if isinstance(e, ValueError) and not _tensorstore_error(e):
        raise  # not an I/O error of tensorstore: a bug
      self._discard_partial(step)
      last = self.manager.latest_step()
      kept = f'the last good checkpoint is step {last}' if last is not None else (
          'no checkpoint was saved before')
      raise CheckpointWriteError(f'{self.directory}: cannot write the checkpoint of step '
                                 f'{step} ({_cause(e)}); training stopped, {kept}') from None

  def _discard_partial(self, step: int) -> None:
    """Removes what a failed save of `step` left (orbax's temporary folder)."""
    if not os.path.isdir(self.directory):
      return
    for name in os.listdir(self.directory):
      if name.startswith(f'{step}.orbax-checkpoint-tmp'):
        shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

  def restore(self, template: Any, step: Optional[int] = None) -> Any:
    step = self.latest_step() if step is None else step
    out = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(template)))
    return out.state

  def restore_intact(self, template: Any, set_aside: bool = True) -> tuple:
    """(state, [(damaged step, cause, where it went)]) from the newest checkpoint that can be
    read; the newer damaged ones are moved aside to `<step>.damaged` (when `set_aside`, else
    where = ''). None intact: an `InputError` naming each step and its cause."""
    damaged = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        state = self.restore(template, step)
      except (KeyboardInterrupt, SystemExit):
        raise
      except Exception as e:  # pylint: disable=broad-except
        _quiet_abandoned_reads()
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


def restore_checkpoint(path: str, step: Optional[int] = None) -> tuple:
  """(state as nested dicts of numpy arrays, config dict) from a trainer's workdir or its
  `checkpoints` directory; the latest step unless `step` is given. A checkpoint that cannot
  be read (a missing or truncated file) is an `InputError` naming the folder and the file."""
  directory = path
  if os.path.isdir(os.path.join(path, 'checkpoints')):
    directory = os.path.join(path, 'checkpoints')
  if not os.path.isdir(directory):
    raise InputError(f'{path}: no such checkpoint folder (a trainer\'s --workdir)')
  manager = ocp.CheckpointManager(os.path.abspath(directory))
  try:
    steps = manager.all_steps()
    if not steps:
      raise InputError(f'{directory}: no checkpoint saved yet (not a trainer\'s --workdir?)')
    if step is not None and step not in steps:
      raise InputError(f'{directory}: no checkpoint at step {step} (saved: {sorted(steps)})')
    step = manager.latest_step() if step is None else step
    try:
      out = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                          config=ocp.args.JsonRestore()))
    except Exception as e:  # pylint: disable=broad-except
      _quiet_abandoned_reads()
      cause = _damage(os.path.join(os.path.abspath(directory), str(step)), e)
      raise InputError(f'{directory}: the checkpoint of step {step} cannot be read ({cause})'
                       ) from None
    if not isinstance(out.config, Mapping):
      raise InputError(f'{directory}: the checkpoint of step {step} has no saved config')
    return jax.device_get(out.state), dict(out.config)
  finally:
    manager.close()


class MetricsWriter:
  """JSON lines at `<workdir>/metrics.jsonl` (the scalars, the step and the wall-clock time)
  and TensorBoard events when a writer exists."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.path = os.path.join(workdir, METRICS_FILE)
    self._tb = None
    self.enabled = enabled  # only the chief process writes (colt_jax.distributed)
    if not enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    try:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(os.path.join(workdir, TENSORBOARD_DIR))
    except ImportError:
      logging.info('tensorboardX not installed: metrics go to %s only', self.path)

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    if not self.enabled:
      return
    try:
      with open(self.path, 'a') as f:
        f.write(json.dumps({'step': step, **{k: float(v) for k, v in scalars.items()},
                            'time': time.time()}) + '\n')
    except OSError as e:
      raise WriteError(f'{self.path}: cannot write the training metrics ({_cause(e)}); '
                       'training stopped') from None
    if self._tb is not None:
      for k, v in scalars.items():
        self._tb.add_scalar(k, float(v), step)

  def close(self, quiet: bool = False) -> None:
    """Flushes and closes the TensorBoard events; a failed flush is a `WriteError` (none when
    `quiet`, i.e. training is failing already)."""
    tb, self._tb = self._tb, None
    if tb is None:
      return
    try:
      tb.close()
    except OSError as e:
      # Give the event files up, or tensorboardX retries the flush at exit (a traceback).
      for w in (getattr(tb, 'all_writers', None) or {}).values():
        if hasattr(getattr(w, 'event_writer', None), '_closed'):
          w.event_writer._closed = True  # pylint: disable=protected-access
      if not quiet:
        raise WriteError(f'{tb.logdir}: cannot write the TensorBoard events ({_cause(e)})'
                         ) from None


def train(*, state: Any, train_step: Callable, make_batch: Callable[[int], Mapping],
          num_steps: int, workdir: str, config: Mapping[str, Any], checkpoint_every: int = 100,
          max_to_keep: int = 3, resume: bool = True, log_every: int = 10,
          devices=None, stop_after: Optional[int] = None, desc: str = 'train',
          progress: bool = True,
          on_checkpoint: Optional[Callable[[int], Mapping[str, float]]] = None) -> Any:
  """Runs `train_step` pmap-ed over `devices` from the state's step to `num_steps`.

  Args:
    state: the initial (unreplicated) train state; replaced by the latest checkpoint of
      `workdir` when `resume` and one exists.
    train_step: `(state, batch, rng) -> (state, metrics)` using collectives over axis 'batch'.
    make_batch: step -> global batch (dict of arrays with leading dim B); must be a function of
      the step alone for exact resumption.
    num_steps: total steps of the run.
    workdir: checkpoints, `config.json` and `metrics.jsonl` go here.
    config: the run's configuration, saved beside every checkpoint and as `config.json`.
    checkpoint_every: save every this many steps (and at the end).
    stop_after: stop (as if killed) after this many steps without a final save: for tests.
    progress: show a tqdm bar with loss and steps/s.
    on_checkpoint: step -> scalars, called once each checkpoint is on disk (e.g. held-out F1@20
      of that checkpoint, `evaluation.checkpoint_scorer`); they are logged at that step.

  Returns:
    The final unreplicated state.
  """
  devices = list(devices or jax.local_devices())
  multi, chief = distributed.is_multiprocess(), distributed.is_chief()
  if chief:
    outputs.claim_dir(workdir, 'a training run', files=(CONFIG_FILE, METRICS_FILE,
                      METRICS_FILE + '.tmp'), trees=('checkpoints', TENSORBOARD_DIR),
                      flag='--workdir')
  distributed.barrier('train: workdir')
  ckpt = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep)
  restored = None
  if resume and ckpt.latest_step() is not None:
    check_resumable(workdir, config)
    # Before config.json is written: no intact checkpoint refuses with the folder untouched.
    restored, damaged = ckpt.restore_intact(jax.device_get(state), set_aside=chief)
  elif not resume and chief:
    for step in ckpt.manager.all_steps():
      ckpt.manager.delete(step)
    _truncate_metrics(os.path.join(workdir, METRICS_FILE), 0)
  distributed.barrier('train: fresh start')
  if chief:
    atomic.write_json(os.path.join(workdir, CONFIG_FILE), dict(config))
  if restored is not None:
    state = restored
    if damaged:
      ckpt.manager.reload()
      if chief:
        logging.warning('%s: resuming from step %d, the newest intact checkpoint: %s',
                        ckpt.directory, int(state.step), '; '.join(
                            f'step {s} cannot be read ({c}), moved aside to {w}'
                            for s, c, w in damaged))
    logging.info('resumed from step %d of %s', int(state.step), ckpt.directory)
  start = int(state.step)
  if chief:
    _truncate_metrics(os.path.join(workdir, METRICS_FILE), start)
  logging.info('%s: %d parameters, %d device(s) (%d process(es)), steps %d..%d', desc,
               count_params(state.params), len(devices) * jax.process_count(),
               jax.process_count(), start, num_steps)
  writer = MetricsWriter(workdir, enabled=chief)
  # Several processes: pmap spans every process's devices, each feeding its own rows.
  p_step = jax.pmap(train_step, axis_name=devices_lib.AXIS, donate_argnums=(0,),
                    devices=None if multi else devices)
  base_rng = state.rng
  rstate = devices_lib.replicate(state, devices)
  sharding = devices_lib.device_sharding(devices)
  bar = tqdm.tqdm(total=num_steps, initial=start, desc=desc, disable=not (progress and chief),
                  mininterval=1.0, dynamic_ncols=True)
  t0, s0 = time.perf_counter(), start
  try:
    for step in range(start, num_steps):
      batch = make_batch(step)
      if multi:
        batch = {k: v[distributed.process_rows(len(v))] for k, v in batch.items()}
      batch = jax.device_put(devices_lib.shard(batch, len(devices)), sharding)
      rng = devices_lib.replicate(jax.random.fold_in(base_rng, step), devices)
      rstate, metrics = p_step(rstate, batch, rng)
      done = step + 1
      if done % log_every == 0 or done == num_steps:
        scalars = {k: float(v) for k, v in devices_lib.unreplicate(metrics).items()}
        elapsed = time.perf_counter() - t0
        scalars['steps_per_sec'] = (done - s0) / max(elapsed, 1e-9)
        writer.write(done, scalars)
        bar.set_postfix(loss=f'{scalars["loss"]:.4f}', steps_s=f'{scalars["steps_per_sec"]:.1f}')
        t0, s0 = time.perf_counter(), done
      bar.update(1)
      if stop_after is not None and done >= stop_after:
        break  # as if killed: no final save
      if done % checkpoint_every == 0 or done == num_steps:
        ckpt.save(done, devices_lib.unreplicate(rstate), config)  # raises if not written
        if on_checkpoint is not None:
          ckpt.wait()
          if chief:
            writer.write(done, on_checkpoint(done))
    ckpt.wait()
  except BaseException:
    bar.close()  # closing must not hide the error (e.g. a full disk fails both)
    writer.close(quiet=True)
    try:
      ckpt.close()
    except Exception:  # pylint: disable=broad-except
      pass
    raise
  bar.close()
  writer.close()
  ckpt.close()
  return devices_lib.unreplicate(rstate)


def _truncate_metrics(path: str, last_step: int) -> None:
  """Drops logged steps after `last_step` (work lost with a kill is logged again)."""
  if not os.path.isfile(path):
    return
  with open(path) as f:
    keep = [l for l in f if l.strip() and json.loads(l)['step'] <= last_step]
  with open(path + '.tmp', 'w') as f:
    f.writelines(keep)
  os.replace(path + '.tmp', path)



