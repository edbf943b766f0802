"""How long search.py takes to start, and what it imports, in two checkouts measured in one run
(before and after search.py stopped importing the reproduction): `measure(trees, store, reps)`
runs, for each repetition and each checkout in turn (interleaved, so that a busy machine
weighs on both alike), `search.py --helpshort` (wall time), the modules it has imported when
its flags are parsed (all, and colt_jax's, and the research application's), and a first
search of `store` (a model-free query, the whole command's wall time).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Sequence

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


def _run(tree: str, args: Sequence[str], timeout: float = 600.0) -> tuple:
  """(seconds, stdout) of `python <args>` run in checkout `tree` with its own colt_jax."""
  env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS='cpu')
  t0 = time.perf_counter()
  done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                        text=True, timeout=timeout, check=False)
  seconds = time.perf_counter() - t0
  if done.returncode != 0:
    raise RuntimeError(f'{tree}: python {" ".join(args)} exited {done.returncode}: '
                       f'{done.stderr[-1000:]}')
  return seconds, done.stdout


def measure_once(tree: str, store: str, query: str) -> dict:
  """One repetition in checkout `tree`: the three measurements (module docstring)."""
  search = os.path.join('experiments', 'search.py')
  helpshort, _ = _run(tree, [search, '--helpshort'])
  _, counted = _run(tree, ['-c', _COUNT, search])
  modules, own, research = (int(x) for x in counted.strip().splitlines()[-1].split())
  first, _ = _run(tree, [search, '--store', store, '--query', query, '--k', '20'])
  return {'helpshort_s': helpshort, 'modules': modules, 'colt_jax_modules': own,
          'research_modules': research, 'first_search_s': first}


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
  lines = ['| checkout | `--helpshort` (s) | modules imported | colt_jax modules | of them '
           'reproduction/benchmarking | first search (s) |', '|---|---|---|---|---|---|']
  for label, entry in result['trees'].items():
    m = entry['median']
    lines.append(f'| {label} | {m["helpshort_s"]:.2f} | {m["modules"]:.0f} | '
                 f'{m["colt_jax_modules"]:.0f} | {m["research_modules"]:.0f} | '
                 f'{m["first_search_s"]:.2f} |')
  return '\n'.join(lines)
