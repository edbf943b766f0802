"""Tests of the evaluation command line (experiments/evaluate.py) as a user runs it: the
inference settings a model carries, one results folder per command, the protocol note; and
of the demo's model saving (colt_jax/reproduction/demo_table.py)."""
import json
import os
import shutil
import sys

import pytest

from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.inference import retriever
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.reproduction import demo_table as synthetic_demo
from colt_jax.inference import settings as settings_lib
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order



def _evaluate(*args, cwd):
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  return preloaded.run([sys.executable, os.path.join(REPO, 'experiments', 'evaluate.py'),
                        *map(str, args)], capture_output=True, text=True, timeout=600,
                       cwd=cwd, env=env)


def _folders(root):
  """{folder name: results.json} of the run folders under `root`."""
  return {d: json.load(open(os.path.join(root, d, 'results.json')))
          for d in sorted(os.listdir(root)) if not d.startswith('.')}


@pytest.mark.slow
def test_colt_checkpoints_score_with_the_settings_the_demo_saved(tiny_synthetic, tiny_colt,
                                                                 tmp_path):
  """The demo's model, evaluated by its workdirs (the README's command) or its model
  directory, gives the demo's row; a flag replaces a saved setting; three commands leave
  three folders."""
  scl, ttc = tiny_colt
  work = str(tmp_path / 'ttc')
  shutil.copytree(ttc.workdir, work)
  chosen = settings_lib.InferenceSettings(k=10, irrelevant_threshold=0.3)
  model = synthetic_demo.save_model(scl.workdir, work, chosen, str(tmp_path / 'model'), 'test')
  assert settings_lib.saved_settings(work) == chosen
  assert retriever.Retriever.from_pretrained(model).settings == chosen
  common = ['--dataset', 'synthetic', '--data_dir', tiny_synthetic, '--method', 'colt']
  ckpts = ['--scl_checkpoint', scl.workdir, '--ttc_checkpoint', work]
  via_model = _evaluate(*common, '--model', model, cwd=tmp_path)
  assert via_model.returncode == 0, via_model.stderr[-2000:]
  via_ckpts = _evaluate(*common, *ckpts, cwd=tmp_path)
  assert via_ckpts.returncode == 0, via_ckpts.stderr[-2000:]
  assert f'inference settings of {os.path.join(work, "inference.json")}' in via_ckpts.stdout
  assert 'irrelevant_threshold=0.3' in via_ckpts.stdout
  given = _evaluate(*common, *ckpts, '--k', '20', '--irrelevant_threshold', '0',
                    cwd=tmp_path)
  assert given.returncode == 0, given.stderr[-2000:]
  assert 'given by flags: --k, --irrelevant_threshold' in given.stdout

  root = tmp_path / 'work' / 'runs' / 'synthetic-test'
  runs = _folders(root)
  assert len(runs) == 3 and all(d.startswith('colt-pool-') for d in runs)
  by_k = {r['params']['k']: r for r in runs.values() if not r['params']['model']}
  saved, flags_ = by_k[10], by_k[20]
  [from_model] = [r for r in runs.values() if r['params']['model']]
  # What ran is what results.json records: the model's own settings.
  assert {k: from_model['params'][k] for k in ('k', 'irrelevant_threshold')} == {
      'k': 10, 'irrelevant_threshold': 0.3}
  assert saved['params']['irrelevant_threshold'] == 0.3
  assert flags_['params']['irrelevant_threshold'] == 0.0
  per_topic = lambda r: r['results']['colt']['per_topic']
  # Exact: evaluate.py runs the programs this process runs (its XLA_FLAGS inherited, the same
  # shapes) on the same parameters and features, on this machine: deterministic.
  assert per_topic(saved) == per_topic(from_model)
  # The flags' settings are the defaults: the run of phi without saved settings.
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  default = evaluation.score(split, evaluation.rank('colt', split, store, 'pool',
                                                    evaluation.MethodParams(
                                                        scl_checkpoint=scl.workdir,
                                                        ttc_checkpoint=ttc.workdir)))
  assert per_topic(flags_) == {str(t): m for t, m in default.per_topic.items()}
  assert per_topic(flags_) != per_topic(saved)
  # --model replaces the checkpoint and inference flags: given with it, they are refused, not
  # ignored.
  for extra in (['--k', '20'], ['--ttc_step', '1'], ['--scl_checkpoint', scl.workdir]):
    refused = _evaluate(*common, '--model', model, *extra, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f'evaluate.py: error: --model runs with the settings saved in its '
                           f'model.json: {extra[0]} would be ignored'), line
  assert len(_folders(root)) == 3


