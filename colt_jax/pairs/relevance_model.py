"""A relevance model beside phi (the `colt-pairs relevance` rows, not in the paper).

phi's relevance head ranks a topic's photos no better than their cosine to the query
(docs/RESULTS.md, "What colt-pairs' heads predict"), while what a photo looks like, in the
ten official descriptors, tells relevant photos from the others across topics
(`experiments/diagnose.py --what relevance`). phi sees the descriptors only through similarities
(`relational_tokens`), and fed them as features it does not learn this ("Would other inputs
of phi move colt-pairs?"). This model learns it: scikit-learn's HistGradientBoostingClassifier
of P(relevant) over what every Retriever has of a pool, phi's N candidates of a query in a
view store (`pool_features`):

* the text part's cosine to the query, its gap to the pool's best, its z-score and its rank
  in the pool,
* each official descriptor part of the photo's row, L2-normalised (the descriptors z-scored
  with the training photos' statistics, `views`), when the store has them (a text store:
  the cosine features alone).

It is fitted on the training topics' pools (rGT 1 against 0; -1 left out) and saved beside
phi in a model directory with skops (no pickle; a file holding any other type than the
classifier's is refused before it is read). `PairsRetriever.with_relevance_model(model, a)`
(`pairs/inference/pairs_retriever.py`) mixes it with phi's r: r = (1 - a) r_phi + a r_model.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Optional, Sequence

import numpy as np
import threadpoolctl

from colt_jax.data import features as features_lib
from colt_jax.data import views as views_lib
from colt_jax.data.types import Split
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inputs.examples import token_sequences
from colt_jax.util import atomic
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

FORMAT = 'colt_jax.relevance_model/1'
# What the model computes, for the cache keys of the rows that use it: raised by hand when a
# change alters its features, its fitting or its predictions (not for docs or messages).
VERSION = 1
CONFIG_FILE = 'relevance_model.json'
MODEL_FILE = 'relevance_model.skops'
QUERY_FEATURES = ('text_cosine', 'cosine_minus_best', 'cosine_z', 'cosine_rank')
# The one type beyond skops' own safe ones that a saved classifier holds (its trees); a file
# that needs any other is refused.
TRUSTED_TYPES = ('sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor',)


@dataclasses.dataclass(frozen=True)
class RelevanceConfig:
  """How `fit` trains (configuration as data; fixed before any held-out score was seen)."""
  max_iter: int = 200  # boosting rounds
  learning_rate: float = 0.05
  max_leaf_nodes: int = 15
  l2_regularization: float = 1.0
  seed: int = 0
  threads: int = 1  # OpenMP threads (1: more would oversubscribe a busy machine's cores)

  def __post_init__(self):
    """Refuses values `fit` and `predict` cannot use (a saved config is input too)."""
    for name in ('max_iter', 'max_leaf_nodes', 'seed', 'threads'):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < (
          0 if name == 'seed' else 1):
        raise ValueError(f'{name} must be an integer >= {0 if name == "seed" else 1}, got '
                         f'{value!r}')
    for name in ('learning_rate', 'l2_regularization'):
      value = getattr(self, name)
      if (not isinstance(value, (int, float)) or isinstance(value, bool)
          or not np.isfinite(value) or value < 0 or (name == 'learning_rate' and value == 0)):
        raise ValueError(f'{name} must be a finite number '
                         f'{"> 0" if name == "learning_rate" else ">= 0"}, got {value!r}')


def descriptor_slices(parts: Sequence[tuple]) -> list:
  """[(name, slice)] of the official descriptor parts among a view store's `parts`."""
  out, start = [], 0
  for name, size in parts:
    if name in views_lib.ALL_DESCRIPTORS:
      out.append((name, slice(start, start + int(size))))
    start += int(size)
  return out


def _unit(x: np.ndarray) -> np.ndarray:
  norms = np.linalg.norm(x, axis=-1, keepdims=True)
  return x / np.maximum(norms, 1e-12)


