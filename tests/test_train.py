"""Tests of the train steps and the pmap loop (colt_jax/train/)."""
import dataclasses
import errno
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax.model import augment
from colt_jax.model.phi import TokenClassifier
from colt_jax.train import configs
from colt_jax.data import splits as data
from colt_jax.util import devices
from colt_jax.util import diskspace
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.data import folds
from colt_jax.inference import retriever
from colt_jax.evaluation import runfile
from colt_jax.inputs import labels as labels_lib
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError
from colt_jax.train import loop
from colt_jax.train import modules
from colt_jax.train import restore
from colt_jax.train import trainers
from colt_jax.train import ttc_step
from colt_jax.pairs import heads_step
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.inference import encoder_checks
from colt_jax.pairs.inference.pairs_retriever import PairsRetriever
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from float_compare import assert_close  # pylint: disable=g-bad-import-order
import label_rule  # pylint: disable=g-bad-import-order


def _scl_cfg(root, workdir, **kw):
  base = dict(dataset='synthetic', data_dir=root, workdir=str(workdir), batch_size=8,
              images_per_query=16, num_steps=4, checkpoint_every=2, log_every=1,
              learning_rate=1e-3, beta=0.5)
  base.update(kw)
  return configs.SCLConfig(**base)


def _ttc_cfg(root, workdir, **kw):
  base = dict(dataset='synthetic', data_dir=root, workdir=str(workdir), batch_size=8,
              num_images=24, num_layers=1, num_heads=2, model_dim=16, num_steps=4,
              checkpoint_every=2, log_every=1, learning_rate=1e-3)
  base.update(kw)
  return PairsTTCConfig(**base)


def _close(a, b, atol, skip=()):
  leaves_b = jax.tree_util.tree_leaves(b)
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), leaves_b):
    name = jax.tree_util.keystr(path)
    if any(s in name for s in skip):
      continue
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-4, err_msg=name)


@pytest.fixture(scope='module')
def dev_data(tiny_synthetic):
  return data.load('synthetic', 'dev', tiny_synthetic)


def test_four_devices_match_one_device_scl(tiny_synthetic, dev_data, tmp_path):
  assert jax.local_device_count() == 4, 'conftest sets 4 host devices'
  cfg = _scl_cfg(tiny_synthetic, tmp_path / 'one')
  one = trainers.train_scl(cfg, devices=jax.local_devices()[:1], progress=False,
                           split_data=dev_data)
  four = trainers.train_scl(dataclasses.replace(cfg, workdir=str(tmp_path / 'four')),
                            devices=jax.local_devices(), progress=False, split_data=dev_data)
  _close(one.params, four.params, 1e-6)
  _close(one.bank, four.bank, 1e-5)
  assert not np.allclose(one.bank, trainers.scl_setup(cfg, dev_data)[0].bank)  # EMA moved it
  log = [json.loads(l) for l in open(tmp_path / 'one' / 'metrics.jsonl')]
  log4 = [json.loads(l) for l in open(tmp_path / 'four' / 'metrics.jsonl')]
  np.testing.assert_allclose([r['loss'] for r in log], [r['loss'] for r in log4], rtol=1e-5)
  # Eq. 3's drift is logged per step, and the same scalars go to TensorBoard event files.
  assert all(r['bank_drift'] >= 0 for r in log) and any(r['bank_drift'] > 0 for r in log)
  np.testing.assert_allclose([r['bank_drift'] for r in log], [r['bank_drift'] for r in log4],
                             rtol=1e-4, atol=1e-7)
  events = _tensorboard_scalars(tmp_path / 'one' / 'tensorboard')
  assert {'loss', 'bank_drift'} <= set(events)
  assert [v for _, v in events['loss']] == pytest.approx([r['loss'] for r in log], rel=1e-6)


def _tensorboard_scalars(directory) -> dict:
  """tag -> [(step, value)] of the event files in `directory` (TFRecord framing)."""
  import struct  # pylint: disable=g-import-not-at-top
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  out = {}
  files = sorted(os.listdir(directory))
  assert files, f'no event file in {directory}'
  for name in files:
    raw = open(os.path.join(directory, name), 'rb').read()
    pos = 0
    while pos < len(raw):
      (length,) = struct.unpack('<Q', raw[pos:pos + 8])
      event = event_pb2.Event.FromString(raw[pos + 12:pos + 12 + length])
      pos += 12 + length + 4
      for value in event.summary.value:
        out.setdefault(value.tag, []).append((event.step, value.simple_value))
  return out


def test_four_devices_match_one_device_ttc(tiny_synthetic, dev_data, tmp_path):
  """Augmentation and dropout draw per-example keys, so the split over devices is invisible."""
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'one', num_steps=3, dropout=0.1)
  one = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                           split_data=dev_data)
  four = trainers.train_ttc(dataclasses.replace(cfg, workdir=str(tmp_path / 'four')),
                            devices=jax.local_devices(), progress=False, split_data=dev_data)
  # The attention key bias has an exactly-zero gradient (softmax is shift-invariant), so its
  # gradient is pure rounding noise, which Adam's normalisation blows up to lr-sized steps.
  _close(one.params, four.params, 2e-5, skip=("['key']['bias']",))
  log = [json.loads(l)['loss'] for l in open(tmp_path / 'one' / 'metrics.jsonl')]
  log4 = [json.loads(l)['loss'] for l in open(tmp_path / 'four' / 'metrics.jsonl')]
  np.testing.assert_allclose(log, log4, rtol=1e-5)


def test_kill_and_resume_equals_uninterrupted(tiny_synthetic, dev_data, tmp_path):
  cfg = _scl_cfg(tiny_synthetic, tmp_path / 'straight', num_steps=6)
  straight = trainers.train_scl(cfg, progress=False, split_data=dev_data)
  broken = dataclasses.replace(cfg, workdir=str(tmp_path / 'broken'))
  # "Killed" after step 5: the last checkpoint is step 4, step 5's work is lost.
  trainers.train_scl(broken, stop_after=5, progress=False, split_data=dev_data)
  assert loop.Checkpointer(str(tmp_path / 'broken' / 'checkpoints')).latest_step() == 4
  resumed = trainers.train_scl(broken, progress=False, split_data=dev_data)
  assert int(resumed.step) == 6
  _close(straight.params, resumed.params, 0)
  _close(straight.opt_state, resumed.opt_state, 0)
  _close(straight.bank, resumed.bank, 0)


