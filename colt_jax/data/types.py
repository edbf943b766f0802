"""Typed records for the MediaEval diverse-retrieval datasets (Div400, Div150Cred).

Photo ids are kept as strings (Flickr ids are decimal digits, but run files and ground truth
compare them as text). Topic numbers are ints.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Topic:
  """One query: `<topic>` of the split's topics XML."""
  number: int
  title: str
  latitude: Optional[float]
  longitude: Optional[float]
  wiki: Optional[str]


@dataclasses.dataclass(frozen=True)
class Photo:
  """One `<photo>` of a topic's metadata XML (description with HTML removed)."""
  photo_id: str
  topic: int
  title: str
  tags: str
  description: str
  views: int
  rank: int  # Flickr's original result order (1 = first).
  user_id: Optional[str]  # `username` (Div400) or `userid` (Div150Cred) when present.
  date_taken: Optional[str] = None  # `date_taken` as written ("2010-08-14 18:23:36").
  url: Optional[str] = None  # `url_b` (Div400) or `url_b`/`url` (Div150Cred): the photo on Flickr.
  latitude: Optional[float] = None  # where it was taken, as written (Div400 writes 0, 0 for
  longitude: Optional[float] = None  # "no location"); None when the attribute is absent.

  @property
  def text(self) -> str:
    """Title, tags and description joined: the photo's metadata as one text."""
    return ' '.join(s for s in (self.title, self.tags, self.description) if s)


@dataclasses.dataclass(frozen=True)
class TopicGroundTruth:
  """Relevance (rGT) and diversity (dGT, dclusterGT) ground truth of one topic."""
  relevance: Mapping[str, int]  # photo id -> 1 (relevant), 0 (not), -1 (don't know)
  clusters: Mapping[str, int]  # relevant photo id -> cluster id (1..num_clusters)
  cluster_names: Mapping[int, str]  # cluster id -> original (unnormalised) name
  num_clusters: int  # the official scorer's count: the largest cluster id in dGT

  @property
  def relevant_ids(self) -> frozenset:
    return frozenset(p for p, r in self.relevance.items() if r == 1)


@dataclasses.dataclass
class Split:
  """One split (dev or test) of a dataset, read from the official layout."""
  dataset: str  # 'div400' | 'div150cred' | 'synthetic'
  split: str  # 'dev' | 'test'
  root: str  # the split directory that was read
  topics: Sequence[Topic]
  photos: Mapping[int, Sequence[Photo]]  # topic number -> photos sorted by Flickr rank
  ground_truth: Mapping[int, TopicGroundTruth]  # topic number -> ground truth
  # topic number -> the split directory its files are in, where it is not `root` (a split
  # merged from several, `folds.merge`: the dev and test topics of a cross-validation fold)
  topic_roots: Mapping[int, str] = dataclasses.field(default_factory=dict)

  def root_of(self, number: int) -> str:
    """The split directory holding topic `number`'s files (descriptors, images)."""
    return self.topic_roots.get(number, self.root)

  def topic(self, number: int) -> Topic:
    for t in self.topics:
      if t.number == number:
        return t
    raise KeyError(f'{self.dataset}/{self.split}: no topic {number}')

  @property
  def topic_numbers(self) -> list:
    return [t.number for t in self.topics]

  def all_photo_ids(self) -> list:
    """Every photo id of the split's collection, topic by topic, each id once."""
    seen, out = set(), []
    for t in self.topics:
      for p in self.photos[t.number]:
        if p.photo_id not in seen:
          seen.add(p.photo_id)
          out.append(p.photo_id)
    return out
