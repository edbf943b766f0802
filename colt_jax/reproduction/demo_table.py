"""The embedded default job: synthetic data, every method, one table (README's first command).

1. Generate the synthetic Div400-like dataset (seed 0) unless it is already there.
2. Train CoLT on its dev split with the shipped flagfiles (`experiments/configs/tuned/synthetic_*`):
   g by SCL, then phi. Both resume from their checkpoints, so a second run is quick. phi's
   steps and relevance threshold are `synthetic_phi_pool.choice.flags` when
   `experiments/choose_steps.py --dataset synthetic --what ttc` has chosen them on the dev
   split (colt_jax/reproduction/choice_files.py), else the TTC flagfile's steps and the argmax.
   The inference settings travel with phi: `<workdir>/demo-seed<seed>/ttc/inference.json` (so that
   `evaluate.py --ttc_checkpoint` of that workdir scores the demo's CoLT row) and the model
   directory `<workdir>/demo-seed<seed>/model`.
3. Evaluate Flickr order, top-k, MMR and UMONS (both tuned on dev, F1@20) and CoLT on the test
   split under the official per-topic protocol; print the table, write run files and JSON.
"""
from __future__ import annotations

import dataclasses
import os

from colt_jax.data import synthetic
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import metrics
from colt_jax.evaluation import result_sets
from colt_jax.inference import retriever
from colt_jax.inference import settings as settings_lib
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.reproduction import choice_files
from colt_jax.reproduction import reproduce_config
from colt_jax.train import configs
from colt_jax.train import trainers
from colt_jax.util import outputs



def run_demo(workdir: str = 'work', seed: int = 0, progress: bool = True, log=print,
             config_dir: str = reproduce_config.CONFIG_DIR) -> dict:
  """The synthetic data, CoLT trained on its dev split from `config_dir`'s synthetic
  flagfiles (relative to the working folder by default), every method on test."""
  data_dir = os.path.join(workdir, f'synthetic-seed{seed}')
  log(f'[1/3] synthetic dataset (seed {seed}) in {data_dir}')
  synthetic.ensure(data_dir, seed=seed)
  runs = os.path.join(workdir, f'demo-seed{seed}')
  scl_cfg = configs.from_flagfile(configs.SCLConfig,
                                  os.path.join(config_dir, 'synthetic_scl.flags'),
                                  data_dir=data_dir, workdir=os.path.join(runs, 'scl'),
                                  seed=seed)
  ttc_cfg = configs.from_flagfile(PairsTTCConfig,
                                  os.path.join(config_dir, 'synthetic_ttc.flags'),
                                  data_dir=data_dir, workdir=os.path.join(runs, 'ttc'),
                                  scl_checkpoint=scl_cfg.workdir, seed=seed)
  settings = settings_lib.InferenceSettings()
  choice = choice_files.read_protocol_choice(config_dir, 'synthetic', 'pool')
  chosen_by = 'experiments/demo.py: the defaults (no synthetic_phi_pool.choice.flags)'
  if choice is not None:  # chosen on the synthetic dev split
    ttc_cfg = dataclasses.replace(ttc_cfg, num_steps=choice.num_steps)
    settings = dataclasses.replace(settings, irrelevant_threshold=choice.irrelevant_threshold)
    chosen_by = ('experiments/demo.py: irrelevant_threshold of '
                 'experiments/configs/tuned/synthetic_phi_pool.choice.flags')
  log(f'[2/3] training CoLT on dev: g ({scl_cfg.num_steps} SCL steps), phi '
      f'({ttc_cfg.num_steps} steps, L={ttc_cfg.num_layers}, N={ttc_cfg.num_images})')
  trainers.train_scl(scl_cfg, progress=progress)
  trainers.train_ttc(ttc_cfg, progress=progress)
  model = save_model(scl_cfg.workdir, ttc_cfg.workdir, settings, os.path.join(runs, 'model'),
                     chosen_by)
  log(f'[3/3] evaluating on test (baselines tuned on dev); CoLT from {model} (the same as '
      f'--scl_checkpoint {scl_cfg.workdir} --ttc_checkpoint {ttc_cfg.workdir}, whose '
      f'{settings_lib.SETTINGS_FILE} holds the inference settings: {_changed(settings)})')
  params = evaluation.MethodParams(model=model)
  return result_sets.run_evaluation(
      dataset='synthetic', split='test', methods=['flickr', 'topk', 'mmr', 'umons', 'colt'],
      protocols_=['pool'], params=params, data_dir=data_dir, tune_methods=True,
      out_dir=os.path.join(runs, 'results'), log=log)


