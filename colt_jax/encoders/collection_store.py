"""The store a collection run writes (`collection.py`): assembled from the previous store's rows
and the new shards in `<out>.partial/`, written whole with its records (`files.json`) and its
saved engines (`engines`: FAISS indexes, a Qdrant collection; `colt_jax.engines.approximate`), rebuilt over
the new rows or updated, in one atomic replacement of `out` (`meta.json['engines']`). A run
that finds nothing changed rewrites no array (`refresh`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Any, Iterable, Optional

from absl import logging
import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.encoders import collection_records as records_lib
from colt_jax.encoders import shards
from colt_jax.engines import approximate as engines_lib
from colt_jax.engines import saved_engines
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

ENGINES_DIR = 'engines'


def engine_specs(engines: Optional[Iterable[Any]], prev: records_lib.Previous) -> list:
  """The engines the new store keeps: `engines` (names or EngineSpecs), else the previous
  store's; a previous engine of the same name keeps its saved settings."""
  saved = {}
  for name, folder in prev.engines.items():
    try:
      info = saved_engines.read_saved(folder)
      known = {f.name for f in dataclasses.fields(engines_lib.EngineSpec)}
      saved[name] = engines_lib.EngineSpec(**{k: v for k, v in info['spec'].items()
                                              if k in known})
    except (InputError, TypeError, KeyError) as e:
      logging.warning('%s: cannot read the saved engine (%s); building it anew', folder, e)
      saved[name] = engines_lib.EngineSpec(name)
  prev.engine_specs = saved
  if engines is None:
    return list(saved.values())
  out = []
  for e in engines:
    spec = e if isinstance(e, engines_lib.EngineSpec) else saved.get(
        e, engines_lib.EngineSpec(e))
    if spec.name not in engines_lib.SAVED_ENGINES:
      raise InputError(f'--engines: {spec.name} is not an engine to save with the store '
                       f'(expected some of {", ".join(engines_lib.SAVED_ENGINES)}; exact '
                       'search needs no index)')
    if spec.name in [s.name for s in out]:
      raise InputError(f'--engines: {spec.name} is named twice')
    out.append(spec)
  return out


def refresh(out: str, prev: records_lib.Previous, plan: records_lib.Plan, items, source: str,
            partial: str, encoder: Any):
  """Nothing changed: the store keeps its arrays and engines; its records (new modification
  times) and meta.json's changes are rewritten."""
  ids = [str(p) for p in prev.store.photo_ids]
  outputs.write_owned_json(os.path.join(out, records_lib.RECORDS_FILE),
                           records_lib.records_json(plan.records, ids, source,
                                                    records_lib.content_kind(encoder)),
                           'the store\'s file records')
  meta = {k: v for k, v in prev.store.meta.items() if k != 'path'}
  meta['changes'] = dict(plan.changes, engines={n: 'kept' for n in prev.engines},
                         engines_dropped=[])
  meta['bad_images'] = [{'photo_id': items[i].photo_id, 'reason': r}
                        for i, r in sorted(plan.bad.items())]
  outputs.write_owned_json(os.path.join(out, 'meta.json'), meta, 'the store\'s meta.json')
  if os.path.isdir(partial):
    outputs.remove_owned(partial)
  logging.info('%s is up to date with %s', out, source)
  return features_lib.load(out)


