"""docs/ENGINES.md from the engine benchmark's JSON reports (`benchmarks/bench_engines.py`):
each collection size's table of engines and settings (time per query, recall@n, against one
read of the collection and against phi), the nprobe picked for a target recall, and the
fastest setting that reaches it, each section naming the command that wrote it."""
from __future__ import annotations

from colt_jax.benchmarking import timing
from colt_jax.engines import approximate as engines
from colt_jax.engines import nprobe_tuning as engine_tuning
from colt_jax.util.errors import InputError


def read_report(path: str) -> dict:
  """A JSON report of this benchmark (--out of an earlier run), for --doc_also."""
  report = timing.read_json_report(path)
  sizes = report['sizes']
  if not (isinstance(sizes, dict) and isinstance(report['command'], str)
          and isinstance(report.get('machine'), dict)
          and all(isinstance(e, dict) and isinstance(e.get('engines'), dict)
                  for e in sizes.values())):
    raise InputError(f'--doc_also: {path}: not a report of this benchmark (its "sizes", '
                     '"command" or "machine" are not what it writes)')
  return report


def settings_text(report: dict, name: str, entry: dict) -> list:
  """An engine's measured settings; a report written before --nprobe took a list holds one,
  at its IVF engines' nprobe then (32, the flag's default: its commands name no --nprobe)."""
  if 'settings' in entry:
    return entry['settings']
  nprobe = report.get('nprobe', 32) if name in engine_tuning.IVF_ENGINES else None
  return [{'nprobe': nprobe, 'timing': entry['timing'], 'recall': entry['recall'],
           'search_over_phi': entry['search_over_phi']}]


def fastest(report: dict, entry: dict, target: float):
  """(engine, setting) of the least median time per query whose recall reaches `target`."""
  reached = [(name, row) for name, e in entry['engines'].items()
             for row in settings_text(report, name, e) if row['recall'] >= target]
  return min(reached, key=lambda r: r[1]['timing']['median_ms'], default=None)


def ivf_cells(name: str, entry: dict, size: int, dim: int):
  """An IVF engine's cells ('-' for others); a report written before they were recorded was
  built with `engines.fit`'s choice at the defaults then (4 sqrt(M), 200,000 training rows)."""
  if name not in engine_tuning.IVF_ENGINES:
    return '-'
  if 'params' in entry:
    return entry['params']['nlist']
  return engines.fit(engines.EngineSpec(name, train_rows=200_000), size, dim)['nlist']


def markdown(reports: list) -> str:
  """The figures of one or more reports as markdown, each section naming its command."""
  first = reports[0]
  m = first['machine']
  lines = [
      '# Candidate engines at scale', '',
      'What it is for: choosing a candidate engine (`--engine` of evaluate.py, search.py and '
      'serve.py; docs/COLLECTIONS.md) for a large collection: time per query and recall '
      'against exact search, written by benchmarks/bench_engines.py.', '',
      f'Measured by benchmarks/bench_engines.py on {m.get("cpu", "this CPU")}, '
      f'{m.get("cpu_count", "?")} cores, no GPU; each section names the command that produced '
      'it (the same command with --out writes its JSON). Synthetic clustered photos; queries '
      'at batch 1; recall@n against exact search. "nprobe": IVF cells searched per query, '
      'each value measured on the same build; "cells": the IVF engine\'s k-means cells. '
      '"vs 1 read": time per query over one read '
      'of the collection (float32) at the bandwidth measured around that engine; '
      '"search/phi": time per query over phi\'s time on one [1 + n]-token sequence (this '
      'repo\'s `colt` width), measured in the same run. References (bandwidth, matmul rate) '
      'were measured before and after each engine, interleaved with it. With --stream the '
      'collection is never held whole: an IVF engine is filled chunk by chunk and its build '
      'time includes generating the rows. "load": the machine\'s load average when the run '
      'began (other jobs share its cores). "(picked)": the nprobe `engines.tune_nprobe` '
      'chose for --target_recall on other queries (--tune_queries) than the timed ones, as '
      'an IVF engine built with `EngineSpec(target_recall=...)` or `data_prep/'
      'index_collection.py --target_recall` picks it on sample photos of its collection.', '']
  for report in reports:
    load = report['machine'].get('load_average')
    for size, entry in report['sizes'].items():
      lines += [f'## {int(size):,} photos', '',
                f'`python {report["command"]}`: {report["centres"]} centres, '
                f'd={report["dim"]}, {report["queries"]} queries, n={report["n"]}, phi '
                f'{report["phi_ms"]:.2f} ms'
                + (f', load {load[0]:.1f}' if load else '') + '.', '',
                '| engine | cells | nprobe | build s | ms/query (median) | p99 ms | recall | '
                'vs 1 read | search/phi | bandwidth ref GB/s | matmul ref GFLOP/s |',
                '|---|---|---|---|---|---|---|---|---|---|---|']
      notes = []
      for name, e in entry['engines'].items():
        before, after = e['references_before'], e['references_after']
        bw = (before['bytes_per_s'] + after['bytes_per_s']) / 2
        flops = (before['flops_per_s'] + after['flops_per_s']) / 2
        tuning = e.get('tuning')
        cells = ivf_cells(name, e, int(size), report['dim'])
        for row in settings_text(report, name, e):
          picked = ' (picked)' if tuning and tuning['nprobe'] == row['nprobe'] else ''
          t = row['timing']
          lines.append(f'| {name} | {cells} | {row["nprobe"] or "-"}{picked} | '
                       f'{e["build_s"]:.1f} | {t["median_ms"]:.2f} | {t["p99_ms"]:.2f} | '
                       f'{row["recall"]:.3f} | {t["median_ms"] / e["exact_read_ms"]:.2f}x | '
                       f'{row["search_over_phi"]:.2f}x | {bw / 1e9:.1f} | {flops / 1e9:.0f} |')
        if tuning:
          notes.append(
              f'{name}: nprobe {tuning["nprobe"]} picked by `engines.tune_nprobe` for '
              f'recall@{tuning["n"]} >= {tuning["target_recall"]} on {tuning["queries"]} other '
              f'queries (recall {tuning["recall"]:.3f} there'
              + ('' if tuning['reached'] else ', short of the target') + '; tried '
              + ', '.join(f'{p}: {r:.3f}' for p, r in tuning['tried']) + ').')
      lines.append('')
      target = report.get('target_recall')
      if target:
        best = fastest(report, entry, target)
        notes.append(f'Fastest at recall@{report["n"]} >= {target}: ' + (
            f'{best[0]}' + (f' at nprobe {best[1]["nprobe"]}' if best[1]['nprobe'] else '')
            + f', {best[1]["timing"]["median_ms"]:.2f} '
            f'ms/query (median), recall {best[1]["recall"]:.3f}.' if best else 'none.'))
      if notes:
        lines += notes + ['']
  return '\n'.join(lines) + '\n'
