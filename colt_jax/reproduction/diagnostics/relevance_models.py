"""Would a relevance model beside phi move colt-pairs' list rule? Its lists rebuilt with the
relevance r of models fitted on each fold's training topics, per held-out topic of the
cross-validation (`experiments/diagnose.py --what relevance` runs it; `reproduce.py --report_only`
renders its table into RESULTS.md).

"What bounds it" (headroom) found relevance the bound of `colt-pairs rule`, and phi's
relevance head no better than the cosine to the query. The official descriptors describe what a
photo looks like, which the cosine does not carry: fitted on the training topics' photos
(rGT 1 against 0) over `gbt_pairs.PHOTO_FEATURES` (the query cosine and its place in the
pool, Flickr rank, views, tags, description length, distance to the place), alone or with
the ten descriptors (each z-scored with the training photos' statistics, `views.fit`),

* `logistic` (gbt-pairs' own relevance model: standardised features, L2 C = 0.01),
* `logistic + descriptors` (the same, with the descriptors),
* `boosted + descriptors` (scikit-learn's HistGradientBoostingClassifier, 200 rounds of 15
  leaves at rate 0.05, L2 1; settings fixed before any held-out score was seen),

give r in place of phi's, or mixed half and half with it. For each fold, the `colt-pairs rule`
row of seed 0 (its phi at its chosen checkpoint, its rule and parameters) reads each held-out
topic's pool as `rank` does (`PairsRetriever.pool_heads`), its list rebuilt by the row's own rule
(`headroom.listed`) with each condition's r and phi's p, scored by the official scorer and
paired per topic with phi's own lists. The models read no held-out topic, but every condition
is scored on held-out topics: a diagnostic, nothing is chosen by it (a row built on it must
choose its mix on training topics).
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional

import numpy as np

from colt_jax.baselines import gbt_pairs
from colt_jax.baselines import gbt_pairs_relevance
from colt_jax.data import views as views_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import significance
from colt_jax.reproduction.cross_validation import Reproduction
from colt_jax.reproduction.diagnostics import head_quality
from colt_jax.reproduction.diagnostics import headroom
from colt_jax.reproduction.reproduce_config import ReproduceConfig
from colt_jax.reproduction import variants as variants_lib
from colt_jax.util.errors import InputError

VARIANT = headroom.VARIANT  # 'colt-pairs rule'
MODELS = ('logistic', 'logistic + descriptors', 'boosted + descriptors')
PHI_SHARE = 0.5  # phi's share of r in the mixed conditions
CONDITIONS = (('phi', None),) + tuple((m, m) for m in MODELS) + tuple(
    (f'phi and {m}, half each', m) for m in MODELS)
METRICS = ('relevance_auc', 'P@20', 'CR@20', 'F1@20')


def relevance_path(dataset: str) -> str:
  """Where this diagnosis of `dataset` is kept (beside the other diagnoses; the report reads it
  from here)."""
  return f'docs/results/{dataset}-relevance.json'


def _model(name: str, seed: int = 0):
  # scikit-learn on first use, as gbt_pairs does.
  from sklearn.ensemble import HistGradientBoostingClassifier  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  from sklearn.pipeline import make_pipeline  # pylint: disable=g-import-not-at-top
  from sklearn.preprocessing import StandardScaler  # pylint: disable=g-import-not-at-top
  if name.startswith('logistic'):
    return make_pipeline(StandardScaler(), LogisticRegression(
        C=gbt_pairs.DEFAULT.relevance_c, max_iter=2000))
  return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15,
                                        l2_regularization=1.0, random_state=seed)


def photo_tables(split, store, raw: views_lib.RawViews,
                 transform: views_lib.ViewTransform) -> dict:
  """topic -> (photo ids, [n, F] photo features, [n, D] z-scored descriptors, [n] rGT) of the
  topic's pool candidates."""
  out, blocks, start = {}, {}, 0
  for name, dim in zip(raw.descriptor_names, raw.descriptor_dims):
    blocks[name], start = slice(start, start + dim), start + dim
  # gbt-pairs' own photo features of each topic's candidates (gbt_pairs's reading; the
  # baselines' modules stay as they are, so that their cached rows stay valid).
  topics = gbt_pairs._topics(split, store, 'pool', None, None)  # pylint: disable=protected-access
  for t in topics:
    topic, ids, feats = t.cands.topic, tuple(t.cands.photo_ids), t.photo_features()
    rows = raw.rows(ids, f'{split.dataset}/{split.split} descriptors')
    desc = [(raw.descriptors[rows, part].astype(np.float64) - transform.mean[name])
            / transform.std[name] for name, part in blocks.items()]
    rel = split.ground_truth[topic].relevance
    out[topic] = (ids, feats, np.concatenate(desc, axis=1),
                  np.array([rel.get(p, 0) for p in ids], np.int64))
  return out


