"""The TTC's configuration with what the paper does not have: `PairsTTCConfig`, the paper's
`TTCConfig` and nine fields of its own (the `colt` row's query-relative tokens, colt-pairs'
heads, their loss weights and token inputs), one flag each like the paper's.

The method `colt-pairs` (`train.method_registry`): the trainers' command line reads its flags
as this class when named (`experiments/train_ttc.py --method=colt-pairs`), and the reproduction
reads its flagfiles as this class; with its fields at their defaults its phi is the paper's
(`pairs.pairs_phi.PairsTokenClassifier`) and its step Eq. 5's. A config saved by the trainers
(config.json, every checkpoint) is flat and names its method (`"method": "colt-pairs"`).
"""
from __future__ import annotations

import dataclasses

from colt_jax.train.configs import TTCConfig, option
from colt_jax.util import flagcheck
from colt_jax.util.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class PairsTTCConfig(TTCConfig):
  """phi (Sec. 3.3-3.4) and, not in the paper, its query-relative tokens, relevance and pair
  heads (colt-pairs) and per-view or relational token inputs."""
  query_relative: bool = option(False, 'Also feed each token minus the query token (not in '
                                'the paper).')
  class_weight: float = option(1.0, 'Weight of the class head\'s cross-entropy (Eq. 5) in '
                               'phi\'s loss; 0 = the class head is not trained (needs '
                               '--relevance_weight or --pair_weight).', low=0.0)
  relevance_weight: float = option(0.0, 'Weight of the relevance head\'s BCE against rGT '
                                   '(not in the paper); 0 = phi has no relevance head.',
                                   low=0.0)
  pair_weight: float = option(0.0, 'Weight of the pairwise grouping head\'s class-balanced '
                              'BCE, P(same cluster) per pair of relevant images (not in the '
                              'paper); 0 = phi has no pair head.', low=0.0)
  pair_dim: int = option(0, 'Width of the pair head\'s projections (0 = phi\'s width).',
                         low=0, high=flagcheck.MAX_COUNT)
  view_tokens: bool = option(False, 'Each view of a view store (text, each official '
                             'descriptor, user, day) enters phi through its own projection '
                             'and LayerNorm, and the pair head reads each view\'s cosine of a '
                             'pair (not in the paper).')
  relational_tokens: bool = option(False, 'phi sees each photo only through its similarities '
                                   '(per view: cosine to the query, mean, max and top-5 mean '
                                   'cosine to the other photos), never its features (not in '
                                   'the paper).')
  appearance_tokens: bool = option(False, 'With --relational_tokens: each official '
                                   'descriptor of the view store (what a photo looks like, '
                                   'not which topic it is of) also enters phi through its '
                                   'own projection and LayerNorm, so that the relevance head '
                                   'can learn what relevant photos look like (not in the '
                                   'paper).')
  appearance_dim: int = option(0, 'With --appearance_tokens: each descriptor part first '
                               'projected to this many features (a bottleneck against '
                               'memorising the training photos), then to phi\'s width; 0 = '
                               'straight to its width.', low=0, high=flagcheck.MAX_COUNT)

  METHOD = 'colt-pairs'  # `train.method_registry`

  # Fields left out of a saved config (checkpoints, run digests) while they hold their
  # defaults, so that runs and checkpoints saved before them stay what they were
  # (`configs.saved_dict`; query_relative predates them and is always saved).
  OMITTED_AT_DEFAULT = ('class_weight', 'relevance_weight', 'pair_weight', 'pair_dim',
                        'view_tokens', 'relational_tokens', 'appearance_tokens',
                        'appearance_dim')

  def __post_init__(self):
    super().__post_init__()
    if self.appearance_dim and not self.appearance_tokens:
      raise ConfigError(f'--appearance_dim ({self.appearance_dim}) narrows the parts of '
                        '--appearance_tokens, which is off')
    if self.appearance_tokens and not self.relational_tokens:
      raise ConfigError('--appearance_tokens adds descriptor parts to --relational_tokens, '
                        'which is off (--view_tokens already feeds every part)')
    if not (self.class_weight or self.relevance_weight or self.pair_weight):
      raise ConfigError('--class_weight, --relevance_weight and --pair_weight are all 0: phi '
                        'would learn nothing')
    if self.class_weight != 1.0 and not (self.relevance_weight or self.pair_weight):
      raise ConfigError(f'--class_weight ({self.class_weight:g}) weighs the class head against '
                        '--relevance_weight and --pair_weight, which are 0: leave it at 1')

  @property
  def token_inputs(self) -> int:
    """2 with query-relative tokens (each token and its offset from the query), else 1."""
    return 2 if self.query_relative else 1

  @property
  def has_heads(self) -> bool:
    """Whether phi has a relevance or a pair head (a loss weight > 0)."""
    return bool(self.relevance_weight or self.pair_weight)

  @property
  def reads_parts(self) -> bool:
    """Whether phi reads the parts of a token apart (per-view or relational tokens)."""
    return self.view_tokens or self.relational_tokens
