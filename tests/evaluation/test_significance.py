"""Tests of colt_jax/evaluation/significance.py (paired bootstrap over topics)."""
import numpy as np
import pytest

from colt_jax.evaluation import significance


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


def _hm(p, cr):
  return 2 * p * cr / (p + cr) if p + cr > 0 else 0.0


def test_paper_f1_is_the_harmonic_mean_of_the_means_with_a_hand_bootstrap():
  assert float(significance.harmonic_mean(0.8548, 0.6416)) == pytest.approx(0.7330, abs=5e-5)
  rng = np.random.default_rng(3)
  topics = [str(t) for t in range(30)]
  p_a, cr_a, p_b, cr_b = ({t: float(v) for t, v in zip(topics, rng.uniform(0, 1, 30))}
                          for _ in range(4))
  p_a['0'] = cr_a['0'] = 0.0  # a topic with P + CR = 0 (its F1 is 0)
  p_b['extra'] = cr_b['extra'] = 1.0  # scored by b alone: left out
  diff = significance.paired_paper_f1(p_a, cr_a, p_b, cr_b, resamples=500, seed=7)
  mean = lambda m, ts: sum(m[t] for t in ts) / len(ts)  # pylint: disable=unnecessary-lambda-assignment
  stat = lambda ts: (_hm(mean(p_a, ts), mean(cr_a, ts))  # pylint: disable=unnecessary-lambda-assignment
                     - _hm(mean(p_b, ts), mean(cr_b, ts)))
  ordered = sorted(topics, key=str)
  assert diff.mean == pytest.approx(stat(ordered), abs=1e-12)
  index = np.random.default_rng(7).integers(0, len(ordered), (500, len(ordered)))
  boot = []
  for row in index:  # a plain loop over the same resamples
    boot.append(stat([ordered[i] for i in row]))
  assert diff.low == pytest.approx(np.percentile(boot, 2.5), abs=1e-12)
  assert diff.high == pytest.approx(np.percentile(boot, 97.5), abs=1e-12)
  per_topic = [_hm(p_a[t], cr_a[t]) - _hm(p_b[t], cr_b[t]) for t in ordered]
  assert (diff.wins, diff.losses) == (sum(d > 1e-9 for d in per_topic),
                                      sum(d < -1e-9 for d in per_topic))
  # It differs from the official reading (the mean of per-topic F1 differences).
  assert abs(diff.mean - np.mean(per_topic)) > 1e-6


def test_paper_f1_of_a_clear_gain_is_better():
  p_b = {t: 0.5 + 0.01 * t for t in range(20)}
  cr_b = {t: 0.4 for t in range(20)}
  p_a = {t: v + 0.1 for t, v in p_b.items()}
  diff = significance.paired_paper_f1(p_a, cr_b, p_b, cr_b)
  assert diff.verdict == 'better' and diff.wins == 20
  with pytest.raises(ValueError, match='2 shared topics'):
    significance.paired_paper_f1({'1': 1.0}, {'1': 1.0}, {'1': 0.0}, {'1': 0.0})
