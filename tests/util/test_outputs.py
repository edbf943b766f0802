"""colt_jax.util.outputs: ownership by manifest, and result sets written whole or not at all."""
import json
import os

import pytest

from colt_jax.util import outputs
from colt_jax.util.errors import InputError

M = outputs.MANIFEST


def _listing(path):
  return sorted(os.listdir(path))


def _manifest(path):
  with open(os.path.join(path, M)) as f:
    return json.load(f)


def test_claim_accepts_new_and_empty_folders_and_records_before_writing(tmp_path):
  new = tmp_path / 'a' / 'b'
  assert outputs.claim_dir(str(new), 'x', files=('config.json',), trees=('checkpoints',)) \
      == str(new)
  assert _listing(new) == [M]
  assert _manifest(new)['files'] == ['config.json']
  assert _manifest(new)['trees'] == ['checkpoints']
  (new / 'config.json').write_text('{}')
  (new / 'checkpoints' / '10').mkdir(parents=True)
  (new / 'checkpoints' / '10' / 'anything').write_text('orbax')
  outputs.claim_dir(str(new), 'x', files=('config.json',))  # its own folder: accepted
  empty = tmp_path / 'empty'
  empty.mkdir()
  outputs.claim_dir(str(empty), 'x')
  assert _listing(empty) == [M]


def test_a_file_name_is_no_proof_of_ownership(tmp_path):
  """A folder without a manifest that is not empty is refused whatever it holds."""
  for names in (['results.json', 'thesis.tex'], ['meta.json'], ['config.json'],
                ['.colt_jax']):
    folder = tmp_path / '-'.join(names)
    folder.mkdir()
    for n in names:
      (folder / n).write_text('mine')
    with pytest.raises(InputError, match=r'\(--out\): refusing .*no \.colt_jax-manifest'):
      outputs.check_writable_dir(str(folder), 'results', flag='--out')
    with pytest.raises(InputError, match='no .colt_jax-manifest'):
      outputs.ResultSet(str(folder))
    assert _listing(folder) == sorted(names)


def test_foreign_entries_in_an_owned_folder_are_named_and_kept(tmp_path):
  final = tmp_path / 'results'
  with outputs.ResultSet(str(final)) as out:
    open(out.path('results.json'), 'w').write('1')
    open(out.path('runs/a.txt'), 'w').write('2')
  (final / 'my_analysis.txt').write_text('mine')
  with pytest.raises(InputError, match=r"'my_analysis.txt', which colt_jax did not write"):
    outputs.ResultSet(str(final))
  os.unlink(final / 'my_analysis.txt')
  (final / 'runs' / 'mine').mkdir()
  with pytest.raises(InputError, match=r"'runs/mine/'"):
    outputs.claim_dir(str(final), 'results')
  assert outputs.foreign_entries(str(final), outputs.Manifest.load(str(final))) == ['runs/mine/']
  assert (final / 'runs' / 'mine').is_dir() and (final / 'results.json').read_text() == '1'


def test_a_folder_is_replaced_only_by_the_same_kind_of_content(tmp_path):
  """The manifest records what colt_jax wrote (`what`); another kind is refused in one line,
  whoever asks (a check, a claim, a replacement), and nothing is touched."""
  work = tmp_path / 'demo'
  outputs.claim_dir(str(work), 'the demo collection', files=('captions.csv',))
  (work / 'captions.csv').write_text('path,caption\n')
  assert outputs.Manifest.load(str(work)).what == 'the demo collection'
  refusal = r"demo \(--out\): refusing to write a feature store there: it holds the demo " \
            r"collection, written by colt_jax"
  with pytest.raises(InputError, match=refusal):
    outputs.check_writable_dir(str(work), 'a feature store', flag='--out')
  with pytest.raises(InputError, match='it holds the demo collection'):
    outputs.claim_dir(str(work), 'a feature store')
  tmp = outputs.staging_dir(str(work))
  with pytest.raises(InputError, match='it holds the demo collection'):
    outputs.replace_dir(tmp, str(work), 'a feature store')
  assert (work / 'captions.csv').read_text() == 'path,caption\n'
  outputs.claim_dir(str(work), 'the demo collection', files=('serve.log',))  # same kind: fine
  with outputs.ResultSet(str(tmp_path / 'store'), 'a feature store') as out:
    open(out.path('photos.npy'), 'w').write('x')
  assert outputs.Manifest.load(str(tmp_path / 'store')).what == 'a feature store'
  with pytest.raises(InputError, match='it holds a feature store'):
    outputs.ResultSet(str(tmp_path / 'store'), 'a CoLT model')


