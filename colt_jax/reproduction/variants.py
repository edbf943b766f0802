"""The rows of the reproduction and how their models are configured and trained.

`Variant` is one CoLT row (overrides of the SCL and TTC flagfiles, how the list is made);
`VARIANTS` are the rows of the paper's tables; `ReproduceConfig` is one reproduction (dataset,
feature setting, seeds, folds, protocols). `Trainer` trains g and phi of a row for a seed and
a set of training topics, each configuration once (keyed by a digest of the fields that decide
the model), resuming from checkpoints. `colt_jax/reproduction/pipeline.py` (the stages) and
`colt_jax/reproduction/tuning.py` (choices on training topics) build on this module.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from typing import Any, Callable, Mapping, Optional

from colt_jax.reproduction import choice_files as choices_lib
from colt_jax.train import configs
from colt_jax.data import splits as data_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.util import flagcheck
from colt_jax.evaluation import metrics
from colt_jax.data import views as views_lib
from colt_jax.encoders import stores
from colt_jax.util.errors import ConfigError
from colt_jax.train import trainers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The paper's values (Sec. 4.3) and this repository's tuned choices, each with its evidence.
PAPER_CONFIG_DIR = os.path.join(REPO, 'experiments', 'configs', 'paper')
CONFIG_DIR = os.path.join(REPO, 'experiments', 'configs', 'tuned')


def committed_rows_dir(dataset: str) -> str:
  """The row cache committed with the repository for `dataset` (relative to the repo root):
  every finished row and choice of the reproduction, so a fresh clone resumes from them."""
  return f'row-cache/{dataset}'
# gbt-pairs: the learned non-neural baseline on the same signals (colt_jax/pairs/pairlearner.py),
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
# b of a row that blends phi's pair probabilities with the feature cosine
# (`Variant.pair_blends`; retriever.InferenceSettings.pair_blend): 1 = phi alone.
PAIR_BLENDS = (1.0, 0.7, 0.4)
# theta of the DPP rule (retriever.InferenceSettings.selection_theta; `Variant.dpp_thetas`), offered
# beside the coverage and cluster rules to a row that chooses its rule: 1 = by relevance.
DPP_THETAS = (0.3, 0.5, 0.7, 0.9, 0.95, 0.98)
# a of a row with a relevance model beside phi (`Variant.relevance_mixes`;
# Retriever.with_relevance_model): r = (1 - a) r_phi + a r_model; 0 = phi alone.
RELEVANCE_MIXES = (0.0, 0.5, 1.0)
STEPS = (100, 200, 300, 400, 600)  # phi's checkpoints the choices score
# What reproduce and choose_steps write in their work folder (recorded in its manifest).
WORK_TREES = ('rows', 'train', 'runs', 'jax_cache')
CV_CHOICES = ('scl', 'label_scheme', 'X', 'views', 'ttc')  # what a cross-validation fold may choose
# What it chooses by default: label_scheme and views each double the phi trainings of every
# fold's choice, and on dev neither helped `colt` (the "global labels" row and the
# `colt + descvis` rows score below `colt`); the whole reproduction stays near its budget.
CV_DEFAULT_CHOICES = ('scl', 'X', 'ttc')
REPORT_METRICS = metrics.DEFAULT_COLUMNS


# Feature settings beyond the text view (issue 14), for CoLT rows and baselines alike.
DESCVIS_VIEWS = {'descriptors': views_lib.ALL_DESCRIPTORS, 'descriptor_weight': 1.0}
METADATA_VIEWS = dict(DESCVIS_VIEWS, metadata_weight=0.5)


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
  # Whose flagfiles the row starts from: 'colt' (<dataset>_*.flags, this repo's
  # configuration) or 'paper' (<dataset>_*.flags, the paper's hyper-parameters at `colt`'s
  # PAPER_COMPUTE_FIELDS).
  base: str = 'colt'
  per_category: int = 1
  fill_excluded: bool = True  # fill short lists with phi's 'irrelevant' images
  irrelevant_threshold: Optional[float] = None  # None: ReproduceConfig.irrelevant_threshold
  list_length: int = evaluation.RUN_LENGTH  # photos per topic (k: the paper's reading)
  # The feature setting (`colt_jax.data.views.ViewSpec` fields): None = the text store alone.
  views: Optional[Mapping[str, Any]] = None
  # How the list is made (retriever.InferenceSettings.selection): 'category' = Eq. 6;
  # 'coverage' / 'cluster' = from phi's relevance and pair heads (colt-pairs rows).
  selection: str = 'category'
  # w of 'coverage'; None: chosen on the training topics (`Reproduction.coverage_choice`).
  coverage_weight: Optional[float] = None
  # The row whose chosen w this row takes (an ablation of it); '' = its own choice.
  coverage_of: str = ''
  # phi's checkpoint the row ranks with (0: its last); chosen with w for colt-pairs rows.
  ttc_step: int = 0
  # The 'cluster' rule's threshold (None: retriever.InferenceSettings' default).
  cluster_threshold: Optional[float] = None
  # Whether the training topics choose the rule as well: coverage (w) or clusters (threshold
  # and X over CLUSTER_THRESHOLDS x CLUSTER_PER_CATEGORY), with phi's checkpoint.
  choose_rule: bool = False
  # b of the selections: they read b p_ij + (1 - b) max(cos_ij, 0) (1 = phi's p alone).
  pair_blend: float = 1.0
  # The b values the training topics choose among with the rule (() = b stays `pair_blend`).
  pair_blends: tuple = ()
  # theta of the 'dpp' rule (None: retriever.InferenceSettings' default), and the thetas the
  # training topics weigh it with beside the other rules (() = the DPP rule is not offered).
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


# phi of the colt-pairs rows: the relevance and pair heads beside the class head.
PAIRS_TTC = {'relevance_weight': 1.0, 'pair_weight': 1.0, 'relational_tokens': True}
# colt-pairs trains no g: phi sees similarities only, and g on the view store (text, the
# descriptors, user and day: ~3,000 features) would cost hours of the reproduction's budget
# for an effect that the `colt` rows measure (docs/RESULTS.md, "What g does").

# The rows of the paper's Tables 3-7 (ablations) plus the paper-faithful configuration. The
# base configs are the flagfiles `<dataset>_{scl,ttc}.flags` ("CoLT") and
# `<dataset>_{scl,ttc}.flags` (the paper's hyper-parameters).
VARIANTS = (
    Variant('colt', 'main', 'SCL + TTC (this repo\'s CPU configuration)'),
    Variant('colt-paper', 'main', 'SCL + TTC with the paper\'s hyper-parameters, global '
            'category labels and Eq. 6 as Sec. 3.3 reads: X photos from each of floor(k/X) '
            'predicted categories, "a retrieval list of length k" (when phi predicts fewer, '
            'the list is completed to k by query similarity; the short-list reading is the '
            '"without fill" ablation)', base='paper', fill_excluded=True,
            irrelevant_threshold=0.0, list_length=evaluation.MethodParams.k),
    Variant('without SCL', 'ablation', 'TTC on the raw f features', scl=None),
    Variant('SCL + DBSCAN', 'ablation', 'g, then UMONS\'s DBSCAN (tuned on dev)', ttc=None,
            post='dbscan'),
    Variant('SCL + top-k', 'ablation', 'g, then top-k', ttc=None, post='topk'),
    Variant('without DA', 'ablation', 'TTC trained without augmentation',
            ttc={'no_augment': True}),
    Variant('global labels', 'ablation', 'phi labels vocabulary categories (the paper\'s '
            'labels) instead of topic-local groups', ttc={'label_scheme': 'global'}),
    Variant('all names', 'ablation', 'the SCL bank and global labels from every split\'s '
            'cluster names, held-out ones included (the old behaviour: uses held-out names; '
            'compare with "global labels")',
            scl={'vocabulary': 'all'}, ttc={'vocabulary': 'all', 'label_scheme': 'global'}),
    Variant('without fill', 'ablation', 'Eq. 6 as in the paper: a list of k photos, and '
            'images labelled irrelevant never fill it (it may be short)', fill_excluded=False,
            list_length=evaluation.MethodParams.k),
    Variant('argmax labels', 'ablation', 'phi\'s argmax decides relevance (Eq. 4) instead of '
            'the dev-chosen irrelevant_threshold', irrelevant_threshold=0.0),
    Variant('without pair (2)', 'pairs', 'SCL without pair (2) of Eq. 2',
            scl={'no_pair2': True}),
    Variant('without pair (4)', 'pairs', 'SCL without pair (4) of Eq. 2',
            scl={'no_pair4': True}),
    Variant('alpha=0.99', 'bank', 'Eq. 3 read as momentum: a prototype keeps 99% of itself '
            'per update (the flagfiles\' alpha = 0.01, Sec. 4.3, keeps 1%)',
            scl={'alpha': 0.99}),
    Variant('X=2', 'X', 'two images per category (Eq. 6)', per_category=2),
    Variant('X=3', 'X', 'three images per category (Eq. 6)', per_category=3),
    Variant('L=6', 'L', 'six encoder layers', ttc={'num_layers': 6}),
    Variant('L=8', 'L', 'eight encoder layers', ttc={'num_layers': 8}),
    Variant('L=10', 'L', 'ten encoder layers', ttc={'num_layers': 10}),
    Variant('N=150', 'N', '150 candidate images', ttc={'num_images': 150}),
    Variant('N=250', 'N', '250 candidate images', ttc={'num_images': 250}),
    Variant('colt + descvis', 'views', 'f = text + the ten official visual descriptors '
            '(colt_jax.data.views: z-scored with the training photos\' statistics, equal weight '
            'to the text part; the candidate order stays text-only)', views=DESCVIS_VIEWS),
    Variant('colt + descvis + metadata', 'views', 'f = text + descriptors + the photo\'s user '
            'and day taken (one-hots, weight 0.5)', views=METADATA_VIEWS),
    # Beyond the paper: phi predicts what transfers to topics with unseen clusters, and every
    # signal (text, each official descriptor, user, day) is its own token part.
    Variant('colt-pairs', 'heads', 'phi also predicts each image\'s relevance and, per pair '
            'of images, P(same cluster) (relevance and pair heads, the class head kept); phi '
            'sees each photo through its similarities alone, per view (text, each official '
            'descriptor, user, day: cosine to the query, mean, max and top-5 cosine to the '
            'topic\'s other photos), and the pair head reads each view\'s cosine of the pair; '
            'the list by greedy expected coverage, w and phi\'s checkpoint chosen on the '
            'training topics', scl=None, ttc=PAIRS_TTC,
            views=METADATA_VIEWS, selection='coverage'),
    Variant('colt-pairs rule', 'heads', 'colt-pairs\' phi (the same trainings), its selection '
            'rule chosen with phi\'s checkpoint on the training topics: greedy expected '
            'coverage (w) or average-linkage clusters of 1 - p_ij over the images with r > 0.5 '
            '(threshold, X per cluster)', scl=None, ttc=PAIRS_TTC, views=METADATA_VIEWS,
            selection='coverage', choose_rule=True),
    Variant('colt-pairs blend', 'heads', 'colt-pairs\' phi (the same trainings), the rule '
            'chosen as for `colt-pairs rule` and with it b: the selections read '
            'b p_ij + (1 - b) max(cos_ij, 0), phi\'s pair probability blended with the two '
            'photos\' feature cosine (text, descriptors, user and day, as DPP and MMR read '
            'them), b among 1, 0.7, 0.4', scl=None, ttc=PAIRS_TTC, views=METADATA_VIEWS,
            selection='coverage', choose_rule=True, pair_blends=PAIR_BLENDS),
    Variant('colt-pairs dpp', 'heads', 'colt-pairs\' phi (the same trainings), its rule '
            'chosen as for `colt-pairs rule` with a third rule offered: greedy MAP of a DPP '
            'whose kernel is phi\'s heads, quality r and similarity p_ij (the next photo '
            'maximises theta log r_i + (1 - theta) log d_i^2), theta among '
            + ', '.join(f'{t:g}' for t in DPP_THETAS),
            scl=None, ttc=PAIRS_TTC, views=METADATA_VIEWS, selection='coverage',
            choose_rule=True, dpp_thetas=DPP_THETAS),
    Variant('colt-pairs relevance', 'heads', 'colt-pairs\' phi (the same trainings) and a '
            'relevance model beside it (colt_jax.pairs.relevance_model: a gradient-boosted '
            'classifier of P(relevant) over each photo\'s text cosine to the query, its place '
            'in the pool and its ten official descriptors, fitted on the training topics); the '
            'selections read r = (1 - a) r_phi + a r_model, a among '
            + ', '.join(f'{a:g}' for a in RELEVANCE_MIXES) + ', chosen with the rule as for '
            '`colt-pairs rule`', scl=None, ttc=PAIRS_TTC, views=METADATA_VIEWS,
            selection='coverage', choose_rule=True, relevance_mixes=RELEVANCE_MIXES),
    Variant('colt-pairs ensemble', 'heads', 'the average of the three seeds\' phi of '
            '`colt-pairs blend` (their relevance and pair probabilities averaged), with the '
            'rule and b that `colt-pairs blend` chose on the training topics (made with one '
            'seed\'s phi); one row', scl=None, ttc=PAIRS_TTC, views=METADATA_VIEWS,
            selection='coverage', coverage_of='colt-pairs blend', ensemble=True),
    Variant('colt-pairs no-relevance-head', 'heads', 'colt-pairs without the relevance head: '
            'r from the class head (1 - P(irrelevant))',
            scl=None, ttc=dict(PAIRS_TTC, relevance_weight=0.0), views=METADATA_VIEWS,
            selection='coverage', coverage_of='colt-pairs'),
    Variant('colt-pairs no-pair-head', 'heads', 'colt-pairs without the pair head: p_ij from '
            'the class head (P(same class | both relevant))',
            scl=None, ttc=dict(PAIRS_TTC, pair_weight=0.0), views=METADATA_VIEWS,
            selection='coverage', coverage_of='colt-pairs'),
    Variant('colt-pairs no-class-head', 'heads', 'colt-pairs trained without the class '
            'head\'s loss (class_weight 0)', scl=None, ttc=dict(PAIRS_TTC, class_weight=0.0),
            views=METADATA_VIEWS,
            selection='coverage', coverage_of='colt-pairs'),
    Variant('colt-pairs cluster', 'heads', 'colt-pairs\' phi, the list by average-linkage '
            'clusters of 1 - p_ij (threshold 0.5) over the images with r > 0.5, X per cluster '
            'in a round-robin (selection.cluster_select)', scl=None, ttc=PAIRS_TTC, views=METADATA_VIEWS,
            selection='cluster'),
    Variant('colt-pairs feature tokens', 'heads', 'colt-pairs whose tokens are the features '
            'themselves (a projection and LayerNorm per view, summed) instead of their '
            'similarities', scl=None, ttc=dict(PAIRS_TTC, relational_tokens=False, view_tokens=True),
            views=METADATA_VIEWS, selection='coverage', coverage_of='colt-pairs'),
    Variant('colt-pairs text-only tokens', 'heads', 'colt-pairs on the text features alone '
            '(no descriptor or metadata part)', scl=None, ttc=PAIRS_TTC,
            selection='coverage', coverage_of='colt-pairs'),
    Variant('colt-pairs without descriptors', 'heads', 'colt-pairs without the ten official '
            'descriptors\' parts (text, user, day)', scl=None, ttc=PAIRS_TTC,
            views={'metadata_weight': 0.5}, selection='coverage',
            coverage_of='colt-pairs'),
    Variant('colt-pairs without metadata', 'heads', 'colt-pairs without the user and day parts '
            '(text and the descriptors)', scl=None, ttc=PAIRS_TTC, views=DESCVIS_VIEWS,
            selection='coverage', coverage_of='colt-pairs'),
)


def _without_descriptor(name: str) -> Variant:
  return Variant(f'colt-pairs without {name}', 'heads', f'colt-pairs without the {name} '
                 'descriptor\'s part (text, the other nine descriptors, user, day)', scl=None,
                 ttc=PAIRS_TTC, views=dict(METADATA_VIEWS, descriptors=tuple(
                     d for d in views_lib.ALL_DESCRIPTORS if d != name)),
                 selection='coverage', coverage_of='colt-pairs')


# One row per official descriptor, each removed alone (not run by default: ten more phi
# trainings, about 30 minutes, beyond the ~6 h budget; `reproduce.py --per_view_ablations`).
PER_VIEW_ABLATIONS = tuple(_without_descriptor(n) for n in views_lib.ALL_DESCRIPTORS)
VARIANTS += PER_VIEW_ABLATIONS
OPT_IN_VARIANTS = tuple(v.name for v in PER_VIEW_ABLATIONS)
DEFAULT_VARIANTS = tuple(v.name for v in VARIANTS if v.name not in OPT_IN_VARIANTS)


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


@dataclasses.dataclass(frozen=True)
class ReproduceConfig:
  dataset: str = 'div400'
  data_dir: str = ''
  encoder: str = 'minilm'
  features_root: str = ''  # stores <features_root>/<split>; '' = work/features/<dataset>-<encoder>
  workdir: str = ''  # default work/reproduce/<dataset>
  # The row cache (every finished row and choice, keyed by its configuration): '' =
  # <workdir>/rows. reproduce.py keeps it in row-cache/<dataset>, committed, so a later
  # session or a fresh clone resumes from the rows finished before (trainings are not kept).
  rows_dir: str = ''
  results_dir: str = ''  # run files + results.json; default docs/results/<dataset>
  doc: str = ''  # markdown report; default docs/RESULTS.md
  seeds: tuple = (0, 1, 2)
  # Seeds of the ablation rows (every row but MAIN_VARIANTS and CV_VARIANTS; CV_ABLATIONS in
  # the cross-validation follow `cv_ablation_seeds` when it is set): the first this many of
  # `seeds` (the whole reproduction stays within its ~6 h budget on 2 cores).
  ablation_seeds: int = 1
  # Seeds of colt-pairs' cross-validated ablations (`cv_ablations`): the first this many of
  # `seeds`; 0: `ablation_seeds`. The cross-validation is the primary protocol: its
  # ablations can run every seed while the dev -> test ablations keep to the first.
  cv_ablation_seeds: int = 0
  folds: int = 5
  fold_seed: int = 0
  protocols: tuple = ('pool', 'global')
  ablation_protocols: tuple = ('pool',)  # protocols of the ablation rows (not colt/colt-paper)
  cv_protocols: tuple = ('pool',)  # protocols of the cross-validation
  # Each cross-validation fold chooses the `colt` row's settings by an inner k-fold over its
  # own training topics (colt_jax/reproduction/tuning.py), never from the dev choice flagfiles, whose
  # hold-out topics are held out by some folds: 'ttc' (phi's steps x irrelevant_threshold,
  # always), 'label_scheme' (x local/global labels), 'X' (x images per category over
  # choice_per_category, Eq. 6), 'scl' (g's beta x learning rate over cv_scl_grid, chosen
  # first, scored as SCL + top-k, on text features), 'views' (x text or each of cv_views).
  inner_folds: int = 3
  cv_choose: tuple = CV_DEFAULT_CHOICES
  choice_per_category: tuple = (1, 2)
  # g's grid spans weak to strongly active g (issue: g inert as chosen on dev): lr 1e-3,
  # beta 0.02 or 0.5, the last layer zero-initialised or not; each setting's effect size
  # (||beta g(h)|| / ||h||, topics whose top-20 changes) is recorded with its inner-fold score.
  cv_scl_grid: tuple = (('beta', (0.02, 0.5)), ('learning_rate', (1e-3,)),
                        ('zero_init', (True, False)))
  # 'views': the feature settings a fold weighs against text alone (colt_jax.data.views; the
  # official layout's descriptors; skipped on the synthetic data, which has none).
  cv_views: tuple = (DESCVIS_VIEWS,)
  choice_steps: tuple = (100, 200, 300, 400)  # phi's checkpoints a fold's choice scores
  # phi's steps of the colt-pairs rows (selection from the heads), their own schedule in every
  # protocol and fold (the checkpoint among the last three, every 100 steps, is chosen with w
  # on the training topics); 0: the `colt` row's steps (the dev or the fold's choice). Set by
  # the compute budget, not tuned: a colt-pairs step costs ~3x a `colt` step on 2 cores (the
  # per-view similarities of 32 x 201 x 201 tokens), and its trainings are most of the
  # reproduction's time.
  pairs_steps: int = 300
  variants: tuple = DEFAULT_VARIANTS
  cv_ablations: bool = False  # also score CV_ABLATIONS (those selected) in cross-validation
  config_dir: str = CONFIG_DIR  # the tuned flagfiles and choices (`colt`'s)
  paper_config_dir: str = PAPER_CONFIG_DIR  # the paper's values (`colt-paper`'s)
  colt_flags: str = ''  # flagfile stem of `colt` (default <dataset>)
  paper_flags: str = ''  # flagfile stem of the paper's values (default <dataset>)
  # phi's 'irrelevant' only above this probability (evaluation.MethodParams). < 0: the value
  # experiments/choose_steps.py chose on dev for the protocol (colt_jax/reproduction/choice_files.py:
  # <config_dir>/<dataset>_phi_<protocol>.choice.flags; 0, the plain argmax, when there is none).
  irrelevant_threshold: float = -1.0
  scl_steps: int = 0  # 0 = the flagfiles' num_steps
  # phi's steps: > 0 this many; 0 the flagfiles'; < 0 the steps chosen on dev for the
  # protocol (the same choice flagfile; the flagfiles' when there is no choice). `colt-paper` follows
  # `colt`'s schedule.
  ttc_steps: int = -1
  progress: bool = True
  # JAX's persistent compilation cache in <workdir>/jax_cache (devices.use_compilation_cache):
  # the commands turn it on (--compilation_cache); results do not depend on it.
  compilation_cache: bool = False

  def __post_init__(self):
    if self.dataset not in configs.DATASETS:
      raise ConfigError(f'--dataset must be one of {", ".join(configs.DATASETS)}; got '
                        f'{self.dataset!r}')
    if not self.seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                             or s > flagcheck.MAX_SEED for s in self.seeds):
      raise ConfigError(f'--seeds must be one or more integers in [0, {flagcheck.MAX_SEED}], '
                        f'got {self.seeds!r}')
    if not 1 <= self.ablation_seeds <= len(self.seeds):
      raise ConfigError(f'ablation_seeds must be in [1, {len(self.seeds)}] (the seeds), got '
                        f'{self.ablation_seeds}')
    if not 0 <= self.cv_ablation_seeds <= len(self.seeds):
      raise ConfigError(f'cv_ablation_seeds must be in [0, {len(self.seeds)}] (0: '
                        f'ablation_seeds; the seeds), got {self.cv_ablation_seeds}')
    if len(set(self.seeds)) != len(self.seeds):
      raise ConfigError(f'--seeds: a seed is given twice, got {self.seeds!r}')
    if self.folds == 1 or self.folds < 0 or self.folds > flagcheck.MAX_COUNT:
      raise ConfigError(f'--folds must be 0 (none) or >= 2, got {self.folds}')
    for name in ('protocols', 'ablation_protocols', 'cv_protocols'):
      bad = [p for p in getattr(self, name) if p not in configs.PROTOCOLS]
      if bad or (name == 'protocols' and not self.protocols):
        raise ConfigError(f'--{"protocol" if name == "protocols" else name} must name some of '
                          f'{", ".join(configs.PROTOCOLS)}; got {getattr(self, name)!r}')
    if not self.variants:
      raise ConfigError('--variants must name at least one CoLT row')
    unknown = sorted(set(self.variants) - {v.name for v in VARIANTS})
    if unknown:
      raise ConfigError(f'--variants: unknown {unknown}; expected some of '
                        f'{[v.name for v in VARIANTS]}')
    if self.scores_cv_ablations() and 'colt-pairs' not in self.variants:
      raise ConfigError('--cv_ablations: colt-pairs\' ablations take the w each fold chose for '
                        'colt-pairs; select it too (--variants)')
    if not 2 <= self.inner_folds <= flagcheck.MAX_COUNT:
      raise ConfigError(f'--inner_folds must be >= 2, got {self.inner_folds}')
    bad = [c for c in self.cv_choose if c not in CV_CHOICES]
    if bad or 'ttc' not in self.cv_choose:
      raise ConfigError(f'--cv_choose must include ttc and name only {", ".join(CV_CHOICES)}; '
                        f'got {self.cv_choose!r}')
    if (not self.choice_steps or min(self.choice_steps) < 1
        or max(self.choice_steps) > flagcheck.MAX_STEPS):
      raise ConfigError(f'--choice_steps must be steps >= 1, got {self.choice_steps!r}')
    if self.irrelevant_threshold > 1:
      raise ConfigError(f'irrelevant_threshold must be <= 1 (< 0: the dev choice), got '
                        f'{self.irrelevant_threshold}')
    if self.scl_steps < 0:
      raise ConfigError(f'scl_steps must be >= 0, got {self.scl_steps}')
    if not 0 <= self.pairs_steps <= flagcheck.MAX_STEPS:
      raise ConfigError(f'pairs_steps must be in [0, {flagcheck.MAX_STEPS}], got '
                        f'{self.pairs_steps}')

  def command(self) -> str:
    """The reproduce.py command line of this configuration: the dataset, and every flag that
    changes which rows are computed or how (seeds, folds, protocols, variants, ...) where it
    differs from its default (a report names the command that made it)."""
    default = ReproduceConfig(dataset=self.dataset)
    parts = [f'python experiments/reproduce.py --dataset {self.dataset}']
    for field, flag in (('seeds', 'seeds'), ('ablation_seeds', 'ablation_seeds'),
                        ('folds', 'folds'), ('protocols', 'protocol'),
                        ('variants', 'variants'), ('inner_folds', 'inner_folds'),
                        ('pairs_steps', 'pairs_steps')):
      value = getattr(self, field)
      if field == 'variants' and set(value) == set(default.variants) | set(OPT_IN_VARIANTS):
        parts.append('--per_view_ablations')  # the default rows and the opt-in ones
        continue
      if value != getattr(default, field):
        text = ','.join(map(str, value)) if isinstance(value, tuple) else str(value)
        parts.append(f'--{flag}={text}' if ' ' not in text else f"--{flag}='{text}'")
    if self.scores_cv_ablations():
      parts.append('--cv_ablations')
      if self.cv_ablation_seeds and self.cv_ablation_seeds != self.ablation_seeds:
        parts.append(f'--cv_ablation_seeds={self.cv_ablation_seeds}')
    if set(self.cv_choose) != set(default.cv_choose):
      parts += [f'--cv_choose={c}' for c in self.cv_choose if c != 'ttc']
    return ' '.join(parts)

  def scores_cv_ablations(self) -> bool:
    """Whether the cross-validation scores some of CV_ABLATIONS (`cv_ablations`, folds and
    such a row selected)."""
    return bool(self.cv_ablations and self.folds and set(self.variants) & set(CV_ABLATIONS))

  def own_schedule(self, variant: 'Variant') -> 'Variant':
    """`variant` with `pairs_steps` as phi's steps when it is a colt-pairs row (its list made
    from the heads) that sets none itself."""
    if (self.pairs_steps and variant.selection != 'category' and variant.ttc is not None
        and 'num_steps' not in variant.ttc):
      return dataclasses.replace(variant, ttc=dict(variant.ttc, num_steps=self.pairs_steps))
    return variant

  def seeds_of(self, variant: 'Variant', cross_validation: bool = False) -> tuple:
    """The seeds `variant`'s row is trained with (`ablation_seeds` for ablations;
    `cv_ablation_seeds` for colt-pairs' ablations in the cross-validation)."""
    if variant.ensemble:  # one row: its phi averages every seed's (stages.colt_rows)
      return tuple(self.seeds[:1])
    if variant.name in MAIN_VARIANTS or variant.name in CV_VARIANTS:
      return tuple(self.seeds)
    if cross_validation and variant.name in CV_ABLATIONS:
      return tuple(self.seeds[:self.cv_ablation_seeds_used])
    return tuple(self.seeds[:self.ablation_seeds])

  @property
  def cv_ablation_seeds_used(self) -> int:
    """How many seeds colt-pairs' cross-validated ablations run (`cv_ablation_seeds`)."""
    return self.cv_ablation_seeds or self.ablation_seeds

  def check_topics(self) -> None:
    """--folds and --inner_folds against the topics of dev + test (read, never generated
    here), before any work: each fold holds out topics and trains on the others, and each
    fold's training topics are cut into --inner_folds parts."""
    if not self.folds:
      return
    total = 0
    for split in configs.SPLITS:
      root = data_lib.resolve(self.dataset, split, self.data_dir).data_dir
      total += len(data_lib.load_split(self.dataset, root, split).topics)
    why = f'{self.dataset} dev + test have {total} topics'
    flagcheck.check_range('--folds', self.folds, 2, total, why=why)
    smallest = total - -(-total // self.folds)  # the training topics of the largest fold
    flagcheck.check_range('--inner_folds', self.inner_folds, 2, smallest,
                          why=f'{why}; a fold trains on as few as {smallest}')

  @property
  def results_path(self) -> str:
    return self.results_dir or os.path.join('docs', 'results', self.dataset)

  @property
  def doc_path(self) -> str:
    return self.doc or os.path.join('docs', 'RESULTS.md')

  @property
  def colt_stem(self) -> str:
    """Flagfile stem of the `colt` row (the synthetic default has one pair of flagfiles)."""
    if self.colt_flags:
      return self.colt_flags
    # A configs folder written before the tuned flagfiles were named for their dataset alone
    # (data_prep/make_dataset.py's <out>/configs/) names them <dataset>_{scl,ttc}.flags.
    legacy = f'{self.dataset}_colt'
    if (not os.path.isfile(os.path.join(self.config_dir, f'{self.dataset}_scl.flags'))
        and os.path.isfile(os.path.join(self.config_dir, f'{legacy}_scl.flags'))):
      return legacy
    return self.dataset

  def protocol_choice(self, protocol: str) -> Optional[configs.ProtocolChoice]:
    """phi's steps and threshold chosen on dev for `protocol` (None: no choice made)."""
    return choices_lib.read_protocol_choice(self.config_dir, self.dataset, protocol)

  def threshold_for(self, protocol: str) -> float:
    if self.irrelevant_threshold >= 0:
      return self.irrelevant_threshold
    choice = self.protocol_choice(protocol)
    return choice.irrelevant_threshold if choice else 0.0

  def ttc_steps_for(self, protocol: str, default: int) -> int:
    """phi's number of steps under `protocol` (see `ttc_steps`); `default`: the flagfile's."""
    if self.ttc_steps >= 0:
      return self.ttc_steps or default
    choice = self.protocol_choice(protocol)
    return choice.num_steps if choice else default

  def choice_flagfiles(self) -> list:
    """Every flagfile a dev choice of the `colt` row is written into."""
    return ([os.path.join(self.config_dir, f'{self.colt_stem}_{c}.flags') for c in ('scl', 'ttc')]
            + [choices_lib.protocol_choice_path(self.config_dir, self.dataset, p)
               for p in configs.PROTOCOLS])


# ----------------------------------------------------------------------------- helpers


def digest(obj: Any) -> str:
  text = json.dumps(obj, sort_keys=True, default=str, allow_nan=False)
  return hashlib.sha256(text.encode()).hexdigest()[:12]


def read_json(path: str) -> Optional[Any]:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def ensure_features(cfg: ReproduceConfig, split: str, log: Callable = print) -> str:
  """The split's feature store directory, extracting it first when it does not exist
  (`colt_jax.encoders.stores.extract_split`: resumable after an interruption)."""
  out = (os.path.join(cfg.features_root, split) if cfg.features_root
         else stores.default_store_dir(cfg.dataset, cfg.encoder, split))
  if os.path.isfile(os.path.join(out, 'meta.json')):
    log(f'features: reusing {out}')
    return out
  log(f'features: extracting {cfg.dataset}/{split} with {cfg.encoder} -> {out} '
      '(resumable: rerun after an interruption)')
  stores.extract_split(cfg.dataset, split, cfg.encoder, out, data_dir=cfg.data_dir,
                       progress=cfg.progress)
  return out


def base_configs(cfg: ReproduceConfig, paper: bool) -> tuple:
  """(SCLConfig, TTCConfig) from the dataset's flagfiles (CoLT's or the paper's)."""
  data_dir = os.path.abspath(cfg.data_dir) if cfg.data_dir else ''
  stem = (cfg.paper_flags or cfg.dataset) if paper else cfg.colt_stem
  folder = cfg.paper_config_dir if paper else cfg.config_dir
  scl = configs.from_flagfile(configs.SCLConfig, os.path.join(folder, f'{stem}_scl.flags'),
                              data_dir=data_dir)
  ttc = configs.from_flagfile(configs.TTCConfig, os.path.join(folder, f'{stem}_ttc.flags'),
                              data_dir=data_dir)
  if cfg.scl_steps:
    scl = dataclasses.replace(scl, num_steps=cfg.scl_steps)
  if cfg.ttc_steps > 0:
    ttc = dataclasses.replace(ttc, num_steps=cfg.ttc_steps)
  return scl, ttc


def _trained_key(config: Any) -> dict:
  """The fields of a config that decide the trained model (not where it is written)."""
  skip = {'workdir', 'checkpoint_every', 'max_to_keep', 'log_every', 'data_dir', 'features_dir'}
  return {k: v for k, v in configs.saved_dict(config).items() if k not in skip}


class Trainer:
  """Trains g and phi for a variant, seed and training split, each configuration once."""

  def __init__(self, cfg: ReproduceConfig, root: str, log: Callable = print):
    self.cfg, self.root, self.log = cfg, root, log

  def configs_for(self, variant: Variant, seed: int, tag: str,
                  protocol: Optional[str] = None) -> tuple:
    """(SCLConfig or None, TTCConfig or None) of `variant`, with their workdirs set; phi's
    training sequences follow `protocol` (default: its flagfile's)."""
    scl_over = dict(variant.scl) if variant.scl is not None else None
    ttc_over = dict(variant.ttc) if variant.ttc is not None else None
    paper = variant.base == 'paper'
    scl, ttc = base_configs(self.cfg, paper)
    if paper:  # the paper's hyper-parameters at this repo's CPU width and schedule
      colt_scl, colt_ttc = base_configs(self.cfg, paper=False)
      scl = dataclasses.replace(scl, num_steps=colt_scl.num_steps)
      ttc = dataclasses.replace(ttc, **{k: getattr(colt_ttc, k) for k in PAPER_COMPUTE_FIELDS})
    scl_cfg = ttc_cfg = None
    # A feature setting beyond text trains on other inputs: it joins the keys (text-only keys
    # stay as they were, so earlier trainings are reused).
    views = {'views': dict(variant.views)} if variant.views else {}
    if scl_over is not None:
      scl_cfg = dataclasses.replace(scl, seed=seed, split=tag, **scl_over)
      scl_cfg = dataclasses.replace(
          scl_cfg, workdir=os.path.join(self.root, 'train', tag,
                                        f'scl-{digest(dict(_trained_key(scl_cfg), **views))}'))
    if ttc_over is not None:
      ttc_cfg = dataclasses.replace(ttc, seed=seed, split=tag,
                                    scl_checkpoint=scl_cfg.workdir if scl_cfg else '',
                                    **ttc_over)
      if protocol is not None:
        ttc_cfg = dataclasses.replace(ttc_cfg, protocol=protocol)
        if 'num_steps' not in ttc_over:
          ttc_cfg = dataclasses.replace(
              ttc_cfg, num_steps=self.cfg.ttc_steps_for(protocol, ttc_cfg.num_steps))
      key = dict(_trained_key(ttc_cfg), scl=_trained_key(scl_cfg) if scl_cfg else None, **views)
      ttc_cfg = dataclasses.replace(
          ttc_cfg, workdir=os.path.join(self.root, 'train', tag, f'ttc-{digest(key)}'))
    return scl_cfg, ttc_cfg

  def train(self, variant: Variant, seed: int, split_data: tuple, tag: str,
            protocol: Optional[str] = None) -> tuple:
    scl_cfg, ttc_cfg = self.configs_for(variant, seed, tag, protocol)
    for name, c, fn in (('g (SCL)', scl_cfg, trainers.train_scl),
                        ('phi (TTC)', ttc_cfg, trainers.train_ttc)):
      if c is None or _finished(c):
        continue
      t0 = time.perf_counter()
      self.log(f'  train {name}: {variant.name}, seed {seed}, {tag}, {c.protocol} protocol '
               f'-> {c.workdir}')
      fn(c, split_data=split_data, progress=self.cfg.progress)
      self.log(f'  ... {time.perf_counter() - t0:.0f} s')
    return scl_cfg, ttc_cfg


def _finished(config: Any) -> bool:
  """Whether `config.workdir` holds a checkpoint at `config.num_steps` (or later)."""
  directory = os.path.join(config.workdir, 'checkpoints')
  steps = [int(d) for d in os.listdir(directory) if d.isdigit()] if os.path.isdir(
      directory) else []
  return bool(steps) and max(steps) >= config.num_steps


def colt_params(variant: Variant, scl_cfg, ttc_cfg, tuned_dbscan: Optional[Mapping] = None,
                irrelevant_threshold: float = 0.0) -> evaluation.MethodParams:
  if variant.irrelevant_threshold is not None:
    irrelevant_threshold = variant.irrelevant_threshold
  selection = {'selection': variant.selection}
  if variant.coverage_weight is not None:
    selection['coverage_weight'] = variant.coverage_weight
  if variant.ttc_step:
    selection['ttc_step'] = variant.ttc_step
  if variant.cluster_threshold is not None:
    selection['cluster_threshold'] = variant.cluster_threshold
  if variant.pair_blend != 1.0:
    selection['pair_blend'] = variant.pair_blend
  if variant.selection_theta is not None:
    selection['selection_theta'] = variant.selection_theta
  params = evaluation.MethodParams(
      scl_checkpoint=scl_cfg.workdir if scl_cfg else '',
      ttc_checkpoint=ttc_cfg.workdir if ttc_cfg else '', post=variant.post,
      per_category=variant.per_category, fill_excluded=variant.fill_excluded,
      irrelevant_threshold=irrelevant_threshold, list_length=variant.list_length, **selection)
  if tuned_dbscan:
    params = dataclasses.replace(params, **tuned_dbscan)
  return params
