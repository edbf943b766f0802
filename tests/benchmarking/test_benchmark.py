"""Tests for colt_jax/benchmarking/: timing.py (measuring tools), perf_suite.py (the suite),
perf_targets.py and perf_report.py (JSON -> markdown), and the benchmark scripts. No wall-clock
limits are asserted: only that the measurements are well formed."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax.benchmarking import timing
from colt_jax.inference import settings as settings_lib
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from bench_run import ROOT, fake_result, bench_script  # pylint: disable=g-bad-import-order


def test_time_calls_returns_positive_ordered_stats():
  calls = []

  def fn(x):
    calls.append(1)
    return x * 2

  t = timing.time_calls(fn, jnp.ones(8), warmup=2, repeats=7)
  assert len(calls) == 9 and t.repeats == 7
  assert 0 < t.min_ms <= t.median_ms <= t.p99_ms <= t.max_ms
  assert t.min_ms <= t.mean_ms <= t.max_ms
  per = t.per_item(4)
  assert per['median_ms'] == pytest.approx(t.median_ms / 4)
  assert per['per_s'] == pytest.approx(4e3 / t.median_ms)


def test_summarise_and_bad_arguments():
  t = timing.summarise([0.001, 0.002, 0.003])
  assert (t.min_ms, t.median_ms, t.max_ms) == pytest.approx((1.0, 2.0, 3.0))
  assert t.p99_ms == pytest.approx(2.98)
  with pytest.raises(ValueError):
    timing.summarise([])
  with pytest.raises(ValueError):
    timing.time_calls(lambda: 0, repeats=0)


def test_compile_counter_counts_fresh_compilations_only():
  f = jax.jit(lambda x: jnp.sin(x) * 3 + 1)
  a, b = jnp.ones(5), jnp.ones(6)
  with timing.CompileCounter() as first:
    f(a).block_until_ready()
  assert first.count == 1
  with timing.CompileCounter() as again:
    f(a).block_until_ready()
    f(a).block_until_ready()
  assert again.count == 0
  with timing.CompileCounter() as new_shape:
    f(b).block_until_ready()
  assert new_shape.count == 1
  # The listener is removed on exit: later compilations are not counted.
  jax.jit(lambda x: x - 7)(a).block_until_ready()
  assert new_shape.count == 1
  import time  # pylint: disable=g-import-not-at-top
  with timing.CompileCounter() as timed:
    before = time.time()
    jax.jit(lambda x: x * 5)(a).block_until_ready()
    middle = time.time()
    jax.jit(lambda x: x * 6)(a).block_until_ready()
  assert timed.between(before, middle) == 1 and timed.between(before, time.time()) == 2
  assert timed.between(0.0, before) == 0


def test_time_calls_reports_compilations_in_warmup_not_after():
  g = jax.jit(lambda x: jnp.cos(x) + 0.5)
  t = timing.time_calls(g, jnp.ones(11), warmup=1, repeats=3)
  assert (t.compiles_warmup, t.compiles_timed) == (1, 0)


@pytest.mark.parametrize('m,k,n', [(64, 128, 32), (100, 30, 7)])
def test_compiled_cost_flops_of_a_matmul(m, k, n):
  cost = timing.compiled_cost(jnp.matmul, jnp.ones((m, k)), jnp.ones((k, n)))
  assert cost['flops'] == pytest.approx(2 * m * n * k, rel=0.05)
  assert cost['argument_bytes'] == 4 * (m * k + k * n)
  assert cost['output_bytes'] == 4 * m * n
  assert cost['peak_bytes'] >= cost['output_bytes']


def test_product_flops_counts_the_jaxprs_matrix_products_like_the_lowered_program():
  """The fallback count where a backend's lowered program gives none: every dot_general,
  batched, inside a jitted call, a scan (its body once, as XLA counts a loop) and a cond (its
  dearest branch); within 2% of the lowered program's count (which adds element-wise work)."""
  def fn(a, b, x):
    y = jnp.einsum('bij,bjk->bik', a, b)
    steps = jax.lax.scan(lambda c, _: (c @ x, None), y[0], None, length=3)[0]
    return jax.lax.cond(steps.sum() > 0, lambda: steps @ x @ x, lambda: steps)
  args = jnp.ones((2, 8, 16)), jnp.ones((2, 16, 4)), jnp.ones((4, 4))
  jaxpr = jax.jit(fn).trace(*args).jaxpr.jaxpr
  products = 2 * (2 * 8 * 16 * 4 + 8 * 4 * 4 + 2 * 8 * 4 * 4)
  assert timing.product_flops(jaxpr) == products
  counted = timing.compiled_cost(fn, *args)
  assert counted['flops_counted_on'] == 'hlo'
  assert counted['flops'] == pytest.approx(products, rel=0.02)


