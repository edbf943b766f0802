"""The benchmark on a second device: what a GPU run's report adds, and the CPU-GPU comparison.

The same `benchmarks/bench_retrieval.py`, run on a machine with a GPU (JAX's default device),
writes `GPU_RESULTS`; `python benchmarks/make_report.py --results GPU_RESULTS` renders it as
`GPU_REPORT`, and the CPU report (`docs/PERFORMANCE.md`) gains a section that sets the two
runs side by side, stage by stage, with the ratio of their times (`GpuRun`: the GPU run's
results, where they were read from, and its report).
"""
from __future__ import annotations

import copy
import os
from typing import NamedTuple

from colt_jax.benchmarking import suite_settings

GPU_RESULTS = suite_settings.COMMITTED_GPU_RESULTS
GPU_REPORT = suite_settings.COMMITTED_GPU_REPORT


class GpuRun(NamedTuple):
  """A GPU run set beside the CPU report: its results, their file, its report and the link
  to that report from the CPU report's folder."""
  result: dict
  results_path: str = GPU_RESULTS
  report_path: str = GPU_REPORT
  link: str = os.path.basename(GPU_REPORT)


def get(d, *keys, default=None):
  """d[k0][k1]..., or `default` where a key is missing."""
  for k in keys:
    if not isinstance(d, dict) or k not in d:
      return default
    d = d[k]
  return d


_get = get


def _ms(x) -> str:
  if x is None:
    return 'n/a'
  return f'{x:.3g}' if x < 100 else f'{x:.0f}'


def device_name(result: dict) -> str:
  """'NVIDIA H200' from the run's JAX devices (the first device's kind)."""
  devices = _get(result, 'machine', 'devices', default=[]) or ['?:?']
  return devices[0].split(':', 1)[-1]


def machine_lines(result: dict) -> list:
  """The Machine section's lines about an accelerator run (none for a CPU run)."""
  m = result['machine']
  if m.get('backend') == 'cpu':
    return []
  return [f"- Accelerator: {m.get('device_count')} x {device_name(result)} (backend "
          f"`{m['backend']}`). JAX, jaxlib and flax as listed above (they may differ from "
          "requirements.txt's pins); transformers "
          f"{m.get('transformers') or '(version not recorded)'}. The host CPU runs the "
          'tokeniser, NumPy and the dispatch of every call. Float32 matrix products run at '
          "XLA's default precision, which on NVIDIA GPUs since Ampere uses TF32 tensor cores "
          '(the reference matmul below and phi alike).']


def encoder_text(result: dict) -> str:
  """The sentence naming f's weights, where the run recorded them."""
  model = _get(result, 'encoder', 'model')
  return f" f's weights: `{model}`." if model else ''


FLOPS_NOTE = ('This run\'s FLOPs were counted after a backend had optimised the program, which '
              'on a GPU machine leaves out most matrix products (phi at L = 8 counted 0.42 of '
              'the 10.98 GFLOP per query the CPU counts), so FLOP rates and shares are not '
              'shown; `timing.compiled_cost` now counts them on the program as lowered, before '
              'any backend optimises it, and a new GPU run records them.')


def flops_source_text(result: dict) -> str:
  """Where the run's FLOPs per query were counted ('flops_counted_on', `timing.compiled_cost`)."""
  counted_on = _get(result, 'ttc', 'flops_counted_on') or _get(result, 'machine', 'backend')
  return {
      'hlo': "FLOPs per query are XLA's cost analysis of phi's program as lowered, before any "
             'backend optimises it (the same count on every backend)',
      'jaxpr-products': "FLOPs per query are phi's matrix products counted from its jaxpr (this "
                        "backend's lowered program gives no count; the element-wise work the "
                        'lowered count adds is left out)',
  }.get(counted_on, "FLOPs per query are XLA's cost analysis of phi's program compiled for "
                    + (f'the {counted_on.upper()}' if counted_on else 'its backend'))


