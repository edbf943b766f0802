"""Would more training move colt-pairs? Its phi trained longer, scored on held-out topics.

  python experiments/phi_steps.py --dataset div400 --data_dir ../shared/data/div400

After `experiments/reproduce.py` (its cross-validation rows): for each fold, phi of the
colt-pairs row (seed 0, pool protocol: its configuration, 300 steps on 2 cores) is trained
again on the fold's training topics for --steps steps, a checkpoint every --every; each
checkpoint is scored on the fold's held-out topics by the pair and relevance AUC of its heads
(`head_quality`, over the photos phi sees) and by the F1@20 (official: per topic) of the
row's own list rule (its w and threshold, chosen on training topics) with that phi. The row
itself (its phi at the checkpoint its inner folds chose) is the reference; each checkpoint is
paired with it per topic (95% bootstrap interval, colt_jax.significance).

A diagnostic, not a method: every checkpoint is scored on held-out topics, so none of them
may be chosen by these scores (the rows choose their checkpoint by inner folds). It measures
whether the 300-step budget bounds colt-pairs (RESULTS.md's analysis). Writes --out (default
docs/results/<dataset>-phi-steps.json, which `reproduce.py --report_only` renders into
RESULTS.md) and prints the table; trainings go to the
reproduction's work folder (reused when there). About 10 minutes per fold at 1000 steps on 2
cores.
"""
from __future__ import annotations

import dataclasses
import os
import time

from absl import flags
from absl import logging
import numpy as np

from colt_jax import cli
from colt_jax import configs
from colt_jax import evaluation
from colt_jax import outputs
from colt_jax import significance
from colt_jax.errors import InputError
from colt_jax.train import trainers
from cross_validation import Reproduction
import head_quality
from variants import CV_VARIANTS, VARIANTS, ReproduceConfig, digest

_DATASET = flags.DEFINE_enum('dataset', 'div400', ['div400', 'div150cred'],
                             'Dataset of the reproduction (official layout).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Official layout root (default $DIV400_ROOT).')
_FOLDS = flags.DEFINE_integer('folds', 5, 'The reproduction\'s cross-validation folds.',
                              lower_bound=2, upper_bound=100)
_STEPS = flags.DEFINE_integer('steps', 1000, 'Training steps of the longer phi.',
                              lower_bound=1, upper_bound=1_000_000)
_EVERY = flags.DEFINE_integer('every', 100, 'A checkpoint every this many steps (each scored).',
                              lower_bound=1, upper_bound=1_000_000)
_SCORED = flags.DEFINE_list('scored', ['100', '200', '300', '500', '1000'],
                            'Checkpoints scored (steps: multiples of --every, <= --steps).')
_OUT = flags.DEFINE_string('out', '', 'The JSON written (default '
                           'docs/results/<dataset>-phi-steps.json).')

METRICS = ('pair_auc', 'relevance_auc', 'F1@20')


def steps_path(dataset: str) -> str:
  """Where this diagnosis of `dataset` is kept (`reproduce.py --report_only` renders it into
  RESULTS.md; outside docs/results/<dataset>/, which reproduce.py replaces as a whole)."""
  return f'docs/results/{dataset}-phi-steps.json'


