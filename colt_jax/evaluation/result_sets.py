"""A method's run over a split as a result set (run files and results.json, one folder per
command: `run_evaluation`), and a run file scored as the official scorer would
(`score_run_file`)."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

from colt_jax.data import features as features_lib
from colt_jax.data.types import Split
from colt_jax.evaluation import methods as methods_lib
from colt_jax.evaluation import metrics
from colt_jax.evaluation import runfile
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError


def allowed_ids(split: Split, protocol: str) -> Optional[dict]:
  """The docnos a run file may hold: the topic's rGT photos (pool); anything (global)."""
  if protocol == 'global':
    return None
  return {t: set(gt.relevance) for t, gt in split.ground_truth.items()}


def check_names(methods: Sequence[str], protocols_: Sequence[str]) -> None:
  """Unknown or missing method / protocol names are an `InputError` naming the flag."""
  _check_listed('--method', 'method', methods, methods_lib.METHODS)
  _check_listed('--protocol', 'protocol', protocols_, candidates_lib.PROTOCOLS)


def _check_listed(flag: str, what: str, given: Sequence[str], known: Sequence[str]) -> None:
  if not given:
    raise InputError(f'{flag}: name at least one of {", ".join(known)}')
  for name in given:
    if name not in known:
      raise InputError(f'{flag}: unknown {what} {name!r}; expected some of {", ".join(known)}')


def run_file_name(method: str, protocol: str) -> str:
  return f'{protocol}-{method}.txt'


def run_evaluation(*, dataset: str, split: str, methods: Sequence[str],
                   protocols_: Sequence[str], params: methods_lib.MethodParams, data_dir: str = '',
                   features_dir: str = '', dev_features_dir: str = '', tune_methods: bool = False,
                   out_dir: str = '', log=print) -> dict:
  """Evaluates `methods` on `dataset/split` under each protocol: prints the table and writes,
  into `out_dir` as one set (all or nothing, see `outputs.ResultSet`), a run file per
  (method, protocol) and `results.json` with all metrics. Returns that JSON's payload.

  With `tune_methods`, each tunable method's parameters are first grid-searched on the dev
  split (F1@20, same protocol) and the choice is reported and used.
  """
  from colt_jax.data import splits as data_lib  # pylint: disable=g-import-not-at-top
  check_names(methods, protocols_)
  results = None
  if out_dir:  # refused now, before any computing, if it cannot be written
    results = outputs.ResultSet(out_dir, 'evaluation results', flag='--out_dir')
  need = any(m != 'flickr' for m in methods)
  split_data, store = data_lib.load(dataset, split, data_dir, features_dir, need_features=need)
  dev, grids = None, {**methods_lib.GRIDS, **methods_lib.LEARNED_GRIDS}
  learned = methods_lib.LEARNED_GRIDS
  if any(m in (grids if tune_methods else learned) for m in methods):  # checked first
    dev = data_lib.load(dataset, 'dev', data_dir, dev_features_dir)
    check_same_dim(dev[1], store, split)
  payload = {'dataset': dataset, 'split': split, 'params': dataclasses.asdict(params),
             'data_dir': os.path.abspath(data_lib.resolve(dataset, split, data_dir).data_dir),
             'results': {}}
  rows, runs = {}, {}
  for protocol in protocols_:
    for method in methods:
      if method == 'flickr' and protocol == 'global':
        if 'pool' in protocols_:
          log('flickr: Flickr order exists per topic only: no global row (see its pool row)')
          continue
        log('flickr: Flickr order exists per topic only; scored under the pool protocol')
      method_params = params
      tuning = []
      if tune_methods and method in grids:
        method_params, tuning = methods_lib.tune(method, dev[0], dev[1], protocol, params)
        chosen = {k: getattr(method_params, k) for k in grids[method]}
        log(f'tuned {method} on dev ({protocol}, {methods_lib.TUNE_METRIC}): {chosen}')
      if method in methods_lib.LEARNED_GRIDS and split == 'dev':
        log(f'{method}: fitted on dev and scored on dev: in-sample scores')
      run = methods_lib.rank(method, split_data, store, protocol, method_params, train=dev)
      result = methods_lib.score(split_data, run)
      name = method if len(protocols_) == 1 else f'{method} ({protocol})'
      if method == 'colt' and params.post != 'ttc':
        name = name.replace('colt', f'colt[post={params.post}]')
      elif method == 'colt' and params.selection != 'category':
        name = name.replace('colt', f'colt[selection={params.selection}]')
      rows[name] = result.mean
      runs[name] = (method, protocol, run)
      payload['results'][name] = {
          'method': method, 'protocol': 'pool' if method == 'flickr' else protocol,
          'mean': result.mean, 'per_topic': {str(t): m for t, m in result.per_topic.items()},
          'params': dataclasses.asdict(method_params),
          'tuning': [{'setting': s, methods_lib.TUNE_METRIC: v} for s, v in tuning],
          'run_file': (os.path.join(results.final, run_file_name(method, protocol))
                       if results else None)}
  table = metrics.format_table(rows)
  log(f'{dataset}/{split}: {len(split_data.topics)} topics')
  log(table)
  payload['table'] = table
  if results:
    with results:
      for name, (method, protocol, run) in runs.items():
        runfile.write_run(results.path(run_file_name(method, protocol)), run,
                          run_id=f'colt_jax_{method}_{protocol}',
                          allowed_ids=allowed_ids(split_data, protocol),
                          topics=split_data.topic_numbers)
      atomic.write_json(results.path('results.json'), payload)
    log(f'wrote {results.final}: {len(runs)} run file(s) and results.json')
  return payload


