"""docs/RESULTS.md from the payload of `pipeline.run` (results.json).

Tables like the paper's: Table 2 (every method, P/CR/F1 at 10, 20 and 50), Table 3
(ablations), Table 4 (SCL pairs), the bank's alpha (Eq. 3), Tables 5-7 (X, L, N), and the
cross-validation over all topics. CoLT rows trained with several seeds show mean ± standard
deviation. Every number comes from the payload; the comparisons in the text are computed here
too. F1@20 is given in both readings: the official one (mean of per-topic F1) and the paper's
(harmonic mean of the mean P@20 and the mean CR@20; `PAPER_F1`). The best tuned baseline a
comparison names is chosen on training topics alone (`best_baseline`). Aggregation, tables and
paired comparisons: `report_tables.py`; the analysis sections: `report_sections.py`; the
cross-validation's: `report_cross_validation.py`; here, the report's order and its text.
"""
from __future__ import annotations

import datetime
import os
from typing import Any, Mapping, Optional, Sequence

from colt_jax.reproduction import recommendation
from colt_jax.reproduction import report_cross_validation as cv_report
from colt_jax.reproduction import report_sections as sections_lib
from colt_jax.reproduction import report_summary
from colt_jax.reproduction import report_tables as tables
from colt_jax.util import outputs

F1_NOTE = ('**Two readings of F1@20.** *F1@20 (official, mean of per-topic F1)*: the MediaEval '
           'scorer\'s, the mean over topics of each topic\'s 2 P@20 CR@20 / (P@20 + CR@20); '
           'every other F1 and every choice in this report use it. *F1@20 (paper: harmonic '
           'mean of mean P and mean CR)*: the reading of the paper\'s tables, the harmonic '
           'mean of the mean P@20 and the mean CR@20 over topics (P@20 .8548 and CR@20 .6416 '
           'give .7330); the harmonic mean is concave, so it is never below the official '
           'reading. CoLT cells of either: mean ± std over seeds of each seed\'s value.')

PAIRED_NOTE = ('Paired differences over topics (`colt_jax/evaluation/significance.py`): the mean '
               'per-topic difference (seeds averaged per topic first), its 95% percentile '
               'bootstrap interval (10,000 resamples of the topics) and wins/ties/losses; '
               '"better" or "worse" only where the interval excludes 0. The paper\'s F1@20 '
               'is compared the same way: its difference on all topics, and its interval from '
               'resampled topics (the same for both rows), its reading recomputed on each '
               'resample (its wins/ties/losses would be the per-topic F1\'s, not repeated). '
               'The best tuned baseline of a comparison is chosen on training topics alone: '
               'dev -> test, the baseline row (any feature setting) with the highest F1@20 of '
               'its tuned setting on dev; in cross-validation, per fold, the one with the '
               'highest F1@20 on that fold\'s training topics.')


def _label(name: str, agg: Mapping[str, Mapping[str, tuple]]) -> str:
  n = agg[name]['F1@20'][2] if name in agg else 1
  return f'{name} ({n} seeds)' if n > 1 else name


def _config_lines(payload: Mapping[str, Any]) -> list:
  lines = []
  for which, (scl, ttc) in payload['base_configs'].items():
    lines.append(
        f'- `{which}`: g: lr {scl["learning_rate"]}, beta {scl["beta"]}, tau {scl["tau"]}, '
        f'alpha {scl["alpha"]}, batch {scl["batch_size"]} queries x '
        f'{scl["images_per_query"]} photos, {scl["num_steps"]} steps. phi: L={ttc["num_layers"]}, '
        f'd={ttc["model_dim"] or "feature dim"}, {ttc["num_heads"]} heads, N={ttc["num_images"]}, '
        f'lr {ttc["learning_rate"]}, batch {ttc["batch_size"]}, dropout {ttc["dropout"]} '
        f'(attention weights {ttc.get("attention_dropout", ttc["dropout"])}), labels '
        f'{ttc.get("label_scheme", "global")}, '
        f'query_relative={ttc["query_relative"]}, augmentation p_q={ttc["p_q"]} '
        f'p_v={ttc["p_v"]} p_d={ttc["p_d"]} p_c={ttc["p_c"]}, {ttc["num_steps"]} steps.')
  return lines


def _minutes(seconds: float) -> str:
  """'1.4 minutes', '92 minutes': a tenth of a minute under ten minutes."""
  minutes = round(seconds / 60, 1)
  return f'{minutes:.1f} minutes' if minutes < 10 else f'{minutes:.0f} minutes'