def test_a_users_file_inside_a_nested_colt_jax_folder_is_foreign_and_kept(tmp_path):
  """A tree that is a colt_jax folder of its own (its manifest) is checked entry by entry:
  a user's file in it stops a replacement and survives a clean-up."""
  final = tmp_path / 'store'
  with outputs.ResultSet(str(final), 'a feature store') as out:
    open(out.path('photos.npy'), 'w').write('x')
    engine = os.path.dirname(out.path('engines/faiss-hnsw/index.faiss'))
    open(os.path.join(engine, 'index.faiss'), 'w').write('i')
    outputs.Manifest(files=('index.faiss',)).save(engine)
  assert 'engines/faiss-hnsw' in outputs.Manifest.load(str(final)).trees
  (final / 'engines' / 'faiss-hnsw' / 'my-notes.txt').write_text('mine')
  assert outputs.foreign_entries(str(final), outputs.Manifest.load(str(final))) == [
      'engines/faiss-hnsw/my-notes.txt']
  with pytest.raises(InputError, match=r"'engines/faiss-hnsw/my-notes.txt', which colt_jax"):
    outputs.ResultSet(str(final), 'a feature store')
  assert outputs.remove_owned(str(final)) == ['engines/faiss-hnsw/my-notes.txt']
  left = sorted(os.path.relpath(os.path.join(r, n), final)
                for r, _, names in os.walk(final) for n in names)
  assert left == ['.colt_jax-manifest.json', 'engines/faiss-hnsw/.colt_jax-manifest.json',
                  'engines/faiss-hnsw/my-notes.txt']  # each manifest kept with what it guards


def test_a_file_added_while_the_work_ran_stops_the_replacement(tmp_path):
  final = tmp_path / 'results'
  with outputs.ResultSet(str(final)) as out:
    open(out.path('a.txt'), 'w').write('old')
  with pytest.raises(InputError, match=r"'late.txt'.*kept in .*\.results\.tmp-"):
    with outputs.ResultSet(str(final)) as out:
      open(out.path('a.txt'), 'w').write('new')
      (final / 'late.txt').write_text('mine')
  assert (final / 'late.txt').read_text() == 'mine' and (final / 'a.txt').read_text() == 'old'
  staged = [n for n in os.listdir(tmp_path) if n.startswith('.results.tmp-')]
  assert len(staged) == 1
  assert open(tmp_path / staged[0] / 'a.txt').read() == 'new'


def test_result_set_replaces_whole_or_keeps_the_old(tmp_path):
  final = tmp_path / 'results'
  with outputs.ResultSet(str(final)) as out:
    open(out.path('a.txt'), 'w').write('1')
    open(out.path('runs/b.txt'), 'w').write('2')
  assert _listing(final) == [M, 'a.txt', 'runs']
  assert _manifest(final)['files'] == ['a.txt', 'runs/b.txt']
  assert _manifest(final)['dirs'] == ['runs']
  assert os.stat(final).st_mode & 0o777 == 0o777 & ~outputs.umask()
  with pytest.raises(RuntimeError):
    with outputs.ResultSet(str(final)) as out:
      open(out.path('a.txt'), 'w').write('NEW')
      raise RuntimeError('killed half-way')
  assert (final / 'a.txt').read_text() == '1'
  assert _listing(tmp_path) == ['results']  # no temporary left
  with outputs.ResultSet(str(final)) as out:
    open(out.path('c.txt'), 'w').write('3')
  assert _listing(final) == [M, 'c.txt']  # a set, not a merge
  assert _listing(tmp_path) == ['results']


