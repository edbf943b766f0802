"""Several processes (hosts) as one data-parallel job: `jax.distributed` set-up and who does
what.

`initialize(coordinator_address, num_processes, process_id)` joins the job (CPU processes
reduce across each other with gloo); afterwards `jax.pmap` spans every process's devices and
each process feeds its own contiguous rows of every global batch (`process_rows`), so the
result is that of one process with all the devices. Files are written by the chief (process
0) alone; `barrier` waits for every process. With one process (the default) all of this is a
no-op.
"""
from __future__ import annotations

import sys

from absl import flags
import jax
from jax.experimental import multihost_utils

from colt_jax.util.errors import InputError

MAX_PROCESSES = 65_536  # a sane bound of --num_processes


def initialize(coordinator_address: str = '', num_processes: int = 1,
               process_id: int = 0) -> None:
  """Joins a job of `num_processes` processes (no-op for one)."""
  if not 0 <= process_id < max(num_processes, 1):
    raise InputError(f'--process_id must be in [0, {num_processes}) (--num_processes), got '
                     f'{process_id}')
  if coordinator_address and num_processes <= 1:
    raise InputError(f'--coordinator_address joins a job of several processes: it needs '
                     f'--num_processes > 1, got {num_processes}')
  if num_processes <= 1:
    return
  if not coordinator_address:
    raise InputError('--coordinator_address (host:port of process 0) is needed with '
                     f'--num_processes={num_processes}')
  if jax.config.jax_platforms in (None, '', 'cpu'):
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  # JAX's preemption service would take SIGTERM from colt_jax.util.cli (which unwinds each process
  # like Ctrl-C): its notifier only marks a sync point, which colt_jax's loop does not poll,
  # so a stopped job trained on until SIGKILL.
  jax.config.update('jax_enable_preemption_service', False)
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_chief() -> bool:
  """Whether this process writes the job's files (process 0)."""
  return jax.process_index() == 0


def process_rows(global_rows: int) -> slice:
  """This process's contiguous rows of a global batch (equal parts, in process order)."""
  count, index = jax.process_count(), jax.process_index()
  if global_rows % count:
    raise ValueError(f'global batch {global_rows} is not divisible by {count} processes')
  part = global_rows // count
  return slice(index * part, (index + 1) * part)


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier `name` (no-op for one process)."""
  if is_multiprocess():
    multihost_utils.sync_global_devices(name)


def finish() -> None:
  """Leaves the job together: a last barrier, then `jax.distributed.shutdown` (a process
  that exits while another still tears down its collectives can hang both)."""
  if is_multiprocess():
    barrier('finish')
    jax.distributed.shutdown()


def define_flags() -> None:
  """--coordinator_address, --num_processes, --process_id for a command line."""
  flags.DEFINE_string('coordinator_address', '', 'Several processes (hosts): host:port of '
                      'process 0, the same for every process.', module_name=sys.argv[0])
  flags.DEFINE_integer('num_processes', 1, 'Processes in the job (one per host).',
                       lower_bound=1, upper_bound=MAX_PROCESSES, module_name=sys.argv[0])
  flags.DEFINE_integer('process_id', 0, 'This process\'s rank, 0 .. num_processes - 1.',
                       lower_bound=0, upper_bound=MAX_PROCESSES - 1, module_name=sys.argv[0])


def initialize_from_flags() -> None:
  """Joins the job that `define_flags`' flags describe (nothing for one process)."""
  initialize(flags.FLAGS.coordinator_address, flags.FLAGS.num_processes,
             flags.FLAGS.process_id)
