r"""What a batched search costs per query, by batch size, with and without the two settings of
the Retriever's CPU path: phi over slices of `cores.phi_slice()` sequences, and glibc's
thresholds that keep XLA's freed host buffers (`colt_jax/util/host_memory.py`).

  python benchmarks/bench_batch_cost.py [--sizes 2,8,16,24,32,64] [--rounds 2] [--out F.json]

It writes a synthetic collection and a randomly initialised phi (bench_service.py's defaults:
100,000 photos of 512 dims, L=2, 2 heads, width 64, N=200), then runs, interleaved for
--rounds rounds, one child process per setting (the allocator is a process-wide setting):
  shipped      both settings, as the Retriever runs;
  unsliced     phi over the whole batch at once;
  default-malloc  glibc's default thresholds;
  neither      both off (the Retriever before these settings).
Each child times `Retriever.search_rows` (the whole jitted search: exact top-N over the
collection, phi, Eq. 6) per batch size (median of --repeats calls after warm-up). Printed: ms
per call and per query for each setting (the median over rounds), and each setting's time
over the shipped one's, measured in the same run.
"""
from __future__ import annotations

from colt_jax.util import openmp

# As serve.py: before faiss or scikit-learn loads libgomp, so that Retriever.search_rows runs
# under the service's OpenMP setting (its child processes inherit it).
openmp.sleep_when_idle()

import json
import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

from colt_jax.util import cli
from colt_jax.data import features
from colt_jax.util import flagcheck
from colt_jax.util import host_memory
from colt_jax.util import outputs
from colt_jax.inference import retriever
from colt_jax.inference import cores
from colt_jax.benchmarking import synthetic_collection
from colt_jax.benchmarking import timing

SETTINGS = ('shipped', 'unsliced', 'default-malloc', 'neither')

_SIZES = flags.DEFINE_list('sizes', ['2', '8', '16', '24', '32', '64'], 'Batch sizes (queries '
                           'per call).')
_PHOTOS = flags.DEFINE_integer('photos', 100_000, 'Photos in the synthetic collection.',
                               lower_bound=200, upper_bound=flagcheck.MAX_COUNT)
_DIM = flags.DEFINE_integer('dim', 512, 'Feature dimension.', lower_bound=1, upper_bound=4096)
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Interleaved rounds of every setting.',
                               lower_bound=1, upper_bound=100)
_REPEATS = flags.DEFINE_integer('repeats', 15, 'Timed calls per batch size.', lower_bound=3,
                                upper_bound=10_000)
_OUT = flags.DEFINE_string('out', '', 'Also write the figures as JSON here.')
# Internal: one child's run.
_CHILD = flags.DEFINE_enum('child', None, SETTINGS, 'Internal: time one setting in this '
                           'process over --workdir\'s store and model; prints JSON.')
_WORKDIR = flags.DEFINE_string('workdir', '', 'Internal (with --child): the store and model.')


def _child(setting: str, workdir: str) -> dict:
  if setting in ('unsliced', 'neither'):
    cores.phi_slice = lambda: 0  # phi over the whole batch (read when a call is traced)
  if setting in ('default-malloc', 'neither'):
    host_memory.keep_freed_buffers = lambda: False  # before the Retriever sets it
  colt = retriever.Retriever.from_pretrained(os.path.join(workdir, 'model')).index(
      features.load(os.path.join(workdir, 'store')))
  queries = synthetic_collection.synthetic_queries(
      max(int(s) for s in _SIZES.value), _DIM.value,
      synthetic_collection.synthetic_centres(1000, _DIM.value))
  out = {}
  for size in (int(s) for s in _SIZES.value):
    t = timing.time_calls(colt.search_rows, queries[:size], repeats=_REPEATS.value)
    out[str(size)] = t.median_ms
  return out


def _write_collection(workdir: str) -> None:
  """bench_service.py's collection (1000 centres) as a store, and its phi."""
  photos = synthetic_collection.synthetic_photos(
      _PHOTOS.value, _DIM.value, synthetic_collection.synthetic_centres(1000, _DIM.value))
  synthetic_collection.synthetic_store(os.path.join(workdir, 'store'), photos)
  synthetic_collection.synthetic_model(os.path.join(workdir, 'model'), dim=_DIM.value,
                                       num_layers=2, num_heads=2, model_dim=64, num_images=200,
                                       categories=160)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _CHILD.value:
    print(json.dumps(_child(_CHILD.value, _WORKDIR.value)))
    return
  sizes = [int(s) for s in _SIZES.value]
  if _OUT.value:
    outputs.check_writable_file(_OUT.value, 'the benchmark report', flag='--out')
  info = timing.machine_info()
  print(f'{info.get("cpu")}, {info.get("usable_cpus")} cores, JAX {info.get("jax")}, '
        f'backend {info.get("backend")}; load average {timing.load_average()}')
  runs = {s: [] for s in SETTINGS}
  with tempfile.TemporaryDirectory(prefix='colt_jax_bench_batch_cost_') as workdir:
    print(f'writing {_PHOTOS.value:,} photos x {_DIM.value} dims and a phi ...', flush=True)
    _write_collection(workdir)
    for r in range(_ROUNDS.value):
      for setting in SETTINGS:
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), f'--child={setting}',
             f'--workdir={workdir}', f'--sizes={",".join(map(str, sizes))}',
             f'--dim={_DIM.value}', f'--repeats={_REPEATS.value}'],
            capture_output=True, text=True, check=False)
        if child.returncode:
          raise SystemExit(f'bench_batch_cost.py: the {setting} child failed:\n'
                           f'{child.stderr[-2000:]}')
        runs[setting].append(json.loads(child.stdout.strip().splitlines()[-1]))
        print(f'round {r + 1}/{_ROUNDS.value}: {setting} done', flush=True)
  median = {s: {str(b): float(np.median([run[str(b)] for run in runs[s]])) for b in sizes}
            for s in SETTINGS}
  print(f'\nRetriever.search_rows, ms per call (ms per query), median of {_ROUNDS.value} '
        f'interleaved rounds; in brackets: over shipped')
  print(f'{"batch":>5} ' + ' '.join(f'{s:>26}' for s in SETTINGS))
  for b in sizes:
    cells = []
    for s in SETTINGS:
      ms = median[s][str(b)]
      ratio = ms / median['shipped'][str(b)]
      cells.append(f'{ms:8.2f} ({ms / b:5.2f}/q) [{ratio:4.2f}x]')
    print(f'{b:5d} ' + ' '.join(f'{c:>26}' for c in cells))
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, {
        'command': 'python benchmarks/bench_batch_cost.py ' + ' '.join(sys.argv[1:]),
        'machine': info, 'photos': _PHOTOS.value, 'dim': _DIM.value, 'sizes': sizes,
        'rounds': _ROUNDS.value, 'repeats': _REPEATS.value, 'ms_per_call': median,
        'runs': runs}, 'the benchmark report', flag='--out')
    print(f'wrote {_OUT.value}')


if __name__ == '__main__':
  cli.run(main)
