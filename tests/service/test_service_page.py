"""The live search page (colt_jax/service/static/index.html, served at GET /) driven in a real
headless browser: Playwright with Debian's Chromium (/usr/bin/chromium).

The service is `experiments/serve.py` on a free 127.0.0.1 port (a real uvicorn server, a child
process) over 12 generated photos indexed by the tiny CLIP, with the tiny trained CoLT model
(as tests/inference/test_search_cli.py builds them). The browser tests skip, naming what is missing,
when Playwright or Chromium is not installed; the page's self-containment is checked without
a browser.
"""
import dataclasses
import io
import os
import re
import shutil

import jax
import numpy as np
import pytest

from colt_jax.data import features
from colt_jax.util import outputs
from colt_jax.inference import retriever
from colt_jax.benchmarking import service_process
from colt_jax.service import schemas
from PIL import Image
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order
from page_driving import QUERY, _assert_grid_matches, _page, _running, _wait_for_answer  # pylint: disable=g-bad-import-order
from page_driving import browser, indexed  # pylint: disable=g-bad-import-order,unused-import

PAGE = os.path.join(REPO, 'colt_jax', 'service', 'static', 'index.html')


def test_the_page_is_one_self_contained_file():
  """No external scripts, stylesheets, fonts, images or CDNs: every URL the page names is
  one of the service's own paths."""
  with open(PAGE, encoding='utf-8') as f:
    html = f.read()
  assert re.search(r'https?:|//[a-z0-9.-]+\.[a-z]{2,}/', html, re.I) is None
  assert re.search(r'<script[^>]*\bsrc=|<link\b|<iframe|<object|<embed', html, re.I) is None
  styles = re.findall(r'<style>(.*?)</style>', html, re.S)
  scripts = re.findall(r'<script>(.*?)</script>', html, re.S)
  assert len(styles) == 1 and len(scripts) == 1
  assert re.search(r'@import|@font-face|url\(', styles[0]) is None
  assert re.search(r'\bimport\b|importScripts|new Worker|XMLHttpRequest|WebSocket',
                   scripts[0]) is None
  for path in re.findall(r'fetch\("([^"]+)"', html):
    assert path in ('/search', '/healthz')


def test_the_page_offers_every_method_and_the_services_own():
  """Every method of the service has an option; the page keeps those GET /healthz lists and
  chooses its default (a store without a model: no colt, model_free.json's method chosen)."""
  with open(PAGE, encoding='utf-8') as f:
    html = f.read()
  assert sorted(re.findall(r'<option value="([a-z]+)"', html)) == sorted(schemas.METHODS)
  assert 'data.methods.includes(option.value)' in html and 'data.method_default' in html


@pytest.fixture(scope='module')
def service(indexed, tmp_path_factory):
  """experiments/serve.py on a free 127.0.0.1 port (stopped by SIGTERM afterwards)."""
  store_dir, model = indexed
  # Small batches and the list shapes the tests ask for: a short warm-up.
  yield from _running(store_dir, model, tmp_path_factory.mktemp('serve'), '--methods',
                      'colt,topk', '--warm_settings', '8:1:8,6:1:6')


def test_get_slash_serves_the_page(service):
  import http.client  # pylint: disable=g-import-not-at-top
  conn = http.client.HTTPConnection(service_process.HOST, service.port, timeout=10)
  conn.request('GET', '/')
  response = conn.getresponse()
  body = response.read()
  conn.close()
  assert response.status == 200
  assert response.getheader('content-type', '').startswith('text/html')
  with open(PAGE, 'rb') as f:
    assert body == f.read()


@pytest.fixture(scope='module')
def model_free_service(indexed, tmp_path_factory):
  """experiments/serve.py over the store alone: no model."""
  store_dir, _ = indexed
  yield from _running(store_dir, '', tmp_path_factory.mktemp('serve-model-free'),
                      '--warm_settings', '12:1:12')


