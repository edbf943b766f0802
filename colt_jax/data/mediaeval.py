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

import os
import re
import warnings
from typing import Sequence

from absl import logging
import numpy as np

from colt_jax.data import official_files
from colt_jax.data.types import Photo, Split, Topic, TopicGroundTruth

SPLITS = ('dev', 'test')
DATASETS = ('div400', 'div150cred', 'synthetic')
VISUAL_FEATURES = ('CM', 'CN', 'CSD', 'HOG', 'LBP')
# Dimensions of those descriptors in Div400 (the reader takes them from the files).
VISUAL_FEATURE_DIMS = {'CM': 9, 'CN': 11, 'CSD': 64, 'HOG': 81, 'LBP': 16}

_DATE = re.compile(r'\d{4}-\d\d-\d\d(?!\d)')


# ----------------------------------------------------------------------------- low level


# ----------------------------------------------------------------------------- topics, photos


def _read_topics(path: str) -> list:
  topics, seen = [], set()
  for line, _, child in official_files.xml_records(path, 'topic', 'topics'):
    if child.get('number') is None:
      raise official_files.DatasetFormatError(path, line, 'topic without <number>')
    number = official_files.parse_int(path, line, child['number'], 'topic number')
    title = (child.get('title') or '').strip()
    if not title:
      raise official_files.DatasetFormatError(path, line, f'topic {number} without <title>')
    if number in seen:
      raise official_files.DatasetFormatError(path, line, f'duplicate topic number {number}')
    seen.add(number)
    official_files.check_name(title, f'topic {number}: title', path, line)
    wiki = (child.get('wiki') or '').strip() or None
    topics.append(
        Topic(number=number,
              title=title,
              latitude=official_files.parse_float(path, line, child.get('latitude'),
                                                  f'topic {number}: latitude', 90),
              longitude=official_files.parse_float(path, line, child.get('longitude'),
                                                   f'topic {number}: longitude', 180),
              wiki=wiki))
  return topics


def _read_photos(path: str, topic: int) -> list:
  photos, seen = [], set()
  for line, a, _ in official_files.xml_records(path, 'photo', 'photo metadata XML'):
    photo_id = official_files.parse_photo_id(path, line, a.get('id', ''))
    if photo_id in seen:
      raise official_files.DatasetFormatError(path, line, f'duplicate photo id {photo_id}')
    seen.add(photo_id)
    if a.get('rank') is None:
      raise official_files.DatasetFormatError(path, line, f'photo {photo_id} has no rank')
    views = a.get('views', '').strip()
    user = (a.get('userid') or '').strip() or (a.get('username') or '').strip() or None
    lat = official_files.parse_float(path, line, a.get('latitude'), f'photo {photo_id}: latitude',
                                     90)
    lon = official_files.parse_float(path, line, a.get('longitude'), f'photo {photo_id}: longitude',
                                     180)
    date = (a.get('date_taken') or '').strip() or None
    if date is not None and not _DATE.match(date):
      raise official_files.DatasetFormatError(
          path, line, f'photo {photo_id}: date_taken is not a date '
          f'(YYYY-MM-DD ...): {date!r}')
    photos.append(
        Photo(photo_id=photo_id,
              topic=topic,
              title=a.get('title', '').strip(),
              tags=a.get('tags', '').strip(),
              description=official_files.clean_html(a.get('description', '')),
              views=official_files.parse_int(path, line, views, 'views') if views else 0,
              rank=official_files.parse_int(path, line, a['rank'], 'rank'),
              user_id=user,
              date_taken=date,
              latitude=lat,
              longitude=lon,
              url=(a.get('url_b') or a.get('url') or '').strip() or None))
  photos.sort(key=lambda p: p.rank)  # Stable: equal ranks keep the XML order.
  return photos


# ----------------------------------------------------------------------------- ground truth


def _read_relevance(path: str) -> tuple:
  """(photo id -> relevance, photo id -> line)."""
  relevance, lines = {}, {}
  for line, text in official_files.read_lines(path, 'rGT ground-truth'):
    pid, value = official_files.split_fields(path, line, text, 2, 'photoid,relevance')
    pid = official_files.parse_photo_id(path, line, pid)
    v = value.strip()
    if v not in ('1', '0', '-1'):
      if official_files.INTEGER.fullmatch(v):
        raise official_files.DatasetFormatError(path, line, f'unknown relevance value {v!r}')
      raise official_files.DatasetFormatError(path, line, f'relevance is not an integer: {v!r}')
    if pid in relevance:
      raise official_files.DatasetFormatError(path, line, f'duplicate photo id {pid}')
    relevance[pid] = int(v)
    lines[pid] = line
  return relevance, lines