def test_ttc_resume_equals_uninterrupted(tiny_synthetic, dev_data, tmp_path):
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'straight', num_steps=4)
  straight = trainers.train_ttc(cfg, progress=False, split_data=dev_data)
  broken = dataclasses.replace(cfg, workdir=str(tmp_path / 'broken'))
  trainers.train_ttc(broken, stop_after=3, progress=False, split_data=dev_data)
  resumed = trainers.train_ttc(broken, progress=False, split_data=dev_data)
  _close(straight.params, resumed.params, 0)


def test_compiled_init_gives_the_eager_init(tiny_synthetic, dev_data, tmp_path, monkeypatch):
  """The trainers initialise parameters and the optimiser's state as compiled programs: the
  same trees, dtypes and shapes as flax's eager `init` and `TrainState.create` (g, and phi with
  its heads and a position embedding), the same values to float32 rounding (a compiled program
  and op-by-op execution may round differently on another machine) and integers exactly."""
  scl_cfg = _scl_cfg(tiny_synthetic, tmp_path / 'scl')
  ttc_cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'ttc', relevance_weight=1.0, pair_weight=1.0,
                     query_relative=True)
  # and the largest seed configs accept (a seed traced as int32 would overflow)
  top_seed = dataclasses.replace(scl_cfg, seed=2**32 - 2)

  def setups():
    return [trainers.scl_setup(scl_cfg, dev_data)[0], trainers.ttc_setup(ttc_cfg, dev_data)[0],
            trainers.scl_setup(top_seed, dev_data)[0]]

  compiled = setups()
  monkeypatch.setattr(trainers, '_init_params', lambda module, key, *inputs: module.init(
      key, *inputs)['params'])
  monkeypatch.setattr(trainers.state_lib, 'create', lambda apply_fn, params, tx, rng, bank=None:
                      trainers.state_lib.TrainState.create(apply_fn=apply_fn, params=params,
                                                           tx=tx, rng=rng, bank=bank))
  eager = setups()
  for a, b in zip(compiled, eager):
    assert a.step == b.step == 0 and isinstance(a.step, int)
    assert (jax.tree_util.tree_structure((a.params, a.opt_state))
            == jax.tree_util.tree_structure((b.params, b.opt_state)))
    leaves_a = jax.tree_util.tree_leaves_with_path((a.params, a.opt_state))
    leaves_b = jax.tree_util.tree_leaves((b.params, b.opt_state))
    for (path, x), y in zip(leaves_a, leaves_b):
      assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
      assert_close(np.asarray(x), np.asarray(y), jax.tree_util.keystr(path))
  assert 'position_embedding' in compiled[1].params
  flat = [np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(s.params)])
          for s in (compiled[0], compiled[2])]
  assert not np.allclose(*flat)  # the seed matters


def test_step_compiles_once(tiny_synthetic, dev_data, tmp_path):
  traces = []
  state, make_batch, step_fn, _ = trainers.ttc_setup(
      _ttc_cfg(tiny_synthetic, tmp_path / 'w'), dev_data)

  def counted(*args):
    traces.append(1)
    return step_fn(*args)

  local = jax.local_devices()[:2]
  p_step = jax.pmap(counted, axis_name='batch', devices=local)
  rstate = devices.replicate(state, local)
  for step in range(3):
    batch = jax.device_put(
        devices.shard(make_batch(step), 2), devices.device_sharding(local))
    rstate, _ = p_step(rstate, batch, devices.replicate(jax.random.PRNGKey(step), local))
  assert len(traces) == 1
  assert int(devices.unreplicate(rstate).step) == 3


def _lowerings(run) -> list:
  """The names of the programs JAX lowered (traced and converted) while `run()` ran."""
  lowered = []

  def listener(event, duration, **kwargs):
    del duration
    if event == '/jax/core/compile/jaxpr_to_mlir_module_duration':
      lowered.append(kwargs.get('fun_name', '?'))

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    run()
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  return lowered


@pytest.mark.parametrize('kind', ['scl', 'ttc'])
def test_a_training_of_the_same_configuration_reuses_its_compiled_step(
    tiny_synthetic, dev_data, tmp_path, kind):
  """Another seed (or fold, or workdir) of one configuration traces and lowers nothing: the
  pmapped step, the module and the optimiser are shared (`loop.pmapped_step`,
  `trainers.shared_module`, `trainers.adam`). Another learning rate is another program."""
  make, train = ((_scl_cfg, trainers.train_scl) if kind == 'scl'
                 else (_ttc_cfg, trainers.train_ttc))
  first = make(tiny_synthetic, tmp_path / 'a', seed=5)  # other tests' programs: cached
  train(first, progress=False, split_data=dev_data)
  again = dataclasses.replace(first, workdir=str(tmp_path / 'b'), seed=6)
  assert _lowerings(lambda: train(again, progress=False, split_data=dev_data)) == []
  other = dataclasses.replace(first, workdir=str(tmp_path / 'c'), learning_rate=2e-3)
  assert _lowerings(lambda: train(other, progress=False, split_data=dev_data))


def test_checkpoints_carry_config_and_restore(tiny_synthetic, dev_data, tmp_path):
  cfg = _scl_cfg(tiny_synthetic, tmp_path / 'scl', num_steps=2)
  state = trainers.train_scl(cfg, progress=False, split_data=dev_data)
  saved = json.load(open(tmp_path / 'scl' / 'config.json'))
  # the config (fields added later left out at their defaults), the store's encoder and the
  # method (g is the paper's in every method: method_registry)
  assert saved == dict(configs.saved_dict(cfg), encoder='synthetic', method='colt')
  g = restore.load_reencoder(str(tmp_path / 'scl'))
  assert g.config == cfg
  _close(g.params, state.params, 0)
  raw_state, raw_cfg = loop.restore_checkpoint(str(tmp_path / 'scl'))
  assert raw_cfg == dict(configs.saved_dict(cfg), encoder='synthetic', method='colt')
  assert int(raw_state['step']) == 2
  _close(raw_state['bank'], state.bank, 0)
  with pytest.raises(InputError, match='no such checkpoint folder'):
    loop.restore_checkpoint(str(tmp_path / 'nothing'))


