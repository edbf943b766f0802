"""The data-parallel training loop shared by both trainers: pmap, orbax, logs, progress.

A run is a pure function of (config, seed): the batch of step s is `make_batch(s)`, the step's
key is fold_in(state.rng, s), and the whole state (params, optimiser state, bank, step, key) is
checkpointed. So `resume=True` after a crash or kill continues from the latest checkpoint and
ends with exactly the parameters of an uninterrupted run.

Checkpoint faults are bad input or a clean fallback, never a traceback (`checkpoints`): an
unreadable checkpoint is skipped on resume for the newest intact one; a failed write stops
training at once with one line (exit 2: the environment is at fault, the user can fix it),
keeping the last good checkpoint. A full disk says so in that line, with the free space; one
met before the first checkpoint removes the workdir the run made (`_full_disk_clean_up`).
A run's identity on resume ignores its own folder: a copied or moved workdir resumes.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import threading
import time
from typing import Any, Callable, Mapping, Optional

from absl import logging
import jax
import tqdm

from colt_jax.util import atomic
from colt_jax.util import devices as devices_lib
from colt_jax.util import diskspace
from colt_jax.util import distributed
from colt_jax.util import outputs
from colt_jax.util.errors import InputError
# Re-exported: the trainers, restore and tests reach the checkpoints through the loop.
from colt_jax.train.checkpoints import CheckpointWriteError  # pylint: disable=unused-import
from colt_jax.train.checkpoints import Checkpointer, WriteError, _cause
from colt_jax.train.checkpoints import restore_checkpoint  # pylint: disable=unused-import
from colt_jax.train import state as state_lib

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.jsonl'
TENSORBOARD_DIR = 'tensorboard'
# Fields that may change when a run is resumed (they do not change what a step computes).
RESUMABLE_CHANGES = frozenset({'num_steps', 'checkpoint_every', 'log_every', 'max_to_keep'})
# Records that newer trainers add to the config (the training store's encoder, the digest of
# the g phi trains over, the method: `method_registry`): a run saved before them resumes.
RECORDED_LATER = ('encoder', 'g_sha256', 'method')


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
  """The fields of a run's config that decide what its steps compute (its method among
  them): not the resumable ones, not the run's own folder (`workdir`), and paths inside that
  folder relative to it, so that a copied or moved workdir is the same run."""
  workdir = config.get('workdir') or workdir
  return {k: _inside(v, workdir) for k, v in config.items()
          if k not in RESUMABLE_CHANGES and k != 'workdir'}


def check_resumable(workdir: str, config: Mapping[str, Any]) -> None:
  """Refuses to resume a run whose saved config differs from `config` in a field that
  changes the computation (so a changed flagfile, or another method, never silently continues
  an old run). The workdir's own path is no part of it (`run_identity`)."""
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
  for key in RECORDED_LATER:
    if key not in saved:
      new.pop(key, None)
  changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
  if changed:
    diff = ', '.join(f'{k}: {saved.get(k)!r} -> {config.get(k)!r}' for k in changed)
    raise InputError(f'{workdir} holds a run with another configuration ({diff}); use a new '
                     '--workdir, or --noresume to start over')