def counted_flops(result: dict) -> dict:
  """`result`, or a copy without FLOP counts, rates and shares when they were counted after a
  backend other than this run's CPU optimised the program (`FLOPS_NOTE`, set as
  'flops_note'); counts on the lowered program ('hlo', 'jaxpr-products') hold on every
  backend."""
  backend = _get(result, 'machine', 'backend')
  counted_on = _get(result, 'ttc', 'flops_counted_on') or backend
  trusted = counted_on in ('hlo', 'jaxpr-products') or counted_on == backend == 'cpu'
  if trusted or 'ttc' not in result and 'scaling' not in result:
    return result
  result = copy.deepcopy(result)
  result['flops_note'] = FLOPS_NOTE
  for entry in (_get(result, 'ttc', 'layers', default={}) or {}).values():
    entry['flops_per_query'] = None
    for key in ('batch1', 'batched'):
      entry.get(key, {}).update(flops_per_s=None, matmul_ratio=None)
  if result.get('ttc'):
    result['ttc']['breakdown'] = None
  phi_scaling = _get(result, 'scaling', 'ttc')
  if phi_scaling:
    phi_scaling['growth_flops'] = None
    for row in phi_scaling.get('rows', []):
      row['flops_per_query'] = None
  return result


def search_growth_text(growth_batch1: float) -> str:
  """What the search's growth with the collection says (by the measured batch-1 slope)."""
  amortised = ('a batch reads the collection once for all its queries (a matrix product), '
               'which amortises the read.')
  if growth_batch1 >= 0.8:
    return ('Batch 1 reads every photo once per query, so it is linear in the collection and '
            'bounded by memory bandwidth; ' + amortised)
  return ('Batch 1 grows far slower than the collection here: a fixed cost per call (launches, '
          'synchronisation, the top-k) outweighs reading these collections; ' + amortised)


def phi_growth_text(scaling: dict) -> str:
  """What phi's growth with N says (FLOPs by XLA's count, times as measured)."""
  out = ('The dense layers are linear in N and carry most FLOPs at these sizes; attention is '
         'quadratic in N and its share grows with N.')
  if scaling['growth_flops'] is None:
    return out
  if scaling['growth_batch1'] < 0.7 * scaling['growth_flops']:
    out += (' Batch-1 time grows slower than the FLOPs: a fixed cost per call is a large part '
            'of it at these sizes.')
  return out


def ttc_bounds(result: dict) -> tuple:
  """(bound of the FLOP/s target, bound of the batch-1 target) on an accelerator, else ('', '')."""
  if _get(result, 'machine', 'backend') == 'cpu':
    return '', ''
  s = result['settings']
  phi = _get(result, 'ttc', 'layers', str(s['num_layers']))
  if not phi:
    return '', ''
  batch = s['ttc_batch']
  call_ms = phi['batched']['per_query']['median_ms'] * batch
  batch1 = (f"one sequence takes {phi['batch1']['per_query']['median_ms']:.2f} ms against "
            f"{call_ms:.2f} ms for {batch}: a single sequence leaves most of the GPU idle")
  if not phi.get('flops_per_query'):
    return '', batch1
  flops = (f"the batched call (batch {batch}, {s['num_images'] + 1} tokens) takes "
           f"{call_ms:.2f} ms for {phi['flops_per_query'] * batch / 1e9:.1f} GFLOP; the "
           f"reference rate is a 2048^3 product's. The 70% target was set for the CPU")
  share = _get(result, 'ttc', 'breakdown', 'core_time_share')
  if share is not None:
    flops += (f"; here the attention core (QK^T, mask, softmax, AV) takes {100 * share:.0f}% "
              "of a layer's time")
  return flops, batch1


_STAGES = (('components', 'f', 'f: query encoder (MiniLM)'),
           ('components', 'search', 'candidate search'),
           ('components', 'g', 'g over the candidates'),
           ('components', 'phi', 'phi (TTC)'),
           ('components', 'post', 'post-processing t (Eq. 6)'),
           ('components', 'mmr', 'MMR'), ('components', 'umons', 'UMONS'),
           ('paths', 'topk', 'path: topk'), ('paths', 'mmr', 'path: mmr'),
           ('paths', 'umons', 'path: umons'), ('paths', 'colt', 'path: colt'))


