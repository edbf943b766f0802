"""OpenMP threads that sleep soon when idle, for processes whose cores XLA also uses.

FAISS (and the OpenMP build of OpenBLAS it ships) and scikit-learn run their parallel loops
on libgomp's threads. By default an idle libgomp thread spins for about 3 ms (300,000 spins;
libgomp counts about 100,000 per ms) before it sleeps; on a machine of few cores those
spinning threads take the cores from XLA's thread pool, the event loop and the batcher, and
the service's batches over a FAISS collection stalled for tenths of a second. Sleeping at once
(`OMP_WAIT_POLICY=PASSIVE`) removes the stalls, but then every parallel region of a search
wakes its threads again; spinning about 0.2 ms first (`GOMP_SPINCOUNT=20000`) bridges the
regions of one search and still sleeps through the milliseconds between batches.
`benchmarks/bench_service.py --sizes 1000000 --engine faiss-ivf` compares settings when run
with others in its environment (the service inherits them).

`sleep_when_idle()` sets both unless the environment sets them. libgomp reads them once, when
it is loaded (the first import of faiss or of a scikit-learn module that uses it), so the
scripts that serve or search call this before their other imports, and the benchmarks do the
same for their in-process reference.
"""
from __future__ import annotations

import os

# What `sleep_when_idle` sets, unless the environment sets it (module docstring).
SETTINGS = {'OMP_WAIT_POLICY': 'PASSIVE', 'GOMP_SPINCOUNT': '20000'}


def libgomp_loaded() -> bool:
  """Whether this process has loaded libgomp already (Linux; False where /proc is absent)."""
  try:
    with open('/proc/self/maps', encoding='utf-8', errors='replace') as f:
      return any('libgomp' in line for line in f)
  except OSError:
    return False


def sleep_when_idle() -> bool:
  """Sets `SETTINGS` where the environment does not (module docstring). True when libgomp
  will read them (it is not loaded yet); False when it was loaded before, and keeps what it
  read then."""
  for name, value in SETTINGS.items():
    os.environ.setdefault(name, value)
  return not libgomp_loaded()