def test_resume_refuses_a_changed_configuration(tiny_synthetic, dev_data, tmp_path):
  cfg = _scl_cfg(tiny_synthetic, tmp_path / 'w', num_steps=2)
  trainers.train_scl(cfg, progress=False, split_data=dev_data)
  with pytest.raises(ValueError, match=r"tau: 0.2 -> 0.5.*--noresume"):
    trainers.train_scl(dataclasses.replace(cfg, tau=0.5), progress=False, split_data=dev_data)
  # Longer training of the same run is fine; starting over is explicit.
  longer = trainers.train_scl(dataclasses.replace(cfg, num_steps=3), progress=False,
                              split_data=dev_data)
  assert int(longer.step) == 3
  fresh = trainers.train_scl(dataclasses.replace(cfg, tau=0.5), resume=False, progress=False,
                             split_data=dev_data)
  assert int(fresh.step) == 2
  steps = [json.loads(l)['step'] for l in open(tmp_path / 'w' / 'metrics.jsonl')]
  assert steps == [1, 2]


@pytest.mark.parametrize('scheme,groups', [('global', 0), ('local', 2), ('local', 5)])
def test_step_targets_follow_the_rule_after_augmentation(scheme, groups):
  """The step's (jitted) augment_example: targets are the label rule on the augmented
  sequence's category ids; without augmentation, the rule on the sequence as it is."""
  v, length = 6, 12
  tokens, labels, mask = label_rule.random_sequences(np.random.default_rng(5), 128, length, v)
  keys = jax.random.split(jax.random.PRNGKey(3), 128)
  for aug in (augment.AugmentConfig(p_q=0.5, p_v=0.5, p_d=0.3, p_c=0.3), None):
    fn = jax.jit(jax.vmap(lambda k, t, l, m, aug=aug: ttc_step.augment_example(
        k, t, l, m, num_categories=v, label_scheme=scheme, num_groups=groups,
        augment_config=aug)))
    t, targets, m = (np.asarray(x) for x in fn(keys, tokens, labels, mask))
    cats = label_rule.labels_by_origin(t, m, labels)
    if aug is None:
      np.testing.assert_array_equal(cats, labels)
    else:
      assert np.mean(np.any(cats != labels, axis=1)) > 0.5
    np.testing.assert_array_equal(targets, label_rule.targets(cats, v, scheme, groups))


def test_local_scheme_trains_on_category_ids(tiny_synthetic, dev_data, tmp_path):
  """The batch carries category ids (LabelSpace(V)); the step applies the local rule."""
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'w', label_scheme='local', num_groups=3,
                 num_steps=2)
  state, make_batch, step_fn, space = trainers.ttc_setup(cfg, dev_data)
  num_categories = len(labels_lib.training_vocabulary(*dev_data))  # the training names only
  assert space == labels_lib.LabelSpace(3)
  assert step_fn.keywords['num_categories'] == num_categories
  assert (step_fn.keywords['label_scheme'], step_fn.keywords['num_groups']) == ('local', 3)
  labels = make_batch(0)['labels']
  assert np.all(labels[:, 0] == num_categories + 1)  # the query id of LabelSpace(V)
  assert labels.max() == num_categories + 1 and np.any((labels >= 3) & (labels < num_categories))
  final = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                             split_data=dev_data)
  assert int(final.step) == 2
  assert restore.load_classifier(str(tmp_path / 'w')).space == space


def _rename_held_out(split, store, held_out):
  """(split, store) where the held-out topics' clusters carry other names, which the store's
  vocabulary also holds (as extract_features --vocabulary_splits=dev,test builds it)."""
  gt = dict(split.ground_truth)
  added = []
  for t in held_out:
    names = {c: f'unseen {t} {c}' for c in gt[t].cluster_names}
    relevance = {p: 1 - r if r in (0, 1) and p not in gt[t].clusters else r
                 for p, r in gt[t].relevance.items()}
    gt[t] = dataclasses.replace(gt[t], cluster_names=names, relevance=relevance)
    added += names.values()
  old = dict(zip(map(str, store.category_names), np.asarray(store.categories)))
  names = sorted(set(old) | set(added))
  rng = np.random.default_rng(7)
  unit = lambda v: v / np.linalg.norm(v)
  cats = np.stack([old[n] if n in old else unit(rng.normal(size=store.dim)) for n in names])
  return (dataclasses.replace(split, ground_truth=gt),
          dataclasses.replace(store, categories=cats.astype(np.float32),
                              category_names=np.asarray(names)))


