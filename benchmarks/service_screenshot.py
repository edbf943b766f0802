r"""A screenshot of the live search page (GET / of the service) after a query, for docs/SERVICE.md.

  python benchmarks/service_screenshot.py --out docs/figures/service.png
  python benchmarks/service_screenshot.py --store STORE --model MODEL_DIR --query "big ben" \
      --out my-page.png
  python benchmarks/service_screenshot.py --url http://127.0.0.1:8000 --query "big ben" \
      --out my-page.png

Without --url or --store/--model it builds a small demo collection in --workdir (default: a
temporary folder, removed afterwards): 48 drawn pictures of four landmarks (tower, bridge,
dome, gate) at four times of day in three materials, captioned ("red brick bridge at night")
and indexed by their captions with the packaged MiniLM-L6 text encoder
(`data_prep/index_collection.py --list captions.csv --encoder minilm`), and a CoLT model of
that dimension whose phi is randomly initialised: the photos retrieved follow the query, the
groups phi gives them are arbitrary (a trained model's are not)
(colt_jax/benchmarking/drawn_collection.py). With --store/--model it
serves those (`experiments/serve.py` on a free 127.0.0.1 port, stopped afterwards); with --url
it uses a service already running.

The page is driven by Playwright in Debian's Chromium (/usr/bin/chromium, headless): it
opens `/?q=QUERY&k=K&x=X&method=METHOD`, waits for the grid and its thumbnails, and saves a
PNG of the whole page.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from absl import app
from absl import flags

from colt_jax.benchmarking import drawn_collection
from colt_jax.benchmarking import live_page
from colt_jax.benchmarking import service_process
from colt_jax.engines import approximate as engines
from colt_jax.inference import settings as settings_lib
from colt_jax.util import atomic
from colt_jax.util import cli
from colt_jax.util import outputs

_OUT = flags.DEFINE_string('out', '', 'The PNG to write.')
_URL = flags.DEFINE_string('url', '', 'A running service (http://127.0.0.1:PORT); default: '
                           'start experiments/serve.py.')
_STORE = flags.DEFINE_string('store', '', 'The feature store to serve (with --model); default: '
                             'the demo collection.')
_MODEL = flags.DEFINE_string('model', '', 'The CoLT model directory to serve (with --store).')
_ENGINE = flags.DEFINE_enum('engine', 'exact', engines.ENGINES, 'serve.py --engine.')
_QUERY = flags.DEFINE_string('query', 'bridge at night', 'What is typed in the search box.')
_K = flags.DEFINE_integer('k', 12, 'Photos (the page\'s k).', lower_bound=1,
                          upper_bound=settings_lib.LIST_LENGTH)
_PER_CATEGORY = flags.DEFINE_integer('per_category', 1, 'X (the page\'s per category).',
                                     lower_bound=1, upper_bound=settings_lib.LIST_LENGTH)
_METHOD = flags.DEFINE_enum('method', 'colt', live_page.METHODS, 'The page\'s method.')
_WIDTH = flags.DEFINE_integer('width', 1200, 'Browser window width (CSS pixels).',
                              lower_bound=320, upper_bound=4096)
_HEIGHT = flags.DEFINE_integer('height', 800, 'Browser window height (CSS pixels).',
                               lower_bound=240, upper_bound=4096)
_WORKDIR = flags.DEFINE_string('workdir', '', 'Where the demo collection, its store and model '
                               'and the service\'s log go (default: a temporary folder).')
_COLLECTION_ONLY = flags.DEFINE_bool(
    'collection_only', False, 'Only write the demo collection (photos, captions.csv and its '
    'MiniLM store) into --workdir, then stop: a captioned collection to search with a real '
    'model (docs/COLLECTIONS.md, "Your own photos").')
_TIMEOUT = flags.DEFINE_float('timeout', 300.0, 'Seconds the service may take to start and '
                              'the page to show the answer.', lower_bound=1.0,
                              upper_bound=3600.0)


def _claim_workdir() -> str:
  """--workdir, recorded as this script's: the demo collection and the service's log."""
  pictures = [p[0] for p in drawn_collection.pictures()]
  return outputs.claim_dir(_WORKDIR.value, 'the demo collection', trees=('store', 'model'),
                           files=('captions.csv', 'serve.log', *pictures), flag='--workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _COLLECTION_ONLY.value:
    if not _WORKDIR.value:
      raise app.UsageError('--collection_only needs --workdir (where the collection goes)')
    workdir = _claim_workdir()
    store, _ = drawn_collection.demo_collection(workdir)
    print(f'wrote {os.path.join(workdir, "captions.csv")} and its store {store}')
    return
  if not _OUT.value:
    raise app.UsageError('--out is required (the PNG to write)')
  if bool(_STORE.value) != bool(_MODEL.value):
    raise app.UsageError('--store and --model go together')
  if _URL.value and _STORE.value:
    raise app.UsageError('pass --url (a running service) or --store/--model, not both')
  if _PER_CATEGORY.value > _K.value:
    raise app.UsageError(f'--per_category ({_PER_CATEGORY.value}) must be <= --k ({_K.value})')
  if not _QUERY.value.strip():
    raise app.UsageError('--query is empty')
  out = outputs.check_writable_file(_OUT.value, 'the screenshot', flag='--out')
  # --url: nothing is written but the PNG (a --workdir is not made).
  workdir = (_claim_workdir() if _WORKDIR.value and not _URL.value
             else tempfile.mkdtemp(prefix='colt_jax_screenshot_'))
  try:
    if _URL.value:
      png = live_page.screenshot(_URL.value, _QUERY.value, _K.value, _PER_CATEGORY.value,
                                 _METHOD.value, _WIDTH.value, _HEIGHT.value, _TIMEOUT.value)
    else:
      store, model = ((_STORE.value, _MODEL.value) if _STORE.value
                      else drawn_collection.demo_collection(workdir))
      shape = f'{_K.value}:{_PER_CATEGORY.value}:{_K.value}'  # the page's lists: k photos
      with service_process.Service(store, model, os.path.join(workdir, 'serve.log'),
                                   ['--engine', _ENGINE.value, '--warm_settings', shape,
                                    '--max_batch_size', '1']) as service:
        service.start(_TIMEOUT.value)
        png = live_page.screenshot(service.url, _QUERY.value, _K.value, _PER_CATEGORY.value,
                                   _METHOD.value, _WIDTH.value, _HEIGHT.value, _TIMEOUT.value)
  finally:
    if not _WORKDIR.value or _URL.value:
      shutil.rmtree(workdir, ignore_errors=True)
  outputs.record_file(out)
  atomic.write_bytes(out, png)
  print(f'wrote {out} ({len(png):,} bytes)')


if __name__ == '__main__':
  cli.run(main)
