"""Engines built and saved with a feature store: `build` (one of every kind over L2-normalised
rows), and an engine folder ('colt_jax.engine/1': engine.json beside the index) written,
read back, reused while the collection barely changed, or rebuilt (`rebuild`)."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

from absl import logging
import numpy as np

from colt_jax.engines import approximate
from colt_jax.engines import exact as search_lib
from colt_jax.engines import qdrant_index
from colt_jax.util import atomic
from colt_jax.util.errors import InputError
from colt_jax.util.manifest import Manifest


def build(spec: approximate.EngineSpec, rows: np.ndarray):
  """An engine of kind `spec.name` over the L2-normalised `rows` [M, d]."""
  if spec.name == 'exact':
    return search_lib.ExactIndex(rows)
  if spec.name.startswith('faiss-'):
    return approximate.FaissIndex.build(rows, spec)
  approximate.fit(spec, *np.shape(rows))
  return qdrant_index.QdrantIndex.build(rows, spec)


def _utc_now() -> str:
  return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())


def _saved_spec(spec: approximate.EngineSpec) -> dict:
  return {k: v for k, v in dataclasses.asdict(spec).items() if k != 'path'}


def read_saved(folder: str) -> dict:
  """The `engine.json` of a saved engine (InputError naming the file when unusable)."""
  path = os.path.join(folder, approximate.ENGINE_FILE)
  try:
    with open(path) as f:
      info = json.load(f)
  except FileNotFoundError:
    raise InputError(f'{folder}: no saved engine (no {approximate.ENGINE_FILE})') from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: unreadable ({e})') from None
  if not isinstance(info, dict) or info.get('format') != approximate.ENGINE_FORMAT:
    raise InputError(f'{path}: not a saved engine of format {approximate.ENGINE_FORMAT}')
  return info


def load_saved(folder: str, **overrides):
  """The engine saved in `folder` (`rebuild`), searching as it was saved (an IVF engine: the
  nprobe its target recall picked); `overrides`: search-time settings (nprobe, ef_search,
  url)."""
  info = read_saved(folder)
  known = {f.name for f in dataclasses.fields(approximate.EngineSpec)}
  picked = {'nprobe': info['tuning']['nprobe']} if info.get('tuning') else {}
  spec = approximate.EngineSpec(**{k: v for k, v in {**info['spec'], **picked, **overrides}.items()
                       if k in known})
  if spec.name.startswith('faiss-'):
    engine = approximate.FaissIndex.load(os.path.join(folder, info['file']), spec)
    engine.tuning = info.get('tuning')
  elif spec.url:
    engine = qdrant_index.QdrantIndex.open(spec)
  else:
    engine = qdrant_index.QdrantIndex.open(
        dataclasses.replace(spec, path=os.path.join(folder, info['file'])))
  if engine.num_rows != info['rows']:
    raise InputError(
        f'{folder}: the engine holds {engine.num_rows} rows but {approximate.ENGINE_FILE} '
        f'says {info["rows"]}; rebuild it')
  return engine


def _reusable(spec: approximate.EngineSpec, previous: Optional[str], num_rows: int, dim: int,
              changed_fraction: float):
  """The previous IVF engine when its trained cells and codebooks still approximate.fit the rows."""
  if (previous is None or spec.name not in ('faiss-ivf', 'faiss-ivfsq', 'faiss-ivfpq')
      or changed_fraction > approximate.UPDATE_MAX_CHANGE):
    return None
  try:
    old = load_saved(previous)
  except InputError as e:
    logging.warning('%s: the previous engine cannot be reused (%s); rebuilding it', spec.name, e)
    return None
  if old.spec.name != spec.name or old.dim != dim:
    return None
  now, then = approximate.fit(spec, num_rows, dim), old.params
  if not now['nlist'] / 2 <= then['nlist'] <= max(1, now['train_rows'] // approximate.MIN_ROWS_PER_CELL):
    return None
  if spec.name == 'faiss-ivfpq' and (then['pq_bytes'] != now['pq_bytes']
                                     or then['pq_bits'] > now['pq_bits']):
    return None
  return old


def rebuild(spec: approximate.EngineSpec, rows: np.ndarray, folder: str, *, previous: Optional[str] = None,
            changed_fraction: float = 1.0) -> dict:
  """Builds an engine of `spec` over `rows` into the new folder `folder` (`engine.json`, and
  the faiss index or the Qdrant local folder; a Qdrant server's collection is replaced) and
  returns what `engine.json` records: the settings, the parameters it was built with (an IVF
  engine with `target_recall`: the nprobe it picked, and how, in `tuning`), and
  `action`: built (no previous engine), rebuilt, or updated (an IVF engine whose trained cells
  and codebooks in `previous` still approximate.fit the rows and at most approximate.UPDATE_MAX_CHANGE of them
  changed: refilled, not retrained). Raises `EngineSizeError` when it cannot be built for the
  rows' size."""
  if spec.name not in approximate.SAVED_ENGINES:
    raise InputError(f'{spec.name}: nothing to save (expected one of {approximate.SAVED_ENGINES})')
  rows = np.ascontiguousarray(rows, np.float32)
  m, d = rows.shape
  approximate.fit(spec, m, d)  # refuses before any work
  t0 = time.perf_counter()
  os.makedirs(folder, exist_ok=True)
  files, trees = [approximate.ENGINE_FILE], []
  action = 'built' if previous is None else 'rebuilt'
  if spec.name.startswith('faiss-'):
    engine = _reusable(spec, previous, m, d, changed_fraction)
    if engine is not None:
      engine.spec, engine.tuning = spec, None
      engine.refill(rows)
      action = 'updated'
    else:
      engine = approximate.FaissIndex.build(rows, spec)
    file = 'index.faiss'
    files.append(file)
    engine.save(os.path.join(folder, file))
  elif spec.url:
    file = None
    engine = qdrant_index.QdrantIndex.build(rows, spec)
  else:
    file = 'local'
    trees.append(file)
    engine = qdrant_index.QdrantIndex.build(
        rows, dataclasses.replace(spec, path=os.path.join(folder, file)))
  params = engine.params
  if isinstance(engine, qdrant_index.QdrantIndex):
    engine.close()
  info = {'format': approximate.ENGINE_FORMAT, 'name': spec.name, 'spec': _saved_spec(spec),
          'params': params, 'rows': int(m), 'dim': int(d), 'file': file, 'action': action,
          'seconds': round(time.perf_counter() - t0, 3), 'time': _utc_now()}
  if getattr(engine, 'tuning', None):
    info['tuning'] = engine.tuning
  Manifest(files=files, trees=trees).save(folder)  # the folder is one tree of its owner's
  atomic.write_json(os.path.join(folder, approximate.ENGINE_FILE), info)
  return info
