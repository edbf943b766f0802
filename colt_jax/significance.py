"""Paired comparison of two systems over the same topics (RESULTS.md's "better"/"worse").

`paired_difference` takes per-topic scores of two runs (e.g. F1@20 of CoLT and of UMONS on
every test topic), and returns the mean per-topic difference, its 95% percentile bootstrap
interval (topics resampled with replacement, `scipy.stats.bootstrap` with `paired=True`) and
the wins, ties and losses. A difference is called one only when the interval excludes 0.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np
from scipy import stats

TIE = 1e-9  # per-topic differences within this are ties


@dataclasses.dataclass(frozen=True)
class PairedDifference:
  mean: float  # mean over topics of (a - b)
  low: float  # 95% bootstrap interval of the mean
  high: float
  wins: int  # topics where a > b
  ties: int
  losses: int

  @property
  def verdict(self) -> str:
    """'better' / 'worse' when the interval excludes 0, else 'no difference'."""
    if self.low > 0:
      return 'better'
    if self.high < 0:
      return 'worse'
    return 'no difference'

  def text(self) -> str:
    return (f'{self.mean:+.4f} [{self.low:+.4f}, {self.high:+.4f}], '
            f'W/T/L {self.wins}/{self.ties}/{self.losses}')


def paired_difference(a: Mapping, b: Mapping, confidence: float = 0.95,
                      resamples: int = 10000, seed: int = 0) -> PairedDifference:
  """a - b over the topics both score (keys: topic ids; values: one metric per topic)."""
  topics = sorted(set(a) & set(b), key=str)
  if len(topics) < 2:
    raise ValueError(f'a paired comparison needs at least 2 shared topics, got {len(topics)}')
  x = np.array([float(a[t]) for t in topics])
  y = np.array([float(b[t]) for t in topics])
  d = x - y
  if np.all(np.abs(d - d[0]) <= TIE):  # constant difference: the interval is that point
    low = high = float(d[0])
  else:
    res = stats.bootstrap((x, y), lambda u, v, axis=-1: np.mean(u - v, axis=axis),
                          paired=True, vectorized=True, confidence_level=confidence,
                          n_resamples=resamples, method='percentile',
                          random_state=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
  return PairedDifference(mean=float(d.mean()), low=low, high=high,
                          wins=int(np.sum(d > TIE)), ties=int(np.sum(np.abs(d) <= TIE)),
                          losses=int(np.sum(d < -TIE)))
