"""The benchmark on a second device: what a GPU run's report adds, and the CPU-GPU comparison.

The same `benchmarks/bench_retrieval.py`, run on a machine with a GPU (JAX's default device),
writes `GPU_RESULTS`; `python benchmarks/make_report.py --results GPU_RESULTS` renders it as
`GPU_REPORT`, and the CPU report (`docs/PERFORMANCE.md`) gains a section that sets the two
runs side by side, stage by stage, with the ratio of their times.
"""
from __future__ import annotations

import os

GPU_RESULTS = os.path.join('docs', 'results', 'performance-gpu.json')
GPU_REPORT = os.path.join('docs', 'PERFORMANCE-GPU.md')


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
          f"`{m['backend']}`). JAX, jaxlib and flax are that machine's own (above), not "
          "requirements.txt's pins; transformers "
          f"{m.get('transformers') or '(version not recorded)'}. The host CPU runs the "
          'tokeniser, NumPy and the dispatch of every call. Float32 matrix products run at '
          "XLA's default precision, which on NVIDIA GPUs since Ampere uses TF32 tensor cores "
          '(the reference matmul below and phi alike).']


def encoder_text(result: dict) -> str:
  """The sentence naming f's weights, where the run recorded them."""
  model = _get(result, 'encoder', 'model')
  return f" f's weights: `{model}`." if model else ''


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
  flops = (f"the batched call (batch {batch}, {s['num_images'] + 1} tokens) takes "
           f"{call_ms:.2f} ms for {phi['flops_per_query'] * batch / 1e9:.1f} GFLOP; the "
           f"reference rate is a 2048^3 product's. The 70% target was set for the CPU")
  share = _get(result, 'ttc', 'breakdown', 'core_time_share')
  if share is not None:
    flops += (f"; here the attention core (QK^T, mask, softmax, AV) takes {100 * share:.0f}% "
              "of a layer's time")
  batch1 = (f"one sequence takes {phi['batch1']['per_query']['median_ms']:.2f} ms against "
            f"{call_ms:.2f} ms for {batch}: a single sequence leaves most of the GPU idle")
  return flops, batch1


_STAGES = (('components', 'f', 'f: query encoder (MiniLM)'),
           ('components', 'search', 'candidate search'),
           ('components', 'g', 'g over the candidates'),
           ('components', 'phi', 'phi (TTC)'),
           ('components', 'post', 'post-processing t (Eq. 6)'),
           ('components', 'mmr', 'MMR'), ('components', 'umons', 'UMONS'),
           ('paths', 'topk', 'path: topk'), ('paths', 'mmr', 'path: mmr'),
           ('paths', 'umons', 'path: umons'), ('paths', 'colt', 'path: colt'))


def _per(entry, key):
  return _get(entry, key, 'per_query', 'median_ms')


def comparison(cpu: dict, gpu: dict, gpu_report: str = GPU_REPORT,
               gpu_results: str = GPU_RESULTS) -> list:
  """The CPU report's section setting the GPU run beside it (markdown lines)."""
  name = device_name(gpu)
  out = ['## The same tables on a GPU', '',
         f"The same command on one {name} wrote `{gpu_results}`; its whole report is "
         f"[{gpu_report}]({os.path.basename(gpu_report)}) (run at "
         f"{_get(gpu, 'machine', 'time')}). Medians per query in ms; \"x\" is CPU time over "
         'GPU time, so above 1 the GPU is faster. Both runs use the same sizes and batches.',
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
  slower = [label for section, key, label in _STAGES
            if (a := _per(_get(cpu, section, key), 'batch1')) and
            (b := _per(_get(gpu, section, key), 'batch1')) and a < b]
  out += ['', 'Training (synthetic default, same configurations): ' + '; '.join(lines) + '.'
          if lines else '', '',
          'At batch 1 every call pays kernel launches and a host-device round trip, so the '
          "GPU's lead is largest where one call does much work (batched phi, search over a "
          'million photos). '
          + (f"Slower on the GPU at batch 1: {', '.join(slower)}. MMR and t are k dependent "
             'greedy steps (a loop of small kernels); UMONS clusters with scikit-learn\'s '
             'DBSCAN on the host after a device round trip.' if slower else ''), '']
  return out
