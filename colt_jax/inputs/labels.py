"""Labels of the input pipeline: the category vocabulary, photo labels and label schemes.

Label conventions of the token classifier (Sec. 3.3): categories are the ids 0..V-1 of the
TRAINING vocabulary (`training_vocabulary`: the cluster names of the training topics only, so
nothing of a held-out topic reaches training); `irrelevant_id = V` labels irrelevant images
(rGT 0, rGT -1 "don't know", and, under the global protocol, photos of other topics);
`query_id = V + 1` labels the query token at position 0. Sequences carry these category ids;
a label scheme (`scheme_targets`: global ids, or topic-local groups) turns them into the
classifier's targets in the train step, after augmentation.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.data.types import Split
from colt_jax.data.vocabulary import CategoryVocabulary
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.util.errors import InputError

PAD_LABEL = -1
LABEL_SCHEMES = ('global', 'local')
VOCABULARIES = ('train', 'all')


@dataclasses.dataclass(frozen=True)
class LabelSpace:
  """The TTC's classes: V categories, then 'irrelevant', then 'query'."""
  num_categories: int

  @property
  def irrelevant_id(self) -> int:
    return self.num_categories

  @property
  def query_id(self) -> int:
    return self.num_categories + 1

  @property
  def num_classes(self) -> int:
    return self.num_categories + 2


def store_vocabulary(category_names: Sequence[str]) -> CategoryVocabulary:
  """The vocabulary whose ids are the rows of a feature store's `categories`."""
  vocab = CategoryVocabulary.from_names([str(n) for n in category_names])
  if list(vocab.names) != [str(n) for n in category_names]:
    raise ValueError('feature store category_names must be normalised, distinct and sorted')
  return vocab


def training_vocabulary(split: Split, store, vocabulary: str = 'train') -> CategoryVocabulary:
  """The categories a model trains on: ids of the SCL bank (Eq. 3) and of global labels.

  'train': the normalised cluster names occurring in `split`'s ground truth, sorted (only the
  training topics; names of held-out topics are "unseen"). 'all': every name of the feature
  store, held-out ones included (the "all names" ablation; the store must hold every name).
  """
  if vocabulary not in VOCABULARIES:
    raise InputError(f'vocabulary {vocabulary!r}: expected one of {VOCABULARIES}')
  if vocabulary == 'all':
    return store_vocabulary(store.category_names)
  vocab = CategoryVocabulary.from_splits([split])
  missing = sorted(set(vocab.names) - {str(n) for n in store.category_names})
  if missing:
    raise InputError(f'{split.dataset}/{split.split}: {len(missing)} cluster names are not in '
                     f'the feature store\'s categories (first: {missing[0]!r}; is the store '
                     'built for this dataset?)')
  return vocab


def category_features(store, vocab: CategoryVocabulary) -> np.ndarray:
  """The store's category features [len(vocab), d] of `vocab`'s names, in its id order (the
  initial prototypes of Eq. 3); only these rows are read."""
  index = {str(n): i for i, n in enumerate(store.category_names)}
  try:
    rows = np.array([index[n] for n in vocab.names], np.int64)
  except KeyError as e:
    raise InputError(f'category {e.args[0]!r} is not in the feature store') from None
  return np.asarray(store.categories)[rows]


def photo_labels(split: Split, vocab: CategoryVocabulary) -> dict:
  """Topic -> {relevant photo id -> category id}; a name outside the vocabulary is an error."""
  out = {}
  for topic, gt in split.ground_truth.items():
    try:
      out[topic] = vocab.topic_labels(gt)
    except KeyError as e:
      raise ValueError(f'{split.dataset}/{split.split} topic {topic}: {e.args[0]} (is the '
                       'feature store built for this dataset?)') from None
  return out


def candidate_labels(cands: TopicCandidates, labels: Mapping[str, int],
                     space: LabelSpace) -> np.ndarray:
  """Per-candidate class: its category id when relevant, else `irrelevant_id`."""
  return np.array([labels.get(p, space.irrelevant_id) for p in cands.photo_ids], np.int32)


def local_groups(labels, num_categories: int, num_groups: int) -> jax.Array:
  """Topic-local group labels (not in the paper) of category-id labels [..., T], in JAX.

  In each sequence the category of the first relevant image becomes group 0, the next new
  category group 1, and so on in similarity order (groups past `num_groups` - 1 share the
  last one). Irrelevant and query labels become `num_groups` + (label - `num_categories`);
  PAD_LABEL stays. Fixed shapes (a [T, T] comparison), so it runs under jit after
  augmentation (Sec. 3.4), which moves tokens and so changes the groups.

  Grouping is all that post-processing (Eq. 6) needs, and unlike global category ids, group
  ids mean the same on topics whose categories were never seen in training.
  """
  labels = jnp.asarray(labels)
  is_category = (labels >= 0) & (labels < num_categories)
  same = (labels[..., :, None] == labels[..., None, :]) & is_category[..., None, :]
  first = jnp.argmax(same, axis=-1)  # [..., j]: first position with j's category
  is_new = is_category & (first == jnp.arange(labels.shape[-1]))
  rank = jnp.cumsum(is_new, axis=-1) - 1  # [..., i]: order of first appearance
  group = jnp.minimum(jnp.take_along_axis(rank, first, axis=-1), num_groups - 1)
  other = jnp.where(labels < 0, PAD_LABEL, num_groups + labels - num_categories)
  return jnp.where(is_category, group, other).astype(labels.dtype)


def check_label_scheme(label_scheme: str) -> None:
  """Raises ValueError unless `label_scheme` is one of LABEL_SCHEMES."""
  if label_scheme not in LABEL_SCHEMES:
    raise ValueError(f'label_scheme {label_scheme!r}: expected one of {LABEL_SCHEMES}')


def scheme_space(label_scheme: str, num_categories: int, num_groups: int) -> LabelSpace:
  """The classifier's classes: LabelSpace(V) (global) or LabelSpace(num_groups) (local)."""
  check_label_scheme(label_scheme)
  return LabelSpace(num_groups if label_scheme == 'local' else num_categories)


def scheme_targets(labels, num_categories: int, label_scheme: str,
                   num_groups: int) -> jax.Array:
  """The classifier's targets of category-id labels in LabelSpace(`num_categories`).

  global: the labels themselves; local: `local_groups`. Apply it AFTER augmentation.
  """
  check_label_scheme(label_scheme)
  if label_scheme == 'local':
    return local_groups(labels, num_categories, num_groups)
  return jnp.asarray(labels)
