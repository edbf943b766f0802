"""A synthetic Div400-like dataset: official layout plus a feature store, deterministic by seed.

Generative model (all vectors in R^dim, "unit" means L2-normalised):

* Vocabulary. `num_vocabulary` fine-grained category names ("night view of the tower", ...)
  shared by all topics, each with a unit direction u_c. Categories have a long-tailed
  popularity over topics (Zipf, exponent `vocabulary_zipf`), as "partial view" or "close up"
  recur across Div400 locations while most names are rare. The text feature of a category
  description is unit(u_c + text_noise * e): text and image sides do not coincide.
* Topic t. A unit topic direction z_t; `clusters ~ Poisson(mean_clusters)` distinct categories
  (clipped to [min_clusters, max_clusters]) drawn by popularity; `photos ~ U[min_photos,
  max_photos]`; an irrelevant fraction ~ U[irrelevant_low, irrelevant_high] (mean ~0.35).
  Cluster sizes are long-tailed: proportional to 1/rank^cluster_zipf (at least one photo).
* Noise e is isotropic with E|e|^2 = 1 (N(0, I/dim)), so weights are comparable across dims.
* Relevant photo of cluster c: topic_weight * z_t + category_weight * u_c + offset_weight * o_tc
  + photo_noise * e, o_tc a per-(topic, cluster) unit offset. Clusters overlap (the paper's
  weakness W2): the category part is not much larger than the noise.
* Irrelevant photo: irrelevant_topic_weight * z_t + irrelevant_category_weight * u_r +
  photo_noise * e, u_r a random vocabulary direction: it shares the topic look and a weak
  category look, but sits further from the query on average (hard negatives, as Flickr's
  keyword matches: people, food, other buildings).
* Every photo then gets a "style" part, nuisance_weight * (a random mix of `nuisance_dims`
  global unit directions: lighting, people, framing...), and is L2-normalised. Style carries
  most of the photo-to-photo variance but no category, so diversifying by raw feature distance
  (MMR) mostly diversifies style: our stand-in for why MMR gains little in the paper's Table 2.
* Query: unit(z_t + query_bias * sum_c s_c u_c), s_c the cluster's share of the topic's photos:
  the query sits closer to the common clusters (the paper's weakness W1), so plain top-k
  over-samples them and misses rare clusters.
* rGT value 1 for relevant photos and 0 for irrelevant ones, except a `dont_know` fraction marked
  -1 (left out of dGT, as in Div400). Flickr rank: photos sorted by relevance * flickr_signal +
  standard normal noise, i.e. weakly informative, like the real Flickr order.
* Metadata text (title, tags, a description with some HTML) mentions the topic and, for
  relevant photos, words of the cluster name, so that text-only encoders have signal too.

With the defaults, plain top-k over the test split (pool protocol) scores about P@20 .88,
CR@20 .55, F1@20 .66, near the paper's CLIP row on Div400 (.879 / .530 / .656).

The layout written under `out_dir` is the Div400 one (`devset/keywords/`, `testset/keywords/`:
topics XML, `xml/<title>.xml`, `gt/rGT`, `gt/dGT` with CRLF dclusterGT files) plus feature
stores under `features/dev` and `features/test` (encoder 'synthetic').
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Optional
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from colt_jax.data import features as features_lib
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError
from colt_jax.util.numerics import l2_normalise

MARKER_FILE = 'synthetic.json'  # the settings of a generated dataset

_VIEWS = ('frontal view', 'side view', 'partial view', 'night view', 'close up', 'aerial view',
          'panoramic view', 'inside view', 'detail', 'rear view', 'view from below',
          'winter view', 'reflection', 'top view', 'distant view', 'sunset view')
_PARTS = ('the tower', 'the entrance', 'the statue', 'the dome', 'the facade', 'the garden',
          'the roof', 'the windows', 'the courtyard', 'the gate', 'the bridge', 'the altar',
          'the stairs', 'the columns', 'the fountain', 'the ceiling', 'the walls', 'the clock')
_PLACE_A = ('Old', 'Royal', 'Grand', 'North', 'Saint', 'Upper', 'Lower', 'New', 'East', 'West',
            'Great', 'Little', 'High', 'Green', 'Silver', 'Golden')
_PLACE_B = ('Harbour', 'Abbey', 'Castle', 'Cathedral', 'Bridge', 'Tower', 'Palace', 'Fortress',
            'Temple', 'Monastery', 'Lighthouse', 'Basilica', 'Gate', 'Square', 'Mill',
            'Observatory')
_PLACE_C = ('Avalon', 'Brixham', 'Corvina', 'Dunmore', 'Elster', 'Farrow', 'Glenholm', 'Hartley',
            'Ivrea', 'Jorvik', 'Kestrel', 'Lindell', 'Marlow', 'Norwick', 'Orsay', 'Pella')
_FILLER = ('holiday', 'trip', 'travel', 'summer', 'friends', 'family', 'canon', 'nikon', 'europe',
           'street', 'city', 'people', 'car', 'dinner', 'party', 'dog', 'beach', 'museum')


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Parameters of the generative model (see the module docstring)."""
  dim: int = 64
  num_vocabulary: int = 160
  vocabulary_zipf: float = 0.8
  dev_topics: int = 150
  test_topics: int = 50
  min_photos: int = 100
  max_photos: int = 300
  mean_clusters: float = 12.0
  min_clusters: int = 4
  max_clusters: int = 25
  cluster_zipf: float = 1.1
  irrelevant_low: float = 0.2
  irrelevant_high: float = 0.5
  dont_know: float = 0.02
  topic_weight: float = 1.0
  category_weight: float = 0.5
  offset_weight: float = 0.25
  photo_noise: float = 0.6
  irrelevant_topic_weight: float = 0.6
  irrelevant_category_weight: float = 0.2
  query_bias: float = 0.5
  text_noise: float = 0.8
  nuisance_dims: int = 6
  nuisance_weight: float = 1.0
  flickr_signal: float = 0.3

  def __post_init__(self):
    """Counts positive, ranges ordered, fractions in [0, 1]: a bad value names its flag."""
    checks = [
        ('dim', self.dim >= 2, '>= 2'), ('num_vocabulary', self.num_vocabulary >= 1, '>= 1'),
        ('dev_topics', self.dev_topics >= 1, '>= 1'),
        ('test_topics', self.test_topics >= 1, '>= 1'),
        ('min_photos', self.min_photos >= 1, '>= 1'),
        ('max_photos', self.max_photos >= self.min_photos, '>= min_photos'),
        ('min_clusters', self.min_clusters >= 1, '>= 1'),
        ('max_clusters', self.max_clusters >= self.min_clusters, '>= min_clusters'),
        ('irrelevant_low', 0 <= self.irrelevant_low <= 1, 'in [0, 1]'),
        ('irrelevant_high', self.irrelevant_low <= self.irrelevant_high <= 1,
         'in [irrelevant_low, 1]'),
        ('dont_know', 0 <= self.dont_know <= 1, 'in [0, 1]'),
        ('nuisance_dims', self.nuisance_dims >= 0, '>= 0'),
    ]
    for name, ok, rule in checks:
      if not ok:
        raise ConfigError(f'--{name} (SyntheticConfig.{name}) must be {rule}, got '
                          f'{getattr(self, name)!r}')