def _compute_text(compute: Optional[Mapping]) -> str:
  """How long computing every row took, from the rows' own records (results.json
  `compute`); '' when none is timed."""
  if not compute or not compute.get('timed'):
    return ''
  text = (f'Its {compute["rows"]} rows and choices recorded '
          f'{compute["seconds"] / 3600:.1f} hours of compute on this 2-core machine (each row '
          'its own time and that of the trainings it ran; a row computed again over trainings '
          'that an earlier row ran records less, so this is a floor of a run from scratch)')
  if compute['timed'] < compute['rows']:
    text += (f' for the {compute["timed"]} of them that recorded their time (rows cached by '
             'older code did not)')
  return text + '. '


def _partial_lines(payload: Mapping[str, Any]) -> list:
  """A paragraph naming what a run with fewer rows or protocols than the full reproduction
  left out (`--variants`, `--protocol`), empty for a full run."""
  from colt_jax.reproduction import reproduce_config
  from colt_jax.reproduction import variants as variants_lib
  ran = set(payload['config']['variants'])  # as asked (the synthetic data drops view rows)
  left = [n for n in variants_lib.DEFAULT_VARIANTS if n not in ran]  # opt-in rows aside
  protocols = [p for p in reproduce_config.ReproduceConfig().protocols
               if p not in payload['config']['protocols']]
  if not left and not protocols:
    return []
  parts = []
  if left:
    parts.append(f'{len(left)} of the {len(variants_lib.DEFAULT_VARIANTS)} CoLT rows (' +
                 ', '.join(f'`{n}`' for n in left) + ')')
  if protocols:
    parts.append(f'the {" and ".join(protocols)} protocol')
  return [f'**Part of the full reproduction.** This run left out {"; and ".join(parts)}; '
          f'`python experiments/reproduce.py --dataset {payload["dataset"]}` computes '
          'everything, reusing the rows of this one.', '']


