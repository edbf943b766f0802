"""Reading a CSV of relevance judgments (`judgments.read_csv`) and splitting its queries:
every check, with one-line errors naming the CSV, the line and the field. The format is
documented in `colt_jax.data.judgments`, which writes it as a dataset."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import os
import re
from typing import Dict, List, Optional, Sequence

from colt_jax.data.official_files import DatasetFormatError, check_name
from colt_jax.data.vocabulary import normalize_name
from colt_jax.encoders.collection_records import image_decode_error
from colt_jax.util.errors import InputError

REQUIRED = ('query', 'photo', 'relevance', 'cluster')
OPTIONAL = ('caption', 'split')
COLUMNS = REQUIRED + OPTIONAL
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.webp')
MIN_QUERIES = 2  # per split
DEFAULT_DEV_FRACTION = 0.5

_NAME_BYTES = 255 - len(' dclusterGT.txt')  # the longest file named after a query
_ID_BYTES = 200
_CONTROL = re.compile(r'[\x00-\x1f\x7f]')
# Characters XML 1.0 cannot hold (a caption may hold tabs and line ends).
_NOT_XML = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]')
_PHOTO_ID = re.compile(r'[^\s,/\\]+')
_ID_CHARS = re.compile(r'[^\w.\-]+')
_INTEGER = re.compile(r'[+-]?\d+')


# ----------------------------------------------------------------------------- records


@dataclasses.dataclass
class PhotoRecord:
  """One photo of the CSV (it may be judged for several queries)."""
  photo_id: str
  line: int  # where it first appears
  caption: str
  source: Optional[str] = None  # the image file (absolute) when the CSV gives a path
  written: Optional[str] = None  # the path as the CSV writes it


@dataclasses.dataclass
class Judgment:
  """One (query, photo) line."""
  line: int
  photo_id: str
  relevance: int
  cluster: int  # 1..K within the query; 0 = none


@dataclasses.dataclass
class QueryRecord:
  """One query: its judgments in CSV order and its clusters."""
  number: int
  title: str
  line: int
  split: Optional[str]  # from the split column, else None
  judgments: List[Judgment] = dataclasses.field(default_factory=list)
  cluster_names: List[str] = dataclasses.field(default_factory=list)  # id - 1 -> name


@dataclasses.dataclass
class Judgments:
  """The judgments of a CSV file, checked (`read_csv`)."""
  path: str
  queries: List[QueryRecord]
  photos: Dict[str, PhotoRecord]
  has_split_column: bool
  has_caption_column: bool
  duplicates: int  # lines that repeat an earlier (query, photo) line exactly


def _error(path: str, line: Optional[int], field: str, problem: str) -> DatasetFormatError:
  return DatasetFormatError(path, line, f'{field}: {problem}' if field else problem)


# ----------------------------------------------------------------------------- reading


def _decode(path: str) -> str:
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except FileNotFoundError:
    raise DatasetFormatError(path, None, 'no such file (the judgments CSV)') from None
  except IsADirectoryError:
    raise DatasetFormatError(path, None, 'is a folder, not the judgments CSV') from None
  try:
    return data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    raise DatasetFormatError(path, line, f'not valid UTF-8 (byte 0x{data[e.start]:02x}, '
                             f'{e.reason}); save the CSV as UTF-8') from None


def _records(path: str, text: str):
  """(line where the record starts, fields) of every non-blank CSV record."""
  reader = csv.reader(io.StringIO(text, newline=''), strict=True)
  start = 1
  while True:
    try:
      row = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      raise DatasetFormatError(path, start, f'malformed CSV ({e})') from None
    if row and ''.join(row).strip():
      yield start, row
    start = reader.line_num + 1


def _header(path: str, line: int, row: Sequence[str]) -> Dict[str, int]:
  columns = {}
  for i, name in enumerate(row):
    key = name.strip().lower()
    if key not in COLUMNS:
      raise _error(path, line, 'header', f'unknown column {name.strip()!r}; the columns are '
                   f'{",".join(REQUIRED)} and optionally {",".join(OPTIONAL)}')
    if key in columns:
      raise _error(path, line, 'header', f'column {key!r} is named twice')
    columns[key] = i
  missing = [c for c in REQUIRED if c not in columns]
  if missing:
    raise _error(path, line, 'header', f'missing column{"s" if len(missing) > 1 else ""} '
                 f'{",".join(missing)} (the header line names {",".join(REQUIRED)} and '
                 f'optionally {",".join(OPTIONAL)}; got {",".join(c.strip() for c in row)!r})')
  return columns


def _check_query(path: str, line: int, title: str) -> str:
  if not title:
    raise _error(path, line, 'query', 'empty')
  if _CONTROL.search(title):
    raise _error(path, line, 'query', f'{title!r} holds a control character (tab, line end)')
  try:
    check_name(title, 'query', path, line)
  except DatasetFormatError:
    raise _error(path, line, 'query', f'{title!r} holds \'/\' or \'\\\' (or is \'.\' or '
                 '\'..\'): the layout names files after each query') from None
  if len(title.encode('utf-8')) > _NAME_BYTES:
    raise _error(path, line, 'query', f'{title[:40]!r}... is longer than {_NAME_BYTES} bytes '
                 '(the layout names files after each query)')
  return title


def _is_path(value: str) -> bool:
  return '/' in value or '\\' in value or value.lower().endswith(IMAGE_SUFFIXES)


def _id_of_file(written: str) -> str:
  stem = os.path.splitext(os.path.basename(written.replace('\\', '/')))[0]
  stem = _ID_CHARS.sub('_', stem).strip('_')[:100].lstrip('.')
  return stem or 'photo'


def read_csv(path: str, *, check_images: bool = True, allow_outside: bool = False) -> Judgments:
  """The judgments of the CSV at `path`, checked (module docstring); with `check_images`, every
  image path must name a file that decodes as an image. An image path must lie inside the
  CSV's folder tree (after links are resolved) unless `allow_outside`."""
  path = os.fspath(path)
  text = _decode(path)
  records = _records(path, text)
  first = next(records, None)
  if first is None:
    raise DatasetFormatError(path, None, 'empty file: expected a header line '
                             f'({",".join(REQUIRED)}[,caption][,split]) and judgments')
  columns = _header(path, *first)
  base = os.path.dirname(os.path.abspath(path))
  queries: Dict[str, QueryRecord] = {}
  folded: Dict[str, QueryRecord] = {}  # casefolded title -> query
  clusters: Dict[str, Dict[str, int]] = {}  # title -> cluster key -> id
  seen: Dict[tuple, tuple] = {}  # (title, photo key) -> (line, relevance, cluster key)
  photos: Dict[tuple, PhotoRecord] = {}  # ('id', id) or ('path', absolute path) -> photo
  duplicates = 0
  pending = []  # (query, line, photo key, relevance, cluster key)

  for line, row in records:
    if len(row) != len(first[1]):
      raise _error(path, line, '', f'expected {len(first[1])} comma-separated fields (as the '
                   f'header), got {len(row)} (quote a field that holds commas)')
    def get(column, row=row):
      return row[columns[column]] if column in columns else ''
    title = _check_query(path, line, get('query').strip())
    value = get('photo').strip()
    if not value:
      raise _error(path, line, 'photo', 'empty (an image path or a photo id)')
    caption = get('caption').strip()
    if _NOT_XML.search(caption):
      raise _error(path, line, 'caption', 'holds a control character XML cannot store')
    relevance = get('relevance').strip()
    if relevance not in ('1', '0', '-1'):
      raise _error(path, line, 'relevance', f'{relevance!r} is not 1, 0 or -1')
    relevance = int(relevance)
    cluster = get('cluster').strip()
    if relevance == 1 and not cluster:
      raise _error(path, line, 'cluster', 'empty, but the photo is relevant (relevance 1): '
                   'give its cluster (a name or an id)')
    if relevance != 1 and cluster:
      raise _error(path, line, 'cluster', f'{cluster!r} given for a photo of relevance '
                   f'{relevance}: only relevant photos (1) belong to a cluster; leave it empty')
    if _CONTROL.search(cluster):
      raise _error(path, line, 'cluster', f'{cluster!r} holds a control character')
    split = None
    if 'split' in columns:
      split = get('split').strip().lower()
      if split not in ('dev', 'test'):
        raise _error(path, line, 'split', f'{get("split").strip()!r} is not dev or test')

    query = queries.get(title)
    if query is None:
      other = folded.get(title.casefold())
      if other is not None:
        raise _error(path, line, 'query', f'{title!r} differs from {other.title!r} (line '
                     f'{other.line}) only in case: one query or two? (their files would '
                     'clash on case-insensitive disks)')
      query = QueryRecord(number=len(queries) + 1, title=title, line=line, split=split)
      queries[title] = folded[title.casefold()] = query
      clusters[title] = {}
    elif split is not None and split != query.split:
      raise _error(path, line, 'split', f'{split!r}, but query {title!r} is in {query.split} '
                   f'at line {query.line}: a query is in one split')

    if _is_path(value):
      native = value.replace('\\', '/') if os.sep == '/' else value  # Windows-style paths
      source = os.path.normpath(os.path.join(base, native))
      key = ('path', source)
      if key not in photos and not allow_outside:
        real, root = os.path.realpath(source), os.path.realpath(base)
        if not real.startswith(root.rstrip(os.sep) + os.sep):
          raise _error(path, line, 'photo', f'{value}: {real} is outside the CSV\'s folder '
                       f'({root}); photos from elsewhere need --allow_outside_paths')
      if check_images and key not in photos:
        if not os.path.isfile(source):
          raise _error(path, line, 'photo', f'{value}: no such image file ({source})')
        if not os.access(source, os.R_OK):
          raise _error(path, line, 'photo', f'{value}: cannot read {source}')
        with open(source, 'rb') as f:
          problem = image_decode_error(f.read(), source)
        if problem:
          raise _error(path, line, 'photo', f'{value}: not an image: {problem}')
    else:
      if not _PHOTO_ID.fullmatch(value) or value in ('.', '..') or len(
          value.encode('utf-8')) > _ID_BYTES:
        raise _error(path, line, 'photo', f'{value!r} is neither an image path (with \'/\' or '
                     f'a suffix {", ".join(IMAGE_SUFFIXES)}) nor a photo id (no spaces, '
                     f'commas or slashes, at most {_ID_BYTES} bytes)')
      source, key = None, ('id', value)
    photo = photos.get(key)
    if photo is None:
      photo = photos[key] = PhotoRecord(photo_id='', line=line, caption=caption, source=source,
                                        written=value if source else None)
    elif caption != photo.caption:
      raise _error(path, line, 'caption', f'{caption!r}, but line {photo.line} gives this '
                   f'photo the caption {photo.caption!r}: a photo has one caption')

    cluster_key = ''
    if cluster:
      if _INTEGER.fullmatch(cluster) and int(cluster) < 0:
        raise _error(path, line, 'cluster', f'{cluster!r}: a cluster id is a non-negative '
                     'integer (or give a name)')
      name = (f'{title} cluster {int(cluster)}' if _INTEGER.fullmatch(cluster) else cluster)
      cluster_key = normalize_name(name)
      if cluster_key not in clusters[title]:
        clusters[title][cluster_key] = len(query.cluster_names) + 1
        query.cluster_names.append(name)
    pair = (title, key)
    earlier = seen.get(pair)
    if earlier is not None:
      if earlier[1:3] != (relevance, cluster_key):
        raise _error(path, line, 'relevance' if earlier[1] != relevance else 'cluster',
                     f'{value} is judged for query {title!r} at line {earlier[0]} too, with '
                     f'relevance {earlier[1]} and cluster {earlier[3]!r}; here relevance '
                     f'{relevance} and cluster {cluster!r}: give one judgment per (query, '
                     'photo)')
      duplicates += 1
      continue
    seen[pair] = (line, relevance, cluster_key, cluster)
    pending.append((query, line, key, relevance, clusters[title].get(cluster_key, 0)))

  if not queries:
    raise DatasetFormatError(path, None, 'no judgments after the header line')
  _assign_ids(path, photos)
  for query, line, key, relevance, cid in pending:
    query.judgments.append(Judgment(line, photos[key].photo_id, relevance, cid))
  by_id = {p.photo_id: p for p in photos.values()}
  return Judgments(path=path, queries=list(queries.values()), photos=by_id,
                   has_split_column='split' in columns,
                   has_caption_column='caption' in columns, duplicates=duplicates)


