"""Readers for the official MediaEval "Retrieving Diverse Social Images" layouts.

Two datasets share one layout inside a split directory (only the topics file name and the
directory nesting differ):

    <split dir>/<topics file>                  <topics><topic><number/><title/>...</topic>
    <split dir>/xml/<title>.xml                <photos><photo id rank views .../></photos>
    <split dir>/gt/rGT/<title> rGT.txt         photoid,relevance   (1, 0 or -1)
    <split dir>/gt/dGT/<title> dGT.txt         photoid,clusterid   (relevant photos)
    <split dir>/gt/dGT/<title> dclusterGT.txt  clusterid,name
    <split dir>/descvis/img/<title> <FEAT>.csv photoid,v1,...,vd

- Div400 (MediaEval 2013): `<root>/devset/keywords/devsetkeywords_topics.xml` (and
  `testset/keywords/testsetkeywords_topics.xml`); photos carry `username`.
- Div150Cred (MediaEval 2014): `<root>/devset/devset_topics.xml` (`testset/...`);
  lowercase_underscore titles; photos carry `userid` besides `username`.
- 'synthetic' (`colt_jax.data.synthetic`) writes the Div400 layout.

Every reader also accepts `root` pointing at the split directory itself. Any problem with the
files raises `DatasetFormatError`, whose message starts with `<file>:<line>:` (just `<file>:`
when no line applies, e.g. a missing file). Text files may carry a UTF-8 BOM, CRLF line ends,
blank lines and no final newline. Numbers (descriptor values, coordinates) must be finite
('nan', 'inf' are errors), and the names that make file paths (topic titles, photo ids) must be
plain file names (`check_name`), so no file outside the split directory is ever read.
"""
from __future__ import annotations

import html
import math
import os
import re
import warnings
from typing import Optional, Sequence
from xml.parsers import expat

import numpy as np

from colt_jax.data.types import Photo, Split, Topic, TopicGroundTruth
from colt_jax.util.errors import InputError

SPLITS = ('dev', 'test')
DATASETS = ('div400', 'div150cred', 'synthetic')
VISUAL_FEATURES = ('CM', 'CN', 'CSD', 'HOG', 'LBP')
# Dimensions of those descriptors in Div400 (the reader takes them from the files).
VISUAL_FEATURE_DIMS = {'CM': 9, 'CN': 11, 'CSD': 64, 'HOG': 81, 'LBP': 16}

_INT = re.compile(r'[+-]?\d+')
_ID = re.compile(r'[^\s,]+')
_UNSAFE_NAME = re.compile(r'[/\\\x00]')
_DATE = re.compile(r'\d{4}-\d\d-\d\d(?!\d)')
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


# ----------------------------------------------------------------------------- low level


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


def _read_bytes(path: str, what: str) -> bytes:
  try:
    with open(path, 'rb') as f:
      return f.read()
  except FileNotFoundError:
    raise DatasetFormatError(path, None, f'missing {what} file') from None
  except IsADirectoryError:
    raise DatasetFormatError(path, None, f'{what} file is a directory') from None


def _read_lines(path: str, what: str) -> list:
  """(line number, text without its line end) of each non-blank line of a UTF-8 text file."""
  data = _read_bytes(path, what)
  try:
    text = data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    raise DatasetFormatError(path, line, f'not valid UTF-8 ({e.reason})') from None
  lines = text.replace('\r\n', '\n').replace('\r', '\n').split('\n')
  return [(i, s) for i, s in enumerate(lines, 1) if s and not s.isspace()]


def _fields(path: str, line: int, text: str, count: int, names: str) -> list:
  parts = text.split(',')
  if len(parts) != count:
    raise DatasetFormatError(
        path, line, f'expected {count} comma-separated fields ({names}), got {len(parts)}: '
        f'{text.strip()!r}')
  return parts


def _int(path: str, line: int, text: str, what: str) -> int:
  s = text.strip()
  if not _INT.fullmatch(s):
    raise DatasetFormatError(path, line, f'{what} is not an integer: {s!r}')
  return int(s)


