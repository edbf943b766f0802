"""The training section of `benchmarks/bench_retrieval.py`: steps/s and examples/s of
train_scl and train_ttc on the synthetic default, after warm-up, with the compilations
during the timed steps."""
from __future__ import annotations

import dataclasses
import json
import os
import time

from colt_jax.benchmarking import timing
from colt_jax.benchmarking.suite_stages import Recorder
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.train import configs


def training(rec: Recorder, workdir: str) -> dict:
  """train_scl and train_ttc on the synthetic default: steps/s and examples/s after warm-up."""
  from colt_jax.data import splits as data  # pylint: disable=g-import-not-at-top
  from colt_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  s = rec.settings
  if s.synthetic_quick:
    cfg = synthetic.SyntheticConfig(dim=16, num_vocabulary=40, dev_topics=8, test_topics=2,
                                    min_photos=50, max_photos=90, mean_clusters=6)
    data_dir = synthetic.ensure(s.synthetic_dir or os.path.join(workdir, 'synthetic'),
                                s.seed, cfg)
  else:
    data_dir = s.synthetic_dir or ''
  split_data = data.load('synthetic', 'dev', data_dir)
  warm = s.train_warmup
  steps = -(-s.train_steps // warm) * warm
  common = dict(num_steps=warm + steps, log_every=warm, checkpoint_every=warm + steps,
                data_dir=data_dir, **dict(s.train_overrides))
  def fields(cls):
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in common.items() if k in names}

  scl_cfg = configs.from_flagfile(configs.SCLConfig, s.scl_flags,
                                  workdir=os.path.join(workdir, 'scl'),
                                  **fields(configs.SCLConfig))
  ttc_cfg = configs.from_flagfile(PairsTTCConfig, s.ttc_flags,
                                  workdir=os.path.join(workdir, 'ttc'),
                                  scl_checkpoint=scl_cfg.workdir, **fields(PairsTTCConfig))
  rec.log(f'training: {warm} warm-up + {steps} timed steps each (synthetic dev split)')
  out = {}
  for name, cfg, fn in (('scl', scl_cfg, trainers.train_scl), ('ttc', ttc_cfg,
                                                                trainers.train_ttc)):
    start = time.perf_counter()
    with timing.CompileCounter() as counter:
      fn(cfg, resume=False, progress=False, split_data=split_data)
    wall = time.perf_counter() - start
    out[name] = train_rates(os.path.join(cfg.workdir, 'metrics.jsonl'), warm, cfg.batch_size)
    out[name].update(wall_s=wall, compiles=counter.count, batch_size=cfg.batch_size,
                     compiles_timed=counter.between(*out[name].pop('timed_window')),
                     config={k: v for k, v in dataclasses.asdict(cfg).items()
                             if k not in ('workdir', 'data_dir', 'scl_checkpoint')})
    if name == 'scl':
      out[name]['images_per_s'] = out[name]['examples_per_s'] * cfg.images_per_query
    else:
      out[name]['tokens_per_s'] = out[name]['examples_per_s'] * (cfg.num_images + 1)
    rec.log(f'  train_{name}: {out[name]["steps_per_s"]:.2f} steps/s, '
            f'{out[name]["examples_per_s"]:.1f} examples/s')
  return out


def train_rates(metrics_path: str, interval: int, batch_size: int) -> dict:
  """Steps/s over the logged intervals after the first (which holds the compilation), and the
  wall-clock window of those intervals (for counting compilations inside it)."""
  with open(metrics_path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  rows = [r for r in rows if 'steps_per_sec' in r]
  if len(rows) < 2:
    raise ValueError(f'{metrics_path}: need at least two logged intervals, got {len(rows)}')
  timed = rows[1:]
  steps = [r['step'] - p['step'] for p, r in zip(rows, timed)]
  seconds = sum(n / r['steps_per_sec'] for n, r in zip(steps, timed))
  rate = sum(steps) / seconds
  return {'steps_per_s': rate, 'examples_per_s': rate * batch_size,
          'timed_steps': sum(steps), 'timed_s': seconds,
          'first_interval_s': interval / rows[0]['steps_per_sec'],
          # wall-clock window of the timed steps (end of the first interval to the last log)
          'timed_window': (rows[0].get('time', 0.0), rows[-1].get('time', float('inf')))}