@pytest.fixture(scope='module')
def blind_service(indexed, tmp_path_factory):
  """experiments/serve.py over the store with a model whose phi labels every photo
  irrelevant: Eq. 6's head holds one photo (issue 65 item 4)."""
  store_dir, model = indexed
  colt = retriever.Retriever.from_pretrained(model)
  params = jax.tree_util.tree_map(np.zeros_like, colt.classifier.params)
  bias = np.zeros_like(params['classifier']['bias'])
  bias[colt.classifier.space.irrelevant_id] = 10.0
  params['classifier']['bias'] = bias
  blind = retriever.Retriever(
      dataclasses.replace(colt.classifier, params=params), colt.reencoder, colt.settings,
      colt.category_names, colt.text_encoder, encoder=colt.encoder)
  saved = blind.save_pretrained(str(tmp_path_factory.mktemp('blind') / 'model'))
  yield from _running(store_dir, saved, tmp_path_factory.mktemp('serve-blind'), '--methods',
                      'colt', '--warm_settings', '12:1:12')


def _search_in_page(page, service, k, method):
  """Types QUERY into the page with k photos, X=1 and the method selected, waits for its
  answer, and returns what the service answers to the same request (the page's list)."""
  page.fill('#k', str(k))
  page.fill('#per-category', '1')
  page.click('#query')
  page.keyboard.type(QUERY, delay=15)
  page.keyboard.press('Enter')
  _wait_for_answer(page, QUERY, method)
  status, answer = service_process.post_json(service.port, '/search', {
      'query': QUERY, 'k': k, 'per_category': 1, 'list_length': k, 'method': method,
      'params': {}})
  assert status == 200, answer
  return answer


def test_the_page_searches_and_shows_the_answer_grouped(browser, service):
  """Type a query, press Enter: the grid holds k tiles grouped as /search's JSON groups them,
  thumbnails from /photos/{id}, the timing shown; the screenshot is not blank; the page asks
  only the service for anything."""
  page, asked = _page(browser, service)
  k = 8
  page.select_option('#method', 'colt')
  answer = _search_in_page(page, service, k, 'colt')
  shown = _assert_grid_matches(page, answer, k)
  assert all(r['has_image'] for r in answer['results'])
  page.wait_for_function('() => [...document.querySelectorAll("#results img")].every('
                         'i => i.complete && i.naturalWidth > 0)')
  assert len(page.query_selector_all('#results img')) == k
  assert page.is_hidden('#error')
  status_line = page.inner_text('#status')
  assert re.search(rf'{k} photos by colt · [\d.]+ ms in the service \(queue [\d.]+ · encode '
                   r'[\d.]+ · candidates [\d.]+ · rerank [\d.]+\) · batch of \d+ · [\d.]+ ms '
                   'round trip', status_line), status_line
  assert 'q=the+view' in page.url and 'method=colt' in page.url
  pixels = np.asarray(Image.open(io.BytesIO(page.screenshot(full_page=True))).convert('RGB'),
                      np.float32)
  assert pixels.std() > 20, 'the screenshot is (nearly) blank'
  grid = np.asarray(Image.open(io.BytesIO(page.locator('#results').screenshot())).convert(
      'RGB'), np.float32)
  assert grid.std() > 20 and len(np.unique(grid.reshape(-1, 3), axis=0)) > 200
  assert len({t['id'] for t in shown['tiles']}) == k
  assert asked and all(url.startswith(service.url + '/') for url in asked), asked
  assert sum('/photos/' in url for url in asked) == k
  page.close()


def test_the_api_docs_render_from_the_service_alone(browser, service):
  """/docs (Swagger UI) renders the service's operations with every file it asks for served
  by the service: it works without the internet."""
  page = browser.new_page(viewport={'width': 1100, 'height': 800})
  page.set_default_timeout(30_000)
  asked, failed = [], []
  page.on('request', lambda request: asked.append(request.url))
  page.on('requestfailed', lambda request: failed.append(request.url))
  page.goto(service.url + '/docs')
  page.wait_for_selector('.opblock-summary-path')
  paths = page.eval_on_selector_all('.opblock-summary-path',
                                    'ps => ps.map(p => p.dataset.path || p.textContent)')
  assert {'/search', '/healthz', '/metrics'} <= {p.strip() for p in paths}, paths
  assert not failed, failed
  assert asked and all(url.startswith(service.url + '/') for url in asked), asked
  page.close()