def test_result_set_keeps_other_commands_recorded_files(tmp_path):
  final = tmp_path / 'results'
  with outputs.ResultSet(str(final)) as out:
    open(out.path('results.json'), 'w').write('old')
  outputs.record(str(final), files=('choose_steps-scl.json', 'stale.txt'))
  (final / 'choose_steps-scl.json').write_text('choice')
  (final / 'stale.txt').write_text('x')
  with outputs.ResultSet(str(final), keep_old=('choose_steps*.json',)) as out:
    open(out.path('results.json'), 'w').write('new')
  assert _listing(final) == [M, 'choose_steps-scl.json', 'results.json']
  assert (final / 'choose_steps-scl.json').read_text() == 'choice'


def test_remove_owned_deletes_only_what_the_manifest_lists(tmp_path):
  folder = tmp_path / 'shards'
  outputs.claim_dir(str(folder), 'x', files=('settings.json', 'a.npy', 'b.npy'))
  (folder / 'settings.json').write_text('{}')
  (folder / 'a.npy').write_bytes(b'a')
  (folder / '.b.npy.1234.tmp').write_bytes(b'half')  # a write killed half-way
  assert outputs.foreign_entries(str(folder), outputs.Manifest.load(str(folder))) == []
  assert outputs.remove_owned(str(folder)) == []
  assert not folder.exists()
  outputs.claim_dir(str(folder), 'x', files=('a.npy',))
  (folder / 'a.npy').write_bytes(b'a')
  (folder / 'notes.txt').write_text('mine')
  assert outputs.remove_owned(str(folder)) == ['notes.txt']
  assert _listing(folder) == [M, 'notes.txt']


def test_single_files_are_overwritten_only_when_recorded(tmp_path):
  doc = tmp_path / 'REPORT.md'
  doc.write_text('my own notes')
  with pytest.raises(InputError, match=r'REPORT.md \(--doc\): refusing to overwrite a file '
                                       'colt_jax did not write'):
    outputs.write_owned_text(str(doc), 'generated', 'the report', flag='--doc')
  assert doc.read_text() == 'my own notes' and _listing(tmp_path) == ['REPORT.md']
  new = tmp_path / 'NEW.md'
  outputs.write_owned_text(str(new), 'v1', 'the report')
  outputs.write_owned_text(str(new), 'v2', 'the report')  # recorded: may be rewritten
  assert new.read_text() == 'v2' and _manifest(tmp_path)['files'] == ['NEW.md']
  with pytest.raises(InputError, match='is a folder'):
    outputs.check_writable_file(str(tmp_path), 'x')


def test_a_malformed_manifest_is_bad_input(tmp_path):
  (tmp_path / M).write_text('{not json')
  with pytest.raises(InputError, match='not a colt_jax manifest'):
    outputs.check_writable_dir(str(tmp_path), 'x')


@pytest.mark.parametrize('entry', ['../victim.txt', '{victim}', 'a/../../victim.txt', '',
                                   'a//b', './a', '.'])
@pytest.mark.parametrize('kind', ['files', 'trees', 'dirs'])
def test_a_manifest_naming_paths_outside_its_folder_is_refused(tmp_path, entry, kind):
  """An edited or corrupt manifest never makes colt_jax delete outside its folder."""
  folder, victim = tmp_path / 'out', tmp_path / 'victim.txt'
  outputs.claim_dir(str(folder), 'x', files=('a.txt',))
  victim.write_text('mine')
  data = _manifest(folder)
  data[kind] = data.get(kind, []) + [entry.format(victim=victim)]
  (folder / M).write_text(json.dumps(data))
  with pytest.raises(InputError, match=r'not a colt_jax manifest \(not a (normal )?path inside'):
    outputs.remove_owned(str(folder))
  with pytest.raises(InputError, match='not a colt_jax manifest'):
    outputs.check_writable_dir(str(folder), 'x')
  assert victim.read_text() == 'mine'


