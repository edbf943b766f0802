"""Tests of experiments/make_model.py: model directories trained on every topic, in one call."""
import os

import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.util import outputs
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError
from colt_jax.reproduction import full_models
import tiny_flags
from colt_jax.reproduction import reproduce_config

TINY_SCL = tiny_flags.scl_flags('synthetic')
TINY_TTC = tiny_flags.ttc_flags('synthetic', 40, '--label_scheme=local', '--num_groups=8')


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
  saved = full_models.build(cfg, str(out), coverage_weight=0.25, log=lambda *_: None)
  assert sorted(saved) == ['colt', 'colt-pairs']
  topics = sum(len(data.load_split('synthetic', tiny_synthetic, s).topics)
               for s in ('dev', 'test'))
  trained = list((out / 'training' / 'train' / 'all').iterdir())
  assert {p.name.split('-')[0] for p in trained} == {'scl', 'ttc'}
  store = data.load('synthetic', 'test', tiny_synthetic)[1]
  queries = np.stack([store.query_feature(t) for t in store.query_ids[:3]])
  for row, path in saved.items():
    model = retriever.Retriever.from_pretrained(path)
    assert model.classifier.config.split == 'all'
    assert model.settings.selection == ('coverage' if row == 'colt-pairs' else 'category')
    if row == 'colt-pairs':
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
  again = full_models.build(cfg, str(out), coverage_weight=0.25, log=lambda *_: None)
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
