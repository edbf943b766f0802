"""The search page answers what is asked (issue 65 item 4), in headless Chromium over
experiments/serve.py: k photos for colt when phi puts (nearly) every photo in one class (Eq. 6's
head holds one photo per class, the list's continuation fills it); "more like this" on a tile
and an uploaded photo (the query photo left out of its results); a tile's title is its
caption when the store has one. The fixtures and helpers are tests/test_service_page.py's."""
import csv
import dataclasses
import os

import jax
import numpy as np
import pytest

from colt_jax.benchmarking import service_process
from colt_jax.data import features
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from colt_jax.inference import retriever
from page_driving import QUERY  # pylint: disable=g-bad-import-order
from page_driving import _assert_grid_matches  # pylint: disable=g-bad-import-order
from page_driving import _page  # pylint: disable=g-bad-import-order
from page_driving import _running  # pylint: disable=g-bad-import-order
from page_driving import _wait_for_answer  # pylint: disable=g-bad-import-order
from page_driving import browser  # pylint: disable=unused-import,g-bad-import-order
from page_driving import indexed  # pylint: disable=unused-import,g-bad-import-order

K = 12


@pytest.fixture(scope='module')
def one_class_service(indexed, tmp_path_factory):
  """serve.py over the 12 photos with a model whose phi puts every photo in category 0:
  Eq. 6's head (X = 1) holds one photo."""
  store_dir, model = indexed
  colt = retriever.Retriever.from_pretrained(model)
  params = jax.tree_util.tree_map(np.zeros_like, colt.classifier.params)
  bias = np.zeros_like(params['classifier']['bias'])
  bias[0] = 10.0
  params['classifier']['bias'] = bias
  one = retriever.Retriever(
      dataclasses.replace(colt.classifier, params=params), colt.reencoder, colt.settings,
      colt.category_names, colt.text_encoder, encoder=colt.encoder)
  saved = one.save_pretrained(str(tmp_path_factory.mktemp('one-class') / 'model'))
  yield from _running(store_dir, saved, tmp_path_factory.mktemp('serve-one-class'),
                      '--methods', 'colt,dpp', '--warm_settings', f'{K}:1:{K},8:1:8')


def _photo_answer(service, photo, k, method):
  status, answer = service_process.post_json(service.port, '/search', {
      'photo_id': photo, 'k': k, 'per_category': 1, 'list_length': k, 'method': method})
  assert status == 200, answer
  return answer


def _wait_for_photo(page, photo, method):
  page.wait_for_function(
      '([p, m]) => document.querySelector("#results").dataset.photo === p && '
      '!document.querySelector("#search").disabled && '
      'document.querySelector("#status").textContent.includes(" by " + m + " ")',
      arg=[photo, method])


@pytest.mark.slow
def test_the_page_shows_k_photos_when_phi_puts_every_photo_in_one_class(browser,
                                                                       one_class_service):
  page, _ = _page(browser, one_class_service)
  page.goto(f'{one_class_service.url}/?q={QUERY.replace(" ", "+")}&k={K}&x=1&method=colt')
  _wait_for_answer(page, QUERY, 'colt')
  status, answer = service_process.post_json(one_class_service.port, '/search', {
      'query': QUERY, 'k': K, 'per_category': 1, 'list_length': K, 'method': 'colt'})
  assert status == 200, answer
  _assert_grid_matches(page, answer, K)
  assert sum(r['group'] == 0 for r in answer['results']) > K // 2
  page.close()