def test_remove_owned_follows_no_link_out_of_its_folder(tmp_path):
  """A listed file under a folder that became a link to elsewhere is not deleted there."""
  folder, elsewhere = tmp_path / 'out', tmp_path / 'elsewhere'
  outputs.claim_dir(str(folder), 'x', files=('sub/a.txt',), trees=('sub/t',))
  elsewhere.mkdir()
  (elsewhere / 'a.txt').write_text('mine')
  (elsewhere / 't').mkdir()
  (elsewhere / 't' / 'x').write_text('mine too')
  os.symlink(elsewhere, folder / 'sub')
  (elsewhere / 'deep').mkdir()  # empty, as a listed folder of the link's name would be
  outputs.record(str(folder), files=('sub/deep/b.txt',))
  assert outputs.remove_owned(str(folder)) == ['sub/']
  assert (elsewhere / 'a.txt').read_text() == 'mine'
  assert (elsewhere / 't' / 'x').read_text() == 'mine too'
  assert (elsewhere / 'deep').is_dir()


def test_remove_owned_of_a_link_to_a_folder_removes_the_link_not_its_target(tmp_path):
  target, link = tmp_path / 'target', tmp_path / 'link'
  outputs.claim_dir(str(target), 'x', files=('a.txt',))
  (target / 'a.txt').write_text('ours')
  os.symlink(target, link)
  assert outputs.remove_owned(str(link)) == []
  assert not os.path.lexists(link) and target.is_dir() and os.listdir(target) == []


def test_result_set_checks_before_computing(tmp_path):
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


def test_one_writer_at_a_time(tmp_path):
  """`exclusive`: a second writer of the same folder (here another open file description in
  this process, as another process would hold) stops at once, naming the holder; the lock is
  free again after the block, also after an error."""
  out = str(tmp_path / 'store')
  with outputs.exclusive(out, 'a feature store', flag='--out'):
    with pytest.raises(InputError, match=rf'store \(--out\): another colt_jax command '
                       rf'\(pid {os.getpid()}\) is writing a feature store there now'):
      with outputs.exclusive(out, 'a feature store', flag='--out'):
        pass
    with outputs.exclusive(str(tmp_path / 'other'), 'a feature store'):  # another folder
      pass
  with pytest.raises(ValueError):
    with outputs.exclusive(out, 'a feature store'):
      raise ValueError('the work failed')
  with outputs.exclusive(out, 'a feature store'):
    pass
  assert not os.path.exists(out)  # nothing made beside it


def test_another_users_lock_file_still_locks(tmp_path, monkeypatch):
  """The lock file of a folder lives in the shared temporary folder: when another user made it
  without write permission for us (open O_RDWR refused), the lock is taken through a read-only
  descriptor (flock needs none), and a second writer still stops; a lock file that cannot be
  opened at all is one line naming it, not an internal error."""
  out = str(tmp_path / 'store')
  with outputs.exclusive(out, 'a feature store'):  # the lock file, as the other user made it
    pass
  real_open = os.open
  refused = []

  def open_as_other_user(path, flags, *args):
    if os.path.basename(str(path)).startswith('colt_jax-') and flags & os.O_RDWR:
      refused.append(path)
      raise PermissionError(13, 'Permission denied', path)
    return real_open(path, flags, *args)

  monkeypatch.setattr(os, 'open', open_as_other_user)
  with outputs.exclusive(out, 'a feature store'):
    with pytest.raises(InputError, match='another colt_jax command'):
      with outputs.exclusive(out, 'a feature store'):
        pass
  assert refused

  def open_nothing(path, flags, *args):
    if os.path.basename(str(path)).startswith('colt_jax-'):
      raise PermissionError(13, 'Permission denied', path)
    return real_open(path, flags, *args)

  monkeypatch.setattr(os, 'open', open_nothing)
  with pytest.raises(InputError, match=r'store \(--out\): cannot open the lock file .*colt_jax-'
                     r'.*\.lock \(Permission denied\)'):
    with outputs.exclusive(out, 'a feature store', flag='--out'):
      pass
