"""colt_jax.outputs: folders colt_jax may write, and result sets written whole or not at all."""
import os

import pytest

from colt_jax import outputs
from colt_jax.errors import InputError


def _listing(path):
  return sorted(os.listdir(path))


def test_claim_accepts_new_empty_and_own_folders(tmp_path):
  new = tmp_path / 'a' / 'b'
  assert outputs.claim_dir(str(new), 'x') == str(new)
  assert _listing(new) == [outputs.MARKER]
  empty = tmp_path / 'empty'
  empty.mkdir()
  outputs.claim_dir(str(empty), 'x')
  legacy = tmp_path / 'legacy'
  legacy.mkdir()
  (legacy / 'config.json').write_text('{}')
  outputs.claim_dir(str(legacy), 'x', legacy=('config.json',))
  assert outputs.MARKER in _listing(legacy)


def test_foreign_folders_and_files_are_refused(tmp_path):
  foreign = tmp_path / 'photos'
  foreign.mkdir()
  (foreign / 'holiday.jpg').write_bytes(b'jpeg')
  with pytest.raises(InputError, match=r"photos \(--out\): refusing .*'holiday.jpg'"):
    outputs.claim_dir(str(foreign), 'a dataset', flag='--out')
  assert _listing(foreign) == ['holiday.jpg']
  (tmp_path / 'file').write_text('x')
  with pytest.raises(InputError, match='not a folder'):
    outputs.check_writable_dir(str(tmp_path / 'file'), 'x')


def test_result_set_replaces_whole_or_keeps_the_old(tmp_path):
  final = tmp_path / 'results'
  with outputs.ResultSet(str(final)) as out:
    open(out.path('a.txt'), 'w').write('1')
    open(out.path('runs/b.txt'), 'w').write('2')
  assert _listing(final) == [outputs.MARKER, 'a.txt', 'runs']
  assert os.stat(final).st_mode & 0o777 == 0o777 & ~outputs.umask()
  with pytest.raises(RuntimeError):
    with outputs.ResultSet(str(final)) as out:
      open(out.path('a.txt'), 'w').write('NEW')
      raise RuntimeError('killed half-way')
  assert (final / 'a.txt').read_text() == '1'
  assert _listing(tmp_path) == ['results']  # no temporary left
  with outputs.ResultSet(str(final)) as out:
    open(out.path('c.txt'), 'w').write('3')
  assert _listing(final) == [outputs.MARKER, 'c.txt']  # a set, not a merge


def test_result_set_keeps_other_commands_files(tmp_path):
  final = tmp_path / 'results'
  with outputs.ResultSet(str(final)) as out:
    open(out.path('results.json'), 'w').write('old')
  (final / 'choose_steps-scl.json').write_text('choice')
  (final / 'stale.txt').write_text('x')
  with outputs.ResultSet(str(final), keep_old=('choose_steps*.json',)) as out:
    open(out.path('results.json'), 'w').write('new')
  assert _listing(final) == [outputs.MARKER, 'choose_steps-scl.json', 'results.json']
  assert (final / 'choose_steps-scl.json').read_text() == 'choice'


def test_result_set_checks_before_computing(tmp_path):
  foreign = tmp_path / 'mine'
  foreign.mkdir()
  (foreign / 'x').write_text('x')
  with pytest.raises(InputError, match='did not create'):
    outputs.ResultSet(str(foreign))
  locked = tmp_path / 'locked'
  locked.mkdir()
  os.chmod(locked, 0o500)
  try:
    if os.access(locked, os.W_OK):  # root ignores modes
      pytest.skip('running as root: a read-only folder is still writable')
    with pytest.raises(InputError, match='not writable'):
      outputs.ResultSet(str(locked / 'out'))
  finally:
    os.chmod(locked, 0o700)
