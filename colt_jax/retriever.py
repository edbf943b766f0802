"""CoLT inference (Alg. 2): re-encode with g, classify tokens with phi, select per category.

`Retriever.from_checkpoints(scl_dir, ttc_dir, store)` restores both trained modules from their
orbax checkpoints (the configs saved beside them rebuild the modules) and answers
`search(query_feature, k=20, per_category=1)` over the store's whole collection (`length=50`
for a ranked list that continues past Eq. 6's k).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax import configs
from colt_jax import features as features_lib
from colt_jax import postprocess
from colt_jax.errors import InputError
from colt_jax.models import ReEncoder, TokenClassifier
from colt_jax.sequences import LabelSpace, TokenSequences
from colt_jax.train import loop

_CHUNK = 8192


@dataclasses.dataclass(frozen=True)
class ReEncoderBundle:
  """A trained g: module, params and its SCL config."""
  module: ReEncoder
  params: dict
  config: configs.SCLConfig

  @functools.cached_property
  def _apply(self):
    return jax.jit(lambda p, x: self.module.apply({'params': p}, x))

  def __call__(self, features: np.ndarray) -> np.ndarray:
    """h^ for [n, d] features (Eq. 1), in chunks of fixed size (one compilation)."""
    features = np.asarray(features, np.float32)
    out = np.empty_like(features)
    for s in range(0, features.shape[0], _CHUNK):
      chunk = features[s:s + _CHUNK]
      n = chunk.shape[0]
      if n < _CHUNK and features.shape[0] > _CHUNK:
        chunk = np.concatenate([chunk, np.zeros((_CHUNK - n, chunk.shape[1]), np.float32)])
      out[s:s + n] = np.asarray(self._apply(self.params, chunk))[:n]
    return out


@dataclasses.dataclass(frozen=True)
class ClassifierBundle:
  """A trained phi: module, params, label space and its TTC config."""
  module: TokenClassifier
  params: dict
  space: LabelSpace
  config: configs.TTCConfig

  @functools.cached_property
  def _logits(self):
    return jax.jit(lambda p, t, m: self.module.apply({'params': p}, t, m, deterministic=True))

  def predict(self, tokens: np.ndarray, mask: np.ndarray, batch_size: int = 64,
              irrelevant_threshold: float = 0.0) -> np.ndarray:
    """Predicted class of every token [B, T]: the argmax of phi (Eq. 4), or with
    `irrelevant_threshold` > 0 see `labels_from_logits`."""
    if irrelevant_threshold > 0:
      return labels_from_logits(self.logits(tokens, mask, batch_size), self.space,
                                irrelevant_threshold)
    out = []
    for s in range(0, tokens.shape[0], batch_size):
      t, m = tokens[s:s + batch_size], mask[s:s + batch_size]
      n = t.shape[0]
      if n < batch_size and tokens.shape[0] > batch_size:
        t = np.concatenate([t, np.zeros((batch_size - n,) + t.shape[1:], t.dtype)])
        m = np.concatenate([m, np.zeros((batch_size - n,) + m.shape[1:], bool)])
      out.append(np.asarray(jnp.argmax(self._logits(self.params, t, m), -1))[:n])
    return np.concatenate(out)

  def logits(self, tokens: np.ndarray, mask: np.ndarray, batch_size: int = 64) -> np.ndarray:
    """phi's logits [B, T, classes], in fixed-size batches (one compilation)."""
    out = []
    for s in range(0, tokens.shape[0], batch_size):
      t, m = tokens[s:s + batch_size], mask[s:s + batch_size]
      n = t.shape[0]
      if n < batch_size and tokens.shape[0] > batch_size:
        t = np.concatenate([t, np.zeros((batch_size - n,) + t.shape[1:], t.dtype)])
        m = np.concatenate([m, np.zeros((batch_size - n,) + m.shape[1:], bool)])
      out.append(np.asarray(self._logits(self.params, t, m))[:n])
    return np.concatenate(out)


def labels_from_logits(logits: np.ndarray, space: LabelSpace,
                       irrelevant_threshold: float) -> np.ndarray:
  """Labels with a relevance threshold (not in the paper; the paper's "easy to control"
  post-processing in spirit): a token is 'irrelevant' only when phi gives that class a
  probability above `irrelevant_threshold`; otherwise it gets its most probable category
  (the query token keeps 'query'). 0.5 is close to the plain argmax; 1 never drops an image.
  """
  logits = np.asarray(logits, np.float64)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  labels = np.argmax(logits[..., :space.num_categories], -1)
  labels = np.where(probs[..., space.irrelevant_id] > irrelevant_threshold,
                    space.irrelevant_id, labels)
  return np.where(np.argmax(logits, -1) == space.query_id, space.query_id, labels)


