"""How the process's C allocator treats the large host buffers of XLA's CPU backend.

A batched jitted call on the CPU (the Retriever's search: the scores of a batch over the
collection, phi's activations) allocates temporary buffers of several to tens of MB and frees
them when it returns. With glibc's defaults, buffers over its (dynamic, at most 32 MB) mmap
threshold are mapped fresh on every call and returned to the system after it, and freed memory
at the top of the heap is trimmed: every call then pays the page faults of first touching all
of its buffers again, a cost that grows with the batch and is large in a virtual machine.
`keep_freed_buffers()` lets the heap serve those buffers and keep them once freed, so that the
next call reuses memory that is already mapped. `benchmarks/bench_batch_cost.py` measures what
it changes. The process then keeps up to `TRIM_THRESHOLD` of freed memory instead of returning
it at once.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt(3) parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 1 << 30  # only allocations over 1 GiB are mapped on their own
TRIM_THRESHOLD = 1 << 30  # freed memory at the heap's top is returned past 1 GiB
TOP_PAD = 1 << 26  # the heap grows 64 MiB beyond each request

_applied = None


def keep_freed_buffers() -> bool:
  """Sets glibc's mmap and trim thresholds (module docstring), once per process. True when
  the settings are in effect; False where the C library is not glibc (nothing changed)."""
  global _applied
  if _applied is None:
    _applied = _apply()
  return _applied


def _apply() -> bool:
  if not sys.platform.startswith('linux'):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
  except OSError:
    return False
  # glibc only: musl, for one, has no mallopt parameters to set.
  if not hasattr(libc, 'gnu_get_libc_version') or not hasattr(libc, 'mallopt'):
    return False
  mallopt = libc.mallopt
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  return all(mallopt(param, value) == 1 for param, value in (
      (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
      (_M_TOP_PAD, TOP_PAD)))
