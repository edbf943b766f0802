"""The rows of the reproduction: `Variant` is one CoLT row (overrides of the SCL and TTC
flagfiles, how the list is made); `VARIANTS` are the rows of the paper's tables and those
beyond it, read from one file per row (experiments/configs/{paper,tuned}/rows/, see
`row_files`) in the order of `ROW_ORDER`, with the tuples of row names that say which rows run
where (`DEFAULT_VARIANTS`, `MAIN_VARIANTS`, `CV_VARIANTS`, `CV_ABLATIONS`, ...) and the grids
their choices score.
`reproduce_config.ReproduceConfig` is one reproduction over these rows; `row_training` trains
their models.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Optional

from colt_jax.data import views as views_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import metrics
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.pairs.inference import pairs_settings
from colt_jax.reproduction import row_files
from colt_jax.train import configs
from colt_jax.util.errors import ConfigError


# gbt-pairs: the learned non-neural baseline on the same signals (colt_jax/baselines/gbt_pairs.py),
# fitted on the training topics, its w chosen on their out-of-fold predictions (pool only).
BASELINES = ('flickr', 'topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan', 'gbt-pairs')
# What the paper-faithful row takes from this repo's configuration: compute only.
PAPER_COMPUTE_FIELDS = ('model_dim', 'num_heads', 'num_steps')
THRESHOLDS = (0.0, 0.7, 0.9, 1.0)  # irrelevant_threshold values the choices score
# w of the coverage selection (colt-pairs rows), chosen by an inner k-fold on training topics.
COVERAGE_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
# The cluster rule's grid of a row that chooses its selection rule (`Variant.choose_rule`):
# average-linkage thresholds on 1 - p_ij (lower: more, tighter clusters) x photos per cluster.
CLUSTER_THRESHOLDS = (0.1, 0.2, 0.3, 0.5)
CLUSTER_PER_CATEGORY = (1, 2)
STEPS = (100, 200, 300, 400, 600)  # phi's checkpoints the choices score
REPORT_METRICS = metrics.DEFAULT_COLUMNS
POSTS = ('ttc', 'topk', 'dbscan')  # how a row makes its list: phi, or g then top-k or DBSCAN
# Feature settings beyond the text view (issue 14), for CoLT rows and baselines alike; a row
# file names them (`NAMED`) instead of stating them.
DESCVIS_VIEWS = {'descriptors': views_lib.ALL_DESCRIPTORS, 'descriptor_weight': 1.0}
METADATA_VIEWS = dict(DESCVIS_VIEWS, metadata_weight=0.5)
NAMED = {'views': {'descvis': DESCVIS_VIEWS, 'descvis+metadata': METADATA_VIEWS}}



@dataclasses.dataclass(frozen=True)
class Variant:
  """One CoLT row: overrides of the SCL and TTC configs, and how the list is made.

  `scl=None` trains no g (raw f features: "without SCL"); `ttc=None` trains no phi and uses
  `post` ('topk' or 'dbscan') over the (re-encoded) features instead.
  """
  name: str
  table: str
  description: str
  scl: Optional[Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  ttc: Optional[Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  post: str = 'ttc'
  # Whose flagfiles the row starts from: 'colt' (configs/tuned/<dataset>_{scl,ttc}.flags, this
  # repo's configuration) or 'paper' (configs/paper/<dataset>_{scl,ttc}.flags, the paper's
  # hyper-parameters at `colt`'s PAPER_COMPUTE_FIELDS).
  base: str = 'colt'
  per_category: int = 1
  fill_excluded: bool = True  # fill short lists with phi's 'irrelevant' images
  irrelevant_threshold: Optional[float] = None  # None: ReproduceConfig.irrelevant_threshold
  list_length: int = evaluation.RUN_LENGTH  # photos per topic (k: the paper's reading)
  # The feature setting (`colt_jax.data.views.ViewSpec` fields): None = the text store alone.
  views: Optional[Mapping[str, Any]] = None
  # How the list is made (PairsInferenceSettings.selection): 'category' = Eq. 6;
  # 'coverage' / 'cluster' = from phi's relevance and pair heads (colt-pairs rows).
  selection: str = 'category'
  # w of 'coverage'; None: chosen on the training topics (`Reproduction.coverage_choice`).
  coverage_weight: Optional[float] = None
  # The row whose chosen w this row takes (an ablation of it); '' = its own choice.
  coverage_of: str = ''
  # phi's checkpoint the row ranks with (0: its last); chosen with w for colt-pairs rows.
  ttc_step: int = 0
  # The 'cluster' rule's threshold (None: PairsInferenceSettings' default).
  cluster_threshold: Optional[float] = None
  # Whether the training topics choose the rule as well: coverage (w) or clusters (threshold
  # and X over CLUSTER_THRESHOLDS x CLUSTER_PER_CATEGORY), with phi's checkpoint.
  choose_rule: bool = False
  # b of the selections: they read b p_ij + (1 - b) max(cos_ij, 0) (1 = phi's p alone).
  pair_blend: float = 1.0
  # The b values the training topics choose among with the rule (() = b stays `pair_blend`).
  pair_blends: tuple = ()
  # theta of the 'dpp' rule (None: PairsInferenceSettings' default), and the
  # thetas the training topics weigh it with beside the other rules (() = the DPP rule is not
  # offered).
  selection_theta: Optional[float] = None
  dpp_thetas: tuple = ()
  # The row's phi is the average of its seeds' phi (every seed of the reproduction, each
  # trained as the row trains it): one row, its rule the one `coverage_of` chose.
  ensemble: bool = False
  # A relevance model beside phi (colt_jax.pairs.relevance_model, fitted on the row's training
  # topics): a, its share of r, and the values of a the training topics choose among with
  # the rule (() = no relevance model).
  relevance_mix: float = 0.0
  relevance_mixes: tuple = ()

  def __post_init__(self):
    if self.base not in ('colt', 'paper'):
      raise ConfigError(f'Variant {self.name!r}: base must be colt or paper, got {self.base!r}')
    if self.views is not None:
      views_lib.ViewSpec(**self.views)  # checked now
    object.__setattr__(self, 'pair_blends', tuple(float(b) for b in self.pair_blends))
    object.__setattr__(self, 'dpp_thetas', tuple(float(t) for t in self.dpp_thetas))
    object.__setattr__(self, 'relevance_mixes', tuple(float(a) for a in self.relevance_mixes))
    if not all(0.0 <= a <= 1.0 for a in self.relevance_mixes + (self.relevance_mix,)):
      raise ConfigError(f'Variant {self.name!r}: relevance mixes must be in [0, 1]')
    if self.relevance_mixes and not self.choose_rule:
      raise ConfigError(f'Variant {self.name!r}: relevance_mixes are chosen with the rule: '
                        'they need choose_rule')
    if not all(0.0 <= t <= 1.0 for t in self.dpp_thetas):
      raise ConfigError(f'Variant {self.name!r}: DPP thetas must be in [0, 1]')
    if self.dpp_thetas and not self.choose_rule:
      raise ConfigError(f'Variant {self.name!r}: dpp_thetas are offered with the other rules: '
                        'they need choose_rule')
    if self.selection_theta is not None and (self.selection != 'dpp'
                                             or not 0.0 <= self.selection_theta <= 1.0):
      raise ConfigError(f'Variant {self.name!r}: selection_theta {self.selection_theta} is the '
                        'DPP rule\'s theta, in [0, 1]: it needs selection dpp')
    if not all(0.0 <= b <= 1.0 for b in self.pair_blends + (self.pair_blend,)):
      raise ConfigError(f'Variant {self.name!r}: pair blends must be in [0, 1]')
    if self.ensemble and (self.selection == 'category' or not self.coverage_of):
      raise ConfigError(f'Variant {self.name!r}: an ensemble row averages phi\'s heads: it '
                        'needs a selection from the heads and the row whose choice it takes')
    if self.post not in POSTS:
      raise ConfigError(f'Variant {self.name!r}: post must be one of {", ".join(POSTS)}, got '
                        f'{self.post!r}')
    if self.selection not in pairs_settings.SELECTIONS:
      raise ConfigError(f'Variant {self.name!r}: selection must be one of '
                        f'{", ".join(pairs_settings.SELECTIONS)}, got {self.selection!r}')
    if self.per_category < 1 or self.list_length < 1:
      raise ConfigError(f'Variant {self.name!r}: per_category and list_length must be >= 1')
    # An override names a field of the trainer's config and holds a value it takes: checked
    # now, not when the row is trained hours into a run.
    for part, cls in (('scl', configs.SCLConfig), ('ttc', PairsTTCConfig)):
      over = getattr(self, part) or {}
      fields = {f.name for f in dataclasses.fields(cls)}
      unknown = sorted(set(over) - fields)
      if unknown:
        raise ConfigError(f'Variant {self.name!r}: {part} field {unknown[0]!r} is not a field '
                          f'of {cls.__name__}')
      try:
        cls(**over)
      except ConfigError as e:
        raise ConfigError(f'Variant {self.name!r}: {part}: {e}') from None
      except (TypeError, ValueError) as e:
        raise ConfigError(f'Variant {self.name!r}: {part}: {e}') from None

  @property
  def view_spec(self) -> Optional['views_lib.ViewSpec']:
    return views_lib.ViewSpec(**self.views) if self.views else None

  @property
  def chooses_coverage_weight(self) -> bool:
    """Whether the row's w (coverage selection) is chosen on its training topics."""
    return self.selection == 'coverage' and self.coverage_weight is None