def _inputs(name: str, feats: np.ndarray, desc: np.ndarray) -> np.ndarray:
  return np.concatenate([feats, desc], axis=1) if 'descriptors' in name else feats


def fit_models(tables: Mapping, seed: int = 0) -> dict:
  """name -> each of MODELS fitted on the tables' photos with an rGT of 1 or 0."""
  use = [(f[y >= 0], d[y >= 0], y[y >= 0] == 1) for _, f, d, y in tables.values()]
  labels = np.concatenate([y for *_, y in use])
  if labels.all() or not labels.any():
    raise InputError('relevance models: the training topics need relevant and irrelevant '
                     'photos')
  out = {}
  for name in MODELS:
    x = np.concatenate([_inputs(name, f, d) for f, d, _ in use])
    out[name] = _model(name, seed).fit(x, labels)
  return out


def condition_relevance(phi_r: np.ndarray, model_r: Mapping[str, np.ndarray]) -> dict:
  """label -> r of each of CONDITIONS from phi's r and each model's."""
  out = {}
  for label, model in CONDITIONS:
    if model is None:
      out[label] = phi_r
    elif label == model:
      out[label] = model_r[model]
    else:
      out[label] = PHI_SHARE * phi_r + (1.0 - PHI_SHARE) * model_r[model]
  return {k: np.asarray(v, np.float32) for k, v in out.items()}


def fold_scores(colt, models: Mapping, tables: Mapping, held: tuple,
                held_viewed: tuple) -> dict:
  """topic -> {condition label: {metric: value}} over a fold's held-out topics."""
  split = held[0]
  runs = {label: {} for label, _ in CONDITIONS}
  scores = {}
  for topic, cands in head_quality.by_topic(*held_viewed).items():
    ids, r, p = colt.pool_heads(cands.query, cands.features, cands.photo_ids)
    table_ids, feats, desc, _ = tables[topic]
    at = {pid: i for i, pid in enumerate(table_ids)}
    rows = np.array([at[pid] for pid in ids], np.int64)
    model_r = {name: m.predict_proba(_inputs(name, feats[rows], desc[rows]))[:, 1]
               for name, m in models.items()}
    gt = split.ground_truth[topic]
    for label, rr in condition_relevance(r, model_r).items():
      runs[label][topic] = [(pid, 0.0) for pid in headroom.listed(colt.settings, ids, rr, p)]
      scores.setdefault(str(topic), {})[label] = {
          'relevance_auc': head_quality.relevance_auc(rr, ids, gt.relevance)}
  for label, run in runs.items():
    for topic, m in evaluation.score(split, run).per_topic.items():
      scores[str(topic)][label].update({k: float(m[k]) for k in ('P@20', 'CR@20', 'F1@20')})
  return scores


def loaded(cfg: ReproduceConfig, log: Callable = print) -> Reproduction:
  """The reproduction's splits and stores, loaded once for both diagnoses."""
  rep = Reproduction(cfg, log)
  rep.load()
  return rep


