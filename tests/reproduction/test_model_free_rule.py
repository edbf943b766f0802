"""The model-free default's rule (colt_jax/reproduction/model_free_rule.py) on synthetic scores,
the file it writes as model_free.json loads, and a broken file is one line."""
import json

import numpy as np
import pytest

from colt_jax.evaluation import model_free
from colt_jax.reproduction import model_free_rule as rule
from colt_jax.reproduction import report_travel
from colt_jax.reproduction import travel
from colt_jax.util import atomic
from colt_jax.util.errors import InputError
from float_compare import assert_close  # pylint: disable=g-bad-import-order
from checkout import REPO  # pylint: disable=g-bad-import-order

TOPICS = list(range(1, 21))


def _grid(setting_key, values, means, noise=0.0, seed=0):
  """[(setting, {topic: F1})] with the given mean per setting (plus zero-mean noise)."""
  rng = np.random.default_rng(seed)
  out = []
  for v, m in zip(values, means):
    d = rng.normal(0, noise, len(TOPICS)) if noise else np.zeros(len(TOPICS))
    d -= d.mean()
    out.append(({setting_key: v}, {t: float(m + x) for t, x in zip(TOPICS, d)}))
  return out


def _scores(dpp_means_a, dpp_means_b, mmr_level=0.4):
  """Two feature sets, every METHOD with a grid: dpp's means given per set, the others flat."""
  out = {}
  for name, dpp_means in (('a', dpp_means_a), ('b', dpp_means_b)):
    out[name] = {'topk': _grid('k', [0], [0.3])[:1],
                 'mmr': _grid('diversity', [0.1, 0.2], [mmr_level, mmr_level - 0.01]),
                 'msd': _grid('msd_tradeoff', [0.1, 0.2], [0.35, 0.34]),
                 'dpp': _grid('dpp_theta', [0.5, 0.7, 0.9], dpp_means),
                 'umons': _grid('umons_eps', [0.1, 0.2], [0.2, 0.25])}
    out[name]['topk'] = [({}, out[name]['topk'][0][1])]
  return out


def test_the_parameters_are_those_of_least_worst_regret():
  # theta 0.5 is the best on a but costs b 0.3; 0.9 the best on b, costs a 0.3; 0.7 is
  # second on both (regret 0.05 and 0.05): it travels.
  scores = _scores([0.60, 0.55, 0.30], [0.30, 0.55, 0.60])
  assert rule.travelling_index([scores['a']['dpp'], scores['b']['dpp']], TOPICS) == 1
  # On one feature set alone the rule is plain tuning: its best setting.
  assert rule.travelling_index([scores['a']['dpp']], TOPICS) == 0
  assert rule.travelling_index([scores['b']['dpp']], TOPICS) == 2
  choice = rule.choose(scores, TOPICS, folds=4)
  assert choice.params['dpp'] == {'dpp_theta': 0.7}
  assert choice.params['umons'] == {'umons_eps': 0.2}
  assert choice.method == 'dpp'  # 0.55 on both beats mmr's 0.4
  assert_close(np.float64(choice.cv_scores['dpp']), np.float64(0.55))
  assert_close(np.float64(choice.cv_scores['topk']), np.float64(0.3))
  assert len(choice.folds) == 4
  assert sorted(t for f in choice.folds for t in f['held_out']) == TOPICS
  assert all(f['settings']['dpp'] == {'dpp_theta': 0.7} for f in choice.folds)


def test_the_method_is_chosen_on_held_out_folds_and_ties_go_to_the_simpler():
  # mmr's level 0.55 ties dpp's travelling 0.55: mmr is listed first (simpler).
  scores = _scores([0.60, 0.55, 0.30], [0.30, 0.55, 0.60], mmr_level=0.55)
  assert rule.choose(scores, TOPICS, folds=4).method == 'mmr'
  # A noisy grid: each fold's choice is made without its held-out topics, so the method's
  # score is the mean over held-out topics of the fold's chosen setting, not the best mean.
  noisy = _scores([0.50, 0.49, 0.48], [0.50, 0.49, 0.48])
  noisy['a']['dpp'] = _grid('dpp_theta', [0.5, 0.7, 0.9], [0.5, 0.49, 0.48], noise=0.2)
  choice = rule.choose(noisy, TOPICS, folds=4)
  expected = []
  for f in choice.folds:
    for name in ('a', 'b'):
      grid = dict((s['dpp_theta'], v) for s, v in noisy[name]['dpp'])
      expected += [grid[f['settings']['dpp']['dpp_theta']][t] for t in f['held_out']]
  assert_close(np.float64(choice.cv_scores['dpp']), np.float64(np.mean(expected)))


