"""`experiments/serve.py`'s start-up and first requests with the defaults a user gets
(`benchmarks/bench_startup.py`; `run(config, command)` returns the JSON report).

The store is the demo collection (`drawn_collection.demo_collection`: 48 captioned pictures
indexed with the packaged MiniLM-L6 text encoder, and a CoLT model of that dimension with a
randomly initialised phi), or a given one. Served without a model (the model-free methods) and
with the model (colt too), each with serve.py's default flags but a compilation cache folder of
its own (`--compilation_cache_dir`), started twice:

* cold: the cache folder new (empty), as on a first start or after an upgrade of JAX;
* warm: the same folder again, as on every later start.

Each start records the seconds from starting the process to the first answer of `GET
/healthz` (ready) and the CPU time serve.py had used by then (all threads), the warm-up's compilations, how many of them came from the cache and its
seconds (serve.py's "warmed up" line), then the time of the first text request (a vector for a
store without a text tower) of every method offered (`POST /search`, its round trip), a second one of each (compiled), and one request of a
list shape the warm-up did not compile (colt's k:X 10:2, the others' list length 30): what a
new shape costs on first use; then when `/healthz` reports every padded size and token shape
compiled ("warm": serve.py compiles those a first request does not need in the background) and
the CPU time by then.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import time
from typing import Optional

from colt_jax.benchmarking import drawn_collection
from colt_jax.benchmarking import service_load
from colt_jax.benchmarking import service_process
from colt_jax.benchmarking import timing
from colt_jax.data import features
from colt_jax.util.errors import InputError

QUERY = 'bridge at night'
WARMED = re.compile(r'warmed up \((\d+) compilations, (\d+) of them from the compilation '
                     r'cache, ([\d.]+) s[);]')


@dataclasses.dataclass(frozen=True)
class StartupConfig:
  """What `run` measures (benchmarks/bench_startup.py's flags of the same names)."""
  store: str = ''  # '' = the demo collection (with `model`: both or neither)
  model: str = ''
  serve_args: tuple = ()
  start_timeout: float = 900.0
  workdir: str = ''


def _post(port: int, payload: dict) -> tuple:
  t0 = time.perf_counter()
  status, body = service_process.post_json(port, '/search', payload, timeout=600.0)
  ms = 1e3 * (time.perf_counter() - t0)
  if status != 200:
    raise InputError(f'POST /search {payload}: status {status}: {body}')
  return ms, body


def _new_shape(method: str) -> dict:
  return ({'k': 10, 'per_category': 2} if method == 'colt' else {'list_length': 30})


def measure_start(config: StartupConfig, store: str, model: str, cache: str, log: str,
                  env: Optional[dict] = None) -> dict:
  """One start of serve.py (module docstring): ready time, warm-up, first requests. `env`:
  serve.py's environment (default: this process's)."""
  args = ['--compilation_cache_dir', cache, *config.serve_args]
  service = service_process.Service(store, model, log, args, env=env)
  with service:
    t0 = time.perf_counter()
    health = service.start(config.start_timeout)
    ready = time.perf_counter() - t0
    cpu = service_load.process_cpu_seconds(service.process.pid)  # robust to a busy machine
    with open(log, encoding='utf-8', errors='replace') as f:
      found = WARMED.search(f.read())
    if not found:
      raise InputError(f'{log}: no "warmed up" line of serve.py')
    out = {'ready_s': ready, 'ready_cpu_s': cpu, 'warmup_compilations': int(found.group(1)),
           'warmup_cache_hits': int(found.group(2)), 'warmup_s': float(found.group(3)),
           'methods': health['methods'], 'method_default': health['method_default'],
           'first_ms': {}, 'second_ms': {}, 'new_shape_ms': {}}
    # A text query when the store's encoder has a text tower, else a vector.
    query = {'query': QUERY} if health.get('text_queries') else {
        'vector': [1.0] + [0.0] * (health['dim'] - 1)}
    for key in ('first_ms', 'second_ms'):
      for method in health['methods']:
        out[key][method], _ = _post(service.port, {**query, 'method': method})
    for method in health['methods']:
      if method in ('topk', 'umons'):
        continue  # nothing of theirs is compiled per list shape
      out['new_shape_ms'][method], _ = _post(
          service.port, {**query, 'method': method, **_new_shape(method)})
    # serve.py compiles the other padded sizes and token shapes in the background: when they
    # all are (/healthz "warm"), and its CPU time by then.
    warm = health.get('warm') or {}
    while warm.get('compiled', 0) < warm.get('of', 0):
      if time.perf_counter() - t0 > config.start_timeout:
        raise InputError(f'serve.py did not finish its warm-up within {config.start_timeout:.0f} s')
      time.sleep(0.2)
      status, body = service_process.get_json(service.port, '/healthz')
      warm = (body or {}).get('warm') or {} if status == 200 else warm
    out['all_compiled_s'] = time.perf_counter() - t0
    out['all_compiled_cpu_s'] = service_load.process_cpu_seconds(service.process.pid)
    out['warm'] = warm
    out['exit_status'] = service.stop()
  return out


def run(config: StartupConfig, command: str) -> dict:
  """Cold and warm starts without and with the model (module docstring); the JSON report."""
  workdir = config.workdir or tempfile.mkdtemp(prefix='bench-startup-')
  os.makedirs(workdir, exist_ok=True)
  report = {'benchmark': 'startup', 'command': command, 'machine': timing.machine_info(),
            'serve_args': list(config.serve_args), 'sizes': {}}
  try:
    store, model = config.store, config.model
    if not store:
      store, model = drawn_collection.demo_collection(os.path.join(workdir, 'demo'))
    cases = {}
    for name, with_model in (('no model', ''), ('model', model)):
      tag = 'model' if with_model else 'no-model'
      cache = os.path.join(workdir, f'cache-{tag}')
      if os.path.exists(cache):
        raise InputError(f'{cache}: exists; the cold start needs a new cache folder (choose '
                         'a new --workdir)')
      case = {}
      for start in ('cold', 'warm'):
        print(f'{name}, {start} start ...', flush=True)
        case[start] = measure_start(config, store, with_model, cache,
                                    os.path.join(workdir, f'serve-{tag}-{start}.log'))
        s = case[start]
        print(f'  ready after {s["ready_s"]:.1f} s ({_secs(s.get("ready_cpu_s"))} s of CPU): '
              f'{s["warmup_compilations"]} compilations '
              f'({s["warmup_cache_hits"]} from the cache) in {s["warmup_s"]:.1f} s; first '
              f'requests ms {_fmt(s["first_ms"])}; second {_fmt(s["second_ms"])}; a new '
              f'shape {_fmt(s["new_shape_ms"])}; all compiled after {s["all_compiled_s"]:.1f} s '
              f'({_secs(s.get("all_compiled_cpu_s"))} s of CPU)', flush=True)
      cases[name] = case
    report['photos'] = len(features.load(store).photo_ids)
    report['store'] = 'demo' if not config.store else store
    report['sizes'][str(report['photos'])] = cases
  finally:
    if not config.workdir:
      shutil.rmtree(workdir, ignore_errors=True)
  report['load_average_end'] = timing.load_average()
  return report


def _secs(value) -> str:
  return '-' if value is None else f'{value:.1f}'


ORDER = ('colt', 'topk', 'mmr', 'msd', 'dpp', 'umons', 'no model', 'model', 'cold', 'warm')


def _ordered(d: dict) -> list:
  """`d`'s items in ORDER (a JSON report's keys come sorted)."""
  return sorted(d.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))


