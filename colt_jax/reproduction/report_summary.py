"""The report's opening summary: the headline table and the verdicts that matter, in one screen.

Rows of the headline: top-k over f, the strongest post-processing baseline (MMR, MSD, DPP,
UMONS or UMONS-DBSCAN on any feature setting, chosen on training topics: dev's score for
dev -> test, each fold's training topics in cross-validation), CoLT as this repository tunes
the paper's method (the `colt` row), and the recommended learned method (`recommendation`: chosen on training topics,
nested in cross-validation). Both F1@20 readings; the verdicts are paired per-topic intervals
(`report_tables.paired_line`), called a difference only where the interval excludes zero.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from colt_jax.evaluation import significance
from colt_jax.reproduction import recommendation
from colt_jax.reproduction import report_tables as tables

POST_PROCESSING = ('mmr', 'msd', 'dpp', 'umons', 'umons-dbscan')
PROTOCOL = 'pool'
COLT_ROW = 'colt'  # the paper's method as this repository tunes it (README, RESULTS.md)


def _f1s(rows: Mapping[str, Mapping[str, Any]], method: str) -> tuple:
  """(official F1@20, paper F1@20) of `method`, seeds averaged; (None, None) when absent."""
  agg = tables.aggregate(rows, PROTOCOL).get(method)
  if not agg:
    return None, None
  return agg['F1@20'][0], agg[tables.PAPER_F1][0]


def _cell(value: Optional[float]) -> str:
  return '-' if value is None else f'{value:.4f}'


def _verdict(rows, method: str, other: str) -> str:
  a, b = tables.per_topic(rows, method, PROTOCOL), tables.per_topic(rows, other, PROTOCOL)
  if method == other or len(set(a) & set(b)) < 2:
    return '-'
  d = significance.paired_difference(a, b)
  return f'{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}] **{d.verdict}**'


class _Setting:
  """One protocol's rows with the recommended row and the strongest baseline added."""

  def __init__(self, rows, recommended_rows, baseline, recommended_label: str):
    self.rows = dict(baseline['rows'] if baseline else rows)
    self.rows.update(recommended_rows)
    self.baseline = baseline
    self.recommended_label = recommended_label

  def names(self) -> dict:
    """headline label -> row name."""
    out = {'top-k over f': 'topk'}
    if self.baseline:
      out['strongest post-processing baseline'] = self.baseline['name']
    out[f'CoLT, tuned here (`{COLT_ROW}`)'] = COLT_ROW
    out['recommended: ' + self.recommended_label] = recommendation.NAME
    return out