def test_the_written_defaults_load_and_a_broken_file_is_one_line(tmp_path, monkeypatch):
  scores = _scores([0.60, 0.55, 0.30], [0.30, 0.55, 0.60])
  scores = {e: {m: [(dict(s) if m != 'topk' else {}, v) for s, v in g] for m, g in sets.items()}
            for e, sets in scores.items()}
  for e in scores:  # model_free.json's names: UMONS's threshold too
    scores[e]['umons'] = [({'umons_eps': s['umons_eps'], 'umons_threshold': 0.3}, v)
                          for s, v in scores[e]['umons']]
  choice = rule.choose(scores, TOPICS, folds=4)
  payload = rule.defaults_payload(choice, candidates=150, evidence={
      'dataset': 'synthetic', 'topics': len(TOPICS), 'feature_sets': ['a', 'b']})
  path = tmp_path / 'model_free.json'
  atomic.write_json(path, payload)
  monkeypatch.setattr(model_free, 'DEFAULTS_FILE', str(path))
  model_free.defaults.cache_clear()
  try:
    assert model_free.default_method() == 'dpp'
    params = model_free.default_params()
    assert params.dpp_theta == 0.7 and params.umons_eps == 0.2
    assert params.umons_threshold == 0.3 and params.mmr_candidates == 150
    data = json.loads(path.read_text())
    assert data['rule']['name'] == rule.NAME
    assert [f['settings']['dpp'] for f in data['evidence']['folds']] == [{'theta': 0.7}] * 4
    assert set(data['evidence']['folds'][0]['held_out_F1@20']) == set(rule.METHODS)
    path.write_text('{"method": "dpp", "params": ')
    model_free.defaults.cache_clear()
    with pytest.raises(InputError) as e:
      model_free.defaults()
    assert '\n' not in str(e.value) and str(path) in str(e.value)
    path.write_text(json.dumps(dict(payload, params={'dpp': {'theta': 2.0}})))
    model_free.defaults.cache_clear()
    with pytest.raises(InputError, match=r'params.theta: must be in \[0.0, 1.0\], got 2'):
      model_free.defaults()
  finally:
    model_free.defaults.cache_clear()


def _record(feature_set, f1_of, fit_topics=None):
  """A travel record over TOPICS: F1 = P = CR = f1_of(method, index, topic)."""
  methods = {}
  for m, grid in travel.GRIDS.items():
    methods[m] = [{'setting': s, **{k: [f1_of(m, i, t) for t in TOPICS] for k in travel.METRICS}}
                  for i, s in enumerate(grid)]
  out = {'topics': TOPICS, 'methods': methods, 'feature_set': feature_set}
  return out if fit_topics is None else dict(out, fit_topics=list(fit_topics))


def _records(f1_of, folds=5, seed=0, fold_step=0.0):
  """row-cache name -> record of every feature set (FITTED ones per fold, fitted on its
  training topics, every score + fold_step x the fold's index), as travel.records writes
  them."""
  from colt_jax.data import folds as folds_lib
  out = {}
  for e in travel.FEATURE_SETS:
    for fold in folds_lib.kfold(TOPICS, folds, seed):
      fit = fold.train_topics if e in travel.FITTED else None
      step = fold_step * fold.index if fit else 0.0
      out[travel.record_name(e, fold.index, folds, seed)] = _record(
          e, lambda m, i, t, f=f1_of(e), step=step: f(m, i, t) + step, fit)
  return out


