"""The embedded default job: synthetic data, every method, one table (README's first command).

1. Generate the synthetic Div400-like dataset (seed 0) unless it is already there.
2. Train CoLT on its dev split with the shipped flagfiles (`experiments/configs/synthetic_*`):
   g by SCL, then phi. Both resume from their checkpoints, so a second run is quick.
3. Evaluate Flickr order, top-k, MMR and UMONS (both tuned on dev, F1@20) and CoLT on the test
   split under the official per-topic protocol; print the table, write run files and JSON.
"""
from __future__ import annotations

import os

from colt_jax import configs
from colt_jax import evaluation
from colt_jax.datasets import synthetic
from colt_jax.train import trainers

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          'experiments', 'configs')


def run_demo(workdir: str = 'work', seed: int = 0, progress: bool = True, log=print) -> dict:
  data_dir = os.path.join(workdir, f'synthetic-seed{seed}')
  log(f'[1/3] synthetic dataset (seed {seed}) in {data_dir}')
  synthetic.ensure(data_dir, seed=seed)
  runs = os.path.join(workdir, f'demo-seed{seed}')
  scl_cfg = configs.from_flagfile(configs.SCLConfig,
                                  os.path.join(CONFIG_DIR, 'synthetic_scl.flags'),
                                  data_dir=data_dir, workdir=os.path.join(runs, 'scl'),
                                  seed=seed)
  ttc_cfg = configs.from_flagfile(configs.TTCConfig,
                                  os.path.join(CONFIG_DIR, 'synthetic_ttc.flags'),
                                  data_dir=data_dir, workdir=os.path.join(runs, 'ttc'),
                                  scl_checkpoint=scl_cfg.workdir, seed=seed)
  log(f'[2/3] training CoLT on dev: g ({scl_cfg.num_steps} SCL steps), phi '
      f'({ttc_cfg.num_steps} steps, L={ttc_cfg.num_layers}, N={ttc_cfg.num_images})')
  trainers.train_scl(scl_cfg, progress=progress)
  trainers.train_ttc(ttc_cfg, progress=progress)
  log('[3/3] evaluating on test (baselines tuned on dev)')
  params = evaluation.MethodParams(scl_checkpoint=scl_cfg.workdir,
                                   ttc_checkpoint=ttc_cfg.workdir)
  return evaluation.run_evaluation(
      dataset='synthetic', split='test', methods=['flickr', 'topk', 'mmr', 'umons', 'colt'],
      protocols_=['pool'], params=params, data_dir=data_dir, tune_methods=True,
      run_file=os.path.join(runs, 'runs', '{protocol}-{method}.txt'),
      results_json=os.path.join(runs, 'results.json'), log=log)
