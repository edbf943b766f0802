"""Writes a static results browser (`experiments/results_site.py`): an index of topics with each
method's per-topic P/CR/F1@20 (sortable) and a page per topic with the ranked lists as image
grids bordered by ground-truth cluster.

  python experiments/browse.py --results docs/results/div400 --out site/
  python experiments/browse.py --results work/demo-seed0/results --out work/site  # synthetic

Open <out>/index.html in a browser; the pages need no network (Flickr photos show when it is
there; otherwise each tile shows the photo's title).
"""
from absl import flags

from colt_jax import cli
from colt_jax import data as data_lib
from colt_jax import outputs
from colt_jax import runfile
from colt_jax.errors import InputError
import results_site as site_lib

_RESULTS = flags.DEFINE_string('results', 'docs/results/div400', 'A results folder written by '
                               'experiments/reproduce.py or experiments/evaluate.py.')
_OUT = flags.DEFINE_string('out', 'site', 'Folder for the pages.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Dataset root (default: $DIV400_ROOT, or the '
                                'synthetic default).')
_ROWS = flags.DEFINE_list('rows', [], 'Rows to show, by name (default: the main methods).')
_DEPTH = flags.DEFINE_integer('depth', 20, 'Photos shown per ranked list (a run file holds at '
                              f'most {runfile.MAX_PER_TOPIC}).', lower_bound=1,
                              upper_bound=runfile.MAX_PER_TOPIC)


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  rows = list(dict.fromkeys(_ROWS.value))
  if len(rows) != len(_ROWS.value):
    raise InputError(f'--rows: a row is given twice, got {",".join(_ROWS.value)}')
  dataset, split_name, runs = site_lib.load_results(_RESULTS.value, rows)
  if dataset not in data_lib.DATASETS:
    raise InputError(f'{_RESULTS.value}/results.json: unknown dataset {dataset!r}')
  split = data_lib.load_split(dataset, data_lib.resolve(dataset, split_name,
                                                        _DATA_DIR.value).data_dir, split_name)
  out = outputs.claim_dir(_OUT.value, 'the results browser', flag='--out')
  pages = site_lib.write_site(split, runs, out, _DEPTH.value)
  print(f'{len(pages)} pages ({len(runs)} methods, {len(split.topics)} topics): {pages[0]}')


if __name__ == '__main__':
  cli.run(main)
