"""Parsing and bounding of command-line values (colt_jax/util/flagcheck.py), without subprocesses."""
import json

import pytest

from colt_jax.util import cli
from colt_jax.train import configs
from colt_jax.util import flagcheck
from colt_jax.util.errors import ConfigError, InputError


# ----------------------------------------------------------------------------- lists


def test_parse_ints():
  assert flagcheck.parse_ints('--seeds', ['0', ' 1', '2']) == (0, 1, 2)
  assert flagcheck.parse_ints('seeds', '3,4') == (3, 4)
  assert flagcheck.parse_ints('--topics', [], nonempty=False) == ()


@pytest.mark.parametrize('values,kwargs,match', [
    (['a', 'b'], {}, r"--seeds: expected comma-separated integers, got 'a'"),
    (['1e3'], {}, r"--seeds: expected comma-separated integers, got '1e3'"),
    (['2.5'], {}, 'integers'),
    (['0', '0'], {}, r"--seeds: '0' is given twice"),
    (['-1'], {'low': 0}, r'--seeds: each value must be in \[0, 2147483647\], got -1'),
    ([str(2**40)], {}, r'--seeds: each value must be <= 2147483647, got 1099511627776'),
    ([], {}, '--seeds must name at least one value'),
    ([''], {}, '--seeds must name at least one value'),
])
def test_parse_ints_errors_name_the_flag(values, kwargs, match):
  with pytest.raises(ConfigError, match=match):
    flagcheck.parse_ints('--seeds', values, **kwargs)


def test_parse_floats_and_names():
  assert flagcheck.parse_floats('--grid', ['0.5', '1e-3'], low=0.0) == (0.5, 1e-3)
  for bad, match in ((['nan'], 'finite'), (['inf'], 'finite'), (['x'], 'numbers'),
                     (['-1'], r'in \[0.0, 1.0\]')):
    with pytest.raises(ConfigError, match=f'--grid.*{match}'):
      flagcheck.parse_floats('--grid', bad, low=0.0, high=1.0)
  assert flagcheck.parse_names('--method', ['topk', 'mmr'], ('topk', 'mmr')) == ('topk', 'mmr')
  with pytest.raises(ConfigError, match=r"--method: unknown 'x'; expected some of topk, mmr"):
    flagcheck.parse_names('--method', ['topk', 'x'], ('topk', 'mmr'))
  with pytest.raises(ConfigError, match="--method: 'topk' is given twice"):
    flagcheck.parse_names('--method', ['topk', 'topk'], ('topk', 'mmr'))


def test_check_range():
  assert flagcheck.check_range('--holdout', 3, 1, 7) == 3
  with pytest.raises(ConfigError, match=r'--holdout must be in \[1, 7\], got 100000 \(8 topics\)'):
    flagcheck.check_range('holdout', 100000, 1, 7, why='8 topics')
  with pytest.raises(ConfigError, match='--x must be a finite number'):
    flagcheck.check_range('--x', float('nan'), 0.0, 1.0)
  with pytest.raises(ConfigError, match=r'--f must be in \[0.0, 1.0\], got 1.5'):
    flagcheck.check_fraction('--f', 1.5)


# ----------------------------------------------------------------------------- memory


def test_bytes_text_and_limit(monkeypatch):
  assert flagcheck.human_bytes(512) == '512 B'
  assert flagcheck.human_bytes(1536) == '1.5 KiB'
  assert flagcheck.human_bytes(3 * 2**40) == '3 TiB'
  assert flagcheck.parse_bytes('8G') == 8 * 2**30
  assert flagcheck.parse_bytes('1048576') == 2**20
  assert flagcheck.parse_bytes('2GiB') == 2 * 2**30
  monkeypatch.delenv(flagcheck.MEMORY_ENV, raising=False)
  assert 2**26 < flagcheck.memory_limit() < 2**63
  monkeypatch.setenv(flagcheck.MEMORY_ENV, '1M')
  assert flagcheck.memory_limit() == 2**20
  flagcheck.check_memory('--batch_size=1', 2**20, 'one step')
  with pytest.raises(ConfigError, match=r'--batch_size=2: one step needs about 1 MiB, more '
                                         r'than this machine\'s 1 KiB of memory'):
    monkeypatch.setenv(flagcheck.MEMORY_ENV, '1K')
    flagcheck.check_memory('--batch_size=2', 2**20, 'one step')
  monkeypatch.setenv(flagcheck.MEMORY_ENV, 'lots')
  with pytest.raises(ConfigError, match=flagcheck.MEMORY_ENV):
    flagcheck.memory_limit()


