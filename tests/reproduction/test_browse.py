"""Tests of the results browser (colt_jax/reproduction/results_site.py, experiments/browse.py)."""
import html
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.benchmarking import headless_chromium
from colt_jax.reproduction import results_site
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

METHODS = ['flickr', 'topk', 'umons']


@pytest.fixture(scope='module')
def results_dir(tiny_synthetic, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('browse') / 'results')
  result_sets.run_evaluation(dataset='synthetic', split='test', methods=METHODS,
                            protocols_=['pool'], params=evaluation.MethodParams(),
                            data_dir=tiny_synthetic, out_dir=out, log=lambda *_: None)
  return out


def _browse(results, out, data_dir, *extra):
  return preloaded.run([sys.executable, os.path.join(REPO, 'experiments', 'browse.py'),
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
    assert re.search(rf'<td class="n[^"]*"[^>]*>{f1:.3f}( &#9733;)?</td>', index)
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


def _rows(index):
  """{first cell's text: [(cell class, cell text)]} of the index's rows."""
  out = {}
  for row in re.findall(r'<tr[^>]*>(.*?)</tr>', index):
    cells = re.findall(r'<t[dh]([^>]*)>(.*?)</t[dh]>', row)
    key = re.sub('<[^>]+>', '', cells[0][1])
    out[key] = [(re.search(r'class="([^"]*)"', a).group(1) if 'class=' in a else '',
                 html.unescape(re.sub('<[^>]+>', '', t))) for a, t in cells]
  return out


def test_index_has_a_mean_row_and_marks_each_topics_best_method(results_dir, tiny_synthetic):
  split = data.load_split('synthetic', tiny_synthetic, 'test')
  _, _, runs = results_site.load_results(results_dir, ())
  # Two methods tie for the best F1@20 of one topic: both are marked.
  t0 = split.topics[0].number
  top = dict(runs[2].per_topic[t0], **{'F1@20': 0.999})
  for i in (0, 1):
    runs[i] = results_site.MethodRun(runs[i].name, {**runs[i].per_topic, t0: top}, runs[i].run)
  index = results_site.index_page(split, runs)
  rows = _rows(index)
  ncol = len(results_site.COLUMNS)
  f1_col = results_site.COLUMNS.index('F1@20')

  def method_cells(cells):
    return [cells[4 + i * ncol:4 + (i + 1) * ncol] for i in range(len(runs))]

  mean = rows['mean']
  for r, cells in zip(runs, method_cells(mean)):
    for (_, text), c in zip(cells, results_site.COLUMNS):
      want = np.mean([r.per_topic[t.number][c] for t in split.topics])
      assert float(text.split()[0]) == pytest.approx(want, abs=6e-4)
  mean_f1 = [np.mean([r.per_topic[t.number]['F1@20'] for t in split.topics]) for r in runs]
  best = {runs[i].name for i in range(len(runs)) if mean_f1[i] >= max(mean_f1) - 1e-9}
  assert set(mean[3][1].split(', ')) == best
  for t in split.topics:
    cells = rows[str(t.number)]
    scores = [r.per_topic[t.number]['F1@20'] for r in runs]
    want = {i for i, v in enumerate(scores) if v >= max(scores) - 1e-9}
    if t.number == t0:
      assert want == {0, 1}
    marked = {i for i, m in enumerate(method_cells(cells)) if '\u2605' in m[f1_col][1]}
    assert marked == want, (t.number, scores)
    assert cells[3][1] == ', '.join(runs[i].name for i in sorted(want))
    for i, m in enumerate(method_cells(cells)):  # the whole best triple is bold, no other
      assert all(('best' in cls) == (i in want) for cls, _ in m)
  # It fits a window: the table scrolls inside its own box, titles wrap, methods head a
  # group of three columns instead of one wide header each.
  assert '<div class="scroll"><table id="index">' in index
  assert re.search(r'\.scroll\{[^}]*overflow-x:auto', index)
  for r in runs:
    assert f'colspan="{ncol}">{r.name}</th>' in index
  # The sort keys: every sortable header names the column it sorts, the body's cells line up.
  cols = [int(c) for c in re.findall(r'data-col="(\d+)"', index)]
  assert sorted(cols) == list(range(4 + ncol * len(runs)))
  assert all(len(rows[str(t.number)]) == len(cols) == len(mean) for t in split.topics)


def test_browser_and_figures_share_cluster_colours(tiny_synthetic, results_dir):
  from colt_jax.reproduction import figures
  split = data.load_split('synthetic', tiny_synthetic, 'test')
  _, _, runs = results_site.load_results(results_dir, ())
  for t in split.topics:
    gt = split.ground_truth[t.number]
    page = results_site.topic_page(split, t.number, runs, '/tmp', depth=50)
    ids = [p.photo_id for p in split.photos[t.number]]
    pic = figures.TopicPicture(
        topic=t.number, title=t.title, photo_ids=tuple(ids), f_layout=None, hat_layout=None,
        clusters=np.array([gt.clusters.get(p, 0) for p in ids]),
        cluster_names=dict(gt.cluster_names), lists={}, scores={}, predicted=())
    dots = dict(zip(ids, figures.point_colours(pic)))
    tiles = re.findall(r'style="border-color:(#[0-9a-f]{6})" title="(\S+) \(cluster', page)
    assert tiles
    for colour, pid in tiles:
      assert dots[pid] == colour
    key = dict((int(c), col) for col, c in re.findall(r'background:(#[0-9a-f]{6})"></i>(\d+):',
                                                       page))
    assert key == figures.cluster_colours(pic)
    assert len(set(key.values())) == min(len(key), len(results_site.PALETTE))
  assert not set(figures.PHI_PALETTE) & set(results_site.PALETTE)  # phi's own colours


def test_bad_results_folder_and_row_are_one_line_errors(results_dir, tiny_synthetic, tmp_path):
  missing = _browse(tmp_path / 'nothing', tmp_path / 'site', tiny_synthetic)
  assert missing.returncode == 2 and 'no results.json' in missing.stderr
  assert len(missing.stderr.strip().splitlines()) == 1
  row = _browse(results_dir, tmp_path / 'site', tiny_synthetic, '--rows=colt')
  assert row.returncode == 2 and "--rows: 'colt'" in row.stderr
  # A file for the folder, and results.json entries of the wrong kind: one line each.
  a_file = tmp_path / 'results.json'
  a_file.write_text('{}')
  for payload, needle in ((None, '(--results): a file'),
                          ({'results': 'x'}, '"results" must map each row to an object'),
                          ({'results': {'topk': [1]}}, '"results" must map each row'),
                          ({'rows': {'colt': {'per_topic': 3}}}, '"rows" must map each row'),
                          ({'results': {'topk': {'run_file': 5}}}, "run file must be a path"),
                          ([1], 'not a JSON object')):
    where = a_file
    if payload is not None:
      where = tmp_path / 'bad'
      where.mkdir(exist_ok=True)
      (where / 'results.json').write_text(json.dumps(payload))
    proc = _browse(where, tmp_path / 'site', tiny_synthetic)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1


def _run_browse(results, out, cwd, *extra, env=None):
  """browse.py without --data_dir, from `cwd`, with `env` replacing $DIV400_ROOT."""
  full = dict(os.environ, PYTHONPATH=REPO)
  full.pop('DIV400_ROOT', None)
  full.update(env or {})
  return preloaded.run([sys.executable, os.path.join(REPO, 'experiments', 'browse.py'),
                        f'--results={results}', f'--out={out}', *extra],
                       capture_output=True, text=True, timeout=300, cwd=cwd, env=full)


def test_browse_finds_the_data_the_results_were_computed_on(results_dir, tiny_synthetic,
                                                           tmp_path):
  """Without --data_dir: the folder results.json records (evaluate's `data_dir`, reproduce's
  `config.data_dir` relative to where it ran, a store's `features.<split>.source`), then
  $DIV400_ROOT; none: one line saying what to pass. (Div400 results: the tiny synthetic
  dataset is in Div400's layout.)"""
  payload = json.load(open(os.path.join(results_dir, 'results.json')))
  payload.pop('data_dir', None)  # each case records only what it tests
  copy = shutil.copytree(tiny_synthetic, tmp_path / 'data')
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  topics = len(data.load_split('synthetic', tiny_synthetic, 'test').topics)

  def browse(name, extra, env=None):
    results = tmp_path / name
    results.mkdir()
    (results / 'results.json').write_text(json.dumps(dict(payload, dataset='div400', **extra)))
    return _run_browse(results, tmp_path / f'site-{name}', elsewhere, env=env)

  found = [browse('abs', {'data_dir': str(copy)}),
           browse('source', {'features': {'test': {'source': str(copy / 'testset' /
                                                                'keywords')}}}),
           browse('env', {'config': {'data_dir': '/nowhere/div400'}},
                  env={'DIV400_ROOT': str(copy)})]
  for proc in found:
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f'{topics} topics' in proc.stdout
  rel = os.path.relpath(copy, elsewhere)  # a relative path, as reproduce records it
  assert browse('relative', {'config': {'data_dir': rel}}).returncode == 0
  none = browse('none', {})
  assert none.returncode == 2
  [line] = none.stderr.strip().splitlines()
  assert line == (f'browse.py: error: {tmp_path / "none" / "results.json"}: computed on div400 '
                  'test, but it does not record where that data is; pass --data_dir <the '
                  'div400 root in the official layout, with devset/ and testset/> or set '
                  'DIV400_ROOT')
  gone = browse('gone', {'config': {'data_dir': '../no-such-data'}})
  assert gone.returncode == 2
  assert 'the folders it records are not here' in gone.stderr and '--data_dir' in gone.stderr
  assert not os.path.exists(tmp_path / 'site-none')  # nothing written before the data


def test_synthetic_results_of_a_folder_that_is_gone_are_refused(results_dir, tmp_path):
  """Not shown over the synthetic default (other photos): refused in one line, with nothing
  generated."""
  payload = json.load(open(os.path.join(results_dir, 'results.json')))
  payload.pop('data_dir', None)
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()

  def browse(name, extra):
    results = tmp_path / name
    results.mkdir()
    (results / 'results.json').write_text(json.dumps(dict(payload, dataset='synthetic',
                                                          **extra)))
    return results, _run_browse(results, tmp_path / f'site-{name}', elsewhere)

  results, gone = browse('gone', {'data_dir': str(tmp_path / 'my-synthetic')})
  assert gone.returncode == 2, gone.stderr[-2000:]
  [line] = gone.stderr.strip().splitlines()
  assert line.startswith(f'browse.py: error: {results / "results.json"}: computed on the '
                         'synthetic dataset test, but the folders it records are not here')
  assert '--data_dir' in line and 'make_synthetic.py' in line
  assert os.listdir(elsewhere) == []  # no default dataset generated in the working folder
  assert not os.path.exists(tmp_path / 'site-gone')


def _browser():
  for name in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'):
    path = shutil.which(name)
    if path:
      return path
  return None


@pytest.mark.slow
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
  with headless_chromium.private_env() as env:  # nothing left in the user's home
    subprocess.run(common + ['--window-size=1200,1400', f'--screenshot={shot}', page],
                   capture_output=True, timeout=120, check=True, env=env)
    dom = subprocess.run(common + ['--dump-dom', page], capture_output=True, text=True,
                         timeout=120, check=True, env=env).stdout
  image = np.asarray(Image.open(shot).convert('RGB'), np.float64)
  assert image.shape[:2] == (1400, 1200)
  assert image.std() > 20 and len(np.unique(image.reshape(-1, 3), axis=0)) > 20  # not blank
  assert dom.count('class="tile') == 20 * len(runs)  # the grid as the browser built it
