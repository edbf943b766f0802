"""Tests of colt_jax/data/judgments.py and data_prep/make_dataset.py: a CSV of judgments
round-trips through the official layout, every bad input is one line naming the CSV's line
and field, and the usual extract -> train -> evaluate -> choose path runs on the result."""
import csv
import hashlib
import io
import json
import os
import sys

import pytest
from PIL import Image

from colt_jax.util import outputs
from colt_jax.data import judgments
from colt_jax.data import mediaeval
from colt_jax.data.official_files import DatasetFormatError
from colt_jax.encoders import extract
from colt_jax.util.errors import InputError
import tiny_flags  # pylint: disable=g-bad-import-order
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

CLI = os.path.join(REPO, 'data_prep', 'make_dataset.py')
TEMPLATES = os.path.join(REPO, 'experiments', 'configs', 'tuned')
HEADER = ['query', 'photo', 'caption', 'relevance', 'cluster']
# Queries: an '&', a non-ASCII letter, a quote; the first three name their photos by image
# path, the others by id.
QUERIES = ('Eiffel Tower', 'Tom & Jerry\'s house', 'Café de Flore', 'Big Ben', 'Louvre',
           'Colosseum')
VIEWS = ('night view', 'from the river', 'close up', 'aerial view')


def _rows(images_dir: str, per_query: int = 12) -> list:
  """6 queries x 12 photos: relevance 1/0/-1, clusters by name (spelling variants) and by
  integer id, captions with commas, quotes and '<'; photo 'shared-1' in two queries."""
  rows = []
  for qi, query in enumerate(QUERIES):
    for i in range(per_query):
      rel = (1, 1, 0, 1, -1, 1, 1, 0, 1, 1, 1, 0)[i]
      cluster = ''
      if rel == 1:
        if qi == 4:  # integer ids
          cluster = str(7 + i % 3)
        else:
          view = VIEWS[(i + qi) % 4]
          cluster = view.title() if i % 5 == 0 else view  # "Night View" == "night view"
      caption = f'{query}, photo {i}: "{VIEWS[i % 4]}" <{i}>'
      if qi < 3:
        photo = os.path.join('img', f'q{qi}', f'IMG {qi}{i:02d}.jpg')
        if i == 0:  # the same file name in two folders: ids made unique by a path hash
          photo = os.path.join('img', 'dup' if qi == 1 else f'q{qi}', 'same.jpg')
        if i == 2 and qi == 2:  # written Windows-style
          photo = f'img\\q{qi}\\IMG {qi}{i:02d}.jpg'
      else:
        photo = f'{qi}_{i}'
      if qi in (3, 5) and i == 11:  # one photo judged for two queries
        photo, caption, rel, cluster = 'shared-1', 'a shared photo', 1, 'close up'
      rows.append([query, photo, caption, str(rel), cluster])
  for row in rows:
    if '/' in row[1] or '\\' in row[1]:
      path = os.path.join(images_dir, row[1].replace('\\', '/'))
      if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.new('RGB', (8, 8), (len(row[1]) * 7 % 255, 10, 20)).save(path, 'JPEG')
  return rows


def _write_csv(path, rows, header=HEADER, newline='\n', bom=False) -> str:
  buf = io.StringIO()
  writer = csv.writer(buf, lineterminator=newline)
  writer.writerow(header)
  writer.writerows(rows)
  with open(path, 'wb') as f:
    f.write((b'\xef\xbb\xbf' if bom else b'') + buf.getvalue().encode('utf-8'))
  return str(path)


def _expected(rows) -> dict:
  """What the layout must give back, computed from the rows (not by the library)."""
  out = {}
  for query, photo, caption, rel, cluster in rows:
    q = out.setdefault(query, {'photos': [], 'rel': {}, 'captions': {}, 'names': [],
                               'keys': [], 'members': {}})
    pid = photo if '/' not in photo and '\\' not in photo else os.path.splitext(
        os.path.basename(photo.replace('\\', '/')))[0]
    pid = pid.replace(' ', '_')
    if pid == 'same':
      pid += '-' + hashlib.sha256(os.path.normpath(photo).encode()).hexdigest()[:8]
    if pid in q['rel']:
      continue
    q['photos'].append(pid)
    q['rel'][pid] = int(rel)
    q['captions'][pid] = caption
    if cluster:
      name = f'{query} cluster {cluster}' if cluster.isdigit() else cluster
      key = ' '.join(name.split()).lower()
      if key not in q['keys']:
        q['keys'].append(key)
        q['names'].append(name)
      q['members'][pid] = q['keys'].index(key) + 1
  return out