def diagnose(cfg: ReproduceConfig, log: Callable = print, seed: int = 0,
             rep: Optional[Reproduction] = None) -> dict:
  """Every fold's held-out topics by `fold_scores`, the models fitted on the fold's training
  topics: {'variant', 'seed', 'folds', 'of_folds', 'topics', 'row_check', 'row_checked'}
  (`row_check`: the largest per-topic |F1@20| gap between phi's rebuilt lists and the row's
  saved scores)."""
  variant = variants_lib.row(VARIANT)
  rep = rep or loaded(cfg, log)
  name = f'{variant.name} (seed {seed}, pool)'
  out = {'variant': variant.name, 'seed': seed, 'folds': [], 'topics': {}, 'row_check': 0.0,
         'row_checked': 0}
  for fold, tag, train, held, row in rep.fold_rows(name):
    params = evaluation.MethodParams(**row['params'])
    _, held_viewed = rep.viewed(variant.view_spec, train, held)
    names = views_lib.ALL_DESCRIPTORS
    raw_train = views_lib.read_raw([train[0]], names)
    transform = views_lib.fit(views_lib.ViewSpec(descriptors=names), raw_train,
                              train[0].all_photo_ids())
    models = fit_models(photo_tables(*train, raw_train, transform), seed)
    tables = photo_tables(*held, views_lib.read_raw([held[0]], names), transform)
    colt = evaluation.colt_retriever(params)
    log(f' fold {fold.index}: models fitted on {len(fold.train_topics)} training topics; '
        f'{len(fold.test_topics)} held-out topics, rule {colt.settings.selection}')
    scores = fold_scores(colt, models, tables, held, held_viewed)
    headroom.add_fold(out, scores, row, {'fold': fold.index, 'tag': tag,
                                         'ttc_step': params.ttc_step,
                                         'selection': colt.settings.selection})
  return headroom.finished(out, rep.rows_root, name, cfg.folds)


def summary_lines(result: Mapping) -> list:
  """Markdown: per condition, the mean relevance AUC, P@20, CR@20 and both F1@20 readings,
  and the paired differences from phi's own lists (relevance AUC, official and paper F1@20)."""
  topics = result['topics']
  out = [f'Generated by `{result["command"]}` over {len(result["folds"])} of '
         f'{result["of_folds"]} folds ({len(topics)} held-out topics): the lists of '
         f'`{result["variant"]}` (seed {result["seed"]}, each fold\'s phi, rule and '
         'parameters) rebuilt by its rule with phi\'s pair probabilities and the relevance r of '
         'a model fitted on the fold\'s training topics (rGT 1 against 0), in place of phi\'s '
         f'or mixed with it ({PHI_SHARE:g} phi + {1 - PHI_SHARE:g} model). Models: `logistic` is '
         'gbt-pairs\' relevance model (the query cosine and its place in the pool, Flickr rank, '
         'views, tags, description length, distance to the place); `+ descriptors` adds the '
         'ten official descriptors, z-scored with the training photos\' statistics; `boosted` '
         'is a gradient-boosted classifier (settings fixed beforehand). Rebuilt from phi\'s own '
         'r, the lists score as the row (largest per-topic F1@20 gap '
         f'{result["row_check"]:.4f} over {result.get("row_checked", len(topics))} topics). '
         'No held-out topic reaches a model, but every condition is scored on held-out '
         'topics: a diagnostic, nothing chosen by it. Paired per topic with phi\'s own lists '
         '(95% bootstrap interval).', '',
         '| relevance r | relevance AUC | P@20 | CR@20 | F1@20 (official) | F1@20 (paper) '
         '| AUC - phi | official - phi | paper - phi |', '|---|---|---|---|---|---|---|---|---|']
  for label, _ in CONDITIONS:
    cells = [headroom.fmt(headroom.mean_of(topics, label, m)) for m in METRICS]
    cells += headroom.paired_cells(topics, label, differences=('relevance_auc',))
    out.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return out + ['']


