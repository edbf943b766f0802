"""A full disk as a user meets it: every command writing there ends with status 2 and one line
naming the path it was writing and the free space, no traceback, and leaves nothing half-made
(or the finished shards its next run resumes from). See colt_jax/util/diskspace.py.

The disk fills up without root: tests/full_disk.py runs the command line with the files under
one folder sharing a byte budget (and orbax's checkpoint writes failing as tensorstore's do; or,
with `devfull:N`, numpy's writes through a file's descriptor failing on /dev/full).
"""
import errno
import os
import re
import sys

import numpy as np
import pytest

from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.util import diskspace
from colt_jax.util import outputs
from cli_run import REPO, assert_bad_input, tree_digest  # pylint: disable=g-bad-import-order
from extract_layout import build_split  # pylint: disable=g-bad-import-order
from cli_run import without_progress  # pylint: disable=g-bad-import-order
from tiny_clip import random_image  # pylint: disable=g-bad-import-order
import preloaded

FULL_DISK = os.path.join(REPO, 'tests', 'full_disk.py')
SPACE = re.compile(r'no space left on device writing (\S+) \(\d[\d.]* (B|KiB|MiB|GiB|TiB|PiB) '
                   r'free on /\S*\)')


def run(script, *args, full, budget, failing_save=0):
  """`python SCRIPT ARGS` with the files under `full` sharing `budget` bytes (None: no limit)."""
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  wrapper = [] if budget is None else [FULL_DISK, str(full), str(budget), str(failing_save)]
  return preloaded.run([sys.executable, *wrapper, os.path.join(REPO, script), *map(str, args)],
                       capture_output=True, text=True, timeout=600, cwd=str(full.parent),
                       env=env)


def assert_full_disk(proc, path, *needles):
  """Status 2, one line: no space writing `path` (and the free space), then the needles."""
  line = assert_bad_input(proc, *needles)
  match = SPACE.search(line)
  assert match, line
  assert match.group(1) == str(path), line
  assert 'Event loop is closed' not in proc.stderr and 'RESOURCE_EXHAUSTED' not in proc.stderr
  return line


@pytest.fixture
def full(tmp_path):
  folder = tmp_path / 'full'
  folder.mkdir()
  return folder


def test_the_error_names_the_file_or_else_the_output_and_the_free_space(tmp_path,
                                                                        monkeypatch):
  monkeypatch.setattr(diskspace, '_output', None)
  out = tmp_path / 'out'
  diskspace.note_output(str(out))
  diskspace.note_output(str(tmp_path / '.out.tmp-ab12cd34'))  # a staging folder: not noted
  bare = OSError(errno.ENOSPC, 'No space left on device')  # write(2)'s: no file named
  assert SPACE.fullmatch(str(diskspace.error(bare))).group(1) == str(out)
  named = OSError(errno.ENOSPC, 'No space left on device', str(out / 'results.json'))
  assert SPACE.fullmatch(str(diskspace.error(named))).group(1) == str(out / 'results.json')
  for temporary in (tmp_path / '.out.tmp-ab12cd34' / 'a.txt', out / '.a.txt.x1y2z3.tmp'):
    staged = OSError(errno.ENOSPC, 'No space left on device', str(temporary))
    assert SPACE.fullmatch(str(diskspace.error(staged))).group(1) == str(out)
  orbax = ValueError('RESOURCE_EXHAUSTED: Error writing local file "/w/c/2.orbax-checkpoint-tmp'
                     '/d/0": No space left on device [os_error_code=\'28\']')
  assert diskspace.is_full(orbax)
  assert SPACE.fullmatch(str(diskspace.error(orbax, '/w/c/2'))).group(1) == '/w/c/2'
  quota = diskspace.error(OSError(errno.EDQUOT, 'Disk quota exceeded', '/q/a'), detail='; x')
  assert str(quota).startswith('disk quota exceeded writing /q/a (') and str(quota).endswith(
      '; x')
  for other in (OSError(errno.EACCES, 'Permission denied'), ValueError('NOT_FOUND: x'), None):
    assert not diskspace.is_full(other)
  free, mount = diskspace.free_space(str(tmp_path / 'not' / 'yet'))
  assert free > 0 and os.path.ismount(mount)


