"""Methods found by name (colt_jax/train/method_registry.py): every saved config, checkpoint and
model directory names the method that wrote it, one registry of import paths resolves the name
(no installed entry points, no guess from fields), files saved before name none and read as
before, and the paper's trainer trains the paper's phi importing nothing of colt_jax/pairs/."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from colt_jax.inference import retriever
from colt_jax.inference import settings as settings_lib
from colt_jax.inference import model_dirs
from colt_jax.train import configs
from colt_jax.train import loop
from colt_jax.train import method_registry
from colt_jax.train import recipes
from colt_jax.train import restore
from colt_jax.train import trainers
from colt_jax.util.errors import InputError
from xla_env import xla_flags  # pylint: disable=g-bad-import-order
import preloaded  # pylint: disable=g-bad-import-order
from checkout import REPO  # pylint: disable=g-bad-import-order

FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'old_checkpoints')


def test_each_name_resolves_by_path_to_classes_that_say_it_back(monkeypatch):
  """The registry imports each method's parts by their paths, with no entry point installed:
  its config, settings and Retriever classes name it (`METHOD`), its recipe is a recipe."""
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(metadata, 'entry_points', lambda *args, **kwargs: [])
  assert set(method_registry.METHODS) == {'colt', 'colt-pairs'}
  for name in method_registry.METHODS:
    config = method_registry.config_class(name)
    settings = method_registry.settings_class(name)
    assert config.METHOD == settings.METHOD == name
    assert issubclass(config, configs.TTCConfig)
    assert issubclass(settings, settings_lib.InferenceSettings)
    assert issubclass(method_registry.retriever_class(name), retriever.Retriever)
    assert isinstance(method_registry.recipe(name), recipes.PhiRecipe)
    assert method_registry.method_of(settings()) == name
  assert method_registry.config_class('colt') is configs.TTCConfig
  assert method_registry.retriever_class('colt') is retriever.Retriever


def test_files_saved_before_methods_were_recorded_read_as_their_fields_say():
  """The one place that reads an old file's method: fields beyond the paper's are colt-pairs'
  (every such file was saved from colt-pairs' classes), the paper's alone are the paper's; a
  named method is taken as named."""
  paper = {f.name for f in dataclasses.fields(configs.TTCConfig)}
  read = lambda record: method_registry.saved_method(record, set(record) - {'method'}, paper,
                                                     'x')
  assert read({'num_layers': 1}) == 'colt'
  assert read({'num_layers': 1, 'query_relative': False}) == 'colt-pairs'
  assert read({'num_layers': 1, 'query_relative': False, 'method': 'colt'}) == 'colt'
  assert read({'num_layers': 1, 'method': 'colt-pairs'}) == 'colt-pairs'


def _phi_config(path):
  return loop.restore_checkpoint(path)[1]


def test_an_unknown_method_is_one_line_naming_the_file_and_the_field(tiny_colt, tmp_path):
  """A checkpoint's config, a model directory's model.json and a workdir's inference.json that
  name a method colt_jax has not are refused in one line naming the file and the field."""
  _, ttc = tiny_colt
  phi = restore.load_classifier(ttc.workdir)
  config = dict(_phi_config(ttc.workdir), method='colt-plus')
  model_dirs.save_params(str(tmp_path / 'phi'), phi.params, config)
  with pytest.raises(InputError) as e:
    restore.load_classifier(str(tmp_path / 'phi'))
  assert str(e.value) == (f'{tmp_path / "phi"}: field method is \'colt-plus\', not a method of '
                          'colt_jax (one of colt, colt-pairs)')
  model = retriever.Retriever.from_checkpoints(None, ttc.workdir).save_pretrained(
      str(tmp_path / 'model'))
  path = os.path.join(model, settings_lib.MODEL_FILE)
  info = json.load(open(path))
  json.dump(dict(info, method=3), open(path, 'w'))
  with pytest.raises(InputError, match=rf'^{path}: field method is 3, not a method of colt_jax'):
    retriever.Retriever.from_pretrained(model)
  work = tmp_path / 'work'
  work.mkdir()
  settings_lib.save_settings(str(work), settings_lib.InferenceSettings())
  path = work / settings_lib.SETTINGS_FILE
  json.dump(dict(json.load(open(path)), method='colt-plus'), open(path, 'w'))
  with pytest.raises(InputError, match=rf'^{path}: field method is \'colt-plus\''):
    settings_lib.saved_settings(str(work))


def test_new_checkpoints_and_model_directories_name_their_method(tiny_colt, tmp_path):
  """g's and phi's config.json and checkpoint configs, and model.json, name the method that
  wrote them: the paper's phi saves 'colt'; run by colt-pairs' Retriever, its model.json names
  'colt-pairs' and its phi 'colt'; colt-pairs' phi saves 'colt-pairs'."""
  scl, ttc = tiny_colt
  for workdir, method in ((scl.workdir, 'colt'), (ttc.workdir, 'colt')):
    assert json.load(open(os.path.join(workdir, loop.CONFIG_FILE)))['method'] == method
    assert _phi_config(workdir)['method'] == method
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  assert type(colt) is retriever.Retriever
  model = colt.save_pretrained(str(tmp_path / 'model'))
  assert json.load(open(os.path.join(model, settings_lib.MODEL_FILE)))['method'] == 'colt'
  for part, method in (('g', 'colt'), ('phi', 'colt')):
    assert json.load(open(os.path.join(model, part, loop.CONFIG_FILE)))['method'] == method
    assert _phi_config(os.path.join(model, part))['method'] == method
  back = retriever.Retriever.from_pretrained(model)
  assert type(back) is retriever.Retriever and back.classifier.config == colt.classifier.config
  pairs = retriever.Retriever.from_checkpoints(
      scl.workdir, ttc.workdir, method_registry.settings_class('colt-pairs')())
  model = pairs.save_pretrained(str(tmp_path / 'pairs'))
  assert json.load(open(os.path.join(model, settings_lib.MODEL_FILE)))['method'] == 'colt-pairs'
  assert type(retriever.Retriever.from_pretrained(model)).__name__ == 'PairsRetriever'
  assert json.load(open(os.path.join(model, 'phi', loop.CONFIG_FILE)))['method'] == 'colt'
  cfg = method_registry.config_class('colt-pairs')(**dict(
      dataclasses.asdict(ttc), workdir=str(tmp_path / 'ttc-pairs'), query_relative=True,
      num_steps=1))
  trainers.train_ttc(cfg, progress=False)
  assert json.load(open(os.path.join(cfg.workdir, loop.CONFIG_FILE)))['method'] == 'colt-pairs'
  phi = restore.load_classifier(cfg.workdir)
  assert phi.config == cfg and type(phi.module).__name__ == 'PairsTokenClassifier'


_MAIN = """
import runpy, sys
sys.argv = ['experiments/train_ttc.py'] + sys.argv[1:]
try:
  runpy.run_path('experiments/train_ttc.py', run_name='__main__')
except SystemExit as e:
  assert not e.code, e.code
print('PAIRS', sorted(m for m in sys.modules if m.startswith('colt_jax.pairs')))
"""


def _train_ttc(*args):
  env = dict(os.environ, XLA_FLAGS=xla_flags(1), PYTHONPATH=REPO)
  out = subprocess.run([sys.executable, '-c', _MAIN, *args], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout.split('PAIRS ')[-1].strip()


def test_the_paper_s_trainer_trains_the_paper_s_phi_importing_nothing_of_the_extension(
    tiny_synthetic, tmp_path):
  """train_ttc.py with the paper's flagfile trains the paper's phi (TTCConfig, method 'colt')
  and its process never imports colt_jax/pairs/; the tuned flagfile names colt-pairs, whose
  flags it then defines."""
  tiny = [f'--data_dir={tiny_synthetic}', '--dataset=synthetic', '--scl_checkpoint=',
          '--num_layers=1', '--num_heads=2', '--model_dim=16', '--num_images=24',
          '--batch_size=4', '--num_steps=1', '--checkpoint_every=100', '--log_every=1']
  paper = str(tmp_path / 'paper')
  loaded = _train_ttc('--flagfile=experiments/configs/paper/div400_ttc.flags', *tiny,
                      f'--workdir={paper}')
  assert loaded == '[]'
  assert json.load(open(os.path.join(paper, loop.CONFIG_FILE)))['method'] == 'colt'
  phi = restore.load_classifier(paper)
  assert type(phi.config) is configs.TTCConfig and type(phi.module).__name__ == 'TokenClassifier'
  pairs = str(tmp_path / 'pairs')
  loaded = _train_ttc('--flagfile=experiments/configs/tuned/synthetic_ttc.flags', *tiny,
                      f'--workdir={pairs}')
  assert 'colt_jax.pairs.config' in loaded
  saved = json.load(open(os.path.join(pairs, loop.CONFIG_FILE)))
  assert saved['method'] == 'colt-pairs' and saved['query_relative'] is True


def test_an_extension_s_flag_on_the_paper_s_trainer_names_its_method(tmp_path):
  """The paper's trainer defines no flag of colt-pairs; given one, it says in one line which
  --method defines it (and no traceback), for --flag and --noflag alike."""
  env = dict(os.environ, PYTHONPATH=REPO)
  for flag in ('--query_relative', '--norelational_tokens'):
    proc = preloaded.run([sys.executable, os.path.join(REPO, 'experiments', 'train_ttc.py'),
                          flag, f'--workdir={tmp_path}/w'], capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"train_ttc.py: error: Unknown command line flag '{flag[2:]}' (a flag of "
        '--method=colt-pairs)')
    assert 'Traceback' not in proc.stderr
  assert not os.path.exists(tmp_path / 'w')
