"""Your files are yours: the command lines against folders and files colt_jax did not write.

Each case asserts the exit status, the one-line message naming the foreign file, and that
every file that existed before the command is byte-identical after it (colt_jax.util.outputs).
"""
import os

import numpy as np
from PIL import Image

from colt_jax.util import outputs
from cli_run import assert_bad_input, run_cli, tree_digest


def _user_folder(path, files):
  path.mkdir(parents=True, exist_ok=True)
  for name, text in files.items():
    (path / name).parent.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(text)
  return path


def test_a_file_name_does_not_make_a_users_folder_colt_jaxs(dataset_copy, tmp_path):
  """evaluate --out_dir over a folder holding a results.json of the user's (and thesis.tex)."""
  out = _user_folder(tmp_path / 'thesis', {'results.json': '{"mine": 1}',
                                           'thesis.tex': '\\documentclass{article}'})
  before = tree_digest(out)
  proc = run_cli('evaluate', '--dataset', 'synthetic', '--data_dir', dataset_copy,
                 '--method', 'flickr', '--out_dir', out, cwd=tmp_path)
  assert_bad_input(proc, str(out), '--out_dir', 'results.json', outputs.MANIFEST)
  assert tree_digest(out) == before


def test_index_collection_refuses_a_folder_with_a_meta_json_of_the_users(tmp_path):
  photos = tmp_path / 'photos'
  photos.mkdir()
  Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(photos / 'a.jpg')
  out = _user_folder(tmp_path / 'store', {'meta.json': '{}', 'notes.txt': 'mine',
                                          'sub/keep.txt': 'mine too'})
  before = tree_digest(out)
  proc = run_cli('index_collection', '--images', photos, '--out', out, '--encoder', 'minilm',
                 cwd=tmp_path)
  assert_bad_input(proc, str(out), '--out', outputs.MANIFEST)
  assert tree_digest(out) == before
  assert sorted(os.listdir(tmp_path)) == ['photos', 'store']  # no .partial folder either


def test_files_added_to_a_result_folder_survive_a_rerun(dataset_copy, tmp_path):
  out = tmp_path / 'out'
  args = ('--dataset', 'synthetic', '--data_dir', dataset_copy, '--method', 'flickr',
          '--out_dir', out)
  proc = run_cli('evaluate', *args, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-2000:]
  (out / 'my_analysis.txt').write_text('my notes')
  (out / 'plots').mkdir()
  (out / 'plots' / 'f1.png').write_bytes(b'png')
  before = tree_digest(out)
  proc = run_cli('evaluate', *args, cwd=tmp_path)
  assert_bad_input(proc, str(out), 'my_analysis.txt', 'did not write')
  assert tree_digest(out) == before
  os.unlink(out / 'my_analysis.txt')
  proc = run_cli('evaluate', *args, cwd=tmp_path)
  assert_bad_input(proc, "'plots/'")
  assert (out / 'plots' / 'f1.png').read_bytes() == b'png'
  assert sorted(os.listdir(tmp_path)) == ['data', 'out']  # no temporary left behind


def test_reproduce_refuses_to_overwrite_a_users_doc(dataset_copy, tmp_path):
  doc = tmp_path / 'NOTES.md'
  doc.write_text('# my own notes\n')
  proc = run_cli('reproduce', '--dataset', 'div400', '--data_dir', dataset_copy, '--doc', doc,
                 '--workdir', tmp_path / 'work', '--results_dir', tmp_path / 'results',
                 cwd=tmp_path)
  assert_bad_input(proc, str(doc), '--doc', 'did not write')
  assert doc.read_text() == '# my own notes\n'
  assert sorted(os.listdir(tmp_path)) == ['NOTES.md', 'data']  # no folder made


def test_train_scl_refuses_a_workdir_with_a_users_config(dataset_copy, tmp_path):
  workdir = _user_folder(tmp_path / 'run', {'config.json': '{"my": "config"}'})
  before = tree_digest(workdir)
  proc = run_cli('train_scl', '--dataset', 'synthetic', '--data_dir', dataset_copy,
                 '--workdir', workdir, '--num_steps', 1, cwd=tmp_path)
  assert_bad_input(proc, str(workdir), '--workdir', 'config.json')
  assert tree_digest(workdir) == before


