"""The official MediaEval layout's file formats at the lowest level: reading a file's bytes and
lines, splitting fields, numbers, photo ids and names, the XML records of topics and photos,
and HTML in titles (`clean_html`); every problem a `DatasetFormatError` naming the file and
line."""
from __future__ import annotations

import html
import math
import os
import re
from typing import Optional
from xml.parsers import expat

from colt_jax.util.errors import InputError

INTEGER = re.compile(r'[+-]?\d+')
_ID = re.compile(r'[^\s,]+')
_UNSAFE_NAME = re.compile(r'[/\\\x00]')
# Inline tags vanish without a trace ("<b>St</b>one" -> "Stone"); any other tag (br, p, div,
# li...) separates words.
_INLINE_TAGS = frozenset(
    'a abbr b big cite code em font i q s small span strike strong sub sup tt u'.split())
_ENTITY = re.compile(r'&(#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);')
_TAG = re.compile(r'<!--.*?-->|<(/?)([A-Za-z][A-Za-z0-9]*)\b[^<>]*>', re.S)


class DatasetFormatError(InputError):
  """A dataset file is missing or malformed; the message names the file and line."""

  def __init__(self, path, line: Optional[int], problem: str):
    self.path = os.fspath(path)
    self.line = line
    self.problem = problem
    where = self.path if line is None else f'{self.path}:{line}'
    super().__init__(f'{where}: {problem}')

  def __reduce__(self):
    return (type(self), (self.path, self.line, self.problem))


def _tag_replacement(m: re.Match) -> str:
  tag = m.group(2)
  return '' if tag and tag.lower() in _INLINE_TAGS else ' '


def clean_html(text: str) -> str:
  """Plain text of an HTML fragment: tags removed, entities decoded, whitespace collapsed.

  Flickr descriptions are sometimes escaped twice (`&amp;quot;` in the HTML shows as `&quot;`),
  so a second round of tag removal and decoding runs when entities survive the first.
  """
  for decoded in range(3):
    if '<' in text:
      text = _TAG.sub(_tag_replacement, text)
    if decoded == 2 or '&' not in text or not _ENTITY.search(text):
      break
    text = html.unescape(text)
  return ' '.join(text.split())


def read_bytes(path: str, what: str) -> bytes:
  try:
    with open(path, 'rb') as f:
      return f.read()
  except FileNotFoundError:
    raise DatasetFormatError(path, None, f'missing {what} file') from None
  except IsADirectoryError:
    raise DatasetFormatError(path, None, f'{what} file is a directory') from None


def read_lines(path: str, what: str) -> list:
  """(line number, text without its line end) of each non-blank line of a UTF-8 text file."""
  data = read_bytes(path, what)
  try:
    text = data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    raise DatasetFormatError(path, line, f'not valid UTF-8 ({e.reason})') from None
  lines = text.replace('\r\n', '\n').replace('\r', '\n').split('\n')
  return [(i, s) for i, s in enumerate(lines, 1) if s and not s.isspace()]


def split_fields(path: str, line: int, text: str, count: int, names: str) -> list:
  parts = text.split(',')
  if len(parts) != count:
    raise DatasetFormatError(
        path, line, f'expected {count} comma-separated fields ({names}), got {len(parts)}: '
        f'{text.strip()!r}')
  return parts


def parse_int(path: str, line: int, text: str, what: str) -> int:
  s = text.strip()
  if not INTEGER.fullmatch(s):
    raise DatasetFormatError(path, line, f'{what} is not an integer: {s!r}')
  return int(s)


def parse_float(path: str, line: int, text: Optional[str], what: str,
           limit: Optional[float] = None) -> Optional[float]:
  """A finite number (within [-limit, limit] when given), None when empty."""
  s = (text or '').strip()
  if not s:
    return None
  try:
    v = float(s)
  except ValueError:
    raise DatasetFormatError(path, line, f'{what} is not a number: {s!r}') from None
  if not math.isfinite(v):
    raise DatasetFormatError(path, line, f'{what} is not a finite number: {s!r}')
  if limit is not None and abs(v) > limit:
    raise DatasetFormatError(path, line, f'{what} {s} is outside [-{limit:g}, {limit:g}]')
  return v


def check_name(name: str, what: str, path: str, line: Optional[int] = None) -> str:
  """`name` when files named after it stay inside their folder (no '/', '\\', NUL, '.' or
  '..'; so no absolute path either), else a DatasetFormatError naming `path` and `line`."""
  if name in ('.', '..') or _UNSAFE_NAME.search(name) or os.path.isabs(name):
    raise DatasetFormatError(
        path, line, f"{what} {name!r} is not a plain file name (no '/', '\\', NUL, '.' or "
        "'..'): files named after it must stay inside the data directory")
  return name


def parse_photo_id(path: str, line: int, text: str) -> str:
  s = text.strip()
  if not _ID.fullmatch(s):
    raise DatasetFormatError(path, line, f'bad photo id {s!r}')
  return check_name(s, 'photo id', path, line)


def xml_records(path: str, tag: str, what: str) -> list:
  """(line, attributes, {child tag: text}) of every `<tag>` element of an XML file."""
  data = read_bytes(path, what)
  records = []
  state = {'cur': None, 'child': None, 'buf': [], 'depth': 0, 'cur_depth': -1}
  parser = expat.ParserCreate()
  parser.buffer_text = True

  def start(name, attrs):
    state['depth'] += 1
    if state['cur'] is None:
      if name == tag:
        state['cur'] = (parser.CurrentLineNumber, attrs, {})
        state['cur_depth'] = state['depth']
    elif state['depth'] == state['cur_depth'] + 1:
      state['child'] = name
      state['buf'] = []

  def end(name):
    depth = state['depth']
    state['depth'] -= 1
    cur = state['cur']
    if cur is None:
      return
    if depth == state['cur_depth']:
      records.append(cur)
      state['cur'] = None
    elif depth == state['cur_depth'] + 1 and state['child'] is not None:
      cur[2][state['child']] = ''.join(state['buf'])
      state['child'] = None

  def chars(data):
    if state['child'] is not None:
      state['buf'].append(data)

  parser.StartElementHandler = start
  parser.EndElementHandler = end
  parser.CharacterDataHandler = chars
  try:
    parser.Parse(data, True)
  except expat.ExpatError as e:
    raise DatasetFormatError(
        path, e.lineno,
        f'malformed XML: {expat.ErrorString(e.code)} (column {e.offset + 1})') from None
  return records