def test_controls_change_the_method_and_errors_show_as_text(browser, service):
  """The method control asks /search again (the grid is the new answer); a bad request's
  JSON error is shown as text and the grid is emptied; a good one clears the error."""
  page, _ = _page(browser, service)
  k = 6
  page.goto(f'{service.url}/?q={QUERY.replace(" ", "+")}&k={k}&x=1&method=colt')
  _wait_for_answer(page, QUERY, 'colt')
  assert page.input_value('#query') == QUERY
  page.select_option('#method', 'topk')
  _wait_for_answer(page, QUERY, 'topk')
  status, answer = service_process.post_json(service.port, '/search', {
      'query': QUERY, 'k': k, 'per_category': 1, 'list_length': k, 'method': 'topk'})
  assert status == 200, answer
  _assert_grid_matches(page, answer, k)
  # X above k: the service answers 4xx naming the field; the page shows it as text.
  page.fill('#per-category', str(k + 1))
  page.dispatch_event('#per-category', 'change')
  page.wait_for_selector('#error', state='visible')
  status, answer = service_process.post_json(service.port, '/search', {
      'query': QUERY, 'k': k, 'per_category': k + 1, 'list_length': k, 'method': 'topk'})
  assert 400 <= status < 500 and 'per_category' in answer['error']
  error = page.inner_text('#error')
  assert error == f'HTTP {status}: {answer["error"]}'
  assert page.query_selector_all('#results .tile') == []
  # Not JSON in the parameters box: refused before anything is sent.
  page.fill('#per-category', '1')
  page.fill('#params', '{lambda')
  page.click('#search')
  page.wait_for_function('() => document.querySelector("#error").textContent.startsWith('
                         '"params: not JSON")')
  page.fill('#params', '')
  page.click('#search')
  _wait_for_answer(page, QUERY, 'topk')
  assert page.is_hidden('#error')
  assert len(page.query_selector_all('#results .tile')) == k
  page.close()


def test_a_missing_thumbnail_falls_back_to_the_photos_id(browser, service):
  """A photo whose file is gone (GET /photos/{id} 404) shows its id as text."""
  page, _ = _page(browser, service)
  store_dir = features.load(service.args[service.args.index('--store') + 1])
  source = store_dir.meta['source']
  hidden = os.path.join(source, 'p00.png')
  moved = hidden + '.away'
  shutil.move(hidden, moved)
  try:
    page.goto(f'{service.url}/?q={QUERY.replace(" ", "+")}&k=12&x=1&method=topk')
    _wait_for_answer(page, QUERY, 'topk')
    status, answer = service_process.post_json(service.port, '/search', {
        'query': QUERY, 'k': 12, 'per_category': 1, 'list_length': 12, 'method': 'topk'})
    assert status == 200, answer
    (hit,) = [r for r in answer['results'] if r['photo_id'] == 'p00.png']
    assert hit['has_image']  # the store has a file for it; the service cannot read it now
    tile = page.locator('#results .tile[data-photo-id="p00.png"]')
    tile.locator('.thumb .title').wait_for()
    assert tile.locator('.thumb').inner_text() == (hit['title'] or 'p00.png')
    assert tile.locator('img').count() == 0
  finally:
    shutil.move(moved, hidden)
  page.close()


