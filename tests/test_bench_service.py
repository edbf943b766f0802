"""benchmarks/bench_service.py's row sizes and report text (the load run itself is a benchmark:
figures printed, never asserted). In a child process: the script defines absl flags that
other scripts imported by the suite define too."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECK = """
import bench_service as b
assert [b.requests_per_row(c, 0) for c in (1, 8, 32)] == [384, 512, 2048]
assert [b.requests_per_row(c, 100) for c in (1, 32)] == [100, 100]
assert b._requests_text(384) == '384 requests per row'  # an older report
assert b._requests_text({'1': 384, '32': 2048, '8': 512}) == (
    '384, 512, 2048 requests at 1, 8, 32 clients')
print('ok')
"""


def test_rows_run_64_rounds_of_every_client_unless_told_and_the_report_names_them():
  done = subprocess.run([sys.executable, '-c', CHECK], capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                            [REPO, os.path.join(REPO, 'benchmarks')])))
  assert done.returncode == 0 and done.stdout.strip() == 'ok', done.stderr[-2000:]
