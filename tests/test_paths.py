"""Every repository path that the docs, configs, docstrings, comments and help texts name exists
(a moved module or flagfile leaves no stale pointer behind)."""
import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A path into one of the repository's own folders, ending in a file type the repo holds.
PATH = re.compile(r'(?<![\w/.<>{}-])((?:colt_jax|experiments|benchmarks|data_prep|tests|docs|'
                  r'row-cache)/[\w./-]*\.(?:py|md|flags|json|html))\b')


def _texts():
  names = ['README.md', 'BUILD.md', 'Makefile']
  names += glob.glob('docs/*.md', root_dir=REPO)
  names += glob.glob('experiments/configs/*/*.flags', root_dir=REPO)
  for folder in ('colt_jax', 'experiments', 'benchmarks', 'data_prep'):
    names += glob.glob(f'{folder}/**/*.py', root_dir=REPO, recursive=True)
  return sorted(names)


def test_every_named_repository_path_exists():
  missing = []
  for name in _texts():
    with open(os.path.join(REPO, name), encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        for path in PATH.findall(line):
          if not os.path.exists(os.path.join(REPO, path.rstrip('.'))):
            missing.append(f'{name}:{number}: {path}')
  assert not missing, '\n'.join(missing)
