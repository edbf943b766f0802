"""A static results browser: an index of topics with each method's per-topic P/CR/F1@20
(sortable), and a page per topic with each method's ranked list as an image grid.

A tile shows the photo: the local `img/<title>/<id>.jpg` of the dataset when present (linked
by a relative path), else its Flickr URL from the metadata, drawn over a tile with the photo's
title (what stays visible offline or when the image cannot load). Each tile is bordered by
its ground-truth cluster's colour; irrelevant photos are marked. Pages are self-contained:
inline CSS and one inline script (the table sort), no external scripts or fonts.

The index fits a normal window: each method heads three columns (P, CR, F1@20), titles wrap,
and a table wider than the window scrolls inside its own box. A mean row gives each method's
mean over the topics, and each topic's best method by F1@20 is bold and starred.

Cluster colours come from `cluster_colours`, which the UMAP figures
(`colt_jax/reproduction/figures.py`) use too: the same cluster of a topic has the same colour in both.

Results come from a folder that `experiments/reproduce.py` (results.json `rows` +
`run_files`) or `experiments/evaluate.py` (results.json `results` with `run_file`) wrote.
"""
from __future__ import annotations

import dataclasses
import html
import json
import os
from typing import Mapping, Optional, Sequence

from colt_jax.data.types import Split
from colt_jax.evaluation import runfile
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

# Rows shown by default, in this order, when a results folder has them (reproduce's names).
DEFAULT_ROWS = ('flickr (pool)', 'topk (pool)', 'mmr (pool)', 'umons (pool)',
                'umons-dbscan (pool)', 'colt (seed 0, pool)', 'colt-paper (seed 0, pool)')
# Ground-truth cluster colours, shared with colt_jax/reproduction/figures.py (see
# `cluster_colours`); no greys: grey means irrelevant or not judged.
PALETTE = ('#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
           '#bcbd22', '#17becf', '#aec7e8', '#ffbb78', '#98df8a', '#ff9896', '#c5b0d5',
           '#c49c94', '#f7b6d2', '#dbdb8d', '#9edae5', '#393b79', '#637939')
COLUMNS = ('P@20', 'CR@20', 'F1@20')
BEST_BY = 'F1@20'  # the metric that names a topic's best method in the index
BEST_MARK = '&#9733;'  # a star after the best method's F1@20
_CSS = """
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:3px 7px;font-size:13px}
th{background:#eee}th[data-col]{cursor:pointer}td.n{text-align:right;white-space:nowrap}
.scroll{max-width:100%;overflow-x:auto}
#index th.m{white-space:normal;max-width:16em}#index td.title{min-width:8em;max-width:18em}
#index td.who{max-width:11em}#index td.best{font-weight:bold;background:#fff3c4}
#index tr.mean td{font-weight:bold;border-bottom:2px solid #888;background:#f6f6f6}
#index tr.mean td.best{background:#ffe58a}
.grid{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 18px}
.tile{position:relative;width:120px;height:96px;border:5px solid #999;overflow:hidden;
background:#f4f4f4;font-size:11px;box-sizing:border-box}
.tile .t{position:absolute;inset:0;padding:15px 3px 3px;overflow:hidden;word-break:break-word}
.tile img{position:absolute;inset:0;width:100%;height:100%;object-fit:cover}
.tile .r{position:absolute;left:0;top:0;background:#000a;color:#fff;padding:0 3px}
.tile.irrelevant{border-style:dashed;border-color:#777;opacity:.75}
.tile.irrelevant .x{position:absolute;right:2px;bottom:0;color:#c00;font-size:22px;
font-weight:bold}
.tile.unjudged{border-color:#ddd}
.key span{display:inline-block;margin:2px 10px 2px 0}.key i{display:inline-block;width:12px;
height:12px;margin-right:4px;vertical-align:middle}
"""
_SORT_JS = """
document.querySelectorAll('th[data-col]').forEach(function(th){th.addEventListener('click',
function(){var col=parseInt(th.dataset.col,10);var tb=th.closest('table').tBodies[0];
var rows=Array.from(tb.rows);var asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
rows.sort(function(a,b){var x=a.cells[col].dataset.v||a.cells[col].textContent,
y=b.cells[col].dataset.v||b.cells[col].textContent;var nx=parseFloat(x),ny=parseFloat(y);
var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
rows.forEach(function(r){tb.appendChild(r);});});});
"""


