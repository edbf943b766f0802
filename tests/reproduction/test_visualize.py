"""Tests of the per-topic figures (colt_jax/reproduction/figures.py, experiments/visualize.py)."""
import os
import sys

import numpy as np
import pytest
from PIL import Image

from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import metrics
from colt_jax.inference import retriever
from colt_jax.reproduction import figures
from colt_jax.reproduction import results_site
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order



@pytest.mark.slow
def test_pictures_show_each_methods_top20_and_phis_labels(tiny_synthetic, tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  params = evaluation.MethodParams()
  topic = split.topic_numbers[0]
  (pic,) = figures.topic_pictures(split, store, colt, params, [topic])
  n = len(split.ground_truth[topic].relevance)
  assert len(pic.photo_ids) == n and pic.f_layout.shape == pic.hat_layout.shape == (1 + n, 2)
  assert np.isfinite(pic.hat_layout).all()
  assert set(pic.lists) == set(figures.METHODS)
  assert all(len(ids) == 20 for ids in pic.lists.values())
  query = store.query_feature(topic)
  feats = np.asarray(store.photos)[store.rows_for(pic.photo_ids)]
  # Exact: the same rank over the same candidates, in this process.
  assert pic.lists['colt'] == colt.rank(query, feats, pic.photo_ids).photo_ids[:20]
  gt = split.ground_truth[topic]
  for method, ids in pic.lists.items():
    assert pic.scores[method]['F1@20'] == metrics.topic_metrics(ids, gt, (20,))['F1@20']
  # phi sees its N = 64 most similar photos; the others have no label.
  assert sum(1 for p in pic.predicted if p) == min(64, n)
  assert set(pic.predicted) - {''} <= set(colt.category_names) | {'irrelevant'}
  assert [int(c) for c in pic.clusters] == [gt.clusters.get(p, 0) for p in pic.photo_ids]
  path = figures.draw(pic, str(tmp_path / 'fig' / 'topic.png'))
  image = np.asarray(Image.open(path).convert('L'), np.float64)
  assert image.shape[0] > 500 and image.std() > 10  # drawn, not blank
  assert os.listdir(tmp_path / 'fig') == ['topic.png']  # nothing half-written left


def _legends(fig):
  return {ax.get_legend().get_title().get_text(): ax.get_legend()
          for ax in fig.axes if ax.get_legend() is not None}


def _hex(colour):
  from matplotlib import colors  # pylint: disable=g-import-not-at-top
  return colors.to_hex(colour)


@pytest.mark.slow
def test_clusters_have_the_browsers_colours_and_phi_its_own_legend(tiny_synthetic,
                                                                   tiny_colt):
  scl, ttc = tiny_colt
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  (pic,) = figures.topic_pictures(split, store, colt, evaluation.MethodParams(),
                                  [split.topic_numbers[1]])
  fig = figures.figure(pic)
  try:
    # Every dot of a ground-truth panel has its cluster's colour in the results browser.
    browser = results_site.cluster_colours(split.ground_truth[pic.topic].cluster_names)
    want = [browser[int(c)] if c else figures.IRRELEVANT_COLOUR for c in pic.clusters]
    gt_axes = [ax for ax in fig.axes if 'ground-truth' in ax.get_title() or
               'outlined' in ax.get_title()]
    assert len(gt_axes) == 2 + len(figures.METHODS)
    for ax in gt_axes:
      assert [_hex(c) for c in ax.collections[0].get_facecolors()] == want, ax.get_title()
    legends = _legends(fig)
    (phi_title,) = [t for t in legends if t.startswith('phi')]
    (gt_title,) = [t for t in legends if 'ground-truth clusters' == t]
    phi, gt = legends[phi_title], legends[gt_title]
    categories = figures.category_colours(pic)
    assert categories  # phi labelled some photos
    phi_labels = [t.get_text() for t in phi.get_texts()]
    # its most frequent categories (at most PHI_LEGEND_ROWS, so it fits the top row)
    shown = sorted(categories, key=lambda n: -pic.predicted.count(n))[:figures.PHI_LEGEND_ROWS]
    for name, label, handle in zip(shown, phi_labels, phi.legend_handles):
      assert label == f'{name} ({pic.predicted.count(name)})'
      assert _hex(handle.get_color()) == categories[name]
    assert 'irrelevant' in phi_labels[len(shown)]
    if len(categories) > len(shown):
      assert phi_labels[-1] == f'... and {len(categories) - len(shown)} more'
    # Not the ground-truth legend's entries or colours: phi's groups are not clusters.
    gt_colours = figures.cluster_colours(pic)
    gt_labels = [t.get_text() for t in gt.get_texts()]
    assert gt_labels[:len(gt_colours)] == [f'{c}: {n}' for c, n in
                                           sorted(pic.cluster_names.items())]
    assert [_hex(h.get_color()) for h in gt.legend_handles[:len(gt_colours)]] == [
        browser[c] for c in sorted(browser)]
    assert not set(categories.values()) & set(gt_colours.values())
    # The phi panel's dots are its categories' colours, grey for the rest.
    (phi_ax,) = [ax for ax in fig.axes if ax.get_title().startswith('phi')]
    dots = phi_ax.collections[0].get_facecolors()
    want = [categories.get(p, figures.IRRELEVANT_COLOUR) for p in pic.predicted]
    assert [_hex(c) for c in dots] == want
  finally:
    from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
    plt.close(fig)


@pytest.mark.slow
def test_visualize_cli_writes_one_png_per_topic(tiny_synthetic, tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  split, _ = data.load('synthetic', 'test', tiny_synthetic)
  topics = split.topic_numbers[:2]
  out = tmp_path / 'figs'
  args = [sys.executable, os.path.join(REPO, 'experiments', 'visualize.py'),
          f'--data_dir={tiny_synthetic}', f'--scl_checkpoint={scl.workdir}',
          f'--ttc_checkpoint={ttc.workdir}', f'--out={out}',
          f'--topics={",".join(map(str, topics))}']
  env = dict(os.environ, PYTHONPATH=REPO)
  done = preloaded.run(args, capture_output=True, text=True, timeout=600, env=env)
  assert done.returncode == 0, done.stderr[-2000:]
  assert sorted(f for f in os.listdir(out) if f.endswith('.png')) == sorted([
      f'synthetic-test-topic{t}.png' for t in topics])
  bad = preloaded.run(args[:-1] + ['--topics=99999'], capture_output=True, text=True,
                      timeout=600, env=env)
  assert bad.returncode == 2 and 'topic 99999' in bad.stderr.strip().splitlines()[-1]
