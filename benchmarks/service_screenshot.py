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
groups phi gives them are arbitrary (a trained model's are not). With --store/--model it
serves those (`experiments/serve.py` on a free 127.0.0.1 port, stopped afterwards); with --url
it uses a service already running.

The page is driven by Playwright in Debian's Chromium (/usr/bin/chromium, headless): it
opens `/?q=QUERY&k=K&x=X&method=METHOD`, waits for the grid and its thumbnails, and saves a
PNG of the whole page.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from absl import app
from absl import flags

from colt_jax.util import atomic
from colt_jax.util import cli
from colt_jax.engines import approximate as engines
from colt_jax.util import outputs
from colt_jax.util.errors import InputError
from colt_jax.inference import settings as settings_lib
from colt_jax.benchmarking import headless_chromium
from colt_jax.benchmarking import service_process
from colt_jax.benchmarking import synthetic_collection

CHROMIUM = headless_chromium.CHROMIUM
METHODS = ('colt', 'topk', 'mmr', 'umons')

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
_METHOD = flags.DEFINE_enum('method', 'colt', METHODS, 'The page\'s method.')
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

LANDMARKS = ('tower', 'bridge', 'dome', 'gate')
TIMES = {  # sky top, sky bottom, light of the ground
    'midday': ((70, 140, 225), (170, 210, 245), (110, 160, 80)),
    'sunset': ((60, 40, 110), (250, 150, 70), (90, 80, 60)),
    'night': ((8, 12, 40), (30, 40, 90), (25, 30, 35)),
    'fog': ((200, 200, 205), (225, 225, 228), (160, 165, 160)),
}
MATERIALS = {'red brick': (170, 60, 45), 'grey stone': (120, 120, 125),
             'white marble': (235, 232, 222)}


def _picture(landmark: str, time_of_day: str, material: str, seed: int):
  """A 240x180 drawing of the landmark at that time of day."""
  from PIL import Image, ImageDraw  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  w, h = 240, 180
  top, bottom, ground = TIMES[time_of_day]
  t = np.linspace(0, 1, h)[:, None, None]
  sky = (np.asarray(top) * (1 - t) + np.asarray(bottom) * t) * np.ones((1, w, 1))
  img = Image.fromarray(sky.astype(np.uint8), 'RGB')
  d = ImageDraw.Draw(img)
  if time_of_day == 'night':
    for _ in range(40):
      x, y = rng.integers(0, w), rng.integers(0, h // 2)
      d.point((int(x), int(y)), fill=(255, 255, 230))
    d.ellipse((190, 18, 214, 42), fill=(245, 240, 210))
  elif time_of_day == 'midday':
    d.ellipse((20, 15, 50, 45), fill=(255, 240, 150))
  elif time_of_day == 'sunset':
    d.ellipse((150, 110, 210, 170), fill=(255, 190, 90))
  horizon = 135 + int(rng.integers(-6, 6))
  d.rectangle((0, horizon, w, h), fill=ground)
  c = MATERIALS[material]
  if time_of_day == 'night':
    c = tuple(int(v * 0.45) for v in c)
  elif time_of_day == 'fog':
    c = tuple(int(v * 0.5 + 200 * 0.5) for v in c)
  dark = tuple(max(0, v - 45) for v in c)
  x0 = 70 + int(rng.integers(-30, 30))
  if landmark == 'tower':
    d.rectangle((x0 + 30, 40, x0 + 70, horizon), fill=c, outline=dark)
    d.polygon([(x0 + 26, 42), (x0 + 50, 8), (x0 + 74, 42)], fill=dark)
    d.ellipse((x0 + 38, 55, x0 + 62, 79), fill=(240, 235, 200), outline=dark)
  elif landmark == 'bridge':
    d.rectangle((0, horizon - 38, w, horizon - 30), fill=c, outline=dark)
    for px in (50, 120, 190):
      d.rectangle((px - 6, horizon - 70, px + 6, horizon), fill=dark)
    d.arc((20, horizon - 110, 220, horizon + 40), 200, 340, fill=c, width=5)
    d.rectangle((0, horizon, w, h), fill=tuple(max(0, v - 30) for v in top))
  elif landmark == 'dome':
    d.rectangle((x0, 85, x0 + 100, horizon), fill=c, outline=dark)
    d.pieslice((x0 + 5, 35, x0 + 95, 135), 180, 360, fill=dark)
    for px in range(x0 + 10, x0 + 100, 18):
      d.rectangle((px, 100, px + 6, horizon - 5), fill=tuple(min(255, v + 25) for v in c))
  else:  # gate
    d.rectangle((x0, 55, x0 + 110, horizon), fill=c, outline=dark)
    d.rectangle((x0 - 5, 45, x0 + 115, 60), fill=dark)
    for gx in (x0 + 15, x0 + 60):
      d.rectangle((gx, 80, gx + 35, horizon), fill=tuple(top))
      d.pieslice((gx, 65, gx + 35, 100), 180, 360, fill=tuple(top))
  return img


def _pictures() -> list:
  """(path under the workdir, landmark, time of day, material) of each demo picture."""
  return [(f'photos/{landmark}-{time_of_day}-{material.replace(" ", "-")}.png', landmark,
           time_of_day, material)
          for landmark in LANDMARKS for time_of_day in TIMES for material in MATERIALS]


def demo_collection(root: str) -> tuple:
  """(store, model): the demo collection (module docstring) written under `root`."""
  from colt_jax.encoders import collection  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import minilm  # pylint: disable=g-import-not-at-top
  photos = os.path.join(root, 'photos')
  os.makedirs(photos, exist_ok=True)
  rows = []
  for seed, (rel, landmark, time_of_day, material) in enumerate(_pictures()):
    _picture(landmark, time_of_day, material, seed).save(os.path.join(root, rel))
    rows.append((rel, f'{material} {landmark} at {time_of_day}'))
  captions = os.path.join(root, 'captions.csv')
  text = io.StringIO(newline='')
  csv.writer(text).writerows([('path', 'caption')] + rows)
  atomic.write_text(captions, text.getvalue())
  encoder = minilm.MiniLMEncoder()
  store = os.path.join(root, 'store')
  collection.index_collection(collection.list_items(captions), encoder, store, source=captions,
                              progress=False)
  model = synthetic_collection.synthetic_model(
      os.path.join(root, 'model'), dim=encoder.dim, num_layers=2, num_heads=2, model_dim=64,
      num_images=48, categories=12, settings=settings_lib.InferenceSettings())
  # The model claims MiniLM as its encoder, as if trained on such features.
  with open(os.path.join(model, settings_lib.MODEL_FILE), encoding='utf-8') as f:
    info = json.load(f)
  info['encoder'] = encoder.name
  atomic.write_json(os.path.join(model, settings_lib.MODEL_FILE), info)
  return store, model


def _warm_up(url: str, body: dict) -> None:
  """The same search once before the page asks (a first request may compile its shapes):
  the timing the screenshot shows is a warm one. A refusal is one line naming the flags."""
  request = urllib.request.Request(url.rstrip('/') + '/search', data=json.dumps(body).encode(),
                                   headers={'Content-Type': 'application/json'})
  try:
    with urllib.request.urlopen(request, timeout=_TIMEOUT.value) as response:
      response.read()
  except urllib.error.HTTPError as e:
    raise InputError(f'the service refused --query/--k/--per_category/--method: HTTP {e.code} '
                     f'{e.read()[:300].decode(errors="replace")}') from None
  except (urllib.error.URLError, OSError) as e:
    raise InputError(f'{url} (--url): cannot reach the service ({e})') from None


def screenshot(url: str, query: str, k: int, per_category: int, method: str, width: int,
               height: int, timeout_s: float) -> bytes:
  """PNG bytes of the whole page at `url`/ after it answered `query`."""
  try:
    from playwright.sync_api import sync_playwright  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError('Playwright is not installed: pip install -r requirements.txt') from None
  if not os.path.exists(CHROMIUM):
    raise InputError(f'no browser: {CHROMIUM} is missing (apt-get install -y chromium)')
  address = url.rstrip('/') + '/?' + urllib.parse.urlencode(
      {'q': query, 'k': k, 'x': per_category, 'method': method})
  _warm_up(url, {'query': query, 'k': k, 'per_category': per_category, 'list_length': k,
                 'method': method})
  with sync_playwright() as p, headless_chromium.private_env() as env:
    browser = p.chromium.launch(executable_path=CHROMIUM, args=list(headless_chromium.ARGS),
                                env=env)
    try:
      page = browser.new_page(viewport={'width': width, 'height': height})
      page.set_default_timeout(timeout_s * 1e3)
      page.goto(address)
      page.wait_for_function(
          '() => !document.querySelector("#search").disabled && '
          '(document.querySelector("#results").dataset.count || !document.querySelector('
          '"#error").hidden)')
      if page.is_visible('#error'):
        raise InputError(f'the page shows an error for --query {query!r}: '
                         f'{page.inner_text("#error")}')
      page.wait_for_function('() => [...document.querySelectorAll("#results img")].every('
                             'i => i.complete)')
      return page.screenshot(full_page=True)
    finally:
      browser.close()


def _claim_workdir() -> str:
  """--workdir, recorded as this script's: the demo collection and the service's log."""
  return outputs.claim_dir(_WORKDIR.value, 'the demo collection', trees=('store', 'model'),
                           files=('captions.csv', 'serve.log', *(p[0] for p in _pictures())),
                           flag='--workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _COLLECTION_ONLY.value:
    if not _WORKDIR.value:
      raise app.UsageError('--collection_only needs --workdir (where the collection goes)')
    workdir = _claim_workdir()
    store, _ = demo_collection(workdir)
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
      png = screenshot(_URL.value, _QUERY.value, _K.value, _PER_CATEGORY.value,
                       _METHOD.value, _WIDTH.value, _HEIGHT.value, _TIMEOUT.value)
    else:
      store, model = ((_STORE.value, _MODEL.value) if _STORE.value
                      else demo_collection(workdir))
      shape = f'{_K.value}:{_PER_CATEGORY.value}:{_K.value}'  # the page's lists: k photos
      with service_process.Service(store, model, os.path.join(workdir, 'serve.log'),
                                 ['--engine', _ENGINE.value, '--warm_settings', shape,
                                  '--max_batch_size', '1']) as service:
        service.start(_TIMEOUT.value)
        png = screenshot(service.url, _QUERY.value, _K.value, _PER_CATEGORY.value,
                         _METHOD.value, _WIDTH.value, _HEIGHT.value, _TIMEOUT.value)
  finally:
    if not _WORKDIR.value or _URL.value:
      shutil.rmtree(workdir, ignore_errors=True)
  outputs.record_file(out)
  atomic.write_bytes(out, png)
  print(f'wrote {out} ({len(png):,} bytes)')


if __name__ == '__main__':
  cli.run(main)
