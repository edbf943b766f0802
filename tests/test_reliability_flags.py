"""Every flag is parsed and bounded before any work and before any folder is made: sizes the
machine cannot hold, list flags, numbers and flag combinations are one line naming the flag,
exit status 2, nothing created and the files already there unchanged (subprocesses, as a user
meets them; the parsing itself is tested in test_flagcheck.py)."""
import json
import os
import sys

import numpy as np
import pytest

from cli_run import CLIS, REPO, assert_bad_input, run_cli, tree_digest  # pylint: disable=g-bad-import-order
import preloaded

MORE_CLIS = {
    'visualize': 'experiments/visualize.py', 'search': 'experiments/search.py',
    'browse': 'experiments/browse.py', 'index_collection': 'data_prep/index_collection.py',
    'bench_engines': 'benchmarks/bench_engines.py',
    'bench_retrieval': 'benchmarks/bench_retrieval.py',
}
DATA = '{data}'  # placeholder for the dataset copy in the cases below
HUGE = '2000000000'  # within int32, far beyond any machine's memory in the estimates below


def run(name, *args, cwd):
  if name in CLIS:
    return run_cli(name, *args, cwd=cwd)
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  env.pop('COLT_JAX_MEMORY_LIMIT', None)
  return preloaded.run([sys.executable, os.path.join(REPO, MORE_CLIS[name]), *map(str, args)],
                       capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


@pytest.fixture
def workspace(dataset_copy, tmp_path):
  """tmp_path holding the dataset copy and a file of the user's; (root, data, digest before)."""
  (tmp_path / 'notes.txt').write_text('my own file\n')
  return tmp_path, dataset_copy, tree_digest(tmp_path)


def check_refused(workspace, name, args, *needles):
  root, data, before = workspace
  args = [str(a).replace(DATA, str(data)).replace('{root}', str(root)) for a in args]
  proc = run(name, *args, cwd=root)
  line = assert_bad_input(proc, *needles)
  assert tree_digest(root) == before, f'{name} {args}: changed the workspace'
  assert sorted(os.listdir(root)) == ['data', 'notes.txt']
  return line


TRAIN = ['--data_dir', DATA, '--workdir', '{root}/w']
CASES = [
    # Sizes the machine cannot hold, or beyond the sane bounds, and integers written as floats.
    ('train_scl', TRAIN + ['--batch_size', '1e11'], ['--batch_size', 'expected an integer']),
    ('train_scl', TRAIN + ['--batch_size', '100000000000'], ['--batch_size', '2147483647']),
    ('train_scl', TRAIN + ['--batch_size', HUGE, '--images_per_query', HUGE],
     [f'--batch_size={HUGE}', f'--images_per_query={HUGE}', 'needs about', 'memory']),
    ('train_ttc', TRAIN + ['--num_images', '1e8'], ['--num_images', 'expected an integer']),
    ('train_ttc', TRAIN + ['--num_images', '100000000'],
     ['--num_images=100000000', 'needs about', 'memory']),
    ('train_ttc', TRAIN + ['--num_heads', '3'], ['--num_heads', '--model_dim', '16']),
    ('train_ttc', TRAIN + ['--model_dim', '10', '--num_heads', '3'],
     ['--model_dim', '--num_heads']),
    ('train_ttc', TRAIN + ['--eval_features_dir', f'{DATA}/features/test'],
     ['--eval_features_dir', '--eval_split']),
    ('make_synthetic', ['--out', '{root}/s', '--dim', '1e9'], ['--dim', 'expected an integer']),
    ('make_synthetic', ['--out', '{root}/s', '--dev_topics', '100000', '--dim', '65536'],
     ['--dev_topics=100000', '--dim=65536', 'needs about', 'memory']),
    ('index_collection', ['--list', '{root}/l.csv', '--out', '{root}/s', '--encoder', 'minilm',
                          '--batch_size', '1e11'], ['--batch_size', 'expected an integer']),
    ('index_collection', ['--list', '{root}/l.csv', '--out', '{root}/s', '--encoder', 'minilm',
                          '--batch_size', '1000000'], ['--batch_size=1000000', 'needs about']),
    ('index_collection', ['--list', '{root}/l.csv', '--out', '{root}/s'], ['--model', 'clip']),
    ('index_collection', ['--list', '{root}/l.csv', '--out', '{root}/s', '--encoder', 'minilm',
                          '--max_bad_fraction', 'nan'], ['--max_bad_fraction', 'finite']),
    ('index_collection', ['--list', '{root}/l.csv', '--out', '{root}/s', '--encoder', 'minilm',
                          '--process_id', '3'], ['--process_id', '--num_processes']),
    ('extract_features', ['--dataset', 'synthetic', '--data_dir', DATA, '--split', 'dev',
                          '--encoder', 'minilm', '--out', '{root}/s', '--max_length', '100000'],
     ['--max_length', '512']),
    ('extract_features', ['--dataset', 'synthetic', '--data_dir', DATA, '--encoder', 'clip',
                          '--model', 'm', '--out', '{root}/s', '--max_length', '10'],
     ['--max_length', 'minilm']),
    ('extract_features', ['--dataset', 'synthetic', '--data_dir', DATA, '--encoder', 'minilm',
                          '--out', '{root}/s', '--vocabulary_splits', 'dev,dev'],
     ['--vocabulary_splits']),
    ('extract_features', ['--dataset', 'synthetic', '--data_dir', DATA, '--encoder', 'minilm',
                          '--out', '{root}/s', '--num_devices', '1000'], ['--num_devices']),
    ('bench_engines', ['--sizes', '1e9'], ['--sizes', 'integers']),
    ('bench_engines', ['--sizes', '1000000000', '--dim', '4096'],
     ['--sizes=1000000000', 'needs about', '--stream']),
    ('bench_engines', ['--sizes', '100', '--n', '200'], ['--n', '100']),
    ('bench_engines', ['--engines', 'exact,nope'], ['--engines', 'nope']),
    ('bench_retrieval', ['--out', '{root}/p.json', '--search_sizes', HUGE],
     [f'--search_sizes={HUGE}', 'needs about']),
    ('bench_retrieval', ['--out', '{root}/p.json', '--ttc_sizes', '100000'],
     ['--ttc_sizes=100000', 'needs about']),
    ('bench_retrieval', ['--out', '{root}/p.json', '--sections', 'paths,nope'],
     ['--sections', 'nope']),
    # List flags and numbers against the data.
    ('reproduce', ['--data_dir', DATA, '--workdir', '{root}/w', '--seeds', 'a,b'],
     ['--seeds', "'a'"]),
    ('reproduce', ['--data_dir', DATA, '--workdir', '{root}/w', '--protocol', 'pool,local'],
     ['--protocol', 'local']),
    ('reproduce', ['--data_dir', DATA, '--workdir', '{root}/w', '--variants', 'colt,L=99'],
     ['--variants', 'L=99']),
    ('reproduce', ['--data_dir', DATA, '--workdir', '{root}/w', '--results_dir', '{root}/r',
                   '--doc', '{root}/R.md', '--folds', '100'], ['--folds', '14 topics']),
    ('choose_steps', ['--dataset', 'synthetic', '--data_dir', DATA, '--workdir', '{root}/w',
                      '--config_dir', '{root}/c', '--holdout', '100000'],
     ['--holdout', '8 topics']),
    # The synthetic default is counted, not generated into the working folder first.
    ('choose_steps', ['--dataset', 'synthetic', '--workdir', '{root}/w', '--config_dir',
                      '{root}/c', '--holdout', '100000'], ['--holdout', '150 topics']),
    ('choose_steps', ['--dataset', 'synthetic', '--data_dir', DATA, '--workdir', '{root}/w',
                      '--config_dir', '{root}/c', '--steps', '100,x'], ['--steps', "'x'"]),
    ('choose_steps', ['--dataset', 'synthetic', '--data_dir', DATA, '--workdir', '{root}/w',
                      '--config_dir', '{root}/c', '--what', 'scl', '--steps', '100'],
     ['--steps', '--what scl']),
    ('visualize', ['--data_dir', DATA, '--model', '{root}/m', '--out', '{root}/f', '--topics',
                   '1,x'], ['--topics', "'x'"]),
    ('visualize', ['--data_dir', DATA, '--model', '{root}/m', '--out', '{root}/f', '--topics',
                   '99999'], ['--topics', '99999', 'synthetic/test']),
    ('demo', ['--workdir', '{root}/w', '--seeds', '0,x'], ['--seeds', "'x'"]),
    ('demo', ['--workdir', '{root}/w', '--doc', '{root}/S.md'], ['--doc', '--seeds']),
    # Flag combinations.
    ('evaluate', ['--data_dir', DATA, '--out_dir', '{root}/o', '--method', 'topk,topk'],
     ['--method', 'twice']),
    ('evaluate', ['--data_dir', DATA, '--out_dir', '{root}/o/{model}'], ['--out_dir']),
    ('evaluate', ['--data_dir', DATA, '--out_dir', '{root}/o', '--mmr_candidates', '1e11'],
     ['--mmr_candidates', 'expected an integer']),
    ('evaluate', ['--data_dir', DATA, '--out_dir', '{root}/o', '--dev_features_dir',
                  f'{DATA}/features/dev'], ['--dev_features_dir', '--tune']),
    ('evaluate', ['--data_dir', DATA, '--out_dir', '{root}/o', '--run_file', '{root}/run.txt',
                  '--tune'], ['--run_file', '--tune']),
    ('evaluate', ['--data_dir', DATA, '--run_file', '{root}/run.txt', '--protocol',
                  'pool,global'], ['--protocol', '--run_file']),
    ('search', ['--store', '{root}/s', '--model', '{root}/m', '--query', 'q', '--nprobe', '4'],
     ['--nprobe', 'faiss-ivf', 'exact']),
    ('browse', ['--results', '{root}/r', '--out', '{root}/site', '--depth', '100'],
     ['--depth', '50']),
]


@pytest.mark.parametrize('name,args,needles', CASES,
                         ids=[f'{c[0]}-{i}' for i, c in enumerate(CASES)])
def test_bad_flags_are_refused_before_anything_is_made(workspace, name, args, needles):
  check_refused(workspace, name, args, *needles)


def _cut_store(src, dst):
  """A copy of the feature store `src` one dimension shorter (another encoder's, as it were)."""
  from colt_jax.data import features  # pylint: disable=g-import-not-at-top
  store = features.load(str(src), mmap=False)
  cut = lambda a: np.asarray(a)[:, :-1] / np.linalg.norm(np.asarray(a)[:, :-1], axis=1,
                                                          keepdims=True)
  meta = {k: v for k, v in store.meta.items()
          if k not in ('path', 'dim', 'counts', 'format', 'normalisation')}
  new = features.make_store(
      photos=cut(store.photos), photo_ids=store.photo_ids, queries=cut(store.queries),
      query_ids=store.query_ids, categories=cut(store.categories),
      category_names=store.category_names, encoder=meta.pop('encoder'),
      dataset=meta.pop('dataset'), split=meta.pop('split'), source=meta.pop('source'),
      extra=meta)
  features.write(str(dst), new)
  return store.dim


def test_tuning_on_a_dev_store_of_another_dimension_is_refused(dataset_copy, tmp_path):
  dev15 = dataset_copy / 'dev-cut'
  dim = _cut_store(dataset_copy / 'features' / 'dev', dev15)
  before = tree_digest(tmp_path)
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy, '--method',
                 'topk,mmr', '--tune', '--dev_features_dir', dev15, '--out_dir',
                 tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, '--dev_features_dir', str(dev15), f'dimension {dim - 1}',
                   str(dataset_copy / 'features' / 'test'), f'has {dim}')
  assert tree_digest(tmp_path) == before and not (tmp_path / 'out').exists()


def test_a_scored_run_file_is_written_to_out_dir(dataset_copy, tmp_path):
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy, '--method',
                 'topk', '--out_dir', tmp_path / 'first', cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  run_file = tmp_path / 'first' / 'pool-topk.txt'
  first = json.loads((tmp_path / 'first' / 'results.json').read_text())
  before = tree_digest(tmp_path / 'first')
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy,
                 '--run_file', run_file, '--out_dir', tmp_path / 'scores', cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'valid run file' in proc.stdout
  scores = json.loads((tmp_path / 'scores' / 'results.json').read_text())
  row = scores['results']['pool-topk.txt']
  assert row['mean'] == pytest.approx(first['results']['topk']['mean'])
  for topic, metrics in first['results']['topk']['per_topic'].items():
    assert row['per_topic'][topic] == pytest.approx(metrics)
  assert (tmp_path / 'scores' / 'pool-topk.txt').read_bytes() == run_file.read_bytes()
  assert tree_digest(tmp_path / 'first') == before
  # Without --out_dir nothing is written (the default folder holds evaluations).
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy,
                 '--run_file', run_file, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert sorted(os.listdir(tmp_path)) == ['data', 'first', 'scores']
