"""Your own relevance judgments (a CSV file) written as a dataset in the official layout.

`make_dataset(csv_path, out)` reads one judgment per line,

    query,photo,caption,relevance,cluster[,split]
    eiffel tower,photos/e1.jpg,The tower at night,1,night view
    eiffel tower,photos/e2.jpg,My sandwich,0,
    eiffel tower,photos/e3.jpg,,1,3

and writes the official Div400 layout (`colt_jax.data.mediaeval`), the one every command
reads with `--dataset div400 --data_dir <out>`:

    <out>/devset/keywords/devsetkeywords_topics.xml   the dev queries (`testset/...` the test ones)
    <out>/devset/keywords/xml/<query>.xml             its photos: id, rank (the CSV order),
                                                      title (the caption), url (the image path)
    <out>/devset/keywords/gt/rGT/<query> rGT.txt      photo id,relevance
    <out>/devset/keywords/gt/dGT/<query> dGT.txt      photo id,cluster id (relevant photos)
    <out>/devset/keywords/gt/dGT/<query> dclusterGT.txt   cluster id,cluster name
    <out>/devset/keywords/img/<query>/<photo id>.jpg  a copy of the image (CLIP reads it)
    <out>/configs/div400_{scl,ttc}.flags              trainer flagfiles for this dataset
    <out>/judgments.json, judgments.csv               what was read and how (a copy of the CSV)

Columns (a header line names them, in any order, case-insensitive; a field that holds a comma
is quoted, as spreadsheets do):

* `query`: the query text, which is also the topic title: files are named after it, so it
  holds no '/', '\\' or control character. Queries are numbered 1, 2, ... in the order they
  first appear.
* `photo`: an image path (it holds '/' or '\\' or ends in .jpg, .jpeg, .png or .webp; relative
  paths are relative to the CSV's folder), or a photo id (no spaces, commas or slashes). A
  path's photo id is its file name without the extension, spaces and odd characters made '_',
  with '-<8 hex digits>' of the path appended when another path or id would give the same id.
  The images are copied (never moved) to `img/<query>/<photo id>.jpg` of each split that holds
  the photo, under its first query there, for `extract_features.py --encoder clip`; with
  `copy_images=False` only their path is recorded (the photo XML's url, a file:// URL).
* `caption` (optional column): the photo's text, what `--encoder minilm` reads (as the photo
  XML's title). A photo has one caption wherever it appears.
* `relevance`: 1 (relevant), 0 (not relevant) or -1 (don't know, left out of the scores).
* `cluster`: required for relevant photos, empty otherwise: a cluster name ("night view") or
  an integer id. Within a query, names are one cluster when they agree up to case and
  spacing (the first spelling is kept); an integer n is named "<query> cluster n". Clusters
  are numbered 1..K per query in order of first appearance. The names make CoLT's category
  vocabulary (`colt_jax.data.vocabulary`): give the same name to the same kind of view
  across queries.
* `split` (optional column): dev or test, the same on every line of a query. Without it,
  `dev_fraction` of the queries (rounded) go to dev: those whose SHA-256 of
  '<seed>:<query>' comes first, a draw that depends on nothing else (adding a query moves no
  other). Each split needs at least 2 queries.

The lines of a query keep their order: its first photo gets rank 1, the order
`evaluate.py --method flickr` scores. A (query, photo) pair given twice with the same
labels counts once; with other labels it is an error.

Every problem is a `DatasetFormatError` whose one-line message names the CSV, the line and the
field (`judgments.csv:7: relevance: 'yes' is not 1, 0 or -1`), found before anything is
written. The output folder follows the ownership rules of `colt_jax.util.outputs`: it is written
only when it is new, empty, or a folder colt_jax wrote (e.g. by an earlier run, which it
replaces as a whole), built in a temporary sibling and renamed into place.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
from typing import Dict, List, Optional, Sequence
from xml.sax.saxutils import escape, quoteattr

from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

LAYOUT = 'div400'  # what `--dataset` reads the written folder as
SPLIT_DIRS = {'dev': os.path.join('devset', 'keywords'),
              'test': os.path.join('testset', 'keywords')}
TOPICS_FILES = {'dev': 'devsetkeywords_topics.xml', 'test': 'testsetkeywords_topics.xml'}
MARKER_FILE = 'judgments.json'
CSV_COPY = 'judgments.csv'
CONFIG_DIR = 'configs'
CONFIG_TEMPLATES = ('div400_scl.flags', 'div400_ttc.flags')
FORMAT = 'colt_jax.judgments/1'
IMAGE_NAME = '{photo_id}.jpg'  # what `colt_jax.encoders.extract` looks for

# The CSV's reading and checks (re-exported: the public names of this module).
from colt_jax.data.judgments_csv import (  # pylint: disable=g-bad-import-order,unused-import
    COLUMNS, DEFAULT_DEV_FRACTION, IMAGE_SUFFIXES, MIN_QUERIES, OPTIONAL, REQUIRED, Judgment,
    Judgments, PhotoRecord, QueryRecord, _error, assign_splits, read_csv)


def _xml_head() -> str:
  return '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'


def _photo_element(photo: PhotoRecord, rank: int, with_url: bool) -> str:
  attrs = {'id': photo.photo_id, 'rank': str(rank), 'title': photo.caption}
  if with_url and photo.source:
    attrs['url'] = pathlib.Path(photo.source).as_uri()
  return '<photo ' + ' '.join(f'{k}={quoteattr(v)}' for k, v in attrs.items()) + '/>'


def _write_split(split_dir: str, topics_name: str, queries: Sequence[QueryRecord],
                 photos: Dict[str, PhotoRecord], copy_images: bool, csv_path: str) -> int:
  """Writes one split; returns the number of images copied."""
  items = [f'<topic>\n\t<number>{q.number}</number>\n\t<title>{escape(q.title)}</title>\n'
           '</topic>' for q in queries]
  atomic.write_text(os.path.join(split_dir, topics_name),
                    _xml_head() + '<topics>\n' + '\n'.join(items) + ('\n' if items else '')
                    + '</topics>\n')
  copied = set()
  for q in queries:
    body = ''.join(_photo_element(photos[j.photo_id], rank, True) + '\n'
                   for rank, j in enumerate(q.judgments, start=1))
    atomic.write_text(os.path.join(split_dir, 'xml', f'{q.title}.xml'),
                      _xml_head() + f'<photos monument={quoteattr(q.title)}>\n{body}</photos>\n')
    gt = os.path.join(split_dir, 'gt')
    atomic.write_text(os.path.join(gt, 'rGT', f'{q.title} rGT.txt'),
                      ''.join(f'{j.photo_id},{j.relevance}\n' for j in q.judgments))
    members = sorted((j.cluster, i, j.photo_id) for i, j in enumerate(q.judgments) if j.cluster)
    atomic.write_text(os.path.join(gt, 'dGT', f'{q.title} dGT.txt'),
                      ''.join(f'{pid},{cid}\n' for cid, _, pid in members))
    atomic.write_text(os.path.join(gt, 'dGT', f'{q.title} dclusterGT.txt'),
                      ''.join(f'{cid},{name}\n'
                              for cid, name in enumerate(q.cluster_names, start=1)))
    if copy_images:
      for j in q.judgments:
        photo = photos[j.photo_id]
        if photo.source and j.photo_id not in copied:
          dst = os.path.join(split_dir, 'img', q.title, IMAGE_NAME.format(photo_id=j.photo_id))
          os.makedirs(os.path.dirname(dst), exist_ok=True)
          try:
            shutil.copyfile(photo.source, dst)
          except OSError as e:
            raise _error(csv_path, photo.line, 'photo', f'{photo.written}: cannot copy '
                         f'{photo.source} ({e.strerror or e})') from None
          atomic.usual_mode(dst)
          copied.add(j.photo_id)
  return len(copied)


def _config_text(template: str, name: str, out: str) -> str:
  """A trainer flagfile for the dataset in `out`: the template's flags (its chosen values
  included, as starting values), without its comments; workdirs under work/<name>/."""
  what = 'scl' if template.endswith('_scl.flags') else 'ttc'
  try:
    with open(template, encoding='utf-8') as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise InputError(f'{template}: cannot read the flagfile template ({e.strerror or e})') from None
  flags_ = []
  for line in lines:
    s = line.strip()
    if not s.startswith('--'):
      continue
    flag = s[2:].partition('=')[0]
    if flag == 'workdir':
      s = f'--workdir=work/{name}/{what}'
    elif flag == 'scl_checkpoint':
      s = f'--scl_checkpoint=work/{name}/scl'
    elif flag in ('data_dir', 'features_dir'):
      continue
    flags_.append(s)
  header = [
      f'# Written by data_prep/make_dataset.py from {os.path.basename(template)}: the Div400 '
      'CoLT configuration',
      f'# (its choices as starting values) for the dataset in {out}. Pass --data_dir and',
      '# --features_dir. experiments/choose_steps.py --dataset div400 --data_dir <dataset>',
      '# --config_dir <this folder> proposes the chosen flags here (never the shipped ones);',
      '# its --apply puts a reviewed proposal in place.']
  return '\n'.join(header + flags_) + '\n'


def _check_out(csv_path: str, out: str) -> str:
  """The absolute `out` when a dataset may be written there (`outputs.check_writable_dir`)
  and it does not hold the CSV (e.g. the copy an earlier run made)."""
  out = outputs.check_writable_dir(out, 'a dataset', flag='--out')
  csv_path = os.path.abspath(csv_path)
  if os.path.commonpath([csv_path, out]) == out:
    raise InputError(f'{out} (--out): holds the judgments CSV {csv_path}, which a new dataset '
                     'there would replace; choose another folder')
  return out


@dataclasses.dataclass(frozen=True)
class Summary:
  """What `write_dataset` wrote."""
  path: str
  queries: Dict[str, List[str]]  # split -> query titles
  photos: int
  judgments: int
  images_copied: int
  configs: Optional[str]


def write_dataset(judgments: Judgments, out: str, *, dev_fraction: Optional[float] = None,
                  seed: int = 0, copy_images: bool = True,
                  config_templates: Optional[str] = None) -> Summary:
  """Writes `judgments` in the official layout under `out` (module docstring), all or nothing.

  `config_templates`: a folder holding CONFIG_TEMPLATES (experiments/configs/tuned), made into
  `<out>/configs/` for the trainers and experiments/choose_steps.py; None: no configs."""
  out = _check_out(judgments.path, out)
  csv_path = os.path.abspath(judgments.path)
  splits = assign_splits(judgments, dev_fraction, seed)
  if copy_images:
    for p in judgments.photos.values():
      if p.source and not os.path.isfile(p.source):
        raise _error(judgments.path, p.line, 'photo', f'{p.written}: no such image file '
                     f'({p.source})')
  templates = []
  if config_templates is not None:
    templates = [os.path.join(config_templates, t) for t in CONFIG_TEMPLATES]
    for t in templates:
      if not os.path.isfile(t):
        raise InputError(f'{t}: no such flagfile template (--config_templates names the '
                         f'folder of {", ".join(CONFIG_TEMPLATES)})')
  name = os.path.basename(out)
  tmp = outputs.staging_dir(out)
  try:
    copied = 0
    for split, queries in splits.items():
      copied += _write_split(os.path.join(tmp, SPLIT_DIRS[split]), TOPICS_FILES[split],
                             queries, judgments.photos, copy_images, judgments.path)
    configs_dir = None
    if templates:
      folder = os.path.join(tmp, CONFIG_DIR)
      os.makedirs(folder)
      atomic.usual_mode(folder, directory=True)
      # Its own manifest: choose_steps later writes its choices there (a nested tree).
      outputs.record(folder, files=CONFIG_TEMPLATES)
      for t in templates:
        atomic.write_text(os.path.join(folder, os.path.basename(t)), _config_text(t, name, out))
      configs_dir = os.path.join(out, CONFIG_DIR)
    with open(judgments.path, 'rb') as f:
      data = f.read()
    atomic.write_bytes(os.path.join(tmp, CSV_COPY), data)
    marker = {
        'format': FORMAT, 'layout': LAYOUT, 'csv': csv_path,
        'csv_sha256': hashlib.sha256(data).hexdigest(),
        'split_by': 'split column' if judgments.has_split_column else 'dev_fraction',
        'dev_fraction': (None if judgments.has_split_column else
                         DEFAULT_DEV_FRACTION if dev_fraction is None else dev_fraction),
        'seed': None if judgments.has_split_column else seed,
        'queries': {s: [{'number': q.number, 'title': q.title} for q in qs]
                    for s, qs in splits.items()},
        'photos': {pid: p.source for pid, p in sorted(judgments.photos.items())},
        'judgments': sum(len(q.judgments) for q in judgments.queries),
        'duplicate_lines': judgments.duplicates, 'images_copied': copied,
        'read_with': f'--dataset {LAYOUT} --data_dir {out}'}
    atomic.write_json(os.path.join(tmp, MARKER_FILE), marker)
    outputs.replace_dir(tmp, out, 'a dataset', flag='--out')
  except BaseException:
    if os.path.isdir(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
    raise
  return Summary(path=out, queries={s: [q.title for q in qs] for s, qs in splits.items()},
                 photos=len(judgments.photos),
                 judgments=sum(len(q.judgments) for q in judgments.queries),
                 images_copied=copied, configs=configs_dir)


def make_dataset(csv_path: str, out: str, *, dev_fraction: Optional[float] = None,
                 seed: int = 0, copy_images: bool = True,
                 config_templates: Optional[str] = None,
                 allow_outside: bool = False) -> Summary:
  """`read_csv` then `write_dataset`: the CSV's judgments as a dataset in `out` (photos
  outside the CSV's folder tree only with `allow_outside`)."""
  _check_out(csv_path, out)  # before reading anything
  judgments = read_csv(csv_path, check_images=copy_images, allow_outside=allow_outside)
  return write_dataset(judgments, out, dev_fraction=dev_fraction, seed=seed,
                       copy_images=copy_images, config_templates=config_templates)


def read_marker(root: str) -> Optional[dict]:
  """The `judgments.json` of a folder make_dataset wrote, or None."""
  path = os.path.join(root, MARKER_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f'{path}: not a judgments marker ({e})') from None
