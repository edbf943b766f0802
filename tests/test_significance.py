"""Tests of colt_jax/significance.py (paired bootstrap over topics)."""
import numpy as np
import pytest

from colt_jax import significance


def test_clear_gain_is_better_and_counts_wins_ties_losses():
  rng = np.random.default_rng(0)
  b = {t: float(v) for t, v in enumerate(rng.uniform(0.3, 0.7, 60))}
  a = {t: v + 0.05 for t, v in b.items()}
  a[0], a[1] = b[0], b[1] - 0.01  # one tie, one loss
  diff = significance.paired_difference(a, b)
  assert (diff.wins, diff.ties, diff.losses) == (58, 1, 1)
  assert diff.low > 0 and diff.verdict == 'better'
  assert diff.low <= diff.mean <= diff.high
  assert diff.mean == pytest.approx(np.mean([a[t] - b[t] for t in b]))


def test_noise_is_no_difference_and_interval_matches_a_hand_bootstrap():
  rng = np.random.default_rng(1)
  b = {t: float(v) for t, v in enumerate(rng.uniform(0, 1, 80))}
  a = {t: v + float(rng.normal(0, 0.1)) for t, v in b.items()}
  diff = significance.paired_difference(a, b, resamples=4000)
  d = np.array([a[t] - b[t] for t in sorted(b)])
  boot = np.random.default_rng(2).choice(d, (4000, len(d))).mean(axis=1)
  assert diff.low == pytest.approx(np.percentile(boot, 2.5), abs=0.01)
  assert diff.high == pytest.approx(np.percentile(boot, 97.5), abs=0.01)
  assert diff.verdict == 'no difference' and diff.low < 0 < diff.high


def test_only_shared_topics_are_paired_and_a_worse_run_is_worse():
  b = {str(t): 0.8 for t in range(10)}
  a = {str(t): 0.6 + 0.01 * t for t in range(12)}  # two extra topics are ignored
  diff = significance.paired_difference(a, b)
  assert diff.verdict == 'worse' and diff.wins + diff.ties + diff.losses == 10
  with pytest.raises(ValueError, match='2 shared topics'):
    significance.paired_difference({'1': 1.0}, {'1': 0.0, '2': 1.0})
