"""The real benchmark end to end: features, baselines, CoLT and its ablations, cross-validation.

`run(ReproduceConfig(...))` does, for a MediaEval dataset in its official layout:

1. Features: MiniLM text features of the dev and test splits (`data_prep/extract_features.py`,
   resumable), unless the stores already exist.
2. Baselines on test, tuned on dev (F1@20, same protocol): Flickr order, top-k, MMR, UMONS.
3. CoLT (Alg. 1-2): g trained by SCL and phi by the TTC trainer on dev, evaluated on test, for
   every seed; then the ablations (`VARIANTS`), each a set of overrides of the two configs.
4. k-fold cross-validation over all topics of dev + test (`colt_jax.folds`): per fold the
   baselines are tuned and CoLT is trained on the training topics only, and every topic is
   scored once, by the fold that held it out.
5. `results.json`, the run files, and a markdown report (`report.write_markdown`).

Every choice is made on dev (or, in cross-validation, on the training topics); test scores are
only read to fill the tables. Trainings are keyed by a digest of their configuration, so rows
that share a model (X=1/2/3, SCL + top-k, ...) train it once, and a rerun after an interruption
resumes from the checkpoints and skips finished rows (`rows/*.json`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

import choices as choices_lib
from colt_jax import atomic
from colt_jax import configs
from colt_jax import data as data_lib
from colt_jax import evaluation
from colt_jax import folds as folds_lib
from colt_jax import metrics
from colt_jax import outputs
from colt_jax import runfile
from colt_jax.errors import ConfigError
from colt_jax.errors import InputError
from colt_jax.train import restore
from colt_jax.train import trainers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(REPO, 'experiments', 'configs')
BASELINES = ('flickr', 'topk', 'mmr', 'umons')
# What the paper-faithful row takes from this repo's configuration: compute only.
PAPER_COMPUTE_FIELDS = ('model_dim', 'num_heads', 'num_steps')
THRESHOLDS = (0.0, 0.7, 0.9, 1.0)  # irrelevant_threshold values choose_steps scores
REPORT_METRICS = metrics.DEFAULT_COLUMNS


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
  per_category: int = 1
  fill_excluded: bool = True  # fill short lists with phi's 'irrelevant' images
  irrelevant_threshold: Optional[float] = None  # None: ReproduceConfig.irrelevant_threshold
  list_length: int = evaluation.RUN_LENGTH  # photos per topic (k: the paper's reading)
  all_seeds: bool = False  # run every seed (else the first only)


# The rows of the paper's Tables 3-7 (ablations) plus the paper-faithful configuration. The
# base configs are the flagfiles `<dataset>_colt_{scl,ttc}.flags` ("CoLT") and
# `<dataset>_{scl,ttc}.flags` (the paper's hyper-parameters).
VARIANTS = (
    Variant('colt', 'main', 'SCL + TTC (this repo\'s CPU configuration)', all_seeds=True),
    Variant('colt-paper', 'main', 'SCL + TTC with the paper\'s hyper-parameters, global '
            'category labels and Eq. 6 as Sec. 3.3 reads: a list of k photos, without '
            'filling', scl={'@paper': True}, ttc={'@paper': True}, fill_excluded=False,
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
    Variant('X=2', 'X', 'two images per category (Eq. 6)', per_category=2, all_seeds=True),
    Variant('X=3', 'X', 'three images per category (Eq. 6)', per_category=3, all_seeds=True),
    Variant('L=6', 'L', 'six encoder layers', ttc={'num_layers': 6}),
    Variant('L=8', 'L', 'eight encoder layers', ttc={'num_layers': 8}),
    Variant('L=10', 'L', 'ten encoder layers', ttc={'num_layers': 10}),
    Variant('N=150', 'N', '150 candidate images', ttc={'num_images': 150}),
    Variant('N=250', 'N', '250 candidate images', ttc={'num_images': 250}),
)


MAIN_VARIANTS = ('colt', 'colt-paper')  # scored under every protocol
# Entries of the results folder written by hand, kept when reproduce replaces its result set.
# (The dev choices live in experiments/configs/, experiments/choices.py.)
KEPT_RESULTS = ('analysis.md',)


@dataclasses.dataclass(frozen=True)
class ReproduceConfig:
  dataset: str = 'div400'
  data_dir: str = ''
  encoder: str = 'minilm'
  # Append the official visual descriptors to the photo features (extract_features.py
  # --with_descriptors); everything then lives under the name <dataset>-descvis.
  with_descriptors: bool = False
  workdir: str = ''  # default work/reproduce/<name>
  results_dir: str = ''  # run files + results.json; default docs/results/<name>
  doc: str = ''  # markdown report; default docs/RESULTS.md (docs/RESULTS-descvis.md)
  seeds: tuple = (0, 1, 2)
  folds: int = 5
  fold_seed: int = 0
  protocols: tuple = ('pool', 'global')
  ablation_protocols: tuple = ('pool',)  # protocols of the ablation rows (not colt/colt-paper)
  cv_protocols: tuple = ('pool',)  # protocols of the cross-validation
  variants: tuple = tuple(v.name for v in VARIANTS)
  config_dir: str = CONFIG_DIR  # where the flagfiles are
  colt_flags: str = ''  # flagfile stem of `colt` (default <dataset>_colt)
  paper_flags: str = ''  # flagfile stem of the paper's values (default <dataset>)
  # phi's 'irrelevant' only above this probability (evaluation.MethodParams). < 0: the value
  # experiments/choose_steps.py chose on dev for the protocol (experiments/choices.py:
  # <config_dir>/<name>_phi_<protocol>.choice.flags; 0, the plain argmax, when there is none).
  irrelevant_threshold: float = -1.0
  scl_steps: int = 0  # 0 = the flagfiles' num_steps
  # phi's steps: > 0 this many; 0 the flagfiles'; < 0 the steps chosen on dev for the
  # protocol (the same choice flagfile; the flagfiles' when there is no choice). `colt-paper` follows
  # `colt`'s schedule.
  ttc_steps: int = -1
  progress: bool = True

  def __post_init__(self):
    if self.dataset not in configs.DATASETS:
      raise ConfigError(f'--dataset must be one of {", ".join(configs.DATASETS)}; got '
                        f'{self.dataset!r}')
    if not self.seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                             for s in self.seeds):
      raise ConfigError(f'--seeds must be one or more integers >= 0, got {self.seeds!r}')
    if self.folds == 1 or self.folds < 0:
      raise ConfigError(f'--folds must be 0 (none) or >= 2, got {self.folds}')
    for name in ('protocols', 'ablation_protocols', 'cv_protocols'):
      bad = [p for p in getattr(self, name) if p not in configs.PROTOCOLS]
      if bad or (name == 'protocols' and not self.protocols):
        raise ConfigError(f'--{"protocol" if name == "protocols" else name} must name some of '
                          f'{", ".join(configs.PROTOCOLS)}; got {getattr(self, name)!r}')
    if not self.variants:
      raise ConfigError('--variants must name at least one CoLT row')
    if self.irrelevant_threshold > 1:
      raise ConfigError(f'irrelevant_threshold must be <= 1 (< 0: the dev choice), got '
                        f'{self.irrelevant_threshold}')
    if self.scl_steps < 0:
      raise ConfigError(f'scl_steps must be >= 0, got {self.scl_steps}')

  @property
  def name(self) -> str:
    """The dataset and feature setting: names the feature stores, work and results dirs."""
    return self.dataset + ('-descvis' if self.with_descriptors else '')

  @property
  def results_path(self) -> str:
    return self.results_dir or os.path.join('docs', 'results', self.name)

  @property
  def doc_path(self) -> str:
    return self.doc or os.path.join(
        'docs', 'RESULTS' + ('-descvis' if self.with_descriptors else '') + '.md')

  @property
  def colt_stem(self) -> str:
    """Flagfile stem of the `colt` row (the synthetic default has one pair of flagfiles)."""
    if self.colt_flags:
      return self.colt_flags
    return self.dataset if self.dataset == 'synthetic' else f'{self.dataset}_colt'

  def protocol_choice(self, protocol: str) -> Optional[configs.ProtocolChoice]:
    """phi's steps and threshold chosen on dev for `protocol` (None: no choice made)."""
    return choices_lib.read_protocol_choice(self.config_dir, self.name, protocol)

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
            + [choices_lib.protocol_choice_path(self.config_dir, self.name, p)
               for p in configs.PROTOCOLS])


