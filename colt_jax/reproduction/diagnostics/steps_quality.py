"""Would more training, or a larger phi, move colt-pairs? Its phi trained longer (or larger) per
cross-validation fold, each checkpoint scored on the fold's held-out topics
(`experiments/diagnose.py --what steps` runs it; `reproduce.py --report_only` renders its tables into
RESULTS.md).

For each fold, phi of the colt-pairs row (seed 0, pool protocol: its configuration, with
`changes` of its size or inputs where given: `CHANGE_FIELDS`) is trained again on the fold's
training topics for the steps given (more than the row's, at another size, or with the
descriptors' appearance tokens), a checkpoint every so many; each checkpoint is scored on
the fold's held-out topics by the pair and relevance AUC of its heads (`head_quality`, over
the photos phi sees) and by the F1@20 (official: per topic) of the row's
own list rule (its w and threshold, chosen on training topics) with that phi, beside the row
itself (its phi at the checkpoint its inner folds chose), paired per topic.

A diagnostic, not a method: every checkpoint is scored on held-out topics, so none may be
chosen by these scores (the rows choose their checkpoint by inner folds).
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import time
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import significance
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.reproduction.cross_validation import Reproduction
from colt_jax.reproduction.diagnostics import head_quality
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction.row_cache import digest
from colt_jax.reproduction import variants as variants_lib
from colt_jax.reproduction.variants import CV_VARIANTS
from colt_jax.train import trainers
from colt_jax.util.errors import InputError

METRICS = ('pair_auc', 'relevance_auc', 'F1@20')
# What `changes` may set: phi's size, and its inputs (PairsTTCConfig fields; integers, flags).
SIZE_FIELDS = ('num_layers', 'model_dim', 'num_heads', 'mlp_ratio')
CHANGE_FIELDS = SIZE_FIELDS + ('appearance_tokens', 'appearance_dim')


def changes_text(changes: Mapping) -> str:
  """'num_layers=8, model_dim=128' (the order of CHANGE_FIELDS; flags as 0 or 1)."""
  return ', '.join(f'{k}={int(changes[k])}' for k in CHANGE_FIELDS if k in changes)


def steps_path(dataset: str, changes: Optional[Mapping] = None) -> str:
  """Where this diagnosis of `dataset` is kept (`reproduce.py --report_only` renders it into
  RESULTS.md; outside docs/results/<dataset>/, which reproduce.py replaces as a whole): one
  file for the row's phi, one per change of its size or inputs `changes` gives."""
  tail = ''.join(f'-{k}{int(changes[k])}' for k in CHANGE_FIELDS if k in (changes or {}))
  return f'docs/results/{dataset}-phi-steps{tail}.json'


def results_paths(dataset: str) -> list:
  """The diagnoses of `dataset` kept by `steps_path` (no other file): the row's size first,
  then the others by CHANGE_FIELDS and their values."""
  base = steps_path(dataset)
  stem = base[:-len('.json')]
  sized = re.compile(re.escape(stem) + '((?:-(?:' + '|'.join(CHANGE_FIELDS) + r')\d+)+)\.json$')
  keyed = []
  for path in glob.glob(stem + '-*.json'):
    match = sized.match(path.replace(os.sep, '/'))
    if match:
      parts = re.findall('-(' + '|'.join(CHANGE_FIELDS) + r')(\d+)', match.group(1))
      keyed.append(([(CHANGE_FIELDS.index(k), int(v)) for k, v in parts], path))
  return ([base] if os.path.exists(base) else []) + [p for _, p in sorted(keyed)]