def test_transfer_tunes_on_the_source_and_scores_the_target():
  # On minilm dpp's best setting is index 1; on tfidf index 4: tuned on minilm, applied to
  # tfidf, every held-out topic gets tfidf's score of setting 1.
  best = {'minilm': 1, 'tfidf': 4, 'descvis': 2}
  def f1_of(e):
    return lambda m, i, t: 0.5 - 0.05 * abs(i - best[e]) + 0.001 * (t % 3)
  # Each fold's TF-IDF and descriptor stores score 0.01 x its index more: a held-out topic's
  # score must come from the store of the fold that held it out.
  records = _records(f1_of, fold_step=0.01)
  saved = travel.saved_records(lambda kind, name: records.get(name), 5, 0)
  from colt_jax.data import folds as folds_lib
  kfold = folds_lib.kfold(TOPICS, 5, 0)
  fold_of = {t: f.index for f in kfold for t in f.test_topics}
  tables = travel.fold_tables(saved, kfold)
  scores, chosen = report_travel.transfer(tables, kfold, 'dpp', 'minilm', 'tfidf')
  assert chosen == [travel.GRIDS['dpp'][1]] * 5
  assert sorted(scores['F1@20']) == TOPICS
  assert_close(np.array([scores['F1@20'][t] for t in TOPICS]),
               np.array([0.5 - 0.05 * 3 + 0.001 * (t % 3) + 0.01 * fold_of[t] for t in TOPICS]))
  merged = travel.merged_scores(tables, kfold)
  assert_close(np.array([merged['descvis']['dpp'][2][1][t] for t in TOPICS]),
               np.array([0.5 + 0.001 * (t % 3) + 0.01 * fold_of[t] for t in TOPICS]))
  ruled, _ = report_travel.rule_transfer(tables, kfold, ['minilm'], 'descvis', 4, 0)
  assert_close(np.array([ruled['F1@20'][t] for t in TOPICS]),
               np.array([0.5 - 0.05 + 0.001 * (t % 3) + 0.01 * fold_of[t] for t in TOPICS]))
  # A record of another grid (settings are matched by position) is refused.
  other = dict(saved['tfidf'][0], methods=dict(saved['tfidf'][0]['methods']))
  other['methods']['dpp'] = other['methods']['dpp'][::-1]
  assert travel.fold_tables(dict(saved, tfidf=[other] + saved['tfidf'][1:]), kfold) is None
  stale = dict(saved['tfidf'][0], key={'tfidf': travel.TFIDF})  # made before TFIDF_TEXT
  assert travel.fold_tables(dict(saved, tfidf=[stale] + saved['tfidf'][1:]), kfold) is None
  assert travel.missing(dict(saved, tfidf=[None] + saved['tfidf'][1:]))
  assert travel.fold_tables(dict(saved, tfidf=[None] + saved['tfidf'][1:]), kfold) is None
  # A fitted record must be its fold's: fitted on another fold's training topics, refused.
  swapped = dict(saved, descvis=[saved['descvis'][1], saved['descvis'][0]] + saved['descvis'][2:])
  assert travel.fold_tables(swapped, kfold) is None
  assert travel.fold_tables(saved, folds_lib.kfold(TOPICS, 5, 1)) is None
  lines = report_travel.section(lambda kind, name: records.get(name), 5, 0, 4)
  assert lines[0] == f'## {report_travel.TITLE}'
  assert any(line.startswith('| rule | TF-IDF text |') for line in lines)
  assert report_travel.section(lambda kind, name: records.get(name), 5, 1, 4) == []


