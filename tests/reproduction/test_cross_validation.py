"""Tests of colt_jax/reproduction/cross_validation.py's `Reproduction.fold_rows`: the folds whose row
cache holds a row, the others logged and left out."""
import types

import pytest

from colt_jax.util.errors import InputError

from colt_jax.reproduction.cross_validation import Reproduction


def _reproduction(saved: dict, logged: list):
  folds = [(types.SimpleNamespace(index=i), f'cv5-fold{i}', f'train{i}', f'held{i}')
           for i in range(3)]
  return types.SimpleNamespace(
      cv_folds=lambda: folds, saved_row=lambda tag, name: saved.get(tag),
      row_path=lambda tag, name: f'rows/{tag}/{name}.json', log=logged.append,
      rows_root='rows')


def test_fold_rows_keeps_the_folds_that_have_the_row_and_says_which_it_left_out():
  logged = []
  rep = _reproduction({'cv5-fold0': {'a': 0}, 'cv5-fold2': {'a': 2}}, logged)
  got = Reproduction.fold_rows(rep, 'colt-pairs (seed 0, pool)')
  assert [(f.index, tag, train, held, row) for f, tag, train, held, row in got] == [
      (0, 'cv5-fold0', 'train0', 'held0', {'a': 0}), (2, 'cv5-fold2', 'train2', 'held2', {'a': 2})]
  assert logged == [' fold 1: no row rows/cv5-fold1/colt-pairs (seed 0, pool).json yet; left out']


def test_fold_rows_refuses_when_no_fold_has_the_row():
  rep = _reproduction({}, [])
  with pytest.raises(InputError, match=r'rows: no colt-pairs rule \(seed 0, pool\) rows of the '
                     'cross-validation; run experiments/reproduce.py first'):
    Reproduction.fold_rows(rep, 'colt-pairs rule (seed 0, pool)')
