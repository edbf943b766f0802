"""The command lines against bad input, as a user meets them: subprocesses, exit status, one
line naming the file / line / flag, and nothing created, changed or deleted.

Exit status 2 is bad input, 1 an internal error (see colt_jax/util/cli.py).
"""
import json
import os
import re
import shutil

import numpy as np
import pytest

from colt_jax.util import outputs
from cli_run import CLIS, run_cli, tree_digest, assert_bad_input, split_dir, first_topic_title  # pylint: disable=g-bad-import-order


# ----------------------------------------------------------------------------- data safety


def test_the_issue_command_never_touches_a_real_data_copy(div400_root, tmp_path):
  """`evaluate.py --data_dir <copy of Div400> --split dev --method flickr` without --dataset."""
  copy = tmp_path / 'div400'
  shutil.copytree(div400_root, copy, ignore=shutil.ignore_patterns('descvis'))
  before = tree_digest(copy)
  proc = run_cli('evaluate', '--data_dir', copy, '--split', 'dev', '--method', 'flickr',
                 cwd=tmp_path)
  assert_bad_input(proc, str(copy), '--data_dir', '--dataset div400')
  assert tree_digest(copy) == before
  assert sorted(os.listdir(tmp_path)) == ['div400']  # no work/ either


def test_foreign_folders_are_never_written(dataset_copy, tmp_path):
  foreign = tmp_path / 'mine'
  foreign.mkdir()
  (foreign / 'notes.txt').write_text('my own file')
  before = tree_digest(foreign)
  cases = [
      ('evaluate', ['--dataset', 'synthetic', '--data_dir', foreign, '--method', 'flickr']),
      ('evaluate', ['--dataset', 'synthetic', '--data_dir', dataset_copy, '--method', 'topk',
                    '--out_dir', foreign]),
      ('make_synthetic', ['--out', foreign, '--dev_topics', '2', '--test_topics', '2']),
      ('train_scl', ['--dataset', 'synthetic', '--data_dir', dataset_copy, '--workdir', foreign,
                     '--num_steps', '1']),
      ('extract_features', ['--dataset', 'div400', '--data_dir', dataset_copy, '--split', 'dev',
                            '--encoder', 'minilm', '--out', foreign]),
  ]
  for name, args in cases:
    proc = run_cli(name, *args, cwd=tmp_path)
    assert_bad_input(proc, str(foreign))
    assert tree_digest(foreign) == before, name
  assert sorted(os.listdir(tmp_path)) == ['data', 'mine']


def test_missing_data_dir_is_an_error_not_a_new_dataset(tmp_path):
  missing = tmp_path / 'typo'
  proc = run_cli('evaluate', '--dataset', 'div400', '--data_dir', missing, '--method', 'flickr',
                 cwd=tmp_path)
  assert_bad_input(proc, str(missing), '--data_dir')
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', missing, '--method',
                 'flickr', cwd=tmp_path)
  assert_bad_input(proc, str(missing), 'make_synthetic.py')
  assert not missing.exists() and os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize('name,args,needle', [
    ('evaluate', ['--per_category', '0'], '--per_category'),
    ('evaluate', ['--k', '0'], '--k'),
    ('evaluate', ['--diversity', '1.5'], '--diversity'),
    ('evaluate', ['--irrelevant_threshold', '-0.1'], '--irrelevant_threshold'),
    ('evaluate', ['--method', 'flickr,nope'], '--method'),
    ('evaluate', ['--protocol', 'local'], '--protocol'),
    ('evaluate', ['--post', 'kmeans'], '--post'),
    ('train_ttc', ['--num_layers', '0'], '--num_layers'),
    ('train_ttc', ['--num_images', '0'], '--num_images'),
    ('train_ttc', ['--p_d', '1.2'], '--p_d'),
    ('train_ttc', ['--label_scheme', 'semantic'], '--label_scheme'),
    ('train_ttc', ['--batch_size', '0'], '--batch_size'),
    ('train_scl', ['--num_steps', '0'], '--num_steps'),
    ('train_scl', ['--alpha', '2'], '--alpha'),
    ('train_scl', ['--learning_rate', '0'], '--learning_rate'),
    ('extract_features', ['--batch_size', '0'], '--batch_size'),
    ('extract_features', ['--views_descriptors', 'CM,SIFT'], '--views_descriptors'),
    ('extract_features', ['--views_descriptor_weight', '2'], '--views_descriptor_weight'),
    ('extract_features', ['--views_metadata_weight', '-1'], '--views_metadata_weight'),
    ('extract_features', ['--split', 'test', '--views_descriptors', 'CM', '--views_fit_split',
                          'test'], '--views_fit_split'),
    ('reproduce', ['--folds', '1'], '--folds'),
    ('make_synthetic', ['--dev_topics', '0'], '--dev_topics'),
])
def test_parameters_are_checked_where_they_enter(name, args, needle, tmp_path):
  proc = run_cli(name, *args, cwd=tmp_path)
  assert_bad_input(proc, needle)
  assert os.listdir(tmp_path) == []