@pytest.mark.slow
def test_held_out_topics_never_reach_training(tiny_synthetic, dev_data, tmp_path):
  """g (SCL, bank included), phi (both label schemes), the baselines' dev tuning and the run
  files of the held-out topics are the same whatever the held-out topics' cluster names and
  relevance (issue 12.2)."""
  test_data = data.load('synthetic', 'test', tiny_synthetic)
  merged = folds.merge([dev_data, test_data])
  held_out = test_data[0].topic_numbers
  train_topics = dev_data[0].topic_numbers
  versions = {'same': merged, 'renamed': _rename_held_out(*merged, held_out)}
  assert (list(versions['same'][1].category_names)
          != list(versions['renamed'][1].category_names))
  one = jax.local_devices()[:1]
  trained, choices, run_files = {}, {}, {}
  for name, (split, store) in versions.items():
    train = folds.subset(split, store, train_topics, 'train')
    scl_cfg = _scl_cfg(tiny_synthetic, tmp_path / name / 'scl', num_steps=3)
    out = [trainers.train_scl(scl_cfg, devices=one, progress=False, split_data=train)]
    for scheme in ('global', 'local'):
      cfg = _ttc_cfg(tiny_synthetic, tmp_path / name / scheme, num_steps=2, label_scheme=scheme,
                     num_groups=4, scl_checkpoint=scl_cfg.workdir)
      out.append(trainers.train_ttc(cfg, devices=one, progress=False, split_data=train))
    trained[name] = (train, out)
    held = folds.subset(split, store, held_out, 'held')
    runs = {}
    for method in evaluation.GRIDS:  # tuned on the training topics, run on the held-out ones
      best, tuning = evaluation.tune(method, *train, 'pool', evaluation.MethodParams())
      choices.setdefault(method, []).append((dataclasses.asdict(best), tuning))
      runs[method] = evaluation.rank(method, *held, 'pool', best)
    for scheme in ('global', 'local'):
      runs[f'colt-{scheme}'] = evaluation.rank_colt(*held, 'pool', evaluation.MethodParams(
          scl_checkpoint=scl_cfg.workdir, ttc_checkpoint=str(tmp_path / name / scheme)))
    for run_name, run in runs.items():
      path = tmp_path / name / 'runs' / f'{run_name}.txt'
      path.parent.mkdir(exist_ok=True)
      runfile.write_run(path, run, run_name, result_sets.allowed_ids(held[0], 'pool'),
                        held[0].topic_numbers)
      run_files.setdefault(run_name, []).append(path.read_bytes())
  for a, b in zip(trained['same'][1], trained['renamed'][1]):
    leaves_a = jax.tree_util.tree_leaves_with_path((a.params, a.bank))
    leaves_b = jax.tree_util.tree_leaves((b.params, b.bank))
    assert len(leaves_a) == len(leaves_b)
    # Exact: the held-out topics' names and relevance are no input to any computation, so
    # both versions run the same programs on the same inputs in this process (deterministic
    # on every machine); anything that leaked in would change them.
    for (path, x), y in zip(leaves_a, leaves_b):
      assert np.shape(x) == np.shape(y), jax.tree_util.keystr(path)
      assert np.array_equal(np.asarray(x), np.asarray(y)), jax.tree_util.keystr(path)
  for method, (a, b) in choices.items():  # tuning and run files: the same, exactly (above)
    assert a == b, method
  for run_name, (a, b) in run_files.items():
    assert a and a == b, run_name
  for name, (train, out) in trained.items():
    vocab = labels_lib.training_vocabulary(*train)
    assert not any(n.startswith('unseen') for n in vocab.names)
    assert len(vocab) < len(train[1].category_names)  # the store holds unseen names too
    assert out[0].bank.shape[0] == len(vocab)
    phi = restore.load_classifier(str(tmp_path / name / 'global'))
    assert phi.category_names == vocab.names and phi.space.num_categories == len(vocab)
    names = retriever.Retriever.from_checkpoints(None, str(tmp_path / name / 'global'))
    assert names.category_names == vocab.names
    local = retriever.Retriever.from_checkpoints(None, str(tmp_path / name / 'local'))
    assert local.category_names == tuple(f'group {i}' for i in range(4))


def test_all_names_ablation_uses_every_store_name(tiny_synthetic, dev_data, tmp_path):
  """vocabulary='all' (the old behaviour): the bank and global labels span the store's names."""
  split, store = dev_data
  assert len(labels_lib.training_vocabulary(split, store)) < len(store.category_names)
  state, _, _ = trainers.scl_setup(
      _scl_cfg(tiny_synthetic, tmp_path / 'scl', vocabulary='all'), dev_data)
  np.testing.assert_allclose(state.bank, np.asarray(store.categories), atol=1e-6)
  *_, space = trainers.ttc_setup(
      _ttc_cfg(tiny_synthetic, tmp_path / 'ttc', vocabulary='all'), dev_data)
  assert space == labels_lib.LabelSpace(len(store.category_names))
  with pytest.raises(configs.ConfigError, match='--vocabulary'):
    _ttc_cfg(tiny_synthetic, tmp_path / 'ttc', vocabulary='test')


def test_held_out_f1_at_each_checkpoint_goes_to_metrics_and_tensorboard(tiny_synthetic,
                                                                        dev_data, tmp_path):
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'phi')  # 4 steps, checkpoints at 2 and 4
  test = data.load('synthetic', 'test', tiny_synthetic)
  scorer = evaluation.checkpoint_scorer(cfg, *test)
  trainers.train_ttc(cfg, progress=False, split_data=dev_data, on_checkpoint=scorer)
  lines = [json.loads(l) for l in open(tmp_path / 'phi' / 'metrics.jsonl')]
  scored = [l for l in lines if 'test/F1@20' in l]
  assert [l['step'] for l in scored] == [2, 4]
  for line in scored:  # what evaluate.py gives for that checkpoint
    colt = retriever.Retriever.from_checkpoints('', cfg.workdir, ttc_step=line['step'])
    expected = evaluation.score(test[0], evaluation.run_retriever(colt, *test, 'pool'))
    assert line['test/F1@20'] == pytest.approx(expected.mean['F1@20'])
    assert line['test/P@20'] == pytest.approx(expected.mean['P@20'])
  events = _tensorboard_scalars(tmp_path / 'phi' / 'tensorboard')
  assert [s for s, _ in events['test/F1_20']] == [2, 4]  # TensorBoard tags have no '@'
  assert [s for s, _ in events['loss']] == [1, 2, 3, 4]


# ----------------------------------------------------------------------------- checkpoint faults


def _saved_steps(directory, steps=(1, 2, 3)):
  """A `Checkpointer` folder with a small state saved at `steps` (no training)."""
  ckpt = loop.Checkpointer(str(directory))
  for s in steps:
    ckpt.save(s, {'w': np.full(64, s, np.float32), 'step': np.array(s, np.int32)}, {'beta': 0.5})
  ckpt.close()
  return str(directory)


def _data_file(step_dir):
  return sorted((step_dir / 'state' / 'd').iterdir())[0]


