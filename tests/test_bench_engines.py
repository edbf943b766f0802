"""benchmarks/bench_engines.py end to end at a tiny size (figures printed, not asserted)."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_engines_writes_json_and_a_report(tmp_path):
  out, doc = tmp_path / 'engines.json', tmp_path / 'ENGINES.md'
  done = subprocess.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'bench_engines.py'), '--sizes=3000',
       '--dim=16', '--queries=5', '--centres=20', '--n=50', '--engines=exact,faiss-ivf',
       f'--out={out}', f'--doc={doc}'], capture_output=True, text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=REPO))
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(out.read_text())
  entry = report['sizes']['3000']['engines']
  assert set(entry) == {'exact', 'faiss-ivf'} and entry['exact']['recall'] == 1.0
  assert 0.0 <= entry['faiss-ivf']['recall'] <= 1.0
  assert entry['exact']['timing']['repeats'] == 5
  text = doc.read_text()
  assert '`python benchmarks/bench_engines.py --sizes=3000' in text
  assert '| faiss-ivf |' in text and '3,000 photos' in text


def test_doc_sections_name_their_commands_and_doc_only_renders_saved_reports(tmp_path):
  run = lambda *a: subprocess.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'bench_engines.py'), *a],
      capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
  small, big = tmp_path / 'small.json', tmp_path / 'big.json'
  common = ['--dim=16', '--queries=4', '--centres=20', '--n=20', '--chunk=1000']
  assert run('--sizes=2000', '--engines=exact', f'--out={small}', *common).returncode == 0
  done = run('--sizes=5000', '--engines=faiss-ivfsq', '--stream', f'--out={big}',
             f'--doc={tmp_path / "a.md"}', f'--doc_also={small}', *common)
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(big.read_text())
  assert report['stream'] and '--stream' in report['command']
  entry = report['sizes']['5000']['engines']['faiss-ivfsq']
  # 25 cells (1000 training rows / 39), all searched (nprobe 32): only sq8 rounding can miss
  assert 0.9 <= entry['recall'] <= 1.0
  text = (tmp_path / 'a.md').read_text()
  assert text.index('2,000 photos') < text.index('5,000 photos')
  assert '--sizes=2000' in text and '--sizes=5000' in text
  assert run('--doc_only', f'--doc={tmp_path / "b.md"}', f'--doc_also={small},{big}'
             ).returncode == 0
  assert (tmp_path / 'b.md').read_text() == text
  bad = run('--doc_only', f'--doc={tmp_path / "c.md"}', f'--doc_also={tmp_path / "a.md"}')
  assert bad.returncode != 0 and 'a.md: not a JSON report' in bad.stderr