def test_choose_steps_never_overwrites_a_flagfile_it_did_not_write(tmp_path):
  from colt_jax.reproduction import choice_files
  from colt_jax.util.errors import InputError  # pylint: disable=import-outside-toplevel
  import pytest  # pylint: disable=import-outside-toplevel
  config_dir = tmp_path / 'configs'
  config_dir.mkdir()
  mine = config_dir / 'synthetic_scl.flags'
  mine.write_text('--beta=0.3\n')
  result = {'what': 'scl', 'protocol': 'pool', 'held_out_topics': [1], 'topk': 0.5,
            'best': {'beta': 0.1, 'learning_rate': 1e-3},
            'scores': [{'setting': {'beta': 0.1, 'learning_rate': 1e-3}, 'F1@20': 0.6}]}
  _, _, proposal = choice_files.save(str(config_dir), 'synthetic', 'synthetic', result, 'cmd')
  assert mine.read_text() == '--beta=0.3\n'  # proposed beside it, not written
  with pytest.raises(InputError, match='refusing to overwrite a file colt_jax did not write'):
    choice_files.apply_proposal(proposal)
  assert mine.read_text() == '--beta=0.3\n'
  outputs.record_file(str(mine))  # recorded as colt_jax's: a reviewed proposal may replace it
  choice_files.apply_proposal(proposal)
  assert '--beta=0.1' in mine.read_text() and '--beta=0.3' not in mine.read_text()


def test_outputs_are_refused_before_any_work(tmp_path):
  """A user's file at an output path stops the command before anything is read or trained:
  the refusal names the output flag even though the inputs (no results, no data) would also
  fail, and the user's files are byte-identical (reproduce --doc took 34 s, visualize 10-13 s,
  choose_steps 19.5 s and a training before refusing)."""
  doc = _user_folder(tmp_path / 'mine', {'RESULTS.md': 'my notes'}) / 'RESULTS.md'
  configs = _user_folder(tmp_path / 'configs', {'div400_phi_pool.choice.flags': '--x=1',
                                                'evidence/div400_phi_pool.proposed.flags': 'x'})
  figures = _user_folder(tmp_path / 'figs', {'poster.png': 'mine'})
  before = [tree_digest(p) for p in (doc.parent, configs, figures)]
  proc = run_cli('reproduce', '--dataset', 'div400', '--report_only', '--doc', doc,
                 '--results_dir', tmp_path / 'none', cwd=tmp_path)
  assert_bad_input(proc, str(doc), '--doc')
  proc = run_cli('choose_steps', '--dataset', 'div400', '--data_dir', tmp_path / 'none',
                 '--config_dir', configs, '--workdir', tmp_path / 'work', cwd=tmp_path)
  assert_bad_input(proc, 'div400_phi_pool.proposed.flags', '--config_dir')  # its proposal
  proc = run_cli('visualize', '--dataset', 'div400', '--data_dir', tmp_path / 'none',
                 '--model', tmp_path / 'none', '--out', figures, cwd=tmp_path)
  assert_bad_input(proc, str(figures), '--out')
  assert [tree_digest(p) for p in (doc.parent, configs, figures)] == before
  assert not (tmp_path / 'work').exists()


def test_a_second_trainer_or_reproduction_on_one_workdir_stops_naming_the_first(
    dataset_copy, tmp_path):
  """Two train_ttc.py started 4 s apart on one fresh --workdir both ran and interleaved
  metrics.jsonl; now the second stops in one line naming the holder's pid (here the test
  process holds the workdir's lock as a first run would), and leaves the workdir untouched."""
  import tiny_flags  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'scl'
  flagfile = tmp_path / 'scl.flags'
  flagfile.write_text(tiny_flags.scl_flags('synthetic'))
  with outputs.exclusive(str(workdir), 'a training run'):
    proc = run_cli('train_scl', f'--flagfile={flagfile}', '--data_dir', dataset_copy,
                   f'--workdir={workdir}', cwd=tmp_path)
    assert_bad_input(proc, str(workdir), '--workdir', f'pid {os.getpid()}')
    assert not os.path.exists(workdir / 'metrics.jsonl')
  work = tmp_path / 'reproduce'
  with outputs.exclusive(str(work), "reproduce's work"):
    proc = run_cli('reproduce', '--dataset', 'div400', '--data_dir', tmp_path / 'none',
                   '--workdir', work, '--results_dir', tmp_path / 'results', '--doc',
                   tmp_path / 'R.md', cwd=tmp_path)
    assert_bad_input(proc, str(work), '--workdir', f'pid {os.getpid()}')
