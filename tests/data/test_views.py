"""Tests of colt_jax.data.views: the multi-view store (text, descriptors, metadata)."""
import numpy as np
import pytest

from colt_jax.data import features as features_lib
from colt_jax.data import views
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError


def _unit(x):
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def _raw(n, rng):
  return views.RawViews(
      photo_index={f'p{i}': i for i in range(n)},
      descriptors=rng.normal(3.0, 2.0, (n, 5)).astype(np.float32),
      descriptor_names=('CM', 'LBP'), descriptor_dims=(2, 3),
      users=tuple(f'u{i % 3}' for i in range(n)),
      days=tuple(None if i == 0 else f'2013-01-0{i % 2 + 1}' for i in range(n)))


def _store(n, rng, dim=4):
  return features_lib.make_store(
      photos=_unit(rng.normal(size=(n, dim))), photo_ids=[f'p{i}' for i in range(n)],
      queries=_unit(rng.normal(size=(2, dim))), query_ids=[1, 2],
      categories=_unit(rng.normal(size=(3, dim))), category_names=['a', 'b', 'c'],
      encoder='test', dataset='t', split='dev', source='')


def test_query_similarity_stays_text_only_and_parts_mix_photo_cosines():
  rng = np.random.default_rng(0)
  raw, store = _raw(8, rng), _store(8, rng)
  spec = views.ViewSpec(descriptors=('CM', 'LBP'), descriptor_weight=2.0, metadata_weight=0.5)
  out = views.apply(views.fit(spec, raw, [f'p{i}' for i in range(8)]), raw, store)
  total = np.sqrt(1 + 4 + 0.25)
  assert out.dim == 4 + 5 + 2 * spec.buckets
  # Query-photo cosines: the text cosines times one constant, so the order is the text order.
  np.testing.assert_allclose(np.asarray(out.photos) @ np.asarray(out.queries).T,
                             np.asarray(store.photos) @ np.asarray(store.queries).T / total,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.linalg.norm(out.queries, axis=1), 1.0, rtol=1e-6)
  # Photo-photo cosine, by a plain transcription of the module docstring.
  x = raw.descriptors.astype(np.float64)
  z = [(x[:, s] - x[:, s].mean(0)) / x[:, s].std(0) for s in (slice(0, 2), slice(2, 5))]
  d = np.concatenate([_unit(b) for b in z], axis=1) / np.sqrt(2)
  same_user = np.array([[raw.users[i] == raw.users[j] for j in range(8)] for i in range(8)])
  same_day = np.array([[raw.days[i] is not None and raw.days[i] == raw.days[j]
                        for j in range(8)] for i in range(8)])
  t = np.asarray(store.photos, np.float64)
  expected = (t @ t.T + 4 * d @ d.T + 0.25 * (same_user.astype(float) + same_day) / 2) / total ** 2
  got = np.asarray(out.photos, np.float64) @ np.asarray(out.photos, np.float64).T
  np.testing.assert_allclose(got, expected, atol=2e-5)  # hashing may collide: none here
  assert out.meta['views']['name'] == 'text+descvis2x2+meta0.5'


def test_statistics_come_from_the_training_photos_only():
  rng = np.random.default_rng(1)
  raw = _raw(10, rng)
  spec = views.ViewSpec(descriptors=('LBP',))
  train = [f'p{i}' for i in range(6)]
  fitted = views.fit(spec, raw, train)
  np.testing.assert_allclose(fitted.mean['LBP'], raw.descriptors[:6, 2:].mean(0), rtol=1e-5)
  changed = raw.descriptors.copy()
  changed[6:] += 100.0  # held-out photos change: the transform does not
  refit = views.fit(spec, views.RawViews(**{**raw.__dict__, 'descriptors': changed}), train)
  np.testing.assert_allclose(refit.mean['LBP'], fitted.mean['LBP'])
  again = views.ViewTransform.from_dict(fitted.to_dict())
  assert again.spec == spec and again.num_photos == 6
  np.testing.assert_allclose(again.std['LBP'], fitted.std['LBP'])


