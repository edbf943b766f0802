"""What `benchmarks/bench_retrieval.py` measures: per-query cost of every stage and method, as
in the paper's Tables 7-8, how it scales, and training throughput.

`run(settings, sections)` returns one JSON-able dict; `perf_report.py` renders it. Its parts:
`suite_settings.py` (sizes, sections, full or smoke run), `suite_stages.py` (the synthetic world
and the modules measured), `suite_sections.py` and `suite_training.py` (the sections). The
sections:

* reference: the FLOP/s of a large float32 matmul and the streaming read bandwidth of this
  machine, measured in the same run as what is compared with them.
* components: per query at batch 1 (median, p99) and batched (per query, queries/s): the query
  encoder f (the real MiniLM-L6 text encoder; CLIP's text tower, the paper's f, cannot be
  downloaded here), exact candidate search over the collection, g over the N candidates, the
  TTC phi (paper size: d = 512 as CLIP ViT-B/32, L = 8, 8 heads, N = 200), the
  post-processing t, MMR and UMONS over the N candidates.
* paths: the whole path from query text to a list of k photos for topk, mmr, umons and colt.
  f's 384-d output is zero-padded to the 512-d feature space (cosine similarities unchanged).
  CoLT searches the re-encoded collection h^ (the Retriever computes h^ once, offline), so g
  is not in its per-query path; the components table gives g's per-query cost when applied to
  the N candidates online, as the paper counts it.
* ttc: phi at L = 6/8/10; its FLOPs per query (XLA cost analysis), achieved FLOP/s and their
  ratio to the matmul's; one encoder layer against its attention core (where the time goes).
* scaling: candidate search over collections of increasing size (time and memory; the
  bandwidth bound of batch 1), half-precision storage checked for speed and exactness; phi at
  N = 100/200/400.
* training: steps/s and examples/s of train_scl and train_ttc on the synthetic default.

Features are synthetic: unit vectors around random cluster centres (so UMONS and MMR see
clustered candidates). Every timed call is preceded by warm-up calls and waited for with
`jax.block_until_ready`; compilations during the timed calls are counted.
"""
from __future__ import annotations

import dataclasses
import functools
import tempfile
import time
from typing import Callable, Optional, Sequence

# bench_retrieval.py takes Settings, quick, check, memory_needs and SECTIONS from here.
from colt_jax.benchmarking.suite_sections import components
from colt_jax.benchmarking.suite_sections import paths
from colt_jax.benchmarking.suite_sections import reference
from colt_jax.benchmarking.suite_sections import search_scaling
from colt_jax.benchmarking.suite_sections import ttc
from colt_jax.benchmarking.suite_sections import ttc_scaling
from colt_jax.benchmarking.suite_settings import check
from colt_jax.benchmarking.suite_settings import memory_needs
from colt_jax.benchmarking.suite_settings import quick
from colt_jax.benchmarking.suite_settings import run_kind
from colt_jax.benchmarking.suite_settings import SECTIONS
from colt_jax.benchmarking.suite_settings import Settings
from colt_jax.benchmarking.suite_stages import Recorder
from colt_jax.benchmarking.suite_stages import Stages
from colt_jax.benchmarking.suite_stages import World
from colt_jax.benchmarking.suite_training import training
from colt_jax.benchmarking import timing

# The committed results' schema (its odd text is what they carry: change it only with them).
SCHEMA = 'colt_jax/performance/1'

# The paper's per-query times on an RTX 3090 (Zhao et al., SIGIR 2023, Tables 7-8), in ms.
PAPER_RTX3090_MS = {'f': 18.06, 'g': 0.37, 'phi': 11.80, 'topk': 18.06, 'mmr': 24.10,
                    'umons': 22.65, 'vmig': 86.77, 'colt': 30.23}
PAPER_PHI_LAYERS_MS = {6: 8.93, 8: 11.80, 10: 18.56}

__all__ = ('SCHEMA', 'SECTIONS', 'Settings', 'check', 'memory_needs', 'quick', 'run',
           'run_kind')


def run(settings: Settings, sections: Sequence[str] = SECTIONS,
        log: Callable[[str], None] = print, workdir: Optional[str] = None) -> dict:
  """Runs the chosen sections; returns the results (see the module docstring)."""
  check(settings, sections)
  start = time.perf_counter()
  result = {'schema': SCHEMA, 'run_kind': run_kind(settings, sections),
            'settings': dataclasses.asdict(settings),
            'sections': list(sections), 'machine': timing.machine_info(),
            'paper_rtx3090_ms': PAPER_RTX3090_MS,
            'paper_phi_layers_ms': {str(k): v for k, v in PAPER_PHI_LAYERS_MS.items()}}
  m = result['machine']
  log(f'machine: {m["cpu"]}, {m["usable_cpus"]} usable CPUs, backend {m["backend"]} '
      f'{m["devices"]}, load average {m["load_average"]}')
  rec = Recorder(settings, log)
  world = World(settings)
  seconds = result['section_seconds'] = {}
  clock = time.perf_counter
  matmul = bandwidth = None
  if 'reference' in sections:
    t0 = clock()
    result['reference'] = reference(rec)
    seconds['reference'] = clock() - t0
    matmul = result['reference']['matmul']['flops_per_s']
    bandwidth = result['reference']['bandwidth']['bytes_per_s']
  if {'components', 'paths', 'ttc'} & set(sections):
    t0 = clock()
    stages = Stages(settings, world, log)
    seconds['setup'] = clock() - t0
    result['encoder'] = dict(stages.encoder.settings)
    for name, fn in (('components', components), ('paths', paths),
                     ('ttc', functools.partial(ttc, matmul_flops_per_s=matmul))):
      if name in sections:
        t0 = clock()
        result[name] = fn(rec, stages)
        seconds[name] = clock() - t0
    del stages
  if 'scaling' in sections:
    t0 = clock()
    result['scaling'] = {'search': search_scaling(rec, world, bandwidth),
                         'ttc': ttc_scaling(rec, world)}
    seconds['scaling'] = clock() - t0
  if 'training' in sections:
    t0 = clock()
    if workdir is None:
      with tempfile.TemporaryDirectory(prefix='colt-bench-') as tmp:
        result['training'] = training(rec, tmp)
    else:
      result['training'] = training(rec, workdir)
    seconds['training'] = clock() - t0
  result['compiles_after_warmup'] = {'total': int(sum(rec.compiles.values())),
                                     'per_measurement': rec.compiles}
  log(f'compilations during timed calls: {result["compiles_after_warmup"]["total"]}')
  log('seconds per section: ' + ', '.join(f'{k} {v:.1f}' for k, v in seconds.items()))
  result['load_average_end'] = timing.load_average()
  result['elapsed_s'] = time.perf_counter() - start
  return result