# Variant fields left out of a row's cache key while they hold their defaults (rows cached
# before these fields existed stay valid).
_NEW_VARIANT_FIELDS = {'selection': 'category', 'coverage_weight': None, 'coverage_of': '',
                       'ttc_step': 0, 'cluster_threshold': None, 'choose_rule': False,
                       'pair_blend': 1.0, 'pair_blends': (), 'ensemble': False,
                       'selection_theta': None, 'dpp_thetas': (), 'relevance_mix': 0.0,
                       'relevance_mixes': ()}


def variant_key(variant: Variant) -> dict:
  """`dataclasses.asdict(variant)` as a row's cache key holds it."""
  out = dataclasses.asdict(variant)
  for name, default in _NEW_VARIANT_FIELDS.items():
    if out[name] == default:
      del out[name]
  return out


# Every row, in the order reports list them: one file each, experiments/configs/paper/rows/
# (the paper's Tables 3-7 and the paper-faithful configuration) or
# experiments/configs/tuned/rows/ (this repository's rows), named `row_files.slug(name)`.json.
# The base configs are the flagfiles experiments/configs/tuned/<dataset>_{scl,ttc}.flags
# ("CoLT") and experiments/configs/paper/<dataset>_{scl,ttc}.flags (the paper's values).
# Beyond the paper: the `colt-pairs` rows, whose phi predicts what transfers to topics with
# unseen clusters, every signal (text, each official descriptor, user, day) its own token part.
# The rows that remove one official descriptor each (PER_VIEW_ABLATIONS) come last.
ROW_ORDER = (
    'colt', 'colt-paper', 'without SCL', 'SCL + DBSCAN', 'SCL + top-k', 'without DA',
    'global labels', 'all names', 'without fill', 'argmax labels', 'without pair (2)',
    'without pair (4)', 'alpha=0.99', 'X=2', 'X=3', 'L=6', 'L=8', 'L=10', 'N=150', 'N=250',
    'colt + descvis', 'colt + descvis + metadata',
    'colt-pairs', 'colt-pairs rule', 'colt-pairs blend', 'colt-pairs dpp',
    'colt-pairs relevance', 'colt-pairs ensemble', 'colt-pairs no-relevance-head',
    'colt-pairs no-pair-head', 'colt-pairs no-class-head', 'colt-pairs cluster',
    'colt-pairs feature tokens', 'colt-pairs text-only tokens',
    'colt-pairs without descriptors', 'colt-pairs without metadata',
) + tuple(f'colt-pairs without {d}' for d in views_lib.ALL_DESCRIPTORS)


