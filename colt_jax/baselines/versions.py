"""The version of every baseline, for the reproduction's row cache (`reproduction.row_versions`).

A cached row is keyed by its configuration and by the versions of the methods it ran: each
module of this room declares `VERSIONS = {method: n}` beside the code, and a change of what a
method returns must raise its n (its golden test, tests/baselines/test_baseline_versions.py, fails until
it is raised and the golden re-recorded). Names of functions and modules are in no key: a
rename or a move recomputes nothing; a raised version recomputes exactly the rows that use the
method (`USES`; a reproduction row lists the methods it runs).
"""
from __future__ import annotations

from types import ModuleType
from typing import Iterable, Mapping, Optional

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import gbt_pairs_relevance
from colt_jax.baselines import greedy
from colt_jax.baselines import rerankers
from colt_jax.baselines import umons

MODULES = (rerankers, umons, greedy, gbt_pairs, gbt_pairs_relevance)

# The methods whose outputs a method's rows depend on besides its own (the rest: its own).
USES = {
    'gbt-pairs': ('gbt-pairs', 'expected-coverage'),
    'gbt-pairs relevance': ('gbt-pairs', 'expected-coverage', 'gbt-pairs relevance'),
}


def registry(modules: Iterable[ModuleType] = MODULES) -> dict:
  """{method: version} declared by `modules` (each method once)."""
  out = {}
  for module in modules:
    for method, version in module.VERSIONS.items():
      if method in out:
        raise ValueError(f'{module.__name__}: {method!r} has a version in two modules')
      if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f'{module.__name__}: the version of {method!r} must be an int >= 1, '
                         f'got {version!r}')
      out[method] = version
  return out


VERSIONS = registry()


def of(*methods: str, versions: Optional[Mapping[str, int]] = None) -> dict:
  """{method: version} of every method that rows of `methods` run (`USES`), sorted by name."""
  versions = VERSIONS if versions is None else versions
  used = {m for method in methods for m in USES.get(method, (method,))}
  unknown = sorted(used - set(versions))
  if unknown:
    raise KeyError(f'no version for {unknown}: declare it in a VERSIONS of colt_jax/baselines/')
  return {m: versions[m] for m in sorted(used)}
