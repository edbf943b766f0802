"""Tests of colt_jax/pairs/relevance_model.py: its features of a pool, fitting, prediction over
token sequences, and the saved model (skops, refused when it holds other types)."""
import json
import os

import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.pairs import relevance_model
from colt_jax.util.errors import InputError

PARTS = (('text', 4), ('CM', 3), ('user', 2), ('HOG', 2))


def _pool(rng, n=40):
  """A pool whose relevance follows the CM part's first dimension."""
  feats = rng.normal(size=(n, 11))
  query = np.concatenate([rng.normal(size=4), np.zeros(7)])
  labels = (feats[:, 4] > feats[:, 5]).astype(np.int64)
  labels[0] = -1
  return query.astype(np.float32), feats.astype(np.float32), labels


def test_pool_features_are_cosine_statistics_and_unit_descriptor_parts():
  rng = np.random.default_rng(0)
  query, feats, _ = _pool(rng, n=6)
  got = relevance_model.pool_features(query, feats, PARTS)
  assert got.shape == (6, 4 + 3 + 2)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  cos = unit(feats[:, :4].astype(np.float64)) @ unit(query[:4].astype(np.float64))
  rank = np.argsort(np.argsort(-cos)) / 6
  want = np.concatenate([np.stack([cos, cos - cos.max(), (cos - cos.mean()) / (cos.std() + 1e-6),
                                   rank], 1), unit(feats[:, 4:7]), unit(feats[:, 9:11])], 1)
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert relevance_model.pool_features(query, feats, (('text', 11),)).shape == (6, 4)
  with pytest.raises(InputError, match=r'rows of 11 features do not hold the parts'):
    relevance_model.pool_features(query, feats, (('text', 4), ('CM', 3)))
  with pytest.raises(InputError, match='an empty pool'):
    relevance_model.pool_features(query, feats[:0], PARTS)


def test_fit_learns_from_the_descriptors_and_predicts_token_sequences():
  rng = np.random.default_rng(1)
  model = relevance_model.fit([_pool(rng) for _ in range(20)], PARTS,
                              relevance_model.RelevanceConfig(max_iter=50))
  assert model.num_photos == 20 * 39  # the unlabelled photo of each pool left out
  query, feats, labels = _pool(np.random.default_rng(2))
  r = model.predict(query, feats)
  assert r.dtype == np.float32 and r.shape == (40,)
  use = labels >= 0
  assert r[use][labels[use] == 1].mean() > r[use][labels[use] == 0].mean() + 0.3
  # Token sequences: token 0 the query; invalid tokens get 0; each pool predicted alone.
  tokens = np.stack([np.concatenate([query[None], feats]), np.concatenate([query[None], feats])])
  valid = np.ones((2, 40), bool)
  valid[1, 30:] = False
  got = model.predict_tokens(tokens, valid)
  np.testing.assert_allclose(got[0], r, atol=1e-6)
  np.testing.assert_allclose(got[1, :30], model.predict(query, feats[:30]), atol=1e-6)
  assert not got[1, 30:].any()
  with pytest.raises(InputError, match=r'need relevant and irrelevant photos \(39 labelled\)'):
    relevance_model.fit([(query, feats, np.r_[-1, np.ones(39, int)])], PARTS)