_WHY = {'post-processing t (Eq. 6)': 't is k dependent greedy steps',
        'MMR': 'MMR is k dependent greedy steps',
        'UMONS': "UMONS clusters with scikit-learn's DBSCAN on the host"}


def _why(labels) -> str:
  """Why these stages lose at batch 1 on a GPU, for those where the reason is known."""
  known = [_WHY[label] for label in labels if label in _WHY]
  return '; '.join(known + ['each a chain of small kernels or host work, where a call\'s '
                            'launch and round-trip overheads outweigh its arithmetic'])


def _per(entry, key):
  return _get(entry, key, 'per_query', 'median_ms')


def comparison(cpu: dict, run: GpuRun) -> list:
  """The CPU report's section setting the GPU run beside it (markdown lines)."""
  gpu = run.result
  name = device_name(gpu)
  out = ['## The same tables on a GPU', '',
         f"The same command on one {name} wrote `{run.results_path}`; its whole report is "
         f"[{run.report_path}]({run.link}) (run at "
         f"{_get(gpu, 'machine', 'time')}, JAX {_get(gpu, 'machine', 'jax')}; the CPU run's JAX "
         f"is {_get(cpu, 'machine', 'jax')}). Medians per query in ms; \"x\" is CPU time over "
         'GPU time, so above 1 the GPU is faster. Both runs use the same sizes and batches '
         '(make_report.py refuses a GPU run of other settings).',
         '', f'| stage | CPU batch 1 | {name} batch 1 | x | CPU batched | {name} batched | x '
         '| batch |', '|---|---|---|---|---|---|---|---|']
  for section, key, label in _STAGES:
    c, g = _get(cpu, section, key), _get(gpu, section, key)
    if not c or not g:
      continue
    row = [label]
    for which in ('batch1', 'batched'):
      a, b = _per(c, which), _per(g, which)
      row += [_ms(a), _ms(b), f'{a / b:.1f}' if a and b else 'n/a']
    out.append('| ' + ' | '.join(row) + f" | {_get(g, 'batched', 'batch')} |")
  rows = {r['photos']: r for r in _get(gpu, 'scaling', 'search', 'rows', default=[])}
  for r in _get(cpu, 'scaling', 'search', 'rows', default=[]):
    g = rows.get(r['photos'])
    if g:
      cells = []
      for which in ('batch1', 'batched'):
        a, b = _per(r, which), _per(g, which)
        cells += [_ms(a), _ms(b), f'{a / b:.1f}']
      out.append(f"| search over {r['photos']:,} photos | " + ' | '.join(cells)
                 + f" | {_get(g, 'batched', 'batch')} |")
  train_c, train_g = cpu.get('training') or {}, gpu.get('training') or {}
  lines = [f"train_{k}: {train_c[k]['steps_per_s']:.1f} steps/s on the CPU, "
           f"{train_g[k]['steps_per_s']:.1f} on the GPU" for k in train_c if k in train_g]
  ratios = {}
  for section, key, label in _STAGES:
    for which in ('batch1', 'batched'):
      a, b = _per(_get(cpu, section, key), which), _per(_get(gpu, section, key), which)
      if a and b:
        ratios[(label, which)] = a / b
  slower = [label for (label, which), x in ratios.items() if which == 'batch1' and x < 1]
  out += ['', 'Training (synthetic default, same configurations): ' + '; '.join(lines) + '.'
          if lines else '', '']
  if ratios:
    (top, top_which), top_x = max(ratios.items(), key=lambda kv: kv[1])
    where = 'batched' if top_which == 'batched' else 'at batch 1'
    out.append(f"The GPU's largest lead: {top} {where}, {top_x:.0f}x. "
               + (f"Slower on the GPU at batch 1: {', '.join(slower)} ({_why(slower)})."
                  if slower else 'Every stage is faster on the GPU.'))
    out.append('')
  return out