def _truncate(path):
  raw = path.read_bytes()
  path.write_bytes(raw[:len(raw) // 2])


def test_unreadable_checkpoints_name_the_folder_and_the_file(tmp_path):
  directory = tmp_path / 'checkpoints'
  _saved_steps(directory, steps=(1,))
  step = directory / '1'
  fresh = tmp_path / 'fresh'
  shutil.copytree(directory, fresh)
  _truncate(_data_file(step))
  with pytest.raises(InputError, match=r'checkpoints: the checkpoint of step 1 cannot be '
                     r'read \(state/d/\w+ is truncated\)'):
    loop.restore_checkpoint(str(directory))
  _data_file(step).unlink()
  with pytest.raises(InputError, match=r'state/d/\w+ is missing'):
    loop.restore_checkpoint(str(directory))
  shutil.rmtree(directory)
  shutil.copytree(fresh, directory)
  _truncate(step / 'state' / '_METADATA')
  with pytest.raises(InputError, match=r'state/_METADATA is truncated or malformed'):
    loop.restore_checkpoint(str(directory))
  (step / 'config' / 'metadata').write_text('')
  shutil.copy(fresh / '1' / 'state' / '_METADATA', step / 'state' / '_METADATA')
  with pytest.raises(InputError, match=r'config/metadata is truncated or malformed'):
    restore.load_reencoder(str(directory))


def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path):
  directory = tmp_path / 'checkpoints'
  _saved_steps(directory)
  _truncate(_data_file(directory / '3'))
  template = {'w': np.zeros(64, np.float32), 'step': np.array(0, np.int32)}
  ckpt = loop.Checkpointer(str(directory))
  state, damaged = ckpt.restore_intact(template)
  assert int(state['step']) == 2 and state['w'][0] == 2
  assert [(s, w) for s, _, w in damaged] == [(3, '3.damaged')]
  assert 'is truncated' in damaged[0][1]
  assert ckpt.latest_step() == 2 and sorted(os.listdir(directory)) == ['1', '2', '3.damaged']
  ckpt.save(3, state, {})  # the step is saved again, next to the damaged one
  ckpt.close()
  for s in ('1', '2', '3'):
    _truncate(_data_file(directory / s))
  ckpt = loop.Checkpointer(str(directory))
  with pytest.raises(InputError, match=r'no intact checkpoint to resume from \(step 3: .*'
                     r'step 2: .*step 1: .*--noresume'):
    ckpt.restore_intact(template)
  assert sorted(os.listdir(directory)) == ['1', '2', '3', '3.damaged']  # nothing moved


def test_a_failed_save_stops_training_at_that_step(tiny_synthetic, dev_data, tmp_path,
                                                   monkeypatch):
  import orbax.checkpoint as orbax_checkpoint  # pylint: disable=g-import-not-at-top
  original = orbax_checkpoint.CheckpointManager.save
  calls = []

  def save(self, step, *args, **kwargs):
    calls.append(step)
    if step == 2:
      raise PermissionError(errno.EACCES, 'Permission denied', str(tmp_path / 'x'))
    return original(self, step, *args, **kwargs)

  monkeypatch.setattr(orbax_checkpoint.CheckpointManager, 'save', save)
  cfg = _scl_cfg(tiny_synthetic, tmp_path / 'w', num_steps=6, checkpoint_every=1)
  with pytest.raises(loop.CheckpointWriteError,
                     match=r'checkpoints: cannot write the checkpoint of step 2 \(Permission '
                     r'denied: .*x\); training stopped, the last good checkpoint is step 1'):
    trainers.train_scl(cfg, progress=False, split_data=dev_data)
  assert calls == [1, 2]
  assert [json.loads(l)['step'] for l in open(tmp_path / 'w' / 'metrics.jsonl')] == [1, 2]
  assert sorted(os.listdir(tmp_path / 'w' / 'checkpoints')) == ['1']
  assert int(loop.restore_checkpoint(str(tmp_path / 'w'))[0]['step']) == 1


def test_only_write_faults_of_a_save_are_bad_input(tmp_path, monkeypatch):
  ckpt = loop.Checkpointer(str(tmp_path / 'checkpoints'))
  for error, expected in [
      (ValueError('RESOURCE_EXHAUSTED: Failed writing: "f": No space left on device '
                  "[os_error_code='28']"), diskspace.DiskFullError),
      (OSError(errno.ENOSPC, 'No space left on device'), diskspace.DiskFullError),
      (OSError(errno.EROFS, 'Read-only file system'), loop.CheckpointWriteError),
      (ValueError('a bug'), ValueError)]:
    monkeypatch.setattr(ckpt.manager, 'save', lambda *a, error=error, **k: _raise(error))
    with pytest.raises(expected) as info:
      ckpt.save(1, {'w': np.zeros(2)}, {})
    assert info.type is expected
    if expected is diskspace.DiskFullError:  # the step's folder and the free space
      assert str(info.value).startswith(
          f'no space left on device writing {tmp_path / "checkpoints" / "1"} (')
    elif expected is loop.CheckpointWriteError:
      assert 'Read-only file system' in str(info.value)
    if expected is not ValueError:
      assert 'no checkpoint was saved before' in str(info.value)
  ckpt.close()


def _raise(error):
  raise error


def test_run_identity_ignores_the_workdir_and_paths_inside_it(tmp_path):
  old = tmp_path / 'a' / 'run'
  old.mkdir(parents=True)
  saved = dict(workdir=str(old), features_dir=str(old / 'feats'), data_dir='/data', tau=0.2,
               num_steps=4)
  (old / loop.CONFIG_FILE).write_text(json.dumps(saved))
  new = tmp_path / 'b' / 'run'
  shutil.copytree(old, new)
  moved = dict(saved, workdir=str(new), features_dir=str(new / 'feats'), num_steps=8)
  loop.check_resumable(str(new), moved)  # a moved (or copied) workdir is the same run
  assert loop.run_identity(saved) == loop.run_identity(moved) == dict(
      features_dir='<workdir>/feats', data_dir='/data', tau=0.2)
  with pytest.raises(InputError, match=r'features_dir: .* -> .*other.*--noresume'):
    loop.check_resumable(str(new), dict(moved, features_dir=str(tmp_path / 'other')))
  with pytest.raises(InputError, match=r'tau: 0.2 -> 0.5'):
    loop.check_resumable(str(new), dict(moved, tau=0.5))
  (new / loop.CONFIG_FILE).write_text('{"tau": ')
  with pytest.raises(InputError, match=r'config.json: cannot read the saved configuration '
                     r'\(malformed JSON'):
    loop.check_resumable(str(new), moved)


# ----------------------------------------------------------- colt-pairs: phi's extra heads

HEAD_FIELDS = ('class_weight', 'relevance_weight', 'pair_weight', 'pair_dim')
# Left out of saved configs at their defaults.
NEW_FIELDS = HEAD_FIELDS + ('view_tokens', 'relational_tokens', 'appearance_tokens',
                            'appearance_dim')


def _numpy_head_losses(out, targets, mask, weights):
  """head_losses in NumPy: mean CE over valid tokens, mean BCE over image tokens, and the
  class-balanced mean BCE over relevant pairs (half positives, half negatives)."""
  logits = np.asarray(out['class'], np.float64)
  logp = logits - logits.max(-1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  cls = np.asarray(targets['class'])
  use = np.asarray(mask) & (cls >= 0)
  ce = -np.take_along_axis(logp, np.maximum(cls, 0)[..., None], -1)[..., 0][use].mean()

  def bce(z, y):
    z = np.asarray(z, np.float64)
    return np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))

  w_rel = np.asarray(targets['relevance_weights'])
  rel = bce(out['relevance'], np.asarray(targets['relevant']))[w_rel].mean()
  w_pair, same = np.asarray(targets['pair_weights']), np.asarray(targets['same'])
  pair_bce = bce(out['pair'], same)
  pair = 0.5 * (pair_bce[w_pair & same].mean() + pair_bce[w_pair & ~same].mean())
  total = weights[0] * ce + weights[1] * rel + weights[2] * pair
  return total, {'class_loss': ce, 'relevance_loss': rel, 'pair_loss': pair}


