"""benchmarks/bench_engines.py end to end at a tiny size (figures printed, not asserted), and
the usage text of the benchmark and data_prep scripts."""
import ast
import json
import os
import re
import sys

import pytest
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order



@pytest.mark.slow
def test_bench_engines_writes_json_and_a_report(tmp_path):
  out, doc = tmp_path / 'engines.json', tmp_path / 'ENGINES.md'
  done = preloaded.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'bench_engines.py'), '--sizes=3000',
       '--dim=16', '--queries=5', '--centres=20', '--n=50', '--engines=exact,faiss-ivf',
       f'--out={out}', f'--doc={doc}'], capture_output=True, text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=REPO))
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(out.read_text())
  entry = report['sizes']['3000']['engines']
  assert set(entry) == {'exact', 'faiss-ivf'}
  [exact] = entry['exact']['settings']
  assert exact['recall'] == 1.0 and exact['nprobe'] is None
  assert exact['timing']['repeats'] == 5
  [ivf] = entry['faiss-ivf']['settings']
  assert ivf['nprobe'] == 32 and 0.0 <= ivf['recall'] <= 1.0
  assert entry['faiss-ivf']['params'] == {'nlist': 76}  # 3000 rows / 39 (4 sqrt(M) = 219)
  text = doc.read_text()
  assert '`python benchmarks/bench_engines.py --sizes=3000' in text
  assert '| faiss-ivf | 76 | 32 |' in text and '3,000 photos' in text


@pytest.mark.slow
def test_nprobe_settings_share_one_build_and_target_recall_picks_one(tmp_path):
  out, doc = tmp_path / 'engines.json', tmp_path / 'ENGINES.md'
  run = lambda *a: preloaded.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'bench_engines.py'), '--sizes=6000',
       '--dim=16', '--queries=10', '--centres=30', '--n=50', *a],
      capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
  done = run('--engines=faiss-ivf,faiss-hnsw', '--nprobe=16,1,4', '--target_recall=0.9',
             '--tune_queries=40', '--nlist=60', f'--out={out}', f'--doc={doc}')
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(out.read_text())
  assert report['nprobe'] == [1, 4, 16] and report['target_recall'] == 0.9
  ivf = report['sizes']['6000']['engines']['faiss-ivf']
  tuning = ivf['tuning']
  assert tuning['queries'] == 40 and tuning['n'] == 50 and tuning['reached']
  probes = [s['nprobe'] for s in ivf['settings']]
  assert probes == sorted({1, 4, 16, tuning['nprobe']}) and ivf['params'] == {'nlist': 60}
  recalls = [s['recall'] for s in ivf['settings']]
  assert recalls == sorted(recalls) and recalls[0] < recalls[-1]  # more cells: more found
  picked = ivf['settings'][probes.index(tuning['nprobe'])]
  assert picked['recall'] >= 0.8  # tuned on other queries of the same distribution
  assert [s['nprobe'] for s in report['sizes']['6000']['engines']['faiss-hnsw']['settings']
          ] == [None]
  text = doc.read_text()
  assert f'| faiss-ivf | 60 | {tuning["nprobe"]} (picked) |' in text
  assert '| faiss-ivf | 60 | 1 |' in text and '| faiss-hnsw | - | - |' in text
  assert (f'faiss-ivf: nprobe {tuning["nprobe"]} picked by `engines.tune_nprobe` for '
          'recall@50 >= 0.9 on 40 other queries') in text
  fastest = min((r for r in ivf['settings'] if r['recall'] >= 0.9),
                key=lambda r: r['timing']['median_ms'], default=None)
  hnsw = report['sizes']['6000']['engines']['faiss-hnsw']['settings'][0]
  if hnsw['recall'] >= 0.9 and (fastest is None or hnsw['timing']['median_ms'] < fastest[
      'timing']['median_ms']):
    assert 'Fastest at recall@50 >= 0.9: faiss-hnsw, ' in text
  else:
    assert f'Fastest at recall@50 >= 0.9: faiss-ivf at nprobe {fastest["nprobe"]}, ' in text
  for args, message in ((['--engines=exact', '--target_recall=0.9'],
                         '--target_recall applies to IVF engines'),
                        (['--engines=faiss-ivf', '--nprobe=4,0'], '--nprobe'),
                        (['--engines=faiss-ivf', '--target_recall=1.5'], 'target_recall')):
    bad = run(*args)
    assert bad.returncode != 0 and message in bad.stderr.strip().splitlines()[-1], bad.stderr