def reencoder_module(cfg: configs.SCLConfig) -> ReEncoder:
  return ReEncoder(beta=cfg.beta, hidden_dim=cfg.hidden_dim, num_layers=cfg.mlp_layers)


def classifier_module(cfg: configs.TTCConfig, space: LabelSpace) -> TokenClassifier:
  return TokenClassifier(num_classes=space.num_classes, num_layers=cfg.num_layers,
                         num_heads=cfg.num_heads, model_dim=cfg.model_dim,
                         mlp_ratio=cfg.mlp_ratio, dropout=cfg.dropout,
                         attention_dropout=cfg.attention_dropout,
                         max_len=max(512, cfg.num_images + 1),
                         position_embedding=cfg.position_embedding,
                         query_relative=cfg.query_relative)


def _check_kind(path: str, config: dict, expected: str) -> None:
  """Refuses a checkpoint of the other trainer (g given for phi or the reverse)."""
  kind = 'ttc' if 'num_layers' in config else 'scl' if 'beta' in config else None
  names = {'scl': 'an SCL checkpoint (g, experiments/train_scl.py)',
           'ttc': 'a TTC checkpoint (phi, experiments/train_ttc.py)'}
  flag = {'scl': '--scl_checkpoint', 'ttc': '--ttc_checkpoint'}[expected]
  if kind != expected:
    found = names[kind] if kind else 'not a colt_jax checkpoint'
    raise InputError(f'{path} ({flag}): {found}, but {names[expected]} is expected here')


def load_reencoder(path: str, step: Optional[int] = None) -> ReEncoderBundle:
  state, cfg = loop.restore_checkpoint(path, step)
  _check_kind(path, cfg, 'scl')
  cfg = configs.from_dict(configs.SCLConfig, cfg)
  return ReEncoderBundle(reencoder_module(cfg), state['params'], cfg)


def load_classifier(path: str, step: Optional[int] = None) -> ClassifierBundle:
  state, raw = loop.restore_checkpoint(path, step)
  _check_kind(path, raw, 'ttc')
  space = LabelSpace(int(raw.pop('num_categories')))
  cfg = configs.from_dict(configs.TTCConfig, raw)
  return ClassifierBundle(classifier_module(cfg, space), state['params'], space, cfg)


def reencode_store(store: features_lib.FeatureStore,
                   reencoder: Optional[ReEncoderBundle]) -> features_lib.FeatureStore:
  """The store with photos replaced by h^ (unchanged when `reencoder` is None)."""
  if reencoder is None:
    return store
  meta = dict(store.meta, reencoded_by=reencoder.config.workdir)
  return dataclasses.replace(store, photos=reencoder(np.asarray(store.photos)), meta=meta)


def select(predicted: np.ndarray, seqs: TokenSequences, space: LabelSpace, k: int,
           per_category: int, fill_excluded: bool = False,
           length: Optional[int] = None) -> list:
  """Post-processing t (Eq. 6) for every sequence: list of [(photo id, score, category)].

  `length` (None = k) photos at most: the first k by Eq. 6, then its continuation (see
  `postprocess`), which ends with the images labelled irrelevant or query; with
  `fill_excluded` those may also fill a short list of length <= k. Such an image's category
  is its label (`space.irrelevant_id` or `space.query_id`)."""
  image_labels = predicted[:, 1:]
  valid = seqs.mask[:, 1:]
  idx = np.asarray(postprocess.select_per_category_batch(
      jnp.asarray(image_labels), jnp.asarray(seqs.scores), jnp.asarray(valid), k=k,
      per_category=per_category, num_categories=space.num_categories,
      fill_excluded=fill_excluded, length=length))
  out = []
  for t in range(idx.shape[0]):
    picks = [int(i) for i in idx[t] if i >= 0]
    out.append([(seqs.photo_ids[t][i], float(seqs.scores[t, i]), int(image_labels[t, i]))
                for i in picks])
  return out


@dataclasses.dataclass(frozen=True)
class SearchResult:
  photo_ids: tuple
  categories: tuple  # predicted category id per photo
  category_names: tuple
  scores: tuple  # cosine similarity of h^ to the query