def render(payload: Mapping[str, Any], command: str,
           choose_steps: Optional[Sequence[Mapping]] = None,
           analysis: str = '', topic_stats: Optional[Mapping] = None,
           heads: Optional[Mapping] = None, phi_steps: Sequence[Mapping] = (),
           headroom: Optional[Mapping] = None, relevance: Optional[Mapping] = None,
           relevance_signals: Optional[Mapping] = None,
           recommended: Optional[recommendation.Choice] = None,
           travel: Sequence[str] = ()) -> str:
  """The report: a summary (`report_summary`, with `recommended` the dev choice of the
  recommended method), then every table and analysis (`travel`: the lines of
  `report_travel.section`)."""
  rows = payload['rows']
  protocols = payload['config']['protocols']
  variants = {v['name']: v for v in payload['variants']}
  ds = payload['dataset']
  rdir = payload.get('results_dir', f'docs/results/{ds}')
  feats = payload['features']['test']
  out = [f'# CoLT on real {ds} data', '',
         f'Generated by `{command}` on {datetime.date.today().isoformat()} '
         '(`colt_jax/reproduction/pipeline.py`, `colt_jax/reproduction/report.py`); its last '
         f'invocation took {_minutes(payload["seconds"])} on this machine (an invocation reuses '
         'the rows and trainings that earlier ones finished). '
         + _compute_text(payload.get('compute')) + 'Raw numbers, per-topic scores and every '
         f'configuration: `{rdir}/results.json`; run files: `{rdir}/runs/`.', '',
         *report_summary.summary_lines(payload, recommended, headroom),
         '**Features.** f is all-MiniLM-L6-v2 over text (`--encoder minilm`): each photo is '
         'its Flickr metadata text (title, tags, description without HTML), each query its '
         'topic title, each category its name. No photo pixels are available here and no '
         'CLIP weights can be downloaded, so these tables measure the diversification '
         'machinery (SCL, TTC, post-processing) on real queries, photos and ground truth, '
         'not CLIP; they are not comparable with the paper\'s numbers. '
         f'Store: {feats.get("encoder")}, dim {feats.get("dim")}.', '',
         f'**Splits.** Trained and tuned on dev ({payload["topics"]["dev"]} topics), scored '
         f'on test ({payload["topics"]["test"]} topics), official metrics '
         '(`colt_jax/evaluation/metrics.py`, which reproduces the official scorer). Protocols: '
         '`pool` (official: rank the topic\'s own photos) and `global` (the paper\'s: rank the N '
         'photos of the whole test collection most similar to the query).', '', F1_NOTE, '']
  out += _partial_lines(payload)
  colt_names = [v for v in variants if variants[v]['table'] == 'main']
  main_names = list(tables.TABLE_BASELINES) + colt_names
  for protocol in protocols:
    agg = tables.aggregate(rows, protocol)
    labels = dict(tables.BASELINE_LABELS, **{n: _label(n, agg) for n in colt_names})
    out += [f'## Table 2: every method, {ds} test, {protocol} protocol', '',
            tables.table(agg, main_names, labels, tables.TABLE_COLUMNS, headers=tables.HEADERS), '']
    if protocol == 'global':
      out += ['Flickr order exists per topic only, so its row is the pool protocol\'s.', '']
    if protocol == protocols[0]:
      out += [PAIRED_NOTE, '']
    out += [f'CoLT ({protocol}), paired per topic:'] + tables.comparison_lines(
        rows, 'colt', tables.TABLE_BASELINES, protocol) + tables.best_baseline_line(
            rows, 'colt', protocol) + ['']
  short = sections_lib.short_list_lines(rows)
  if short:
    out += ['Rows whose ranked lists are shorter than 20 (Eq. 6 without filling returns X '
            'photos per predicted category and nothing else; P@20 and CR@20 count the empty '
            'places as misses):'] + short + ['']
  agg_by = {p: tables.aggregate(rows, p) for p in protocols}
  sections = [('ablation', 'Table 3: ablations',
               ['topk', 'colt', 'without SCL', 'umons', 'SCL + DBSCAN', 'SCL + top-k',
                'without DA', 'global labels', 'all names', 'without fill',
                'argmax labels']),
              ('pairs', 'Table 4: pairs of the SCL loss (Eq. 2)',
               ['colt', 'without pair (2)', 'without pair (4)']),
              ('bank', 'The prototype bank\'s alpha (Eq. 3): as written vs. as momentum',
               ['colt', 'alpha=0.99']),
              ('X', 'Table 5: images per category X (Eq. 6)', ['colt', 'X=2', 'X=3']),
              ('L', 'Table 6: encoder layers L', ['colt', 'L=6', 'L=8', 'L=10']),
              ('N', 'Table 7: candidate images N', ['N=150', 'colt', 'N=250']),
              ('views', 'Feature settings of f (beyond the paper): text, + visual descriptors, '
               '+ metadata; the baselines on the same features', sections_lib.view_rows(variants)),
              ('heads', 'colt-pairs (beyond the paper): phi predicts relevance and '
               'same-cluster pairs; lists by its heads (rule and parameters chosen on training '
               'topics)',
               ['topk', 'colt', 'gbt-pairs', 'gbt-pairs relevance', 'colt-pairs', 'colt-pairs rule',
                'colt-pairs blend', 'colt-pairs ensemble', 'colt-pairs dpp',
                'colt-pairs relevance', 'colt-pairs no-relevance-head',
                'colt-pairs no-pair-head', 'colt-pairs no-class-head', 'colt-pairs cluster',
                'colt-pairs feature tokens', 'colt-pairs text-only tokens',
                'colt-pairs without descriptors',
                'colt-pairs without metadata'] + [  # and one row per descriptor, when run
                    n for n in variants if n.startswith('colt-pairs without ')
                    and n not in ('colt-pairs without descriptors',
                                  'colt-pairs without metadata')])]
  base_scl, base_ttc = payload['base_configs']['colt']
  rename = {'colt': 'SCL + TTC (colt)', 'topk': 'without SCL & TTC (top-k on f)',
            'umons': 'UMONS'}
  for key, title, names in sections:
    if not any(n in variants and variants[n]['table'] == key for n in names):
      continue
    cols = [f'{c} ({p})' for p in protocols for c in tables.TABLE_SHORT_COLUMNS]
    headers = {f'{c} ({p})': f'{tables.HEADERS.get(c, c)} ({p})' for p in protocols
               for c in tables.TABLE_SHORT_COLUMNS}
    merged = {}
    for p in protocols:
      for n, v in agg_by[p].items():
        merged.setdefault(n, {}).update({f'{c} ({p})': v[c]
                                         for c in tables.TABLE_SHORT_COLUMNS if c in v})
    labels = {n: rename.get(n, n) for n in names}
    if key == 'X':
      labels['colt'] = 'X=1 (colt)'
    if key == 'L':
      labels['colt'] = f'L={base_ttc["num_layers"]} (colt)'
    if key == 'N':
      labels['colt'] = f'N={base_ttc["num_images"]} (colt)'
    if key == 'bank':
      labels['colt'] = f'alpha={base_scl["alpha"]} (colt)'
    out += [f'## {title}', '', tables.table(merged, names, labels, cols, bold_best=False,
                                            headers=headers), '']
    for p in protocols:
      lines = tables.comparison_lines(rows, 'colt', [n for n in names if n != 'colt'], p,
                                      {n: f'{labels[n]} ({p})' for n in names})
      if lines:
        out += [f'`colt` paired per topic with each row ({p}):'] + lines + ['']
      if key == 'heads':  # each colt-pairs ablation against the row it changes
        lines = tables.comparison_lines(
            rows, 'colt-pairs', [n for n in names if n.startswith('colt-pairs ')], p,
            {n: f'{labels[n]} ({p})' for n in names})
        if lines:
          out += [f'`colt-pairs` paired per topic with each of its variants ({p}):'] + lines + [
              '']
        for method in [n for n in names if variants.get(n, {}).get('relevance_mixes')]:
          lines = tables.comparison_lines(rows, method, ['gbt-pairs relevance'], p,
                                          {n: f'{labels[n]} ({p})' for n in names})
          if lines:  # its fair baseline: gbt-pairs given the same relevance model
            out += [f'`{method}` paired per topic with gbt-pairs given its relevance model '
                    f'({p}):'] + lines + ['']
  abl = payload['config'].get('ablation_protocols') or protocols
  n_abl = payload['config'].get('ablation_seeds', len(payload['config']['seeds']))
  seeds_text = ('every seed, like `colt` (cells: mean ± std over seeds)'
                if n_abl >= len(payload['config']['seeds']) else
                f'the first {n_abl} of the seeds {payload["config"]["seeds"]} (to fit the CPU '
                'budget; `colt`, `colt-paper` and `colt-pairs` run every seed)')
  out += ['Each ablation changes one thing of its row\'s configuration (`colt`, or '
          '`colt-pairs` for the colt-pairs rows, which take the w chosen for `colt-pairs`) '
          f'and is trained with {seeds_text}; X only changes the '
          'post-processing, so its rows reuse `colt`\'s models. SCL + DBSCAN tunes '
          'DBSCAN\'s parameters on dev\'s re-encoded features with the UMONS grid. phi is '
          'trained under the protocol it is scored on. Ablations are scored under the '
          f'{" and ".join(abl)} protocol{"s" if len(abl) > 1 else ""} ("-": not run, to fit '
          'the CPU budget).', '']
  out += cv_report.section_lines(payload, protocols, variants, relevance)
  if heads:
    from colt_jax.reproduction.diagnostics import head_quality
    out += ['## What colt-pairs\' heads predict on held-out topics', '']
    out += head_quality.summary_lines(heads, heads.get('command',
                                                       'experiments/diagnose.py --what heads'))
  if phi_steps:
    from colt_jax.reproduction.diagnostics import steps_quality
    out += steps_quality.section_lines(phi_steps)  # experiments/diagnose.py --what steps's
  if headroom:
    from colt_jax.reproduction.diagnostics import headroom as headroom_lib
    out += ['## How far could better heads take colt-pairs\' list rule?', '']
    out += headroom_lib.summary_lines(headroom)
  if relevance:  # experiments/diagnose.py --what relevance's
    from colt_jax.reproduction.diagnostics import relevance_models
    out += ['## Would a relevance model beside phi move colt-pairs\' list rule?', '']
    out += relevance_models.summary_lines(relevance)
    if relevance.get('gbt'):
      out += relevance_models.gbt_summary_lines(relevance['gbt'])
  if relevance_signals:  # experiments/diagnose.py --what signals's
    from colt_jax.reproduction.diagnostics import relevance_signals as signals_lib
    out += ['## Would pool context or photo metadata move the relevance model?', '']
    out += signals_lib.summary_lines(relevance_signals)
  out += sections_lib.g_effect_lines(rows, payload.get('cv'))
  if topic_stats:
    out += ['## Per-topic analysis', '',
            'Where `colt` and the colt-pairs rows gain and lose against the best tuned baseline,'
            ' from the per-topic scores in results.json and each '
            'topic\'s ground truth (pool size, share of relevant photos, clusters).', '',
            '### dev -> test', '']
    for method in ('colt',) + tables.CV_ROWS:
      out += sections_lib.per_topic_analysis(rows, topic_stats, 'pool', method=method)
    if payload.get('cv'):
      out += ['### cross-validation', '']
      for method in ('colt',) + tables.CV_ROWS:
        out += sections_lib.per_topic_analysis(payload['cv']['merged'], topic_stats, 'pool',
                                               method=method, folds=payload['cv']['folds'])
  out += list(travel)
  out += ['## How every choice was made', '']
  out += _config_lines(payload)
  out += ['- `colt-paper` takes the paper\'s hyper-parameters (Sec. 4.3: lr 1e-5 and beta '
          '0.02 for g, lr 1e-4 and L=8 for phi, no query_relative) and only the width, heads '
          'and number of steps of `colt` (a paper-size phi, d=384, costs ~600 GFLOP a step: '
          'too slow for this 2-core CPU).',
          '- The `colt` values of phi\'s lr, L, width and query_relative are the synthetic '
          'configuration\'s (settled before any real data was read), with a 64-d projection '
          'of the 384-d MiniLM features. g\'s beta and lr, phi\'s number of steps, its label '
          'scheme and its relevance threshold were chosen on dev hold-outs (below). Nothing '
          'was tuned on test.']
  thresholds = payload.get('irrelevant_thresholds') or {}
  if thresholds:
    out += ['- phi\'s relevance threshold (a photo is "irrelevant" only when phi gives that '
            'class more than this probability; 0 = the argmax of Eq. 4), per protocol: ' +
            ', '.join(f'{p} {t}' for p, t in thresholds.items()) +
            ' (rows "argmax labels" and `colt-paper` use 0).']
  steps = payload.get('ttc_steps') or {}
  if steps:
    out += ['- phi\'s number of steps (of `colt` and `colt-paper`, and of every ablation that '
            'does not set its own), per protocol, from the dev choice (the flagfile\'s when '
            'none was made): ' + ', '.join(f'{p} {n}' for p, n in steps.items()) + '.']
  for choice in choose_steps or ():
    out += sections_lib.choice_lines(choice, payload['topics']['dev'])
  out += ['- MMR\'s diversity and UMONS\'s threshold and eps: grid search on dev (F1@20, '
          'same protocol; grids in `colt_jax/evaluation/methods.py`); the chosen values are in '
          'results.json (`chosen`), with the chosen setting\'s dev F1@20 (`train_F1@20`). In '
          'cross-validation, on the training folds, over every feature setting `colt` may '
          'choose there (results.json: each fold\'s `baselines`).',
          '- The best tuned baseline a comparison names: chosen by the baselines\' '
          'training-topic F1@20 (dev; in cross-validation each fold\'s training topics), '
          'never by test scores; a results.json without those scores says so ("' +
          tables.TEST_CHOICE_NOTE + '").', '']
  if payload.get('previous'):
    out += ['## What changed since the previous results', '']
    out += sections_lib.change_lines(payload, payload['previous'])
  if analysis:
    out += ['## Where CoLT wins and where it does not', '', analysis.strip(), '']
  out += ['## Run files', '',
          f'`{rdir}/runs/pool/test-*.txt`: every row under the official protocol, '
          'written and checked by `colt_jax.evaluation.runfile` (the official scorer\'s rules; the '
          'evaluator reproduces its reference numbers). '
          f'`{rdir}/runs/cv/{{dev,test}}-*.txt`: the cross-validated rows, each topic from the '
          'fold that held it out, one file per official split. Global-protocol run files name '
          'photos of other topics, which the 2013 scorer refuses by rule, so they stay in '
          f'`work/reproduce/{ds}/runs/global/` and their numbers come from '
          '`colt_jax.evaluation.metrics` alone.', '']
  return '\n'.join(out)