def test_text_only_is_the_store_itself_and_bad_input_is_named():
  rng = np.random.default_rng(2)
  raw, store = _raw(4, rng), _store(4, rng)
  assert views.apply(views.fit(views.ViewSpec(), raw, []), raw, store) is store
  with pytest.raises(ConfigError, match='descriptors'):
    views.ViewSpec(descriptors=('SIFT',))
  with pytest.raises(InputError, match='photo p9'):
    views.fit(views.ViewSpec(descriptors=('CM',)), raw, ['p9'])
  with pytest.raises(InputError, match='format'):
    views.ViewTransform.from_dict({'format': 'x'})


def test_real_div400_views(div400_root):
  from colt_jax.data import mediaeval
  dev = mediaeval.read_div400(div400_root, 'dev')
  small = type(dev)(dataset=dev.dataset, split=dev.split, root=dev.root, topics=dev.topics[:2],
                    photos={t.number: dev.photos[t.number] for t in dev.topics[:2]},
                    ground_truth={t.number: dev.ground_truth[t.number] for t in dev.topics[:2]})
  raw = views.read_raw([small])
  assert raw.descriptor_dims == (9, 81, 11, 99, 64, 44, 396, 81, 16, 144)
  assert raw.descriptors.shape == (len(raw.photo_index), 945)
  first = raw.photo_index['4914949671']
  assert raw.users[first] == 'Fergal Mac Eoinin' and raw.days[first] == '2010-08-14'


def test_statistics_are_never_nan():
  rng = np.random.default_rng(3)
  raw = _raw(4, rng)
  spec = views.ViewSpec(descriptors=('CM',))
  with pytest.raises(InputError, match='no training photos'):
    views.fit(spec, raw, [])  # the mean of no photos would be NaN
  info = views.fit(spec, raw, ['p0', 'p1']).to_dict()
  info['mean']['CM'][1] = float('nan')
  with pytest.raises(InputError, match=r'model: view statistics mean\[CM\] holds a non-finite'):
    views.ViewTransform.from_dict(info, where='model')


def test_token_parts_name_each_view_in_row_order():
  """phi's per-view token parts (--view_tokens): text, each descriptor, user, day, summing to
  the row; each part's cosine of two photos is that view's own cosine."""
  rng = np.random.default_rng(5)
  raw, store = _raw(8, rng), _store(8, rng)
  assert views.token_parts(store) == (('text', 4),)
  spec = views.ViewSpec(descriptors=('LBP', 'CM'), descriptor_weight=1.0, metadata_weight=0.5,
                        buckets=16)
  out = views.apply(views.fit(spec, raw, [f'p{i}' for i in range(8)]), raw, store)
  parts = views.token_parts(out)
  assert parts == (('text', 4), ('LBP', 3), ('CM', 2), ('user', 16), ('day', 16))
  bounds = np.cumsum([0] + [s for _, s in parts])
  rows = np.asarray(out.photos, np.float64)
  user = rows[:, bounds[3]:bounds[4]]
  same_user = np.array([[raw.users[i] == raw.users[j] for j in range(8)] for i in range(8)])
  np.testing.assert_allclose(_unit(user) @ _unit(user).T, same_user, atol=1e-6)
  text = rows[:, :4]
  np.testing.assert_allclose(_unit(text) @ _unit(text).T,
                             _unit(np.asarray(store.photos, np.float64)) @
                             _unit(np.asarray(store.photos, np.float64)).T, atol=1e-6)
  broken = features_lib.FeatureStore(**{**out.__dict__, 'meta': dict(
      out.meta, views=dict(out.meta['views'], parts=[['text', 4], ['CM', 2]]))})
  with pytest.raises(InputError, match=r'view parts .* do not sum to its 41 features'):
    views.token_parts(broken)
