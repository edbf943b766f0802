"""Tests for colt_jax.benchmark (measuring tools), colt_jax.perf (the suites),
colt_jax.perf_report (JSON -> markdown) and the benchmark scripts. No wall-clock limits are
asserted: only that the measurements are well formed."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax import benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_time_calls_returns_positive_ordered_stats():
  calls = []

  def fn(x):
    calls.append(1)
    return x * 2

  t = benchmark.time_calls(fn, jnp.ones(8), warmup=2, repeats=7)
  assert len(calls) == 9 and t.repeats == 7
  assert 0 < t.min_ms <= t.median_ms <= t.p99_ms <= t.max_ms
  assert t.min_ms <= t.mean_ms <= t.max_ms
  per = t.per_item(4)
  assert per['median_ms'] == pytest.approx(t.median_ms / 4)
  assert per['per_s'] == pytest.approx(4e3 / t.median_ms)


def test_summarise_and_bad_arguments():
  t = benchmark.summarise([0.001, 0.002, 0.003])
  assert (t.min_ms, t.median_ms, t.max_ms) == pytest.approx((1.0, 2.0, 3.0))
  assert t.p99_ms == pytest.approx(2.98)
  with pytest.raises(ValueError):
    benchmark.summarise([])
  with pytest.raises(ValueError):
    benchmark.time_calls(lambda: 0, repeats=0)


def test_compile_counter_counts_fresh_compilations_only():
  f = jax.jit(lambda x: jnp.sin(x) * 3 + 1)
  a, b = jnp.ones(5), jnp.ones(6)
  with benchmark.CompileCounter() as first:
    f(a).block_until_ready()
  assert first.count == 1
  with benchmark.CompileCounter() as again:
    f(a).block_until_ready()
    f(a).block_until_ready()
  assert again.count == 0
  with benchmark.CompileCounter() as new_shape:
    f(b).block_until_ready()
  assert new_shape.count == 1
  # The listener is removed on exit: later compilations are not counted.
  jax.jit(lambda x: x - 7)(a).block_until_ready()
  assert new_shape.count == 1


def test_time_calls_reports_compilations_in_warmup_not_after():
  g = jax.jit(lambda x: jnp.cos(x) + 0.5)
  t = benchmark.time_calls(g, jnp.ones(11), warmup=1, repeats=3)
  assert (t.compiles_warmup, t.compiles_timed) == (1, 0)


@pytest.mark.parametrize('m,k,n', [(64, 128, 32), (100, 30, 7)])
def test_compiled_cost_flops_of_a_matmul(m, k, n):
  cost = benchmark.compiled_cost(jnp.matmul, jnp.ones((m, k)), jnp.ones((k, n)))
  assert cost['flops'] == pytest.approx(2 * m * n * k, rel=0.05)
  assert cost['argument_bytes'] == 4 * (m * k + k * n)
  assert cost['output_bytes'] == 4 * m * n
  assert cost['peak_bytes'] >= cost['output_bytes']


def test_matmul_rate_and_bandwidth_are_positive():
  r = benchmark.matmul_rate(size=128, repeats=3)
  assert r['flops'] == 2 * 128 ** 3 and r['flops_per_s'] > 0
  assert r['xla_flops'] == pytest.approx(r['flops'], rel=0.05)
  bw = benchmark.memory_bandwidth(1 << 20, repeats=3)
  assert bw['bytes'] == 1 << 20 and bw['bytes_per_s'] > 0


def test_machine_info_and_growth():
  info = benchmark.machine_info()
  assert info['cpu'] and info['cpu_count'] >= 1 and info['backend'] == jax.default_backend()
  assert info['jax'] == jax.__version__ and len(info['devices']) == info['device_count']
  assert benchmark.growth_exponent([1, 10, 100], [3, 30, 300]) == pytest.approx(1.0)
  assert benchmark.growth_exponent([1, 2, 4], [1, 4, 16]) == pytest.approx(2.0)
  assert benchmark.growth_exponent([1], [2]) is None
  assert benchmark.tree_bytes({'a': np.zeros(3, np.float32), 'b': [np.zeros(2)]}) == 28