def analysis_file(results_dir: str) -> str:
  """The hand-written analysis of a results folder: a sibling file `<results_dir>-analysis.md`
  (not inside the folder, which reproduce replaces as a whole)."""
  return os.path.normpath(results_dir) + '-analysis.md'


def write_markdown(payload: Mapping[str, Any], path: str,
                   command: str = 'python experiments/reproduce.py --dataset div400',
                   analysis_path: str = '', results_dir: str = '',
                   topic_stats: Optional[Mapping] = None,
                   heads: Optional[Mapping] = None,
                   phi_steps: Sequence[Mapping] = (),
                   headroom: Optional[Mapping] = None,
                   relevance: Optional[Mapping] = None,
                   relevance_signals: Optional[Mapping] = None,
                   recommended: Optional[recommendation.Choice] = None,
                   travel: Sequence[str] = ()) -> None:
  """Renders the report and writes it atomically; the dev choices' evidence comes from the
  payload (`choices`, read from experiments/configs/tuned/evidence/ by reproduce), and an
  analysis text (hand-written, no numbers) is included when it exists beside the results."""
  results = results_dir or payload.get('results_dir') or os.path.join(
      'docs', 'results', payload['dataset'])
  choose = payload.get('choices') or []
  analysis = ''
  apath = analysis_path or analysis_file(results)
  if os.path.isfile(apath):
    with open(apath) as f:
      analysis = f.read()
  outputs.write_owned_text(path, render(payload, command, choose, analysis, topic_stats, heads,
                                        phi_steps, headroom, relevance, relevance_signals,
                                        recommended, travel),
                           'the report', flag='--doc')