def test_head_losses_match_numpy():
  v, length, batch = 5, 10, 6
  rng = np.random.default_rng(8)
  tokens, labels, mask = label_rule.random_sequences(rng, batch, length, v)
  _, _, targets = jax.vmap(lambda t, l, m: heads_step.augment_example_targets(
      jax.random.PRNGKey(0), t, l, m, num_categories=v))(tokens, labels, mask)
  out = {'class': rng.normal(size=(batch, length, v + 2)).astype(np.float32),
         'relevance': rng.normal(size=(batch, length)).astype(np.float32) * 3}
  pair = rng.normal(size=(batch, length, length)).astype(np.float32) * 3
  out['pair'] = (pair + np.swapaxes(pair, 1, 2)) / 2
  counts = heads_step.head_counts(targets, mask)
  for weights in ((1.0, 1.0, 1.0), (0.0, 2.0, 0.5), (0.3, 0.0, 1.0)):
    loss, terms = jax.jit(lambda o, t, m, c, w=weights: heads_step.head_losses(
        o, t, m, c, class_weight=w[0], relevance_weight=w[1], pair_weight=w[2]))(
            out, targets, mask, counts)
    want, want_terms = _numpy_head_losses(out, targets, mask, weights)
    assert float(loss) == pytest.approx(want, rel=1e-5)
    for name, value in terms.items():
      assert float(value) == pytest.approx(want_terms[name], rel=1e-5), name
    assert ('relevance_loss' in terms) == bool(weights[1])
    assert ('pair_loss' in terms) == bool(weights[2])


@pytest.mark.slow
def test_heads_train_under_pmap_as_on_one_device_and_restore(tiny_synthetic, dev_data,
                                                              tmp_path):
  """The colt-pairs step (relevance + pair heads, class head too) on 4 devices equals 1 device:
  per-term counts are summed over devices before dividing. The checkpoint restores phi with
  its heads and saves the new fields."""
  assert jax.local_device_count() == 4, 'conftest sets 4 host devices'
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'one', num_steps=2, dropout=0.1,
                 relevance_weight=1.0, pair_weight=0.5, class_weight=0.5, pair_dim=8)
  one = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                           split_data=dev_data)
  four = trainers.train_ttc(dataclasses.replace(cfg, workdir=str(tmp_path / 'four')),
                            devices=jax.local_devices(), progress=False, split_data=dev_data)
  assert {'relevance_head', 'pair_head'} <= set(one.params)
  _close(one.params, four.params, 2e-5, skip=("['key']['bias']",))
  log = [json.loads(l) for l in open(tmp_path / 'one' / 'metrics.jsonl')]
  log4 = [json.loads(l) for l in open(tmp_path / 'four' / 'metrics.jsonl')]
  for name in ('loss', 'class_loss', 'relevance_loss', 'pair_loss', 'relevance_accuracy',
               'pair_recall', 'pair_specificity'):
    np.testing.assert_allclose([r[name] for r in log], [r[name] for r in log4], rtol=1e-5,
                               err_msg=name)
  for r in log:
    assert r['loss'] == pytest.approx(0.5 * r['class_loss'] + r['relevance_loss'] +
                                      0.5 * r['pair_loss'], rel=1e-5)
  saved = json.load(open(tmp_path / 'one' / 'config.json'))
  assert {k: saved[k] for k in HEAD_FIELDS} == {'class_weight': 0.5, 'relevance_weight': 1.0,
                                                'pair_weight': 0.5, 'pair_dim': 8}
  phi = restore.load_classifier(str(tmp_path / 'one'))
  assert phi.config == cfg and phi.module.relevance_head and phi.module.pair_head
  _close(phi.params, one.params, 0)