@pytest.mark.slow
def test_doc_sections_name_their_commands_and_doc_only_renders_saved_reports(tmp_path):
  run = lambda *a: preloaded.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'bench_engines.py'), *a],
      capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
  small, big = tmp_path / 'small.json', tmp_path / 'big.json'
  common = ['--dim=16', '--queries=4', '--centres=20', '--n=20', '--chunk=1000']
  assert run('--sizes=2000', '--engines=exact', f'--out={small}', *common).returncode == 0
  done = run('--sizes=5000', '--engines=faiss-ivfsq', '--stream', '--train_rows=1000',
             f'--out={big}',
             f'--doc={tmp_path / "a.md"}', f'--doc_also={small}', *common)
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(big.read_text())
  assert report['stream'] and '--stream' in report['command']
  entry = report['sizes']['5000']['engines']['faiss-ivfsq']
  # 25 cells (1000 training rows / 39, the first of the rows streamed), all searched (nprobe
  # 32): only sq8 rounding can miss
  assert entry['params'] == {'nlist': 25} and 0.9 <= entry['settings'][0]['recall'] <= 1.0
  text = (tmp_path / 'a.md').read_text()
  assert text.index('2,000 photos') < text.index('5,000 photos')
  assert '--sizes=2000' in text and '--sizes=5000' in text
  assert run('--doc_only', f'--doc={tmp_path / "b.md"}', f'--doc_also={small},{big}'
             ).returncode == 0
  assert (tmp_path / 'b.md').read_text() == text
  bad = run('--doc_only', f'--doc={tmp_path / "c.md"}', f'--doc_also={tmp_path / "a.md"}')
  assert bad.returncode != 0 and 'a.md: not a JSON report' in bad.stderr
  # JSON of another shape: one line (it was a KeyError, an internal error).
  for payload in ({'sizes': 'x', 'command': 5}, [1], {'sizes': {'10': 1}, 'command': 'c',
                                                       'machine': {}}):
    shape = tmp_path / 'shape.json'
    shape.write_text(json.dumps(payload))
    bad = run('--doc_only', f'--doc={tmp_path / "d.md"}', f'--doc_also={shape}')
    assert bad.returncode == 2 and 'shape.json: not a report of this benchmark' in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


# The scripts whose --help prints their module docstring (absl), line breaks included.
SCRIPTS = ('benchmarks/bench_engines.py', 'benchmarks/bench_retrieval.py',
           'benchmarks/make_report.py', 'data_prep/extract_features.py',
           'data_prep/index_collection.py', 'data_prep/make_synthetic.py',
           'data_prep/make_dataset.py')


@pytest.mark.parametrize('script', SCRIPTS)
def test_helpshort_exits_0_and_prints_the_usage_line_by_line(script, tmp_path):
  done = preloaded.run([sys.executable, os.path.join(REPO, script), '--helpshort'],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu'))
  assert done.returncode == 0, done.stderr[-2000:]
  with open(os.path.join(REPO, script)) as f:
    source = f.read()
  node = ast.parse(source).body[0].value
  doc = node.value
  # The docstring as written: a line ending in a backslash stays a line (in a docstring that
  # is not raw, the backslash would join it with the next).
  written = ast.get_source_segment(source, node).lstrip('r').strip('"')
  printed = done.stdout.splitlines()
  for line in written.splitlines():
    assert line in printed, f'{script}: usage line {line!r} not printed as a line'
  assert 'issue' not in doc.lower(), script
  for path in re.findall(r'\b(?:colt_jax|experiments|benchmarks|data_prep|docs)/[\w/.-]*\w',
                         doc):
    assert os.path.exists(os.path.join(REPO, path)), f'{script} names {path}: no such file'
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('script', SCRIPTS)
def test_scripts_import_without_editing_sys_path(script):
  """The scripts import their library as `from colt_jax.benchmarking import x`, never through
  an edited sys.path."""
  with open(os.path.join(REPO, script)) as f:
    tree = ast.parse(f.read())
  edits = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute)
           and n.attr == 'path' and isinstance(n.value, ast.Name) and n.value.id == 'sys']
  assert not edits, f'{script}: sys.path at lines {edits}'