@pytest.fixture(scope='module')
def made(tmp_path_factory):
  """The 6 x 12 CSV made into a dataset by the command line (CRLF, BOM, a duplicate line)."""
  root = tmp_path_factory.mktemp('judgments')
  rows = _rows(str(root))
  with_dup = rows[:5] + [rows[3]] + rows[5:]  # the same judgment twice counts once
  csv_path = _write_csv(root / 'judgments.csv', with_dup, newline='\r\n', bom=True)
  out = root / 'dataset'
  proc = preloaded.run([sys.executable, CLI, f'--csv={csv_path}', f'--out={out}'],
                       capture_output=True, text=True, cwd=str(root), check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'read it with --dataset div400 --data_dir' in proc.stdout
  return {'root': root, 'csv': csv_path, 'out': str(out), 'rows': rows}


def test_round_trip_gives_back_queries_relevance_clusters_and_captions(made):
  expected = _expected(made['rows'])
  seen = {}
  for split in ('dev', 'test'):
    data = mediaeval.read_split('div400', made['out'], split)
    assert len(data.topics) == 3  # --dev_fraction 0.5 of 6
    for t in data.topics:
      assert t.number == QUERIES.index(t.title) + 1  # numbered in order of appearance
      seen[t.title] = split
      want, gt = expected[t.title], data.ground_truth[t.number]
      photos = data.photos[t.number]
      assert [p.photo_id for p in photos] == want['photos']  # rank: the CSV order
      assert [p.rank for p in photos] == list(range(1, len(photos) + 1))
      assert {p.photo_id: p.title for p in photos} == want['captions']
      assert {p.photo_id: p.text for p in photos} == want['captions']  # what minilm reads
      assert dict(gt.relevance) == want['rel']
      assert dict(gt.clusters) == want['members']
      assert dict(gt.cluster_names) == dict(enumerate(want['names'], start=1))
      assert gt.num_clusters == len(want['names'])
      for p in photos:
        img = os.path.join(data.root, 'img', t.title, p.photo_id + '.jpg')
        if t.title in QUERIES[:3]:  # image paths: each photo in one query here
          assert p.url and p.url.startswith('file://') and os.path.isfile(img)
        else:
          assert p.url is None and not os.path.exists(img)
    # What extract_features.py --encoder clip looks up: every image-path photo has its file.
    _, missing = extract.photo_items(data, with_images=True)
    assert sorted(missing) == sorted({p.photo_id for t in data.topics if t.title in QUERIES[3:]
                                      for p in data.photos[t.number]})
  assert set(seen) == set(QUERIES)
  # The draw: the 3 queries whose sha256('0:<query>') comes first are dev.
  order = sorted(QUERIES, key=lambda q: hashlib.sha256(f'0:{q}'.encode()).hexdigest())
  assert {q for q, s in seen.items() if s == 'dev'} == set(order[:3])
  # A cluster name given as 'Night View' and 'night view' is one cluster, first spelling kept.
  marker = json.load(open(os.path.join(made['out'], judgments.MARKER_FILE)))
  assert marker['duplicate_lines'] == 1 and marker['layout'] == 'div400'
  assert marker['judgments'] == sum(len(q['photos']) for q in expected.values())
  assert open(os.path.join(made['out'], judgments.CSV_COPY), 'rb').read() == open(
      made['csv'], 'rb').read()


def test_images_are_copied_never_moved_and_byte_identical(made):
  src = os.path.join(str(made['root']), 'img', 'q0', 'IMG 001.jpg')
  data = mediaeval.read_split('div400', made['out'], 'dev')
  data_test = mediaeval.read_split('div400', made['out'], 'test')
  split = data if 'Eiffel Tower' in [t.title for t in data.topics] else data_test
  copy = os.path.join(split.root, 'img', 'Eiffel Tower', 'IMG_001.jpg')
  assert os.path.isfile(src) and open(src, 'rb').read() == open(copy, 'rb').read()


def test_split_column_and_seed_decide_the_splits(tmp_path):
  rows = _rows(str(tmp_path))
  split_of = {q: ('dev' if i % 2 else 'test') for i, q in enumerate(QUERIES)}
  path = _write_csv(tmp_path / 'j.csv', [r + [split_of[r[0]].upper()] for r in rows],
                    header=HEADER + ['Split'])
  judgments.make_dataset(path, str(tmp_path / 'a'), copy_images=False)
  for s in ('dev', 'test'):
    got = [t.title for t in mediaeval.read_split('div400', str(tmp_path / 'a'), s).topics]
    assert got == [q for q in QUERIES if split_of[q] == s]
  with pytest.raises(InputError, match='has a split column, so --dev_fraction'):
    judgments.make_dataset(path, str(tmp_path / 'b'), dev_fraction=0.5)
  plain = _write_csv(tmp_path / 'k.csv', rows)
  a = judgments.make_dataset(plain, str(tmp_path / 'c'), seed=3, dev_fraction=0.34)
  b = judgments.make_dataset(plain, str(tmp_path / 'd'), seed=3, dev_fraction=0.34)
  assert a.queries == b.queries and len(a.queries['dev']) == 2  # round(6 * 0.34)


def test_configs_come_from_the_shipped_flagfiles_and_parse(tmp_path):
  from colt_jax.pairs.config import PairsTTCConfig  # pylint: disable=g-import-not-at-top
  from colt_jax.train import configs  # pylint: disable=g-import-not-at-top
  path = _write_csv(tmp_path / 'j.csv', _rows(str(tmp_path)))
  summary = judgments.make_dataset(path, str(tmp_path / 'mine'), config_templates=TEMPLATES)
  scl = configs.from_flagfile(configs.SCLConfig,
                              os.path.join(summary.configs, 'div400_scl.flags'))
  ttc = configs.from_flagfile(PairsTTCConfig,
                              os.path.join(summary.configs, 'div400_ttc.flags'))
  shipped = configs.from_flagfile(configs.SCLConfig,
                                  os.path.join(TEMPLATES, 'div400_scl.flags'))
  assert scl.dataset == ttc.dataset == 'div400'
  assert (scl.beta, scl.learning_rate) == (shipped.beta, shipped.learning_rate)
  assert scl.workdir == 'work/mine/scl' and ttc.scl_checkpoint == 'work/mine/scl'
  # choose_steps may rewrite these copies (listed in their folder's manifest).
  outputs.check_writable_file(os.path.join(summary.configs, 'div400_scl.flags'), 'x')


def test_ownership_rules(tmp_path):
  rows = _rows(str(tmp_path))
  path = _write_csv(tmp_path / 'j.csv', rows)
  out = tmp_path / 'out'
  judgments.make_dataset(path, str(out))
  judgments.make_dataset(path, str(out), seed=1)  # its own folder: replaced whole
  (out / 'notes.txt').write_text('mine')
  with pytest.raises(InputError, match="refusing to write a dataset there.*notes.txt"):
    judgments.make_dataset(path, str(out))
  assert (out / 'notes.txt').read_text() == 'mine'
  with pytest.raises(InputError, match='refusing to write a dataset there'):
    judgments.make_dataset(path, str(tmp_path))  # the CSV's own folder
  (out / 'notes.txt').unlink()
  with pytest.raises(InputError, match='holds the judgments CSV'):  # its own copy of the CSV
    judgments.make_dataset(str(out / judgments.CSV_COPY), str(out))
  assert os.path.isfile(out / judgments.CSV_COPY)
  # The user's images are still there, unchanged; no staging folder is left behind.
  assert os.path.isfile(tmp_path / 'img' / 'q0' / 'IMG 001.jpg')
  assert not [n for n in os.listdir(tmp_path) if n.startswith('.out.tmp')]


# ----------------------------------------------------------------------------- bad input

GOOD = ['q1,a1,cap,1,x', 'q1,a2,cap,0,', 'q2,b1,,1,y', 'q2,b2,,-1,', 'q3,c1,,1,z',
        'q4,d1,,1,w']
H = 'query,photo,caption,relevance,cluster'


def _case(*lines, header=H):
  return '\n'.join([header, *lines]) + '\n'


BAD = [
    # (CSV text, line, field or text the one-line message names)
    (_case(*GOOD, header='query,photo,relevance'), 1, 'header: missing column cluster'),
    (_case(*GOOD, header='query,photo,relevence,cluster'), 1, "unknown column 'relevence'"),
    (_case(GOOD[0], ' ,a9,,1,x', *GOOD[1:]), 3, 'query: empty'),
    (_case(*GOOD[:2], 'q1,a3,,2,x', *GOOD[2:]), 4, "relevance: '2' is not 1, 0 or -1"),
    (_case(*GOOD[:3], 'q2,b3,,yes,', *GOOD[3:]), 5, "relevance: 'yes'"),
    (_case(*GOOD, 'q4,d2,,1,'), 8, 'cluster: empty, but the photo is relevant'),
    (_case(*GOOD, 'q4,d2,,0,w'), 8, "cluster: 'w' given for a photo of relevance 0"),
    (_case(*GOOD, 'q1,a1,cap,0,'), 8, 'relevance: a1 is judged for query \'q1\' at line 2'),
    (_case(*GOOD, 'q1,a1,cap,1,other'), 8, 'cluster: a1 is judged for query \'q1\' at line 2'),
    (_case(*GOOD, 'q4,a1,other caption,1,w'), 8, "caption: 'other caption', but line 2"),
    (_case(*GOOD, 'q5,e1,,1'), 8, 'expected 5 comma-separated fields'),
    (_case(*GOOD, 'AC/DC,e1,,1,x'), 8, "query: 'AC/DC' holds '/'"),
    (_case(*GOOD, 'Q1,e1,,1,x'), 8, "query: 'Q1' differs from 'q1' (line 2) only in case"),
    (_case(*GOOD, 'q5,my photo,,1,x'), 8, "photo: 'my photo' is neither an image path"),
    (_case(*GOOD, 'q5,pics/none.jpg,,1,x'), 8, 'photo: pics/none.jpg: no such image file'),
    (_case(*GOOD, 'q5,,,1,x'), 8, 'photo: empty'),
    (_case(*GOOD[:4]), None, '2 queries give 1 dev and 1 test'),
    (_case(*[g + ',dev' for g in GOOD[:5]], 'q4,d1,,1,w,test',
           header=H + ',split'), None, "split: the test split has 1 query (only 'q4' (line 7))"),
    (_case(*[g + ',dev' for g in GOOD[:2]], 'q1,a3,,0,,test', header=H + ',split'), 4,
     "split: 'test', but query 'q1' is in dev at line 2"),
    (_case(header=H), None, 'no judgments after the header line'),
]


@pytest.mark.parametrize('text,line,needle', BAD, ids=[b[2][:40] for b in BAD])
def test_bad_input_is_one_line_naming_the_csv_line_and_field(tmp_path, text, line, needle):
  path = tmp_path / 'bad.csv'
  path.write_text(text, encoding='utf-8')
  with pytest.raises(InputError) as e:
    judgments.make_dataset(str(path), str(tmp_path / 'out'))
  message = str(e.value)
  assert '\n' not in message
  assert message.startswith(f'{path}:{line}: ' if line else f'{path}: '), message
  assert needle in message, message
  assert not os.path.exists(tmp_path / 'out')  # checked before anything is written


def test_non_utf8_names_its_line(tmp_path):
  path = tmp_path / 'latin1.csv'
  path.write_bytes(_case(*GOOD[:3], 'q2,b9,caf\xe9,0,', *GOOD[3:]).encode('latin-1'))
  with pytest.raises(DatasetFormatError, match=rf'^{path}:5: not valid UTF-8'):
    judgments.read_csv(str(path))


def test_cli_reports_bad_input_in_one_line_with_status_2(tmp_path):
  from cli_run import assert_bad_input  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'bad.csv'
  path.write_text(_case(*GOOD[:2], 'q1,a3,,2,x', *GOOD[2:]))
  proc = preloaded.run([sys.executable, CLI, f'--csv={path}', f'--out={tmp_path / "o"}'],
                       capture_output=True, text=True, check=False)
  assert_bad_input(proc, f'{path}:4: relevance:')
  good = tmp_path / 'good.csv'
  good.write_text(_case(*GOOD))
  proc = preloaded.run([sys.executable, CLI, f'--csv={good}', f'--out={tmp_path / "o"}',
                        '--dev_fraction=1'], capture_output=True, text=True, check=False)
  assert_bad_input(proc, '--dev_fraction must be in (0, 1)')


def test_a_photo_that_is_no_image_or_lies_outside_the_csvs_folder_is_refused(tmp_path):
  """A text file named notes.jpg, /etc/passwd, a path out of the CSV's folder or a link out
  of it: refused at its CSV line before anything is written (they were copied into the
  dataset and failed later in extract_features.py as an internal error)."""
  folder = tmp_path / 'mine'
  (folder / 'img').mkdir(parents=True)
  Image.new('RGB', (8, 8), (1, 2, 3)).save(folder / 'img' / 'ok.jpg', 'JPEG')
  (folder / 'img' / 'notes.jpg').write_text('not an image')
  outside = tmp_path / 'elsewhere.jpg'
  Image.new('RGB', (8, 8), (4, 5, 6)).save(outside, 'JPEG')
  (folder / 'img' / 'link.jpg').symlink_to(outside)
  rows = [['q1', 'img/ok.jpg', '', '1', 'a'], ['q1', 'img/ok.jpg', '', '1', 'a']]

  def refused(photo, needle, **kwargs):
    csv_path = _write_csv(folder / 'j.csv', rows[:1] + [['q1', photo, '', '0', '']])
    with pytest.raises(DatasetFormatError, match=needle):
      judgments.make_dataset(csv_path, str(tmp_path / 'out'), **kwargs)
    assert not (tmp_path / 'out').exists()

  refused('img/notes.jpg', rf'^{folder / "j.csv"}:3: photo: img/notes.jpg: not an image')
  refused('/etc/passwd', rf'{folder / "j.csv"}:3: photo: /etc/passwd: /etc/passwd is outside '
          'the CSV.s folder')
  refused(str(outside), 'is outside the CSV.s folder')
  refused('../elsewhere.jpg', 'is outside the CSV.s folder')
  refused('img/link.jpg', 'elsewhere.jpg is outside the CSV.s folder')
  # Asked for: a photo from elsewhere is taken, but a file that is no image still is not.
  refused('/etc/passwd', r'/etc/passwd: not an image', allow_outside=True)
  read = judgments.read_csv(_write_csv(folder / 'j.csv', rows[:1] + [
      ['q1', str(outside), '', '0', '']]), allow_outside=True)
  assert sorted(p.source for p in read.photos.values()) == sorted(
      [str(folder / 'img' / 'ok.jpg'), str(outside)])


# ----------------------------------------------------------------------------- end to end

TINY_SCL = tiny_flags.scl_flags('div400')
TINY_TTC = tiny_flags.ttc_flags('div400', 16, '--label_scheme=local')


@pytest.mark.slow
def test_extract_train_evaluate_and_choose_run_on_the_dataset(tmp_path, monkeypatch):
  """minilm features of the captions -> g (SCL) -> phi (TTC) -> evaluate (flickr is the CSV
  order) -> choose_steps on dev, its choice written into the dataset's own configs."""
  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import tuning
  from colt_jax.reproduction import choice_files  # pylint: disable=g-import-not-at-top
  from colt_jax.reproduction import reproduce_config
  from colt_jax.pairs.config import PairsTTCConfig
  from colt_jax.train import configs
  from colt_jax import encoders
  from colt_jax.evaluation import methods as evaluation
  from colt_jax.evaluation import result_sets
  from colt_jax.encoders import stores
  from colt_jax.train import trainers
  # pylint: enable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)  # choose_steps reads the dev store from work/features/...
  loaded = {}  # MiniLM loaded once for both splits (the extraction is unchanged)
  monkeypatch.setattr(encoders, 'load', lambda name, *a, _load=encoders.load, **k: (
      loaded.get(name) or loaded.setdefault(name, _load(name, *a, **k))))
  templates = tmp_path / 'templates'
  templates.mkdir()
  (templates / 'div400_scl.flags').write_text(TINY_SCL)
  (templates / 'div400_ttc.flags').write_text(TINY_TTC)
  rows = _rows(str(tmp_path))
  path = _write_csv(tmp_path / 'j.csv', rows)
  data_dir = str(tmp_path / 'mine')
  summary = judgments.make_dataset(path, data_dir, copy_images=False,
                                   config_templates=str(templates))
  stores_ = {}
  for split in ('dev', 'test'):
    stores_[split] = stores.default_store_dir('div400', 'minilm', split)
    result = stores.extract_split('div400', split, 'minilm', stores_[split],
                                  data_dir=data_dir, batch_size=32, progress=False)
    assert len(result.store.query_ids) == 3
  scl = configs.from_flagfile(configs.SCLConfig,
                              os.path.join(summary.configs, 'div400_scl.flags'),
                              data_dir=data_dir, features_dir=stores_['dev'],
                              workdir=str(tmp_path / 'scl'))
  ttc = configs.from_flagfile(PairsTTCConfig,
                              os.path.join(summary.configs, 'div400_ttc.flags'),
                              data_dir=data_dir, features_dir=stores_['dev'],
                              workdir=str(tmp_path / 'ttc'), scl_checkpoint=scl.workdir)
  trainers.train_scl(scl, progress=False)
  trainers.train_ttc(ttc, progress=False)
  params = evaluation.MethodParams(scl_checkpoint=scl.workdir, ttc_checkpoint=ttc.workdir)
  payload = result_sets.run_evaluation(
      dataset='div400', split='test', methods=['flickr', 'topk', 'colt'], protocols_=['pool'],
      params=params, data_dir=data_dir, features_dir=stores_['test'],
      out_dir=str(tmp_path / 'runs'), log=lambda *_: None)
  assert set(payload['results']) == {'flickr', 'topk', 'colt'}
  assert os.path.isfile(tmp_path / 'runs' / 'results.json')
  # The Flickr order is the CSV's: P@5 per topic from the rows directly.
  expected = _expected(rows)
  for topic, scores in payload['results']['flickr']['per_topic'].items():
    title = QUERIES[int(topic) - 1]
    first5 = expected[title]['photos'][:5]
    want = sum(expected[title]['rel'][p] == 1 for p in first5) / 5
    assert scores['P@5'] == pytest.approx(want)
  assert 0.0 <= payload['results']['colt']['mean']['F1@20'] <= 1.0
  cfg = reproduce_config.ReproduceConfig(dataset='div400', data_dir=data_dir,
                                 config_dir=summary.configs, workdir=str(tmp_path / 'choose'),
                                 progress=False)
  quiet = lambda *_: None  # pylint: disable=unnecessary-lambda-assignment
  shipped = {n: open(os.path.join(TEMPLATES, n), 'rb').read() for n in os.listdir(TEMPLATES)
             if n.endswith('.flags')}
  result = tuning.choose_steps(cfg, holdout=1, steps=(1, 2), thresholds=(0.0,), log=quiet)
  assert len(result['held_out_topics']) == 1 and result['train_topics'] == 2
  flagfile, evidence, proposal = tuning.write_choice(
      cfg, result, f'python experiments/choose_steps.py --dataset div400 --data_dir {data_dir}',
      log=quiet)
  assert flagfile == os.path.join(summary.configs, 'div400_phi_pool.choice.flags')
  assert os.path.isfile(evidence) and not os.path.exists(flagfile)  # proposed, not written
  assert choice_files.apply_proposal(proposal) == flagfile  # as choose_steps.py --apply does
  assert cfg.ttc_steps_for('pool', 9) == result['best']['steps']
  # The shipped Div400 flagfiles are untouched: the choice went to the dataset's own configs.
  assert shipped == {n: open(os.path.join(TEMPLATES, n), 'rb').read() for n in shipped}