def check_same_dim(dev_store: Optional[features_lib.FeatureStore],
                   store: Optional[features_lib.FeatureStore], split: str = 'test') -> None:
  """Tuning on dev scores the settings on `split`'s features: both stores must come from one
  encoder (one feature dimension)."""
  if dev_store is None or store is None or dev_store.dim == store.dim:
    return
  raise InputError(
      f'--dev_features_dir: the dev store {dev_store.meta.get("path", "?")} has feature '
      f'dimension {dev_store.dim}, but the {split} store {store.meta.get("path", "?")} '
      f'(--features_dir) has {store.dim}; tune on dev features of the same encoder')


def _run_copy_name(run_file: str) -> str:
  name = os.path.basename(run_file)
  return 'run.txt' if name == 'results.json' or name.startswith('.') else name


def score_run_file(*, dataset: str, split: str, run_file: str, protocol: str = 'pool',
                   data_dir: str = '', out_dir: str = '', log=print) -> dict:
  """Validates an existing run file by the official scorer's rules (`runfile.validate_run`;
  under the pool protocol every docno must be a photo of its topic's rGT file) and scores it
  with the official metrics. Returns {'mean', 'per_topic', 'table', ...}.

  With `out_dir`, writes there, as one set (`outputs.ResultSet`), results.json (the layout of
  `run_evaluation`'s, one row named after the file) and a copy of the run file."""
  from colt_jax.data import splits as data_lib  # pylint: disable=g-import-not-at-top
  check_names(['flickr'], [protocol])
  results = None
  if out_dir:  # refused now, before any reading, if it cannot be written
    results = outputs.ResultSet(out_dir, 'evaluation results', flag='--out_dir')
  split_data, _ = data_lib.load(dataset, split, data_dir, need_features=False)
  run = runfile.validate_run(run_file, split_data.topic_numbers,
                             allowed_ids(split_data, protocol))
  result = metrics.evaluate_run(run, split_data.ground_truth)
  name = os.path.basename(run_file)
  per_topic = {str(t): m for t, m in result.per_topic.items()}
  table = metrics.format_table({name: result.mean}, metrics.metric_names())
  out = {'dataset': dataset, 'split': split, 'run_file': run_file, 'protocol': protocol,
         'mean': result.mean, 'per_topic': per_topic, 'table': table}
  if results:
    copy = _run_copy_name(run_file)
    payload = {'dataset': dataset, 'split': split, 'params': {}, 'table': table,
               'data_dir': os.path.abspath(data_lib.resolve(dataset, split, data_dir).data_dir),
               'results': {
        name: {'method': 'run_file', 'protocol': protocol, 'mean': result.mean,
               'per_topic': per_topic, 'params': {}, 'tuning': [],
               'source': os.path.abspath(run_file),
               'run_file': os.path.join(results.final, copy)}}}
    with results:
      atomic.write_bytes(results.path(copy), _read_bytes(run_file))
      atomic.write_json(results.path('results.json'), payload)
    log(f'wrote {results.final}: results.json and a copy of {name}')
    out['out_dir'] = results.final
  return out


def _read_bytes(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()