def cluster_colours(cluster_ids) -> dict:
  """Colour (hex) of each ground-truth cluster of one topic: the i-th smallest cluster id
  gets PALETTE[i] (cycling after len(PALETTE)). The browser's tile borders and the UMAP
  figures (colt_jax/reproduction/figures.py) both colour clusters with this, so they agree."""
  return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(sorted(set(cluster_ids)))}


@dataclasses.dataclass(frozen=True)
class MethodRun:
  """One row of a results folder: its per-topic metrics and ranked lists."""
  name: str
  per_topic: Mapping[int, Mapping[str, float]]
  run: Mapping[int, Sequence[str]]


def _find_run_file(path: str, results_dir: str) -> str:
  for candidate in (path, os.path.join(results_dir, path),
                    os.path.join(results_dir, *path.split('/')[-3:]),
                    os.path.join(results_dir, os.path.basename(path))):
    if candidate and os.path.isfile(candidate):
      return candidate
  raise InputError(f'{results_dir}/results.json: run file {path} not found')


def load_results(results_dir: str, rows: Sequence[str] = ()) -> tuple:
  """(dataset, split, [MethodRun]) of a results folder; `rows` picks rows by name (default:
  DEFAULT_ROWS that exist, or every method of an evaluate.py folder)."""
  path = os.path.join(results_dir, 'results.json')
  if os.path.exists(results_dir) and not os.path.isdir(results_dir):
    raise InputError(f'{results_dir} (--results): a file; --results names the folder that '
                     'holds results.json')
  try:
    with open(path, encoding='utf-8') as f:
      payload = json.load(f)
  except FileNotFoundError:
    raise InputError(f'{path}: no results.json (--results names a folder written by '
                     'experiments/reproduce.py or experiments/evaluate.py)') from None
  except json.JSONDecodeError as e:
    raise InputError(f'{path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: cannot be read ({e})') from None
  if not isinstance(payload, dict):
    raise InputError(f'{path}: not a JSON object')
  key = 'rows' if 'rows' in payload else 'results'  # reproduce.py, evaluate.py
  entries = payload.get(key)
  if key not in payload:
    raise InputError(f'{path}: neither reproduce.py\'s "rows" nor evaluate.py\'s "results"')
  run_files = payload.get('run_files', {})
  if not isinstance(entries, dict) or not isinstance(run_files, dict) or not all(
      isinstance(r, dict) and isinstance(r.get('per_topic', {}), dict)
      for r in entries.values()):
    raise InputError(f'{path}: "{key}" must map each row to an object with its "per_topic" '
                     'scores (an object)')
  if key == 'rows':
    table = {n: (r.get('per_topic', {}), run_files.get(n)) for n, r in entries.items()}
    split = 'test'
    default = [n for n in DEFAULT_ROWS if n in table]
  else:
    table = {n: (r.get('per_topic', {}), r.get('run_file')) for n, r in entries.items()}
    split = payload.get('split', 'test')
    default = list(table)
  if not all(isinstance(f, (str, type(None))) for _, f in table.values()):
    raise InputError(f'{path}: a row\'s run file must be a path')
  names = list(rows) or default
  unknown = [n for n in names if n not in table or not table[n][1]]
  if unknown:
    raise InputError(f'--rows: {unknown[0]!r} has no run file in {path}; rows with one: '
                     f'{sorted(n for n, v in table.items() if v[1])[:12]}')
  out = []
  for n in names:
    per_topic, run_path = table[n]
    run = runfile.read_run(_find_run_file(run_path, results_dir))
    out.append(MethodRun(name=n, per_topic={int(t): m for t, m in per_topic.items()},
                         run={int(t): [p for p, _ in r] for t, r in run.items()}))
  return payload.get('dataset', ''), split, out


