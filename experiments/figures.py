"""Per-topic pictures of what each method retrieves (the paper's Figs. 4-5).

For one topic of a split (pool protocol: the topic's own photos): a UMAP layout of f's
features and one of g's re-encoded features h^, coloured by ground-truth cluster (irrelevant
and unjudged photos grey, the query a black star); phi's predicted categories on the h^
layout; and the top-20 of top-k, MMR, UMONS and CoLT outlined on the h^ layout, each with its
P/CR/F1@20 for the topic. Everything comes from the library's one path: the methods from
`colt_jax.evaluation.rank`, CoLT's list and labels from the `Retriever` users call.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Mapping, Optional, Sequence

import numpy as np

from colt_jax import atomic
from colt_jax import evaluation
from colt_jax import features as features_lib
from colt_jax import metrics
from colt_jax import retriever as retriever_lib
from colt_jax.datasets.types import Split
from colt_jax.errors import InputError
from colt_jax.inputs import candidates as candidates_lib

METHODS = ('topk', 'mmr', 'umons', 'colt')
METHOD_TITLES = {'topk': 'top-k (f)', 'mmr': 'MMR', 'umons': 'UMONS', 'colt': 'CoLT'}
IRRELEVANT_COLOUR = '#b8b8b8'


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


def _palette(n: int) -> list:
  """n colours of tab20 without its two greys (grey means irrelevant here)."""
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  cmap = colormaps['tab20']
  colours = [cmap(i) for i in range(20) if i not in (14, 15)]
  return [colours[i % len(colours)] for i in range(n)]


def _scatter(ax, layout, colours, title, outline: Optional[np.ndarray] = None):
  photos = layout[1:]
  ax.scatter(photos[:, 0], photos[:, 1], c=colours, s=14, linewidths=0)
  if outline is not None and outline.any():
    ax.scatter(photos[outline, 0], photos[outline, 1], s=60, facecolors='none',
               edgecolors='black', linewidths=1.2)
  ax.scatter(layout[0, 0], layout[0, 1], marker='*', s=220, c='black', edgecolors='white',
             linewidths=0.8, zorder=5)
  ax.set_title(title, fontsize=9)
  ax.set_xticks([])
  ax.set_yticks([])


def draw(picture: TopicPicture, path: str, k: int = 20) -> str:
  """Writes the topic's figure as a PNG at `path` (atomically); returns `path`."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  ids = sorted(picture.cluster_names)
  palette = dict(zip(ids, _palette(len(ids))))
  gt_colours = [palette.get(int(c), IRRELEVANT_COLOUR) if c else IRRELEVANT_COLOUR
                for c in picture.clusters]
  names = sorted({p for p in picture.predicted if p and p not in ('irrelevant', 'query')})
  pred_palette = dict(zip(names, _palette(len(names))))
  pred_colours = [pred_palette.get(p, IRRELEVANT_COLOUR) for p in picture.predicted]
  fig, axes = plt.subplots(2, 4, figsize=(16, 8.4))
  _scatter(axes[0, 0], picture.f_layout, gt_colours, 'f features, ground-truth clusters')
  _scatter(axes[0, 1], picture.hat_layout, gt_colours, 'g: h^ features, ground-truth clusters')
  _scatter(axes[0, 2], picture.hat_layout, pred_colours,
           f'phi\'s predicted categories ({len(names)}; grey: irrelevant or not seen)')
  legend = axes[0, 3]
  legend.axis('off')
  handles = [Line2D([], [], marker='o', ls='', color=palette[i],
                    label=f'{i}: {picture.cluster_names[i][:38]}') for i in ids[:24]]
  handles.append(Line2D([], [], marker='o', ls='', color=IRRELEVANT_COLOUR,
                        label='irrelevant / unjudged'))
  handles.append(Line2D([], [], marker='*', ls='', color='black', markersize=12, label='query'))
  legend.legend(handles=handles, loc='upper left', fontsize=7, frameon=False,
                title='ground-truth clusters', title_fontsize=8)
  index = {p: i for i, p in enumerate(picture.photo_ids)}
  for ax, method in zip(axes[1], METHODS):
    chosen = np.zeros(len(picture.photo_ids), bool)
    chosen[[index[p] for p in picture.lists[method] if p in index]] = True
    s = picture.scores[method]
    _scatter(ax, picture.hat_layout, gt_colours,
             f'{METHOD_TITLES[method]}: top-{k} outlined\n'
             f'P {s[f"P@{k}"]:.2f}  CR {s[f"CR@{k}"]:.2f}  F1 {s[f"F1@{k}"]:.2f}', chosen)
  fig.suptitle(f'Topic {picture.topic}: {picture.title} ({len(picture.photo_ids)} photos, '
               f'{len(ids)} ground-truth clusters)', fontsize=12)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, dpi=90, format='png')
  plt.close(fig)
  atomic.write_bytes(path, buffer.getvalue())
  return path