@pytest.mark.slow
def test_the_readme_captioned_collection(tmp_path):
  """`service_screenshot.py --collection_only --workdir DIR` (README, "Your own photos") writes
  48 captioned drawings and their MiniLM store (what `make model`'s models search)."""
  import sys  # pylint: disable=g-import-not-at-top
  repo = REPO
  out = tmp_path / 'demo'
  proc = preloaded.run([sys.executable, os.path.join(repo, 'benchmarks', 'service_screenshot.py'),
                        '--collection_only', f'--workdir={out}'], capture_output=True,
                       text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = (out / 'captions.csv').read_text(encoding='utf-8').splitlines()
  assert rows[0] == 'path,caption' and len(rows) == 49
  assert 'photos/bridge-night-red-brick.png,red brick bridge at night' in rows
  store = features.load(str(out / 'store'))
  assert store.photos.shape == (48, 384) and store.meta['encoder'].startswith('minilm')
  assert all(os.path.isfile(out / p) for p in store.photo_ids)
  # Without --workdir: one line naming the flag.
  bad = preloaded.run([sys.executable, os.path.join(repo, 'benchmarks', 'service_screenshot.py'),
                       '--collection_only'], capture_output=True, text=True, timeout=300,
                      check=False)
  assert bad.returncode == 2 and '--collection_only needs --workdir' in bad.stderr


@pytest.mark.slow
def test_a_screenshot_of_a_store_leaves_its_workdir_recorded(browser, indexed, tmp_path):
  """`service_screenshot.py --store --model --workdir W --out PNG`: the page's screenshot, and
  W recorded as the script's (its service log), so the same command may write there again."""
  import sys  # pylint: disable=g-import-not-at-top
  del browser  # Playwright and Chromium are there
  store_dir, model = indexed
  repo = REPO
  work, shot = tmp_path / 'work', tmp_path / 'shots' / 'page.png'
  proc = preloaded.run([sys.executable, os.path.join(repo, 'benchmarks', 'service_screenshot.py'),
                        f'--store={store_dir}', f'--model={model}', f'--workdir={work}',
                        f'--out={shot}', f'--query={QUERY}', '--k=6', '--width=640',
                        '--height=480'], capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  image = np.asarray(Image.open(shot).convert('RGB'), np.float64)
  assert image.shape[1] == 640 and image.std() > 20  # not blank
  assert sorted(os.listdir(work)) == ['.colt_jax-manifest.json', 'serve.log']
  assert outputs.check_writable_dir(str(work), 'the demo collection', flag='--workdir')


def test_the_page_without_a_model_offers_the_model_free_methods(browser, model_free_service):
  """Over a store without a model the page lists the model-free methods alone, dpp chosen,
  and shows k photos of its answer."""
  page, asked = _page(browser, model_free_service)
  page.wait_for_function('() => document.querySelector("#collection").textContent'
                         '.includes("no model")')
  assert page.eval_on_selector_all('#method option', 'os => os.map(o => o.value)') == [
      'dpp', 'mmr', 'msd', 'umons', 'topk']
  assert page.input_value('#method') == 'dpp'
  k = 12
  answer = _search_in_page(page, model_free_service, k, 'dpp')
  _assert_grid_matches(page, answer, k)
  assert all(url.startswith(model_free_service.url + '/') for url in asked), asked
  page.close()


def test_the_page_shows_k_photos_when_phi_labels_them_all_irrelevant(browser, blind_service):
  """The page asks for k = 12 (list_length = k) over 12 photos that phi labels irrelevant:
  Eq. 6's head holds one photo, and the grid shows 12, the head filled from the list's
  continuation (as search.py lists them)."""
  page, _ = _page(browser, blind_service)
  page.goto(f'{blind_service.url}/?q={QUERY.replace(" ", "+")}&k=12&x=1&method=colt')
  _wait_for_answer(page, QUERY, 'colt')
  status, answer = service_process.post_json(blind_service.port, '/search', {
      'query': QUERY, 'k': 12, 'per_category': 1, 'list_length': 12, 'method': 'colt',
      'params': {}})
  assert status == 200, answer
  _assert_grid_matches(page, answer, 12)
  assert all(r['group'] == -1 for r in answer['results'])
  page.close()
