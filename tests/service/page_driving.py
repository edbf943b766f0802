"""Driving the search page in headless Chromium (browser, _page, _wait_for_answer,
_assert_grid_matches) over a running serve.py (_running) of an indexed folder (indexed)."""
import os
import pytest
from colt_jax.benchmarking import headless_chromium
from colt_jax.benchmarking import service_process
from tiny_clip import indexed_photos_and_model


QUERY = 'the view'


@pytest.fixture(scope='module')
def indexed(tiny_clip_dir, tiny_colt, tmp_path_factory):
  """(store dir, model dir): 12 generated photos indexed by the tiny CLIP, and the tiny CoLT
  model claiming the tiny CLIP as its encoder (as tests/inference/test_search_cli.py makes them)."""
  return indexed_photos_and_model(str(tmp_path_factory.mktemp('page')), tiny_clip_dir,
                                  tiny_colt, 200, size=(64, 48))


def _running(store_dir, model, folder, *args):
  """serve.py over the store and model (with batches of 2) while the fixture lasts."""
  log = str(folder / 'serve.log')
  args = ['--max_wait_ms', '2', '--max_batch_size', '2', *args]
  with service_process.Service(store_dir, model, log, args) as running:
    running.start(timeout=180)
    yield running


@pytest.fixture(scope='module')
def browser():
  sync_api = pytest.importorskip(
      'playwright.sync_api', reason='Playwright is not installed (pip install -r '
      'requirements.txt): the page is not driven in a browser')
  if not os.path.exists(CHROMIUM):
    pytest.skip(f'no browser: {CHROMIUM} is missing (apt-get install -y chromium)')
  with sync_api.sync_playwright() as p, headless_chromium.private_env() as env:
    launched = p.chromium.launch(executable_path=CHROMIUM, args=list(headless_chromium.ARGS),
                                 env=env)
    try:
      yield launched
    finally:
      launched.close()


def _page(browser, service):
  """A new page on the service's / that records every URL it asks for."""
  page = browser.new_page(viewport={'width': 1100, 'height': 800})
  page.set_default_timeout(30_000)
  asked = []
  page.on('request', lambda request: asked.append(request.url))
  page.goto(service.url + '/')
  return page, asked


def _wait_for_answer(page, query: str, method: str):
  """Waits until the grid shows the answer to `query` by `method` (the status line names
  the method of the answer shown)."""
  page.wait_for_function(
      '([q, m]) => document.querySelector("#results").dataset.query === q && '
      '!document.querySelector("#search").disabled && '
      'document.querySelector("#status").textContent.includes(" by " + m + " ")',
      arg=[query, method])


def _assert_grid_matches(page, answer: dict, k: int):
  shown = _shown(page)
  assert len(answer['results']) == k
  assert len(shown['tiles']) == k
  tiles, order = _expected_layout(answer)
  assert shown['sections'] == order
  assert [(t['rank'], t['group'], t['id']) for t in shown['tiles']] == [
      (r['rank'], r['group'], r['photo_id']) for r in tiles]
  label = {r['photo_id']: r['category'] or 'no group' for r in answer['results']}
  for t in shown['tiles']:  # each tile shows its rank and group (phi's label's name)
    assert f'#{t["rank"]}' in t['caption']
    assert (f'group {t["group"]}' if t['group'] >= 0 else label[t['id']]) in t['caption']
  return shown


CHROMIUM = headless_chromium.CHROMIUM


def _shown(page) -> dict:
  """What the grid shows: tiles in document order and the groups' sections."""
  tiles = page.eval_on_selector_all('#results .tile', '''tiles => tiles.map(t => ({
      rank: Number(t.dataset.rank), group: Number(t.dataset.group), id: t.dataset.photoId,
      caption: t.querySelector("figcaption").textContent,
      img: t.querySelector("img") ? t.querySelector("img").naturalWidth : null}))''')
  sections = page.eval_on_selector_all('#results section.group',
                                       'ss => ss.map(s => Number(s.dataset.group))')
  return {'tiles': tiles, 'sections': sections}


def _expected_layout(answer: dict) -> tuple:
  """(tiles as the page must show them: grouped by phi's label (a group, or phi's other
  labels by name), groups in the order of their best rank; the groups' order)."""
  key = lambda r: (r['group'], r['category'] if r['group'] < 0 else None)
  order = []
  for r in answer['results']:
    if key(r) not in order:
      order.append(key(r))
  tiles = [r for g in order for r in answer['results'] if key(r) == g]
  return tiles, [g for g, _ in order]
