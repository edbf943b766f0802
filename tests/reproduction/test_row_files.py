"""One file per named row (issue 66 item 5): every row file loads into `variants.Variant`,
`variants.ROW_ORDER` and the files agree, a malformed file is a one-line error naming it and
the field, and the rows' cache keys are those of the Python rows they replaced
(tests/fixtures/row_keys.json, made by the command tests/fixtures/README.md names)."""
import dataclasses
import json
import os
import shutil

import pytest

from colt_jax.reproduction import row_files
from colt_jax.reproduction import variants
from colt_jax.util.errors import ConfigError
from checkout import FIXTURES, REPO  # pylint: disable=g-bad-import-order

CONFIGS = os.path.join(REPO, 'experiments', 'configs')
FIELDS = {f.name: f.type for f in dataclasses.fields(variants.Variant)}
PAPER_ROWS = ('colt-paper', 'without SCL', 'SCL + DBSCAN', 'SCL + top-k', 'without DA',
              'global labels', 'without fill', 'argmax labels', 'without pair (2)',
              'without pair (4)', 'alpha=0.99', 'X=2', 'X=3', 'L=6', 'L=8', 'L=10', 'N=150',
              'N=250')


def _files(kind):
  folder = os.path.join(CONFIGS, kind, 'rows')
  return sorted(os.path.join(folder, f) for f in os.listdir(folder))


def test_every_row_file_loads_and_the_order_lists_each_once():
  names = [v.name for v in variants.VARIANTS]
  assert names == list(variants.ROW_ORDER) and len(set(names)) == len(names)
  every = _files('paper') + _files('tuned')
  assert all(f.endswith('.json') for f in every)
  assert sorted(map(os.path.realpath, variants.ROW_FILES.values())) == sorted(
      map(os.path.realpath, every))
  for name, path in variants.ROW_FILES.items():
    assert os.path.basename(path) == row_files.slug(name) + '.json'
  paper = {n for n, p in variants.ROW_FILES.items() if f'{os.sep}paper{os.sep}' in p}
  assert paper == set(PAPER_ROWS)
  # a tuned row says where its choices and their evidence are; a paper row needs not
  assert all(variants.ROW_CHOICES[n] for n in variants.ROW_ORDER if n not in paper)


def test_slug_rule():
  assert row_files.slug('colt + descvis + metadata') == 'colt-descvis-metadata'
  assert row_files.slug('alpha=0.99') == 'alpha-0-99'
  assert row_files.slug('without pair (2)') == 'without-pair-2'
  assert row_files.slug('colt-pairs without CM3x3') == 'colt-pairs-without-cm3x3'


def test_row_keys_are_those_of_the_python_rows():
  with open(os.path.join(FIXTURES, 'row_keys.json')) as f:
    golden = json.load(f)
  assert list(golden) == list(variants.ROW_ORDER)
  for v in variants.VARIANTS:  # as the row cache compares keys: after a JSON round trip
    key = json.loads(json.dumps(variants.variant_key(v), sort_keys=True, default=str))
    assert json.dumps(key, sort_keys=True) == json.dumps(golden[v.name], sort_keys=True), v.name


def test_values_read_from_rows_keep_their_python_types():
  assert variants.PAIR_BLENDS == (1.0, 0.7, 0.4)
  assert variants.DPP_THETAS == (0.3, 0.5, 0.7, 0.9, 0.95, 0.98)
  assert variants.RELEVANCE_MIXES == (0.0, 0.5, 1.0)
  assert variants.PAIRS_TTC == {'relevance_weight': 1.0, 'pair_weight': 1.0,
                                'relational_tokens': True}
  assert variants.DESCVIS_VIEWS == {'descriptors': variants.views_lib.ALL_DESCRIPTORS,
                                    'descriptor_weight': 1.0}
  assert variants.METADATA_VIEWS == dict(variants.DESCVIS_VIEWS, metadata_weight=0.5)
  assert all(isinstance(v.views['descriptors'], tuple) for v in variants.PER_VIEW_ABLATIONS)


@pytest.fixture
def configs(tmp_path):
  """A copy of the shipped row files."""
  for kind in row_files.KINDS:
    shutil.copytree(os.path.join(CONFIGS, kind, 'rows'), tmp_path / kind / 'rows')
  return tmp_path


def _load(root):
  return variants.read_rows(str(root))


def _edit(root, kind, row, **changes):
  path = root / kind / 'rows' / f'{row_files.slug(row)}.json'
  data = json.loads(path.read_text())
  for key, value in changes.items():
    if value is None:
      del data[key]
    else:
      data[key] = value
  path.write_text(json.dumps(data))
  return str(path)


def _error(root):
  with pytest.raises(ConfigError) as e:
    _load(root)
  message = str(e.value)
  assert '\n' not in message
  return message