def test_matmul_rate_and_bandwidth_are_positive():
  r = timing.matmul_rate(size=128, repeats=3)
  assert r['flops'] == 2 * 128 ** 3 and r['flops_per_s'] > 0
  assert r['xla_flops'] == pytest.approx(r['flops'], rel=0.05)
  bw = timing.memory_bandwidth(1 << 20, repeats=3)
  assert bw['bytes'] == 1 << 20 and bw['bytes_per_s'] > 0


def test_machine_info_and_growth():
  info = timing.machine_info()
  assert info['cpu'] and info['cpu_count'] >= 1 and info['backend'] == jax.default_backend()
  assert info['jax'] == jax.__version__ and len(info['devices']) == info['device_count']
  assert timing.growth_exponent([1, 10, 100], [3, 30, 300]) == pytest.approx(1.0)
  assert timing.growth_exponent([1, 2, 4], [1, 4, 16]) == pytest.approx(2.0)
  assert timing.growth_exponent([1], [2]) is None
  assert timing.tree_bytes({'a': np.zeros(3, np.float32), 'b': [np.zeros(2)]}) == 28


# ------------------------------------------------------------------- perf, perf_report


def test_check_rejects_bad_settings_and_sections():
  from colt_jax.benchmarking import perf_suite
  perf_suite.check(perf_suite.quick(), perf_suite.SECTIONS)
  with pytest.raises(ValueError, match='unknown sections'):
    perf_suite.check(perf_suite.quick(), ['components', 'gpu'])
  with pytest.raises(ValueError, match='batch'):
    perf_suite.check(perf_suite.Settings(batch=0), ['components'])
  with pytest.raises(ValueError, match='search_sizes'):
    perf_suite.check(perf_suite.Settings(search_sizes=()), ['scaling'])
  with pytest.raises(ValueError, match='num_heads'):
    perf_suite.check(perf_suite.Settings(dim=100), ['ttc'])
  with pytest.raises(ValueError, match='encoder'):
    perf_suite.check(perf_suite.Settings(encoder='clip'), ['ttc'])


def test_train_rates_skip_the_first_interval(tmp_path):
  from colt_jax.benchmarking import suite_training
  path = tmp_path / 'metrics.jsonl'
  rows = [{'step': 10, 'loss': 1.0, 'steps_per_sec': 0.5},  # compilation
          {'step': 20, 'loss': 0.9, 'steps_per_sec': 10.0},
          {'step': 30, 'loss': 0.8, 'steps_per_sec': 5.0}]
  path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
  rates = suite_training.train_rates(str(path), 10, batch_size=32)
  assert rates['timed_steps'] == 20 and rates['timed_s'] == pytest.approx(3.0)
  assert rates['steps_per_s'] == pytest.approx(20 / 3)
  assert rates['examples_per_s'] == pytest.approx(32 * 20 / 3)
  assert rates['first_interval_s'] == pytest.approx(20.0)
  assert rates['timed_window'] == (0.0, float('inf'))  # rows without wall-clock times
  stamped = [dict(r, time=t) for r, t in zip(rows, (100.0, 101.0, 102.0))]
  path.write_text(''.join(json.dumps(r) + '\n' for r in stamped))
  assert suite_training.train_rates(str(path), 10, batch_size=32)['timed_window'] == (100.0, 102.0)
  path.write_text(json.dumps(rows[0]) + '\n')
  with pytest.raises(ValueError, match='two logged intervals'):
    suite_training.train_rates(str(path), 10, batch_size=32)