def test_old_style_checkpoints_restore_and_resume(tiny_synthetic, dev_data, tmp_path):
  """The paper's configuration saves exactly the config saved before the heads existed (no
  head field), so its checkpoints restore as the paper's phi (the missing fields default),
  its runs resume, its parameters hold no head and its step is Eq. 5's."""
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'old', num_steps=1)
  _, _, step_fn, space = trainers.ttc_setup(cfg, dev_data)
  assert 'relevance_weight' not in step_fn.keywords  # Eq. 5's step, exactly
  one = jax.local_devices()[:1]
  state = trainers.train_ttc(cfg, devices=one, progress=False, split_data=dev_data)
  assert not {'relevance_head', 'pair_head'} & set(state.params)
  old = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NEW_FIELDS}
  assert configs.saved_dict(cfg) == old
  saved = json.load(open(tmp_path / 'old' / 'config.json'))
  assert not set(HEAD_FIELDS) & set(saved)
  _, raw = loop.restore_checkpoint(str(tmp_path / 'old'))
  assert raw == dict(old, encoder='synthetic', num_categories=space.num_categories,
                    category_names=raw['category_names'], method='colt-pairs')
  phi = restore.load_classifier(str(tmp_path / 'old'))
  assert phi.config == cfg and not phi.module.has_heads
  _close(phi.params, state.params, 0)
  resumed = trainers.train_ttc(dataclasses.replace(cfg, num_steps=2), devices=one,
                               progress=False, split_data=dev_data)
  assert int(resumed.step) == 2
  with pytest.raises(configs.ConfigError, match='--class_weight'):
    _ttc_cfg(tiny_synthetic, tmp_path / 'x', class_weight=0.0)
  with pytest.raises(configs.ConfigError, match='--class_weight'):
    _ttc_cfg(tiny_synthetic, tmp_path / 'x', class_weight=2.0)


def test_a_saved_config_names_its_method_and_a_run_resumes_under_it_alone(
    tiny_synthetic, dev_data, tmp_path):
  """A TTC run records its method (`method_registry`): the paper's TTCConfig saves 'colt' and
  restores as the paper's phi; colt-pairs' class saves 'colt-pairs'. The method is part of a
  run's identity: a paper run does not continue as colt-pairs', even at its defaults."""
  paper_fields = {f.name for f in dataclasses.fields(configs.TTCConfig)}
  paper = configs.TTCConfig(**{k: v for k, v in dataclasses.asdict(
      _ttc_cfg(tiny_synthetic, tmp_path / 'paper', num_steps=1)).items() if k in paper_fields})
  pairs = _ttc_cfg(tiny_synthetic, tmp_path / 'paper', num_steps=2)
  one = jax.local_devices()[:1]
  first = trainers.train_ttc(paper, devices=one, progress=False, split_data=dev_data)
  assert int(first.step) == 1
  assert json.load(open(tmp_path / 'paper' / 'config.json'))['method'] == 'colt'
  assert loop.restore_checkpoint(paper.workdir)[1]['method'] == 'colt'
  phi = restore.load_classifier(paper.workdir)
  assert type(phi.config) is configs.TTCConfig and phi.config == paper
  assert type(phi.module) is TokenClassifier
  with pytest.raises(InputError, match=r"method: 'colt' -> 'colt-pairs'"):
    trainers.train_ttc(pairs, devices=one, progress=False, split_data=dev_data)
  resumed = trainers.train_ttc(dataclasses.replace(paper, num_steps=2), devices=one,
                               progress=False, split_data=dev_data)
  assert int(resumed.step) == 2


def _with_parts(split_data, parts):
  """`split_data` whose store says its rows are the view parts `parts` ([[name, size]])."""
  split, store = split_data
  meta = dict(store.meta, views={'parts': [list(p) for p in parts]})
  return split, dataclasses.replace(store, meta=meta)


