"""Choosing CoLT's settings on training topics alone (never held-out ones), as configuration.

The choices score settings on topics held out of training *inside* the training topics:
`inner_kfold` (every training topic scored once, by an inner fold that did not train on it)
or `dev_holdout` (a fixed draw of dev topics). `score_scl` (g's beta x learning rate, scored as
"SCL + top-k") and `score_phi` (phi's steps x relevance threshold, optionally x label scheme)
are the cores; `colt_jax/reproduction/pipeline.py` calls them per cross-validation fold.
`choose_scl`, `choose_label_scheme` and `choose_steps` run them on a hold-out of the dev topics
and `write_choice` writes the result as flagfiles with its evidence (`choices`);
`experiments/choose_steps.py` is the command line.
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import folds as folds_lib
from colt_jax.data import splits as data_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.reproduction import choice_files as choices_lib
from colt_jax.reproduction.reproduce_config import WORK_TREES, ReproduceConfig
from colt_jax.reproduction.row_training import Trainer, colt_params, ensure_features
from colt_jax.reproduction import variants as variants_lib
from colt_jax.reproduction.variants import COVERAGE_WEIGHTS, STEPS, THRESHOLDS, Variant
from colt_jax.train import configs
from colt_jax.train import effect as effect_lib
from colt_jax.util import devices
from colt_jax.util import flagcheck
from colt_jax.util import outputs

SCL_GRID = {'beta': (0.02, 0.1, 0.5), 'learning_rate': (1e-5, 1e-4, 1e-3)}
SCORED = ('P@20', 'CR@20', 'F1@20')


# ----------------------------------------------------------------------------- inner splits


def inner_kfold(data: tuple, folds: int, seed: int, tag: str) -> list:
  """[(train, valid)] of a `folds`-fold split of `data`'s topics (each topic valid once)."""
  split, store = data
  out = []
  for fold in folds_lib.kfold(split.topic_numbers, folds, seed):
    out.append((folds_lib.subset(split, store, fold.train_topics, f'{tag}-inner{fold.index}'),
                folds_lib.subset(split, store, fold.test_topics,
                                 f'{tag}-inner{fold.index}-valid')))
  return out


def check_holdout(holdout: int, topics: int) -> None:
  """`holdout` dev topics held out, at least one left to train on."""
  flagcheck.check_range('--holdout', holdout, 1, topics - 1,
                        why=f'the dev split has {topics} topics; at least one trains')


def dev_holdout(dev: tuple, holdout: int, seed: int) -> tuple:
  """([(train, valid)], held-out topic numbers): `holdout` dev topics drawn with `seed`."""
  topics = dev[0].topic_numbers
  check_holdout(holdout, len(topics))
  order = np.random.default_rng(seed).permutation(len(topics))
  held = sorted(topics[i] for i in order[:holdout])
  train = folds_lib.subset(*dev, sorted(set(topics) - set(held)), 'dev-inner-train')
  valid = folds_lib.subset(*dev, held, 'dev-inner-valid')
  return [(train, valid)], held


def _tags(tag: str, splits: Sequence[tuple]) -> list:
  return [tag] if len(splits) == 1 else [f'{tag}-inner{i}' for i in range(len(splits))]


def _pooled(per_topic: Sequence[Mapping[str, Mapping[str, float]]]) -> dict:
  """Mean of each scored metric over every valid topic of every inner split."""
  rows = [m for part in per_topic for m in part.values()]
  return {k: float(np.mean([m[k] for m in rows])) for k in SCORED}


def _topk(splits: Sequence[tuple], protocol: str) -> float:
  parts = [evaluation.score(v[0], evaluation.rank('topk', v[0], v[1], protocol,
                                                  evaluation.MethodParams())).per_topic
           for _, v in splits]
  return _pooled(parts)['F1@20']


# ----------------------------------------------------------------------------- cores


