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
