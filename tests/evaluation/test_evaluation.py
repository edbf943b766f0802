"""Tests of running, scoring and tuning methods (colt_jax/evaluation/methods.py, experiments/evaluate.py)."""
import dataclasses
import json
import os
import sys

import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.evaluation import runfile
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

REFERENCE_DEV = {'P@5': .744, 'P@10': .688, 'P@20': .674, 'CR@5': .305, 'CR@10': .4635,
                 'CR@20': .6625, 'F1@5': .4148, 'F1@10': .5293, 'F1@20': .6295, 'P@30': .684,
                 'P@40': .666, 'P@50': .6392, 'CR@30': .7756, 'CR@40': .8521, 'CR@50': .8871,
                 'F1@30': .6895, 'F1@40': .705, 'F1@50': .7003}


def test_flickr_on_real_devset_reproduces_the_official_scorer(div400_root, tmp_path):
  out = result_sets.run_evaluation(
      dataset='div400', split='dev', methods=['flickr'], protocols_=['pool'],
      params=evaluation.MethodParams(), data_dir=div400_root, out_dir=str(tmp_path / 'out'),
      log=lambda *_: None)
  mean = out['results']['flickr']['mean']
  for name, value in REFERENCE_DEV.items():
    assert round(mean[name], 4) == pytest.approx(value, abs=1e-9), name
  split = data.load_split('div400', div400_root, 'dev')
  parsed = runfile.validate_run(tmp_path / 'out' / 'pool-flickr.txt', split.topic_numbers,
                                result_sets.allowed_ids(split, 'pool'))
  assert all(len(v) == min(50, len(split.photos[t])) for t, v in parsed.items())
  assert parsed[26][0] == '4914949671'  # Flickr rank 1 of the Abbey of Saint Gall
  saved = json.load(open(tmp_path / 'out' / 'results.json'))
  assert saved['results']['flickr']['mean'] == pytest.approx(mean)


def test_every_baseline_on_synthetic_and_both_protocols(tiny_synthetic, tmp_path):
  out = result_sets.run_evaluation(
      dataset='synthetic', split='test', methods=['flickr', 'topk', 'mmr', 'umons',
                                                  'umons-dbscan'],
      protocols_=['pool', 'global'], params=evaluation.MethodParams(diversity=0.3),
      data_dir=tiny_synthetic, out_dir=str(tmp_path / 'out'), log=lambda *_: None)
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  for name, result in out['results'].items():
    allowed = result_sets.allowed_ids(split, result['protocol'])
    parsed = runfile.validate_run(result['run_file'], split.topic_numbers, allowed)
    assert set(parsed) == set(split.topic_numbers)
    assert 0 <= result['mean']['F1@20'] <= 1
  # Flickr's order exists per topic only: its pool row, no global copy of it.
  assert 'flickr (pool)' in out['results'] and 'flickr (global)' not in out['results']
  assert out['data_dir'] == os.path.abspath(tiny_synthetic)  # browse.py finds the data
  glob = out['results']['topk (global)']
  own = {p for gt in split.ground_truth.values() for p in gt.relevance}
  assert {p for t, ids in runfile.validate_run(glob['run_file'], split.topic_numbers).items()
          for p in ids} <= own | set(map(str, store.photo_ids))
  # diversity 0 is plain top-k
  params0 = evaluation.MethodParams(diversity=0.0)
  a = evaluation.rank('mmr', split, store, 'pool', params0)
  b = evaluation.rank('topk', split, store, 'pool', params0)
  assert {t: [p for p, _ in r] for t, r in a.items()} == {t: [p for p, _ in r]
                                                          for t, r in b.items()}


def test_tune_picks_the_best_setting_on_dev(tiny_synthetic):
  split, store = data.load('synthetic', 'dev', tiny_synthetic)
  grid = {'diversity': [0.0, 0.5, 0.95]}
  best, results = evaluation.tune('mmr', split, store, 'pool', evaluation.MethodParams(), grid)
  assert [s['diversity'] for s, _ in results] == grid['diversity']
  scores = [v for _, v in results]
  assert best.diversity == grid['diversity'][int(np.argmax(scores))]
  for (setting, value) in results:
    again = evaluation.score(split, evaluation.rank(
        'mmr', split, store, 'pool', evaluation.MethodParams(**setting))).mean['F1@20']
    assert again == pytest.approx(value)


def test_unknown_method_and_missing_features(tiny_synthetic):
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  with pytest.raises(ValueError, match='unknown method'):
    evaluation.rank('random', split, store, 'pool', evaluation.MethodParams())
  with pytest.raises(ValueError, match='needs a feature store'):
    evaluation.rank('topk', split, None, 'pool', evaluation.MethodParams())
  with pytest.raises(ValueError, match='needs --model or --ttc_checkpoint'):
    evaluation.rank('colt', split, store, 'pool', evaluation.MethodParams())


def test_evaluate_cli(tiny_synthetic, tmp_path):
  cmd = [sys.executable, os.path.join(REPO, 'experiments', 'evaluate.py'), '--dataset',
         'synthetic', '--data_dir', tiny_synthetic, '--split', 'test', '--method', 'topk,mmr',
         '--tune', '--out_dir', str(tmp_path / 'out')]
  proc = preloaded.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'F1@20' in proc.stdout and 'tuned mmr on dev' in proc.stdout
  results = json.load(open(tmp_path / 'out' / 'results.json'))
  assert set(results['results']) == {'topk', 'mmr'}
  assert len(results['results']['mmr']['tuning']) == len(evaluation.GRIDS['mmr']['diversity'])
  assert os.path.isfile(tmp_path / 'out' / 'pool-mmr.txt')


def test_colt_writes_full_ranked_lists_and_reports_at_50(tiny_synthetic, tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  params = evaluation.MethodParams(scl_checkpoint=scl.workdir, ttc_checkpoint=ttc.workdir,
                                   k=20)
  lines = []
  out = result_sets.run_evaluation(
      dataset='synthetic', split='test', methods=['topk', 'colt'], protocols_=['pool'],
      params=params, data_dir=tiny_synthetic, out_dir=str(tmp_path / 'out'),
      log=lines.append)
  split = data.load_split('synthetic', tiny_synthetic, 'test')
  for method in ('topk', 'colt'):
    parsed = runfile.validate_run(out['results'][method]['run_file'], split.topic_numbers,
                                  result_sets.allowed_ids(split, 'pool'))
    assert {t: len(v) for t, v in parsed.items()} == {
        t: min(evaluation.RUN_LENGTH, len(split.photos[t])) for t in split.topic_numbers}
    assert all(len(split.photos[t]) >= 50 for t in split.topic_numbers)  # so: 50 each
  # CoLT's first k=20 are Eq. 6's list: the continuation changes nothing before k.
  store = data.load('synthetic', 'test', tiny_synthetic)[1]
  colt = evaluation.rank('colt', split, store, 'pool', params)
  eq6 = evaluation.rank('colt', split, store, 'pool', dataclasses.replace(params, list_length=20))
  for t in split.topic_numbers:
    assert len(colt[t]) == 50 and colt[t][:len(eq6[t])] == eq6[t]
  header = out['table'].splitlines()[0].split()
  assert header == ['method', 'P@10', 'P@20', 'P@50', 'CR@10', 'CR@20', 'CR@50', 'F1@10',
                    'F1@20', 'F1@50']
  assert out['table'] in lines