def _assign_ids(path: str, photos: Dict[tuple, PhotoRecord]) -> None:
  """Photo ids: the CSV's ids as given; a path's file name, made unique (module docstring)."""
  taken = {key[1] for key in photos if key[0] == 'id'}
  for key, photo in photos.items():
    if key[0] == 'id':
      photo.photo_id = key[1]
  wanted: Dict[str, list] = {}
  for key, photo in photos.items():
    if key[0] == 'path':
      wanted.setdefault(_id_of_file(photo.written), []).append(photo)
  for stem, group in wanted.items():
    unique = len(group) == 1 and stem not in taken
    for photo in group:
      if unique:
        photo.photo_id = stem
      else:
        where = os.path.normpath(photo.written.replace('\\', '/'))
        photo.photo_id = f'{stem}-{hashlib.sha256(where.encode()).hexdigest()[:8]}'
      if photo.photo_id in taken:  # a file already named '<stem>-<that hash>'
        raise _error(path, photo.line, 'photo', f'{photo.written}: its photo id '
                     f'{photo.photo_id} is taken by another photo; rename one of the files')
      taken.add(photo.photo_id)


# ----------------------------------------------------------------------------- splits


def _draw_key(seed: int, title: str) -> str:
  return hashlib.sha256(f'{seed}:{title}'.encode('utf-8')).hexdigest()


