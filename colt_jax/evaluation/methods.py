"""Running a method over a split under a protocol, scoring it, tuning it, writing its outputs.

Methods (all over L2-normalised features, see `colt_jax.baselines`): `flickr` (Flickr's
original order), `topk`, `mmr`, `msd`, `dpp`, `umons`, `umons-dbscan`, `gbt-pairs` (learned on the
training topics, `gbt_pairs`) and `colt` (g + phi + post-processing, Alg. 2). CoLT's
ablations swap parts: no `scl_checkpoint` = raw f features ("without SCL"); `post='topk'` or
`post='dbscan'` replaces the TTC by top-k or UMONS's DBSCAN over the (re-encoded) features.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import rerankers
from colt_jax.baselines import umons
from colt_jax.data import features as features_lib
from colt_jax.data.types import Split
from colt_jax.evaluation import metrics
from colt_jax.evaluation import runfile
from colt_jax.inference import retriever
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from colt_jax.train import configs
from colt_jax.train import restore
from colt_jax.util.errors import InputError

METHODS = ('flickr', 'topk', 'mmr', 'msd', 'dpp', 'umons', 'umons-dbscan', 'gbt-pairs', 'colt')
POSTS = ('ttc', 'topk', 'dbscan')
RUN_LENGTH = runfile.MAX_PER_TOPIC  # every method returns 50 photos, the most a run file holds
TUNE_METRIC = 'F1@20'


@dataclasses.dataclass(frozen=True)
class MethodParams:
  """Every method's parameters (each method reads its own); validated on construction."""
  diversity: float = configs.option(0.5, 'MMR\'s trade-off: 0 = plain top-k, 1 = only '
                                    'novelty.', low=0.0, high=1.0)
  msd_tradeoff: float = configs.option(0.5, 'MSD\'s lambda: 0 = plain top-k, 1 = only the '
                                       'mean distance to the picks.', low=0.0, high=1.0)
  dpp_theta: float = configs.option(0.9, 'DPP\'s theta (Chen et al. 2018): 1 = plain top-k, 0 = '
                                    'only the log-determinant.', low=0.0, high=1.0)
  gbt_weight: float = configs.option(0.5, 'gbt-pairs: 1 = by P(relevant), 0 = only the expected '
                                     'coverage gain.', low=0.0, high=1.0)
  mmr_candidates: int = configs.option(200, 'MMR, MSD, DPP re-rank this many most similar photos.',
                                       **configs.COUNT)
  umons_threshold: float = configs.option(0.5, 'UMONS keeps candidates whose min-max '
                                          'normalised similarity reaches this.', low=0.0,
                                          high=1.0)
  umons_eps: float = configs.option(0.3, 'UMONS\'s DBSCAN radius (cosine distance).', low=0.0,
                                    high=2.0, low_open=True)
  umons_min_samples: int = configs.option(2, 'UMONS\'s DBSCAN min_samples.', **configs.COUNT)
  umons_relevance_eps: float = configs.option(
      0.3, 'umons-dbscan: the relevance stage\'s DBSCAN radius (cosine distance); its noise '
      'photos are irrelevant.', low=0.0, high=2.0, low_open=True)
  umons_relevance_min_samples: int = configs.option(
      5, 'umons-dbscan: the relevance stage\'s DBSCAN min_samples.', **configs.COUNT)
  umons_candidates: int = configs.option(200, 'UMONS clusters this many most similar photos.',
                                         **configs.COUNT)
  scl_checkpoint: str = configs.option('', 'CoLT: workdir of the trained g (train_scl.py); '
                                       'empty = raw f features ("without SCL").')
  ttc_checkpoint: str = configs.option(
      '', 'CoLT: workdir of the trained phi (train_ttc.py); several, comma-separated: an '
      'ensemble averaging their heads (--selection coverage, cluster or dpp).')
  ttc_step: int = configs.option(0, 'CoLT: phi\'s checkpoint step (0 = the latest).', low=0,
                                 high=configs.STEPS['high'])
  post: str = configs.option('ttc', 'CoLT\'s list maker: ttc = phi + Eq. 6; topk / dbscan '
                             'replace phi (ablations).', choices=POSTS)
  model: str = configs.option('', 'CoLT: a model directory (Retriever.save_pretrained: g, '
                               'phi and their inference settings); replaces the checkpoint '
                               'and inference flags.')
  # CoLT's inference settings (PairsInferenceSettings: the paper's, Eq. 6, and colt-pairs'
  # selection, whose default is the paper's lists), one flag each.
  k: int = configs.same_as(PairsInferenceSettings, 'k')
  per_category: int = configs.same_as(PairsInferenceSettings, 'per_category')
  list_length: int = configs.same_as(PairsInferenceSettings, 'list_length')
  irrelevant_threshold: float = configs.same_as(PairsInferenceSettings,
                                                'irrelevant_threshold')
  fill_excluded: bool = configs.same_as(PairsInferenceSettings, 'fill_excluded')
  selection: str = configs.same_as(PairsInferenceSettings, 'selection')
  coverage_weight: float = configs.same_as(PairsInferenceSettings, 'coverage_weight')
  cluster_threshold: float = configs.same_as(PairsInferenceSettings, 'cluster_threshold')
  pair_blend: float = configs.same_as(PairsInferenceSettings, 'pair_blend')
  selection_theta: float = configs.same_as(PairsInferenceSettings, 'selection_theta')

  def __post_init__(self):
    configs.validate(self)
    self.inference_settings()  # checks X <= k

  def inference_settings(self) -> PairsInferenceSettings:
    names = [f.name for f in dataclasses.fields(PairsInferenceSettings)]
    return PairsInferenceSettings(**{n: getattr(self, n) for n in names})