# ------------------------------------------- the fair check: gbt-pairs with the same model

ROW = 'colt-pairs relevance'  # the row whose relevance model gbt-pairs is given here
GBT_CONDITIONS = (('gbt-pairs', 0.0), ('gbt-pairs, r half the relevance model', 0.5),
                  ('gbt-pairs, r the relevance model', 1.0))


def gbt_fold_scores(learner, weight: float, model, held: tuple, held_viewed: tuple) -> dict:
  """topic -> {condition of GBT_CONDITIONS: {P@20, CR@20, F1@20}}: gbt-pairs' lists (its
  pair model, its w) with its logistic r mixed with the relevance model's, (1 - a) r_gbt +
  a r_model, the model over each pool as it reads a view store's rows."""
  split, store = held_viewed
  scores = learner.predict(held[0], held[1], 'pool')
  out = {}
  for label, a in GBT_CONDITIONS:
    mixed = gbt_pairs_relevance.mixed_scores(scores, model, store, a)
    run = gbt_pairs.select(mixed, weight=weight, k=evaluation.RUN_LENGTH)
    for topic, m in evaluation.score(split, run).per_topic.items():
      out.setdefault(str(topic), {})[label] = {k: float(m[k]) for k in ('P@20', 'CR@20',
                                                                       'F1@20')}
  return out


def diagnose_gbt(cfg: ReproduceConfig, log: Callable = print,
                 rep: Optional[Reproduction] = None) -> dict:
  """Per fold: gbt-pairs refitted on the training topics (as its row: the same seed and w)
  with the `colt-pairs relevance` row's own relevance model (fitted on the same training
  topics) mixed into its r, beside that row's per-topic scores (its seeds averaged):
  {'folds', 'of_folds', 'topics': {topic: {condition | ROW: metrics}}, 'row_check',
  'row_checked'} (`row_check`: gbt-pairs' rebuilt lists against its row's saved P@20, CR@20
  and F1@20)."""
  from colt_jax.pairs import relevance_model as relevance_lib  # pylint: disable=g-import-not-at-top
  variant = variants_lib.row(ROW)
  rep = rep or loaded(cfg, log)
  out = {'folds': [], 'topics': {}, 'row_check': 0.0, 'row_checked': 0}
  for fold, tag, train, held, row in rep.fold_rows(f'{ROW} (seed 0, pool)'):
    gbt_row = rep.saved_row(tag, 'gbt-pairs (pool)')
    if gbt_row is None:
      log(f' fold {fold.index}: no gbt-pairs row; left out')
      continue
    weight = float(gbt_row['chosen']['gbt_weight'])
    _, held_viewed = rep.viewed(variant.view_spec, train, held)
    learner = gbt_pairs.fit(*train, 'pool')
    model = relevance_lib.load(row['relevance_model'])
    log(f' fold {fold.index}: gbt-pairs refitted (w {weight:g}); {row["relevance_model"]}')
    scores = gbt_fold_scores(learner, weight, model, held, held_viewed)
    seeds = [rep.saved_row(tag, f'{ROW} (seed {s}, pool)') for s in cfg.seeds]
    if any(s is None for s in seeds):
      raise InputError(f'{rep.rows_root}: fold {fold.index} lacks a seed of {ROW} '
                       f'({len(cfg.seeds)} expected): rerun experiments/reproduce.py')
    # every metric of the rebuilt lists against the row's
    headroom.check_row(out, scores, gbt_row, 'gbt-pairs', ('P@20', 'CR@20', 'F1@20'))
    for topic, s in scores.items():
      s[ROW] = {k: float(np.mean([r['per_topic'][topic][k] for r in seeds]))
                for k in ('P@20', 'CR@20', 'F1@20')}
    out['topics'].update(scores)
    out['folds'].append({'fold': fold.index, 'tag': tag, 'gbt_weight': weight,
                         'seeds': len(seeds)})
  if not out['folds']:
    raise InputError(f'{rep.rows_root}: no fold has both gbt-pairs and {ROW} rows: rerun '
                     'experiments/reproduce.py')
  out['of_folds'] = cfg.folds
  return out


