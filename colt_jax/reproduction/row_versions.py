"""Which method versions a row of the reproduction is keyed by, and the one-time mapping from
the keys of rows cached before versions (`legacy_match`).

A row's cache key holds `versions`: {method: version} of the baselines it runs
(`colt_jax.baselines.versions`), so a rename or a move of their code recomputes nothing and a
raised version recomputes exactly the rows that run the method: every baseline row, a CoLT
ablation that ranks with a baseline over h^ (`SCL + top-k`: topk, `SCL + DBSCAN`: umons) and a
colt-pairs row or choice that lists by expected coverage. What else decides a CoLT row is its
configuration (the trained models' fields, `row_training._trained_key`) and `ROWS_CODE_VERSION`
(`row_cache`), raised by a change of the shared code (model, training, inference, scoring).

Before versions, a baseline row's key held a digest of its modules' code instead
('implementation'), and a CoLT row's key held neither. Every method is at version 1, the code
those rows were computed with (the baseline modules' definitions at d29176f, which computed
the committed baseline rows, match those at 26ce3da up to renames, a warning and store
metadata: docs/DESIGN.md, the row cache), so `legacy_match` takes such a stored key as the
key of version 1 of every method it names. A row of any other version is computed anew:
raising a version never finds a legacy row.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from colt_jax.baselines import versions

# The code digests baseline rows were keyed by before versions: the committed rows' (d29176f)
# and that of the code this scheme replaced (26ce3da: rows a branch of that time computes),
# whose baselines are version 1.
LEGACY_BASELINE_CODE = ('213ada86462c', 'a21fad8dc79c')
# ... and the digests of the `gbt-pairs relevance` row's module at the same two commits.
LEGACY_GBT_RELEVANCE_SOURCE = ('25df6079a49e', '0813d77c563a')


def colt_methods(variant) -> tuple:
  """The baselines a CoLT row of `variant` (its rule as chosen) runs: a baseline over h^ in
  place of phi (`post`), or expected coverage as colt-pairs' selection."""
  if variant.post == 'topk':
    return ('topk',)
  if variant.post == 'dbscan':
    return ('umons',)
  if variant.selection == 'coverage':
    return ('expected-coverage',)
  return ()


def colt_versions(variant) -> dict:
  """{method: version} of `colt_methods(variant)` (empty: none)."""
  return versions.of(*colt_methods(variant))


def _legacy_implementation(implementation: Any, versions_of: Mapping[str, int]) -> bool:
  if 'gbt-pairs relevance' in versions_of:
    return (isinstance(implementation, dict) and set(implementation) == {'baselines', 'source'}
            and implementation['baselines'] in LEGACY_BASELINE_CODE
            and implementation['source'] in LEGACY_GBT_RELEVANCE_SOURCE)
  return implementation in LEGACY_BASELINE_CODE


def legacy_match(stored: Optional[Mapping], key: Mapping) -> bool:
  """Whether `stored`, the key of a row cached before versions, is `key` (JSON-normal, with
  `versions`) at version 1 of every method `key` names: `stored` is `key` without `versions`,
  with a baseline row's legacy code digest ('implementation') where a baseline row had one."""
  if not isinstance(stored, dict) or 'versions' in stored or 'versions' not in key:
    return False
  used = key['versions']
  if not used or any(v != 1 for v in used.values()):
    return False
  rest = {k: v for k, v in key.items() if k != 'versions'}
  if 'method' in key:  # a baseline row: its code digest stood for the versions
    if not _legacy_implementation(stored.get('implementation'), used):
      return False
    stored = {k: v for k, v in stored.items() if k != 'implementation'}
  return stored == rest