def _fmt(ms: dict) -> str:
  return ', '.join(f'{m} {v:.0f}' for m, v in _ordered(ms)) or '-'


def section(report: dict) -> list:
  """docs/SERVICE.md's lines of a report of `run`."""
  m = report['machine']
  what = ('the demo collection (48 captioned pictures, MiniLM-L6 text features; its model\'s '
          'phi randomly initialised)' if report.get('store') == 'demo'
          else f'the store {report.get("store")}')
  lines = [
      '## Start-up', '',
      f'`python {report["command"]}` on {m.get("cpu", "this CPU")}, {m.get("cpu_count", "?")} '
      f'cores (load average at the start {m.get("load_average")}, at the end '
      f'{report.get("load_average_end")}): `serve.py` with its default flags (every method, '
      f'--warm_settings 20:1:50, --max_batch_size 32) over {what}, without and with the '
      'model, each started twice with a compilation cache folder of its own: cold (the folder '
      'new, as on a first start or after an upgrade of JAX) and warm (the same folder, as on '
      'every later start). "ready": seconds from starting the process to the first answer of '
      '/healthz (imports, loading, indexing, the warm-up before ready, the server), "its CPU": '
      'the CPU time (user + system, all threads) serve.py had used by then (less sensitive '
      'than times to the other processes of a busy machine); "warm-up s" and "compilations": '
      'those of the warm-up before ready (--warm_up=first, the default: the smallest padded '
      'batch size of each method and the token shapes of short queries); then the round trip '
      'of the first text request of each method, of a second one, and of one of a list shape '
      'the warm-up did not compile (colt k:X 10:2; mmr, msd, dpp list length 30), in ms, all '
      'while the background warm-up compiles the rest; "all compiled s (CPU)": when /healthz '
      'reported every padded size and token shape compiled (after those requests), and the CPU '
      'time by then.', '']
  lines += ['| store, start | ready s | its CPU s | warm-up s | compilations | from the cache | '
            'first request ms | second request ms | new shape ms | all compiled s (CPU) |',
            '|---|---|---|---|---|---|---|---|---|---|']
  for photos, cases in report['sizes'].items():
    for name, case in _ordered(cases):
      for start, s in _ordered(case):
        lines.append(f'| {photos} photos, {name}, {start} | {s["ready_s"]:.1f} | '
                     f'{_secs(s.get("ready_cpu_s"))} | '
                     f'{s["warmup_s"]:.1f} | {s["warmup_compilations"]} | '
                     f'{s["warmup_cache_hits"]} | {_fmt(s["first_ms"])} | '
                     f'{_fmt(s["second_ms"])} | {_fmt(s["new_shape_ms"])} | '
                     + (f'{s["all_compiled_s"]:.1f} ({_secs(s.get("all_compiled_cpu_s"))})'
                        if 'all_compiled_s' in s else '-') + ' |')
  lines += ['', *WHY.strip('\n').split('\n'), '']
  return lines