def assign_splits(judgments: Judgments, dev_fraction: Optional[float] = None,
                  seed: int = 0) -> Dict[str, List[QueryRecord]]:
  """{'dev': queries, 'test': queries} in query-number order: by the split column, else by
  `dev_fraction` (default 0.5) and `seed`; each split gets at least MIN_QUERIES queries."""
  path = judgments.path
  if judgments.has_split_column:
    if dev_fraction is not None:
      raise InputError(f'{path}: has a split column, so --dev_fraction does not apply (drop '
                       'one of them)')
    out = {s: [q for q in judgments.queries if q.split == s] for s in ('dev', 'test')}
    for s, qs in out.items():
      if len(qs) < MIN_QUERIES:
        which = (f'only {qs[0].title!r} (line {qs[0].line})' if qs else 'none')
        raise _error(path, None, 'split', f'the {s} split has {len(qs)} quer'
                     f'{"y" if len(qs) == 1 else "ies"} ({which}); each split needs at least '
                     f'{MIN_QUERIES}')
    return out
  fraction = DEFAULT_DEV_FRACTION if dev_fraction is None else dev_fraction
  if not 0.0 < fraction < 1.0:
    raise InputError(f'--dev_fraction must be in (0, 1), got {fraction}')
  n = len(judgments.queries)
  n_dev = int(round(n * fraction))
  if n_dev < MIN_QUERIES or n - n_dev < MIN_QUERIES:
    raise DatasetFormatError(
        path, None, f'{n} quer{"y" if n == 1 else "ies"} give {n_dev} dev and {n - n_dev} test '
        f'queries at --dev_fraction {fraction:g}; each split needs at least {MIN_QUERIES} '
        '(judge more queries, change --dev_fraction, or add a split column)')
  order = sorted(judgments.queries, key=lambda q: _draw_key(seed, q.title))
  dev = {q.number for q in order[:n_dev]}
  return {'dev': [q for q in judgments.queries if q.number in dev],
          'test': [q for q in judgments.queries if q.number not in dev]}


# ----------------------------------------------------------------------------- writing
