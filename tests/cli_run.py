"""Running the command lines as a user does, and checking what they leave: a one-line
bad-input error (`assert_bad_input`), a folder's bytes (`tree_digest`)."""
import hashlib
import os
import re
import subprocess
import sys
from checkout import REPO  # pylint: disable=g-bad-import-order
import preloaded

CLIS = {
    'evaluate': 'experiments/evaluate.py', 'train_scl': 'experiments/train_scl.py',
    'make_dataset': 'data_prep/make_dataset.py', 'make_model': 'experiments/make_model.py',
    'train_ttc': 'experiments/train_ttc.py', 'reproduce': 'experiments/reproduce.py',
    'choose_steps': 'experiments/choose_steps.py', 'demo': 'experiments/demo.py',
    'make_synthetic': 'data_prep/make_synthetic.py',
    'extract_features': 'data_prep/extract_features.py',
    'index_collection': 'data_prep/index_collection.py', 'visualize': 'experiments/visualize.py',
}


def run_cli(name, *args, cwd):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return preloaded.run([sys.executable, os.path.join(REPO, CLIS[name]), *map(str, args)],
                       capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def tree_digest(path):
  """Every file's relative path, bytes and mode under `path` (missing folder: None). Tests
  compare a folder's digest before and after a command that must leave it alone: the same
  bytes read back, exact on every machine (never the outputs of two computations)."""
  if not os.path.exists(path):
    return None
  h = hashlib.sha256()
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for f in sorted(files):
      p = os.path.join(root, f)
      h.update(os.path.relpath(p, path).encode())
      h.update(oct(os.stat(p).st_mode).encode())
      with open(p, 'rb') as fh:
        h.update(fh.read())
    h.update(repr(sorted(dirs)).encode())
  return h.hexdigest()


LOG_LINE = re.compile(r'^[IWE]\d{4} \d\d:\d\d:')  # absl's log lines (progress, config)


def assert_bad_input(proc, *needles):
  """Status 2, one error line on stderr (besides log lines), no traceback, naming every
  needle."""
  lines = [l for l in proc.stderr.splitlines() if l.strip() and not LOG_LINE.match(l)]
  assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
  assert len(lines) == 1, proc.stderr[-3000:]
  assert 'Traceback' not in proc.stderr
  assert ': error: ' in lines[0], lines[0]
  for needle in needles:
    assert str(needle) in lines[0], (needle, lines[0])
  return lines[0]


def split_dir(root):
  return root / 'testset' / 'keywords'


def first_topic_title(root):
  text = (split_dir(root) / 'testsetkeywords_topics.xml').read_text()
  return re.search(r'<title>(.*?)</title>', text).group(1)


def run_script(script, *args, cwd):
  """A command line by its path (experiments/search.py, or a test's wrapper)."""
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return preloaded.run([sys.executable, os.path.join(REPO, script), *map(str, args)],
                       capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


PROGRESS = re.compile(r'^(scl|ttc): +\d+%\|')  # the trainers' progress bar (tqdm)


def without_progress(proc):
  """`proc` with the progress bar's lines dropped from stderr."""
  lines = [l for l in proc.stderr.splitlines() if not PROGRESS.match(l)]
  return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, '\n'.join(lines))