def _read_clusters(path: str, relevance: dict, rgt_path: str) -> tuple:
  clusters, lines, disagreeing = {}, {}, []
  for line, text in official_files.read_lines(path, 'dGT ground-truth'):
    pid, cid = official_files.split_fields(path, line, text, 2, 'photoid,clusterid')
    pid = official_files.parse_photo_id(path, line, pid)
    cid = official_files.parse_int(path, line, cid, 'cluster id')
    if cid < 1:
      raise official_files.DatasetFormatError(path, line, f'cluster id must be positive, got {cid}')
    if pid in clusters:
      raise official_files.DatasetFormatError(path, line, f'duplicate photo id {pid}')
    if pid not in relevance:
      raise official_files.DatasetFormatError(path, line, f'photo {pid} is not in {rgt_path}')
    if relevance[pid] != 1:  # the official scorer counts its cluster all the same (CR@X)
      disagreeing.append((line, pid, cid))
    clusters[pid] = cid
    lines.setdefault(cid, line)
  if disagreeing:  # one warning a file, naming the first line
    line, pid, cid = disagreeing[0]
    logging.warning('%s:%d: photo %s has cluster %d, but %s marks it %s (not relevant)%s; '
                    'scored as the official scorer does: their clusters count toward CR', path,
                    line, pid, cid, rgt_path, relevance[pid],
                    f' (and {len(disagreeing) - 1} more such lines)' if len(disagreeing) > 1
                    else '')
  return clusters, lines


def _read_cluster_names(path: str) -> dict:
  names = {}
  for line, text in official_files.read_lines(path, 'dclusterGT ground-truth'):
    parts = text.split(',', 1)
    if len(parts) != 2:
      raise official_files.DatasetFormatError(
          path, line, f'expected 2 comma-separated fields (clusterid,name): {text.strip()!r}')
    cid = official_files.parse_int(path, line, parts[0], 'cluster id')
    if cid < 1:
      raise official_files.DatasetFormatError(path, line, f'cluster id must be positive, got {cid}')
    if not parts[1].strip():
      raise official_files.DatasetFormatError(path, line, f'cluster {cid} has an empty name')
    if cid in names:
      raise official_files.DatasetFormatError(path, line, f'duplicate cluster id {cid}')
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
    raise official_files.DatasetFormatError(photos_path, None,
                                            f'no photos, but {rgt} lists {len(relevance)}')
  known = {p.photo_id for p in photos}
  for pid, line in rgt_lines.items():
    if pid not in known:
      raise official_files.DatasetFormatError(rgt, line, f'photo {pid} is not in {photos_path}')
  clusters, first_line = _read_clusters(dgt, relevance, rgt)
  names = _read_cluster_names(dcl)
  for cid, line in sorted(first_line.items()):
    if cid not in names:
      raise official_files.DatasetFormatError(dgt, line, f'cluster {cid} has no name in {dcl}')
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
  raise official_files.DatasetFormatError(os.path.join(root, subdirs[0], topics_name), None,
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
  for line, text in official_files.read_lines(path, f'{feature} descriptor'):
    pid, _, rest = text.partition(',')
    n = rest.count(',') + 1 if rest else 0
    d = dims.setdefault(feature, (n, path, line))
    if n != d[0] or n < 1:
      raise official_files.DatasetFormatError(
          path, line, f'{feature} row has {n} values, expected {d[0]} (as at {d[1]}:{d[2]})')
    ids.append(official_files.parse_photo_id(path, line, pid))
    line_nos.append(line)
    rows.append(rest)
  if len(set(ids)) != len(ids):
    seen = set()
    for pid, line in zip(ids, line_nos):
      if pid in seen:
        raise official_files.DatasetFormatError(path, line, f'duplicate photo id {pid}')
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
          raise official_files.DatasetFormatError(
              path, line, f'{feature} value is not a number: {v.strip()!r}') from None
    raise official_files.DatasetFormatError(path, None, f'could not parse the {feature} values')
  values = values.reshape(len(rows), width)
  finite = np.isfinite(values)
  if not finite.all():
    r, c = np.argwhere(~finite)[0]
    raw = rows[r].split(',')[c].strip()
    raise official_files.DatasetFormatError(
        path, line_nos[r], f'{feature} value {c + 1} (column {c + 2}) of photo {ids[r]} is not '
        f'a finite number: {raw!r}')
  return ids, line_nos, values


def read_visual_descriptors(split: Split, features: Sequence[str] = VISUAL_FEATURES, *,
                            unique: bool = True) -> tuple:
  """Official visual descriptors of a split: (photo ids, float32 [n, sum of feature dims]).

  Reads `<topic's root>/descvis/img/<title> <FEAT>.csv` for every topic (`Split.root_of`) and
  concatenates the requested features per photo, in `features` order. Rows follow the split's topic order, then
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
    base = os.path.join(folder,
                        official_files.check_name(t.title, f'topic {t.number}: title', folder))
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
          raise official_files.DatasetFormatError(path, line, f'photo {pid} is not in {first_path}')
        order[i] = j
      if len(f_ids) != len(ids):
        present = set(f_ids)
        missing = next(i for i, pid in enumerate(ids) if pid not in present)
        raise official_files.DatasetFormatError(
            path, None, f'no row for photo {ids[missing]} (listed at '
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