# ----------------------------------------------------------------------------- helpers


def digest(obj: Any) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _read_json(path: str) -> Optional[Any]:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def ensure_features(cfg: ReproduceConfig, split: str, log: Callable = print) -> str:
  """The split's feature store directory, extracting it first when it does not exist."""
  suffix = '-descvis' if cfg.with_descriptors else ''
  out = os.path.join('work', 'features', f'{cfg.dataset}-{cfg.encoder}{suffix}', split)
  if os.path.isfile(os.path.join(out, 'meta.json')):
    log(f'features: reusing {out}')
    return out
  cmd = [sys.executable, os.path.join(REPO, 'data_prep', 'extract_features.py'),
         f'--dataset={cfg.dataset}', f'--split={split}', f'--encoder={cfg.encoder}',
         f'--out={out}']
  if cfg.data_dir:
    cmd.append(f'--data_dir={cfg.data_dir}')
  if cfg.with_descriptors:
    cmd.append('--with_descriptors')
  if not cfg.progress:
    cmd.append('--noprogress')
  log(f'features: extracting {cfg.dataset}/{split} with {cfg.encoder} -> {out} '
      '(resumable: rerun after an interruption)')
  subprocess.run(cmd, check=True)
  return out


def base_configs(cfg: ReproduceConfig, paper: bool) -> tuple:
  """(SCLConfig, TTCConfig) from the dataset's flagfiles (CoLT's or the paper's)."""
  data_dir = os.path.abspath(cfg.data_dir) if cfg.data_dir else ''
  stem = (cfg.paper_flags or cfg.dataset) if paper else cfg.colt_stem
  scl = configs.from_flagfile(configs.SCLConfig,
                              os.path.join(cfg.config_dir, f'{stem}_scl.flags'),
                              data_dir=data_dir)
  ttc = configs.from_flagfile(configs.TTCConfig,
                              os.path.join(cfg.config_dir, f'{stem}_ttc.flags'),
                              data_dir=data_dir)
  if cfg.scl_steps:
    scl = dataclasses.replace(scl, num_steps=cfg.scl_steps)
  if cfg.ttc_steps > 0:
    ttc = dataclasses.replace(ttc, num_steps=cfg.ttc_steps)
  return scl, ttc