def _page(title: str, body: str, script: str = '') -> str:
  return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
          f'<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n'
          f'{body}\n' + (f'<script>{script}</script>' if script else '') + '</body></html>\n')


def _topic_file(topic: int) -> str:
  return f'topic-{topic}.html'


def best_methods(scores: Sequence[Optional[float]]) -> set:
  """Indices of the highest of `scores` (None: no score); every tied one counts."""
  known = [v for v in scores if v is not None]
  if not known:
    return set()
  top = max(known)
  return {i for i, v in enumerate(scores) if v is not None and v >= top - 1e-9}


def method_means(split: Split, runs: Sequence[MethodRun]) -> list:
  """Per run: ({column: mean over the split's topics that have it}, number of such topics)."""
  out = []
  for r in runs:
    have = [r.per_topic[t.number] for t in split.topics if t.number in r.per_topic]
    means = {c: sum(m[c] for m in have) / len(have) for c in COLUMNS
             if have and all(c in m for m in have)}
    out.append((means, len(have)))
  return out


def _score_cells(values: Sequence[Mapping[str, float]], best: set) -> list:
  cells = []
  for i, m in enumerate(values):
    for c in COLUMNS:
      if c not in m:
        cells.append('<td>-</td>')
      elif i in best:
        mark = f' {BEST_MARK}' if c == BEST_BY else ''
        cells.append(f'<td class="n best" data-v="{m[c]:.6f}">{m[c]:.3f}{mark}</td>')
      else:
        cells.append(f'<td class="n">{m[c]:.3f}</td>')
  return cells


def index_page(split: Split, runs: Sequence[MethodRun]) -> str:
  """The topics with each method's P/CR/F1@20: a mean row first, each topic's best method
  (by F1@20; ties all) bold with a star; sortable by any column of the last header row."""
  fixed = ('topic', 'title', 'clusters', f'best ({BEST_BY})')
  head = ('<tr>' + ''.join(f'<th rowspan="2" data-col="{i}">{n}</th>'
                           for i, n in enumerate(fixed)) +
          ''.join(f'<th class="m" colspan="{len(COLUMNS)}">{html.escape(r.name)}</th>'
                  for r in runs) + '</tr><tr>' +
          ''.join(f'<th data-col="{len(fixed) + i * len(COLUMNS) + j}">{c}</th>'
                  for i in range(len(runs)) for j, c in enumerate(COLUMNS)) + '</tr>')

  def best_names(best):
    return html.escape(', '.join(runs[i].name for i in sorted(best))) or '-'

  means = method_means(split, runs)
  mean_best = best_methods([m.get(BEST_BY) for m, _ in means])
  counts = sorted({n for _, n in means})
  over = (f'{len(split.topics)} topics' if counts == [len(split.topics)] else
          '; '.join(f'{r.name}: {n} of {len(split.topics)} topics'
                    for r, (_, n) in zip(runs, means)))
  clusters = [split.ground_truth[t.number].num_clusters for t in split.topics]
  mean_clusters = f'{sum(clusters) / len(clusters):.1f}' if clusters else '-'
  mean_row = ('<tr class="mean"><td>mean</td>'
              f'<td class="title">over {html.escape(over)}</td>'
              f'<td class="n">{mean_clusters}</td><td class="who">{best_names(mean_best)}</td>' +
              ''.join(_score_cells([m for m, _ in means], mean_best)) + '</tr>')
  body_rows = []
  for t in split.topics:
    gt = split.ground_truth[t.number]
    values = [r.per_topic.get(t.number, {}) for r in runs]
    best = best_methods([m.get(BEST_BY) for m in values])
    cells = [f'<td class="n" data-v="{t.number}"><a href="{_topic_file(t.number)}">'
             f'{t.number}</a></td>', f'<td class="title">{html.escape(t.title)}</td>',
             f'<td class="n">{gt.num_clusters}</td>', f'<td class="who">{best_names(best)}</td>']
    cells += _score_cells(values, best)
    body_rows.append(f'<tr data-topic="{t.number}">' + ''.join(cells) + '</tr>')
  body = (f'<h1>{html.escape(split.dataset)} {html.escape(split.split)}: '
          f'{len(split.topics)} topics</h1><p>Click a column to sort; a topic opens its '
          f'ranked lists. The first row is each method\'s mean over the topics; each row\'s '
          f'best method by {BEST_BY} is in bold with a {BEST_MARK}.</p>'
          f'<div class="scroll"><table id="index"><thead>{head}{mean_row}</thead>'
          f'<tbody>{"".join(body_rows)}</tbody></table></div>')
  return _page(f'{split.dataset} {split.split} results', body, _SORT_JS)