def test_benchmarked_colt_path_is_the_retriever_and_equals_its_stages():
  """The benchmark times `Retriever.search_rows` (the path users and the evaluation run);
  it equals search + phi's argmax + Eq. 6 and its continuation, stage by stage."""
  from colt_jax.benchmarking import suite_stages
  from colt_jax.benchmarking import perf_suite
  from colt_jax.model import postprocess  # pylint: disable=g-import-not-at-top
  from colt_jax.inference import retriever  # pylint: disable=g-import-not-at-top
  from colt_jax.inputs.labels import LabelSpace  # pylint: disable=g-import-not-at-top
  from colt_jax.train import restore  # pylint: disable=g-import-not-at-top
  settings = perf_suite.Settings(dim=16, num_images=12, k=5, num_categories=4, num_layers=1,
                             num_heads=2, num_clusters=3)
  world = suite_stages.World(settings)
  phi, params, module = suite_stages.make_phi(settings)
  collection = world.collection(300)
  colt = retriever.Retriever(
      restore.ClassifierBundle(module, params, LabelSpace(4),
                               suite_stages.ttc_config(settings)),
      None, settings_lib.InferenceSettings(k=5, list_length=10))
  colt.index_features(collection, [str(i) for i in range(300)])
  queries = world.queries(3)
  got = colt.search_rows(queries)[0]
  index = colt.collection_index
  scores, idx = index.search(queries, 12)
  tokens = jnp.concatenate([jnp.asarray(queries)[:, None], index.rows(idx)], 1)
  labels = phi(params, tokens, jnp.ones(tokens.shape[:2], bool))
  picks = np.asarray(postprocess.select_per_category_batch(
      labels[:, 1:], scores, jnp.ones(scores.shape, bool), k=5, per_category=1,
      num_categories=4, length=10))
  expected = np.where(picks >= 0, np.take_along_axis(np.asarray(idx), np.maximum(picks, 0), 1),
                      -1)
  # One jitted program against its stages run apart: the same rows, in the same order where
  # their similarities are separated (two programs may round them differently); phi's labels
  # are separated by far more than rounding.
  assert got.shape == expected.shape
  sims = np.asarray(queries, np.float64) @ np.asarray(collection, np.float64).T
  for b, (got_rows, want_rows) in enumerate(zip(got, expected)):
    assert_same_ranking(got_rows.tolist(), sims[b, got_rows], want_rows.tolist(),
                        sims[b, want_rows], err_msg=f'query {b}')
  assert (got >= 0).all()  # 12 candidates fill 10 places


def test_targets_say_met_or_missed_and_by_how_much():
  from colt_jax.benchmarking import perf_targets
  result = fake_result(ttc_ratio=0.56, mmr_ms=1.0, search_ms=120.0, compiles=0)
  by_name = {t['name']: t for t in perf_targets.targets(result)}
  ttc = by_name['batched TTC FLOP/s vs same-run matmul FLOP/s']
  assert ttc['met'] is False and ttc['ratio'] == pytest.approx(0.8)
  assert by_name['batch-1 TTC vs batched per-query time']['met'] is True  # 90/80 = 1.125
  mmr = by_name['MMR over N=200, batch 1']
  assert mmr['met'] is True and mmr['ratio'] == pytest.approx(0.5)
  search = by_name['search over 1,000,000 photos, batch 1']
  assert search['met'] is False and search['ratio'] == pytest.approx(2.4)
  assert 'bandwidth' in search['bound']
  assert by_name['no compilation after warm-up']['met'] is True
  assert by_name['the same tables on a GPU']['met'] is None
  failing = perf_targets.targets(fake_result(0.9, 3.0, 40.0, compiles=2))
  by_name = {t['name']: t for t in failing}
  assert by_name['batched TTC FLOP/s vs same-run matmul FLOP/s']['met'] is True
  assert by_name['MMR over N=200, batch 1']['met'] is False
  assert by_name['no compilation after warm-up']['met'] is False
  assert 'phi b1' in by_name['no compilation after warm-up']['bound']