class Retriever:
  """CoLT over one collection: `search(query_feature, k, per_category)`."""

  def __init__(self, reencoder: Optional[ReEncoderBundle], classifier: ClassifierBundle,
               store: features_lib.FeatureStore):
    self.reencoder = reencoder
    self.classifier = classifier
    self.store = reencode_store(store, reencoder)
    self._photos = np.asarray(self.store.photos)
    self._names = [str(n) for n in store.category_names]
    if classifier.config.label_scheme == 'local':  # groups of this query, not vocabulary ids
      self._names = [f'group {g}' for g in range(classifier.space.num_categories)]
    if len(self._names) != classifier.space.num_categories:
      raise ValueError(f'the store has {len(self._names)} categories but the classifier was '
                       f'trained with {classifier.space.num_categories}')

  @classmethod
  def from_checkpoints(cls, scl_checkpoint: Optional[str], ttc_checkpoint: str,
                       store: features_lib.FeatureStore) -> 'Retriever':
    reencoder = load_reencoder(scl_checkpoint) if scl_checkpoint else None
    return cls(reencoder, load_classifier(ttc_checkpoint), store)

  def sequences(self, queries: np.ndarray) -> TokenSequences:
    """[h_q, the N photos of the collection most similar to h_q] for each query [B, d]."""
    n = min(self.classifier.config.num_images, self._photos.shape[0])
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    sims = queries @ self._photos.T
    top = np.argpartition(-sims, n - 1, axis=1)[:, :n]
    b = queries.shape[0]
    tokens = np.zeros((b, 1 + self.classifier.config.num_images, queries.shape[1]), np.float32)
    mask = np.zeros(tokens.shape[:2], bool)
    scores = np.full((b, self.classifier.config.num_images), -np.inf, np.float32)
    ids = []
    for i in range(b):
      order = top[i][np.lexsort((top[i], -sims[i, top[i]]))]
      tokens[i, 0] = queries[i]
      tokens[i, 1:n + 1] = self._photos[order]
      mask[i, :n + 1] = True
      scores[i, :n] = sims[i, order]
      ids.append(tuple(str(self.store.photo_ids[j]) for j in order))
    return TokenSequences(topics=np.arange(b), tokens=tokens, mask=mask, scores=scores,
                          photo_ids=tuple(ids))

  def search_batch(self, queries: np.ndarray, k: int = 20, per_category: int = 1,
                   fill_excluded: bool = False, length: Optional[int] = None) -> list:
    """`search` for a batch of queries [B, d]."""
    seqs = self.sequences(queries)
    predicted = self.classifier.predict(seqs.tokens, seqs.mask)
    out = []
    names = self._names + ['irrelevant', 'query']
    for picks in select(predicted, seqs, self.classifier.space, k, per_category,
                        fill_excluded, length):
      out.append(SearchResult(photo_ids=tuple(p for p, _, _ in picks),
                              categories=tuple(c for _, _, c in picks),
                              category_names=tuple(names[c] for _, _, c in picks),
                              scores=tuple(s for _, s, _ in picks)))
    return out

  def search(self, query_feature: np.ndarray, k: int = 20, per_category: int = 1,
             fill_excluded: bool = False, length: Optional[int] = None) -> SearchResult:
    """The photos CoLT returns for one L2-normalised query feature [d]: Eq. 6's k, or a
    ranked list of `length` that continues past k (see `postprocess`)."""
    return self.search_batch(np.asarray(query_feature)[None], k, per_category,
                             fill_excluded, length)[0]


def rank_sequences(classifier: ClassifierBundle, seqs: TokenSequences, k: int,
                   per_category: int, fill_excluded: bool = False,
                   irrelevant_threshold: float = 0.0, length: Optional[int] = None) -> list:
  """CoLT's ranked list per sequence, for evaluation: [(photo id, score)], `length` (None =
  k) photos at most, the first k by Eq. 6."""
  predicted = classifier.predict(seqs.tokens, seqs.mask,
                                 irrelevant_threshold=irrelevant_threshold)
  return [[(p, s) for p, s, _ in picks]
          for picks in select(predicted, seqs, classifier.space, k, per_category,
                              fill_excluded, length)]


__all__: Sequence[str] = ('Retriever', 'ReEncoderBundle', 'ClassifierBundle', 'load_reencoder',
                          'load_classifier', 'reencode_store', 'rank_sequences', 'select')