def _trained_key(config: Any) -> dict:
  """The fields of a config that decide the trained model (not where it is written)."""
  skip = {'workdir', 'checkpoint_every', 'max_to_keep', 'log_every', 'data_dir', 'features_dir'}
  return {k: v for k, v in dataclasses.asdict(config).items() if k not in skip}


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
    paper = bool((scl_over or {}).pop('@paper', False)) | bool((ttc_over or {}).pop('@paper',
                                                                                    False))
    scl, ttc = base_configs(self.cfg, paper)
    if paper:  # the paper's hyper-parameters at this repo's CPU width and schedule
      colt_scl, colt_ttc = base_configs(self.cfg, paper=False)
      scl = dataclasses.replace(scl, num_steps=colt_scl.num_steps)
      ttc = dataclasses.replace(ttc, **{k: getattr(colt_ttc, k) for k in PAPER_COMPUTE_FIELDS})
    scl_cfg = ttc_cfg = None
    if scl_over is not None:
      scl_cfg = dataclasses.replace(scl, seed=seed, split=tag, **scl_over)
      scl_cfg = dataclasses.replace(
          scl_cfg, workdir=os.path.join(self.root, 'train', tag,
                                        f'scl-{digest(_trained_key(scl_cfg))}'))
    if ttc_over is not None:
      ttc_cfg = dataclasses.replace(ttc, seed=seed, split=tag,
                                    scl_checkpoint=scl_cfg.workdir if scl_cfg else '',
                                    **ttc_over)
      if protocol is not None:
        ttc_cfg = dataclasses.replace(ttc_cfg, protocol=protocol)
        if 'num_steps' not in ttc_over:
          ttc_cfg = dataclasses.replace(
              ttc_cfg, num_steps=self.cfg.ttc_steps_for(protocol, ttc_cfg.num_steps))
      key = dict(_trained_key(ttc_cfg), scl=_trained_key(scl_cfg) if scl_cfg else None)
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
  params = evaluation.MethodParams(
      scl_checkpoint=scl_cfg.workdir if scl_cfg else '',
      ttc_checkpoint=ttc_cfg.workdir if ttc_cfg else '', post=variant.post,
      per_category=variant.per_category, fill_excluded=variant.fill_excluded,
      irrelevant_threshold=irrelevant_threshold, list_length=variant.list_length)
  if tuned_dbscan:
    params = dataclasses.replace(params, **tuned_dbscan)
  return params


