"""The performance targets of docs/PERFORMANCE.md and whether a run meets each (with the same-run
references they are ratios of), and the report's number formats."""
from __future__ import annotations

from typing import Optional

from colt_jax.benchmarking import perf_devices


# The performance targets.
TTC_MATMUL_RATIO = 0.70


TTC_BATCH1_SLOWDOWN = 1.5


BASELINE_MS = 2.0


SEARCH_1M_MS = 50.0


SEARCH_TARGET_PHOTOS = 1_000_000


_get = perf_devices.get


def fmt_ms(x: Optional[float]) -> str:
  if x is None:
    return 'n/a'
  return f'{x:.{0 if x >= 100 else 1 if x >= 10 else 2 if x >= 1 else 3}f}'


def fmt_rate(x: Optional[float], unit: str = '') -> str:
  if x is None:
    return 'n/a'
  for scale, prefix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
    if abs(x) >= scale:
      return f'{x / scale:.1f} {prefix}{unit}'
  return f'{x:.1f} {unit}'.strip()


def fmt_bytes(x: Optional[float]) -> str:
  if x is None:
    return 'n/a'
  for scale, unit in ((2**30, 'GiB'), (2**20, 'MiB'), (2**10, 'KiB')):
    if x >= scale:
      return f'{x / scale:.1f} {unit}'
  return f'{int(x)} B'


def per_query(entry, key='batch1', stat='median_ms'):
  return _get(entry, key, 'per_query', stat)


def target_row(name, target, measured, met, ratio, bound=''):
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
             f"{fmt_rate(breakdown['core_flops_per_s'], 'FLOP/s')}; the rest (dense layers, "
             f"LayerNorm, GELU) runs at {fmt_rate(breakdown['rest_flops_per_s'], 'FLOP/s')}")
  if phi and _get(phi, 'batched', 'matmul_ratio') is not None:
    r = phi['batched']['matmul_ratio']
    best = best_matmul_ratio(result, phi)
    measured = f'{r:.0%}' + (f' (fastest calls: {best:.0%})' if best is not None else '')
    out.append(target_row('batched TTC FLOP/s vs same-run matmul FLOP/s',
                       f'>= {TTC_MATMUL_RATIO:.0%}', measured, r >= TTC_MATMUL_RATIO,
                       r / TTC_MATMUL_RATIO, gpu_flops_bound or bound))
  else:
    out.append(target_row('batched TTC FLOP/s vs same-run matmul FLOP/s',
                       f'>= {TTC_MATMUL_RATIO:.0%}', 'not measured', None, None,
                       result.get('flops_note', '')))
  if phi:
    slow = per_query(phi, 'batch1') / per_query(phi, 'batched')
    out.append(target_row('batch-1 TTC vs batched per-query time',
                       f'<= {TTC_BATCH1_SLOWDOWN}x', f'{slow:.2f}x',
                       slow <= TTC_BATCH1_SLOWDOWN, slow / TTC_BATCH1_SLOWDOWN,
                       gpu_batch1_bound if slow > TTC_BATCH1_SLOWDOWN else ''))
  n = _get(result, 'settings', 'num_images')
  for method in ('mmr', 'umons'):
    entry = _get(result, 'components', method)
    if entry is None:
      continue
    ms = per_query(entry)
    out.append(target_row(f'{method.upper()} over N={n}, batch 1', f'<= {BASELINE_MS} ms',
                       f'{fmt_ms(ms)} ms', ms <= BASELINE_MS, ms / BASELINE_MS,
                       'host dispatch and NumPy overhead per call' if ms > BASELINE_MS
                       else ''))
  rows = _get(result, 'scaling', 'search', 'rows', default=[])
  big = [r for r in rows if r['photos'] == SEARCH_TARGET_PHOTOS]
  name = f'search over {SEARCH_TARGET_PHOTOS:,} photos, batch 1'
  if big:
    big = big[0]
    ms = per_query(big)
    bound = ''
    if big.get('bandwidth_bound_ms'):
      bound = (f"batch 1 reads the whole collection ({fmt_bytes(big['collection_bytes'])}); at "
               f"this run's read bandwidth that alone takes {fmt_ms(big['bandwidth_bound_ms'])} "
               f"ms (memory-bandwidth bound); {fmt_ms(SEARCH_1M_MS)} ms needs "
               f"{big['collection_bytes'] / (SEARCH_1M_MS / 1e3) / 1e9:.0f} GB/s")
    out.append(target_row(name, f'<= {fmt_ms(SEARCH_1M_MS)} ms', f'{fmt_ms(ms)} ms',
                       ms <= SEARCH_1M_MS, ms / SEARCH_1M_MS, bound))
    amort = per_query(big, 'batched')
    out.append(target_row("batched search amortises the collection read",
                       'batched per-query < batch 1', f'{fmt_ms(amort)} vs {fmt_ms(ms)} ms',
                       amort < ms, amort / ms))
  else:
    largest = max((r['photos'] for r in rows), default=0)
    out.append(target_row(name, f'<= {fmt_ms(SEARCH_1M_MS)} ms',
                       f'not measured (largest collection {largest:,})', None, None))
  compiles = _get(result, 'compiles_after_warmup', 'total')
  if compiles is not None:
    names = [k for k, v in result['compiles_after_warmup']['per_measurement'].items() if v]
    out.append(target_row('no compilation after warm-up', '0', str(compiles), compiles == 0,
                       None, ', '.join(names)))
  backend = _get(result, 'machine', 'backend')
  measured = (f'recorded on {perf_devices.device_name(gpu.result)}: {gpu.report_path}' if gpu
              else 'recorded' if backend == 'gpu' else f'no GPU in this run ({backend})')
  out.append(target_row('the same tables on a GPU', 'when one is available', measured,
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


def met_text(t) -> str:
  if t['met'] is None:
    return '-'
  return 'met' if t['met'] else 'MISSED'