def test_records_fit_each_fold_on_its_training_topics_alone(tiny_synthetic, monkeypatch):
  from colt_jax.data import folds as folds_lib
  from colt_jax.data import splits as data
  split, _ = folds_lib.merge([data.load('synthetic', s, tiny_synthetic) for s in ('dev', 'test')])
  fitted_on = []
  real = travel.tfidf_candidates

  def spy(split, cands, fit_topics):
    fitted_on.append(tuple(fit_topics))
    return real(split, cands, fit_topics)

  monkeypatch.setattr(travel, 'tfidf_candidates', spy)
  small = {'topk': [{}], 'mmr': [{'diversity': 0.3}]}
  real_grids = travel.score_grids
  monkeypatch.setattr(travel, 'score_grids', lambda s, c, log: real_grids(s, c, small, log))
  cache = {}

  def cached(kind, name, key, compute):
    assert kind == travel.KIND and name not in cache
    cache[name] = (key, compute())
    return cache[name][1]

  out = travel.records(split, None, None, None, cached, 3, 0, log=lambda *_: None,
                       only=['tfidf'])
  kfold = folds_lib.kfold(split.topic_numbers, 3, 0)
  assert fitted_on == [f.train_topics for f in kfold]
  assert sorted(cache) == [travel.record_name('tfidf', i, 3, 0) for i in range(3)]
  for fold in kfold:
    key, rec = cache[travel.record_name('tfidf', fold.index, 3, 0)]
    assert key['fit_topics'] == list(fold.train_topics) == rec['fit_topics']
    assert rec['topics'] == split.topic_numbers  # every topic scored
  assert [r['fit_topics'] for r in out['tfidf']] == [list(f.train_topics) for f in kfold]
  # Different training topics, different vocabularies: the folds' scores differ.
  assert out['tfidf'][0]['methods']['mmr'] != out['tfidf'][1]['methods']['mmr']


def test_descriptor_statistics_are_fitted_on_each_fold_s_training_photos(tiny_synthetic,
                                                                        monkeypatch):
  from colt_jax.data import folds as folds_lib
  from colt_jax.data import splits as data
  split, store = folds_lib.merge([data.load('synthetic', s, tiny_synthetic)
                                  for s in ('dev', 'test')])
  fitted_on, raw = [], object()
  monkeypatch.setattr(travel.views_lib, 'fit', lambda spec, r, ids: fitted_on.append(
      (r, list(ids))) or ('fitted', len(fitted_on)))
  monkeypatch.setattr(travel.views_lib, 'apply', lambda fitted, r, s: s)  # text store as is
  small = {'topk': [{}]}
  real_grids = travel.score_grids
  monkeypatch.setattr(travel, 'score_grids', lambda s, c, log: real_grids(s, c, small, log))
  reads = []
  out = travel.records(split, store, lambda: reads.append(1) or raw,
                       travel.views_lib.ViewSpec(),
                       lambda kind, name, key, compute: compute(), 3, 0,
                       log=lambda *_: None, only=['descvis'])
  kfold = folds_lib.kfold(split.topic_numbers, 3, 0)
  assert reads == [1]  # the descriptors read once
  assert fitted_on == [(raw, travel.photo_ids(split, f.train_topics)) for f in kfold]
  for f in kfold:
    held_only = (set(travel.photo_ids(split, f.test_topics))
                 - set(travel.photo_ids(split, f.train_topics)))
    assert held_only and not held_only & set(fitted_on[f.index][1])
  assert [r['fit_topics'] for r in out['descvis']] == [list(f.train_topics) for f in kfold]