def target_note_lines(result, method: str) -> list:
  """Markdown under a relevance row's target verdict: its baselines are as specified, and
  (given this diagnosis, `result`) the row against gbt-pairs with the same relevance model."""
  out = [
      f'`{method}` ranks with a non-neural relevance model beside phi. Among the baselines '
      'above, `gbt-pairs` is as specified (its logistic relevance) and `gbt-pairs relevance` '
      'is gbt-pairs given the same relevance model, w and its share a chosen on the '
      'training topics (`colt_jax/reproduction/gbt_relevance.py`): the comparison that says whether '
      'phi earns its place.'
  ]
  gbt = (result or {}).get('gbt')
  if gbt and method == ROW:
    topics = gbt['topics']
    column = lambda label, m: {t: s[label][m] for t, s in topics.items()}
    label = GBT_CONDITIONS[1][0]
    official = significance.paired_difference(column(ROW, 'F1@20'), column(label, 'F1@20'))
    paper = significance.paired_paper_f1(column(ROW, 'P@20'), column(ROW, 'CR@20'),
                                         column(label, 'P@20'), column(label, 'CR@20'))
    out[0] += (f' Against gbt-pairs given the same model ("{label}", a check on held-out '
               'topics, "Would a relevance model beside phi move colt-pairs\' list rule?"): '
               f'F1@20 (official) {official.text()}: **{official.verdict}**; F1@20 (paper) '
               f'{paper.mean:+.4f} [{paper.low:+.4f}, {paper.high:+.4f}]: '
               f'**{paper.verdict}**.')
  return out + ['']


def gbt_summary_lines(result: Mapping) -> list:
  """Markdown: each gbt-pairs condition and the row, the row minus each (both readings)."""
  topics = result['topics']
  out = [f'gbt-pairs given the same relevance model (`{result["command"]}`, '
         f'{len(result["folds"])} of {result["of_folds"]} folds, {len(topics)} held-out '
         'topics): per fold, gbt-pairs refitted on the training topics as its row fits it (its '
         'seed, its w chosen on the training topics), its logistic r mixed with the relevance '
         f'model of `{ROW}` of that fold ((1 - a) r + a r_model), against `{ROW}` itself '
         '(its seeds averaged per topic). Rebuilt with a = 0, the lists score as gbt-pairs\' '
         f'row (largest per-topic gap in P@20, CR@20 or F1@20 {result["row_check"]:.4f} over '
         f'{result["row_checked"]} topics). A check of fairness on held-out topics: nothing '
         'chosen by it.', '',
         f'| lists | P@20 | CR@20 | F1@20 (official) | F1@20 (paper) | `{ROW}` - lists '
         f'(official) | `{ROW}` - lists (paper) |', '|---|---|---|---|---|---|---|']
  column = lambda label, m: {t: s[label][m] for t, s in topics.items()}
  for label in [c for c, _ in GBT_CONDITIONS] + [ROW]:
    means = [headroom.mean_of(topics, label, m) for m in ('P@20', 'CR@20', 'F1@20')]
    cells = [headroom.fmt(v) for v in means]
    cells.append(f'{float(significance.harmonic_mean(means[0], means[1])):.4f}')
    if label == ROW:
      cells += ['-', '-']
    else:
      cells.append(significance.paired_difference(column(ROW, 'F1@20'),
                                                  column(label, 'F1@20')).text())
      cells.append(significance.paired_paper_f1(
          column(ROW, 'P@20'), column(ROW, 'CR@20'), column(label, 'P@20'),
          column(label, 'CR@20')).text())
    out.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return out + ['']