def test_numpy_short_write_is_a_full_disk(tmp_path, monkeypatch):
  """numpy writes an array into a real file with ndarray.tofile, whose short write on a full
  disk raises OSError('N requested and M written') with no errno: a full disk all the same."""
  monkeypatch.setattr(diskspace, '_output', None)
  with open('/dev/full', 'wb') as f, pytest.raises(OSError) as caught:
    np.ones(100_000, np.float32).tofile(f)
  e = caught.value
  assert e.errno is None and re.fullmatch(r'\d+ requested and \d+ written', str(e)), repr(e)
  assert diskspace.is_full(e)
  e.filename = str(tmp_path / 'out' / 'photos-00000.npy')  # as shards.save_shard names it
  assert diskspace.is_full(e)
  assert SPACE.fullmatch(str(diskspace.error(e))).group(1) == e.filename
  for other in (OSError('3 requested'), OSError(errno.EIO, '100 requested and 3 written'),
                ValueError('100 requested and 3 written')):
    assert not diskspace.is_full(other), other


def test_arrays_are_written_with_an_errno_on_a_full_disk(tmp_path):
  """The project's .npy writes go through Python's file write (diskspace.save_npy), whose
  full-disk error has its errno, in bounded chunks; the file reads back as np.save's."""
  array = np.arange(12, dtype=np.float32).reshape(3, 4)
  with open('/dev/full', 'wb', buffering=0) as f, pytest.raises(OSError) as caught:
    diskspace.save_npy(f, np.ones(100_000, np.float32))
  assert caught.value.errno == errno.ENOSPC and diskspace.is_full(caught.value)
  with open(tmp_path / 'a.npy', 'wb') as f:
    diskspace.save_npy(f, array)
  np.save(tmp_path / 'b.npy', array)
  assert (tmp_path / 'a.npy').read_bytes() == (tmp_path / 'b.npy').read_bytes()


def test_make_synthetic_leaves_nothing(full):
  proc = run('data_prep/make_synthetic.py', '--out', full / 'syn', '--dev_topics', '2',
             '--test_topics', '2', full=full, budget=3000)
  assert_full_disk(proc, full / 'syn')
  assert os.listdir(full) == []


@pytest.fixture(scope='module')
def photos(tmp_path_factory):
  root = tmp_path_factory.mktemp('photos')
  for i in range(6):
    random_image(i).save(root / f'{i}.jpg')
  return root


def test_index_collection_before_its_first_shard_leaves_nothing(full, photos, tiny_clip_dir):
  proc = run('data_prep/index_collection.py', '--images', photos, '--encoder', 'clip', '--model',
             tiny_clip_dir, '--out', full / 'store', '--noprogress', full=full, budget=1500)
  assert_full_disk(proc, full / 'store.partial' / 'plan.json')
  assert os.listdir(full) == []  # not even the .partial folder's manifest


@pytest.mark.slow
def test_extract_features_keeps_its_shards_and_the_next_run_resumes(full, tiny_clip_dir,
                                                                    tmp_path):
  root = build_split(str(tmp_path / 'div400'))
  args = ('--dataset', 'div400', '--data_dir', root, '--split', 'test', '--encoder', 'clip',
          '--model', tiny_clip_dir, '--out', full / 'feat', '--batch_size', '4',
          '--shard_size', '2', '--vocabulary_splits', 'test', '--noprogress')
  # The budget runs out inside the photos' shards (where exactly depends on the length of
  # the paths the manifest records: tmp_path's, which differs under xdist).
  proc = run('data_prep/extract_features.py', *args, full=full, budget=3000)
  line = assert_bad_input(proc)
  match = SPACE.search(line)
  assert match, line
  written = match.group(1)
  assert re.fullmatch(re.escape(str(full / 'feat.partial' / 'photos-')) + r'\d{5}\.npy',
                      written), line
  kept = int(re.search(r'the (\d+) finished shard\(s\) in ', line).group(1))
  assert kept >= 1 and line.endswith(f'finished shard(s) in {full / "feat.partial"} are kept, '
                                     'and the next run resumes from them'), line
  assert os.listdir(full) == ['feat.partial']
  reused = int(written[-9:-4])  # the photos' shards before the one being written
  done = run('data_prep/extract_features.py', *args, full=full, budget=None)
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'resuming from {full / "feat.partial"}' in done.stderr
  if reused:  # 7 photos in shards of 2: those of the kept shards are not extracted again
    assert re.search(rf'photos: {7 - 2 * reused} items in .*, {reused} shard\(s\) reused',
                     done.stderr)
  assert os.listdir(full) == ['feat']


