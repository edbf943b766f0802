"""Tests of the results browser (experiments/results_site.py, experiments/browse.py)."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from colt_jax import data
from colt_jax import evaluation
import results_site

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ['flickr', 'topk', 'umons']


@pytest.fixture(scope='module')
def results_dir(tiny_synthetic, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('browse') / 'results')
  evaluation.run_evaluation(dataset='synthetic', split='test', methods=METHODS,
                            protocols_=['pool'], params=evaluation.MethodParams(),
                            data_dir=tiny_synthetic, out_dir=out, log=lambda *_: None)
  return out


def _browse(results, out, data_dir, *extra):
  return subprocess.run([sys.executable, os.path.join(REPO, 'experiments', 'browse.py'),
                         f'--results={results}', f'--out={out}', f'--data_dir={data_dir}',
                         *extra], capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=REPO))


def test_site_pages_show_every_topic_method_and_tile(results_dir, tiny_synthetic, tmp_path):
  done = _browse(results_dir, tmp_path / 'site', tiny_synthetic)
  assert done.returncode == 0, done.stderr[-2000:]
  split = data.load_split('synthetic', tiny_synthetic, 'test')
  payload = json.load(open(os.path.join(results_dir, 'results.json')))
  index = (tmp_path / 'site' / 'index.html').read_text()
  for t in split.topics:
    assert f'href="topic-{t.number}.html"' in index
    f1 = payload['results']['umons']['per_topic'][str(t.number)]['F1@20']
    assert f'<td class="n">{f1:.3f}</td>' in index
  assert '<script src' not in index and 'http' not in index  # offline: nothing external
  t = split.topics[0]
  page = (tmp_path / 'site' / f'topic-{t.number}.html').read_text()
  gt = split.ground_truth[t.number]
  sections = page.split('<h2>')[1:]
  assert [s.split('</h2>')[0] for s in sections] == METHODS
  assert all(s.count('class="tile') == 20 for s in sections)
  ranked = [l.split()[2] for l in open(payload['results']['topk']['run_file'])
            if l.split()[0] == str(t.number)][:20]
  first = ranked[0]
  tile = re.search(rf'<div class="([^"]*)"([^>]*) title="{first}[ "(]', page)
  if gt.relevance.get(first) == 0:
    assert 'irrelevant' in tile.group(1)
  elif first in gt.clusters:
    assert 'border-color' in tile.group(2)
  for c, name in gt.cluster_names.items():
    assert f'{c}: {name}' in page
  assert '<script src' not in page and '@import' not in page


def test_bad_results_folder_and_row_are_one_line_errors(results_dir, tiny_synthetic, tmp_path):
  missing = _browse(tmp_path / 'nothing', tmp_path / 'site', tiny_synthetic)
  assert missing.returncode == 2 and 'no results.json' in missing.stderr
  assert len(missing.stderr.strip().splitlines()) == 1
  row = _browse(results_dir, tmp_path / 'site', tiny_synthetic, '--rows=colt')
  assert row.returncode == 2 and "--rows: 'colt'" in row.stderr


def _browser():
  for name in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'):
    path = shutil.which(name)
    if path:
      return path
  return None


def test_a_page_renders_in_a_headless_browser(results_dir, tiny_synthetic, tmp_path):
  browser = _browser()
  if browser is None:
    pytest.skip('no headless browser (chromium) is installed: apt-get install chromium')
  split = data.load_split('synthetic', tiny_synthetic, 'test')
  _, _, runs = results_site.load_results(results_dir, ())
  out = tmp_path / 'site'
  results_site.write_site(split, runs, str(out))
  page = (out / f'topic-{split.topics[0].number}.html').as_uri()
  common = [browser, '--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars']
  shot = tmp_path / 'shot.png'
  subprocess.run(common + ['--window-size=1200,1400', f'--screenshot={shot}', page],
                 capture_output=True, timeout=120, check=True)
  image = np.asarray(Image.open(shot).convert('RGB'), np.float64)
  assert image.shape[:2] == (1400, 1200)
  assert image.std() > 20 and len(np.unique(image.reshape(-1, 3), axis=0)) > 20  # not blank
  dom = subprocess.run(common + ['--dump-dom', page], capture_output=True, text=True,
                       timeout=120, check=True).stdout
  assert dom.count('class="tile') == 20 * len(runs)  # the grid as the browser built it
