"""Paired comparison of two systems over the same topics (RESULTS.md's "better"/"worse").

`paired_difference` takes per-topic scores of two runs (e.g. F1@20 of CoLT and of UMONS on
every test topic), and returns the mean per-topic difference, its 95% percentile bootstrap
interval (topics resampled with replacement, `scipy.stats.bootstrap` with `paired=True`) and
the wins, ties and losses. A difference is called one only when the interval excludes 0.

`paired_paper_f1` compares the same two runs under the paper's reading of F1@k: the harmonic
mean of the mean P@k and the mean CR@k over topics (P@20 .8548 and CR@20 .6416 give .7330),
where the official scorer averages per-topic F1. Its interval resamples topics (the same
indices for both runs) and recomputes hm(mean P_a, mean CR_a) - hm(mean P_b, mean CR_b).
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


def harmonic_mean(p, cr):
  """2 P CR / (P + CR), 0 where P + CR == 0 (elementwise over arrays)."""
  p, cr = np.asarray(p, float), np.asarray(cr, float)
  total = p + cr
  return np.where(total > 0, 2 * p * cr / np.where(total > 0, total, 1.0), 0.0)


def paired_paper_f1(p_a: Mapping, cr_a: Mapping, p_b: Mapping, cr_b: Mapping,
                    confidence: float = 0.95, resamples: int = 10000,
                    seed: int = 0) -> PairedDifference:
  """The paper's F1 of run a minus run b: hm(mean P_a, mean CR_a) - hm(mean P_b, mean CR_b)
  over the topics all four score (keys: topic ids; values: P@k or CR@k per topic).

  `mean` is that statistic on all shared topics; its percentile interval comes from
  `resamples` draws of the topics with replacement, the same for both runs (indices
  `np.random.default_rng(seed).integers(0, n, (resamples, n))` over the topics sorted by
  str). Wins/ties/losses count the topics by the per-topic F1 (hm of the topic's P and CR,
  the official reading): the paper's F1 has no per-topic value."""
  topics = sorted(set(p_a) & set(cr_a) & set(p_b) & set(cr_b), key=str)
  if len(topics) < 2:
    raise ValueError(f'a paired comparison needs at least 2 shared topics, got {len(topics)}')
  x = np.array([[float(m[t]) for t in topics] for m in (p_a, cr_a, p_b, cr_b)])
  def diff(v):
    return harmonic_mean(v[0], v[1]) - harmonic_mean(v[2], v[3])
  n = len(topics)
  index = np.random.default_rng(seed).integers(0, n, (resamples, n))
  boot = diff(x[:, index].mean(axis=-1))  # [resamples]
  alpha = (1 - confidence) / 2
  low, high = np.quantile(boot, [alpha, 1 - alpha])
  d = harmonic_mean(x[0], x[1]) - harmonic_mean(x[2], x[3])  # per-topic F1 differences
  return PairedDifference(mean=float(diff(x.mean(axis=-1))), low=float(low), high=float(high),
                          wins=int(np.sum(d > TIE)), ties=int(np.sum(np.abs(d) <= TIE)),
                          losses=int(np.sum(d < -TIE)))