def read_rows(root: str = '') -> tuple:
  """(rows in ROW_ORDER, name -> file, name -> choices) from the row files under `root`
  (`row_files.load_rows`; default `row_files.configs_root()`), each row's references checked."""
  rows, files, choices = row_files.load_rows(
      Variant, {f.name: f.type for f in dataclasses.fields(Variant)}, ROW_ORDER, root,
      named=NAMED)
  names = {v.name for v in rows}
  for v in rows:
    if v.coverage_of and v.coverage_of not in names:
      raise ConfigError(f'{files[v.name]}: field \'coverage_of\' names no row '
                        f'({v.coverage_of!r})')
  return rows, files, choices


@functools.lru_cache(maxsize=None)
def _from_files() -> dict:
  """The rows and the values read from their files (`FROM_FILES`), on first use."""
  rows, files, choices = read_rows()
  by_name = {v.name: v for v in rows}
  return {
      'VARIANTS': rows, 'ROW_FILES': files, 'ROW_CHOICES': choices,
      # phi of the colt-pairs rows (the relevance and pair heads beside the class head);
      # colt-pairs trains no g: phi sees similarities only, and g on the view store (text,
      # the descriptors, user and day: ~3,000 features) would cost hours of the
      # reproduction's budget for an effect that the `colt` rows measure (docs/RESULTS.md,
      # "What g does").
      'PAIRS_TTC': dict(by_name['colt-pairs'].ttc),
      # b of a row that blends phi's pair probabilities with the feature cosine
      # (`Variant.pair_blends`; PairsInferenceSettings.pair_blend): 1 = phi alone.
      'PAIR_BLENDS': by_name['colt-pairs blend'].pair_blends,
      # theta of the DPP rule (PairsInferenceSettings.selection_theta;
      # `Variant.dpp_thetas`), offered beside the coverage and cluster rules to a row that
      # chooses its rule: 1 = by relevance.
      'DPP_THETAS': by_name['colt-pairs dpp'].dpp_thetas,
      # a of a row with a relevance model beside phi (`Variant.relevance_mixes`;
      # PairsRetriever.with_relevance_model): r = (1 - a) r_phi + a r_model; 0 = phi alone.
      'RELEVANCE_MIXES': by_name['colt-pairs relevance'].relevance_mixes,
      'PER_VIEW_ABLATIONS': tuple(by_name[n] for n in OPT_IN_VARIANTS),
  }


