"""Checkpoints and model directories written before restore and give the same outputs (to float32
rounding, and the same lists up to ties: float_compare, as the fixtures were computed on another
machine): tests/fixtures/old_checkpoints/ holds tiny g and phi as the trainers saved them (the
paper's phi, the `colt` row's inputs, a `colt-pairs` phi with relevance and pair heads,
relational tokens and appearance parts), model directories, and the outputs they gave
(tests/fixtures/make_old_checkpoints.py wrote them)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from colt_jax.inference import retriever
from colt_jax.inference import settings as settings_lib
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from colt_jax.train import configs
from colt_jax.train import loop
from colt_jax.train import restore
from float_compare import assert_close, assert_same_result
from checkout import FIXTURES, REPO  # pylint: disable=g-bad-import-order

FIXTURES = os.path.join(FIXTURES,
                        'old_checkpoints')
# name: (whether phi reads g, the settings its lists were made with, a model directory too)
PHI = {
    'paper': (True, PairsInferenceSettings(), True),
    'colt': (True, settings_lib.InferenceSettings(irrelevant_threshold=0.6, per_category=2),
             False),
    'pairs': (False, PairsInferenceSettings(selection='coverage', coverage_weight=0.25), True),
}
TOPICS = 2


@pytest.fixture(scope='module')
def inputs():
  with np.load(os.path.join(FIXTURES, 'inputs.npz')) as z:
    return {k: z[k] for k in z.files}


@pytest.fixture(scope='module')
def expected():
  with np.load(os.path.join(FIXTURES, 'expected.npz')) as z:
    arrays = {k: z[k] for k in z.files}
  with open(os.path.join(FIXTURES, 'expected.json')) as f:
    return arrays, json.load(f)


def _result(r) -> dict:
  return {'photo_ids': list(r.photo_ids), 'categories': list(r.categories),
          'category_names': list(r.category_names), 'scores': list(r.scores)}


def _outputs(colt, inputs) -> tuple:
  """(arrays, lists) as the fixtures recorded them (make_old_checkpoints.outputs)."""
  arrays, lists = {}, {}
  c = colt.classifier
  out = c.module.apply({'params': c.params}, inputs['tokens'], inputs['mask'],
                       deterministic=True, with_heads=True)
  for name, value in out.items():
    arrays[f'phi_{name}'] = np.asarray(value)
  logits = c.module.apply({'params': c.params}, inputs['tokens'], inputs['mask'])
  assert_close(np.asarray(logits), arrays['phi_class'], err_msg='phi without heads')
  if colt.reencoder is not None:
    arrays['h_hat'] = np.asarray(colt.reencode(inputs['photos']))
  pools = [(inputs['queries'][t], inputs['photos'][inputs['pool'] == t],
            [str(p) for p in inputs['photo_ids'][inputs['pool'] == t]])
           for t in range(TOPICS)]
  lists['rank'] = [_result(colt.rank(q, f, ids)) for q, f, ids in pools]
  colt.index_features(inputs['photos'], [str(p) for p in inputs['photo_ids']])
  lists['search'] = [_result(colt.search(q)) for q in inputs['queries']]
  if getattr(colt.settings, 'from_heads', False):  # colt-pairs' lists from phi's heads
    for t, (q, f, ids) in enumerate(pools):
      _, r, p = colt.pool_heads(q, f, ids)
      arrays[f'r_{t}'], arrays[f'p_{t}'] = r, p
  return arrays, lists


def _check(name, colt, inputs, expected):
  _assert_same_outputs(name, *_outputs(colt, inputs), expected)


def _assert_same_outputs(name, arrays, lists, expected):
  """The outputs of `name` are the recorded ones: arrays to rounding, lists up to ties."""
  want = {k.split('/', 1)[1]: v for k, v in expected[0].items() if k.startswith(name + '/')}
  assert set(arrays) == set(want)
  for k, v in want.items():
    assert_close(arrays[k], v, err_msg=f'{name}/{k}')
  want_lists = expected[1][name]
  assert sorted(lists) == sorted(want_lists)
  for kind, results in want_lists.items():
    assert len(lists[kind]) == len(results)
    for t, (got, result) in enumerate(zip(lists[kind], results)):
      assert_same_result(got, result, err_msg=f'{name} {kind} {t}')


@pytest.mark.parametrize('name', sorted(PHI))
def test_old_checkpoints_give_the_same_outputs(name, inputs, expected):
  with_g, settings, _ = PHI[name]
  scl = os.path.join(FIXTURES, 'scl') if with_g else None
  colt = retriever.Retriever.from_checkpoints(scl, os.path.join(FIXTURES, f'ttc_{name}'),
                                              settings)
  _check(name, colt, inputs, expected)


@pytest.mark.parametrize('name', sorted(n for n, (_, _, saved) in PHI.items() if saved))
def test_old_model_directories_give_the_same_outputs(name, inputs, expected):
  colt = retriever.Retriever.from_pretrained(os.path.join(FIXTURES, f'model_{name}'))
  assert colt.settings == PHI[name][1]
  _check(name, colt, inputs, expected)


def _ulps_away(x: np.ndarray, ulps: int, seed: int) -> np.ndarray:
  """`x` with each float moved by up to `ulps` units in the last place, at random."""
  rng = np.random.default_rng(seed)
  steps = rng.integers(-ulps, ulps + 1, size=x.shape)
  out = x.copy()
  for _ in range(ulps):
    move = steps != 0
    toward = np.where(steps[move] > 0, np.inf, -np.inf).astype(x.dtype)
    out[move] = np.nextafter(out[move], toward)
    steps = steps - np.sign(steps)
  return out


def test_the_comparison_allows_rounding_and_refuses_a_reordering(inputs, expected):
  """The comparison these tests use is not exact and not blind: today's outputs of the
  colt-pairs phi moved by a few ulps (as another processor's would be) pass; the same outputs
  with two photos of a list traded, or one logit off by 1e-3, fail."""
  colt = retriever.Retriever.from_pretrained(os.path.join(FIXTURES, 'model_pairs'))
  arrays, lists = _outputs(colt, inputs)
  moved = {k: _ulps_away(v, 4, seed=i) for i, (k, v) in enumerate(sorted(arrays.items()))}
  assert any(not np.array_equal(moved[k], arrays[k]) for k in arrays)
  wobbled = json.loads(json.dumps(lists))
  for results in wobbled.values():
    for r in results:
      r['scores'] = [float(s) for s in _ulps_away(np.float32(r['scores']), 4, seed=5)]
  _assert_same_outputs('pairs', moved, wobbled, expected)

  reordered = json.loads(json.dumps(lists))
  r = reordered['search'][0]
  gaps = np.abs(np.diff(np.float32(r['scores'])))
  i = int(np.argmax(gaps))  # two neighbours far apart in score: a real reordering
  assert gaps[i] > 1e-3
  for field in ('photo_ids', 'categories', 'category_names'):
    r[field][i], r[field][i + 1] = r[field][i + 1], r[field][i]
  with pytest.raises(AssertionError, match='position'):
    _assert_same_outputs('pairs', arrays, reordered, expected)

  off = dict(arrays, phi_class=arrays['phi_class'] + np.float32(1e-3))
  with pytest.raises(AssertionError, match='phi_class'):
    _assert_same_outputs('pairs', off, lists, expected)


@pytest.mark.parametrize('name', sorted(PHI))
def test_old_runs_resume(name):
  """The config restored from an old checkpoint saves what the run saved (its identity), so
  the run resumes under today's trainers."""
  path = os.path.join(FIXTURES, f'ttc_{name}')
  phi = restore.load_classifier(path)
  with open(os.path.join(path, loop.CONFIG_FILE)) as f:
    saved = json.load(f)
  now = dict(configs.saved_dict(phi.config), num_categories=phi.space.num_categories,
             category_names=list(phi.category_names), encoder=phi.encoder)
  if phi.g_sha256:
    now['g_sha256'] = phi.g_sha256
  if phi.parts:
    now['token_parts'] = [list(p) for p in phi.parts]
  assert loop.run_identity(now, path) == loop.run_identity(saved, path)
  loop.check_resumable(path, now)
  g = restore.load_reencoder(os.path.join(FIXTURES, 'scl'))
  with open(os.path.join(FIXTURES, 'scl', loop.CONFIG_FILE)) as f:
    saved = json.load(f)
  assert (loop.run_identity(dict(configs.saved_dict(g.config), encoder=g.encoder)) ==
          loop.run_identity(saved))


# A plain checkout, as if colt_jax were not installed: no entry points of any group.
_NO_ENTRY_POINTS = ('import importlib.metadata\n'
                    'importlib.metadata.entry_points = lambda *args, **kwargs: []\n')


def _plain_checkout_run(program: str) -> str:
  """stdout of `program` run with the checkout on PYTHONPATH and no entry points installed."""
  env = dict(os.environ, PYTHONPATH=REPO)
  out = subprocess.run([sys.executable, '-c', _NO_ENTRY_POINTS + program], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-2000:]
  return out.stdout


def test_old_checkpoints_restore_through_the_paper_s_restore_alone():
  """A user who imports only `train.restore` (README's snippet) in a plain checkout (no entry
  points installed) reads every old phi: the checkpoint's config names no method, so it is
  read as the one its fields say (`method_registry.saved_method`), whose classes are imported
  by path."""
  program = (
      'import sys\n'
      'from colt_jax.train import restore\n'
      'assert "colt_jax.pairs" not in sys.modules\n'
      f'for name in {sorted(PHI)!r}:\n'
      f'  phi = restore.load_classifier({FIXTURES!r} + "/ttc_" + name)\n'
      '  print(name, type(phi.module).__name__)\n')
  assert _plain_checkout_run(program).split() == [
      'colt', 'PairsTokenClassifier', 'pairs', 'PairsTokenClassifier', 'paper',
      'PairsTokenClassifier']


def test_old_model_directories_load_through_the_paper_s_retriever_alone():
  """A user who imports only `inference.retriever` in a plain checkout (no entry points
  installed) loads every old model directory: their settings hold colt-pairs' fields, so they
  are colt-pairs' (`method_registry.saved_method`), whose Retriever is imported by path."""
  program = (
      'import sys\n'
      'from colt_jax.inference import retriever\n'
      'assert "colt_jax.pairs" not in sys.modules\n'
      f'for name in {sorted(n for n, (_, _, saved) in PHI.items() if saved)!r}:\n'
      f'  colt = retriever.Retriever.from_pretrained({FIXTURES!r} + "/model_" + name)\n'
      '  print(name, type(colt).__name__, colt.settings.selection)\n'
      'assert "colt_jax.pairs.inference" in sys.modules\n')
  assert _plain_checkout_run(program).split() == ['pairs', 'PairsRetriever', 'coverage',
                                                  'paper', 'PairsRetriever', 'category']
