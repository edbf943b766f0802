"""The shape of colt_jax (docs/DESIGN.md): every import runs downward through the layers, none
leaves the library, no module runs a CLI as a subprocess or reads docs/, modules stay small, and
no two modules share a name.
"""
import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join(REPO, 'colt_jax')

# Layer of every module (a package prefix stands for its modules; the longest prefix that
# names a module decides); lower numbers are lower.
LAYERS = {
    1: ('util',),
    # Candidate search (exact and approximate) imports the plumbing only; the collection
    # indexer (encoders) saves engines with a store.
    2: ('data', 'engines', 'encoders'),
    3: ('inputs',),
    # The baselines in one room (re-rankers, UMONS, gbt-pairs, the greedy selection they share
    # with colt-pairs, their versions): over data and inputs; the paper's modules, colt-pairs,
    # evaluation and the reproduction import them, never the reverse.
    4: ('baselines',),
    # The paper's method: g, phi, the SCL loss, augmentation, post-processing.
    5: ('model',),
    # The paper's pure train steps, the loop, the trainers and restore.
    6: ('train',),
    # colt-pairs and the rest beyond the paper: it extends model and train (a subclass of
    # phi, of TTCConfig, a train step, a recipe the trainers find by the config's class),
    # which never import it.
    7: ('pairs',),
    # The paper's inference (Alg. 2 and Eq. 6), which never imports colt-pairs.
    8: ('inference',),
    # colt-pairs' inference extends the paper's (its settings, a Retriever subclass listing by
    # phi's heads, registered with the paper's Retriever), so it lies above inference/ while
    # the rest of pairs/ lies below it: the trainers' extension (7) cannot sit above Alg. 2.
    9: ('pairs.inference',),
    10: ('evaluation',),
    # The HTTP service over the Retriever and the baselines.
    11: ('service',),
    # The research protocol over all of it: rows, choices, cross-validation, the report, and
    # the colt-pairs diagnostics (mains in experiments/).
    12: ('reproduction',),
    # The benchmarks' library over all of it (scripts in benchmarks/).
    13: ('benchmarking',),
}
OUTSIDE = ('experiments', 'benchmarks', 'data_prep', 'tests')
# The rooms that may name docs/: the reproduction and the benchmarks write the documents
# (docs/RESULTS.md, docs/PERFORMANCE.md, ... and their JSON), whose committed places are their
# defaults.
DOCUMENT_WRITERS = ('reproduction', 'benchmarking')
# The one room that may start a process: the service benchmark starts the service it measures.
PROCESS_STARTERS = ('benchmarking',)
# Modules allowed past 400 lines, and why (none: a long module is split by job).
LONG_MODULES = {}


def _modules():
  for root, _, files in os.walk(LIBRARY):
    for f in sorted(files):
      if f.endswith('.py'):
        path = os.path.join(root, f)
        rel = os.path.relpath(path, LIBRARY)
        name = rel[:-3].replace(os.sep, '.')
        if name == '__init__' or name.endswith('.__init__'):
          name = name[:-len('__init__')].rstrip('.')
        yield name, path


def layer_of(name: str) -> int:
  found = [(len(p), layer) for layer, prefixes in LAYERS.items() for p in prefixes
           if name == p or name.startswith(p + '.')]
  if not found:
    raise AssertionError(f'colt_jax.{name} is in no layer: add it to tests/test_layers.py')
  return max(found)[1]


