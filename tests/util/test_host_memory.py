"""colt_jax/util/host_memory.py: glibc then serves XLA-sized host buffers from its heap."""
import subprocess
import sys

import pytest

from colt_jax.util import host_memory

# A fresh process allocates 64 MiB (over glibc's largest dynamic mmap threshold, 32 MiB) and
# says whether the buffer lies in the heap's mapping ([heap] of /proc/self/maps).
_PROBE = """
import sys
import numpy as np
from colt_jax.util import host_memory
if sys.argv[1] == 'keep':
  assert host_memory.keep_freed_buffers() and host_memory.keep_freed_buffers()
a = np.ones(64 << 18, np.float32)
heaps = [[int(x, 16) for x in line.split()[0].split('-')]
         for line in open('/proc/self/maps') if line.rstrip().endswith('[heap]')]
print(any(lo <= a.ctypes.data < hi for lo, hi in heaps))
"""


def _in_heap(mode: str) -> bool:
  out = subprocess.run([sys.executable, '-c', _PROBE, mode], capture_output=True, text=True,
                       check=True)
  return out.stdout.strip().splitlines()[-1] == 'True'


@pytest.mark.skipif(not host_memory.keep_freed_buffers(),
                    reason='the C library is not glibc: host_memory changes nothing here')
def test_large_buffers_come_from_the_heap_once_set():
  assert not _in_heap('default')  # glibc's default: a 64 MiB buffer is mapped on its own
  assert _in_heap('keep')