def _scores(params: evaluation.MethodParams, held: tuple, held_viewed: tuple) -> dict:
  """topic -> {'pair_auc', 'relevance_auc', 'F1@20'} of phi at `params` on held-out topics."""
  colt = evaluation.colt_retriever(params)
  split = held_viewed[0]
  out = {}
  by_topic = head_quality._by_topic(*held_viewed)  # pylint: disable=protected-access
  for topic, cands in by_topic.items():
    gt = split.ground_truth[topic]
    ids, r, p = colt.pool_heads(cands.query, cands.features, cands.photo_ids)
    out[str(topic)] = {'pair_auc': head_quality.pair_auc(p, ids, gt.clusters),
                       'relevance_auc': head_quality.relevance_auc(r, ids, gt.relevance)}
  run = evaluation.rank_colt(held_viewed[0], held_viewed[1], 'pool', params)
  for topic, m in evaluation.score(held[0], run).per_topic.items():
    out[str(topic)]['F1@20'] = float(m['F1@20'])
  return out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out_path = _OUT.value or steps_path(_DATASET.value)
  outputs.check_writable_file(out_path, 'the table', flag='--out')
  scored = scored_steps(_SCORED.value, _STEPS.value, _EVERY.value)
  cfg = ReproduceConfig(dataset=_DATASET.value, data_dir=_DATA_DIR.value, folds=_FOLDS.value,
                        rows_dir=f'docs/results/{_DATASET.value}-rows', progress=False)
  variant = next(v for v in VARIANTS if v.name == CV_VARIANTS[0])
  rep = Reproduction(cfg, print)
  rep.load()
  name = f'{variant.name} (seed 0, pool)'
  topics = {}  # topic -> {'row': {...}, '<step>': {...}}
  folds = []
  for fold, tag, train, held in rep.cv_folds():
    row = rep.saved_row(tag, name)
    if row is None:
      print(f' fold {fold.index}: no row {rep.row_path(tag, name)}; run reproduce.py first')
      continue
    params = evaluation.MethodParams(**row['params'])
    train_viewed, held_viewed = rep.viewed(variant.view_spec, train, held)
    base = configs.TTCConfig(**row['ttc_config'])
    longer = dataclasses.replace(base, num_steps=_STEPS.value, checkpoint_every=_EVERY.value,
                                 max_to_keep=_STEPS.value // _EVERY.value + 1)
    key = {k: v for k, v in dataclasses.asdict(longer).items() if k != 'workdir'}
    longer = dataclasses.replace(longer, workdir=os.path.join(
        rep.root, 'train', tag, f'ttc-steps-{digest(key)}'))
    t0 = time.perf_counter()
    print(f' fold {fold.index}: phi for {_STEPS.value} steps -> {longer.workdir}', flush=True)
    trainers.train_ttc(longer, split_data=train_viewed, progress=False)
    print(f'  trained in {time.perf_counter() - t0:.0f} s; scoring {len(fold.test_topics)} '
          'held-out topics', flush=True)
    for topic, s in _scores(params, held, held_viewed).items():
      topics.setdefault(topic, {})['row'] = s
    for step in scored:
      at = dataclasses.replace(params, ttc_checkpoint=longer.workdir, ttc_step=step)
      for topic, s in _scores(at, held, held_viewed).items():
        topics[topic][str(step)] = s
    folds.append({'fold': fold.index, 'tag': tag, 'row_ttc_step': params.ttc_step,
                  'row_num_steps': base.num_steps, 'workdir': longer.workdir})
  if not folds:
    raise InputError(f'{rep.rows_root}: no {name} rows of the cross-validation; run '
                     'experiments/reproduce.py first')
  command = (f'python experiments/phi_steps.py --dataset {_DATASET.value} --steps '
             f'{_STEPS.value} --every {_EVERY.value}')
  result = {'command': command, 'variant': variant.name, 'folds': folds, 'of_folds': cfg.folds,
            'scored_steps': scored, 'topics': topics}
  outputs.write_owned_json(out_path, result, 'the table', flag='--out')
  print('\n'.join(summary_lines(result)))
  print(f'wrote {out_path}')


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


def summary_lines(result: dict) -> list:
  """Markdown: each checkpoint's means and its paired difference from the row's phi."""
  topics = result['topics']
  out = [f'Generated by `{result["command"]}` over {len(result["folds"])} of '
         f'{result["of_folds"]} folds ({len(topics)} held-out topics): `{result["variant"]}` '
         'phi (seed 0, pool) trained longer on each fold\'s training topics; each checkpoint '
         'against the row\'s own phi (the checkpoint its inner folds chose), paired per topic '
         '(95% bootstrap interval). Scored on held-out topics: a diagnostic, nothing chosen by it.',
         '', '| phi | pair AUC | relevance AUC | F1@20 | pair AUC - row | F1@20 - row |',
         '|---|---|---|---|---|---|']
  for step in ['row'] + [str(s) for s in result['scored_steps']]:
    cells = []
    for metric in METRICS:
      values = [t[step][metric] for t in topics.values() if t[step][metric] is not None]
      cells.append(f'{np.mean(values):.4f}')
    for metric in ('pair_auc', 'F1@20'):
      if step == 'row':
        cells.append('-')
        continue
      a = {k: t[step][metric] for k, t in topics.items()
           if t[step][metric] is not None and t['row'][metric] is not None}
      b = {k: topics[k]['row'][metric] for k in a}
      cells.append(significance.paired_difference(a, b).text() if len(a) >= 2 else '-')
    label = 'row (chosen checkpoint)' if step == 'row' else f'{step} steps'
    out.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return out + ['']


if __name__ == '__main__':
  cli.run(main)
