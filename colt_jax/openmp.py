"""OpenMP threads that sleep while they wait, for processes whose cores XLA also uses.

FAISS (and the OpenMP build of OpenBLAS it ships) and scikit-learn run their parallel loops
on libgomp's threads. Unless told otherwise, an idle libgomp thread spins before it sleeps;
on a machine of few cores those spinning threads take the cores from XLA's thread pool, the
event loop and the batcher (`benchmarks/bench_service.py` over a 1M-photo FAISS collection:
batches stalled for 100-300 ms, and the service answered 450-480 queries/s instead of about
525). `wait_passively()` sets `OMP_WAIT_POLICY=PASSIVE` unless the environment already sets
it. libgomp reads the policy once, when it is loaded (the first import of faiss or of a
scikit-learn module that uses it), so the scripts that serve or search call this before
their other imports, and the benchmarks do the same for their in-process reference.
"""
from __future__ import annotations

import os

VARIABLE = 'OMP_WAIT_POLICY'


def libgomp_loaded() -> bool:
  """Whether this process has loaded libgomp already (Linux; False where /proc is absent)."""
  try:
    with open('/proc/self/maps', encoding='utf-8', errors='replace') as f:
      return any('libgomp' in line for line in f)
  except OSError:
    return False


def wait_passively() -> bool:
  """Sets OMP_WAIT_POLICY=PASSIVE unless it is set (module docstring). True when libgomp
  will read the policy in force from now on (it is not loaded yet); False when it was loaded
  before, and keeps the policy it read then."""
  os.environ.setdefault(VARIABLE, 'PASSIVE')
  return not libgomp_loaded()
