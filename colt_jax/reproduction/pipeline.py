"""The real benchmark end to end: features, baselines, CoLT and its ablations, cross-validation.

`run(ReproduceConfig(...))` does, for a MediaEval dataset in its official layout:

1. Features: MiniLM text features of the dev and test splits (`data_prep/extract_features.py`,
   resumable), unless the stores already exist.
2. k-fold cross-validation over all topics of dev + test (`colt_jax.data.folds`), the primary
   protocol, first: per fold the baselines are tuned (MMR, UMONS, ... on every feature setting
   CoLT may choose, the setting chosen with the parameters) and CoLT is trained on the
   training topics only, and every topic is scored once, by the fold that held it out.
   Then "without training: parameters that travel" (`travel`): every post-processing
   method's grid over every topic under MiniLM text, TF-IDF text and MiniLM text +
   descriptors, the report's table of parameters tuned on one and applied to another, and the
   evidence of the model-free default's rule (`model_free_rule`).
3. Baselines on test, tuned on dev (F1@20, same protocol): Flickr order, top-k, MMR, UMONS.
4. CoLT (Alg. 1-2): g trained by SCL and phi by the TTC trainer on dev, evaluated on test, for
   every seed; then the ablations (`VARIANTS`), each a set of overrides of the two configs.
5. `results.json`, the run files, and a markdown report (`report.write_markdown`).

Every choice is made on dev (or, in cross-validation, on the training topics); test scores are
only read to fill the tables. Trainings are keyed by a digest of their configuration, so rows
that share a model (X=1/2/3, SCL + top-k, ...) train it once, and a rerun after an interruption
resumes from the checkpoints and skips finished rows (`rows/*.json`).

The stages live in `stages.py` (the official split: 2-3, the row cache, the run files) and
`cross_validation.py` (4, each fold's choices); here, `run`, results.json and the report.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Mapping, Optional

import numpy as np

from colt_jax.data import splits as data_lib
from colt_jax.reproduction import choice_files as choices_lib
from colt_jax.reproduction import model_free_rule
from colt_jax.reproduction import recommendation
from colt_jax.reproduction import report_travel
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import travel
from colt_jax.reproduction.cross_validation import Reproduction
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction.row_cache import read_json
from colt_jax.reproduction.row_training import base_configs
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError


def returned_at(run: Mapping, k: int = 20) -> float:
  """Mean number of photos a run returns per topic within the first k (k when every list is
  full; less when a method, e.g. Eq. 6 without filling, returns short lists)."""
  return float(np.mean([min(len(r), k) for r in run.values()])) if run else 0.0


def _summary(row: Mapping) -> dict:
  """A row as results.json keeps it: everything but the ranked lists, plus returned@20."""
  out = {k: v for k, v in row.items() if k != 'run'}
  if 'run' in row:
    out['returned@20'] = returned_at(row['run'])
  return out


def _fold_baseline(row: Mapping) -> dict:
  """What results.json keeps of a fold's baseline row beside its means: its training F1@20,
  parameters and (CV_VIEW_BASELINES) feature setting and every setting weighed."""
  return {k: row[k] for k in ('train_F1@20', 'chosen', 'features', 'settings') if k in row}


def run(cfg: ReproduceConfig, log: Callable = print, cross_validate: bool = True,
        report: bool = True, previous_results: str = '') -> dict:
  """All stages; returns the results payload (also written as results.json). Its
  `previous` (what the report's "what changed" section compares with) is the summary of
  `previous_results` (an earlier results.json) when given, else the one the replaced
  results.json carried."""
  # One reproduction per work folder at a time: a second one stops at once, naming the pid.
  workdir = cfg.workdir or os.path.join('work', 'reproduce', cfg.dataset)
  with outputs.exclusive(workdir, 'reproduce\'s work', flag='--workdir'):
    t0 = time.perf_counter()
    if cross_validate:
      cfg.check_topics()  # before any folder is made
    previous = _previous(cfg, previous_results)
    # Checked before any folder is made; the results are written at the end as one set.
    results = outputs.ResultSet(cfg.results_path, 'reproduce results', flag='--results_dir')
    if report:
      outputs.check_writable_file(cfg.doc_path, 'the report', flag='--doc')
    rep = Reproduction(cfg, log)
    log(f'[1/4] features ({cfg.encoder}) of {cfg.dataset} dev and test')
    rep.load()
    # The cross-validation first: it is the primary protocol (about 125 training topics a fold),
    # so an interrupted run has its rows before the official split's ablations.
    cv = rep.cross_validation() if cross_validate and cfg.folds else None
    if cv and cfg.dataset != 'synthetic':  # no text nor descriptors in the synthetic layout
      log('[travel] without training: parameters that travel')
      travel.stage(rep)
    rows = rep.official()
    payload = {
        'dataset': cfg.dataset, 'results_dir': rep.results_dir,
        'encoder': cfg.encoder, 'config': dataclasses.asdict(cfg),
        'features': {s: dict(getattr(rep, s)[1].meta) for s in ('dev', 'test')},
        'topics': {s: len(getattr(rep, s)[0].topics) for s in ('dev', 'test')},
        'rows': {n: _summary(r) for n, r in rows.items()},
        'cv': ({'folds': [{'fold': f['fold'], 'test_topics': f['test_topics'],
                           'chosen': f['chosen'], 'choices': f.get('choices', {}),
                           'trainings': f.get('trainings'),
                           'rows': {n: r['mean'] for n, r in f['rows'].items()},
                           'baselines': {n: _fold_baseline(r) for n, r in f['rows'].items()
                                         if 'train_F1@20' in r}}
                          for f in cv['folds']],
                'merged': {n: _summary(r) for n, r in cv['merged'].items()}} if cv else None),
        'run_files': {},
        'variants': [dataclasses.asdict(v) for v in rep.variants],
        'base_configs': {
            'colt': [dataclasses.asdict(c) for c in base_configs(cfg, paper=False)],
            'paper': [dataclasses.asdict(c) for c in base_configs(cfg, paper=True)]},
        'irrelevant_thresholds': {p: cfg.threshold_for(p) for p in cfg.protocols},
        'ttc_steps': {p: cfg.ttc_steps_for(p, base_configs(cfg, paper=False)[1].num_steps)
                      for p in cfg.protocols},
        'choices': choices_lib.evidence_for(cfg.config_dir, cfg.choice_flagfiles()),
        'seconds': time.perf_counter() - t0,
        'compute': compute_time(rep.rows_root),
    }
    if previous:
      payload['previous'] = previous
    for k in ('features',):
      for s in payload[k].values():
        s.pop('path', None)
    with results:
      payload['run_files'] = rep.write_run_files(rows, cv, results)
      atomic.write_json(results.path('results.json'), payload)
    if report:  # from the saved results.json, as --report_only renders it: one rendering
      write_report(cfg, log=log)
    return payload


def _previous(cfg: ReproduceConfig, previous_results: str) -> Optional[dict]:
  """The `previous` summary a new payload carries (see `run`); checked before any work."""
  from colt_jax.reproduction import report_sections as sections_lib
  if previous_results:
    if not os.path.isfile(previous_results):
      raise InputError(f'--previous_results: {previous_results}: no such file')
    try:
      old = read_json(previous_results)
    except json.JSONDecodeError as e:
      raise InputError(f'--previous_results: {previous_results}, line {e.lineno}: not JSON '
                       f'({e.msg})') from None
    if not isinstance(old, dict) or 'rows' not in old:
      raise InputError(f'--previous_results: {previous_results} is not a results.json of '
                       'experiments/reproduce.py')
    return sections_lib.previous_summary(old, f'`{previous_results}`')
  current = read_json(os.path.join(cfg.results_path, 'results.json')) or {}
  return current.get('previous')


def compute_time(rows_root: str) -> dict:
  """{'seconds', 'timed', 'rows'}: the summed compute time of every cached row and choice
  under `rows_root` (each records its own, trainings included), and how many are timed
  (rows cached before rows recorded their time are not)."""
  seconds, timed, rows = 0.0, 0, 0
  for folder, _, files in os.walk(rows_root):
    for name in files:
      if name.endswith('.json') and not name.startswith('.'):  # not the manifest
        record = read_json(os.path.join(folder, name)) or {}
        rows += 1
        if 'seconds' in record:
          seconds += float(record['seconds'])
          timed += 1
  return {'seconds': seconds, 'timed': timed, 'rows': rows}


def topic_stats(cfg: ReproduceConfig) -> dict:
  """topic -> {photos, relevant_fraction, clusters} of every dev and test topic (its pool:
  the rGT photos) for the report's per-topic analysis."""
  data_dir = data_lib.resolve(cfg.dataset, 'dev', cfg.data_dir).data_dir
  out = {}
  for split_name in ('dev', 'test'):
    split = data_lib.load_split(cfg.dataset, data_dir, split_name)
    for t, gt in split.ground_truth.items():
      n = len(gt.relevance)
      out[str(t)] = {'photos': n, 'clusters': gt.num_clusters,
                     'relevant_fraction': len(gt.relevant_ids) / n if n else 0.0}
  return out


def write_report(cfg: ReproduceConfig, payload: Optional[Mapping] = None,
                 log: Callable = print, previous_results: str = '') -> str:
  """Writes the markdown report from `payload` (default: the saved results.json, which gains
  the summary of `previous_results` as its `previous` when that is given)."""
  from colt_jax.reproduction import report as report_lib
  outputs.check_writable_file(cfg.doc_path, 'the report', flag='--doc')  # before any work
  if payload is None:
    path = os.path.join(cfg.results_path, 'results.json')
    payload = read_json(path)
    if payload is None:
      raise InputError(f'{path}: no results yet; run experiments/reproduce.py first')
    if previous_results:
      payload['previous'] = _previous(cfg, previous_results)
      atomic.write_json(path, payload)
  doc = cfg.doc_path
  from colt_jax.reproduction.diagnostics import head_quality
  from colt_jax.reproduction.diagnostics import headroom
  from colt_jax.reproduction.diagnostics import relevance_models
  from colt_jax.reproduction.diagnostics import relevance_signals
  from colt_jax.reproduction.diagnostics import steps_quality
  heads = read_json(head_quality.heads_path(cfg.dataset))  # experiments/diagnose.py --what heads's
  steps = [d for d in map(read_json, steps_quality.results_paths(cfg.dataset)) if d]
  # experiments/diagnose.py --what steps's: longer training, then each larger phi
  # The recommended method's dev choice: its candidates' inner scores on dev, from the row cache.
  rows_root = cfg.rows_dir or os.path.join(cfg.workdir or os.path.join('work', 'reproduce',
                                                                       cfg.dataset), 'rows')
  saved_row = row_cache.RowCache(rows_root, own_folder=False).saved_row
  recommended = recommendation.official_choice(saved_row, 'pool')
  # Without training: parameters that travel, from the row cache's travel records.
  travel_lines = (report_travel.section(saved_row, cfg.folds, cfg.fold_seed,
                                        model_free_rule.INNER_FOLDS) if cfg.folds >= 2 else [])
  report_lib.write_markdown(payload, doc, command=cfg.command(), results_dir=cfg.results_path,
                            topic_stats=topic_stats(cfg), heads=heads, phi_steps=steps,
                            headroom=read_json(headroom.headroom_path(cfg.dataset)),
                            relevance=read_json(relevance_models.relevance_path(cfg.dataset)),
                            relevance_signals=read_json(
                                relevance_signals.signals_path(cfg.dataset)),
                            recommended=recommended, travel=travel_lines)
  log(f'wrote {doc}')
  return doc