def _float(path: str, line: int, text: Optional[str], what: str,
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


def _photo_id(path: str, line: int, text: str) -> str:
  s = text.strip()
  if not _ID.fullmatch(s):
    raise DatasetFormatError(path, line, f'bad photo id {s!r}')
  return check_name(s, 'photo id', path, line)


def _xml_records(path: str, tag: str, what: str) -> list:
  """(line, attributes, {child tag: text}) of every `<tag>` element of an XML file."""
  data = _read_bytes(path, what)
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


# ----------------------------------------------------------------------------- topics, photos


def _read_topics(path: str) -> list:
  topics, seen = [], set()
  for line, _, child in _xml_records(path, 'topic', 'topics'):
    if child.get('number') is None:
      raise DatasetFormatError(path, line, 'topic without <number>')
    number = _int(path, line, child['number'], 'topic number')
    title = (child.get('title') or '').strip()
    if not title:
      raise DatasetFormatError(path, line, f'topic {number} without <title>')
    if number in seen:
      raise DatasetFormatError(path, line, f'duplicate topic number {number}')
    seen.add(number)
    check_name(title, f'topic {number}: title', path, line)
    wiki = (child.get('wiki') or '').strip() or None
    topics.append(Topic(
        number=number, title=title,
        latitude=_float(path, line, child.get('latitude'), f'topic {number}: latitude', 90),
        longitude=_float(path, line, child.get('longitude'), f'topic {number}: longitude',
                         180), wiki=wiki))
  return topics


def _read_photos(path: str, topic: int) -> list:
  photos, seen = [], set()
  for line, a, _ in _xml_records(path, 'photo', 'photo metadata XML'):
    photo_id = _photo_id(path, line, a.get('id', ''))
    if photo_id in seen:
      raise DatasetFormatError(path, line, f'duplicate photo id {photo_id}')
    seen.add(photo_id)
    if a.get('rank') is None:
      raise DatasetFormatError(path, line, f'photo {photo_id} has no rank')
    views = a.get('views', '').strip()
    user = (a.get('userid') or '').strip() or (a.get('username') or '').strip() or None
    lat = _float(path, line, a.get('latitude'), f'photo {photo_id}: latitude', 90)
    lon = _float(path, line, a.get('longitude'), f'photo {photo_id}: longitude', 180)
    date = (a.get('date_taken') or '').strip() or None
    if date is not None and not _DATE.match(date):
      raise DatasetFormatError(path, line, f'photo {photo_id}: date_taken is not a date '
                               f'(YYYY-MM-DD ...): {date!r}')
    photos.append(Photo(
        photo_id=photo_id, topic=topic, title=a.get('title', '').strip(),
        tags=a.get('tags', '').strip(), description=clean_html(a.get('description', '')),
        views=_int(path, line, views, 'views') if views else 0,
        rank=_int(path, line, a['rank'], 'rank'), user_id=user,
        date_taken=date, latitude=lat, longitude=lon,
        url=(a.get('url_b') or a.get('url') or '').strip() or None))
  photos.sort(key=lambda p: p.rank)  # Stable: equal ranks keep the XML order.
  return photos


# ----------------------------------------------------------------------------- ground truth


def _read_relevance(path: str) -> tuple:
  """(photo id -> relevance, photo id -> line)."""
  relevance, lines = {}, {}
  for line, text in _read_lines(path, 'rGT ground-truth'):
    pid, value = _fields(path, line, text, 2, 'photoid,relevance')
    pid = _photo_id(path, line, pid)
    v = value.strip()
    if v not in ('1', '0', '-1'):
      if _INT.fullmatch(v):
        raise DatasetFormatError(path, line, f'unknown relevance value {v!r}')
      raise DatasetFormatError(path, line, f'relevance is not an integer: {v!r}')
    if pid in relevance:
      raise DatasetFormatError(path, line, f'duplicate photo id {pid}')
    relevance[pid] = int(v)
    lines[pid] = line
  return relevance, lines


def _read_clusters(path: str, relevance: dict, rgt_path: str) -> tuple:
  clusters, lines = {}, {}
  for line, text in _read_lines(path, 'dGT ground-truth'):
    pid, cid = _fields(path, line, text, 2, 'photoid,clusterid')
    pid = _photo_id(path, line, pid)
    cid = _int(path, line, cid, 'cluster id')
    if cid < 1:
      raise DatasetFormatError(path, line, f'cluster id must be positive, got {cid}')
    if pid in clusters:
      raise DatasetFormatError(path, line, f'duplicate photo id {pid}')
    if pid not in relevance:
      raise DatasetFormatError(path, line, f'photo {pid} is not in {rgt_path}')
    clusters[pid] = cid
    lines.setdefault(cid, line)
  return clusters, lines


def _read_cluster_names(path: str) -> dict:
  names = {}
  for line, text in _read_lines(path, 'dclusterGT ground-truth'):
    parts = text.split(',', 1)
    if len(parts) != 2:
      raise DatasetFormatError(
          path, line, f'expected 2 comma-separated fields (clusterid,name): {text.strip()!r}')
    cid = _int(path, line, parts[0], 'cluster id')
    if cid < 1:
      raise DatasetFormatError(path, line, f'cluster id must be positive, got {cid}')
    if not parts[1].strip():
      raise DatasetFormatError(path, line, f'cluster {cid} has an empty name')
    if cid in names:
      raise DatasetFormatError(path, line, f'duplicate cluster id {cid}')
    names[cid] = parts[1]  # Original spelling, trailing spaces included (line end removed).
  return names


def _read_ground_truth(split_dir: str, title: str, photos: Sequence[Photo],
                       photos_path: str) -> TopicGroundTruth:
  """The topic's rGT, dGT and dclusterGT files; every rGT photo must be in its metadata XML."""
  rgt = os.path.join(split_dir, 'gt', 'rGT', f'{title} rGT.txt')
  dgt = os.path.join(split_dir, 'gt', 'dGT', f'{title} dGT.txt')
  dcl = os.path.join(split_dir, 'gt', 'dGT', f'{title} dclusterGT.txt')
  relevance, rgt_lines = _read_relevance(rgt)
  if relevance and not photos:
    raise DatasetFormatError(photos_path, None, f'no photos, but {rgt} lists {len(relevance)}')
  known = {p.photo_id for p in photos}
  for pid, line in rgt_lines.items():
    if pid not in known:
      raise DatasetFormatError(rgt, line, f'photo {pid} is not in {photos_path}')
  clusters, first_line = _read_clusters(dgt, relevance, rgt)
  names = _read_cluster_names(dcl)
  for cid, line in sorted(first_line.items()):
    if cid not in names:
      raise DatasetFormatError(dgt, line, f'cluster {cid} has no name in {dcl}')
  return TopicGroundTruth(relevance=relevance, clusters=clusters, cluster_names=names,
                          num_clusters=max(clusters.values(), default=0))


# ----------------------------------------------------------------------------- splits


def _check_split(split: str) -> None:
  if split not in SPLITS:
    raise ValueError(f'split must be one of {SPLITS}, got {split!r}')


def _find_split_dir(root, subdirs: Sequence[str], topics_name: str) -> str:
  root = os.fspath(root)
  for sub in subdirs:
    d = os.path.join(root, sub) if sub else root
    if os.path.isfile(os.path.join(d, topics_name)):
      return d
  looked = ', '.join(os.path.join(root, s) if s else root for s in subdirs)
  raise DatasetFormatError(os.path.join(root, subdirs[0], topics_name), None,
                           f'missing topics file (looked for {topics_name} in {looked})')


def _read_split_dir(split_dir: str, topics_name: str, dataset: str, split: str) -> Split:
  topics = _read_topics(os.path.join(split_dir, topics_name))
  photos, ground_truth = {}, {}
  for t in topics:
    xml = os.path.join(split_dir, 'xml', f'{t.title}.xml')
    photos[t.number] = _read_photos(xml, t.number)
    ground_truth[t.number] = _read_ground_truth(split_dir, t.title, photos[t.number], xml)
  return Split(dataset=dataset, split=split, root=split_dir, topics=topics, photos=photos,
               ground_truth=ground_truth)


def read_div400(root, split: str, *, subset: str = 'keywords',
                dataset: str = 'div400') -> Split:
  """Reads a Div400 split from `root/<split>set/<subset>/` (or that directory itself)."""
  _check_split(split)
  topics_name = f'{split}set{subset}_topics.xml'
  split_dir = _find_split_dir(root, (f'{split}set/{subset}', subset, ''), topics_name)
  return _read_split_dir(split_dir, topics_name, dataset, split)


def read_div150cred(root, split: str) -> Split:
  """Reads a Div150Cred (MediaEval 2014) split from `root/<split>set/` (or that directory)."""
  _check_split(split)
  topics_name = f'{split}set_topics.xml'
  split_dir = _find_split_dir(root, (f'{split}set', ''), topics_name)
  return _read_split_dir(split_dir, topics_name, 'div150cred', split)


def read_split(dataset: str, root, split: str) -> Split:
  """Reads split 'dev' | 'test' of dataset 'div400' | 'div150cred' | 'synthetic'."""
  if dataset == 'div400':
    return read_div400(root, split)
  if dataset == 'div150cred':
    return read_div150cred(root, split)
  if dataset == 'synthetic':
    return read_div400(root, split, dataset='synthetic')
  raise ValueError(f'dataset must be one of {DATASETS}, got {dataset!r}')


# ----------------------------------------------------------------------------- descriptors


def _read_descriptor_csv(path: str, feature: str, dims: dict) -> tuple:
  """(ids, line numbers, float64 [n, d]) of one `<title> <FEAT>.csv` file."""
  ids, line_nos, rows = [], [], []
  for line, text in _read_lines(path, f'{feature} descriptor'):
    pid, _, rest = text.partition(',')
    n = rest.count(',') + 1 if rest else 0
    d = dims.setdefault(feature, (n, path, line))
    if n != d[0] or n < 1:
      raise DatasetFormatError(
          path, line, f'{feature} row has {n} values, expected {d[0]} (as at {d[1]}:{d[2]})')
    ids.append(_photo_id(path, line, pid))
    line_nos.append(line)
    rows.append(rest)
  if len(set(ids)) != len(ids):
    seen = set()
    for pid, line in zip(ids, line_nos):
      if pid in seen:
        raise DatasetFormatError(path, line, f'duplicate photo id {pid}')
      seen.add(pid)
  width = dims.get(feature, (0,))[0]
  if not rows:
    return ids, line_nos, np.zeros((0, width), np.float64)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')  # Older numpy warns and stops at a bad value.
      values = np.fromstring(','.join(rows), dtype=np.float64, sep=',')
  except ValueError:  # Newer numpy raises on a bad value.
    values = None
  if values is None or values.size != len(rows) * width:
    for line, row in zip(line_nos, rows):
      for v in row.split(','):
        try:
          float(v)
        except ValueError:
          raise DatasetFormatError(
              path, line, f'{feature} value is not a number: {v.strip()!r}') from None
    raise DatasetFormatError(path, None, f'could not parse the {feature} values')
  values = values.reshape(len(rows), width)
  finite = np.isfinite(values)
  if not finite.all():
    r, c = np.argwhere(~finite)[0]
    raw = rows[r].split(',')[c].strip()
    raise DatasetFormatError(
        path, line_nos[r], f'{feature} value {c + 1} (column {c + 2}) of photo {ids[r]} is not '
        f'a finite number: {raw!r}')
  return ids, line_nos, values


def read_visual_descriptors(split: Split, features: Sequence[str] = VISUAL_FEATURES, *,
                            unique: bool = True) -> tuple:
  """Official visual descriptors of a split: (photo ids, float32 [n, sum of feature dims]).

  Reads `<topic's root>/descvis/img/<title> <FEAT>.csv` for every topic (`Split.root_of`) and concatenates the
  requested features per photo, in `features` order. Rows follow the split's topic order, then
  the row order of the first feature's CSV. With `unique` (default), a photo that several
  topics share (61 do in Div400's testset; their descriptors are identical) appears once, at
  its first topic. Every photo must have every feature, with one dimension per feature.
  """
  features = tuple(features)
  if not features or len(set(features)) != len(features):
    raise ValueError(f'features must be distinct and non-empty, got {features!r}')
  dims = {}
  all_ids, blocks, seen = [], [], set()
  for t in split.topics:
    folder = os.path.join(split.root_of(t.number), 'descvis', 'img')
    base = os.path.join(folder, check_name(t.title, f'topic {t.number}: title', folder))
    first_path = f'{base} {features[0]}.csv'
    ids, line_nos, first = _read_descriptor_csv(first_path, features[0], dims)
    parts = [first]
    index = {pid: i for i, pid in enumerate(ids)}
    for feat in features[1:]:
      path = f'{base} {feat}.csv'
      f_ids, f_lines, values = _read_descriptor_csv(path, feat, dims)
      order = np.empty(len(ids), dtype=np.int64)
      for j, (pid, line) in enumerate(zip(f_ids, f_lines)):
        i = index.get(pid)
        if i is None:
          raise DatasetFormatError(path, line, f'photo {pid} is not in {first_path}')
        order[i] = j
      if len(f_ids) != len(ids):
        present = set(f_ids)
        missing = next(i for i, pid in enumerate(ids) if pid not in present)
        raise DatasetFormatError(path, None, f'no row for photo {ids[missing]} (listed at '
                                 f'{first_path}:{line_nos[missing]})')
      parts.append(values[order])
    keep = [i for i, pid in enumerate(ids) if not (unique and pid in seen)]
    seen.update(ids)
    all_ids.extend(ids[i] for i in keep)
    blocks.append(np.concatenate(parts, axis=1)[keep])
  width = sum(dims.get(f, (0,))[0] for f in features)
  if not blocks:
    return [], np.zeros((0, width), np.float32)
  return all_ids, np.concatenate(blocks, axis=0).astype(np.float32)
