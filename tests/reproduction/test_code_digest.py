"""colt_jax/reproduction/code_digest.py: a row's code key follows what the code does, not where
it lives."""
from colt_jax.reproduction import code_digest

A = '''"""Module a."""
import numpy as np
from colt_jax.evaluation import metrics


def score(x):
  """Scores x."""
  return np.sum(metrics.f1_score(x, x))  # a comment


def top(x, k):
  return sorted(x)[-k:]
'''
B = '''"""Module b."""
import numpy


def other(y):
  return y + 1
'''
# `top` moved from a to b, docstrings and comments reworded, an import alias renamed.
A_MOVED = '''"""Module a, reworded."""
import numpy as numpy_lib
from colt_jax.evaluation import metrics as metrics_lib


def score(x):
  """Scores x, reworded."""
  from colt_jax.util import numerics  # pylint: disable=g-import-not-at-top
  return numpy_lib.sum(metrics_lib.f1_score(x, x))
'''
B_MOVED = B + '''

def top(x, k):
  return sorted(x)[-k:]
'''


def test_moving_a_definition_or_renaming_an_import_keeps_the_digest():
  assert code_digest.sources_digest([A, B]) == code_digest.sources_digest([A_MOVED, B_MOVED])
  assert code_digest.sources_digest([A, B]) == code_digest.sources_digest([B, A])


def test_changing_what_a_statement_does_changes_the_digest():
  base = code_digest.sources_digest([A, B])
  assert code_digest.sources_digest([A.replace('[-k:]', '[-k - 1:]'), B]) != base
  assert code_digest.sources_digest([A.replace('x + 1', 'x + 2'), B.replace('y + 1', 'y + 2')]
                                    ) != base
  assert code_digest.sources_digest([A]) != base  # a definition gone


def test_the_baselines_code_digest_is_stable_within_a_run():
  from colt_jax.reproduction import stages  # pylint: disable=g-import-not-at-top
  assert stages.baseline_code() == code_digest.code_digest(stages.BASELINE_MODULES)
  assert len(stages.baseline_code()) == 12