def save_model(scl_workdir: str, ttc_workdir: str, settings: settings_lib.InferenceSettings,
               model_dir: str, chosen_by: str = '') -> str:
  """Saves `settings` beside phi (`<ttc_workdir>/inference.json`, `settings_lib.save_settings`),
  then g, phi and those settings as the model directory `model_dir`; returns its path. Both
  carry the same settings, so the workdirs and the model directory score alike."""
  settings_lib.save_settings(ttc_workdir, settings, chosen_by)
  return retriever.Retriever.from_checkpoints(scl_workdir, ttc_workdir).save_pretrained(
      model_dir)


def _changed(settings: settings_lib.InferenceSettings) -> str:
  """The settings that differ from the defaults, as `name=value` (or 'the defaults')."""
  default = settings_lib.InferenceSettings()
  changed = [f'{f.name}={getattr(settings, f.name)}' for f in dataclasses.fields(settings)
             if getattr(settings, f.name) != getattr(default, f.name)]
  return ', '.join(changed) or 'the defaults'


def summarise_seeds(payloads: dict, metrics_=metrics.DEFAULT_COLUMNS) -> tuple:
  """Mean and standard deviation over seeds of every method's metrics: (rows, markdown)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  methods = list(next(iter(payloads.values()))['results'])
  rows = {}
  for m in methods:
    values = {k: [p['results'][m]['mean'][k] for p in payloads.values()] for k in metrics_}
    rows[m] = {k: (float(np.mean(v)), float(np.std(v))) for k, v in values.items()}
  lines = ['| method | ' + ' | '.join(metrics_) + ' |',
           '|---|' + '---|' * len(metrics_)]
  for m, r in rows.items():
    lines.append(f'| {m} | ' + ' | '.join(f'{r[k][0]:.4f} ± {r[k][1]:.4f}' for k in metrics_)
                 + ' |')
  return rows, '\n'.join(lines)


def run_seeds(seeds, workdir: str = 'work', doc: str = '', progress: bool = False,
              log=print, config_dir: str = reproduce_config.CONFIG_DIR) -> dict:
  """`run_demo` for every seed (data and training), then mean ± std over seeds."""
  payloads = {s: run_demo(workdir, s, progress=progress, log=log, config_dir=config_dir)
              for s in seeds}
  rows, table = summarise_seeds(payloads)
  log(f'mean ± std over seeds {list(seeds)} (synthetic test split, pool protocol):')
  log(table)
  if doc:
    import datetime  # pylint: disable=g-import-not-at-top
    text = (f'# CoLT on the synthetic default\n\nGenerated by `python experiments/demo.py '
            f'--seeds {",".join(map(str, seeds))} --doc {doc}` on '
            f'{datetime.date.today().isoformat()}. Each seed draws a new synthetic dataset '
            f'(`colt_jax/data/synthetic.py`) and trains CoLT on its dev split with the '
            f'shipped flagfiles (`experiments/configs/tuned/synthetic_*.flags`); MMR and UMONS are '
            f'tuned on dev (F1@20). Test split, official per-topic protocol; mean ± standard '
            f'deviation over seeds.\n\n{table}\n\nPer seed:\n\n')
    for s, p in payloads.items():
      text += f'Seed {s}:\n\n```\n{p["table"]}\n```\n\n'
    outputs.write_owned_text(doc, text, 'the report', flag='--doc')
  return rows