def tune_dbscan(dev: tuple, scl_cfg, protocol: str) -> dict:
  """UMONS's DBSCAN parameters for the SCL + DBSCAN row, grid-searched on dev's h^."""
  split, store = dev
  store_hat = restore.reencode_store(store, restore.load_reencoder(scl_cfg.workdir))
  best, _ = evaluation.tune('umons', split, store_hat, protocol, evaluation.MethodParams())
  return {k: getattr(best, k) for k in evaluation.GRIDS['umons']}


def _result_record(split, run: Mapping, protocol: str, extra: Mapping) -> dict:
  result = evaluation.score(split, run)
  return dict(extra, protocol=protocol, mean=result.mean,
              per_topic={str(t): m for t, m in result.per_topic.items()},
              run={str(t): [[p, float(s)] for p, s in r] for t, r in run.items()})


def returned_at(run: Mapping, k: int = 20) -> float:
  """Mean number of photos a run returns per topic within the first k (k when every list is
  full; less when a method, e.g. Eq. 6 without filling, returns short lists)."""
  return float(np.mean([min(len(r), k) for r in run.values()])) if run else 0.0


def _summary(row: Mapping) -> dict:
  """A row as results.json keeps it: everything but the ranked lists, plus returned@20."""
  out = {k: v for k, v in row.items() if k != 'run'}
  if 'run' in row:
    out['returned@20'] = returned_at(row['run'])
  return out


def write_run_file(path: str, split, run: Mapping, protocol: str, run_id: str) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  runfile.write_run(path, {int(t): [(p, s) for p, s in r] for t, r in run.items()},
                    run_id=run_id.replace(' ', '_'),
                    allowed_ids=evaluation.allowed_ids(split, protocol),
                    topics=split.topic_numbers)


# ----------------------------------------------------------------------------- stages


