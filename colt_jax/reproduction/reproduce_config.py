"""One reproduction's configuration: `ReproduceConfig` (dataset, feature setting, seeds, folds,
protocols, the rows to run, where the flagfiles and outputs are) and the command line that
makes it (`ReproduceConfig.command`).

The rows it names are `variants.VARIANTS`; `row_training` trains their models.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from colt_jax.data import splits as data_lib
from colt_jax.reproduction import choice_files as choices_lib
from colt_jax.reproduction.variants import (CV_ABLATIONS, CV_VARIANTS, DEFAULT_VARIANTS,
                                            DESCVIS_VIEWS, MAIN_VARIANTS, OPT_IN_VARIANTS,
                                            ROW_ORDER, Variant)
from colt_jax.train import configs
from colt_jax.util import flagcheck
from colt_jax.util.errors import ConfigError


# Every folder is relative to the working folder unless given absolute (the commands run from
# the checkout's root, as `make` does; their flags --config_dir, --paper_config_dir, --workdir,
# --rows_dir, --results_dir and --doc set them): the paper's values (Sec. 4.3) and this
# repository's tuned choices, each with its evidence.
PAPER_CONFIG_DIR = os.path.join('experiments', 'configs', 'paper')
CONFIG_DIR = os.path.join('experiments', 'configs', 'tuned')

# What reproduce and choose_steps write in their work folder (recorded in its manifest).
WORK_TREES = ('rows', 'train', 'runs', 'jax_cache')
CV_CHOICES = ('scl', 'label_scheme', 'X', 'views', 'ttc')  # what a cross-validation fold may choose
# What it chooses by default: label_scheme and views each double the phi trainings of every
# fold's choice, and on dev neither helped `colt` (the "global labels" row and the
# `colt + descvis` rows score below `colt`); the whole reproduction stays near its budget.
CV_DEFAULT_CHOICES = ('scl', 'X', 'ttc')


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
  # own training topics (colt_jax/reproduction/tuning.py), never from the dev choice
  # flagfiles, whose hold-out topics are held out by some folds: 'ttc' (phi's steps x
  # irrelevant_threshold, always), 'label_scheme' (x local/global labels), 'X' (x images per
  # category over choice_per_category, Eq. 6), 'scl' (g's beta x learning rate over
  # cv_scl_grid, chosen first, scored as SCL + top-k, on text features), 'views' (x text or
  # each of cv_views).
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
  # experiments/choose_steps.py chose on dev for the protocol
  # (colt_jax/reproduction/choice_files.py: <config_dir>/<dataset>_phi_<protocol>.choice.flags;
  # 0, the plain argmax, when there is none).
  irrelevant_threshold: float = -1.0
  scl_steps: int = 0  # 0 = the flagfiles' num_steps
  # phi's steps: > 0 this many; 0 the flagfiles'; < 0 the steps chosen on dev for the
  # protocol (the same choice flagfile; the flagfiles' when there is no choice). `colt-paper`
  # follows `colt`'s schedule.
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
    unknown = sorted(set(self.variants) - set(ROW_ORDER))
    if unknown:
      raise ConfigError(f'--variants: unknown {unknown}; expected some of {list(ROW_ORDER)}')
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
    # (data_prep/make_dataset.py's <out>/configs/) names them <dataset>_colt_{scl,ttc}.flags.
    legacy = f'{self.dataset}_colt'
    if (not os.path.isfile(os.path.join(self.config_dir, f'{self.dataset}_scl.flags'))
        and os.path.isfile(os.path.join(self.config_dir, f'{legacy}_scl.flags'))):
      return legacy
    return self.dataset

  def protocol_choice(self, protocol: str) -> Optional[configs.ProtocolChoice]:
    """phi's steps and threshold chosen on dev for `protocol` (None: no choice made)."""
    return choices_lib.read_protocol_choice(self.config_dir, self.dataset, protocol,
                                            self.colt_stem)

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