@pytest.mark.slow
def test_view_tokens_train_save_restore_and_refuse_other_views(tiny_synthetic, dev_data,
                                                               tmp_path):
  """--view_tokens: phi gets a projection per view of the store, saves the views with its
  config, restores them, and a store of other views is refused with one line naming both."""
  dim = dev_data[1].dim
  parts = [['text', dim - dim // 2], ['CM', dim // 4], ['user', dim // 2 - dim // 4]]
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'vt', num_steps=2, relevance_weight=1.0,
                 pair_weight=1.0, view_tokens=True)
  state = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                             split_data=_with_parts(dev_data, parts))
  assert {'part_0_projection', 'part_2_norm'} <= set(state.params)
  assert 'cosine_hidden' in state.params['pair_head']
  saved = json.load(open(tmp_path / 'vt' / 'config.json'))
  assert saved['token_parts'] == parts and saved['view_tokens'] is True
  phi = restore.load_classifier(str(tmp_path / 'vt'))
  assert phi.parts == tuple(tuple(p) for p in parts) and phi.feature_dim == dim
  _close(phi.params, state.params, 0)
  colt = PairsRetriever(phi, None, PairsInferenceSettings(selection='coverage'))
  test_data = data.load('synthetic', 'test', tiny_synthetic)
  split, store = _with_parts(test_data, parts)
  run = evaluation.run_retriever(colt, split, store, 'pool')
  assert len(run) == len(split.topics)
  other = [['text', dim - dim // 2], ['CM', dim // 2]]
  with pytest.raises(InputError, match=r'phi reads the views text\(\d+\)\+CM\(\d+\)\+user\(\d+\), '
                     r'the store .*has text\(\d+\)\+CM\(\d+\)$'):
    evaluation.run_retriever(colt, *_with_parts(test_data, other), 'pool')
  # Saved as a model directory, the views travel with phi.
  model = colt.save_pretrained(str(tmp_path / 'model'))
  assert retriever.Retriever.from_pretrained(model).classifier.parts == phi.parts


@pytest.mark.slow
def test_appearance_tokens_project_the_descriptor_parts_and_restore(tiny_synthetic, dev_data,
                                                                    tmp_path):
  """--appearance_tokens: with --relational_tokens, each official descriptor part (not the
  text, user or day) has its own projection; phi restores with them; a store without
  descriptor parts, or the flag without --relational_tokens, is refused in one line."""
  dim = dev_data[1].dim
  parts = [['text', dim - dim // 2], ['CM', dim // 4], ['user', dim // 2 - dim // 4]]
  cfg = _ttc_cfg(tiny_synthetic, tmp_path / 'at', num_steps=2, relevance_weight=1.0,
                 pair_weight=1.0, relational_tokens=True, appearance_tokens=True)
  state = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                             split_data=_with_parts(dev_data, parts))
  assert {'relational_projection', 'part_1_projection', 'part_1_norm'} <= set(state.params)
  assert not {'part_0_projection', 'part_2_projection'} & set(state.params)
  assert json.load(open(tmp_path / 'at' / 'config.json'))['appearance_tokens'] is True
  phi = restore.load_classifier(str(tmp_path / 'at'))
  assert phi.module.appearance_parts == (1,)
  _close(phi.params, state.params, 0)
  no_descriptors = [['text', dim - dim // 2], ['user', dim // 2]]
  with pytest.raises(InputError, match=r'^--appearance_tokens: the feature store has no '
                     r'official descriptor parts \(its parts: text, user\)'):
    trainers.train_ttc(dataclasses.replace(cfg, workdir=str(tmp_path / 'none')),
                       devices=jax.local_devices()[:1], progress=False,
                       split_data=_with_parts(dev_data, no_descriptors))
  with pytest.raises(ConfigError, match='--appearance_tokens adds descriptor parts to '
                     '--relational_tokens, which is off'):
    dataclasses.replace(cfg, relational_tokens=False)
  with pytest.raises(ConfigError, match=r'--appearance_dim \(4\) narrows the parts of '
                     '--appearance_tokens, which is off'):
    dataclasses.replace(cfg, appearance_tokens=False, appearance_dim=4)
  assert modules.classifier_module(dataclasses.replace(cfg, appearance_dim=4), phi.space,
                                   phi.parts).appearance_dim == 4


def test_reencoder_effect_size_and_the_active_initialisation(tmp_path):
  """g's effect size is mean ||beta g(h)|| / ||h|| (0 for the zero-initialised g at step 0);
  --nozero_init starts g active, and the default leaves saved configs as they were."""
  rng = np.random.default_rng(0)
  h = rng.normal(size=(6, 8)).astype(np.float32)
  for zero_init in (True, False):
    cfg = configs.SCLConfig(workdir=str(tmp_path), beta=0.5, zero_init=zero_init)
    module = modules.reencoder_module(cfg)
    params = module.init(jax.random.PRNGKey(0), jnp.asarray(h))['params']
    bundle = restore.ReEncoderBundle(module, params, cfg)
    g = np.asarray(module.apply({'params': params}, h, method='residual'))
    want = np.mean(0.5 * np.linalg.norm(g, axis=1) / np.linalg.norm(h, axis=1))
    assert bundle.relative_change(h) == pytest.approx(want, rel=1e-5)
    assert (bundle.relative_change(h) == 0) == zero_init
  assert 'zero_init' not in configs.saved_dict(configs.SCLConfig(workdir='w'))
  assert configs.saved_dict(configs.SCLConfig(workdir='w', zero_init=False))['zero_init'] is False


def test_reencoder_effect_ranks_the_pool_by_similarity_not_by_flickr_order():
  """The top-k whose change g's effect counts is top-k's (by query similarity): under the
  pool protocol the candidates come in Flickr order, whose prefix no g can change."""
  from colt_jax.inputs.candidates import TopicCandidates  # pylint: disable=g-import-not-at-top
  from colt_jax.train import effect  # pylint: disable=g-import-not-at-top
  query = np.array([1.0, 0.0], np.float32)
  feats = np.array([[0.0, 1.0], [1.0, 0.0], [0.6, 0.8], [0.6, 0.8]], np.float32)
  cands = TopicCandidates(topic=1, photo_ids=('a', 'b', 'c', 'd'),
                          flickr_ranks=np.arange(4.0), query=query, features=feats)
  assert effect._top(cands, 2) == ['b', 'c']  # pylint: disable=protected-access
  flipped = dataclasses.replace(cands, features=feats[::-1].copy())
  assert effect._top(flipped, 2) == ['c', 'a']  # pylint: disable=protected-access


def test_a_resume_drops_a_cut_last_metrics_line_and_names_a_bad_one(tmp_path):
  """metrics.jsonl after a kill mid-append: its last line, cut, is dropped (logged again);
  a bad line before it is named (file:line) instead of an internal error."""
  path = tmp_path / 'metrics.jsonl'
  path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
  loop._truncate_metrics(str(path), 2)  # pylint: disable=protected-access
  assert path.read_text() == '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n'
  path.write_text('{"step": 1}\n{"loss": 1.5}\n{"step": 3}\n')
  with pytest.raises(InputError, match=r'metrics.jsonl:2: not a metrics line \(KeyError'):
    loop._truncate_metrics(str(path), 2)  # pylint: disable=protected-access
  assert path.read_text() == '{"step": 1}\n{"loss": 1.5}\n{"step": 3}\n'  # untouched


@pytest.mark.slow
def test_a_ttc_resume_over_another_g_is_refused(tmp_path, monkeypatch):
  """phi's config records the digest of the g it trains over: resuming after g changed (its
  workdir trained on) is refused in one line instead of training phi half over each, and a
  Retriever over phi and another g warns."""
  scl_cfg = configs.SCLConfig(dataset='synthetic', workdir=str(tmp_path / 'scl'), num_steps=2,
                              checkpoint_every=2, batch_size=4, images_per_query=8)
  ttc_cfg = configs.TTCConfig(dataset='synthetic', workdir=str(tmp_path / 'ttc'), num_steps=2,
                              checkpoint_every=2, batch_size=4, num_images=8,
                              scl_checkpoint=scl_cfg.workdir)
  trainers.train_scl(scl_cfg, progress=False)
  trainers.train_ttc(ttc_cfg, progress=False)
  g = restore.load_reencoder(scl_cfg.workdir)
  with open(os.path.join(ttc_cfg.workdir, 'config.json')) as f:
    assert json.load(f)['g_sha256'] == g.digest
  trainers.train_scl(dataclasses.replace(scl_cfg, num_steps=4), progress=False)
  assert restore.load_reencoder(scl_cfg.workdir).digest != g.digest
  with pytest.raises(InputError, match=r'holds a run with another configuration \(g_sha256: '):
    trainers.train_ttc(dataclasses.replace(ttc_cfg, num_steps=4), progress=False)
  phi = restore.load_classifier(ttc_cfg.workdir)  # still loads, knowing its g
  assert phi.g_sha256 == g.digest
  warned = []
  monkeypatch.setattr(encoder_checks.logging, 'warning', lambda *a: warned.append(a[0] % a[1:]))
  retriever.Retriever(phi, g)
  assert warned == []
  retriever.Retriever(phi, restore.load_reencoder(scl_cfg.workdir))  # the g trained on
  assert len(warned) == 1 and 'was trained over another g than' in warned[0]