def topic_scores(params: evaluation.MethodParams, held: tuple, held_viewed: tuple) -> dict:
  """topic -> {'pair_auc', 'relevance_auc', 'F1@20'} of phi at `params` on held-out topics."""
  colt = evaluation.colt_retriever(params)
  split = held_viewed[0]
  out = {}
  for topic, cands in head_quality.by_topic(*held_viewed).items():
    gt = split.ground_truth[topic]
    ids, r, p = colt.pool_heads(cands.query, cands.features, cands.photo_ids)
    out[str(topic)] = {'pair_auc': head_quality.pair_auc(p, ids, gt.clusters),
                       'relevance_auc': head_quality.relevance_auc(r, ids, gt.relevance)}
  run = evaluation.rank_colt(held_viewed[0], held_viewed[1], 'pool', params)
  for topic, m in evaluation.score(held[0], run).per_topic.items():
    out[str(topic)]['F1@20'] = float(m['F1@20'])
  return out


def scored_steps(values, steps: int, every: int) -> list:
  """The checkpoints --scored names, checked: whole steps in [1, steps], multiples of
  --every (the checkpoints training keeps)."""
  out = set()
  for value in values:
    try:
      step = int(value)
    except ValueError:
      raise InputError(f'--scored: {value!r} is not a number of steps') from None
    if not 1 <= step <= steps or step % every:
      raise InputError(f'--scored: {step} is not a checkpoint of --steps {steps} '
                       f'--every {every} (a multiple of {every} in [1, {steps}])')
    out.add(step)
  return sorted(out)


def heading(result: dict) -> str:
  """The report's section title of a diagnosis: steps at the row's size, a size, or other
  inputs."""
  changes = result.get('changes') or {}
  if not changes:
    return 'Would longer training move colt-pairs\' phi?'
  if set(changes) <= set(SIZE_FIELDS):
    return f'Would another size of phi move colt-pairs? ({changes_text(changes)})'
  return f'Would other inputs of phi move colt-pairs? ({changes_text(changes)})'


def section_lines(diagnoses: Sequence[Mapping]) -> list:
  """Markdown of every diagnosis (`results_paths`' order): a heading and `summary_lines`
  each; a size's checkpoints are also paired with the row's size at the same step."""
  same_size = next((d for d in diagnoses if not d.get('changes')), None)
  out = []
  for diagnosis in diagnoses:
    base = same_size if diagnosis.get('changes') else None
    out += [f'## {heading(diagnosis)}', ''] + summary_lines(diagnosis, base)
  return out


def _paired(topics: Mapping, step: str, metric: str, base: Mapping, base_step: str) -> str:
  """`step`'s `metric` minus `base_step`'s in `base`, paired over the topics both score."""
  a = {k: t[step][metric] for k, t in topics.items()
       if t[step].get(metric) is not None and k in base
       and base[k].get(base_step, {}).get(metric) is not None}
  b = {k: base[k][base_step][metric] for k in a}
  return significance.paired_difference(a, b).text() if len(a) >= 2 else '-'


def summary_lines(result: Mapping, same_size: Optional[Mapping] = None) -> list:
  """Markdown: each checkpoint's means and its paired differences from the row's phi (and,
  given `same_size`, the row's size trained alike, from F1@20 at the same step)."""
  topics = result['topics']
  changes = result.get('changes') or {}
  row = result.get('row_size') or {}
  trained = (f'trained again with {changes_text(changes)} (the row: '
             f'{changes_text({k: v for k, v in row.items() if k in changes}) or "-"}), its '
             'other settings the row\'s,' if changes else 'trained longer')
  out = [f'Generated by `{result["command"]}` over {len(result["folds"])} of '
         f'{result["of_folds"]} folds ({len(topics)} held-out topics): `{result["variant"]}` '
         f'phi (seed 0, pool) {trained} on each fold\'s training topics; each checkpoint '
         'against the row\'s own phi (the checkpoint its inner folds chose), paired per topic '
         '(95% bootstrap interval). Scored on held-out topics: a diagnostic, nothing chosen by it.'
         + (' The last column pairs each checkpoint with the row\'s phi trained alike (same '
            'seed, same step: "Would longer training move colt-pairs\' phi?"): the change\'s '
            'own effect, apart from the steps\'.' if same_size else ''),
         '', '| phi | pair AUC | relevance AUC | F1@20 | pair AUC - row | relevance AUC - row '
         '| F1@20 - row |' + (' F1@20 - row\'s phi, same step |' if same_size else ''),
         '|---|---|---|---|---|---|---|' + ('---|' if same_size else '')]
  for step in ['row'] + [str(s) for s in result['scored_steps']]:
    cells = []
    for metric in METRICS:
      values = [t[step][metric] for t in topics.values() if t[step].get(metric) is not None]
      cells.append(f'{np.mean(values):.4f}' if values else '-')
    for metric in ('pair_auc', 'relevance_auc', 'F1@20'):
      cells.append('-' if step == 'row' else _paired(topics, step, metric, topics, 'row'))
    if same_size:
      cells.append('-' if step == 'row' else
                   _paired(topics, step, 'F1@20', same_size['topics'], step))
    label = 'row (chosen checkpoint)' if step == 'row' else f'{step} steps'
    out.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return out + ['']