def test_tfidf_candidates_keep_every_cosine_of_the_tfidf_vectors():
  from types import SimpleNamespace
  from sklearn.feature_extraction.text import TfidfVectorizer
  from colt_jax.inputs.candidates import TopicCandidates
  words = ['tower', 'bridge', 'river', 'night', 'clock', 'big', 'ben', 'london', 'eye', 'sky']
  rng = np.random.default_rng(0)
  photos, topics = {}, []
  for n, title in ((1, 'big ben'), (2, 'tower bridge night')):
    topics.append(SimpleNamespace(number=n, title=title))
    photos[n] = [SimpleNamespace(photo_id=f'{n}-{i}', text=' '.join(rng.choice(words, 5)))
                 for i in range(6 + n)]
  split = SimpleNamespace(topics=topics, photos=photos)
  cands = [TopicCandidates(n, tuple(p.photo_id for p in photos[n]), np.zeros(len(photos[n])))
           for n in (1, 2)]
  texts = {p.photo_id: p.text for n in photos for p in photos[n]}
  for fit_topics in ([1, 2], [2]):  # every photo; the photos of topic 2 alone
    out = travel.tfidf_candidates(split, cands, fit_topics)
    vec = TfidfVectorizer(**travel.TFIDF).fit(
        [texts[k] for k in sorted(texts) if int(k.split('-')[0]) in fit_topics])
    assert out[0].features.shape[1] == out[1].features.shape[1] == 9  # 8 photos + query
    for c, t in zip(out, topics):
      dense = vec.transform([p.text for p in photos[t.number]]).toarray()
      query = vec.transform([t.title]).toarray()[0]
      assert_close(c.features @ c.query, (dense @ query).astype(np.float32))
      assert_close(c.features @ c.features.T, (dense @ dense.T).astype(np.float32))
  # A photo of both topics with another text in each: the fit reads the fit topics' own
  # text, and each topic's candidate is encoded with that topic's.
  from colt_jax.inputs.candidates import TopicCandidates as Cands
  shared = 'shared-1'
  photos2 = photos[2] + [SimpleNamespace(photo_id=shared, text='zebra zebra quokka')]
  photos1 = photos[1] + [SimpleNamespace(photo_id=shared, text='tower tower')]
  split2 = SimpleNamespace(topics=topics, photos={1: photos1, 2: photos2})
  cands2 = [Cands(n, tuple(p.photo_id for p in ps), np.zeros(len(ps)))
            for n, ps in ((1, photos1), (2, photos2))]
  both = travel.tfidf_candidates(split2, cands2, [1])  # quokka, zebra: topic 2's text only
  vec1 = TfidfVectorizer(**travel.TFIDF).fit([p.text for p in photos1])
  assert 'zebra' not in vec1.vocabulary_
  dense = vec1.transform([p.text for p in photos1]).toarray()
  assert_close(both[0].features @ both[0].features.T, (dense @ dense.T).astype(np.float32))
  dense2 = vec1.transform([p.text for p in photos2]).toarray()
  assert_close(both[1].features @ both[1].features.T, (dense2 @ dense2.T).astype(np.float32))
  # Fitted without topic 1, its photos' words that topic 2's photos lack weigh nothing.
  only_two = travel.tfidf_candidates(split, cands, [2])[0]
  every = travel.tfidf_candidates(split, cands, [1, 2])[0]
  assert not np.allclose(only_two.features @ only_two.features.T,
                         every.features @ every.features.T)


def test_choose_model_free_writes_the_defaults_from_the_records(tmp_path, monkeypatch):
  import os
  import subprocess
  import sys
  repo = REPO
  best = {'minilm': 1, 'tfidf': 4, 'descvis': 2}
  # dpp's best theta differs by feature set; umons is worse
  records = _records(lambda e: lambda m, i, t: (0.6 - 0.05 * abs(i - best[e]) if m == 'dpp'
                                                else 0.4) + 0.001 * (t % 3))
  for name, rec in records.items():
    atomic.write_json(tmp_path / 'rows' / travel.KIND / f'{name}.json', rec)
  out = tmp_path / 'model_free.json'
  proc = subprocess.run([sys.executable, os.path.join(repo, 'experiments/choose_model_free.py'),
                         f'--rows_dir={tmp_path / "rows"}', f'--out={out}', '--data_dir=/nowhere',
                         '--features_root', '/elsewhere'],
                        capture_output=True, text=True, timeout=600, cwd=tmp_path,
                        env=dict(os.environ, PYTHONPATH=repo, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr[-2000:]
  monkeypatch.setattr(model_free, 'DEFAULTS_FILE', str(out))
  model_free.defaults.cache_clear()
  try:
    assert model_free.default_method() == 'dpp'
    # least worst regret over the three: theta index 2 (0.8), regret 0.1 at most
    assert model_free.default_params().dpp_theta == travel.GRIDS['dpp'][2]['dpp_theta']
    data = model_free.defaults()
    assert data['evidence']['command'].startswith('python experiments/choose_model_free.py')
    assert data['evidence']['command'] == (
        f'python experiments/choose_model_free.py --rows_dir={tmp_path / "rows"} --out={out}')
    assert len(data['evidence']['folds']) == rule.INNER_FOLDS
  finally:
    model_free.defaults.cache_clear()
