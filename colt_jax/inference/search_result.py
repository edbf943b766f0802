"""One ranked list of Alg. 2, as the Retriever returns it."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """One ranked list: photo ids, phi's category per photo, its name, and the photo's cosine
  similarity (h^ to h_q)."""
  photo_ids: tuple
  categories: tuple
  category_names: tuple
  scores: tuple

  def entries(self) -> list:
    """[(photo id, score)]: a run file's lines."""
    return list(zip(self.photo_ids, self.scores))
