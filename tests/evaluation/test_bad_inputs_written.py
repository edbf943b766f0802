"""Bad input to experiments/search.py and serve.py (issue 65 item 6): a folder that is not a
store, an empty store, an unknown method or parameter, an image query on a text store, an
unreadable image: one line each, exit status 2, and nothing written (the working directory,
the stores and the photos' folder are as they were)."""
import os

import pytest

from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
from model_free_stores import _run  # pylint: disable=unused-import,g-bad-import-order
from model_free_stores import _store_write  # pylint: disable=unused-import,g-bad-import-order
from model_free_stores import minilm_store  # pylint: disable=unused-import,g-bad-import-order
from model_free_stores import photos  # pylint: disable=unused-import,g-bad-import-order


def _tree(*roots):
  """(path, size, mtime_ns) of every file and folder under `roots`."""
  out = []
  for root in roots:
    for folder, dirs, files in os.walk(root):
      for name in sorted(dirs + files):
        st = os.lstat(os.path.join(folder, name))
        out.append((os.path.join(folder, name), st.st_size, st.st_mtime_ns))
  return sorted(out)


@pytest.mark.slow
@pytest.mark.parametrize('script', ['search.py', 'serve.py'])
def test_each_bad_input_is_one_line_status_2_and_writes_nothing(script, photos, minilm_store,
                                                                tmp_path, monkeypatch):
  store_dir, folder = photos
  work = tmp_path / 'work'
  work.mkdir()
  monkeypatch.chdir(work)
  not_a_store = tmp_path / 'not-a-store'
  not_a_store.mkdir()
  empty = _store_write(tmp_path / 'empty', 'clip:tiny', 0)
  unreadable = tmp_path / 'broken.jpg'
  unreadable.write_bytes(b'\xff\xd8\xff not really a JPEG')
  photo = os.path.join(folder, 'a', 'p00.png')
  before = _tree(work, store_dir, folder, minilm_store, empty, not_a_store)
  query = ['--query=the view'] if script == 'search.py' else ['--port=0']
  cases = [
      ([f'--store={not_a_store}', *query], [f'{not_a_store}: not a feature store']),
      ([f'--store={empty}', *query], [f'{empty}: the store has no photos']),
  ]
  if script == 'search.py':
    cases += [
        ([f'--store={store_dir}', *query, '--method=bm25'], ["--method: unknown method 'bm25'"]),
        ([f'--store={store_dir}', *query, '--method=dpp', '--params={"gamma": 1}'],
         ['params.gamma: not a parameter of dpp']),
        ([f'--store={minilm_store}', f'--image={photo}'],
         [f'store {minilm_store} has minilm text features: --image needs a CLIP store']),
        ([f'--store={store_dir}', f'--image={unreadable}'], [str(unreadable), 'cannot read']),
    ]
  else:
    cases += [
        ([f'--store={store_dir}', *query, '--methods=bm25'], ['--methods', 'bm25']),
        ([f'--store={store_dir}', *query, '--dpp_theta=3'], ['--dpp_theta', 'must be in']),
    ]
  for args, needles in cases:
    assert_bad_input(_run(script, *args), *needles)
  assert _tree(work, store_dir, folder, minilm_store, empty, not_a_store) == before