WHY = '''
Why ready before everything is compiled, and why the cache keeps it: the warm-up compiles every
padded batch size (2 to --max_batch_size) of every method offered for the list shapes of
--warm_settings, and the text tower's token shapes, so that no request of those shapes waits
for a compilation; on a cold start that is 50 to 65 programs, about a second each on 2 cores.
With --warm_up=first (serve.py's default) the service is ready once what a first request needs
is compiled (the smallest padded size of each method, the token shapes of queries of up to 16
words); a background thread compiles the others, the larger sizes in increasing order, and the
batcher forms no batch larger than the sizes compiled so far (the other requests join the next
batch), a text of a longer token shape waits for it: no request compiles on the serving path,
they only share the cores with the background compilations until /healthz reports "warm":
{"compiled": m, "of": m} (colt_jax/service/warm_up.py). --warm_up=all is ready only once every
one is compiled. JAX's persistent compilation cache (`--compilation_cache_dir`, default
`~/.cache/colt_jax/compilation-cache`, or the folder JAX_COMPILATION_CACHE_DIR names) makes
every start after the first load the programs instead of compiling them ("from the cache"
above): what a warm start still spends is tracing and loading each program, the imports and
the store. A cold start pays the compilations once per machine, cache folder, and version of
JAX, the model's shape and the store's dimension; `--warm_settings` and `--methods` (only what
is offered) make it shorter. A colt list shape (k:X) beyond --warm_settings compiles on its
first request ("new shape"), once, and is in the cache for the next start; mmr, msd and dpp
compute every list at its full length and cut it, so a list length compiles nothing. The folder
is colt_jax's (its manifest says so; a folder holding anything else is refused when named, and
left alone at the default place, the service then starting without the cache); one it cannot
write is read and nothing is added; a full disk adds nothing, the programs compile and serve
as without a cache; `--nocompilation_cache` turns it off. Deleting the folder is always safe.
'''