def summary_lines(payload: Mapping[str, Any],
                  official_choice: Optional[recommendation.Choice],
                  headroom: Optional[Mapping[str, Any]] = None) -> list:
  """Markdown lines of the summary (about 50), [] when the payload has no cross-validation."""
  cv = payload.get('cv') or {}
  folds, merged = cv.get('folds') or [], cv.get('merged') or {}
  choices = recommendation.fold_choices(folds, PROTOCOL) if folds else None
  if not choices or official_choice is None:
    return []
  chosen = sorted({c.chosen for c in choices} | {official_choice.chosen})
  label = ' / '.join(f'`{c}`' for c in chosen)
  cv_set = _Setting(merged, recommendation.nested_rows(merged, folds, choices, PROTOCOL),
                    tables.best_baseline(merged, PROTOCOL, folds, among=POST_PROCESSING), label)
  dev_set = _Setting(payload['rows'], recommendation.official_rows(payload['rows'],
                                                                   official_choice, PROTOCOL),
                     tables.best_baseline(payload['rows'], PROTOCOL, among=POST_PROCESSING),
                     label)
  n_cv = len({t for f in folds for t in f['test_topics']})
  n_test = len(tables.per_topic(payload['rows'], 'topk', PROTOCOL))
  out = ['## Summary', '',
         f'Div400, {n_cv} topics, MiniLM text features, official per-topic protocol (`pool`); '
         f'F1@20 in both readings (official: mean of per-topic F1; paper: harmonic mean of mean '
         f'P@20 and mean CR@20). **5-fold CV** over all {n_cv} topics (the primary estimate) and '
         f'**dev -> test** (25 dev topics, {n_test} test topics). The last columns are the '
         'recommended method minus the row, per topic (official F1@20, 95% bootstrap interval): '
         '"better" only where the interval excludes zero.', '',
         '| method | CV F1@20 (official) | CV F1@20 (paper) | dev->test F1@20 (official) | '
         'dev->test F1@20 (paper) | recommended - method (CV) | recommended - method '
         '(dev->test) |', '|---|---|---|---|---|---|---|']
  for label_, name in cv_set.names().items():
    dev_name = dev_set.names().get(label_, name)
    cells = (*map(_cell, _f1s(cv_set.rows, name)), *map(_cell, _f1s(dev_set.rows, dev_name)),
             _verdict(cv_set.rows, recommendation.NAME, name),
             _verdict(dev_set.rows, recommendation.NAME, dev_name))
    out.append(f'| {label_} | ' + ' | '.join(cells) + ' |')
  out += ['', f'- **The recommended method** is chosen by a rule fixed in advance: '
          f'{recommendation.RULE}. Every fold chose '
          + ', '.join(f'fold {f["fold"]} `{c.chosen}`' for f, c in zip(folds, choices))
          + f'; dev chose `{official_choice.chosen}` '
          f'({official_choice.scores[official_choice.chosen]:.4f} on dev\'s inner folds). The '
          'CV row takes each held-out topic from its own fold\'s choice: an honest estimate of '
          'the choice. The other learned rows are ablations (sections below).']
  for what, setting in (('cross-validation', cv_set), ('dev -> test', dev_set)):
    if setting.baseline:
      out.append(f'- Strongest post-processing baseline, {what}: {setting.baseline["label"]} '
                 f'({setting.baseline["how"]}).')
  out += ['', 'Paired per topic, the recommended method against (5-fold CV):']
  against = [('topk', 'top-k over f'), ('gbt-pairs relevance', 'gradient-boosted pairs with the '
              'same relevance model (learned, not post-processing)'),
             (COLT_ROW, f'`{COLT_ROW}`')]
  if cv_set.baseline:
    against.insert(1, (cv_set.baseline['name'], 'the strongest post-processing baseline'))
  out += [line for name, text in against
          if (line := tables.paired_line(cv_set.rows, recommendation.NAME, name, PROTOCOL,
                                         text))]
  out += ['', 'What bounds it:'] + _bounds(headroom) + [
      '- No semantic image features here: no photo pixels and no CLIP weights, so f reads the '
      'photos\' Flickr text; the ten official visual descriptors enter only as extra views.',
      '', 'Where the paper\'s numbers are not comparable: the paper uses CLIP image features, '
      'all 396 Div400 locations, 629 merged categories and the `global` protocol (ranking the '
      'whole collection); this is text over 157 locations in their official layout, scored '
      'as the official scorer does. The tables below reproduce the paper\'s tables under '
      'these conditions.', '']
  return out


def _bounds(headroom: Optional[Mapping[str, Any]]) -> list:
  """The headroom diagnosis in two lines: what oracle relevance and oracle pairs would add."""
  if not headroom:
    return []
  topics = headroom['topics']

  def gain(label):
    column = {t: s[label]['F1@20'] for t, s in topics.items()
              if s[label].get('F1@20') is not None}
    phi = {t: s['phi']['F1@20'] for t, s in topics.items() if s['phi'].get('F1@20') is not None}
    return significance.paired_difference(column, phi)

  r, p10, clustered = gain('oracle r'), gain('p mixed 10% oracle'), gain(
      'oracle p, clustered pairs only')
  return [f'- Relevance: the ground truth\'s relevance in place of phi\'s would add '
          f'{r.mean:+.3f} F1@20 to `{headroom["variant"]}` ({r.low:+.3f} to {r.high:+.3f}); '
          f'its pairs add less ({p10.mean:+.3f} with 10% oracle pairs, {clustered.mean:+.3f} '
          'with oracle pairs among clustered photos). Relevance is what bounds it '
          f'(`{headroom["command"]}`).']

