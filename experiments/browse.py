"""Writes a static results browser (`colt_jax/reproduction/results_site.py`): an index of topics with each
method's per-topic P/CR/F1@20 (sortable) and a page per topic with the ranked lists as image
grids bordered by ground-truth cluster.

  python experiments/browse.py --results docs/results/div400 --out site/
  python experiments/browse.py --results work/demo-seed0/results --out work/site  # synthetic

The dataset is the one the results were computed on: --data_dir when given, else the folder
results.json records (its `data_dir`; reproduce.py's `config.data_dir`, taken relative to the
current folder or the repository, and its stores' `features.<split>.source`), else
$DIV400_ROOT / $DIV150CRED_ROOT (the synthetic default for synthetic results). When none is
there it stops with one line saying what to pass.

Open <out>/index.html in a browser; the pages need no network (Flickr photos show when it is
there; otherwise each tile shows the photo's title).
"""
import json
import os

from absl import flags

from colt_jax.util import cli
from colt_jax.data import splits as data_lib
from colt_jax.evaluation import runfile
from colt_jax.util.errors import InputError
from colt_jax.reproduction import results_site as site_lib

_RESULTS = flags.DEFINE_string('results', 'docs/results/div400', 'A results folder written by '
                               'experiments/reproduce.py or experiments/evaluate.py.')
_OUT = flags.DEFINE_string('out', 'site', 'Folder for the pages.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Root of the dataset the results were computed '
                                'on, in the official layout (default: the folder results.json '
                                'records, else $DIV400_ROOT / $DIV150CRED_ROOT, or the synthetic '
                                'default).')
_ROWS = flags.DEFINE_list('rows', [], 'Rows to show, by name (default: the main methods).')
_DEPTH = flags.DEFINE_integer('depth', 20, 'Photos shown per ranked list (a run file holds at '
                              f'most {runfile.MAX_PER_TOPIC}).', lower_bound=1,
                              upper_bound=runfile.MAX_PER_TOPIC)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT_VARS = {'div400': 'DIV400_ROOT', 'div150cred': 'DIV150CRED_ROOT'}


def recorded_data_dirs(results_dir: str, split: str) -> list:
  """The dataset folders results.json records, in the order to try them: its `data_dir`,
  reproduce.py's `config.data_dir` (a relative one against the current folder, then this
  repository; reproduce runs from a repository's root) and the split folder its feature store
  was extracted from (`features.<split>.source`)."""
  with open(os.path.join(results_dir, 'results.json'), encoding='utf-8') as f:
    payload = json.load(f)  # read (and checked) by results_site.load_results before
  found = []
  config = payload.get('config') if isinstance(payload.get('config'), dict) else {}
  for value in (payload.get('data_dir'), config.get('data_dir')):
    if isinstance(value, str) and value:
      found += [value] if os.path.isabs(value) else [value, os.path.join(REPO, value)]
  store = (payload.get('features') or {}).get(split)
  if isinstance(store, dict) and isinstance(store.get('source'), str) and store['source']:
    found.append(store['source'])
  return list(dict.fromkeys(os.path.normpath(p) for p in found))


def _is_synthetic_default(path: str) -> bool:
  """Whether `path` is the synthetic default (work/synthetic-seed0) of some folder: evaluate.py
  records it as an absolute path under the folder it ran in; it is the same data anywhere."""
  path, default = os.path.normpath(path), os.path.normpath(data_lib.DEFAULT_SYNTHETIC_DIR)
  return path == default or path.endswith(os.sep + default)


def find_data_dir(results_dir: str, dataset: str, split: str, given: str = '') -> str:
  """The dataset root to show `results_dir` with ('' = the synthetic default): `given`, a
  folder results.json records that exists (`recorded_data_dirs`), then $DIV400_ROOT /
  $DIV150CRED_ROOT. None there: an `InputError` saying what to pass. Synthetic results that
  record no folder, or the synthetic default, are shown with the default (generated again,
  the same data, when missing); synthetic results of another folder that is gone are refused,
  not shown over the default's other photos."""
  if given:
    return given
  recorded = recorded_data_dirs(results_dir, split)
  for path in recorded:
    if os.path.isdir(path):
      return path
  var = _ROOT_VARS.get(dataset)
  if var is None:  # synthetic
    if not recorded or any(_is_synthetic_default(p) for p in recorded):
      return ''
  elif os.environ.get(var):
    return os.environ[var]
  where = (f'the folders it records are not here ({", ".join(recorded)})' if recorded
           else 'it does not record where that data is')
  if var is None:
    raise InputError(f'{os.path.join(results_dir, "results.json")}: computed on the synthetic '
                     f'dataset {split}, but {where}; pass --data_dir <that dataset\'s folder> '
                     '(data_prep/make_synthetic.py makes one again from its seed)')
  raise InputError(f'{os.path.join(results_dir, "results.json")}: computed on {dataset} '
                   f'{split}, but {where}; pass --data_dir <the {dataset} root in the '
                   f'official layout, with devset/ and testset/> or set {var}')


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  rows = list(dict.fromkeys(_ROWS.value))
  if len(rows) != len(_ROWS.value):
    raise InputError(f'--rows: a row is given twice, got {",".join(_ROWS.value)}')
  dataset, split_name, runs = site_lib.load_results(_RESULTS.value, rows)
  if dataset not in data_lib.DATASETS:
    raise InputError(f'{_RESULTS.value}/results.json: unknown dataset {dataset!r}')
  data_dir = find_data_dir(_RESULTS.value, dataset, split_name, _DATA_DIR.value)
  split = data_lib.load_split(dataset, data_lib.resolve(dataset, split_name, data_dir).data_dir,
                              split_name)
  pages = site_lib.write_site(split, runs, _OUT.value, _DEPTH.value, flag='--out')
  print(f'{len(pages)} pages ({len(runs)} methods, {len(split.topics)} topics): {pages[0]}')


if __name__ == '__main__':
  cli.run(main)
