"""Parameters saved by the code before the paper's phi and colt-pairs' extension were separated
(tests/fixtures/phi/) load into today's modules and give the same outputs (to float32 rounding,
float_compare.assert_close: the fixtures were computed on another machine): the parameter
names of every part stayed, so every checkpoint and model directory saved before still works."""
import json
import os

import jax
import numpy as np
import pytest
from flax import serialization

from colt_jax.model import phi as phi_lib
from colt_jax.model import reencoder
from colt_jax.pairs import pairs_phi
from float_compare import assert_close
from checkout import FIXTURES  # pylint: disable=g-bad-import-order

FIXTURES = os.path.join(FIXTURES, 'phi')
with open(os.path.join(FIXTURES, 'cases.json')) as _f:
  CASES = json.load(_f)
PAIRS_FIELDS = {'relevance_head', 'pair_head', 'pair_dim', 'token_parts', 'relational',
                'appearance_parts', 'appearance_dim', 'query_relative'}


def _module(case: dict):
  kw = dict(CASES['base'], **{k: tuple(v) if isinstance(v, list) else v
                              for k, v in case.items()})
  cls = pairs_phi.PairsTokenClassifier if PAIRS_FIELDS & set(case) else phi_lib.TokenClassifier
  return cls(**kw)


@pytest.mark.parametrize('name', sorted(CASES['cases']))
def test_phi_saved_before_gives_the_same_outputs(name):
  module = _module(CASES['cases'][name])
  arrays = np.load(os.path.join(FIXTURES, 'outputs.npz'))
  tokens, mask = arrays['tokens'], arrays['mask']
  template = module.init(jax.random.PRNGKey(0), tokens, mask)['params']
  with open(os.path.join(FIXTURES, f'{name}.msgpack'), 'rb') as f:
    params = serialization.from_bytes(template, f.read())  # fails on any renamed parameter
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(template)
  for tag, kwargs in (('eval', {}), ('train', {'deterministic': False,
                                               'rngs': {'dropout': jax.random.PRNGKey(2)}})):
    out = pairs_phi.head_outputs(module, {'params': params}, tokens, mask, **kwargs)
    want = {k.split('/')[-1]: arrays[k] for k in arrays.files if k.startswith(f'{name}/{tag}/')}
    assert sorted(out) == sorted(want)
    for key, value in want.items():
      assert_close(np.asarray(out[key]), value, err_msg=f'{name} {tag} {key}')


@pytest.mark.parametrize('name,kwargs', [('g', dict(beta=0.5, zero_init=False)),
                                         ('g_paper', {})])
def test_g_saved_before_gives_the_same_outputs(name, kwargs):
  module = reencoder.ReEncoder(**kwargs)
  saved = np.load(os.path.join(FIXTURES, f'{name}.npz'))
  template = module.init(jax.random.PRNGKey(0), saved['h'])['params']
  with open(os.path.join(FIXTURES, f'{name}.msgpack'), 'rb') as f:
    params = serialization.from_bytes(template, f.read())
  assert_close(np.asarray(module.apply({'params': params}, saved['h'])), saved['out'],
               err_msg=name)