# Module attributes read from the rows' files on first use (`__getattr__`): every row
# (`VARIANTS`, in ROW_ORDER), its file and choices, and the values code and tests use by name.
FROM_FILES = ('VARIANTS', 'ROW_FILES', 'ROW_CHOICES', 'PAIRS_TTC', 'PAIR_BLENDS', 'DPP_THETAS',
              'RELEVANCE_MIXES', 'PER_VIEW_ABLATIONS')


def __getattr__(name: str):
  if name in FROM_FILES:
    return _from_files()[name]
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def row(name: str) -> Variant:
  """The row named `name` (ConfigError naming the known rows when there is none)."""
  found = next((v for v in _from_files()['VARIANTS'] if v.name == name), None)
  if found is None:
    raise ConfigError(f'no row named {name!r}; rows: {", ".join(ROW_ORDER)}')
  return found


# One row per official descriptor, each removed alone (not run by default: ten more phi
# trainings, about 30 minutes, beyond the ~6 h budget; `reproduce.py --per_view_ablations`).
OPT_IN_VARIANTS = tuple(f'colt-pairs without {d}' for d in views_lib.ALL_DESCRIPTORS)
DEFAULT_VARIANTS = tuple(n for n in ROW_ORDER if n not in OPT_IN_VARIANTS)


# Rows that differ from another only in their feature setting: none on the synthetic data,
# which has no descriptors (the other rows run there on its text features).
VIEW_ABLATIONS = ('colt + descvis', 'colt + descvis + metadata', 'colt-pairs feature tokens',
                  'colt-pairs text-only tokens',
                  'colt-pairs without descriptors', 'colt-pairs without metadata') + OPT_IN_VARIANTS
MAIN_VARIANTS = ('colt', 'colt-paper')  # scored under every protocol
# Rows beyond `colt` that the cross-validation also scores (when selected): each fold applies
# its `colt` choice to them and chooses their own w on its training topics.
CV_VARIANTS = ('colt-pairs', 'colt-pairs rule', 'colt-pairs blend', 'colt-pairs ensemble',
               'colt-pairs dpp', 'colt-pairs relevance')
# Ablations of colt-pairs the cross-validation also scores with `ReproduceConfig.cv_ablations`
# (`reproduce.py --cv_ablations`: 20 more phi trainings a seed, about 80 minutes on 2 cores,
# beyond the ~6 h budget), at `cv_ablation_seeds` (0: the ablation seeds), each with the w
# (and checkpoint) its fold chose for colt-pairs: one head removed, or the descriptor and
# metadata parts. Not candidates a fold may choose, so they add no baseline settings. (The
# rows without descriptors, without metadata and without one descriptor stay dev -> test, to
# fit the budget.)
CV_ABLATIONS = ('colt-pairs no-relevance-head', 'colt-pairs no-pair-head',
                'colt-pairs no-class-head', 'colt-pairs text-only tokens')