def score_phi(trainer: Trainer, variant: Variant, seed: int, splits: Sequence[tuple],
              tag: str, protocol: str, steps: Sequence[int] = STEPS,
              thresholds: Sequence[float] = THRESHOLDS,
              ttc_overrides: Optional[Mapping[str, Any]] = None,
              log: Callable = print, per_category: Sequence[int] = ()) -> list:
  """[{steps, irrelevant_threshold, [per_category,] P@20, CR@20, F1@20}]: `variant` trained
  on each inner training part (phi to max(steps), keeping a checkpoint at each of `steps`),
  every checkpoint scored under every threshold (and every X of `per_category`, Eq. 6, when
  given) on the inner valid parts, pooled over their topics."""
  every = math.gcd(*steps)
  variant = dataclasses.replace(variant, ttc=dict(
      variant.ttc, **dict(ttc_overrides or {}), num_steps=max(steps), checkpoint_every=every,
      max_to_keep=max(steps) // every + 10))
  xs = tuple(per_category) or (None,)
  per_topic = {(s, t, x): [] for s in steps for t in thresholds for x in xs}
  for (train, valid), part_tag in zip(splits, _tags(tag, splits)):
    scl_cfg, ttc_cfg = trainer.train(variant, seed, train, part_tag, protocol)
    for s in steps:  # phi restored once per checkpoint; thresholds and X are settings
      base = evaluation.colt_retriever(
          dataclasses.replace(colt_params(variant, scl_cfg, ttc_cfg), ttc_step=s))
      for threshold, x in itertools.product(thresholds, xs):
        changes = {'irrelevant_threshold': threshold}
        if x is not None:
          changes['per_category'] = x
        run = evaluation.run_retriever(base.with_settings(**changes), valid[0], valid[1],
                                       protocol)
        per_topic[(s, threshold, x)].append(evaluation.score(valid[0], run).per_topic)
  scores = []
  for (s, threshold, x), parts in per_topic.items():
    scores.append({'steps': s, 'irrelevant_threshold': threshold,
                   **({'per_category': x} if x is not None else {}), **_pooled(parts)})
    log(f'  {s:>5} steps, threshold {threshold}' + (f', X={x}' if x is not None else '') +
        f': held-out F1@20 {scores[-1]["F1@20"]:.4f}')
  return scores


def best_phi(scores: Sequence[Mapping]) -> dict:
  """The best (steps, threshold[, label_scheme][, per_category][, views]) of `score_phi`'s
  scores: highest F1@20, then fewer steps, then text features alone, then the paper's global
  labels, then the paper's X = 1."""
  best = max(scores, key=lambda r: (r['F1@20'], -r['steps'],
                                    r.get('views', 'text') == 'text',
                                    r.get('label_scheme') == 'global',
                                    -r.get('per_category', 1)))
  return {k: best[k] for k in ('steps', 'irrelevant_threshold', 'label_scheme', 'per_category',
                               'views') if k in best}


def score_coverage(trainer: Trainer, variant: Variant, seed: int, splits: Sequence[tuple],
                   tag: str, protocol: str, weights: Sequence[float] = COVERAGE_WEIGHTS,
                   log: Callable = print, clusters: Sequence[tuple] = (),
                   blends: Sequence[float] = (), dpps: Sequence[float] = (),
                   mixes: Sequence[float] = ()) -> list:
  """[{coverage_weight, ttc_step, P@20, CR@20, F1@20}]: `variant` (a colt-pairs row, selection
  'coverage') trained on each inner training part as its row trains it, its lists made with
  each checkpoint phi keeps (`checkpoint_every`, the last `max_to_keep`) and each w of
  `weights` on the inner valid parts, pooled over their topics. With `clusters` ((threshold,
  X) pairs), the 'cluster' rule's lists too: rows {selection: 'cluster', cluster_threshold,
  per_category, ttc_step, ...}; the coverage rows then carry selection 'coverage'. With
  `dpps` (thetas), the DPP rule's lists too ({selection: 'dpp', selection_theta, ...}). With
  `blends`, every setting with each b of them (rows carry `pair_blend`). With `mixes`, a
  relevance model is fitted on each inner training part (`relevance_model.fit_split`) and
  every setting is scored with each a of them (rows carry `relevance_mix`)."""
  rule = {'selection': 'coverage'} if clusters or dpps else {}  # named when the rule is chosen
  settings = [dict(rule, coverage_weight=w) for w in weights] + [
      {'selection': 'cluster', 'cluster_threshold': t, 'per_category': x} for t, x in clusters
  ] + [{'selection': 'dpp', 'selection_theta': t} for t in dpps]
  if blends:
    settings = [dict(s, pair_blend=b) for b in blends for s in settings]
  if mixes:
    settings = [dict(s, relevance_mix=a) for a in mixes for s in settings]
  per_topic = {}
  for (train, valid), part_tag in zip(splits, _tags(tag, splits)):
    scl_cfg, ttc_cfg = trainer.train(variant, seed, train, part_tag, protocol)
    model = (relevance_lib.fit_split(train[0], train[1], ttc_cfg.num_images,
                                     protocol=protocol) if mixes else None)
    for step in kept_steps(ttc_cfg):  # phi restored once per checkpoint; w is a setting
      params = dataclasses.replace(colt_params(variant, scl_cfg, ttc_cfg), ttc_step=step)
      base = evaluation.colt_retriever(params)
      for i, setting in enumerate(settings):
        colt = base.with_settings(**{k: v for k, v in setting.items() if k != 'relevance_mix'})
        if mixes:
          colt = colt.with_relevance_model(model, setting['relevance_mix'])
        run = evaluation.run_retriever(colt, valid[0], valid[1], protocol)
        per_topic.setdefault((step, i), []).append(evaluation.score(valid[0], run).per_topic)
  scores = []
  for (step, i), parts in per_topic.items():
    scores.append({**settings[i], 'ttc_step': step, **_pooled(parts)})
    text = ', '.join(f'{k}={v}' for k, v in settings[i].items())
    log(f'  {variant.name}, step {step}, {text}: held-out F1@20 {scores[-1]["F1@20"]:.4f}')
  return scores


def kept_steps(ttc_cfg) -> list:
  """The checkpoints a finished training of `ttc_cfg` keeps: the last `max_to_keep` multiples
  of `checkpoint_every`, and the final step."""
  steps = sorted(set(range(ttc_cfg.checkpoint_every, ttc_cfg.num_steps + 1,
                           ttc_cfg.checkpoint_every)) | {ttc_cfg.num_steps})
  return steps[-ttc_cfg.max_to_keep:]


def best_coverage(scores: Sequence[Mapping]) -> dict:
  """The setting of `score_coverage`'s scores with the highest F1@20 (ties: the first of the
  grid: the fewest steps, the first b, the smallest w, coverage before clusters):
  {coverage_weight, ttc_step}, or with the rule chosen {selection, coverage_weight |
  cluster_threshold and per_category, ttc_step} (and pair_blend when chosen too)."""
  best = max(scores, key=lambda r: r['F1@20'])
  return {k: v for k, v in best.items() if k not in SCORED}


def score_scl(trainer: Trainer, seed: int, splits: Sequence[tuple], tag: str, protocol: str,
              grid: Mapping[str, Sequence[Any]] = SCL_GRID, log: Callable = print) -> list:
  """[{setting, P@20, CR@20, F1@20}]: g trained with each setting of `grid` on each inner
  training part, scored as "SCL + top-k" on the inner valid parts, pooled over their topics."""
  base = variants_lib.row('SCL + top-k')
  names = list(grid)
  scores = []
  for values in itertools.product(*(grid[n] for n in names)):
    setting = dict(zip(names, values))
    variant = dataclasses.replace(base, scl=setting)
    parts, effects = [], []
    for (train, valid), part_tag in zip(splits, _tags(tag, splits)):
      scl_cfg, _ = trainer.train(variant, seed, train, part_tag)
      run = evaluation.rank_colt(valid[0], valid[1], protocol,
                                 colt_params(variant, scl_cfg, None))
      parts.append(evaluation.score(valid[0], run).per_topic)
      effects.append(effect_lib.reencoder_effect(valid[0], valid[1], scl_cfg.workdir, protocol))
    effect = {k: float(np.mean([e[k] for e in effects]))
              for k in ('relative_change', 'top_k_changed')}
    scores.append({'setting': setting, **_pooled(parts), 'g_effect': effect})
    log(f'  {setting}: held-out F1@20 {scores[-1]["F1@20"]:.4f}, ||beta g(h)||/||h|| '
        f'{effect["relative_change"]:.4f}, top-20 changed on {effect["top_k_changed"]:.0%} '
        'of the held-out topics')
  return scores


def best_scl(scores: Sequence[Mapping]) -> dict:
  return dict(max(scores, key=lambda s: s['F1@20'])['setting'])


# ----------------------------------------------------------------------------- dev choices


def _dev(cfg: ReproduceConfig, log: Callable, holdout: Optional[int] = None) -> tuple:
  """(Trainer writing under reproduce's work dir, the dev split and its store); `holdout` is
  checked against the dev topics first, before the work dir is made."""
  if holdout is not None:
    check_holdout(holdout, data_lib.num_topics(cfg.dataset, 'dev', cfg.data_dir))
  root = cfg.workdir or os.path.join('work', 'reproduce', cfg.dataset)
  outputs.claim_dir(root, 'reproduce\'s work', trees=WORK_TREES, flag='--workdir')
  if cfg.compilation_cache:
    devices.use_compilation_cache(os.path.join(root, 'jax_cache'))
  store = ensure_features(cfg, 'dev', log) if cfg.dataset != 'synthetic' else ''
  return Trainer(cfg, root, log), data_lib.load(cfg.dataset, 'dev', cfg.data_dir, store)


def choose_steps(cfg: ReproduceConfig, holdout: int = 7, steps: Sequence[int] = STEPS,
                 seed: int = 0, protocol: str = 'pool', log: Callable = print,
                 variant: str = 'colt',
                 thresholds: Sequence[float] = THRESHOLDS,
                 ttc_overrides: Optional[Mapping[str, Any]] = None) -> dict:
  """phi's number of steps and relevance threshold, chosen on dev alone: train `variant` on
  dev minus `holdout` topics, score every checkpoint in `steps` under every
  `irrelevant_threshold` on the held-out dev topics (F1@20). Returns {'scores': [{steps,
  irrelevant_threshold, P@20, CR@20, F1@20}], 'best': {steps, irrelevant_threshold},
  'topk': top-k's F1@20 on the same topics}.

  g and phi are configured by their flagfiles (with the choices written there so far);
  `ttc_overrides` change phi's config.
  """
  steps = flagcheck.parse_ints('--steps', [str(x) for x in steps], low=1,
                               high=flagcheck.MAX_STEPS)
  trainer, dev = _dev(cfg, log, holdout)
  splits, held = dev_holdout(dev, holdout, seed)
  colt = variants_lib.row(variant)
  scores = score_phi(trainer, colt, seed, splits, f'dev-inner-{holdout}-seed{seed}', protocol,
                     steps, thresholds, ttc_overrides, log)
  topk = _topk(splits, protocol)
  best = best_phi(scores)
  log(f'  top-k on the same topics: F1@20 {topk:.4f}; chosen: {best}')
  return {'held_out_topics': held, 'scores': scores, 'best': best, 'topk': topk,
          'protocol': protocol, 'variant': variant, 'what': 'ttc', 'seed': seed,
          'train_topics': len(splits[0][0][0].topics)}


def choose_label_scheme(cfg: ReproduceConfig, holdout: int = 7, steps: Sequence[int] = STEPS,
                        seed: int = 0, protocol: str = 'pool', log: Callable = print,
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
  best = best_phi(scores)
  log(f'  chosen: label_scheme={best["label_scheme"]}')
  return {'held_out_topics': held, 'scores': scores, 'schemes': schemes, 'topk': topk,
          'protocol': protocol, 'seed': seed, 'best': {'label_scheme': best['label_scheme']},
          'variant': 'colt', 'what': 'label_scheme'}


def choose_scl(cfg: ReproduceConfig, holdout: int = 7, seed: int = 0, protocol: str = 'pool',
               grid: Mapping[str, Sequence[Any]] = SCL_GRID, log: Callable = print) -> dict:
  """g's beta and learning rate, chosen on dev alone: for every setting of `grid`, train g on
  dev minus `holdout` topics and score top-k over h^ (the "SCL + top-k" row) on the held-out
  dev topics (F1@20). Returns {'scores': [{setting, F1@20, P@20, CR@20}], 'best': setting,
  'topk': top-k over f on the same topics}."""
  trainer, dev = _dev(cfg, log, holdout)
  splits, held = dev_holdout(dev, holdout, seed)
  scores = score_scl(trainer, seed, splits, f'dev-inner-{holdout}-seed{seed}', protocol, grid,
                     log)
  topk = _topk(splits, protocol)
  best = best_scl(scores)
  log(f'  top-k over f on the same topics: F1@20 {topk:.4f}; chosen: {best}')
  return {'held_out_topics': held, 'scores': scores, 'best': best, 'topk': topk,
          'protocol': protocol, 'variant': 'SCL + top-k', 'what': 'scl', 'seed': seed,
          'train_topics': len(splits[0][0][0].topics)}


def write_choice(cfg: ReproduceConfig, result: Mapping[str, Any], command: str,
                 log: Callable = print) -> tuple:
  """Writes the choice of `choose_scl`/`choose_label_scheme`/`choose_steps` (`result`): the
  scores of every setting tried into <config_dir>/evidence/ and, beside them, the flagfile it
  proposes (g's or phi's trainer flagfile, or phi's per-protocol choice flagfile;
  colt_jax/reproduction/choice_files.py), whose change it logs as a diff. The configuration
  itself is left as it is. Returns (flagfile, evidence, proposal)."""
  flagfile, evidence, proposal = choices_lib.save(cfg.config_dir, cfg.colt_stem, cfg.dataset,
                                                  result, command)
  old = open(flagfile).read().splitlines(True) if os.path.isfile(flagfile) else []
  new = open(proposal).read().splitlines(True)[1:]
  log(''.join(difflib.unified_diff(old, new, fromfile=flagfile, tofile=proposal)).rstrip())
  log(f'wrote the evidence {evidence} and a proposed {os.path.basename(flagfile)}: {proposal} '
      f'(review it, then: python experiments/choose_steps.py --apply {proposal})')
  return flagfile, evidence, proposal
