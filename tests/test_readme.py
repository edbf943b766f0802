"""Tests of README.md's instructions that can be checked without the data they name."""
import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
    return f.read()


def _snippets():
  return re.findall(r'```python\n(.*?)```', _readme(), re.S)


def test_python_snippets_name_no_path_relative_to_the_current_folder():
  """The snippets work from any folder: every path is built from the package's location or
  an environment variable, never a literal such as 'work/...' or '../shared/...'."""
  snippets = _snippets()
  assert len(snippets) >= 2
  for code in snippets:
    tree = ast.parse(code)  # and each one is valid Python
    literals = [n.value for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    relative = [s for s in literals if ('/' in s or s.startswith('.')) and not
                os.path.isabs(s)]
    assert not relative, f'relative paths in a README snippet: {relative}\n{code}'


def test_python_snippets_import_what_exists():
  """Every import of a README snippet runs (a moved module leaves no stale snippet)."""
  for code in _snippets():
    tree = ast.parse(code)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports
    exec(compile(ast.Module(body=imports, type_ignores=[]), 'README snippet', 'exec'), {})  # pylint: disable=exec-used


def test_the_headline_table_is_the_reports_own():
  """The README's real-data table is the one docs/RESULTS.md's summary was written with
  (`python experiments/reproduce.py --dataset div400 --report_only`), row for row."""
  with open(os.path.join(REPO, 'docs', 'RESULTS.md'), encoding='utf-8') as f:
    report = f.read().split('\n')
  summary = report[:report.index('## Summary') + 30]
  table = [l for l in _readme().split('\n') if l.startswith('| ') and 'F1@20' in _readme()]
  headline = [l for l in table if 'recommended' in l or 'top-k over f' in l
              or 'post-processing' in l or 'CoLT, tuned here' in l or l.startswith('| method | CV')]
  assert len(headline) == 5
  for line in headline:
    assert line in summary, line


def test_the_readmes_relevance_bound_is_the_reports():
  """The README's one number beyond the table (what oracle relevance would add) is the one
  docs/RESULTS.md's summary states (written by reproduce.py --report_only)."""
  import re  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO, 'docs', 'RESULTS.md'), encoding='utf-8') as f:
    report = f.read()
  bound = re.search(r"relevance in place of phi's would add (\+\d\.\d+) F1@20", report)
  assert bound, 'RESULTS.md states no relevance bound'
  assert f'would add {bound.group(1)} F1@20' in ' '.join(_readme().split())
