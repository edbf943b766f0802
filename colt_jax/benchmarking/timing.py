"""Measuring tools: timings, compilation counts, XLA cost and memory analysis, the machine.

* `time_calls(fn, *args)`: warm-up calls, then timed calls each waited for with
  `jax.block_until_ready`; returns a `Timing` (median, p99, ... in milliseconds).
* `CompileCounter`: counts XLA backend compilations while it is active (a listener on JAX's
  '/jax/core/compile/backend_compile_duration' monitoring event, which fires once per compiled
  executable, never on a cache hit).
* `compiled_cost(fn, *args)`: FLOPs and bytes from XLA's cost analysis and the buffer sizes of
  `compiled.memory_analysis()` for `jax.jit(fn)` at those arguments.
* `matmul_rate` / `memory_bandwidth`: the machine's matmul FLOP/s and streaming read rate,
  measured in the same run as what they are compared with.
* `machine_info()`: CPU model, cores, versions, JAX backend and devices, load average.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import time
from typing import Any, Callable, Optional

from jax import monitoring
import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.util.errors import InputError

COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'


@dataclasses.dataclass(frozen=True)
class Timing:
  """Wall-clock statistics of repeated calls, in milliseconds per call."""
  median_ms: float
  p99_ms: float
  min_ms: float
  max_ms: float
  mean_ms: float
  repeats: int
  compiles_warmup: int  # compilations during the warm-up calls
  compiles_timed: int  # compilations during the timed calls (should be 0)

  def per_item(self, items: int) -> dict:
    """Median and p99 per item (e.g. per query of a batch) and items per second."""
    return {'median_ms': self.median_ms / items, 'p99_ms': self.p99_ms / items,
            'min_ms': self.min_ms / items, 'per_s': items * 1e3 / self.median_ms}

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def summarise(seconds, compiles_warmup: int = 0, compiles_timed: int = 0) -> Timing:
  """A `Timing` from per-call durations in seconds (p99 by linear interpolation)."""
  ms = np.asarray(seconds, np.float64) * 1e3
  if ms.size == 0:
    raise ValueError('no timed calls')
  return Timing(median_ms=float(np.median(ms)), p99_ms=float(np.percentile(ms, 99)),
                min_ms=float(ms.min()), max_ms=float(ms.max()), mean_ms=float(ms.mean()),
                repeats=int(ms.size), compiles_warmup=compiles_warmup,
                compiles_timed=compiles_timed)


def time_calls(fn: Callable, *args, warmup: int = 2, repeats: int = 20,
               max_seconds: Optional[float] = None, **kwargs) -> Timing:
  """Times `fn(*args, **kwargs)`: `warmup` untimed calls, then up to `repeats` timed ones.

  Every call's result is waited for (`jax.block_until_ready`), so asynchronous dispatch is
  included. `max_seconds` stops the timed calls early (after at least 3) when they take
  longer than that in total. Compilations are counted separately for warm-up and timed calls.
  """
  if warmup < 0 or repeats < 1:
    raise ValueError(f'need warmup >= 0 and repeats >= 1, got {warmup}, {repeats}')
  with CompileCounter() as warm:
    for _ in range(warmup):
      jax.block_until_ready(fn(*args, **kwargs))
  seconds = []
  start = time.perf_counter()
  with CompileCounter() as timed:
    for i in range(repeats):
      t0 = time.perf_counter()
      jax.block_until_ready(fn(*args, **kwargs))
      seconds.append(time.perf_counter() - t0)
      if max_seconds is not None and i >= 2 and time.perf_counter() - start > max_seconds:
        break
  return summarise(seconds, warm.count, timed.count)


class CompileCounter:
  """Counts XLA compilations (one per executable built, none on a cache hit) while active.

      with CompileCounter() as c:
        f(x)
      c.count, c.names  # how many, and the jitted functions' names
  """

  def __init__(self):
    self.names: list = []
    self.times: list = []  # time.time() when each compilation ended

  def between(self, start: float, end: float) -> int:
    """Compilations that ended within [start, end] (wall-clock seconds, time.time())."""
    return sum(start <= t <= end for t in self.times)

  @property
  def count(self) -> int:
    return len(self.names)

  def _listener(self, event: str, duration: float, **kwargs) -> None:
    del duration
    if event == COMPILE_EVENT:
      self.names.append(str(kwargs.get('fun_name', '?')))
      self.times.append(time.time())

  def __enter__(self) -> 'CompileCounter':
    monitoring.register_event_duration_secs_listener(self._listener)
    return self

  def __exit__(self, *exc) -> None:
    monitoring.unregister_event_duration_listener(self._listener)


def _first(analysis) -> dict:
  """cost_analysis() is a dict in recent JAX, a list of one dict in older versions."""
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else {}
  return dict(analysis or {})


def compiled_cost(fn: Callable, *args, static_argnames=(), **kwargs) -> dict:
  """XLA's view of `jax.jit(fn)(*args, **kwargs)`: FLOPs, bytes accessed and memory sizes.

  'flops' is counted on the program as lowered, before any backend optimises it
  ('flops_counted_on': 'hlo'), so it is the same on every device: a GPU's cost analysis leaves
  out the matrix products it hands to cuBLAS (on an H200 it counted 0.42 of phi's 10.98 GFLOP
  per query), and the CPU compiler on an H100 machine, asked for a CPU lowering, counted 0.42
  as well. Where the lowered program gives no count (on the H100 with jax 0.11.2), its matrix
  products are counted from the jaxpr ('jaxpr-products', `product_flops`; phi at L = 8: 10.92
  GFLOP per query against the lowered program's 10.98). 'bytes_accessed' comes from the
  default backend's compiled executable; None when the backend gives none. The '*_bytes' entries come from its
  memory analysis (arguments, outputs, temporaries; 'peak_bytes' when the backend reports it,
  else their sum).
  """
  jitted = fn if hasattr(fn, 'lower') else jax.jit(fn, static_argnames=static_argnames)
  lowered = jitted.lower(*args, **kwargs)
  compiled = lowered.compile()
  out = {'flops': None, 'bytes_accessed': None, 'flops_counted_on': 'hlo'}
  try:
    cost = _first(compiled.cost_analysis())
  except Exception:  # pylint: disable=broad-except
    cost = {}
  try:
    flops = _first(lowered.cost_analysis()).get('flops')
  except Exception:  # pylint: disable=broad-except  # counted from the jaxpr below
    flops = None
  if not flops:  # none, or 0 from a backend that counts nothing (every program here multiplies)
    flops = product_flops(jitted.trace(*args, **kwargs).jaxpr.jaxpr)
    out['flops_counted_on'] = 'jaxpr-products'
  out['flops'] = float(flops)
  if cost.get('bytes accessed') is not None:
    out['bytes_accessed'] = float(cost['bytes accessed'])
  out.update(memory_stats(compiled))
  return out


def product_flops(jaxpr) -> float:
  """2 x multiply-adds of every `dot_general` in `jaxpr` and the jaxprs it calls, counted as
  XLA's analysis of the lowered program counts them: a loop's body (scan, while) once whatever
  its trip count, a cond's dearest branch; products that lowering drops as dead code still
  count, convolutions do not. The programs this suite counts (phi, its layers) have no
  loops."""
  total = 0.0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      (contracting, _), _ = eqn.params['dimension_numbers']
      lhs = eqn.invars[0].aval.shape
      total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(
          lhs[i] for i in contracting)
    inner = [product_flops(getattr(p, 'jaxpr', p)) for v in eqn.params.values()
             for p in (v if isinstance(v, (tuple, list)) else (v,))
             if hasattr(getattr(p, 'jaxpr', p), 'eqns')]
    if inner:
      total += max(inner) if eqn.primitive.name == 'cond' else sum(inner)
  return total


def memory_stats(compiled) -> dict:
  """Argument, output and temporary buffer bytes of a compiled executable (and their peak)."""
  try:
    mem = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except
    mem = None
  if mem is None:
    return {}
  out = {name: int(getattr(mem, f'{name}_size_in_bytes', 0) or 0)
         for name in ('argument', 'output', 'temp', 'alias')}
  out = {f'{k}_bytes': v for k, v in out.items()}
  peak = int(getattr(mem, 'peak_memory_in_bytes', 0) or 0)
  out['peak_bytes'] = peak or (out['argument_bytes'] + out['output_bytes'] + out['temp_bytes']
                               - out['alias_bytes'])
  return out


def matmul_rate(size: int = 2048, repeats: int = 10, dtype=jnp.float32) -> dict:
  """FLOP/s of one jitted [size, size] @ [size, size] product (2 size^3 FLOPs)."""
  a = jax.random.normal(jax.random.PRNGKey(0), (size, size), dtype)
  b = jax.random.normal(jax.random.PRNGKey(1), (size, size), dtype)
  matmul = jax.jit(jnp.matmul)
  cost = compiled_cost(matmul, a, b)
  timing = time_calls(matmul, a, b, warmup=2, repeats=repeats)
  flops = 2.0 * size ** 3
  return {'size': size, 'dtype': jnp.dtype(dtype).name, 'flops': flops,
          'xla_flops': cost['flops'], 'timing': timing.as_dict(),
          'flops_per_s': flops / (timing.median_ms / 1e3),
          'best_flops_per_s': flops / (timing.min_ms / 1e3)}


def memory_bandwidth(num_bytes: int = 1 << 30, repeats: int = 10) -> dict:
  """Read bandwidth (bytes/s) of a jitted sum over a float32 array of `num_bytes`."""
  n = max(num_bytes // 4, 1)
  x = jnp.ones((n,), jnp.float32)
  total = jax.jit(jnp.sum)
  timing = time_calls(total, x, warmup=2, repeats=repeats)
  del x
  return {'bytes': 4 * n, 'timing': timing.as_dict(),
          'bytes_per_s': 4 * n / (timing.median_ms / 1e3),
          'best_bytes_per_s': 4 * n / (timing.min_ms / 1e3)}


def cpu_model() -> str:
  """The CPU's model name (from /proc/cpuinfo on Linux, else `platform.processor()`)."""
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.lower().startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def cpu_caches() -> dict:
  """CPU cache sizes by level and type, e.g. {'L1d': '48K', 'L2': '2048K', 'L3': '266240K'}
  (Linux sysfs; empty elsewhere)."""
  out = {}
  base = '/sys/devices/system/cpu/cpu0/cache'
  try:
    entries = sorted(os.listdir(base))
  except OSError:
    return out
  for entry in entries:
    if not entry.startswith('index'):
      continue
    try:
      with open(os.path.join(base, entry, 'level')) as f:
        level = f.read().strip()
      with open(os.path.join(base, entry, 'type')) as f:
        kind = f.read().strip()
      with open(os.path.join(base, entry, 'size')) as f:
        size = f.read().strip()
    except OSError:
      continue
    suffix = {'Data': 'd', 'Instruction': 'i'}.get(kind, '')
    out[f'L{level}{suffix}'] = size
  return out


def load_average() -> Optional[list]:
  try:
    return [round(v, 2) for v in os.getloadavg()]
  except (AttributeError, OSError):
    return None


def _version(module: str) -> Optional[str]:
  try:
    return __import__(module).__version__
  except Exception:  # pylint: disable=broad-except
    return None


def machine_info() -> dict:
  """Where the numbers were taken: CPU, cores, memory, versions, JAX devices, load."""
  try:
    usable = len(os.sched_getaffinity(0))
  except AttributeError:
    usable = os.cpu_count()
  try:
    memory = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  except (AttributeError, ValueError, OSError):
    memory = None
  devices = jax.devices()
  return {
      'cpu': cpu_model(), 'cpu_count': os.cpu_count(), 'usable_cpus': usable,
      'cpu_caches': cpu_caches(),
      'memory_bytes': memory, 'platform': platform.platform(), 'hostname': platform.node(),
      'python': platform.python_version(), 'jax': jax.__version__,
      'jaxlib': _version('jaxlib'), 'flax': _version('flax'), 'numpy': np.__version__,
      'transformers': _version('transformers'),
      'backend': jax.default_backend(),
      'devices': [f'{d.platform}:{d.device_kind}' for d in devices],
      'device_count': len(devices), 'xla_flags': os.environ.get('XLA_FLAGS', ''),
      'load_average': load_average(),
      'time': time.strftime('%Y-%m-%d %H:%M:%S %Z'),
  }


def growth_exponent(sizes, values) -> Optional[float]:
  """Slope of log(value) against log(size) (least squares): ~1 means linear growth."""
  sizes = np.asarray(sizes, np.float64)
  values = np.asarray(values, np.float64)
  ok = (sizes > 0) & (values > 0)
  if ok.sum() < 2:
    return None
  slope, _ = np.polyfit(np.log(sizes[ok]), np.log(values[ok]), 1)
  return float(slope)


def tree_bytes(tree: Any) -> int:
  """Total bytes of the arrays in a pytree."""
  return int(sum(np.asarray(x).nbytes if not hasattr(x, 'nbytes') else x.nbytes
                 for x in jax.tree_util.tree_leaves(tree)))


def read_json_report(path: str, benchmark: str = 'this benchmark') -> dict:
  """An earlier JSON report of a benchmark (--doc_also): a JSON object with its 'sizes' and
  the 'command' that wrote it; anything else is one line naming the file."""
  try:
    with open(path, encoding='utf-8') as f:
      report = json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f'--doc_also: {path}: not a JSON report of this benchmark ({e})')
  if not isinstance(report, dict) or 'sizes' not in report or 'command' not in report:
    raise InputError(f'--doc_also: {path}: not a report of {benchmark} (no "sizes" or '
                     '"command"; rerun the command that wrote it)')
  return report
