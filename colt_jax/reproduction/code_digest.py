"""What a cached row's numbers depend on in code, independent of where that code lives.

A row of the reproduction is cached with a digest of the code that computed it, so an edit of
that code recomputes the row instead of leaving numbers of older code in the report. The
digest is of the code's meaning as far as a parse can tell, not of its files: each module is
parsed, its imports, docstrings and comments are dropped, and a qualified use of a module
(`baselines.mmr`, `metrics_lib.topic_metrics`) counts as the bare name (`mmr`); the
definitions of all modules are then sorted. Moving a function between modules, renaming a
module or an import alias, or rewording a docstring keeps every cached row; changing what
any statement does recomputes them.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
from types import ModuleType
from typing import Iterable


class _Normalise(ast.NodeTransformer):
  """Drops docstrings and module qualifiers of the names a module imports."""

  def __init__(self, module_names: set):
    self.module_names = module_names

  def visit_Import(self, node):
    return None  # an import inside a function: where a name comes from, not what it does

  visit_ImportFrom = visit_Import

  def visit_Attribute(self, node: ast.Attribute):
    self.generic_visit(node)
    if isinstance(node.value, ast.Name) and node.value.id in self.module_names:
      return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)
    return node

  def _strip_docstring(self, node):
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str):
      node.body = body[1:] or [ast.Pass()]
    return node

  def visit_FunctionDef(self, node):
    self.generic_visit(node)
    return self._strip_docstring(node)

  visit_AsyncFunctionDef = visit_FunctionDef

  def visit_ClassDef(self, node):
    self.generic_visit(node)
    return self._strip_docstring(node)


def _imported_modules(tree: ast.Module) -> set:
  """Local names bound to modules by the module's imports (`import x.y as z`, `from p
  import m` where m is a module of this project or a library: any `from` import of a name
  that is itself a module is treated as one when it is lowercase)."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        names.add(a.asname or a.name.split('.')[0])
    elif isinstance(node, ast.ImportFrom):
      for a in node.names:
        local = a.asname or a.name
        if a.name.islower():
          names.add(local)
  return names


def _definitions(source: str) -> list:
  tree = ast.parse(source)
  modules = _imported_modules(tree)
  body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
  if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
    body = body[1:]  # the module docstring
  normalise = _Normalise(modules)
  return [ast.dump(normalise.visit(n), annotate_fields=False) for n in body]


def code_digest(modules: Iterable[ModuleType]) -> str:
  """A 12-hex digest of the definitions of `modules`, wherever they are defined."""
  return sources_digest(inspect.getsource(module) for module in modules)


def sources_digest(sources: Iterable[str]) -> str:
  """`code_digest` of module sources."""
  definitions = []
  for source in sources:
    definitions.extend(_definitions(source))
  digest = hashlib.sha256()
  for d in sorted(definitions):
    digest.update(d.encode())
    digest.update(b'\0')
  return digest.hexdigest()[:12]