def _imports(path: str):
  """(line, imported colt_jax module or outside top-level name) of every import."""
  tree = ast.parse(open(path).read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        yield node.lineno, a.name
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      if node.module == 'colt_jax':
        for a in node.names:
          yield node.lineno, f'colt_jax.{a.name}'
      else:
        yield node.lineno, node.module


def _resolve(imported: str) -> str:
  """colt_jax.x.y (a module, or a name in one) -> the module's name inside colt_jax."""
  parts = imported.split('.')[1:]
  while parts:
    base = os.path.join(LIBRARY, *parts)
    if os.path.isfile(base + '.py') or os.path.isdir(base):
      return '.'.join(parts)
    parts.pop()
  return ''


def test_every_module_has_a_layer():
  for name, _ in _modules():
    if name:
      layer_of(name)


def test_imports_run_downward_and_stay_inside():
  bad = []
  for name, path in _modules():
    if not name:
      continue
    mine = layer_of(name)
    for line, imported in _imports(path):
      top = imported.split('.')[0]
      if top in OUTSIDE:
        bad.append(f'colt_jax/{os.path.relpath(path, LIBRARY)}:{line} imports {imported} '
                   '(outside the library)')
      if top != 'colt_jax':
        continue
      target = _resolve(imported)
      if target and layer_of(target) > mine:
        bad.append(f'colt_jax/{os.path.relpath(path, LIBRARY)}:{line} (layer {mine}) imports '
                   f'colt_jax.{target} (layer {layer_of(target)})')
  assert not bad, '\n'.join(bad)


def test_no_subprocess_of_own_clis_and_no_reading_docs():
  bad = []
  for name, path in _modules():
    text = open(path).read()
    rel = os.path.relpath(path, LIBRARY)
    writes_documents = any(name == p or name.startswith(p + '.') for p in DOCUMENT_WRITERS)
    starts_processes = any(name == p or name.startswith(p + '.') for p in PROCESS_STARTERS)
    if 'subprocess' in text and not starts_processes:
      bad.append(f'{rel}: uses subprocess')
    tree = ast.parse(text)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr)}
    for node in ast.walk(tree):
      if (isinstance(node, ast.Constant) and isinstance(node.value, str)
          and id(node) not in docstrings):
        if writes_documents:
          continue
        if node.value.startswith(('docs/', 'docs' + os.sep)) or node.value == 'docs':
          bad.append(f'{rel}:{node.lineno}: names docs/ ({node.value!r})')
  assert not bad, '\n'.join(bad)


def test_no_two_modules_share_a_name():
  """Every module of colt_jax/ has a basename of its own (package `__init__.py`s aside): a
  name says what a module is without its folder, in imports, tracebacks and documents."""
  where = {}
  for _, path in _modules():
    base = os.path.basename(path)
    if base != '__init__.py':
      where.setdefault(base, []).append(os.path.relpath(path, LIBRARY))
  shared = {base: paths for base, paths in sorted(where.items()) if len(paths) > 1}
  assert not shared, (
      'modules of colt_jax/ that share a name (rename one of each, to a name that says what it '
      'is):\n' + '\n'.join(f'  {base}: {", ".join(sorted(paths))}'
                             for base, paths in shared.items()))


@pytest.mark.parametrize('limit', [400])
def test_modules_are_small_or_say_why(limit):
  long = {}
  for _, path in _modules():
    rel = os.path.relpath(path, LIBRARY)
    n = sum(1 for _ in open(path))
    if n > limit and rel not in LONG_MODULES:
      long[rel] = n
  assert not long, long


def test_one_l2_normalise():
  """One helper (colt_jax/util/numerics.py), not one per module."""
  defs = []
  for _, path in _modules():
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.FunctionDef) and 'normalis' in node.name and 'name' not in node.name:
        defs.append(f'{os.path.relpath(path, LIBRARY)}:{node.name}')
  assert defs == ['util/numerics.py:l2_normalise'], defs


def _test_files():
  tests = os.path.join(REPO, 'tests')
  for root, dirs, files in os.walk(tests):
    dirs[:] = sorted(d for d in dirs if d not in ('fixtures', '__pycache__'))
    for f in sorted(files):
      if f.endswith('.py'):
        yield os.path.relpath(os.path.join(root, f), tests)


def test_tests_mirror_the_package():
  """tests/<subpackage>/ holds the tests of colt_jax/<subpackage>/ (one folder for each, none
  for anything else); the suite's own tests, its helpers and the whole-CLI tests sit at the
  top. Test modules and helpers have names of their own across folders: pytest imports them by
  basename (no __init__.py), so two of a name would shadow each other."""
  packages = sorted(d for d in os.listdir(LIBRARY)
                    if os.path.isfile(os.path.join(LIBRARY, d, '__init__.py')))
  files = list(_test_files())
  folders = sorted({os.path.dirname(f) for f in files} - {''})
  assert folders == packages, (folders, packages)
  bases = [os.path.basename(f) for f in files if os.path.basename(f) != 'conftest.py']
  assert len(bases) == len(set(bases)), sorted(b for b in bases if bases.count(b) > 1)