def test_a_saved_model_predicts_alike_and_foreign_files_are_refused(tmp_path):
  rng = np.random.default_rng(3)
  model = relevance_model.fit([_pool(rng) for _ in range(5)], PARTS,
                              relevance_model.RelevanceConfig(max_iter=20))
  model.save(str(tmp_path / 'm'))
  back = relevance_model.load(str(tmp_path / 'm'))
  assert back.parts == PARTS and back.config == model.config
  query, feats, _ = _pool(rng)
  # Exact: the same parameters (read back) through the same code, in this process.
  np.testing.assert_array_equal(back.predict(query, feats), model.predict(query, feats))
  with pytest.raises(InputError, match=r'no relevance model \(relevance_model.json missing\)'):
    relevance_model.load(str(tmp_path / 'none'))
  info = json.load(open(tmp_path / 'm' / relevance_model.CONFIG_FILE))
  (tmp_path / 'm' / relevance_model.CONFIG_FILE).write_text(json.dumps(dict(info, format='x')))
  with pytest.raises(InputError, match=r"format 'x', expected 'colt_jax.relevance_model/1'"):
    relevance_model.load(str(tmp_path / 'm'))
  # A file that holds another model (a logistic regression) is refused, not loaded.
  import skops.io  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  (tmp_path / 'm' / relevance_model.CONFIG_FILE).write_text(json.dumps(info))
  other = LogisticRegression().fit(rng.normal(size=(10, 2)), np.arange(10) % 2)
  (tmp_path / 'm' / relevance_model.MODEL_FILE).write_bytes(skops.io.dumps(other))
  with pytest.raises(InputError, match=r'holds types a relevance model does not '
                     r'\(sklearn.linear_model'):
    relevance_model.load(str(tmp_path / 'm'))
  # Nor is one that holds a function (skops would build it only when trusted).
  (tmp_path / 'm' / relevance_model.MODEL_FILE).write_bytes(skops.io.dumps({'f': eval}))
  with pytest.raises(InputError, match=r'holds types a relevance model does not '
                     r'\(builtins.eval\)'):
    relevance_model.load(str(tmp_path / 'm'))
  (tmp_path / 'm' / relevance_model.MODEL_FILE).write_bytes(b'not a zip')
  with pytest.raises(InputError, match=r'relevance_model.skops: not a skops file'):
    relevance_model.load(str(tmp_path / 'm'))
  # A folder the project did not write is never written into.
  (tmp_path / 'theirs').mkdir()
  (tmp_path / 'theirs' / 'notes.txt').write_text('mine')
  with pytest.raises(InputError, match='theirs'):
    model.save(str(tmp_path / 'theirs'))
  assert sorted(os.listdir(tmp_path / 'theirs')) == ['notes.txt']


def test_split_pools_are_phis_candidates_in_token_order(tiny_synthetic):
  split, store = data.load('synthetic', 'dev', tiny_synthetic)
  pools = relevance_model.split_pools(split, store, num_images=20)
  assert len(pools) == len(split.topics)
  query, feats, labels = pools[0]
  topic = split.topics[0].number
  np.testing.assert_allclose(query, store.query_feature(topic))
  assert feats.shape == (20, store.dim)
  sims = feats @ query
  assert (np.diff(sims) <= 1e-6).all()  # most similar first
  assert set(np.unique(labels)) <= {-1, 0, 1}
  model = relevance_model.fit_split(split, store, 20, relevance_model.RelevanceConfig(max_iter=5))
  assert model.parts == (('text', store.dim),)  # a text store: the cosine features alone
  assert model.num_photos == sum(int((y >= 0).sum()) for *_, y in pools)


def _tampered(model, change):
  """The skops bytes of `model`'s classifier after `change(nodes)` of its first tree."""
  import copy  # pylint: disable=g-import-not-at-top
  import skops.io  # pylint: disable=g-import-not-at-top
  classifier = copy.deepcopy(model.classifier)
  change(classifier)
  return skops.io.dumps(classifier)


def _set_first_split(field, value):
  """A change that sets `field` of the first split node of the classifier's first tree."""
  def change(classifier):
    nodes = classifier._predictors[0][0].nodes  # pylint: disable=protected-access
    nodes[field][int(np.flatnonzero(nodes['is_leaf'] == 0)[0])] = value
  return change


