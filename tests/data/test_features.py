"""Tests of the feature store (colt_jax/data/features.py)."""
import json
import os

import numpy as np
import pytest

from colt_jax.data import features


def _store(n=5, t=2, c=3, d=4, seed=0, **kw):
  rng = np.random.default_rng(seed)
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
  args = dict(photos=unit(rng.normal(size=(n, d))), photo_ids=[str(100 + i) for i in range(n)],
              queries=unit(rng.normal(size=(t, d))), query_ids=list(range(1, t + 1)),
              categories=unit(rng.normal(size=(c, d))),
              category_names=[f'cat {i}' for i in range(c)], encoder='test', dataset='toy',
              split='dev', source='unit test')
  args.update(kw)
  return features.make_store(**args)


def test_round_trip_is_memory_mapped(tmp_path):
  store = _store()
  path = features.write(str(tmp_path / 'fs'), store)
  loaded = features.load(path)
  assert isinstance(loaded.photos, np.memmap)
  np.testing.assert_array_equal(loaded.photos, store.photos)  # bytes read back: exact
  assert list(loaded.photo_ids) == list(store.photo_ids)
  assert list(loaded.query_ids) == [1, 2]
  assert loaded.meta['encoder'] == 'test' and loaded.meta['dim'] == 4
  assert loaded.meta['counts'] == {'photos': 5, 'queries': 2, 'categories': 3}
  assert loaded.meta['normalisation'] == 'l2'
  np.testing.assert_array_equal(loaded.query_feature(2), store.queries[1])
  np.testing.assert_array_equal(loaded.rows_for(['104', '100']), [4, 0])


def test_write_replaces_atomically_and_leaves_no_temp(tmp_path):
  path = str(tmp_path / 'fs')
  features.write(path, _store(seed=0))
  second = _store(seed=1)
  features.write(path, second)
  np.testing.assert_array_equal(features.load(path).photos, second.photos)
  assert sorted(os.listdir(tmp_path)) == ['fs']


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
  def boom(*a, **k):
    raise OSError('disk full')
  monkeypatch.setattr(np, 'save', boom)
  with pytest.raises(OSError):
    features.write(str(tmp_path / 'fs'), _store())
  assert os.listdir(tmp_path) == []


def test_mismatches_are_clear_errors(tmp_path):
  with pytest.raises(features.FeatureStoreError, match='photos has 5 rows but photo_ids has 4'):
    _store(photo_ids=['1', '2', '3', '4'])
  with pytest.raises(features.FeatureStoreError, match="photo_ids holds '7' more than once"):
    _store(photo_ids=['7', '7', '1', '2', '3'])
  with pytest.raises(features.FeatureStoreError, match='queries has dimension 3'):
    _store(queries=np.eye(3)[:2])
  with pytest.raises(features.FeatureStoreError, match='row 0 has norm 2.0000'):
    _store(photos=2 * np.eye(5, 4))
  with pytest.raises(features.FeatureStoreError, match='NaN'):
    _store(photos=np.full((5, 4), np.nan))
  store = _store()
  with pytest.raises(features.FeatureStoreError, match="photo id '999' has no feature"):
    store.rows_for(['100', '999'])
  with pytest.raises(features.FeatureStoreError, match='no query feature for topic 9'):
    store.query_feature(9)


def test_load_rejects_broken_stores(tmp_path):
  with pytest.raises(features.FeatureStoreError, match='no meta.json'):
    features.load(str(tmp_path))
  path = features.write(str(tmp_path / 'fs'), _store())
  with open(os.path.join(path, 'meta.json'), 'w') as f:
    f.write('{"format": ')
  with pytest.raises(features.FeatureStoreError, match=r'meta.json:1: malformed JSON'):
    features.load(path)
  path = features.write(str(tmp_path / 'fs2'), _store())
  os.remove(os.path.join(path, 'queries.npy'))
  with pytest.raises(features.FeatureStoreError, match='missing queries.npy'):
    features.load(path)
  path = features.write(str(tmp_path / 'fs3'), _store())
  np.save(os.path.join(path, 'photos.npy'), np.ones((5, 6), np.float32))
  with pytest.raises(features.FeatureStoreError, match='dimension 6 but meta.json says dim=4'):
    features.load(path)
  meta_path = os.path.join(features.write(str(tmp_path / 'fs4'), _store()), 'meta.json')
  meta = json.load(open(meta_path))
  meta['format'] = 'other/9'
  json.dump(meta, open(meta_path, 'w'))
  with pytest.raises(features.FeatureStoreError, match="format 'other/9'"):
    features.load(os.path.dirname(meta_path))


def test_non_finite_values_name_the_file_row_and_id(tmp_path):
  with pytest.raises(features.FeatureStoreError,
                     match=r"new feature store: photos: row 2 \(photo id '102'\) is not finite: "
                     'column 1 is NaN'):
    photos = _store().photos.copy()
    photos[2, 1] = np.nan
    _store(photos=photos)
  cases = [('photos', 3, 0, np.nan, "photo id '103'", 'NaN'),
           ('queries', 1, 2, np.inf, "query id '2'", 'inf'),
           ('categories', 0, 3, -np.inf, "category name 'cat 0'", '-inf')]
  for name, row, col, value, who, text in cases:
    path = features.write(str(tmp_path / name), _store())
    file = os.path.join(path, f'{name}.npy')
    arr = np.load(file)
    arr[row, col] = value
    np.save(file, arr)
    with pytest.raises(features.FeatureStoreError) as info:
      features.load(path)
    assert str(info.value).startswith(
        f'{file}: row {row} ({who}) is not finite: column {col} is {text} (1 row(s)'), info.value


def test_meta_json_with_nan_is_refused_with_its_line(tmp_path):
  path = features.write(str(tmp_path / 'fs'), _store())
  meta_path = os.path.join(path, 'meta.json')
  lines = open(meta_path).read().splitlines()
  row = next(i for i, l in enumerate(lines) if '"dim"' in l)
  for constant in ('NaN', 'Infinity', '-Infinity'):
    bad = list(lines)
    bad[row] = f' "dim": {constant},'
    with open(meta_path, 'w') as f:
      f.write('\n'.join(bad) + '\n')
    with pytest.raises(features.FeatureStoreError,
                       match=f'meta.json:{row + 1}: {constant} is not a finite number'):
      features.load(path)


def test_a_store_never_writes_nan_into_meta_json(tmp_path):
  store = _store(extra={'views': {'mean': [0.5, float('nan')]}})
  with pytest.raises(ValueError, match=r'views.mean\[1\] is not a finite number'):
    features.write(str(tmp_path / 'fs'), store)
  assert os.listdir(tmp_path) == []
