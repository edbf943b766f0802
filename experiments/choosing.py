"""Choosing CoLT's settings on a hold-out of the dev topics (never test), as configuration.

`choose_scl` (g's beta x learning rate), `choose_label_scheme` (local vs global labels) and
`choose_steps` (phi's steps x relevance threshold under a protocol) train on dev minus a
hold-out and score the hold-out (F1@20); `write_choice` writes the choice as flagfiles with
its evidence (`choices`). `experiments/choose_steps.py` is the command line.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

import choices as choices_lib
from colt_jax import configs
from colt_jax import data as data_lib
from colt_jax import evaluation
from colt_jax import folds as folds_lib
from colt_jax.errors import InputError
from reproduction import (ReproduceConfig, Reproduction, VARIANTS, THRESHOLDS, colt_params,
                          ensure_features)


def write_choice(cfg: ReproduceConfig, result: Mapping[str, Any], command: str,
                 log: Callable = print) -> tuple:
  """Writes the choice of `choose_scl`/`choose_label_scheme`/`choose_steps` (`result`) as
  configuration (experiments/choices.py): g's and phi's trainer flagfiles, or phi's per-protocol
  choice flagfile; the scores of every setting tried into <config_dir>/evidence/."""
  if cfg.with_descriptors and result.get('what') in ('scl', 'label_scheme'):
    raise InputError(f'--what {result["what"]} writes {cfg.colt_stem}_*.flags, which the '
                     'text-only setting shares; choose it without --with_descriptors')
  flagfile, evidence = choices_lib.save(cfg.config_dir, cfg.colt_stem, cfg.name, result,
                                        command)
  log(f'wrote {flagfile} and its evidence {evidence}')
  return flagfile, evidence


def choose_steps(cfg: ReproduceConfig, holdout: int = 7, steps: Sequence[int] = (100, 200, 300,
                                                                                   400, 600),
                 seed: int = 0, protocol: str = 'pool', log: Callable = print,
                 variant: str = 'colt',
                 thresholds: Sequence[float] = THRESHOLDS,
                 ttc_overrides: Optional[Mapping[str, Any]] = None) -> dict:
  """phi's number of steps and relevance threshold, chosen on dev alone: train `variant` on
  dev minus `holdout` topics, score every checkpoint in `steps` under every
  `irrelevant_threshold` on the held-out dev topics (F1@20). Returns {'scores': [{steps,
  irrelevant_threshold, P@20, CR@20, F1@20}], 'best': {steps, irrelevant_threshold},
  'topk': top-k's F1@20 on the same topics}.

  g and phi are configured by their flagfiles (with the choices written there so far); phi
  runs to max(steps), keeping every checkpoint in `steps`; `ttc_overrides` change phi's
  config.
  """
  rep = Reproduction(dataclasses.replace(cfg, variants=(variant,)), log)
  store = ensure_features(cfg, 'dev', log) if cfg.dataset != 'synthetic' else ''
  rep.dev = data_lib.load(cfg.dataset, 'dev', cfg.data_dir, store)
  train, valid, held = _dev_holdout(rep.dev, holdout, seed)
  colt = next(v for v in VARIANTS if v.name == variant)
  every = math.gcd(*steps)  # a checkpoint at every step scored
  colt = dataclasses.replace(colt, ttc=dict(colt.ttc, **dict(ttc_overrides or {}),
                                            num_steps=max(steps), checkpoint_every=every,
                                            max_to_keep=max(steps) // every + 10))
  tag = f'dev-inner-{holdout}-seed{seed}'
  scl_cfg, ttc_cfg = rep.trainer.train(colt, seed, train, tag, protocol)
  scores = []
  for s in steps:
    for threshold in thresholds:
      params = dataclasses.replace(colt_params(colt, scl_cfg, ttc_cfg), ttc_step=s,
                                   irrelevant_threshold=threshold)
      mean = evaluation.score(valid[0], evaluation.rank_colt(valid[0], valid[1], protocol,
                                                             params)).mean
      scores.append({'steps': s, 'irrelevant_threshold': threshold,
                     **{k: mean[k] for k in ('P@20', 'CR@20', 'F1@20')}})
      log(f'  {s:>5} steps, threshold {threshold}: held-out dev F1@20 {mean["F1@20"]:.4f}')
  topk = evaluation.score(valid[0], evaluation.rank('topk', valid[0], valid[1], protocol,
                                                    evaluation.MethodParams())).mean['F1@20']
  best = max(scores, key=lambda r: (r['F1@20'], -r['steps']))
  best = {'steps': best['steps'], 'irrelevant_threshold': best['irrelevant_threshold']}
  log(f'  top-k on the same topics: F1@20 {topk:.4f}; chosen: {best}')
  return {'held_out_topics': held, 'scores': scores, 'best': best, 'topk': topk,
          'protocol': protocol, 'variant': variant, 'what': 'ttc', 'seed': seed,
          'train_topics': len(train[0].topics)}


def choose_label_scheme(cfg: ReproduceConfig, holdout: int = 7,
                        steps: Sequence[int] = (100, 200, 300, 400, 600), seed: int = 0,
                        protocol: str = 'pool', log: Callable = print,
                        thresholds: Sequence[float] = THRESHOLDS) -> dict:
  """phi's label scheme (configs.LABEL_SCHEMES), chosen on dev alone: `choose_steps` for
  each scheme on the same hold-out; the scheme of the best (steps, threshold) setting wins.
  Returns {'scores': [{label_scheme, steps, irrelevant_threshold, P@20, CR@20, F1@20}],
  'best': {label_scheme}, 'topk'}."""
  scores, schemes, topk, held = [], {}, None, None
  for scheme in configs.LABEL_SCHEMES:
    log(f' label_scheme={scheme}')
    result = choose_steps(cfg, holdout, steps, seed, protocol, log, thresholds=thresholds,
                          ttc_overrides={'label_scheme': scheme})
    schemes[scheme] = result
    scores += [dict(r, label_scheme=scheme) for r in result['scores']]
    topk, held = result['topk'], result['held_out_topics']
  best = max(scores, key=lambda r: (r['F1@20'], r['label_scheme'] == 'global'))
  log(f'  chosen: label_scheme={best["label_scheme"]} (F1@20 {best["F1@20"]:.4f})')
  return {'held_out_topics': held, 'scores': scores, 'schemes': schemes, 'topk': topk,
          'protocol': protocol, 'seed': seed, 'best': {'label_scheme': best['label_scheme']},
          'variant': 'colt', 'what': 'label_scheme'}


SCL_GRID = {'beta': (0.02, 0.1, 0.5), 'learning_rate': (1e-5, 1e-4, 1e-3)}


def choose_scl(cfg: ReproduceConfig, holdout: int = 7, seed: int = 0, protocol: str = 'pool',
               grid: Mapping[str, Sequence[Any]] = SCL_GRID, log: Callable = print) -> dict:
  """g's beta and learning rate, chosen on dev alone: for every setting of `grid`, train g on
  dev minus `holdout` topics and score top-k over h^ (the "SCL + top-k" row) on the held-out
  dev topics (F1@20). Returns {'scores': [{setting, F1@20, P@20, CR@20}], 'best': setting,
  'topk': top-k over f on the same topics}."""
  import itertools  # pylint: disable=g-import-not-at-top
  rep = Reproduction(dataclasses.replace(cfg, variants=('SCL + top-k',)), log)
  store = ensure_features(cfg, 'dev', log) if cfg.dataset != 'synthetic' else ''
  rep.dev = data_lib.load(cfg.dataset, 'dev', cfg.data_dir, store)
  train, valid, held = _dev_holdout(rep.dev, holdout, seed)
  tag = f'dev-inner-{holdout}-seed{seed}'
  base = next(v for v in VARIANTS if v.name == 'SCL + top-k')
  names = list(grid)
  scores = []
  for values in itertools.product(*(grid[n] for n in names)):
    setting = dict(zip(names, values))
    variant = dataclasses.replace(base, scl=setting)
    scl_cfg, _ = rep.trainer.train(variant, seed, train, tag)
    run_ = evaluation.rank_colt(valid[0], valid[1], protocol, colt_params(variant, scl_cfg, None))
    mean = evaluation.score(valid[0], run_).mean
    scores.append({'setting': setting, **{k: mean[k] for k in ('P@20', 'CR@20', 'F1@20')}})
    log(f'  {setting}: held-out dev F1@20 {mean["F1@20"]:.4f}')
  topk = evaluation.score(valid[0], evaluation.rank('topk', valid[0], valid[1], protocol,
                                                    evaluation.MethodParams())).mean['F1@20']
  best = max(scores, key=lambda s: s['F1@20'])['setting']
  log(f'  top-k over f on the same topics: F1@20 {topk:.4f}; chosen: {best}')
  return {'held_out_topics': held, 'scores': scores, 'best': best, 'topk': topk,
          'protocol': protocol, 'variant': 'SCL + top-k', 'what': 'scl', 'seed': seed,
          'train_topics': len(train[0].topics)}


def _dev_holdout(dev: tuple, holdout: int, seed: int) -> tuple:
  """(train, held-out, held-out topic numbers): `holdout` dev topics drawn with `seed`."""
  topics = dev[0].topic_numbers
  order = np.random.default_rng(seed).permutation(len(topics))
  held = sorted(topics[i] for i in order[:holdout])
  train = folds_lib.subset(*dev, sorted(set(topics) - set(held)), 'dev-inner-train')
  valid = folds_lib.subset(*dev, held, 'dev-inner-valid')
  return train, valid, held