@pytest.mark.parametrize('limit', [700])
def test_test_modules_are_small(limit):
  """A test module reads in one sitting: over `limit` lines it is split by what it tests."""
  tests = os.path.join(REPO, 'tests')
  long = {f: n for f in _test_files()
          if (n := sum(1 for _ in open(os.path.join(tests, f)))) > limit}
  assert not long, long


# The research application over the library: the reproduction (the research protocol) and the
# benchmarks' library. Nothing else of colt_jax imports them (the layers say so: they lie on
# top), and the library's mains that search start without them.
RESEARCH = ('reproduction', 'benchmarking')


def test_no_library_room_imports_the_research_application():
  bad = []
  for name, path in _modules():
    if not name or any(name == r or name.startswith(r + '.') for r in RESEARCH):
      continue
    for line, imported in _imports(path):
      target = _resolve(imported) if imported.split('.')[0] == 'colt_jax' else ''
      if any(target == r or target.startswith(r + '.') for r in RESEARCH):
        bad.append(f'colt_jax/{os.path.relpath(path, LIBRARY)}:{line} imports colt_jax.{target}')
  assert not bad, '\n'.join(bad)


def _dirname_depth(node: ast.AST) -> int:
  """How many os.path.dirname calls wrap `node` down to a `__file__` (0: none is there)."""
  if isinstance(node, ast.Name) and node.id == '__file__':
    return 1
  if isinstance(node, ast.Call):
    inner = max((_dirname_depth(a) for a in node.args), default=0)
    func = node.func
    is_dirname = isinstance(func, ast.Attribute) and func.attr == 'dirname'
    return inner + 1 if inner and is_dirname else inner
  return 0


def test_no_checkout_path_is_computed_from_file():
  """A module may find files of its own folder (package data: the static page, model_free.json)
  but never climbs from its `__file__` to a checkout: the reproduction and the benchmarks take
  their folders from flags, relative to the working folder."""
  bad = []
  for _, path in _modules():
    rel = os.path.relpath(path, LIBRARY)
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.Call):
        depth = _dirname_depth(node)
        if depth > 2:  # __file__ itself counts 1; its own folder 2
          bad.append(f'colt_jax/{rel}:{node.lineno}: a folder above its own from __file__')
      if (isinstance(node, ast.Attribute) and node.attr in ('parent', 'parents')
          and '__file__' in ast.unparse(node)):
        bad.append(f'colt_jax/{rel}:{node.lineno}: a folder above its own from __file__')
  assert not bad, '\n'.join(bad)


def test_the_check_of_file_paths_finds_a_climb():
  """The check above is not vacuous: a climb from __file__ is found, its own folder is not."""
  climb = ast.parse('os.path.dirname(os.path.dirname(os.path.abspath(__file__)))').body[0].value
  own = ast.parse('os.path.join(os.path.dirname(os.path.abspath(__file__)), "x")').body[0].value
  assert _dirname_depth(climb) == 3 and _dirname_depth(own) == 2


SEARCH_MAINS = ('experiments/search.py', 'experiments/serve.py')
_IMPORTED = r'''
import runpy, sys
sys.argv = [sys.argv[1], '--helpshort']
try:
  runpy.run_path(sys.argv[0], run_name='__main__')
except SystemExit:
  pass
print('\n'.join(sorted(m for m in sys.modules if m.startswith('colt_jax'))))
'''


@pytest.mark.parametrize('main', SEARCH_MAINS)
def test_the_search_mains_start_without_the_research_application(main):
  """search.py and serve.py (their whole import closure, as they start) import no module of
  colt_jax.reproduction or colt_jax.benchmarking: the default model's path comes from
  colt_jax.inference.default_model."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  done = subprocess.run([sys.executable, '-c', _IMPORTED, os.path.join(REPO, main)],
                        capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
  assert done.returncode == 0, done.stderr[-2000:]
  imported = done.stdout.split()
  assert 'colt_jax.inference.default_model' in imported, imported  # the closure was seen
  research = [m for m in imported if m.split('.')[1:2] and m.split('.')[1] in RESEARCH]
  assert not research, f'{main} imports {research}'