# Grids searched by `tune` on the dev split.
GRIDS = {
    'mmr': {'diversity': [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]},
    'msd': {'msd_tradeoff': [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]},
    'dpp': {'dpp_theta': [0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0]},
    'umons': {'umons_threshold': [0.0, 0.2, 0.4, 0.6],
              'umons_eps': [0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.4, 0.5]},
    'umons-dbscan': {'umons_relevance_eps': [0.2, 0.3, 0.4, 0.5],
                     'umons_relevance_min_samples': [3, 6],
                     'umons_eps': [0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.4]},
}
# Methods fitted on training topics (`rank(..., train=)`); `tune` scores their grids on the
# training topics' out-of-fold predictions (`gbt_pairs.cross_fit`).
LEARNED_GRIDS = {'gbt-pairs': {'gbt_weight': [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0]}}


def _entries(cands: candidates_lib.TopicCandidates, ranking: rerankers.Ranking) -> list:
  return [(cands.photo_ids[int(i)], float(s))
          for i, s in zip(ranking.indices, ranking.scores) if int(i) >= 0]


def rank_baseline(method: str, cands: Sequence[candidates_lib.TopicCandidates],
                  params: MethodParams, k: int = RUN_LENGTH) -> dict:
  """topic -> [(photo id, score)] for one of flickr, topk, mmr, msd, dpp, umons, umons-dbscan."""
  run = {}
  greedy = {'mmr': (rerankers.mmr_batch, 'diversity', params.diversity),
            'msd': (rerankers.msd_batch, 'tradeoff', params.msd_tradeoff),
            'dpp': (rerankers.dpp_batch, 'theta', params.dpp_theta)}
  if method in greedy and cands:
    feats, valid = rerankers.pad_features([c.features for c in cands])
    queries = np.stack([c.query for c in cands])
    fn, name, value = greedy[method]
    ranking = fn(queries, feats, valid, k=k, num_candidates=params.mmr_candidates,
                 **{name: value})
    for b, c in enumerate(cands):
      run[c.topic] = _entries(c, rerankers.Ranking(ranking.indices[b], ranking.scores[b]))
    return run
  for c in cands:
    if method == 'flickr':
      ranking = rerankers.flickr(c.flickr_ranks, k)
    elif method == 'topk':
      ranking = rerankers.topk(c.query, c.features, k)
    elif method == 'umons':
      ranking = umons.umons(c.query, c.features, k, threshold=params.umons_threshold,
                            eps=params.umons_eps, min_samples=params.umons_min_samples,
                            num_candidates=params.umons_candidates)
    elif method == 'umons-dbscan':
      ranking = umons.umons_dbscan(
          c.query, c.features, k, relevance_eps=params.umons_relevance_eps,
          relevance_min_samples=params.umons_relevance_min_samples, eps=params.umons_eps,
          min_samples=params.umons_min_samples, num_candidates=params.umons_candidates)
    else:
      raise ValueError(f'unknown baseline {method!r}; expected flickr, topk, mmr, msd, dpp, '
                       'umons or umons-dbscan')
    run[c.topic] = _entries(c, ranking)
  return run


def colt_retriever(params: MethodParams) -> retriever.Retriever:
  """The `Retriever` that `--method colt` runs: a model directory (--model), or trainer
  workdirs (--scl_checkpoint, --ttc_checkpoint) with the inference flags."""
  if params.model:
    return retriever.Retriever.from_pretrained(params.model)
  if not params.ttc_checkpoint:
    raise InputError('--method colt needs --model or --ttc_checkpoint')
  return retriever.Retriever.from_checkpoints(
      params.scl_checkpoint, params.ttc_checkpoint, params.inference_settings(),
      ttc_step=params.ttc_step or None)


def run_retriever(colt: retriever.Retriever, split: Split, store: features_lib.FeatureStore,
                  protocol: str) -> dict:
  """topic -> [(photo id, score)] of a `Retriever` over a split: `search_batch` over the
  split's collection (global protocol) or `rank_batch` over each topic's photos (pool)."""
  colt.check_store(store)  # before the model runs: one line naming both dimensions
  topics = split.topic_numbers
  queries = np.stack([store.query_feature(t) for t in topics])
  if protocol == 'global':
    results = colt.index(store).search_batch(queries)
  else:
    cands = candidates_lib.build_candidates(split, store, 'pool')
    results = colt.rank_batch(queries, [c.features for c in cands],
                              [c.photo_ids for c in cands])
  return {int(t): r.entries() for t, r in zip(topics, results)}