def _random_units(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
  return l2_normalise(rng.standard_normal((n, dim)))


def _noise(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
  """Isotropic noise e ~ N(0, I / dim): E|e|^2 = 1 whatever the dimension."""
  return rng.standard_normal((n, dim)) / np.sqrt(dim)


def vocabulary_names(rng: np.random.Generator, n: int) -> list:
  """`n` distinct fine-grained description names, e.g. 'night view of the tower'."""
  names = [f'{v} of {p}' for v in _VIEWS for p in _PARTS]
  if n > len(names):
    raise ValueError(f'num_vocabulary={n} exceeds the {len(names)} names the templates make')
  order = rng.permutation(len(names))[:n]
  return [names[i] for i in order]


def _variant(rng: np.random.Generator, name: str) -> str:
  """The spelling variants seen in Div400's dclusterGT files: capitals, trailing spaces."""
  r = rng.random()
  if r < 0.1:
    return name.capitalize()
  if r < 0.18:
    return name + ' '
  return name


def _topic_titles(rng: np.random.Generator, n: int) -> list:
  combos = [(a, b, c) for a in _PLACE_A for b in _PLACE_B for c in _PLACE_C]
  order = rng.permutation(len(combos))[:n]
  return [' '.join(combos[i]) for i in order]


@dataclasses.dataclass
class _Topic:
  number: int
  title: str
  query: np.ndarray
  photo_ids: list
  photo_features: np.ndarray
  relevance: list
  clusters: list  # cluster id per photo (0 = none)
  cluster_names: list  # index = cluster id - 1
  cluster_vocab: list  # vocabulary index per cluster
  ranks: list


def _make_topic(rng, cfg: SyntheticConfig, number: int, title: str, vocab_dirs: np.ndarray,
                popularity: np.ndarray, nuisance: np.ndarray, first_photo_id: int) -> _Topic:
  dim = cfg.dim
  z = _random_units(rng, 1, dim)[0]
  k = int(np.clip(rng.poisson(cfg.mean_clusters), cfg.min_clusters, cfg.max_clusters))
  cats = rng.choice(len(vocab_dirs), size=k, replace=False, p=popularity)
  n = int(rng.integers(cfg.min_photos, cfg.max_photos + 1))
  n_irr = int(round(n * rng.uniform(cfg.irrelevant_low, cfg.irrelevant_high)))
  n_rel = n - n_irr
  shares = 1.0 / np.arange(1, k + 1) ** cfg.cluster_zipf
  shares = shares[rng.permutation(k)]
  shares /= shares.sum()
  sizes = np.maximum(1, np.floor(shares * (n_rel - k)).astype(int) + 1)
  while sizes.sum() < n_rel:
    sizes[rng.choice(k, p=shares)] += 1
  while sizes.sum() > n_rel:
    sizes[np.argmax(sizes)] -= 1
  offsets = _random_units(rng, k, dim)
  feats, clusters = [], []
  for c in range(k):
    m = sizes[c]
    h = (cfg.topic_weight * z + cfg.category_weight * vocab_dirs[cats[c]] +
         cfg.offset_weight * offsets[c] + cfg.photo_noise * _noise(rng, m, dim))
    feats.append(l2_normalise(h))
    clusters += [c + 1] * m
  r_dirs = vocab_dirs[rng.choice(len(vocab_dirs), size=n_irr, p=popularity)]
  h = (cfg.irrelevant_topic_weight * z + cfg.irrelevant_category_weight * r_dirs +
       cfg.photo_noise * _noise(rng, n_irr, dim))
  feats.append(l2_normalise(h))
  clusters += [0] * n_irr
  relevance = [1] * n_rel + [0] * n_irr
  query = l2_normalise(z + cfg.query_bias * (sizes / sizes.sum()) @ vocab_dirs[cats])
  perm = rng.permutation(n)
  style = rng.standard_normal((n, nuisance.shape[0])) / np.sqrt(max(1, nuisance.shape[0]))
  feats = l2_normalise(np.concatenate(feats) + cfg.nuisance_weight * style @ nuisance)[perm]
  clusters = [clusters[i] for i in perm]
  relevance = [relevance[i] for i in perm]
  for i in np.flatnonzero(rng.random(n) < cfg.dont_know):
    relevance[i], clusters[i] = -1, 0
  # Cluster ids must run 1..K with every id present in dGT (the scorer counts the largest id).
  present = sorted({c for c in clusters if c})
  remap = {old: new for new, old in enumerate(present, start=1)}
  cats = [cats[old - 1] for old in present]
  clusters = [remap.get(c, 0) for c in clusters]
  flickr_score = np.array([float(r == 1) for r in relevance]) * cfg.flickr_signal
  flickr_score = flickr_score + rng.standard_normal(n)
  ranks = np.empty(n, int)
  ranks[np.argsort(-flickr_score, kind='stable')] = np.arange(1, n + 1)
  return _Topic(number=number, title=title, query=query.astype(np.float32),
                photo_ids=[str(first_photo_id + i) for i in range(n)],
                photo_features=feats.astype(np.float32), relevance=relevance,
                clusters=clusters, cluster_names=[], cluster_vocab=[int(c) for c in cats],
                ranks=ranks.tolist())


def _photo_xml(rng, topic: _Topic, i: int, vocab: list) -> str:
  words = list(rng.choice(_FILLER, size=3))
  if topic.clusters[i]:
    words += vocab[topic.cluster_vocab[topic.clusters[i] - 1]].split()
  title = ' '.join([topic.title.split()[-1]] + words[-3:])
  tags = ' '.join(w.lower() for w in topic.title.split()) + ' ' + ' '.join(words[:3])
  desc = f'<b>{topic.title}</b> &amp; {" ".join(words)} <a href="http://example.org">link</a>'
  attrs = {
      'date_taken': '2012-06-01 12:00:00', 'description': desc, 'id': topic.photo_ids[i],
      'latitude': '0', 'license': '3', 'longitude': '0', 'nbComments': str(rng.integers(0, 9)),
      'rank': str(topic.ranks[i]), 'tags': tags, 'title': title,
      'url_b': f'http://example.org/{topic.photo_ids[i]}_b.jpg',
      'username': f'user{int(rng.integers(0, 500))}', 'views': str(int(rng.integers(0, 5000))),
  }
  return '<photo ' + ' '.join(f'{k}={quoteattr(v)}' for k, v in attrs.items()) + '/>'


def _write_text(path: str, text: str, newline: str = '\n') -> None:
  with open(path, 'w', encoding='utf-8', newline=newline) as f:
    f.write(text)


def _write_split(split_dir: str, prefix: str, topics: list, vocab: list, rng) -> None:
  for sub in ('xml', 'gt/rGT', 'gt/dGT'):
    os.makedirs(os.path.join(split_dir, sub), exist_ok=True)
  items = []
  for t in topics:
    items.append(
        f'<topic>\n\t<number>{t.number}</number>\n\t<title>{escape(t.title)}</title>\n'
        f'\t<latitude>0.0</latitude>\n\t<longitude>0.0</longitude>\n'
        f'\t<wiki>http://en.wikipedia.org/wiki/{t.title.replace(" ", "_")}</wiki>\n</topic>')
  _write_text(os.path.join(split_dir, f'{prefix}keywords_topics.xml'),
              '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n<topics>\n' +
              '\n'.join(items) + '\n</topics>\n')
  for t in topics:
    photos = sorted(range(len(t.photo_ids)), key=lambda i: t.ranks[i])
    body = '\n'.join(_photo_xml(rng, t, i, vocab) for i in photos)
    _write_text(os.path.join(split_dir, 'xml', f'{t.title}.xml'),
                '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
                f'<photos monument={quoteattr(t.title)}>\n{body}\n</photos>\n')
    _write_text(os.path.join(split_dir, 'gt', 'rGT', f'{t.title} rGT.txt'),
                ''.join(f'{p},{r}\n' for p, r in zip(t.photo_ids, t.relevance)))
    members = sorted((c, p) for p, c in zip(t.photo_ids, t.clusters) if c)
    _write_text(os.path.join(split_dir, 'gt', 'dGT', f'{t.title} dGT.txt'),
                ''.join(f'{p},{c}\n' for c, p in members))
    names = [_variant(rng, vocab[v]) for v in t.cluster_vocab]
    t.cluster_names = names
    _write_text(os.path.join(split_dir, 'gt', 'dGT', f'{t.title} dclusterGT.txt'),
                '\r\n'.join(f'{c},{name}' for c, name in enumerate(names, start=1)))


def generate(out_dir: str, seed: int = 0, config: Optional[SyntheticConfig] = None) -> str:
  """Writes the dataset and its feature stores under `out_dir` (atomically); returns it."""
  cfg = config or SyntheticConfig()
  rng = np.random.default_rng(seed)
  vocab = vocabulary_names(rng, cfg.num_vocabulary)
  vocab_dirs = _random_units(rng, cfg.num_vocabulary, cfg.dim)
  text_feats = l2_normalise(vocab_dirs + cfg.text_noise * _noise(rng, *vocab_dirs.shape))
  popularity = 1.0 / np.arange(1, cfg.num_vocabulary + 1) ** cfg.vocabulary_zipf
  popularity /= popularity.sum()
  nuisance = _random_units(rng, cfg.nuisance_dims, cfg.dim)
  n_topics = cfg.dev_topics + cfg.test_topics
  titles = _topic_titles(rng, n_topics)
  topics, next_id = [], 10_000_000
  for i in range(n_topics):
    t = _make_topic(rng, cfg, i + 1, titles[i], vocab_dirs, popularity, nuisance, next_id)
    next_id += len(t.photo_ids) + int(rng.integers(1, 1000))
    topics.append(t)
  splits = {'dev': topics[:cfg.dev_topics], 'test': topics[cfg.dev_topics:]}

  out_dir = outputs.check_writable_dir(out_dir, 'a synthetic dataset')
  tmp = outputs.staging_dir(out_dir)
  try:
    for split, prefix in (('dev', 'devset'), ('test', 'testset')):
      _write_split(os.path.join(tmp, prefix, 'keywords'), prefix, splits[split], vocab, rng)
    # Categories: every vocabulary name, normalised as the vocabulary module does (they are
    # already lowercase, single-spaced), sorted so that ids are reproducible.
    order = np.argsort(vocab)
    for split, ts in splits.items():
      store = features_lib.make_store(
          photos=np.concatenate([t.photo_features for t in ts]),
          photo_ids=[p for t in ts for p in t.photo_ids],
          queries=np.stack([t.query for t in ts]), query_ids=[t.number for t in ts],
          categories=text_feats[order], category_names=[vocab[i] for i in order],
          encoder='synthetic', dataset='synthetic', split=split,
          source=f'colt_jax.datasets.synthetic seed={seed}',
          extra={'synthetic_config': dataclasses.asdict(cfg), 'seed': seed})
      features_lib.write(os.path.join(tmp, 'features', split), store)
    atomic.write_json(os.path.join(tmp, MARKER_FILE),
                      {'seed': seed, 'config': dataclasses.asdict(cfg)})
    outputs.replace_dir(tmp, out_dir, 'a synthetic dataset')
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return out_dir


def ensure(out_dir: str, seed: int = 0, config: Optional[SyntheticConfig] = None) -> str:
  """Generates the dataset unless `out_dir` already holds one made with the same settings.

  Like `generate`, it writes only into a folder that does not exist, is empty, or holds a
  dataset colt_jax generated; any other folder is refused (`InputError`)."""
  cfg = config or SyntheticConfig()
  info = read_marker(out_dir)
  if info == {'seed': seed, 'config': dataclasses.asdict(cfg)}:
    return out_dir
  return generate(out_dir, seed, cfg)


def read_marker(out_dir: str) -> Optional[dict]:
  """The settings a generated dataset was made with (its `synthetic.json`), or None."""
  marker = os.path.join(out_dir, MARKER_FILE)
  if not os.path.isfile(marker):
    return None
  try:
    with open(marker) as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise InputError(f'{marker}:{e.lineno}: malformed JSON ({e.msg})') from None