class MetricsWriter:
  """JSON lines at `<workdir>/metrics.jsonl` (the scalars, the step and the wall-clock time)
  and TensorBoard events when a writer exists."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.path = os.path.join(workdir, METRICS_FILE)
    self._tb = None
    self.enabled = enabled  # only the chief process writes (colt_jax.util.distributed)
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
      if diskspace.is_full(e):
        raise diskspace.error(e, self.path, '; training stopped') from None
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
      if not quiet and diskspace.is_full(e):
        raise diskspace.error(e, tb.logdir) from None
      if not quiet:
        raise WriteError(f'{tb.logdir}: cannot write the TensorBoard events ({_cause(e)})'
                         ) from None


# Pmapped train steps kept for reuse (`pmapped_step`): a few, as each holds its compiled
# programs.
_STEPS_KEPT = 8
_steps = collections.OrderedDict()
_steps_lock = threading.Lock()


def _step_key(train_step: Callable) -> Optional[tuple]:
  """What identifies a train step: its function and bound arguments (a functools.partial's,
  which compare by identity); None when they cannot be hashed."""
  key = train_step
  if isinstance(train_step, functools.partial):
    key = (train_step.func, train_step.args, tuple(sorted(train_step.keywords.items())))
  try:
    hash(key)
  except TypeError:
    return None
  return key


def pmapped_step(train_step: Callable, devices: Optional[tuple]) -> Callable:
  """`train_step` pmap-ed over `devices` (None: every process's), with the state donated.
  The same step (`_step_key`) on the same devices gets the same pmapped function: a training
  of the same configuration (another seed, a fold, a resumed run) reuses its traced and
  compiled program, as pmap's cache is per function. The state's static parts (the module's
  apply, the optimiser: `trainers.adam`) are part of that cache's key."""
  key = _step_key(train_step)
  with _steps_lock:
    if key is not None and (key, devices) in _steps:
      _steps.move_to_end((key, devices))
      return _steps[(key, devices)]
    p_step = jax.pmap(train_step, axis_name=devices_lib.AXIS, donate_argnums=(0,),
                      devices=None if devices is None else list(devices))
    if key is not None:
      _steps[(key, devices)] = p_step
      while len(_steps) > _STEPS_KEPT:
        _steps.popitem(last=False)
    return p_step


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
  batch = config.get('batch_size')
  if (isinstance(batch, int) and not distributed.is_multiprocess()
      and batch % len(devices)):  # before the workdir is made
    raise InputError(f'--batch_size {batch} is not divisible by the {len(devices)} devices '
                     'it is split over (pmap); choose a multiple')
  multi, chief = distributed.is_multiprocess(), distributed.is_chief()
  # One run per workdir at a time: a second trainer on it stops at once, naming the first's pid.
  with (outputs.exclusive(workdir, 'a training run', flag='--workdir') if chief
        else contextlib.nullcontext()), _full_disk_clean_up(workdir, chief):
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
                 state_lib.count_params(state.params), len(devices) * jax.process_count(),
                 jax.process_count(), start, num_steps)
    writer = MetricsWriter(workdir, enabled=chief)
    # Several processes: pmap spans every process's devices, each feeding its own rows.
    p_step = pmapped_step(train_step, None if multi else tuple(devices))
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


@contextlib.contextmanager
def _full_disk_clean_up(workdir: str, chief: bool):
  """A full disk before the run's first checkpoint removes the workdir this run made (what its
  manifest lists): nothing in it could be resumed. With a checkpoint, or a workdir that was
  there before, everything stays and the next run resumes."""
  made = chief and not os.path.lexists(workdir)
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    checkpoints = os.path.join(workdir, 'checkpoints')
    if (not made or not diskspace.is_full(e) or not os.path.isdir(workdir) or
        os.path.isdir(checkpoints) and any(n.isdigit() for n in os.listdir(checkpoints))):
      raise
    outputs.remove_owned(workdir)
    raise diskspace.error(e, detail=f'; {os.path.abspath(workdir)}, made by this run, is '
                          'removed') from e


def _truncate_metrics(path: str, last_step: int) -> None:
  """Drops logged steps after `last_step` (work lost with a kill is logged again)."""
  if not os.path.isfile(path):
    return
  with open(path, encoding='utf-8', errors='replace') as f:
    lines = [(n, l) for n, l in enumerate(f, 1) if l.strip()]
  keep = []
  for n, line in lines:
    try:
      step = json.loads(line)['step']
      if not isinstance(step, int):
        raise TypeError(f'step {step!r} is not an integer')
    except (ValueError, KeyError, TypeError) as e:
      if n == lines[-1][0]:  # the last line, cut by a kill mid-append: logged again
        logging.warning('%s:%d: dropped a partial metrics line (%s)', path, n, e)
        continue
      raise InputError(f'{path}:{n}: not a metrics line ({type(e).__name__}: {e}); '
                       f'remove the line to resume') from None
    if step <= last_step:
      keep.append(line)
  with open(path + '.tmp', 'w') as f:
    f.writelines(keep)
  os.replace(path + '.tmp', path)



