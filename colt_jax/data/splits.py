"""Finding a dataset split and its feature store from a dataset name and optional paths.

Defaults: `synthetic` lives in `work/synthetic-seed0` (generated on first use) with its stores
in `features/<split>`; `div400` reads `$DIV400_ROOT` and expects features (made by
`data_prep/extract_features.py`) in `work/features/div400-<encoder>/<split>`; `div150cred`
reads `$DIV150CRED_ROOT`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from colt_jax.data import features as features_lib
from colt_jax.data import mediaeval
from colt_jax.data import synthetic
from colt_jax.data.types import Split
from colt_jax.util.errors import InputError

DATASETS = ('synthetic', 'div400', 'div150cred')
SPLITS = ('dev', 'test')
DEFAULT_SYNTHETIC_DIR = os.path.join('work', 'synthetic-seed0')
_ROOT_VARS = {'div400': 'DIV400_ROOT', 'div150cred': 'DIV150CRED_ROOT'}


@dataclasses.dataclass(frozen=True)
class Paths:
  data_dir: str
  features_dir: Optional[str]


def num_topics(dataset: str, split: str, data_dir: str = '') -> int:
  """The split's number of topics. The synthetic default (no `data_dir`) is counted from its
  settings, without generating it (for checks of flags, before any work)."""
  if (dataset == 'synthetic' and not data_dir
      and synthetic.read_marker(DEFAULT_SYNTHETIC_DIR) is None):
    cfg = synthetic.SyntheticConfig()  # what `resolve` generates there
    if split not in SPLITS:
      raise InputError(f'--split: unknown split {split!r}; expected one of {SPLITS}')
    return cfg.dev_topics if split == 'dev' else cfg.test_topics
  root = resolve(dataset, split, data_dir).data_dir
  return len(load_split(dataset, root, split).topics)


def resolve(dataset: str, split: str, data_dir: str = '', features_dir: str = '',
            encoder: str = 'minilm') -> Paths:
  """The dataset root and the split's feature store directory (None when not found)."""
  if dataset not in DATASETS:
    raise InputError(f'--dataset: unknown dataset {dataset!r}; expected one of {DATASETS}')
  if split not in SPLITS:
    raise InputError(f'--split: unknown split {split!r}; expected one of {SPLITS}')
  if dataset == 'synthetic':
    if not data_dir:
      data_dir = DEFAULT_SYNTHETIC_DIR  # generated on first use (never over foreign files)
      if synthetic.read_marker(data_dir) is None:
        synthetic.ensure(data_dir)
    elif synthetic.read_marker(data_dir) is None:
      raise InputError(
          f'{data_dir} (--data_dir): not a synthetic dataset (no {synthetic.MARKER_FILE}); '
          'for real data pass --dataset div400 or div150cred, or generate one with '
          'data_prep/make_synthetic.py --out <new folder>')
    return Paths(data_dir, features_dir or os.path.join(data_dir, 'features', split))
  if not data_dir:
    data_dir = os.environ.get(_ROOT_VARS[dataset], '')
    if not data_dir:
      raise InputError(f'{dataset}: pass --data_dir or set {_ROOT_VARS[dataset]}')
  if not os.path.isdir(data_dir):
    raise InputError(f'{data_dir} (--data_dir): no such folder (the {dataset} root in the '
                     'official layout)')
  if not features_dir:
    guess = os.path.join('work', 'features', f'{dataset}-{encoder}', split)
    features_dir = guess if os.path.isdir(guess) else None
  return Paths(data_dir, features_dir)


def load_split(dataset: str, data_dir: str, split: str) -> Split:
  return mediaeval.read_split(dataset, data_dir, split)


def load(dataset: str, split: str, data_dir: str = '', features_dir: str = '',
         need_features: bool = True) -> tuple:
  """(Split, FeatureStore or None); checks that the store covers every photo of the split."""
  paths = resolve(dataset, split, data_dir, features_dir)
  data = load_split(dataset, paths.data_dir, split)
  store = None
  if paths.features_dir:
    store = features_lib.load(paths.features_dir)
    check_store_covers(data, store)
  elif need_features:
    raise InputError(f'{dataset}/{split}: no feature store; pass --features_dir (see '
                     'data_prep/extract_features.py)')
  return data, store


def check_store_covers(data: Split, store: features_lib.FeatureStore) -> None:
  """Every topic has a query feature and every photo of every rGT file a photo feature."""
  where = store.meta.get('path', 'feature store')
  missing_q = sorted(set(data.topic_numbers) - {int(q) for q in store.query_ids})
  if missing_q:
    raise features_lib.FeatureStoreError(
        f'{where}: no query feature for topics {missing_q[:5]} of {data.dataset}/{data.split}')
  index = store.photo_index()
  missing = [p for gt in data.ground_truth.values() for p in gt.relevance if p not in index]
  if missing:
    raise features_lib.FeatureStoreError(
        f'{where}: {len(missing)} photos of {data.dataset}/{data.split} have no feature '
        f'(first: {missing[0]})')
