"""Global category vocabulary: every distinct cluster name of a dataset, with an integer id.

CoLT keeps "all different semantic categories in each dataset as prototypes". The categories
are the names of the dclusterGT files ("partial frontal view", "night view", ...); the same
name recurs across topics with spelling variants, which this module merges.

Normalisation rule (`normalize_name`): strip surrounding whitespace (CR/LF included), lowercase,
and collapse every internal run of whitespace to one space. So "Night  View \\r\\n" and
"night view" are one category. Ids are assigned in sorted order of the normalised names, so a
vocabulary depends only on the set of names, not on the order they were read in. Every
original spelling seen is kept per id (`originals`).
"""
from __future__ import annotations

import json
from typing import Iterable, Mapping, Optional, Sequence

from colt_jax.data.types import Split, TopicGroundTruth
from colt_jax.util import atomic

_FORMAT = 'colt_jax.category_vocabulary'
_VERSION = 1


def normalize_name(name: str) -> str:
  """The vocabulary key of a cluster name (see the module docstring)."""
  return ' '.join(name.split()).lower()


class CategoryVocabulary:
  """Normalised category names <-> ids 0..len-1, with the original spellings of each."""

  def __init__(self, names: Sequence[str], originals: Optional[Sequence[Iterable[str]]] = None):
    names = tuple(names)
    for n in names:
      if not isinstance(n, str) or not n or normalize_name(n) != n:
        raise ValueError(f'category name {n!r} is empty or not normalised')
    if len(set(names)) != len(names):
      raise ValueError('category names are not distinct')
    if originals is None:
      originals = [()] * len(names)
    if len(originals) != len(names):
      raise ValueError(f'{len(originals)} lists of originals for {len(names)} names')
    self._names = names
    self._ids = {n: i for i, n in enumerate(names)}
    self._originals = []
    for n, orig in zip(names, originals):
      orig = tuple(sorted(set(orig)))
      for o in orig:
        if normalize_name(o) != n:
          raise ValueError(f'original {o!r} does not normalise to {n!r}')
      self._originals.append(orig)

  @classmethod
  def from_names(cls, names: Iterable[str]) -> 'CategoryVocabulary':
    """A vocabulary of raw names (ids in sorted order of the normalised names)."""
    variants = {}
    for raw in names:
      key = normalize_name(raw)
      if not key:
        raise ValueError(f'empty category name {raw!r}')
      variants.setdefault(key, set()).add(raw)
    keys = sorted(variants)
    return cls(keys, [variants[k] for k in keys])

  @classmethod
  def from_splits(cls, splits: Iterable[Split]) -> 'CategoryVocabulary':
    """The vocabulary of every cluster name of every topic of `splits`."""
    return cls.from_names(name for s in splits for gt in s.ground_truth.values()
                          for name in gt.cluster_names.values())

  @property
  def names(self) -> tuple:
    """Normalised names; index = id."""
    return self._names

  def originals(self, category_id: int) -> tuple:
    """The original spellings seen for `category_id`, sorted."""
    if not 0 <= category_id < len(self._names):
      raise IndexError(f'no category id {category_id} (vocabulary of {len(self)})')
    return self._originals[category_id]

  def id_of(self, name: str) -> int:
    """The id of a (raw or normalised) name; KeyError when unknown."""
    key = normalize_name(name)
    try:
      return self._ids[key]
    except KeyError:
      raise KeyError(f'unknown category {name!r} (normalised {key!r}) in a vocabulary of '
                     f'{len(self)} categories') from None

  def get(self, name: str, default=None):
    return self._ids.get(normalize_name(name), default)

  def __contains__(self, name) -> bool:
    return isinstance(name, str) and normalize_name(name) in self._ids

  def __len__(self) -> int:
    return len(self._names)

  def __eq__(self, other) -> bool:
    if not isinstance(other, CategoryVocabulary):
      return NotImplemented
    return self._names == other._names and self._originals == other._originals

  def __repr__(self) -> str:
    return f'CategoryVocabulary({len(self)} categories)'

  def topic_labels(self, ground_truth: TopicGroundTruth) -> dict:
    """Relevant photo id -> global category id of its dGT cluster (via the cluster name)."""
    labels = {}
    for photo_id, cid in ground_truth.clusters.items():
      if ground_truth.relevance.get(photo_id) != 1:
        continue
      name = ground_truth.cluster_names.get(cid)
      if name is None:
        raise KeyError(f'cluster {cid} of photo {photo_id} has no name')
      labels[photo_id] = self.id_of(name)
    return labels

  def split_labels(self, split: Split) -> dict:
    """Topic number -> `topic_labels` of that topic."""
    return {t: self.topic_labels(gt) for t, gt in split.ground_truth.items()}

  def to_json(self) -> dict:
    return {'format': _FORMAT, 'version': _VERSION,
            'categories': [{'id': i, 'name': n, 'originals': list(self._originals[i])}
                           for i, n in enumerate(self._names)]}

  @classmethod
  def from_json(cls, obj: Mapping) -> 'CategoryVocabulary':
    if obj.get('format') != _FORMAT or obj.get('version') != _VERSION:
      raise ValueError(f'not a {_FORMAT} v{_VERSION} object: format={obj.get("format")!r} '
                       f'version={obj.get("version")!r}')
    cats = obj['categories']
    for i, c in enumerate(cats):
      if c.get('id') != i:
        raise ValueError(f'category #{i} has id {c.get("id")!r}; ids must be 0..n-1 in order')
    return cls([c['name'] for c in cats], [c.get('originals', ()) for c in cats])

  def save(self, path) -> None:
    """Writes JSON atomically (temporary file in the same directory, then os.replace)."""
    atomic.write_json(path, self.to_json(), ensure_ascii=False, sort_keys=False)

  @classmethod
  def load(cls, path) -> 'CategoryVocabulary':
    with open(path, encoding='utf-8') as f:
      return cls.from_json(json.load(f))
