"""Per-topic pictures of what each method retrieves (the paper's Figs. 4-5).

For one topic of a split (pool protocol: the topic's own photos): a UMAP layout of f's
features and one of g's re-encoded features h^, coloured by ground-truth cluster (irrelevant
and unjudged photos grey, the query a black star); phi's predicted categories on the h^
layout; and the top-20 of top-k, MMR, UMONS and CoLT outlined on the h^ layout, each with its
P/CR/F1@20 for the topic. Everything comes from the library's one path: the methods from
`colt_jax.evaluation.methods.rank`, CoLT's list and labels from the `Retriever` users call.

Ground-truth clusters are coloured by `results_site.cluster_colours`, as in the results
browser, so a cluster has the same colour in both. phi's predicted categories are not
ground-truth clusters: its panel draws them as squares in a palette of their own
(`PHI_PALETTE`), named in a legend of their own beside it.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Mapping, Optional, Sequence

import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.data.types import Split
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import metrics
from colt_jax.inference import retriever as retriever_lib
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.reproduction import results_site
from colt_jax.util import atomic
from colt_jax.util.errors import InputError

METHODS = ('topk', 'mmr', 'umons', 'colt')
METHOD_TITLES = {'topk': 'top-k (f)', 'mmr': 'MMR', 'umons': 'UMONS', 'colt': 'CoLT'}
IRRELEVANT_COLOUR = '#b8b8b8'
# phi's categories: matplotlib's tab20b less the two colours the cluster palette uses,
# reordered so that neighbours differ in hue. Drawn as squares (clusters are dots), so a
# category is never read as a ground-truth cluster.
PHI_PALETTE = ('#8c6d31', '#843c39', '#7b4173', '#6b6ecf', '#b5cf6b',
               '#e7ba52', '#d6616b', '#ce6dbd', '#5254a3', '#8ca252', '#bd9e39', '#ad494a',
               '#a55194', '#9c9ede', '#cedb9c', '#e7cb94', '#e7969c', '#de9ed6')
LEGEND_ROWS = 40  # entries a legend lists before "... and n more"
PHI_LEGEND_ROWS = 16  # phi's legend (top row only): its most frequent categories


@dataclasses.dataclass(frozen=True)
class TopicPicture:
  """What one topic's figure shows."""
  topic: int
  title: str
  photo_ids: tuple
  f_layout: np.ndarray  # [1 + n, 2]: the query, then the photos (f's features)
  hat_layout: np.ndarray  # [1 + n, 2]: the same under g (h^)
  clusters: np.ndarray  # [n] ground-truth cluster id, 0 = irrelevant or unjudged
  cluster_names: Mapping[int, str]
  lists: Mapping[str, tuple]  # method -> its top-k photo ids
  scores: Mapping[str, Mapping[str, float]]  # method -> P@k, CR@k, F1@k for this topic
  predicted: tuple  # phi's label name per photo ('' = not among phi's N candidates)