def test_the_copy_loads_the_same_rows(configs):
  assert _load(configs)[0] == variants.VARIANTS


def test_a_named_feature_setting_is_the_setting_itself():
  pairs = variants.row('colt-pairs')
  assert pairs.views == variants.METADATA_VIEWS and pairs.views is not variants.METADATA_VIEWS
  with open(variants.ROW_FILES['colt-pairs']) as f:
    assert json.load(f)['views'] == 'descvis+metadata'
  assert variants.row('colt + descvis').views == variants.DESCVIS_VIEWS


@pytest.mark.parametrize('changes, says', [
    ({'per_category': 'two'}, "field 'per_category' must be an integer"),
    ({'per_category': True}, "field 'per_category' must be an integer"),
    ({'scl': [1]}, "field 'scl' must be an object or null"),
    ({'pair_blends': ['a']}, "field 'pair_blends' must be a list of numbers"),
    ({'colour': 1}, "unknown field 'colour'"),
    ({'views': 'descvis+people'}, "field 'views' names no setting 'descvis+people'"),
    ({'table': None}, "field 'table' is missing"),
    ({'name': 'X=9'}, "needs the file name x-9.json"),
    ({'base': 'mine'}, 'base must be colt or paper'),
    ({'views': {'colour': 1}}, 'colour'),
    # Overrides and list settings checked when the rows are read, not when a row trains.
    ({'ttc': {'num_layerz': 3}}, "ttc field 'num_layerz' is not a field of PairsTTCConfig"),
    ({'scl': {'betta': 3}}, "scl field 'betta' is not a field of SCLConfig"),
    ({'ttc': {'num_layers': 'three'}}, 'ttc: --num_layers'),
    ({'post': 'nonsense'}, 'post must be one of ttc, topk, dbscan'),
    ({'selection': 'nonsense'}, 'selection must be one of category'),
    ({'list_length': -3}, 'list_length must be >= 1'),
    ({'coverage_of': 'no such row'}, "field 'coverage_of' names no row"),
])
def test_a_malformed_row_file_is_one_line_naming_it_and_the_field(configs, changes, says):
  path = _edit(configs, 'paper', 'X=2', **changes)
  message = _error(configs)
  assert message.startswith(path) and says in message


def test_a_field_given_twice_is_one_line(configs):
  path = configs / 'paper' / 'rows' / 'x-2.json'
  text = path.read_text()
  path.write_text(text.replace('{', '{"per_category": 5, ', 1))
  message = _error(configs)
  assert message.startswith(str(path)) and "field 'per_category' is given twice" in message


def test_a_tuned_row_says_where_its_choices_are(configs):
  path = _edit(configs, 'tuned', 'colt', choices=None)
  message = _error(configs)
  assert message.startswith(path) and "'choices' is missing" in message
  _edit(configs, 'tuned', 'colt', choices='the flagfiles')
  assert "'choices' must be a non-empty list" in _error(configs)


def test_not_json_names_the_line(configs):
  path = configs / 'paper' / 'rows' / 'x-2.json'
  path.write_text('{\n "name": "X=2",\n}\n')
  assert _error(configs).startswith(f'{path}:3: not JSON')


def test_the_order_and_the_files_must_agree(configs):
  (configs / 'tuned' / 'rows' / 'mine.json').write_text('{}')
  message = _error(configs)
  assert 'mine.json' in message and 'ROW_ORDER' in message
  os.remove(configs / 'tuned' / 'rows' / 'mine.json')
  os.remove(configs / 'paper' / 'rows' / 'l-6.json')
  message = _error(configs)
  assert "no row file for 'L=6'" in message and 'l-6.json' in message
  shutil.copy(configs / 'tuned' / 'rows' / 'colt.json', configs / 'paper' / 'rows')
  assert 'one row in two files' in _error(configs)
  with pytest.raises(ConfigError, match="lists 'colt' twice"):
    row_files.load_rows(variants.Variant, FIELDS, ('colt', 'colt'), str(configs))


def test_no_folder_of_rows_is_one_line(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # the rows are found relative to the working folder
  with pytest.raises(ConfigError, match='no row files') as e:
    row_files.configs_root()
  assert '\n' not in str(e.value) and str(tmp_path) in str(e.value)


def test_the_rows_are_read_on_first_use_not_on_import(tmp_path):
  """Importing the reproduction from another folder works; asking for a row there is one line
  naming the folder it looked in."""
  import subprocess
  import sys
  code = ('from colt_jax.reproduction import reproduce_config, variants\n'
          'assert "colt" in variants.DEFAULT_VARIANTS\n'
          'try:\n  variants.VARIANTS\nexcept Exception as e:\n  print(type(e).__name__, e)\n')
  proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True,
                        text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.startswith('ConfigError no row files:'), proc.stdout