def pool_features(query: np.ndarray, features: np.ndarray, parts: Sequence[tuple]) -> np.ndarray:
  """[n, 4 + descriptor dims] float32 of one pool: `features` [n, d] are its photos' rows of
  a view store whose consecutive parts are `parts` ((name, size), text first), `query` [d]."""
  parts = tuple((str(n), int(s)) for n, s in parts)
  if not parts or parts[0][0] != 'text' or sum(s for _, s in parts) != features.shape[-1]:
    raise InputError(f'relevance model: rows of {features.shape[-1]} features do not hold the '
                     f'parts {parts} (text first)')
  x = np.asarray(features, np.float64)
  text = parts[0][1]
  cos = _unit(x[:, :text]) @ _unit(np.asarray(query, np.float64)[:text])
  order = np.lexsort((np.arange(len(cos)), -cos))
  rank = np.empty(len(cos))
  rank[order] = np.arange(len(cos)) / max(len(cos), 1)
  if not len(cos):
    raise InputError('relevance model: an empty pool')
  cols = [cos, cos - cos.max(), (cos - cos.mean()) / (cos.std() + 1e-6), rank]
  desc = [_unit(x[:, s]) for _, s in descriptor_slices(parts)]
  return np.concatenate([np.stack(cols, axis=1)] + desc, axis=1).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class RelevanceModel:
  """The fitted classifier, the view parts its inputs come from, and its config."""
  config: RelevanceConfig
  parts: tuple  # ((name, size), ...) of the view store it reads
  classifier: object  # sklearn HistGradientBoostingClassifier
  num_photos: int  # training photos

  def predict(self, query: np.ndarray, features: np.ndarray) -> np.ndarray:
    """P(relevant) [n] of one pool's photos (rows of the view store)."""
    if not len(features):
      return np.zeros(0, np.float32)
    x = pool_features(query, features, self.parts)
    with threadpoolctl.threadpool_limits(self.config.threads, user_api='openmp'):
      return self.classifier.predict_proba(x)[:, 1].astype(np.float32)

  def predict_tokens(self, tokens: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """P(relevant) [B, N] of phi's token sequences [B, 1 + N, d] (token 0 the query; 0 where
    `valid` [B, N] is False)."""
    tokens, valid = np.asarray(tokens), np.asarray(valid, bool)
    out = np.zeros(valid.shape, np.float32)
    rows = [b for b in range(tokens.shape[0]) if valid[b].any()]
    if not rows:
      return out
    with threadpoolctl.threadpool_limits(self.config.threads, user_api='openmp'):
      for b in rows:
        keep = np.flatnonzero(valid[b])
        x = pool_features(tokens[b, 0], tokens[b, 1:][keep], self.parts)
        out[b, keep] = self.classifier.predict_proba(x)[:, 1]
    return out

  def save(self, directory: str) -> None:
    """The classifier (skops) and its config, in `directory`: a new or empty folder, or a
    result set's (`outputs.check_writable_dir`); each file atomic."""
    import skops.io  # pylint: disable=g-import-not-at-top  # on first use
    outputs.check_writable_dir(directory, 'a relevance model')
    os.makedirs(directory, exist_ok=True)
    atomic.write_bytes(os.path.join(directory, MODEL_FILE), skops.io.dumps(self.classifier))
    atomic.write_json(os.path.join(directory, CONFIG_FILE), {
        'format': FORMAT, 'config': dataclasses.asdict(self.config),
        'parts': [list(p) for p in self.parts], 'num_photos': self.num_photos})


def load(directory: str) -> RelevanceModel:
  """A model `RelevanceModel.save` wrote; refuses a file that holds other types than a
  gradient-boosted classifier's."""
  import skops.io  # pylint: disable=g-import-not-at-top
  path = os.path.join(directory, CONFIG_FILE)
  try:
    with open(path) as f:
      info = json.load(f)
    with open(os.path.join(directory, MODEL_FILE), 'rb') as f:
      blob = f.read()
  except FileNotFoundError as e:
    raise InputError(f'{directory}: no relevance model ({os.path.basename(e.filename)} '
                     'missing)') from None
  except json.JSONDecodeError as e:
    raise InputError(f'{path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f'{directory}: unreadable relevance model ({type(e).__name__}: '
                     f'{e})') from None
  if not isinstance(info, dict) or info.get('format') != FORMAT:
    raise InputError(f'{path}: format {info.get("format") if isinstance(info, dict) else None!r}'
                     f', expected {FORMAT!r}')
  try:
    config = RelevanceConfig(**info['config'])
    parts = tuple((str(n), int(s)) for n, s in info['parts'])
    num_photos = int(info['num_photos'])
  except (KeyError, TypeError, ValueError) as e:
    raise InputError(f'{path}: malformed relevance model config ({e})') from None
  where = os.path.join(directory, MODEL_FILE)
  try:
    untrusted = skops.io.get_untrusted_types(data=blob)
  except Exception as e:  # pylint: disable=broad-except  # skops: any unreadable file
    raise InputError(f'{where}: not a skops file ({type(e).__name__})') from None
  foreign = [t for t in untrusted if t not in TRUSTED_TYPES]
  if foreign:  # refused before anything of it is built
    raise InputError(f'{where}: holds types a relevance model does not '
                     f'({", ".join(foreign[:3])})')
  from sklearn.ensemble import HistGradientBoostingClassifier  # pylint: disable=g-import-not-at-top
  try:
    classifier = skops.io.loads(blob, trusted=untrusted)  # skops' own safe types, and those
  except Exception as e:  # pylint: disable=broad-except  # skops: any malformed content
    raise InputError(f'{where}: not a relevance model skops can build ({type(e).__name__}: '
                     f'{" ".join(str(e).split())[:200]})') from None
  if not isinstance(classifier, HistGradientBoostingClassifier):
    raise InputError(f'{where}: holds types a relevance model does not '
                     f'({type(classifier).__module__}.{type(classifier).__name__})')
  problem = classifier_problem(classifier, num_features(parts))
  if problem:
    raise InputError(f'{where}: not a valid relevance model ({problem})')
  return RelevanceModel(config, parts, classifier, num_photos)


def num_features(parts: Sequence[tuple]) -> int:
  """The width of `pool_features`' rows for a view store of `parts`."""
  return len(QUERY_FEATURES) + sum(s.stop - s.start for _, s in descriptor_slices(parts))


def classifier_problem(classifier, width: int) -> Optional[str]:
  """What makes a loaded classifier unsafe or wrong to predict with (None: nothing).

  scikit-learn's tree predictor follows the node arrays without bounds checks, so a file
  whose nodes point past their array, or whose features past the model's `width`, reads
  out of bounds (a crash, or silently wrong scores). Every tree is checked once, at load:
  one binary output, `width` numeric features, no categorical splits; per node: children
  after their parent and inside the array (so a walk ends), feature indices inside `width`,
  finite thresholds and leaf values."""
  # pylint: disable=g-import-not-at-top
  from sklearn.ensemble._hist_gradient_boosting import common as hgb_common
  from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor
  # pylint: enable=g-import-not-at-top
  if getattr(classifier, 'n_features_in_', None) != width:
    return f'{getattr(classifier, "n_features_in_", None)} input features, expected {width}'
  classes = np.asarray(getattr(classifier, 'classes_', []))
  if classes.shape != (2,) or getattr(classifier, 'n_trees_per_iteration_', None) != 1:
    return 'not a binary classifier'
  categorical = getattr(classifier, 'is_categorical_', None)
  if (categorical is not None and np.any(categorical)) or getattr(
      classifier, '_preprocessor', None) is not None:
    return 'categorical features, which a relevance model never has'
  # predict_proba reads these too: the bin mapper's categorical map (all numeric, one entry a
  # feature), raw (not pre-binned) input, and the binomial loss's link.
  mapper = getattr(classifier, '_bin_mapper', None)
  mapped = np.asarray(getattr(mapper, 'is_categorical_', None) if mapper is not None else None)
  if mapped.shape != (width,) or mapped.dtype.kind not in 'biu' or np.any(mapped):
    return 'a malformed bin mapper'
  if getattr(classifier, '_in_fit', False):
    return 'a classifier saved in the middle of its fit'
  if type(getattr(classifier, '_loss', None)).__name__ != 'HalfBinomialLoss':
    return 'not the binomial loss of a binary classifier'
  baseline = np.asarray(getattr(classifier, '_baseline_prediction', np.nan), np.float64)
  if baseline.size != 1 or not np.all(np.isfinite(baseline)):
    return 'a malformed baseline prediction'
  predictors = getattr(classifier, '_predictors', None)
  if not isinstance(predictors, list) or not predictors:
    return 'no trees'
  for i, trees in enumerate(predictors):
    if not isinstance(trees, list) or len(trees) != 1 or not isinstance(trees[0],
                                                                        TreePredictor):
      return f'iteration {i}: not one tree'
    nodes = trees[0].nodes
    if not isinstance(nodes, np.ndarray) or nodes.dtype != hgb_common.PREDICTOR_RECORD_DTYPE or (
        nodes.ndim != 1 or not len(nodes)):
      return f'tree {i}: malformed node array'
    index = np.arange(len(nodes))
    split = nodes['is_leaf'] == 0
    for child in ('left', 'right'):
      c = nodes[child][split].astype(np.int64)
      if np.any(c <= index[split]) or np.any(c >= len(nodes)):
        return f'tree {i}: a node\'s {child} child outside the tree'
    f = nodes['feature_idx'][split].astype(np.int64)
    if np.any(f < 0) or np.any(f >= width):
      return f'tree {i}: a feature index outside the {width} features'
    if np.any(nodes['is_categorical'][split]):
      return f'tree {i}: a categorical split'
    if not np.all(np.isfinite(nodes['num_threshold'][split])):
      return f'tree {i}: a threshold that is not finite'
    if not np.all(np.isfinite(nodes['value'][~split])):
      return f'tree {i}: a leaf value that is not finite'
  return None


def fit(pools: Iterable[tuple], parts: Sequence[tuple],
        config: Optional[RelevanceConfig] = None) -> RelevanceModel:
  """Fitted on `pools`: (query [d], features [n, d], rGT labels [n]: 1, 0 or -1 = left out)
  of the training topics, the photos as phi sees them (its N candidates)."""
  config = config or RelevanceConfig()
  parts = tuple((str(n), int(s)) for n, s in parts)
  xs, ys = [], []
  for query, features, labels in pools:
    labels = np.asarray(labels)
    keep = labels >= 0
    if keep.any():  # the features of the whole pool (its cosines' statistics), then its labels
      xs.append(pool_features(query, np.asarray(features), parts)[keep])
      ys.append(labels[keep] == 1)
  y = np.concatenate(ys) if ys else np.zeros(0, bool)
  if y.all() or not y.any():
    raise InputError(f'relevance model: the training topics need relevant and irrelevant '
                     f'photos ({len(y)} labelled)')
  return RelevanceModel(config, parts, fit_classifier(np.concatenate(xs), y, config),
                        int(len(y)))


def fit_classifier(x: np.ndarray, y: np.ndarray, config: RelevanceConfig):
  """The model's classifier (its settings `config`) fitted on rows `x` and labels `y`."""
  from sklearn.ensemble import HistGradientBoostingClassifier  # pylint: disable=g-import-not-at-top
  classifier = HistGradientBoostingClassifier(
      max_iter=config.max_iter, learning_rate=config.learning_rate,
      max_leaf_nodes=config.max_leaf_nodes, l2_regularization=config.l2_regularization,
      early_stopping=False, random_state=config.seed)
  with threadpoolctl.threadpool_limits(config.threads, user_api='openmp'):
    return classifier.fit(x, y)


def split_pools(split: Split, store: features_lib.FeatureStore, num_images: int,
                protocol: str = 'pool') -> list:
  """[(query, features, rGT labels)] of every topic of `split`: phi's N candidates (the most
  similar to the query, as `Retriever` feeds them to phi) of a view store, what `fit` reads."""
  cands = candidates_lib.build_candidates(split, store, protocol)
  if not cands:
    return []
  seqs = token_sequences(cands, num_images)
  out = []
  for t, c in enumerate(cands):
    ids = seqs.photo_ids[t]
    rel = split.ground_truth[c.topic].relevance
    out.append((seqs.tokens[t, 0], seqs.tokens[t, 1:1 + len(ids)],
                np.array([rel.get(p, 0) for p in ids], np.int64)))
  return out


def fit_split(split: Split, store: features_lib.FeatureStore, num_images: int,
              config: Optional[RelevanceConfig] = None, protocol: str = 'pool') -> RelevanceModel:
  """`fit` on the pools (`protocol`'s candidates) of every (training) topic of `split` in the
  view store `store`."""
  return fit(split_pools(split, store, num_images, protocol), views_lib.token_parts(store),
             config)