def layout_2d(points: np.ndarray, seed: int = 0) -> np.ndarray:
  """UMAP (cosine metric) of the rows of `points` into 2-D; a tiny set is padded by PCA."""
  import umap  # pylint: disable=g-import-not-at-top
  n = points.shape[0]
  if n < 4:
    centred = points - points.mean(0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    out = np.zeros((n, 2))
    out[:, :min(2, u.shape[1])] = (u * s)[:, :2]
    return out
  reducer = umap.UMAP(n_components=2, n_neighbors=min(15, n - 1), metric='cosine',
                      random_state=seed, init='random', n_jobs=1)
  return reducer.fit_transform(points.astype(np.float32))


def topic_pictures(split: Split, store: features_lib.FeatureStore,
                   colt: retriever_lib.Retriever, params: evaluation.MethodParams,
                   topics: Sequence[int], k: int = 20, seed: int = 0) -> list:
  """`TopicPicture`s of `topics`: every method over each topic's pool, UMAP layouts of f and
  h^. `params` holds MMR's and UMONS's settings (tuned on dev by the caller)."""
  cands = {c.topic: c for c in candidates_lib.build_candidates(split, store, 'pool')}
  out = []
  for t in topics:
    if t not in cands:
      raise InputError(f'--topics: topic {t} is not in {split.dataset}/{split.split}')
    c = cands[t]
    gt = split.ground_truth[t]
    lists = {}
    for method in METHODS:
      if method == 'colt':
        result = colt.rank(c.query, c.features, c.photo_ids)
        lists[method] = result.photo_ids[:k]
      else:
        run = evaluation.rank_baseline(method, [c], params)
        lists[method] = tuple(p for p, _ in run[t][:k])
    per_method = {m: metrics.topic_metrics(ids, gt, (k,)) for m, ids in lists.items()}
    scores = {m: {f'{x}@{k}': v[f'{x}@{k}'] for x in ('P', 'CR', 'F1')}
              for m, v in per_method.items()}
    labels = colt.candidate_labels(c.query, c.features, c.photo_ids)
    f_points = np.concatenate([c.query[None], c.features])
    hat_points = np.concatenate([c.query[None], colt.reencode(c.features)])
    title = next(x.title for x in split.topics if x.number == t)
    out.append(TopicPicture(
        topic=t, title=title, photo_ids=c.photo_ids,
        f_layout=layout_2d(f_points, seed), hat_layout=layout_2d(hat_points, seed),
        clusters=np.array([gt.clusters.get(p, 0) for p in c.photo_ids]),
        cluster_names=dict(gt.cluster_names), lists=lists, scores=scores,
        predicted=tuple(labels.get(p, '') for p in c.photo_ids)))
  return out


def cluster_colours(picture: TopicPicture) -> dict:
  """Cluster id -> colour of the topic's ground-truth clusters (the browser's colours)."""
  return results_site.cluster_colours(picture.cluster_names)


def point_colours(picture: TopicPicture) -> list:
  """Colour of each photo in the ground-truth panels: its cluster's, else grey."""
  palette = cluster_colours(picture)
  return [palette.get(int(c), IRRELEVANT_COLOUR) if c else IRRELEVANT_COLOUR
          for c in picture.clusters]


def category_colours(picture: TopicPicture) -> dict:
  """phi's predicted category name -> its colour (by sorted name, from PHI_PALETTE)."""
  names = sorted({p for p in picture.predicted if p and p not in ('irrelevant', 'query')})
  return {n: PHI_PALETTE[i % len(PHI_PALETTE)] for i, n in enumerate(names)}


def _scatter(ax, layout, colours, title, outline: Optional[np.ndarray] = None,
             marker: str = 'o'):
  photos = layout[1:]
  ax.scatter(photos[:, 0], photos[:, 1], c=colours, s=14, linewidths=0, marker=marker)
  if outline is not None and outline.any():
    ax.scatter(photos[outline, 0], photos[outline, 1], s=60, facecolors='none',
               edgecolors='black', linewidths=1.2)
  ax.scatter(layout[0, 0], layout[0, 1], marker='*', s=220, c='black', edgecolors='white',
             linewidths=0.8, zorder=5)
  ax.set_title(title, fontsize=9)
  ax.set_xticks([])
  ax.set_yticks([])


def _legend(ax, handles, title: str, more: int = 0):
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  if more:
    handles = handles + [Line2D([], [], ls='', label=f'... and {more} more')]
  ax.axis('off')
  ax.legend(handles=handles, loc='upper left', fontsize=7, frameon=False, title=title,
            title_fontsize=8)


def figure(picture: TopicPicture, k: int = 20):
  """The topic's matplotlib figure (caller closes it). Top row: f and h^ by ground-truth
  cluster, phi's categories and their legend; bottom row: each method's top-k on h^; the
  ground-truth legend spans both rows on the right."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  ids = sorted(picture.cluster_names)
  palette = cluster_colours(picture)
  gt_colours = point_colours(picture)
  categories = category_colours(picture)
  pred_colours = [categories.get(p, IRRELEVANT_COLOUR) for p in picture.predicted]
  fig, axes = plt.subplot_mosaic(
      [['f', 'hat', 'phi', 'phi_key', 'gt_key'], list(METHODS) + ['gt_key']],
      figsize=(20, 8.4), gridspec_kw={'width_ratios': [1, 1, 1, 1, 0.95]})
  _scatter(axes['f'], picture.f_layout, gt_colours, 'f features, ground-truth clusters')
  _scatter(axes['hat'], picture.hat_layout, gt_colours, 'g: h^ features, ground-truth clusters')
  _scatter(axes['phi'], picture.hat_layout, pred_colours,
           f'phi\'s predicted categories on h^ ({len(categories)})', marker='s')
  counts = {n: sum(1 for p in picture.predicted if p == n) for n in categories}
  shown = sorted(categories, key=lambda n: -counts[n])[:PHI_LEGEND_ROWS]
  handles = [Line2D([], [], marker='s', ls='', color=categories[n],
                    label=f'{n[:30]} ({counts[n]})') for n in shown]
  handles.append(Line2D([], [], marker='s', ls='', color=IRRELEVANT_COLOUR,
                        label='irrelevant / not among\nphi\'s candidates'))
  _legend(axes['phi_key'], handles, 'phi\'s categories (photos)\nnot ground-truth clusters',
          len(categories) - len(shown))
  shown = ids[:LEGEND_ROWS]
  handles = [Line2D([], [], marker='o', ls='', color=palette[i],
                    label=f'{i}: {picture.cluster_names[i][:34]}') for i in shown]
  handles.append(Line2D([], [], marker='o', ls='', color=IRRELEVANT_COLOUR,
                        label='irrelevant / unjudged'))
  handles.append(Line2D([], [], marker='*', ls='', color='black', markersize=12, label='query'))
  _legend(axes['gt_key'], handles, 'ground-truth clusters', len(ids) - len(shown))
  index = {p: i for i, p in enumerate(picture.photo_ids)}
  for method in METHODS:
    chosen = np.zeros(len(picture.photo_ids), bool)
    chosen[[index[p] for p in picture.lists[method] if p in index]] = True
    s = picture.scores[method]
    _scatter(axes[method], picture.hat_layout, gt_colours,
             f'{METHOD_TITLES[method]}: top-{k} outlined\n'
             f'P {s[f"P@{k}"]:.2f}  CR {s[f"CR@{k}"]:.2f}  F1 {s[f"F1@{k}"]:.2f}', chosen)
  fig.suptitle(f'Topic {picture.topic}: {picture.title} ({len(picture.photo_ids)} photos, '
               f'{len(ids)} ground-truth clusters)', fontsize=12)
  fig.tight_layout()
  return fig


def draw(picture: TopicPicture, path: str, k: int = 20) -> str:
  """Writes the topic's figure as a PNG at `path` (atomically); returns `path`."""
  fig = figure(picture, k)
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  buffer = io.BytesIO()
  fig.savefig(buffer, dpi=90, format='png')
  plt.close(fig)
  atomic.write_bytes(path, buffer.getvalue())
  return path
