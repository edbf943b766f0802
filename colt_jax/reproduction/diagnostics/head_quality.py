"""How well colt-pairs' heads predict what its lists are built from, against the signals the
baselines use: per held-out topic of the cross-validation, the ROC AUC of

* same-cluster pairs: over the pairs of a topic's candidates that both have a dGT cluster,
  positive when the two share it, scored by phi's pair head (p_ij, `PairsRetriever.pool_heads`),
  by `gbt-pairs`' boosted pair model (fitted on the fold's training topics), by the text
  features' cosine and by the cosine of the colt-pairs feature setting (text + descriptors +
  metadata, its statistics fitted on the fold's training photos);
* relevance: over the candidates with an rGT of 1 or 0, scored by phi's relevance head (r_i),
  `gbt-pairs`' logistic relevance model, and the cosine to the query (text, feature setting).

Every topic is scored by the fold that held it out, with that fold's models (the colt-pairs
row of seed 0, at the checkpoint its inner folds chose), over the photos phi sees (the first
N by similarity). `experiments/diagnose.py --what heads` runs it; the report reads its JSON.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from colt_jax.baselines import gbt_pairs
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import significance
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.reproduction.cross_validation import Reproduction
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction import variants as variants_lib
from colt_jax.reproduction.variants import CV_VARIANTS
from colt_jax.util.numerics import l2_normalise


def heads_path(dataset: str) -> str:
  """Where `experiments/diagnose.py --what heads` keeps the diagnosis of `dataset` (the report reads
  it from there; outside docs/results/<dataset>/, which reproduce.py replaces as a whole)."""
  return f'docs/results/{dataset}-heads.json'


SCORERS = ('phi', 'gbt-pairs', 'text cosine', 'feature-setting cosine')
MIN_CLASS = 1  # pairs (photos) of each class a topic needs for its AUC


def auc(scores: np.ndarray, positive: np.ndarray) -> Optional[float]:
  """ROC AUC of `scores` for the boolean `positive` (None without both classes)."""
  from sklearn.metrics import roc_auc_score  # pylint: disable=g-import-not-at-top
  positive = np.asarray(positive, bool)
  if positive.sum() < MIN_CLASS or (~positive).sum() < MIN_CLASS:
    return None
  return float(roc_auc_score(positive, np.asarray(scores, np.float64)))


def pair_auc(prob: np.ndarray, photo_ids: Sequence[str],
             clusters: Mapping[str, int]) -> Optional[float]:
  """AUC of `prob` [n, n] over the pairs i < j of photos that both have a cluster."""
  idx = np.array([i for i, p in enumerate(photo_ids) if p in clusters], np.int64)
  if len(idx) < 2:
    return None
  i, j = (idx[u] for u in np.triu_indices(len(idx), 1))
  same = np.array([clusters[photo_ids[a]] == clusters[photo_ids[b]] for a, b in zip(i, j)])
  return auc(prob[i, j], same)


def relevance_auc(score: np.ndarray, photo_ids: Sequence[str],
                  relevance: Mapping[str, int]) -> Optional[float]:
  """AUC of `score` [n] over the photos with an rGT of 1 or 0."""
  labels = np.array([relevance.get(p, -1) for p in photo_ids])
  known = labels >= 0
  return auc(np.asarray(score)[known], labels[known] == 1)


def _cosines(features: np.ndarray, query: np.ndarray) -> tuple:
  f = l2_normalise(np.asarray(features, np.float64))
  q = l2_normalise(np.asarray(query, np.float64)[None])[0]
  return f @ q, f @ f.T


def by_topic(split, store) -> dict:
  """topic -> its pool candidates (`TopicCandidates`) of `split` over `store`."""
  return {c.topic: c for c in candidates_lib.build_candidates(split, store, 'pool')}


def _positions(ids: Sequence[str], within: Sequence[str]) -> np.ndarray:
  """The index in `within` of each of `ids`."""
  pos = {pid: i for i, pid in enumerate(within)}
  return np.array([pos[pid] for pid in ids], np.int64)


def topic_scores(colt, held: tuple, held_viewed: tuple,
                 learned: Mapping[int, gbt_pairs.TopicScores]) -> dict:
  """topic -> {scorer: {'pair_auc', 'relevance_auc'}} over the held-out topics of a fold:
  `colt` (a Retriever: phi's heads, `pool_heads`), `learned` (gbt-pairs' predictions per
  topic) and the cosines of the text (`held`) and of the feature setting (`held_viewed`)."""
  split = held[0]
  text, viewed = by_topic(*held), by_topic(*held_viewed)
  out = {}
  for topic, cands in viewed.items():
    gt = split.ground_truth[topic]
    ids, r, p = colt.pool_heads(cands.query, cands.features, cands.photo_ids)
    t, g = text[topic], learned[topic]
    g_sel = _positions(ids, g.photo_ids)
    scored = {'phi': (r, p),
              'gbt-pairs': (g.relevance[g_sel], g.pair_prob[np.ix_(g_sel, g_sel)]),
              'text cosine': _cosines(t.features[_positions(ids, t.photo_ids)], t.query),
              'feature-setting cosine': _cosines(
                  cands.features[_positions(ids, cands.photo_ids)], cands.query)}
    out[str(topic)] = {name: {'pair_auc': pair_auc(pp, ids, gt.clusters),
                              'relevance_auc': relevance_auc(rr, ids, gt.relevance)}
                       for name, (rr, pp) in scored.items()}
  return out


def diagnose(cfg: ReproduceConfig, log: Callable = print, seed: int = 0) -> dict:
  """Every cross-validation fold's held-out topics scored by `topic_scores` with that fold's
  models: {'folds': [{'fold', 'tag', 'ttc_checkpoint', 'ttc_step'}], 'topics': {...}}. The
  colt-pairs rows (and their trainings in the work folder) must exist: run reproduce.py."""
  variant = variants_lib.row(CV_VARIANTS[0])
  rep = Reproduction(cfg, log)
  rep.load()
  name = f'{variant.name} (seed {seed}, pool)'
  out = {'variant': variant.name, 'seed': seed, 'folds': [], 'topics': {}}
  for fold, tag, train, held, row in rep.fold_rows(name):
    params = evaluation.MethodParams(**row['params'])
    _, held_viewed = rep.viewed(variant.view_spec, train, held)
    log(f' fold {fold.index}: fitting gbt-pairs on {len(fold.train_topics)} training topics, '
        f'scoring {len(fold.test_topics)} held-out topics')
    learned = {s.topic: s for s in gbt_pairs.fit(*train, 'pool').predict(*held, 'pool')}
    out['topics'].update(topic_scores(evaluation.colt_retriever(params), held,
                                      held_viewed, learned))
    out['folds'].append({'fold': fold.index, 'tag': tag, 'ttc_checkpoint': params.ttc_checkpoint,
                         'ttc_step': params.ttc_step})
  out['of_folds'] = cfg.folds
  return out


def summary_lines(result: Mapping, command: str) -> list:
  """Markdown: mean AUC per scorer (pairs, relevance) over the topics that have one, and phi
  paired per topic with each other scorer (colt_jax.evaluation.significance)."""
  topics = result['topics']
  folds = [f['fold'] for f in result.get('folds', [])]
  of = result.get('of_folds', len(folds))
  scope = (f'folds {", ".join(map(str, folds))} of {of} ({len(topics)} topics)'
           if len(folds) < of else f'all {of} folds ({len(topics)} topics)')
  out = [f'Generated by `{command}` over {scope}: per held-out topic of the cross-validation '
         '(each by the '
         f'fold that held it out, with that fold\'s `{result["variant"]}` phi of seed '
         f'{result["seed"]} at its chosen checkpoint, and `gbt-pairs` fitted on the fold\'s '
         'training topics), the ROC AUC of same-cluster pairs (pairs of photos that both have '
         'a dGT cluster) and of relevance (photos with rGT 1 or 0), over the photos phi sees. '
         'Means over topics; phi paired per topic with each scorer (95% bootstrap interval).',
         '', '| scorer | pair AUC | topics | relevance AUC | topics |', '|---|---|---|---|---|']
  for name in SCORERS:
    cells = []
    for metric in ('pair_auc', 'relevance_auc'):
      values = [s[name][metric] for s in topics.values() if s[name][metric] is not None]
      cells += [f'{np.mean(values):.4f}' if values else '-', str(len(values))]
    out.append(f'| {name} | ' + ' | '.join(cells) + ' |')
  out.append('')
  for metric, text in (('pair_auc', 'pair AUC'), ('relevance_auc', 'relevance AUC')):
    for name in SCORERS[1:]:
      a = {t: s['phi'][metric] for t, s in topics.items()
           if s['phi'][metric] is not None and s[name][metric] is not None}
      b = {t: topics[t][name][metric] for t in a}
      if len(a) >= 2:
        d = significance.paired_difference(a, b)
        out.append(f'- {text}, phi - {name}: {d.text()}: **{d.verdict}**')
  return out + ['']