def test_markdown_has_machine_targets_and_paper_numbers():
  from colt_jax.benchmarking import perf_report
  text = perf_report.markdown(fake_result(0.56, 1.0, 120.0, 0), 'x/suites.json')
  assert text.splitlines()[0] == '# Performance'  # results without run_kind: a full run
  for kind in ('quick', 'partial'):
    other = perf_report.markdown(dict(fake_result(0.56, 1.0, 120.0, 0), run_kind=kind), 'x')
    assert other.splitlines()[0].startswith(f'# Performance: {kind.upper()}')
    assert perf_report.summary(dict(fake_result(0.56, 1.0, 120.0, 0), run_kind=kind)
                               ).startswith(kind.upper())
  assert 'python benchmarks/make_report.py --results x/suites.json' in text
  assert 'Test CPU' in text and '[3.5, 3.0, 2.0]' in text and '[3.9, 3.1, 2.1]' in text
  assert 'The machine was shared' in text
  assert '## Targets' in text
  assert '| batched TTC FLOP/s vs same-run matmul FLOP/s | >= 70% | 56% | MISSED | 0.80 |' in text
  assert '| search over 1,000,000 photos, batch 1 | <= 50.0 ms | 120 ms | MISSED | 2.40 |' in text
  assert '11.80' in text  # the paper's phi at L = 8
  assert 'photos^1.00' in text


def test_bench_rejects_bad_flags(tmp_path):
  run = bench_script('bench_retrieval.py', '--quick', '--sections=components,gpu',
                f'--out={tmp_path / "x.json"}')
  assert run.returncode == 2 and "--sections: unknown 'gpu'" in run.stderr
  run = bench_script('bench_retrieval.py', '--quick', '--search_sizes=10,ten',
                f'--out={tmp_path / "x.json"}')
  assert run.returncode != 0 and 'comma-separated integers' in run.stderr
  assert not (tmp_path / 'x.json').exists()
  run = bench_script('make_report.py', f'--results={tmp_path / "missing.json"}')
  assert run.returncode != 0 and 'does not exist' in run.stderr


@pytest.mark.slow
def test_bench_quick_end_to_end_then_report(tmp_path):
  out, doc = tmp_path / 'suites.json', tmp_path / 'PERFORMANCE.md'
  elsewhere = tmp_path / 'elsewhere'  # run outside the repository: its folders named by flags
  elsewhere.mkdir()
  run = bench_script('bench_retrieval.py', '--quick', f'--out={out}', f'--workdir={tmp_path / "w"}',
                f'--config_dir={os.path.join(ROOT, "experiments", "configs", "tuned")}',
                cwd=elsewhere)
  assert run.returncode == 0, run.stderr[-3000:]
  assert os.listdir(elsewhere) == []
  assert 'targets:' in run.stdout and 'compilations during timed calls: 0' in run.stdout
  result = json.loads(out.read_text())
  from colt_jax.benchmarking import perf_suite
  assert result['schema'] == perf_suite.SCHEMA and result['sections'] == list(perf_suite.SECTIONS)
  for section in perf_suite.SECTIONS:
    assert section in result, section
  for name, entry in result['components'].items():
    assert entry['batch1']['median_ms'] > 0 and entry['batched']['per_query']['per_s'] > 0, name
  assert set(result['paths']) == {'topk', 'mmr', 'umons', 'colt'}
  assert result['ttc']['layers']['1']['flops_per_query'] > 0
  assert result['ttc']['flops_counted_on'] == 'hlo'
  assert [r['photos'] for r in result['scaling']['search']['rows']] == [1000, 4000]
  assert result['training']['ttc']['steps_per_s'] > 0
  assert result['compiles_after_warmup']['total'] == 0
  assert result['load_average_end'] is not None or result['machine']['load_average'] is None
  assert result['run_kind'] == 'quick'
  assert run.stdout.index('QUICK SMOKE RUN') < run.stdout.index('targets:')
  run = bench_script('make_report.py', f'--results={out}', f'--out={doc}')
  assert run.returncode == 0, run.stderr[-3000:]
  text = doc.read_text()
  assert text.splitlines()[0].startswith('# Performance: QUICK SMOKE RUN')
  assert '## Targets' in text and '## Training throughput' in text
  assert result['machine']['cpu'] in text