class Reproduction:
  """The stages of `run`, sharing the loaded data, the trainer and the row cache."""

  def __init__(self, cfg: ReproduceConfig, log: Callable = print):
    self.cfg = cfg
    self.log = log
    self.root = cfg.workdir or os.path.join('work', 'reproduce', cfg.name)
    outputs.claim_dir(self.root, 'reproduce\'s work', legacy=('rows', 'train'),
                      flag='--workdir')
    self.results_dir = cfg.results_path
    self.trainer = Trainer(cfg, self.root, log)
    unknown = sorted(set(cfg.variants) - {v.name for v in VARIANTS})
    if unknown:
      raise InputError(f'--variants: unknown {unknown}; expected some of '
                       f'{[v.name for v in VARIANTS]}')
    self.variants = [v for v in VARIANTS if v.name in cfg.variants]
    if cfg.with_descriptors and cfg.dataset == 'synthetic':
      raise InputError('--with_descriptors needs the official layout\'s descvis/; the '
                       'synthetic dataset has none')

  def _row_path(self, kind: str, name: str) -> str:
    safe = name.replace(' ', '_').replace('(', '').replace(')', '').replace('/', '-')
    return os.path.join(self.root, 'rows', kind, safe + '.json')

  def cached(self, kind: str, name: str, key: Mapping, compute: Callable[[], dict]) -> dict:
    """A row's result from `rows/`, or computed and saved (keyed by its configuration)."""
    path = self._row_path(kind, name)
    old = _read_json(path)
    if old is not None and old.get('key') == json.loads(json.dumps(key, default=str)):
      return old
    record = dict(compute(), key=key)
    atomic.write_json(path, record)
    return json.loads(json.dumps(record, default=atomic.json_default))

  def load(self) -> None:
    for split in ('dev', 'test'):
      store = ''
      if self.cfg.dataset != 'synthetic':  # synthetic data comes with its feature stores
        store = ensure_features(self.cfg, split, self.log)
      setattr(self, split, data_lib.load(self.cfg.dataset, split, self.cfg.data_dir, store))

  # -- official split: train/tune on dev, score on test

  def baselines(self, train: tuple, test: tuple, kind: str,
                protocols: Optional[Sequence[str]] = None) -> dict:
    out = {}
    for protocol in (self.cfg.protocols if protocols is None else protocols):
      for method in BASELINES:
        if method == 'flickr' and protocol != 'pool':
          continue

        def compute(method=method, protocol=protocol):
          params, tuning = evaluation.MethodParams(), []
          if method in evaluation.GRIDS:
            params, tuning = evaluation.tune(method, train[0], train[1], protocol, params)
          run = evaluation.rank(method, test[0], test[1], protocol, params)
          chosen = {k: getattr(params, k) for k in evaluation.GRIDS.get(method, {})}
          return _result_record(test[0], run, protocol, {
              'method': method, 'chosen': chosen,
              'tuning': [{'setting': s, 'F1@20': v} for s, v in tuning]})

        name = f'{method} ({protocol})'
        out[name] = self.cached(kind, name, {'method': method, 'protocol': protocol,
                                             'train': train[0].split,
                                             'topics': test[0].topic_numbers}, compute)
        self.log(f'  {name:<24} F1@20 {out[name]["mean"]["F1@20"]:.4f}')
    return out

  def colt_rows(self, variant: Variant, seed: int, train: tuple, test: tuple, kind: str,
                tag: str, protocols: Optional[Sequence[str]] = None) -> dict:
    out = {}
    for protocol in (self.cfg.protocols if protocols is None else protocols):
      name = f'{variant.name} (seed {seed}, {protocol})'
      scl_cfg, ttc_cfg = self.trainer.configs_for(variant, seed, tag, protocol)
      threshold = self.cfg.threshold_for(protocol)
      key = {'variant': dataclasses.asdict(variant), 'seed': seed, 'tag': tag,
             'irrelevant_threshold': threshold,
             'scl': _trained_key(scl_cfg) if scl_cfg else None,
             'ttc': _trained_key(ttc_cfg) if ttc_cfg else None,
             'topics': test[0].topic_numbers}

      def compute(protocol=protocol, scl_cfg=scl_cfg, ttc_cfg=ttc_cfg, threshold=threshold):
        self.trainer.train(variant, seed, train, tag, protocol)  # no-op when trained
        tuned = tune_dbscan(train, scl_cfg, protocol) if variant.post == 'dbscan' else None
        params = colt_params(variant, scl_cfg, ttc_cfg, tuned, threshold)
        run = evaluation.rank_colt(test[0], test[1], protocol, params)
        return _result_record(test[0], run, protocol, {
            'method': 'colt', 'variant': variant.name, 'seed': seed, 'chosen': tuned or {},
            'params': dataclasses.asdict(params),
            'scl_config': dataclasses.asdict(scl_cfg) if scl_cfg else None,
            'ttc_config': dataclasses.asdict(ttc_cfg) if ttc_cfg else None})

      out[name] = self.cached(kind, name, dict(key, protocol=protocol), compute)
      self.log(f'  {name:<40} F1@20 {out[name]["mean"]["F1@20"]:.4f}')
    return out

  def official(self) -> dict:
    self.log(f'[2/4] baselines on {self.cfg.dataset} test, tuned on dev')
    rows = self.baselines(self.dev, self.test, 'official')
    self.log('[3/4] CoLT and ablations: trained on dev, scored on test')
    for variant in self.variants:
      protocols = self.cfg.protocols
      if variant.name not in MAIN_VARIANTS:
        protocols = [p for p in protocols if p in self.cfg.ablation_protocols]
      for seed in (self.cfg.seeds if variant.all_seeds else self.cfg.seeds[:1]):
        rows.update(self.colt_rows(variant, seed, self.dev, self.test, 'official', 'dev',
                                   protocols))
    return rows

  # -- cross-validation over all topics

  def cross_validation(self) -> dict:
    everything = folds_lib.merge([self.dev, self.test])
    folds = folds_lib.kfold(everything[0].topic_numbers, self.cfg.folds, self.cfg.fold_seed)
    self.log(f'[4/4] {self.cfg.folds}-fold cross-validation over '
             f'{len(everything[0].topics)} topics')
    per_fold = []
    colt = next(v for v in VARIANTS if v.name == 'colt')
    for fold in folds:
      tag = f'cv{self.cfg.folds}-seed{self.cfg.fold_seed}-fold{fold.index}'
      train = folds_lib.subset(*everything, fold.train_topics, f'{tag}-train')
      held = folds_lib.subset(*everything, fold.test_topics, f'{tag}-test')
      self.log(f' fold {fold.index}: {len(fold.train_topics)} training topics, '
               f'{len(fold.test_topics)} held out')
      protocols = [p for p in self.cfg.protocols if p in self.cfg.cv_protocols]
      rows = self.baselines(train, held, tag, protocols)
      rows.update(self.colt_rows(colt, self.cfg.seeds[0], train, held, tag, tag, protocols))
      per_fold.append({'fold': fold.index, 'test_topics': list(fold.test_topics),
                       'rows': rows})
    return {'folds': per_fold, 'merged': merge_folds(per_fold)}

  def write_run_files(self, rows: Mapping[str, dict], cv: Optional[dict],
                      results: outputs.ResultSet) -> dict:
    """Run files of every row: pool-protocol files for the official scorer, per split, into
    the result set (global-protocol files, which the scorer refuses, into the work dir)."""
    written = {}
    for name, row in rows.items():
      protocol = row['protocol']
      relative = os.path.join('runs', 'pool' if protocol == 'pool' else 'global',
                              f'test-{_file_name(name)}.txt')
      if protocol == 'pool':
        path, final = results.path(relative), os.path.join(self.results_dir, relative)
      else:
        path = final = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
      write_run_file(path, self.test[0], row['run'], protocol, _file_name(name))
      written[name] = final
    if cv:
      for name, row in cv['merged'].items():
        if row['protocol'] != 'pool':
          continue
        for split in (self.dev, self.test):
          run = {t: r for t, r in row['run'].items() if int(t) in split[0].topic_numbers}
          relative = os.path.join('runs', 'cv', f'{split[0].split}-{_file_name(name)}.txt')
          write_run_file(results.path(relative), split[0], run, 'pool',
                         'cv_' + _file_name(name))
          written[f'cv {name} {split[0].split}'] = os.path.join(self.results_dir, relative)
    return written