def test_flagfile_errors_name_the_file_and_line(tmp_path):
  flagfile = tmp_path / 'ttc.flags'
  flagfile.write_text('# phi\n--num_layers=2\n--num_heads=0\n')
  proc = run_cli('train_ttc', f'--flagfile={flagfile}', cwd=tmp_path)
  assert_bad_input(proc, '--num_heads')
  proc = run_cli('train_ttc', f'--flagfile={tmp_path / "missing.flags"}', cwd=tmp_path)
  assert_bad_input(proc, 'missing.flags')


@pytest.mark.parametrize('name', sorted(CLIS))
def test_helpshort_lists_every_flag_with_a_help(name, tmp_path):
  proc = run_cli(name, '--helpshort', cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  flag_lines = re.findall(r'^  (--\[?\w+\]?\w*): (.*)$', proc.stdout, re.M)
  assert len(flag_lines) >= 3, proc.stdout
  for flag, text in flag_lines:
    assert len(text.split()) >= 2, f'{name} {flag}: no help'


# ----------------------------------------------------------------------------- bad files


def _evaluate_store(cwd, data, features, *extra):
  return run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', data, '--features_dir',
                 features, '--method', 'topk', '--out_dir', cwd / 'out', *extra, cwd=cwd)


def test_bad_feature_stores(dataset_copy, tmp_path):
  store = dataset_copy / 'features' / 'test'
  photos = np.load(store / 'photos.npy')
  cases = []
  # Truncated .npy.
  raw = (store / 'photos.npy').read_bytes()
  cases.append(('photos.npy', lambda: (store / 'photos.npy').write_bytes(raw[:len(raw) // 2])))
  # Non-numeric .npy.
  cases.append(('photos.npy', lambda: np.save(store / 'photos.npy',
                                               np.array([['a'] * photos.shape[1]] *
                                                        photos.shape[0]))))
  # NaN features.
  nan = photos.copy()
  nan[3, 2] = np.nan
  cases.append(('NaN', lambda: np.save(store / 'photos.npy', nan)))
  # Wrong dimension.
  cases.append(('dimension', lambda: np.save(store / 'photos.npy', photos[:, :-1])))
  meta = json.loads((store / 'meta.json').read_text())
  for name, corrupt in cases:
    np.save(store / 'photos.npy', photos)
    corrupt()
    proc = _evaluate_store(tmp_path, dataset_copy, store)
    assert_bad_input(proc, str(store), name)
  np.save(store / 'photos.npy', photos)
  # A sidecar without a required key.
  del meta['dim']
  (store / 'meta.json').write_text(json.dumps(meta))
  proc = _evaluate_store(tmp_path, dataset_copy, store)
  assert_bad_input(proc, 'meta.json', 'dim')
  assert not (tmp_path / 'out').exists()


def _flickr(cwd, data):
  return run_cli('evaluate', '--dataset', 'div400', '--data_dir', data, '--split', 'test',
                 '--method', 'flickr', '--out_dir', cwd / 'out', cwd=cwd)


def test_bad_dataset_files(dataset_copy, tmp_path):
  d = split_dir(dataset_copy)
  title = first_topic_title(dataset_copy)
  xml, rgt = d / 'xml' / f'{title}.xml', d / 'gt' / 'rGT' / f'{title} rGT.txt'
  dgt = d / 'gt' / 'dGT' / f'{title} dGT.txt'
  originals = {p: p.read_bytes() for p in (xml, rgt, dgt)}
  rgt_lines = originals[rgt].decode().splitlines()
  first_relevant = next(l.split(',')[0] for l in rgt_lines if l.endswith(',1'))
  cases = [
      # Broken XML.
      (xml, originals[xml].replace(b'/>', b'>', 1), [xml.name]),
      # Empty photo XML while the ground truth is not.
      (xml, b'<?xml version="1.0"?>\n<photos monument="x">\n</photos>\n',
       [xml.name, 'no photos']),
      # A ground-truth photo missing from the photo XML (rGT line 1).
      (rgt, ('999999999,1\n' + '\n'.join(rgt_lines) + '\n').encode(),
       [f'{rgt.name}:1', '999999999', xml.name]),
      # A bad relevance value.
      (rgt, originals[rgt].replace(b',1', b',7', 1), [rgt.name, "'7'"]),
      # dGT naming a photo its rGT lacks.
      (dgt, originals[dgt] + b'123456789,1\n', [dgt.name, '123456789', rgt.name]),
  ]
  for path, content, needles in cases:
    for p, data in originals.items():
      p.write_bytes(data)
    path.write_bytes(content)
    proc = _flickr(tmp_path, dataset_copy)
    assert_bad_input(proc, *needles)
  assert first_relevant and not (tmp_path / 'out').exists()


def test_bad_run_files_are_named_by_line(dataset_copy, tmp_path):
  proc = _flickr(tmp_path, dataset_copy)
  assert proc.returncode == 0, proc.stderr[-2000:]
  good = (tmp_path / 'out' / 'pool-flickr.txt').read_text().splitlines()
  score = lambda path: run_cli('evaluate', '--dataset', 'div400', '--data_dir', dataset_copy,
                               '--split', 'test', '--run_file', path, cwd=tmp_path)
  proc = score(tmp_path / 'out' / 'pool-flickr.txt')
  assert proc.returncode == 0 and 'valid run file' in proc.stdout and 'F1@50' in proc.stdout
  broken = list(good)
  q, it, doc, rank, sim, rid = broken[2].split()
  broken[2] = ' '.join([q, it, doc, str(int(rank) + 5), sim, rid])
  bad = tmp_path / 'bad.txt'
  bad.write_text('\n'.join(broken) + '\n')
  assert_bad_input(score(bad), 'bad.txt:3', 'rank')
  bad.write_text('\n'.join(good[:1] + ['26 0 x'] + good[1:]) + '\n')
  assert_bad_input(score(bad), 'bad.txt:2', '6')
  assert_bad_input(score(tmp_path / 'nothing.txt'), 'nothing.txt')


# ----------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope='module')
def tiny_checkpoints(tiny_synthetic, tmp_path_factory):
  from colt_jax.train import configs  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('ckpt')
  scl = configs.SCLConfig(data_dir=tiny_synthetic, workdir=str(root / 'scl'), num_steps=2,
                          batch_size=4, images_per_query=8)
  trainers.train_scl(scl, progress=False)
  ttc = configs.TTCConfig(data_dir=tiny_synthetic, workdir=str(root / 'ttc'), num_steps=2,
                          batch_size=4, num_layers=1, num_heads=2, num_images=20,
                          label_scheme='local', num_groups=4, scl_checkpoint=scl.workdir)
  trainers.train_ttc(ttc, progress=False)
  return scl.workdir, ttc.workdir


def test_checkpoint_of_the_wrong_kind(tiny_synthetic, tiny_checkpoints, tmp_path):
  scl, ttc = tiny_checkpoints
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', tiny_synthetic,
                 '--method', 'colt', '--scl_checkpoint', scl, '--ttc_checkpoint', scl,
                 '--out_dir', tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, scl, '--ttc_checkpoint', 'SCL checkpoint')
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', tiny_synthetic,
                 '--method', 'colt', '--scl_checkpoint', ttc, '--ttc_checkpoint', ttc,
                 '--out_dir', tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, ttc, '--scl_checkpoint', 'TTC checkpoint')
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', tiny_synthetic,
                 '--method', 'colt', '--ttc_checkpoint', tmp_path / 'none',
                 '--out_dir', tmp_path / 'out', cwd=tmp_path)
  assert_bad_input(proc, 'none')
  assert sorted(os.listdir(tmp_path)) == []


# ----------------------------------------------------------------------------- result sets


def test_a_failed_evaluation_leaves_the_previous_set(dataset_copy, tmp_path):
  out = tmp_path / 'out'
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy, '--method',
                 'flickr,topk', '--out_dir', out, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert sorted(os.listdir(out)) == [outputs.MANIFEST, 'pool-flickr.txt', 'pool-topk.txt',
                                     'results.json']
  for f in os.listdir(out):  # the usual umask mode, not mkstemp's 0600
    assert os.stat(out / f).st_mode & 0o777 == 0o666 & ~outputs.umask(), f
  before = tree_digest(out)
  # colt without a classifier fails after topk has been computed: nothing is written.
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy, '--method',
                 'topk,colt', '--out_dir', out, cwd=tmp_path)
  assert_bad_input(proc, '--ttc_checkpoint')
  assert tree_digest(out) == before
  assert sorted(os.listdir(tmp_path)) == ['data', 'out']  # no temporary left behind
