"""colt-pairs' inference settings: the paper's (Eq. 6's k and X, the list length, the
relevance threshold, the fill rule) and how a list is made from phi's relevance and
same-cluster probabilities instead of Eq. 6 (`pairs.head_selection`). Saved flat, in a file
naming the method `colt-pairs` (`train.method_registry`), as the settings of every model
directory and phi workdir saved before the paper's settings had a class of their own."""
from __future__ import annotations

import dataclasses

from colt_jax.inference.settings import InferenceSettings
from colt_jax.pairs import head_selection
from colt_jax.train import configs

# 'category': Eq. 6 over phi's class labels (the paper); the others colt-pairs' rules.
SELECTIONS = ('category',) + head_selection.RULES


@dataclasses.dataclass(frozen=True)
class PairsInferenceSettings(InferenceSettings):
  """The paper's settings and colt-pairs' selection (not in the paper): lists from phi's
  relevance and pair heads. With selection 'category', the paper's lists."""
  METHOD = 'colt-pairs'  # `train.method_registry`

  selection: str = configs.option(
      'category', 'How the list is made: category = Eq. 6 over phi\'s class labels (the '
      'paper); coverage = greedy expected coverage of phi\'s relevance and same-cluster '
      'probabilities (greedy.expected_coverage); cluster = their average-linkage clusters '
      'in a round-robin (selection.cluster_select); dpp = greedy MAP of a DPP with quality r '
      'and similarity p (selection.dpp_select).', choices=SELECTIONS)
  coverage_weight: float = configs.option(
      0.5, 'w of --selection=coverage: the next photo maximises w r_i + (1 - w) r_i '
      'prod_j (1 - r_j p_ij) over the photos j already listed.', low=0.0, high=1.0)
  cluster_threshold: float = configs.option(
      0.5, '--selection=cluster merges groups while their mean 1 - p_ij is below this.',
      low=0.0, high=2.0, low_open=True)
  selection_theta: float = configs.option(
      0.9, 'theta of --selection=dpp: the next photo maximises theta log r_i + (1 - theta) '
      'log d_i^2, d_i^2 its conditional variance under p given the photos listed (1 = by r).',
      low=0.0, high=1.0)
  pair_blend: float = configs.option(
      1.0, 'b of --selection=coverage, cluster or dpp: they read b p_ij + (1 - b) max(cos_ij, 0), '
      'phi\'s same-cluster probability blended with the two photos\' feature cosine (1 = phi '
      'alone).', low=0.0, high=1.0)

  @property
  def from_heads(self) -> bool:
    """Whether the list is made from phi's heads (a selection other than Eq. 6's)."""
    return self.selection != 'category'


def from_paper(settings: InferenceSettings) -> PairsInferenceSettings:
  """`settings` as PairsInferenceSettings (the paper's: selection 'category')."""
  if isinstance(settings, PairsInferenceSettings):
    return settings
  return PairsInferenceSettings(**dataclasses.asdict(settings))