def _file_name(name: str) -> str:
  out = name.replace(' (', '-').replace(')', '').replace(', ', '-').replace(' ', '_')
  return out.replace('&', 'and').replace('+', 'plus').replace('=', '')


def merge_folds(per_fold: Sequence[Mapping]) -> dict:
  """Every row over all folds: each topic scored by the fold that held it out."""
  names = per_fold[0]['rows'].keys()
  merged = {}
  for name in names:
    per_topic, run = {}, {}
    for f in per_fold:
      row = f['rows'][name]
      per_topic.update(row['per_topic'])
      run.update(row['run'])
    names_ = list(next(iter(per_topic.values())))
    mean = {k: float(np.mean([m[k] for m in per_topic.values()])) for k in names_}
    fold_f1 = [f['rows'][name]['mean']['F1@20'] for f in per_fold]
    merged[name] = {'protocol': per_fold[0]['rows'][name]['protocol'], 'mean': mean,
                    'per_topic': per_topic, 'run': run, 'fold_F1@20': fold_f1}
  return merged


def run(cfg: ReproduceConfig, log: Callable = print, cross_validate: bool = True,
        report: bool = True) -> dict:
  """All stages; returns the results payload (also written as results.json)."""
  t0 = time.perf_counter()
  rep = Reproduction(cfg, log)
  # Checked now, written at the end as one set (the files other commands keep there stay).
  results = outputs.ResultSet(rep.results_dir, 'reproduce results', legacy=('results.json',),
                              keep_old=KEPT_RESULTS)
  if report:
    outputs.check_writable_file(cfg.doc_path, 'the report', flag='--doc')
  log(f'[1/4] features ({cfg.encoder}) of {cfg.dataset} dev and test')
  rep.load()
  rows = rep.official()
  cv = rep.cross_validation() if cross_validate and cfg.folds else None
  payload = {
      'dataset': cfg.dataset, 'name': cfg.name, 'results_dir': rep.results_dir,
      'encoder': cfg.encoder, 'config': dataclasses.asdict(cfg),
      'features': {s: dict(getattr(rep, s)[1].meta) for s in ('dev', 'test')},
      'topics': {s: len(getattr(rep, s)[0].topics) for s in ('dev', 'test')},
      'rows': {n: _summary(r) for n, r in rows.items()},
      'cv': ({'folds': [{'fold': f['fold'], 'test_topics': f['test_topics'],
                         'rows': {n: r['mean'] for n, r in f['rows'].items()}}
                        for f in cv['folds']],
              'merged': {n: _summary(r) for n, r in cv['merged'].items()}} if cv else None),
      'run_files': {},
      'variants': [dataclasses.asdict(v) for v in rep.variants],
      'base_configs': {
          'colt': [dataclasses.asdict(c) for c in base_configs(cfg, paper=False)],
          'paper': [dataclasses.asdict(c) for c in base_configs(cfg, paper=True)]},
      'irrelevant_thresholds': {p: cfg.threshold_for(p) for p in cfg.protocols},
      'ttc_steps': {p: cfg.ttc_steps_for(p, base_configs(cfg, paper=False)[1].num_steps)
                    for p in cfg.protocols},
      'choices': choices_lib.evidence_for(cfg.config_dir, cfg.choice_flagfiles()),
      'seconds': time.perf_counter() - t0,
  }
  for k in ('features',):
    for s in payload[k].values():
      s.pop('path', None)
  with results:
    payload['run_files'] = rep.write_run_files(rows, cv, results)
    atomic.write_json(results.path('results.json'), payload)
  if report:
    write_report(cfg, payload, log)
  return payload


def write_report(cfg: ReproduceConfig, payload: Optional[Mapping] = None,
                 log: Callable = print) -> str:
  """Writes the markdown report from `payload` (default: the saved results.json)."""
  import results_report as report_lib  # pylint: disable=g-import-not-at-top
  if payload is None:
    path = os.path.join(cfg.results_path, 'results.json')
    payload = _read_json(path)
    if payload is None:
      raise InputError(f'{path}: no results yet; run experiments/reproduce.py first')
  doc = cfg.doc_path
  command = f'python experiments/reproduce.py --dataset {cfg.dataset}' + (
      ' --with_descriptors' if cfg.with_descriptors else '')
  report_lib.write_markdown(payload, doc, command=command, results_dir=cfg.results_path)
  log(f'wrote {doc}')
  return doc