@pytest.mark.slow
def test_an_ensemble_of_phi_from_the_command_line(tiny_synthetic, tiny_colt, tmp_path):
  """--ttc_checkpoint a,b runs the ensemble of both phi (the README's command): the row of
  the in-process Retriever over both; Eq. 6 over an ensemble is refused in one line."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from colt_jax.pairs.config import PairsTTCConfig  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_colt
  ttc = PairsTTCConfig(**dataclasses.asdict(ttc))  # colt-pairs' phi: relevance and pair heads
  split_data = data.load('synthetic', 'dev', tiny_synthetic)
  members = []
  for seed in (0, 1):
    cfg = dataclasses.replace(ttc, workdir=str(tmp_path / f'phi{seed}'), seed=seed,
                              num_steps=2, relevance_weight=1.0, pair_weight=1.0)
    trainers.train_ttc(cfg, progress=False, split_data=split_data)
    members.append(cfg.workdir)
  common = ['--dataset', 'synthetic', '--data_dir', tiny_synthetic, '--method', 'colt',
            '--scl_checkpoint', scl.workdir, '--ttc_checkpoint', ','.join(members)]
  proc = _evaluate(*common, '--selection', 'cluster', '--pair_blend', '0.5', cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  [run] = _folders(tmp_path / 'work' / 'runs' / 'synthetic-test').values()
  params = evaluation.MethodParams(scl_checkpoint=scl.workdir,
                                   ttc_checkpoint=','.join(members), selection='cluster',
                                   pair_blend=0.5)
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  want = evaluation.score(split, evaluation.rank('colt', split, store, 'pool', params))
  # Exact: the same programs as evaluate.py's, on this machine (above).
  assert run['results']['colt[selection=cluster]']['per_topic'] == {
      str(t): m for t, m in want.per_topic.items()}
  refused = _evaluate(*common, cwd=tmp_path)
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1].endswith(
      'an ensemble of 2 phi averages their relevance and pair heads: use --selection=coverage, '
      'cluster or dpp')
  assert 'Traceback' not in refused.stderr


def test_each_command_keeps_its_own_default_folder(tiny_synthetic, tmp_path):
  """Successive commands into the default --out_dir keep each other's results; the same
  command again replaces its own folder."""
  common = ['--dataset', 'synthetic', '--data_dir', tiny_synthetic]
  for method in ('flickr', 'topk', 'flickr'):
    proc = _evaluate(*common, '--method', method, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
  proc = _evaluate(*common, '--method', 'topk', '--diversity', '0.3', '--split', 'dev',
                   cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  test_runs = _folders(tmp_path / 'work' / 'runs' / 'synthetic-test')
  assert sorted(d.split('-')[0] for d in test_runs) == ['flickr', 'topk']
  assert {m for r in test_runs.values() for m in r['results']} == {'flickr', 'topk'}
  assert all(os.path.isfile(tmp_path / 'work' / 'runs' / 'synthetic-test' / d / 'pool-'
                            f'{d.split("-")[0]}.txt') for d in test_runs)
  assert list(_folders(tmp_path / 'work' / 'runs' / 'synthetic-dev')) != []
  # Any setting changes the folder: the same methods with other parameters.
  proc = _evaluate(*common, '--method', 'topk', '--diversity', '0.3', cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert len(_folders(tmp_path / 'work' / 'runs' / 'synthetic-test')) == 3
  # Placeholders other than {dataset}, {split}, {run} are refused, naming the flag.
  proc = _evaluate(*common, '--method', 'topk', '--out_dir', '{root}/x', cwd=tmp_path)
  assert proc.returncode == 2 and '--out_dir' in proc.stderr and '{run}' in proc.stderr


def test_missing_inputs_are_refused_before_the_data_is_read(tmp_path):
  """A run file, model or checkpoint folder that is not there: one line naming the flag, and
  the synthetic default (--dataset synthetic without --data_dir) is not generated first."""
  nowhere = tmp_path / 'nowhere'
  cases = [(['--run_file', nowhere], f'{nowhere} (--run_file): cannot read (no such file)'),
           (['--run_file', tmp_path], f'{tmp_path} (--run_file): cannot read (a folder, not a '
                                      'file)'),
           (['--method', 'colt', '--model', nowhere],
            f'{nowhere} (--model): not a CoLT model directory (no model.json)'),
           (['--method', 'colt', '--scl_checkpoint', tmp_path, '--ttc_checkpoint',
             f'{tmp_path},{nowhere}'],
            f"{nowhere} (--ttc_checkpoint): no such checkpoint folder (a trainer's --workdir)")]
  cwd = tmp_path / 'cwd'
  cwd.mkdir()
  for args, message in cases:
    proc = _evaluate('--dataset', 'synthetic', *args, cwd=cwd)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [f'evaluate.py: error: {message}']
  assert os.listdir(cwd) == []


@pytest.fixture(scope='module')
def apart_synthetic(tmp_path_factory):
  """A small synthetic dataset whose topics lie apart (dim 64, as the default's): in every test
  topic the 61 photos most similar to the query are the topic's own."""
  from colt_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  cfg = synthetic.SyntheticConfig(num_vocabulary=40, dev_topics=2, test_topics=4,
                                  min_photos=50, max_photos=70, mean_clusters=6)
  return synthetic.generate(str(tmp_path_factory.mktemp('apart') / 'data'), seed=1, config=cfg)


@pytest.mark.parametrize('which', ['tiny_synthetic', 'apart_synthetic'])
def test_global_rows_equal_to_the_pool_rows_are_named_and_explained(which, request, tmp_path):
  data_dir = request.getfixturevalue(which)
  split, store = data.load('synthetic', 'test', data_dir)
  lead = candidates_lib.pool_lead(split, store)
  proc = _evaluate('--dataset', 'synthetic', '--data_dir', data_dir, '--method',
                   'flickr,topk', '--protocol', 'pool,global', '--out_dir', tmp_path / 'out',
                   cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  results = json.load(open(tmp_path / 'out' / 'results.json'))['results']
  same = results['topk (global)']['per_topic'] == results['topk (pool)']['per_topic']
  # topk's global list of 50 is its pool list exactly when the pool leads for 50 photos.
  assert same == (min(lead) >= evaluation.RUN_LENGTH)
  assert same == (which == 'apart_synthetic')
  notes = [l for l in proc.stdout.splitlines() if l.startswith('note:')]
  if same:
    assert notes == [f'note: topk (global) scored per topic exactly as under the pool protocol: '
                     f'in every topic the {min(lead)} photos of the whole collection most '
                     f'similar to the query (by f\'s features) are the topic\'s own, its pool, '
                     f'so lists drawn from the most similar photos come out the same under both '
                     f'protocols']
  else:
    assert notes == []