def test_training_estimates_grow_with_their_flags_and_refuse_absurd_sizes(monkeypatch):
  monkeypatch.setenv(flagcheck.MEMORY_ENV, '16G')
  scl = configs.SCLConfig(workdir='w')
  ttc = configs.TTCConfig(workdir='w')
  small = flagcheck.scl_step_bytes(scl, 64)
  assert small < 2**30 < flagcheck.scl_step_bytes(configs.SCLConfig(
      workdir='w', batch_size=2_000_000), 64)
  assert flagcheck.ttc_step_bytes(ttc, 64) < 2**31
  flagcheck.check_training_memory(scl, 64, 30)
  flagcheck.check_training_memory(ttc, 64, 30)
  with pytest.raises(ConfigError, match=r'--batch_size=2000000000, --images_per_query=64.*'
                                         r'needs about .* more than this machine'):
    flagcheck.check_training_memory(configs.SCLConfig(workdir='w', batch_size=2_000_000_000))
  with pytest.raises(ConfigError, match=r'--num_images=100000000.*training phi'):
    flagcheck.check_training_memory(configs.TTCConfig(workdir='w', num_images=100_000_000), 16)
  with pytest.raises(ConfigError, match=r'--num_heads \(3\) must divide .* \(16\)'):
    flagcheck.check_training_memory(configs.TTCConfig(workdir='w', num_heads=3), 16)


def test_config_bounds_and_combinations():
  with pytest.raises(ConfigError, match=r'--batch_size \(SCLConfig.batch_size\) must be in '
                                         r'\[1, 2147483647\], got 100000000000'):
    configs.SCLConfig(workdir='w', batch_size=10**11)
  with pytest.raises(ConfigError, match=r'--seed .* must be in \[0, 4294967294\]'):
    configs.TTCConfig(workdir='w', seed=2**32)
  with pytest.raises(ConfigError, match=r'--model_dim \(10\) must be divisible by --num_heads'):
    configs.TTCConfig(workdir='w', model_dim=10, num_heads=3)
  assert '(in [1, 2147483647])' in configs.help_text(
      configs.SCLConfig.__dataclass_fields__['batch_size'])


def test_encoder_flags(tmp_path, monkeypatch):
  monkeypatch.setenv(flagcheck.MEMORY_ENV, '1G')
  with pytest.raises(ConfigError, match='--model: the clip encoder needs a model'):
    flagcheck.check_encoding('clip', '', 64)
  with pytest.raises(ConfigError, match='--max_length applies to --encoder minilm only'):
    flagcheck.check_encoding('clip', 'some/model', 64, max_length=10)
  model = tmp_path / 'bert'
  model.mkdir()
  (model / 'config.json').write_text(json.dumps({'max_position_embeddings': 128}))
  flagcheck.check_encoding('minilm', str(model), 64, max_length=128)
  with pytest.raises(ConfigError, match=r'--max_length must be in \[1, 128\], got 129 '
                                         r'\(the model has 128 positions\)'):
    flagcheck.check_encoding('minilm', str(model), 64, max_length=129)
  with pytest.raises(ConfigError, match='--batch_size=1000000: one padded batch of minilm'):
    flagcheck.check_encoding('minilm', str(model), 1_000_000)
  clip = tmp_path / 'clip'
  clip.mkdir()
  (clip / 'config.json').write_text(json.dumps({'vision_config': {'image_size': 224}}))
  flagcheck.check_encoding('clip', str(clip), 256)
  with pytest.raises(ConfigError, match='--batch_size=4096: one padded batch of clip'):
    flagcheck.check_encoding('clip', str(clip), 4096)


def test_store_dim_reads_meta_json_only(tmp_path):
  assert flagcheck.store_dim(str(tmp_path / 'none')) is None
  (tmp_path / 'meta.json').write_text(json.dumps({'dim': 16}))
  assert flagcheck.store_dim(str(tmp_path)) == 16
  (tmp_path / 'meta.json').write_text('{broken')
  assert flagcheck.store_dim(str(tmp_path)) is None
  root = tmp_path / 'data'
  (root / 'features' / 'dev').mkdir(parents=True)
  (root / 'features' / 'dev' / 'meta.json').write_text(json.dumps({'dim': 8}))
  assert flagcheck.default_store_dim('synthetic', 'dev', str(root)) == 8
  assert flagcheck.default_store_dim('synthetic', 'test', str(root)) is None
  assert not (root / 'features' / 'test').exists()


def test_integer_flags_given_as_floats_get_one_clear_line():
  from absl import flags  # pylint: disable=g-import-not-at-top
  values = flags.FlagValues()
  flags.DEFINE_integer('batch_size', 1, 'b', flag_values=values)
  with pytest.raises(flags.Error) as e:
    values(['prog', '--batch_size=1e11'])
  line = cli._flag_error(e.value)  # pylint: disable=protected-access
  assert line.startswith("--batch_size: expected an integer, got '1e11'")
  assert isinstance(ConfigError('x'), InputError)