@pytest.mark.slow
def test_more_like_this_and_an_upload_leave_the_query_photo_out(browser, indexed,
                                                                one_class_service):
  """A tile's "more like this" asks for photos like it by photo_id: the grid is the service's
  answer, 8 photos without it; uploading a photo of the store does the same by its bytes."""
  page, _ = _page(browser, one_class_service)
  page.goto(f'{one_class_service.url}/?q={QUERY.replace(" ", "+")}&k=8&x=1&method=dpp')
  _wait_for_answer(page, QUERY, 'dpp')
  tile = page.locator('#results .tile').nth(2)
  photo = tile.get_attribute('data-photo-id')
  tile.locator('button.like').click()
  _wait_for_photo(page, photo, 'dpp')
  answer = _photo_answer(one_class_service, photo, 8, 'dpp')
  assert answer['photo_id'] == photo
  _assert_grid_matches(page, answer, 8)
  shown = page.eval_on_selector_all('#results .tile', 'ts => ts.map(t => t.dataset.photoId)')
  assert photo not in shown
  assert page.is_visible('#query-photo') and 'left out' in page.inner_text('#query-photo')
  assert f'photo={photo}' in page.url
  # The method control asks again for the same photo.
  page.select_option('#method', 'colt')
  _wait_for_photo(page, photo, 'colt')
  _assert_grid_matches(page, _photo_answer(one_class_service, photo, 8, 'colt'), 8)
  # An upload (CLIP store: the control is offered) of the store's own file.
  assert page.is_visible('#image')
  source = features.load(indexed[0]).meta['source']
  page.set_input_files('#image', os.path.join(source, 'p05.png'))
  _wait_for_photo(page, 'p05.png', 'colt')
  shown = page.eval_on_selector_all('#results .tile', 'ts => ts.map(t => t.dataset.photoId)')
  assert len(shown) == 8 and 'p05.png' not in shown
  page.close()


@pytest.fixture(scope='module')
def listed_service(tiny_clip_dir, indexed, tmp_path_factory):
  """serve.py without a model over the 12 photos indexed from a CSV list of absolute paths
  with captions."""
  source = features.load(indexed[0]).meta['source']
  root = tmp_path_factory.mktemp('listed')
  listing = root / 'photos.csv'
  with open(listing, 'w', newline='', encoding='utf-8') as f:
    rows = csv.writer(f)
    rows.writerow(['path', 'caption'])
    for i in range(12):
      rows.writerow([os.path.join(source, f'p{i:02d}.png'), f'caption number {i}'])
  store_dir = str(root / 'store')
  collection.index_collection(collection.list_items(str(listing)),
                              clip.ClipEncoder(tiny_clip_dir), store_dir, source=str(listing),
                              progress=False)
  yield from _running(store_dir, '', tmp_path_factory.mktemp('serve-listed'),
                      '--warm_settings', '6:1:6')


@pytest.mark.slow
def test_a_tiles_title_is_its_caption(browser, listed_service):
  page, _ = _page(browser, listed_service)
  page.goto(f'{listed_service.url}/?q={QUERY.replace(" ", "+")}&k=6&x=1&method=topk')
  _wait_for_answer(page, QUERY, 'topk')
  titles = page.eval_on_selector_all('#results .tile', 'ts => ts.map(t => [t.dataset.photoId, '
                                     't.title, t.querySelector("img").alt, '
                                     't.querySelector(".id").textContent])')
  assert len(titles) == 6
  for photo, title, alt, text in titles:
    number = int(os.path.basename(photo)[1:3])
    assert os.path.isabs(photo)
    assert title.split('\n')[0] == alt == text == f'caption number {number}', (photo, title)
    assert photo not in title
  assert page.is_visible('#image')  # a CLIP store takes uploads
  page.close()


@pytest.mark.slow
def test_the_upload_control_is_offered_only_when_the_service_takes_images(browser,
                                                                         listed_service):
  """A service whose /healthz says "image_queries": false (a text store) shows no upload
  control (answered here by the browser in the service's name)."""
  import json  # pylint: disable=g-import-not-at-top
  page = browser.new_page()
  page.set_default_timeout(30_000)
  import urllib.request  # pylint: disable=g-import-not-at-top
  with urllib.request.urlopen(listed_service.url + '/healthz', timeout=30) as r:
    text_store = dict(json.load(r), image_queries=False)
  page.route('**/healthz', lambda route: route.fulfill(
      status=200, content_type='application/json', body=json.dumps(text_store)))
  page.goto(listed_service.url + '/')
  page.wait_for_function('() => document.querySelector("#collection").textContent !== ""')
  assert page.is_hidden('#image') and page.is_hidden('#image-label')
  assert page.is_hidden('#query-photo')
  page.close()
