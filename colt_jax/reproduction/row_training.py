"""How a row's models are trained, once per configuration, and how they rank.

`ensure_features` makes the split's feature store (extracted when missing); `base_configs` reads
the dataset's flagfiles (CoLT's or the paper's); `Trainer` trains g and phi of a row for a seed
and a set of training topics, each configuration once (keyed by a digest of the fields that
decide the model), resuming from checkpoints; `colt_params` are the method parameters that rank
with a row's trained models; `relevance_model` fits a relevance row's model beside phi, once.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from typing import Any, Callable, Mapping, Optional

from colt_jax.data import views as views_lib
from colt_jax.encoders import stores
from colt_jax.evaluation import methods as evaluation
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction.row_cache import digest
from colt_jax.reproduction.variants import PAPER_COMPUTE_FIELDS, Variant
from colt_jax.train import configs
from colt_jax.train import trainers
from colt_jax.util import outputs


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
  """(SCLConfig, PairsTTCConfig) from the dataset's flagfiles (CoLT's or the paper's)."""
  data_dir = os.path.abspath(cfg.data_dir) if cfg.data_dir else ''
  stem = (cfg.paper_flags or cfg.dataset) if paper else cfg.colt_stem
  folder = cfg.paper_config_dir if paper else cfg.config_dir
  scl = configs.from_flagfile(configs.SCLConfig, os.path.join(folder, f'{stem}_scl.flags'),
                              data_dir=data_dir)
  ttc = configs.from_flagfile(PairsTTCConfig, os.path.join(folder, f'{stem}_ttc.flags'),
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
    """(SCLConfig or None, PairsTTCConfig or None) of `variant`, with their workdirs set; phi's
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


@functools.lru_cache(maxsize=None)
def relevance_key() -> dict:
  """What decides a relevance model beside phi, for the cache keys of its rows and choices:
  its configuration and `relevance_model.VERSION`."""
  return {'config': dataclasses.asdict(relevance_lib.RelevanceConfig()),
          'version': relevance_lib.VERSION}


def relevance_model(root: str, train: tuple, tag: str, protocol: str, num_images: int,
                    log: Callable = print) -> str:
  """The folder (under `root`/train/`tag`) of the relevance model fitted on the (viewed)
  training split `train`'s pools of phi's N = `num_images` candidates
  (`relevance_model.fit_split`), fitted once per training split, feature setting, N and
  protocol (reused when the folder holds it)."""
  split, store = train
  key = {'topics': split.topic_numbers, 'split': split.split, 'protocol': protocol,
         'num_images': num_images, 'parts': views_lib.token_parts(store),
         'views': store.meta.get('views', {}).get('name'), **relevance_key()}
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
  path = os.path.join(root, 'train', tag, f'relevance-{digest}')
  if not os.path.isfile(os.path.join(path, relevance_lib.CONFIG_FILE)):
    t0 = time.perf_counter()
    model = relevance_lib.fit_split(split, store, num_images, protocol=protocol)
    with outputs.ResultSet(path, 'a relevance model') as out:
      model.save(os.path.dirname(out.path(relevance_lib.CONFIG_FILE)))
    log(f'  fit the relevance model on {len(split.topics)} topics ({tag}) -> {path} '
        f'({time.perf_counter() - t0:.0f} s)')
  return path