@pytest.mark.parametrize('what,change,reason', [
    ('left child past the end',
     _set_first_split('left', 10_000),
     "a node.s left child outside the tree"),
    ('right child back to its parent (a cycle)',
     _set_first_split('right', 0),
     "a node.s right child outside the tree"),
    ('feature index just past the end',
     _set_first_split('feature_idx', 4 + 5),
     'a feature index outside the 9 features'),
    ('a NaN threshold',
     _set_first_split('num_threshold', np.nan),
     'a threshold that is not finite'),
    ('more input features than the parts give',
     lambda c: setattr(c, 'n_features_in_', 12), '12 input features, expected 9'),
    ('a categorical feature in the bin mapper',
     lambda c: c._bin_mapper.is_categorical_.__setitem__(0, 1),  # pylint: disable=protected-access
     'a malformed bin mapper'),
    ('a bin mapper of another width',
     lambda c: setattr(c._bin_mapper, 'is_categorical_',  # pylint: disable=protected-access
                       np.zeros(3, np.uint8)), 'a malformed bin mapper'),
    ('saved in the middle of its fit (pre-binned input)',
     lambda c: setattr(c, '_in_fit', True), 'a classifier saved in the middle of its fit'),
])
def test_a_tampered_tree_is_refused_at_load_naming_the_file(tmp_path, what, change, reason):
  """A file of allowed types whose trees point outside their arrays crashed scikit-learn's
  predictor (or read out of bounds and ranked silently differently): refused in one line."""
  del what
  rng = np.random.default_rng(4)
  model = relevance_model.fit([_pool(rng) for _ in range(5)], PARTS,
                              relevance_model.RelevanceConfig(max_iter=5))
  model.save(str(tmp_path / 'm'))
  (tmp_path / 'm' / relevance_model.MODEL_FILE).write_bytes(_tampered(model, change))
  with pytest.raises(InputError, match=r'm/relevance_model.skops: not a valid relevance model '
                     rf'\(tree 0: {reason}|relevance_model.skops: not a valid relevance model '
                     rf'\({reason}'):
    relevance_model.load(str(tmp_path / 'm'))


def test_a_pickled_object_array_inside_the_skops_file_is_refused_naming_the_file(tmp_path):
  """An .npy member replaced by an object array (which numpy would unpickle): refused in one
  line naming the file, not an internal error."""
  import io  # pylint: disable=g-import-not-at-top
  import zipfile  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  model = relevance_model.fit([_pool(rng) for _ in range(5)], PARTS,
                              relevance_model.RelevanceConfig(max_iter=5))
  model.save(str(tmp_path / 'm'))
  path = tmp_path / 'm' / relevance_model.MODEL_FILE
  with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as z:
    members = {n: z.read(n) for n in z.namelist()}
  victim = next(n for n in sorted(members) if n.endswith('.npy'))
  pickled = io.BytesIO()
  np.save(pickled, np.array([{'a': 1}, None], dtype=object), allow_pickle=True)
  members[victim] = pickled.getvalue()
  out = io.BytesIO()
  with zipfile.ZipFile(out, 'w') as z:
    for n, data in members.items():
      z.writestr(n, data)
  path.write_bytes(out.getvalue())
  with pytest.raises(InputError, match=r'm/relevance_model.skops: '):
    relevance_model.load(str(tmp_path / 'm'))


@pytest.mark.parametrize('field,value', [('threads', 0), ('max_iter', -1), ('seed', 1.5),
                                         ('learning_rate', float('nan')),
                                         ('l2_regularization', -1.0), ('threads', True)])
def test_a_config_value_it_cannot_use_is_refused_at_load_naming_the_file(tmp_path, field, value):
  """relevance_model.json's config is input: a value fit or predict cannot use (threads 0
  reached threadpoolctl at the first search) is refused when the model is loaded."""
  import json  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(6)
  model = relevance_model.fit([_pool(rng) for _ in range(5)], PARTS,
                              relevance_model.RelevanceConfig(max_iter=5))
  model.save(str(tmp_path / 'm'))
  path = tmp_path / 'm' / relevance_model.CONFIG_FILE
  info = json.loads(path.read_text())
  info['config'][field] = value
  path.write_text(json.dumps(info))
  with pytest.raises(InputError, match=rf'm/{relevance_model.CONFIG_FILE}: malformed relevance '
                     rf'model config \({field} must be'):
    relevance_model.load(str(tmp_path / 'm'))