def _image_src(split: Split, title: str, photo, page_dir: str) -> Optional[str]:
  local = os.path.join(split.root_of(photo.topic), 'img', title, f'{photo.photo_id}.jpg')
  if os.path.isfile(local):
    return os.path.relpath(local, page_dir).replace(os.sep, '/')
  return photo.url


def topic_page(split: Split, topic: int, runs: Sequence[MethodRun], page_dir: str,
               depth: int = 20) -> str:
  t = next(x for x in split.topics if x.number == topic)
  gt = split.ground_truth[topic]
  photos = {p.photo_id: p for p in split.photos[topic]}
  colours = cluster_colours(gt.cluster_names)
  key = ''.join(f'<span><i style="background:{colours[c]}"></i>{c}: '
                f'{html.escape(gt.cluster_names[c])}</span>' for c in sorted(gt.cluster_names))
  parts = [f'<p><a href="index.html">all topics</a></p><h1>{topic}: {html.escape(t.title)}</h1>',
           f'<p>{len(photos)} photos, {gt.num_clusters} ground-truth clusters; border: the '
           'photo\'s cluster; dashed with a red cross: irrelevant; pale: not judged.</p>',
           f'<div class="key">{key}</div>']
  for r in runs:
    m = r.per_topic.get(topic, {})
    scores = ', '.join(f'{c} {m[c]:.3f}' for c in COLUMNS if c in m)
    tiles = []
    for rank, pid in enumerate(r.run.get(topic, [])[:depth], 1):
      photo = photos.get(pid)
      name = html.escape(photo.title if photo and photo.title else pid)
      rel = gt.relevance.get(pid)
      cls, style, mark = 'tile', '', ''
      if rel == 1 and pid in gt.clusters:
        style = f' style="border-color:{colours[gt.clusters[pid]]}"'
      elif rel == 0:
        cls, mark = 'tile irrelevant', '<span class="x">&#x2717;</span>'
      else:
        cls = 'tile unjudged'
      src = _image_src(split, t.title, photo, page_dir) if photo else None
      img = (f'<img src="{html.escape(src)}" alt="" loading="lazy" '
             'onerror="this.remove()">' if src else '')
      cluster = gt.clusters.get(pid)
      tip = f'{pid}' + (f' (cluster {cluster})' if cluster else '')
      tiles.append(f'<div class="{cls}"{style} title="{html.escape(tip)}">'
                   f'<div class="t">{name}</div>{img}<span class="r">{rank}</span>{mark}</div>')
    parts.append(f'<h2>{html.escape(r.name)}</h2><p>{scores}</p>'
                 f'<div class="grid" data-method="{html.escape(r.name)}">{"".join(tiles)}</div>')
  return _page(f'{topic}: {t.title}', '\n'.join(parts))


def write_site(split: Split, runs: Sequence[MethodRun], out: str, depth: int = 20, *,
               flag: str = '') -> list:
  """Writes index.html and one page per topic into `out` as one set (`outputs.ResultSet`):
  a run that fails half-way (a full disk) leaves the previous site, or none, not a folder of
  some pages. Returns the pages' paths, the index first."""
  out = os.path.abspath(out)
  names = ['index.html'] + [_topic_file(t.number) for t in split.topics]
  with outputs.ResultSet(out, 'the results browser', flag=flag) as site:
    atomic.write_text(site.path(names[0]), index_page(split, runs))
    for t, name in zip(split.topics, names[1:]):
      atomic.write_text(site.path(name), topic_page(split, t.number, runs, out, depth))
  return [os.path.join(out, name) for name in names]