def _committed():
  """(bytes, mtime) of the committed results and report."""
  paths = [os.path.join(ROOT, 'docs', 'results', 'performance.json'),
           os.path.join(ROOT, 'docs', 'PERFORMANCE.md')]
  return [(open(p, 'rb').read(), os.stat(p).st_mtime_ns) for p in paths]


def test_smoke_runs_write_scratch_and_never_the_committed_results(tmp_path):
  """--quick (any run but the full one) writes work/bench/ by default, refuses the committed
  paths even when named, and its report says in its first line that it is a smoke run."""
  before = _committed()
  run = bench_script('bench_retrieval.py', '--quick', '--sections=reference', cwd=tmp_path)
  assert run.returncode == 0, run.stderr[-3000:]
  results = tmp_path / 'work' / 'bench' / 'performance.json'
  assert json.loads(results.read_text())['run_kind'] == 'quick'
  assert run.stdout.index('QUICK SMOKE RUN') < run.stdout.index('targets:')
  assert f'--results {os.path.join("work", "bench", "performance.json")}' in run.stdout
  run = bench_script('make_report.py', f'--results={results}', cwd=tmp_path)
  assert run.returncode == 0, run.stderr[-3000:]
  first = (tmp_path / 'work' / 'bench' / 'performance.md').read_text().splitlines()[0]
  assert first == '# Performance: QUICK SMOKE RUN (--quick: tiny sizes, not a measurement)'
  committed = os.path.join(ROOT, 'docs', 'results', 'performance.json')
  run = bench_script('bench_retrieval.py', '--quick', '--sections=reference', f'--out={committed}')
  assert run.returncode == 2 and 'the committed file' in run.stderr, run.stderr[-3000:]
  run = bench_script('make_report.py', f'--results={results}',
                f'--out={os.path.join(ROOT, "docs", "PERFORMANCE.md")}')
  assert run.returncode == 2 and 'the committed file' in run.stderr, run.stderr[-3000:]
  assert _committed() == before


def test_run_kinds_and_where_they_write():
  from colt_jax.benchmarking import suite_settings as ss
  assert ss.run_kind(ss.Settings(), ss.SECTIONS) == ss.FULL
  assert ss.run_kind(ss.Settings(synthetic_dir='/data/syn'), ss.SECTIONS) == ss.FULL
  assert ss.run_kind(ss.Settings(), ['reference']) == ss.PARTIAL
  assert ss.run_kind(ss.Settings(batch=8), ss.SECTIONS) == ss.PARTIAL
  assert ss.run_kind(ss.quick(), ss.SECTIONS) == ss.QUICK
  args = (ss.COMMITTED_RESULTS, ss.SCRATCH_RESULTS, '--out')
  assert ss.output_path(None, ss.FULL, *args) == ss.COMMITTED_RESULTS
  assert ss.output_path('', ss.QUICK, *args) == ss.SCRATCH_RESULTS
  assert ss.output_path('x.json', ss.PARTIAL, *args) == 'x.json'
  assert ss.output_path(ss.COMMITTED_RESULTS, ss.FULL, *args) == ss.COMMITTED_RESULTS
  for kind in (ss.QUICK, ss.PARTIAL):
    for path in (ss.COMMITTED_RESULTS, os.path.join(ROOT, ss.COMMITTED_RESULTS)):
      with pytest.raises(ValueError, match='committed file'):
        ss.output_path(path, kind, *args)


def test_cpu_caches_are_named_by_level():
  caches = timing.cpu_caches()
  assert all(k.startswith('L') and v for k, v in caches.items())