def assemble(out, partial, encoder, items, todo, starts, plan, prev, specs, source,
             shard_size, allowed, fraction, t0):
  """The new store from the previous store's rows and the new shards, written whole."""
  encoded, late_bad = {}, []
  for index in range(len(starts)):  # the chief assembles every process's shards
    shard, kept = finished_shard(shards.shard_path(partial, 'photos', index), encoder.dim)
    for pid, row in zip(kept['ids'], shard):
      encoded[pid] = row
    late_bad += [(p, r) for p, r in kept['bad']]
  late = dict(late_bad)
  bad = {i: r for i, r in plan.bad.items()}
  for i, it in enumerate(items):
    if it.photo_id in late:
      bad[i] = late[it.photo_id]
  if len(bad) > allowed:
    raise records_lib.too_many(source, len(items), allowed, fraction, all_bad(plan, items, partial))
  if len(bad) == len(items):
    raise InputError(f'{source}: none of the {len(items)} images can be read; first: '
                     f'{records_lib.first_bad(sorted(bad.items()), items)}')
  dim = int(encoder.dim)
  old_photos = prev.store.photos if prev.reusable else None
  rows, ids = [], []
  for i, it in enumerate(items):
    if i in bad:
      continue
    rows.append(old_photos[plan.reuse[i]] if i in plan.reuse else encoded[it.photo_id])
    ids.append(it.photo_id)
  photos = np.asarray(rows, np.float32).reshape(-1, dim)
  bad_list = [(items[i].photo_id, r) for i, r in sorted(bad.items())]
  if bad_list:
    logging.warning('%d of %d images could not be read and are left out (meta.json '
                    'bad_images lists them); first: %s', len(bad_list), len(items), bad_list[0])
  records = [dataclasses.replace(r, bad=bad[i]) if i in bad and not r.bad else r
             for i, r in enumerate(plan.records)]
  changes = dict(plan.changes, unreadable=len(bad_list),
                 encoded=len(todo))
  store = features_lib.make_store(
      photos=photos, photo_ids=ids, queries=np.zeros((0, dim), np.float32), query_ids=[],
      categories=np.zeros((0, dim), np.float32), category_names=[], encoder=encoder.name,
      dataset='collection', split='all', source=source, normalised=True,
      extra={'encoder_settings': dict(encoder.settings), 'shard_size': shard_size,
             'bad_images': [{'photo_id': p, 'reason': r} for p, r in bad_list],
             'changes': changes, 'engines': {}})
  c = plan.changes
  moved = (c['added'] + c['changed'] + c['removed']) / max(1, len(ids))
  _write(out, store, records_lib.records_json(records, ids, source,
                                             records_lib.content_kind(encoder)),
         specs, prev, moved, t0)
  outputs.remove_owned(partial)
  return features_lib.load(out)


def _write(out: str, store: features_lib.FeatureStore, records: dict, specs,
           prev: records_lib.Previous, changed_fraction: float, t0: float) -> None:
  """Writes the store, its records and its engines into a staging folder, then replaces
  `out` with it (`outputs.replace_dir`: only what the old store's manifest lists is
  removed)."""
  stage = outputs.staging_dir(out)
  inner = os.path.join(stage, 'store')
  keep = False
  try:
    features_lib.write(inner, store)
    atomic.write_json(os.path.join(inner, records_lib.RECORDS_FILE), records, indent=None,
                      separators=(',', ':'))
    meta = dict(store.meta)
    photos = np.asarray(store.photos)
    for spec in specs:
      rel = f'{ENGINES_DIR}/{spec.name}'
      info = saved_engines.rebuild(spec, photos, os.path.join(inner, rel),
                                 previous=prev.engines.get(spec.name),
                                 changed_fraction=changed_fraction)
      meta['engines'][spec.name] = {'path': rel, 'action': info['action'],
                                    'params': info['params'], 'rows': info['rows'],
                                    'seconds': info['seconds']}
    meta['changes'] = dict(meta['changes'], engines={
        n: e['action'] for n, e in meta['engines'].items()},
        engines_dropped=sorted(set(prev.engines) - set(meta['engines'])))
    meta['seconds'] = round(time.perf_counter() - t0, 3)
    atomic.write_json(os.path.join(inner, 'meta.json'), meta)
    keep = True  # a refusal now leaves the finished store in the staging folder, named
    outputs.replace_dir(inner, out, 'a feature store', flag='--out')
    keep = False
  finally:
    if not keep:
      shutil.rmtree(stage, ignore_errors=True)
  if os.path.isdir(stage) and not os.listdir(stage):
    os.rmdir(stage)


def all_bad(plan: Optional[records_lib.Plan], items, partial: str) -> list:
  """[(photo id, reason)]: those the check found, then those the shards found."""
  bad = [(items[i].photo_id, r) for i, r in sorted(plan.bad.items())] if plan else []
  for name in sorted(os.listdir(partial)) if os.path.isdir(partial) else ():
    if name.endswith('.npy.json'):
      with open(os.path.join(partial, name)) as f:
        bad += [tuple(b) for b in json.load(f)['bad']]
  return bad


def finished_shard(path: str, dim: int) -> Optional[tuple]:
  """(features, {'ids', 'bad'}) of a finished shard; None when it is not finished."""
  kept = _load_kept(path)
  if kept is None:
    return None
  feats = shards.load_shard(path, len(kept['ids']), dim)
  return None if feats is None else (feats, kept)


def _load_kept(path: str) -> Optional[dict]:
  """The ids (and unreadable images) of a finished shard, None when it is not finished."""
  try:
    with open(path + '.json') as f:
      kept = json.load(f)
  except (FileNotFoundError, json.JSONDecodeError):
    return None
  if not isinstance(kept, dict) or 'ids' not in kept or 'bad' not in kept:
    return None
  return kept