def run(cfg: ReproduceConfig, steps: int, every: int, scored: Sequence[int],
        log: Callable = print, changes: Optional[Mapping] = None) -> dict:
  """Every fold's longer (or, with `changes`, resized) phi trained (reused when its work
  folder holds it) and scored: {'variant', 'changes', 'row_size', 'folds': [{'fold', 'tag',
  'row_ttc_step', 'row_num_steps', 'workdir', 'train_s'}], 'of_folds', 'scored_steps',
  'topics': {topic: {'row' | '<step>': {metric: value}}}}."""
  changes = dict(changes or {})
  unknown = sorted(set(changes) - set(CHANGE_FIELDS))
  if unknown:
    raise InputError(f'changes: {", ".join(unknown)}: not a size or input of phi '
                     f'({", ".join(CHANGE_FIELDS)})')
  row_size = {}
  variant = variants_lib.row(CV_VARIANTS[0])
  rep = Reproduction(cfg, log)
  rep.load()
  name = f'{variant.name} (seed 0, pool)'
  topics, folds = {}, []
  for fold, tag, train, held, row in rep.fold_rows(name):
    params = evaluation.MethodParams(**row['params'])
    train_viewed, held_viewed = rep.viewed(variant.view_spec, train, held)
    base = PairsTTCConfig(**row['ttc_config'])
    row_size = {k: getattr(base, k) for k in CHANGE_FIELDS}
    longer = dataclasses.replace(base, num_steps=steps, checkpoint_every=every,
                                 max_to_keep=steps // every + 1, **changes)
    key = {k: v for k, v in dataclasses.asdict(longer).items() if k != 'workdir'}
    for field in ('appearance_tokens', 'appearance_dim'):  # added since: at their defaults,
      if not key[field]:  # the folders of the trainings made before them
        del key[field]
    longer = dataclasses.replace(longer, workdir=os.path.join(
        rep.root, 'train', tag, f'ttc-steps-{digest(key)}'))
    t0 = time.perf_counter()
    size = changes_text(changes) or 'the row\'s phi'
    log(f' fold {fold.index}: phi ({size}) for {steps} steps -> {longer.workdir}')
    trainers.train_ttc(longer, split_data=train_viewed, progress=False)
    train_s = time.perf_counter() - t0
    log(f'  trained in {train_s:.0f} s; scoring {len(fold.test_topics)} '
        'held-out topics')
    for topic, s in topic_scores(params, held, held_viewed).items():
      topics.setdefault(topic, {})['row'] = s
    for step in scored:
      at = dataclasses.replace(params, ttc_checkpoint=longer.workdir, ttc_step=step)
      for topic, s in topic_scores(at, held, held_viewed).items():
        topics[topic][str(step)] = s
    folds.append({'fold': fold.index, 'tag': tag, 'row_ttc_step': params.ttc_step,
                  'row_num_steps': base.num_steps, 'workdir': longer.workdir,
                  'train_s': round(train_s, 1)})
  return {'variant': variant.name, 'changes': changes, 'row_size': row_size,
          'folds': folds, 'of_folds': cfg.folds,
          'scored_steps': list(scored), 'topics': topics}
