"""The service benchmark's row sizes and report text (colt_jax/benchmarking/service_load.py and
service_report.py; the load run itself is a benchmark: figures printed, never asserted),
checked in a child process."""
import os
import subprocess
import sys
from checkout import REPO  # pylint: disable=g-bad-import-order


CHECK = """
import os
from colt_jax.benchmarking import service_load
from colt_jax.benchmarking import service_report
assert [service_load.requests_per_row(c, 0) for c in (1, 8, 32)] == [384, 512, 2048]
assert [service_load.requests_per_row(c, 100) for c in (1, 32)] == [100, 100]
assert service_report.requests_text(384) == '384 requests per row'  # an older report
assert service_report.requests_text({'1': 384, '32': 2048, '8': 512}) == (
    '384, 512, 2048 requests at 1, 8, 32 clients')
assert service_report.rounds_text(3) == 'in each of 3 timed rounds '
assert service_report.rounds_text(None) == ''

def load(answers, client_s, server_s):
  out = service_load.Load()
  out.latencies, out.batch_sizes = [0.01] * answers, [4] * answers
  out.client_cpu_s, out.server_cpu_s = client_s, server_s
  return out

# Two rounds of 40 answers in 2 s and 4 s, between in-process runs of 30, 10 and 30 q/s.
loads = [(load(40, 0.5, 1.0), 2.0), (load(40, 0.5, None), 4.0)]
pooled, wall = service_load.pooled(loads)
assert (len(pooled.latencies), wall, pooled.client_cpu_s, pooled.server_cpu_s) == (
    80, 6.0, 1.0, None)
ratios = service_load.round_ratios(loads, [{'per_s': 30.0}, {'per_s': 10.0}, {'per_s': 30.0}], 4, 40)
assert [round(r, 6) for r in ratios] == [1.0, 0.5], ratios  # 20 / 20, 10 / 20

# The gap line, from the report's own figures, only when the throughput target is missed.
level = {'service': {'per_s': 300.0, 'batch_size_mean': 30.0, 'server_cpu_ms_per_request': 5.0,
                     'client_cpu_ms_per_request': 0.1, 'mean_ms': 100.0,
                     'server_ms': {'queue': 3.0, 'rerank': 85.0, 'total': 90.0}},
         'in_process_per_s': 400.0, 'in_process_cpu_ms_per_query': 4.5}
entry = {'levels': {'32': level}, 'targets': {'clients': 32, 'throughput_met': False}}
line = service_report.gap_line(entry)
assert '30.0 queries (the mean batch) took 100.0 ms in the service' in line, line
assert 'against 75.0 ms at the in-process rate, 25.0 ms more' in line, line
assert 'took 85.0 ms against 80.0 ms in-process' in line and 'waited 3.0 ms' in line, line
assert 'took 2.0 ms (server total' in line and '10.0 ms of a request' in line, line
assert 'model is idle (15.0 ms per batch' in line, line
assert '0.50 ms more CPU per query' in line and '15.0 ms per 30.0 queries' in line, line
assert 'the clients 0.10 ms per query (3.0 ms)' in line, line
# 300 / 400 q/s = (4.5 / 5.1 ms per query) x (1.53 / 1.80 cores busy)
assert ('The ratio (0.75) is the product of two factors of these figures: CPU per query, '
        '4.50 ms in-process against 5.10 ms for the service and its clients (0.88)') in line, line
assert '1.53 cores in use on average' in line and 'against 1.80 in-process (0.85)' in line, line
assert 'stays below 0.9x with the cores as busy as in-process' in line, line
assert 'less CPU per query, or 1.84 cores in use on average.' in line, line  # .9 x 400 x 5.1
assert service_report.ratio_factors(300.0, 0.0, 400.0, 4.5) == ''
level['service']['server_cpu_ms_per_request'] = 4.0
line = service_report.gap_line(entry)
assert 'no more CPU per query than the in-process path (4.00 against 4.50)' in line, line
assert '4.10 ms for the service and its clients (1.10)' in line, line
assert 'stays below' not in line and line.endswith('in-process (0.68).'), line
assert 'which these figures do not split between the HTTP layer and the model' in line, line
# With the service's threads measured, the line splits its CPU per query by them.
level['service']['server_thread_cpu_ms_per_request'] = {'event loop': 0.25, 'XLA': 3.5,
                                                        'other': 0.25}
line = service_report.gap_line(entry)
assert ('the event loop (its main thread: the HTTP requests, their parsing, the answers) '
        '0.25 ms (7.5 ms per batch') in line, line
assert "XLA's threads (the model's computation) 3.50 ms" in line, line
assert 'the other threads (the batcher) 0.25 ms' in line and 'do not split' not in line, line
del level['service']['server_thread_cpu_ms_per_request']
# This process's threads by kind: the main thread is the "event loop" and has run.
threads = service_load.thread_cpu_seconds(os.getpid())
assert set(threads) == set(service_load.THREAD_KINDS) and threads['event loop'] > 0, threads
assert service_load.thread_cpu_seconds(2 ** 30) is None  # no such process
# The committed 100k report's section carries the line unless its target is met and settled
# by the rounds (their interval above 0.9).
import json, os
with open(os.path.join(os.environ['COLT_JAX_REPO'], 'docs', 'results', 'service',
                       'service-100k.json')) as f:
  report = json.load(f)
size, committed = next(iter(report['sizes'].items()))
levels = committed['levels']
for met, rounds, shown in ((False, [0.85, 0.86, 0.87], True), (True, [0.88, 0.91, 0.94], True),
                           (True, [0.95, 0.95, 0.96], False)):
  sized = dict(committed, targets=dict(committed['targets'], throughput_met=met),
               levels=dict(levels, **{'32': dict(levels['32'], round_ratios=rounds)}))
  section = '\\n'.join(service_report.size_section(report, int(size), sized))
  assert ('- Where the difference goes, at 32 clients' in section) == shown, section
assert service_report.gap_line(dict(entry, targets={'clients': 32, 'throughput_met': True})) is None
del level['service']['server_ms']  # an older report: no line
assert service_report.gap_line(entry) is None
# The throughput verdict: the pooled ratio, and whether the rounds' 95% t-interval settles it.
mean, low, high = service_report.round_interval([0.90, 0.91, 0.88])
assert abs(mean - 0.8966667) < 1e-6 and abs((high - low) / 2 - 0.0379444) < 1e-5, (low, high)
assert service_report.round_interval([0.9]) is None and service_report.round_interval(None) is None
assert service_report.throughput_verdict(0.95) == 'met' and service_report.throughput_verdict(0.85, [0.85]) == 'NOT met'
assert service_report.throughput_verdict(0.95, [0.94, 0.95, 0.96]).startswith("met (the rounds' mean 0.950")
assert service_report.throughput_verdict(0.85, [0.84, 0.85, 0.86]).startswith('NOT met (the rounds')
assert service_report.throughput_verdict(0.899, [0.90, 0.91, 0.88]) == (
    "NOT met by the pooled figure, not settled by the rounds (the rounds' mean 0.897, 95% "
    'interval [0.859, 0.935] over 3 rounds, which holds 0.9)')
line = service_report.target_lines({'clients': 32, 'throughput_ratio': 0.8994, 'errors': 0}, [0.9, 0.9])[0]
assert line.startswith('target: at 32 clients the service answers 0.899x'), line  # 3 decimals
print('ok')
"""


def test_rows_run_64_rounds_of_every_client_unless_told_and_the_report_names_them():
  """Row sizes, rounds, pooling, each round's ratio and the generated gap line."""
  done = subprocess.run([sys.executable, '-c', CHECK], capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, PYTHONPATH=REPO, COLT_JAX_REPO=REPO))
  assert done.returncode == 0 and done.stdout.strip() == 'ok', done.stderr[-2000:]