@pytest.mark.slow
def test_extract_features_where_numpy_meets_the_full_disk(full, tmp_path):
  """numpy's tofile short write (no errno) is the same one line, the finished shard is kept
  whole and the next run resumes from it (issue 64)."""
  root = build_split(str(tmp_path / 'div400'))
  # minilm's shards of 3 photos (4.6 KB: past stdio's buffer) spend the 3000 bytes in the
  # first shard (with the settings and the manifest): the second is written on the full disk.
  args = ('--dataset', 'div400', '--data_dir', root, '--split', 'test', '--encoder', 'minilm',
          '--out', full / 'feat', '--batch_size', '4', '--shard_size', '3',
          '--vocabulary_splits', 'test', '--noprogress')
  proc = run('data_prep/extract_features.py', *args, full=full, budget='devfull:3000')
  partial = full / 'feat.partial'
  line = assert_full_disk(proc, partial / 'photos-00001.npy')
  assert line.endswith(f'; the 1 finished shard(s) in {partial} are kept, and the next run '
                       'resumes from them'), line
  assert sorted(os.listdir(partial)) == [outputs.MANIFEST, 'photos-00000.npy',
                                         'settings.json']  # no temporary left
  done = run('data_prep/extract_features.py', *args, full=full, budget=None)
  assert done.returncode == 0, done.stderr[-3000:]
  assert re.search(r'photos: 4 items in .*, 1 shard\(s\) reused', done.stderr), done.stderr
  assert os.listdir(full) == ['feat']


@pytest.fixture(scope='module')
def results(tiny_synthetic, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('disk') / 'results')
  result_sets.run_evaluation(dataset='synthetic', split='test', methods=['flickr', 'topk'],
                            protocols_=['pool'], params=evaluation.MethodParams(),
                            data_dir=tiny_synthetic, out_dir=out, log=lambda *_: None)
  return out


def test_browse_leaves_the_previous_site_or_none(full, results, tiny_synthetic):
  args = ('--results', results, '--out', full / 'site', '--data_dir', tiny_synthetic)
  proc = run('experiments/browse.py', *args, full=full, budget=5000)
  assert_full_disk(proc, full / 'site')
  assert os.listdir(full) == []  # no site/ holding only its manifest
  done = run('experiments/browse.py', *args, full=full, budget=None)
  assert done.returncode == 0, done.stderr[-3000:]
  before = tree_digest(full)
  proc = run('experiments/browse.py', *args, full=full, budget=5000)
  assert_full_disk(proc, full / 'site')
  assert tree_digest(full) == before  # the complete site of the run before, as it was


def test_evaluate_leaves_nothing(full, tiny_synthetic):
  proc = run('experiments/evaluate.py', '--dataset', 'synthetic', '--data_dir', tiny_synthetic,
             '--method', 'flickr,topk', '--out_dir', full / 'ev', full=full, budget=5000)
  assert_full_disk(proc, full / 'ev')
  assert os.listdir(full) == []


@pytest.mark.parametrize('failing_save', [1, 2])
def test_train_scl_keeps_its_last_checkpoint_or_nothing(full, tiny_synthetic, failing_save):
  work = full / 'scl'
  proc = run('experiments/train_scl.py', '--data_dir', tiny_synthetic, '--workdir', work,
             '--num_steps', '4', '--checkpoint_every', '1', '--log_every', '1', '--batch_size',
             '4', '--images_per_query', '8', full=full, budget=10**8, failing_save=failing_save)
  path = work / 'checkpoints' / str(failing_save)
  if failing_save == 1:  # nothing to resume from: the workdir this run made is removed
    assert_full_disk(without_progress(proc), path, 'no checkpoint was saved before',
                     f'{work}, made by this run, is removed')
    assert os.listdir(full) == []
  else:  # the last good checkpoint stays, and nothing of the failed one
    assert_full_disk(without_progress(proc), path, 'training stopped, the last good '
                     'checkpoint is step 1')
    assert sorted(os.listdir(work / 'checkpoints')) == ['1']


def test_train_ttc_keeps_its_last_checkpoint(full, tiny_synthetic):
  """phi's trainer shares g's loop: a full disk at its second checkpoint keeps the first."""
  work = full / 'ttc'
  proc = run('experiments/train_ttc.py', '--data_dir', tiny_synthetic, '--workdir', work,
             '--num_steps', '4', '--checkpoint_every', '1', '--log_every', '1', '--batch_size',
             '4', '--num_images', '16', '--num_layers', '1', '--model_dim', '16',
             full=full, budget=10**8, failing_save=2)
  assert_full_disk(without_progress(proc), work / 'checkpoints' / '2',
                   'training stopped, the last good checkpoint is step 1')
  assert sorted(os.listdir(work / 'checkpoints')) == ['1']
