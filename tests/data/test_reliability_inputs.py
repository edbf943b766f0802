"""Bad input that used to corrupt results silently, through the command lines.

* Non-finite numbers (NaN, inf, and text such as 'nan' that float() accepts) in descriptor
  CSVs, feature-store arrays and dataset XML metadata are errors naming the file and line (or
  row), never zeros or NaN further on.
* JSON written by colt_jax holds no NaN or infinity.
* Names read from the data (topic titles, photo ids) never lead a path outside the data root.

Each case: exit status 2, one line naming the file and line, every file byte-identical.
"""
import os
import re

import numpy as np
import pytest

from colt_jax.data import features
from colt_jax.data import mediaeval
from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
from cli_run import first_topic_title  # pylint: disable=g-bad-import-order
from cli_run import run_cli  # pylint: disable=g-bad-import-order
from cli_run import split_dir  # pylint: disable=g-bad-import-order
from cli_run import tree_digest  # pylint: disable=g-bad-import-order


def _line_of(text, needle):
  """1-based line of the first `needle` in `text`."""
  return text.count('\n', 0, text.index(needle)) + 1


def _write_cm_descriptors(root):
  """descvis/img/<title> CM.csv (2 values per photo) for every dev topic; returns the first
  topic's file."""
  split = mediaeval.read_div400(str(root), 'dev')
  folder = root / 'devset' / 'keywords' / 'descvis' / 'img'
  folder.mkdir(parents=True)
  for k, t in enumerate(split.topics):
    rows = [f'{p.photo_id},{k + 0.5},{i / 7:.4f}' for i, p in enumerate(split.photos[t.number])]
    (folder / f'{t.title} CM.csv').write_text('\n'.join(rows) + '\n')
  return folder / f'{split.topics[0].title} CM.csv'


def test_nan_in_a_descriptor_csv_names_file_and_line(dataset_copy, tmp_path):
  """The issue's case: a 'nan' used to zero the column for every photo, exit 0."""
  csv = _write_cm_descriptors(dataset_copy)
  lines = csv.read_text().splitlines()
  pid = lines[2].split(',')[0]
  lines[2] = f'{pid},0.5,nan'
  csv.write_text('\n'.join(lines) + '\n')
  before = tree_digest(dataset_copy)
  proc = run_cli('extract_features', '--dataset', 'div400', '--data_dir', dataset_copy,
                 '--split', 'dev', '--encoder', 'minilm', '--views_descriptors', 'CM',
                 '--out', tmp_path / 'store', cwd=tmp_path)
  assert_bad_input(proc, f'{csv}:3:', f'photo {pid}', 'column 3', "'nan'")
  assert tree_digest(dataset_copy) == before
  assert sorted(os.listdir(tmp_path)) == ['data']


def test_infinity_in_a_feature_store_names_file_and_row(dataset_copy, tmp_path):
  store = dataset_copy / 'features' / 'test'
  queries = np.load(store / 'queries.npy')
  query_ids = np.load(store / 'query_ids.npy')
  queries[1, 0] = np.inf
  np.save(store / 'queries.npy', queries)
  before = tree_digest(dataset_copy)
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy,
                 '--features_dir', store, '--method', 'topk', '--out_dir', tmp_path / 'out',
                 cwd=tmp_path)
  assert_bad_input(proc, f'{store / "queries.npy"}: row 1 (query id \'{query_ids[1]}\')',
                   'column 0 is inf')
  assert tree_digest(dataset_copy) == before
  assert sorted(os.listdir(tmp_path)) == ['data']


def test_nan_in_the_photo_metadata_xml_names_file_line_and_photo(dataset_copy, tmp_path):
  title = first_topic_title(dataset_copy)
  xml = split_dir(dataset_copy) / 'xml' / f'{title}.xml'
  text = xml.read_text()
  second = text.index('<photo ', text.index('<photo ') + 1)  # the second photo's latitude
  pid = re.search(r' id="([^"]+)"', text[second:]).group(1)
  at = text.index('latitude="0"', second)
  xml.write_text(text[:at] + 'latitude="nan"' + text[at + len('latitude="0"'):])
  before = tree_digest(dataset_copy)
  proc = run_cli('evaluate', '--dataset', 'div400', '--data_dir', dataset_copy, '--split',
                 'test', '--method', 'flickr', '--out_dir', tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, f'{xml}:{text.count(chr(10), 0, second) + 1}:',
                   f'photo {pid}: latitude', "'nan'")
  assert tree_digest(dataset_copy) == before
  assert sorted(os.listdir(tmp_path)) == ['data']


def test_a_topic_title_never_leads_outside_the_data_dir(dataset_copy, tmp_path):
  """'xml/<title>.xml' of the title '../../../../outside' is tmp_path/outside.xml: refused,
  never read, though a well-formed file waits there."""
  title = first_topic_title(dataset_copy)
  topics = split_dir(dataset_copy) / 'testsetkeywords_topics.xml'
  text = topics.read_text()
  escape = '../../../../outside'
  topics.write_text(text.replace(f'<title>{title}</title>', f'<title>{escape}</title>', 1))
  outside = tmp_path / 'outside.xml'
  outside.write_bytes((split_dir(dataset_copy) / 'xml' / f'{title}.xml').read_bytes())
  assert os.path.normpath(split_dir(dataset_copy) / 'xml' / f'{escape}.xml') == str(outside)
  before, before_outside = tree_digest(dataset_copy), outside.read_bytes()
  proc = run_cli('evaluate', '--dataset', 'div400', '--data_dir', dataset_copy, '--split',
                 'test', '--method', 'flickr', '--out_dir', tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, f'{topics}:{_line_of(text, "<topic>")}:', f"title '{escape}'",
                   'not a plain file name')
  assert tree_digest(dataset_copy) == before and outside.read_bytes() == before_outside
  assert sorted(os.listdir(tmp_path)) == ['data', 'outside.xml']


def test_json_never_holds_nan(dataset_copy, tmp_path):
  """A store whose meta would hold NaN is not written, and the old store stays as it was;
  one whose meta.json holds a bare NaN (written by an older colt_jax) is refused by line."""
  path = str(dataset_copy / 'features' / 'test')
  store = features.load(path, mmap=False)
  before = tree_digest(dataset_copy)
  meta = {k: v for k, v in store.meta.items() if k != 'path'}
  meta['views'] = {'transform': {'mean': {'CM': [0.5, float('nan')]}}}
  with pytest.raises(ValueError, match=r'views.transform.mean.CM\[1\] is not a finite'):
    features.write(path, features.FeatureStore(**{**store.__dict__, 'meta': meta}))
  assert tree_digest(dataset_copy) == before
  meta_json = os.path.join(path, 'meta.json')
  with open(meta_json) as f:
    text = f.read()
  with open(meta_json, 'w') as f:
    f.write(text.replace('"dim": ', '"stats": NaN, "dim": ', 1))
  with pytest.raises(features.FeatureStoreError,
                     match=f'meta.json:{_line_of(text, chr(34) + "dim")}: NaN is not a finite'):
    features.load(path)