def checkpoint_scorer(cfg, split: Split, store: features_lib.FeatureStore,
                      params: Optional[MethodParams] = None, protocol: str = 'pool',
                      prefix: str = '') -> Callable[[int], dict]:
  """step -> {'<prefix>P@20', 'CR@20', 'F1@20'} of phi's checkpoint at that step of the
  trainer config `cfg` (with its g), over `split` by `run_retriever` (the path users run);
  for `loop.train`'s `on_checkpoint`, i.e. training curves of F1@20. `params` gives the
  inference settings (default: MethodParams's)."""
  settings = (params or MethodParams()).inference_settings()
  prefix = prefix or f'{split.split}/'

  def score_step(step: int) -> dict:
    colt = retriever.Retriever.from_checkpoints(cfg.scl_checkpoint, cfg.workdir, settings,
                                                ttc_step=step)
    result = score(split, run_retriever(colt, split, store, protocol))
    return {f'{prefix}{k}': result.mean[k] for k in ('P@20', 'CR@20', 'F1@20')}

  return score_step


def rank_colt(split: Split, store: features_lib.FeatureStore, protocol: str,
              params: MethodParams) -> dict:
  """CoLT (Alg. 2) and its ablations: topic -> [(photo id, score)].

  With the TTC (`post='ttc'`) this is `Retriever.search` (global protocol: the N most similar
  photos of the split) or `Retriever.rank` (pool protocol: the topic's photos), exactly as
  users call them: Eq. 6's k, then its continuation, up to `list_length` photos. The
  ablations `post='topk'` / `'dbscan'` replace phi by top-k / UMONS over h^.
  """
  if params.post == 'ttc':
    return run_retriever(colt_retriever(params), split, store, protocol)
  reencoder = restore.load_reencoder(params.scl_checkpoint) if params.scl_checkpoint else None
  cands = candidates_lib.build_candidates(split, restore.reencode_store(store, reencoder), protocol)
  return rank_baseline('topk' if params.post == 'topk' else 'umons', cands, params)


def rank(method: str, split: Split, store: Optional[features_lib.FeatureStore], protocol: str,
         params: MethodParams, cands: Optional[list] = None,
         train: Optional[tuple] = None) -> dict:
  """Any method: topic -> [(photo id, score)] (at most 50 per topic). A learned method
  (`LEARNED_GRIDS`) is fitted on `train`, (Split, FeatureStore) of the training topics."""
  if method not in METHODS:
    raise InputError(f'--method: unknown method {method!r}; expected one of {METHODS}')
  if method == 'colt':
    return rank_colt(split, store, protocol, params)
  if method != 'flickr' and store is None:
    raise InputError(f'method {method} needs a feature store (--features_dir)')
  if method in LEARNED_GRIDS:
    if train is None:
      raise InputError(f'--method {method} needs training topics (the dev split) to fit on')
    return gbt_pairs.fit(*train, protocol).rank(split, store, protocol, RUN_LENGTH,
                                                params.gbt_weight)
  if cands is None:
    cands = candidates_lib.build_candidates(split, store,
                                            'pool' if method == 'flickr' else protocol)
  return rank_baseline(method, cands, params)


def score(split: Split, run: Mapping[int, Sequence[tuple]]) -> metrics.EvalResult:
  return metrics.evaluate_run({t: [p for p, _ in r] for t, r in run.items()},
                              split.ground_truth)


def tune(method: str, split: Split, store: features_lib.FeatureStore, protocol: str,
         base: MethodParams, grid: Optional[Mapping[str, Sequence[Any]]] = None,
         metric: str = TUNE_METRIC) -> tuple:
  """Grid search on `split` (the dev split): (best params, [(setting, score)] in grid order).

  Ties keep the first setting of the grid (the smallest values). A learned method's settings
  are scored on out-of-fold predictions of `split`'s topics (`gbt_pairs.cross_fit`)."""
  grid = grid or GRIDS.get(method) or LEARNED_GRIDS.get(method)
  if not grid:
    return base, []
  if method in LEARNED_GRIDS:
    scores = gbt_pairs.cross_fit(split, store, protocol)
    run_of = lambda p: gbt_pairs.select(scores, weight=p.gbt_weight, k=RUN_LENGTH)
  else:
    cands = candidates_lib.build_candidates(split, store, protocol)
    run_of = lambda p: rank(method, split, store, protocol, p, cands)
  names = list(grid)
  results, best, best_score = [], base, -np.inf
  for values in itertools.product(*(grid[n] for n in names)):
    setting = dict(zip(names, values))
    params = dataclasses.replace(base, **setting)
    value = score(split, run_of(params)).mean[metric]
    results.append((setting, value))
    if value > best_score + 1e-12:
      best, best_score = params, value
  return best, results
