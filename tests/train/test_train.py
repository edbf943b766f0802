"""The train steps and the pmap loop (colt_jax/train/): 4 devices as 1, resume as straight
runs, compile once, checkpoints with their config, held-out topics never reach training."""
import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from colt_jax.model import augment
from colt_jax.train import configs
from colt_jax.data import splits as data
from colt_jax.util import devices
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.data import folds
from colt_jax.inference import retriever
from colt_jax.evaluation import runfile
from colt_jax.inputs import labels as labels_lib
from colt_jax.util.errors import InputError
from colt_jax.train import loop
from colt_jax.train import restore
from colt_jax.train import trainers
from colt_jax.train import ttc_step
from float_compare import assert_close  # pylint: disable=g-bad-import-order
import label_rule  # pylint: disable=g-bad-import-order
from train_configs import scl_config, ttc_config, assert_trees_close  # pylint: disable=g-bad-import-order


def test_four_devices_match_one_device_scl(tiny_synthetic, dev_data, tmp_path):
  assert jax.local_device_count() == 4, 'conftest sets 4 host devices'
  cfg = scl_config(tiny_synthetic, tmp_path / 'one')
  one = trainers.train_scl(cfg, devices=jax.local_devices()[:1], progress=False,
                           split_data=dev_data)
  four = trainers.train_scl(dataclasses.replace(cfg, workdir=str(tmp_path / 'four')),
                            devices=jax.local_devices(), progress=False, split_data=dev_data)
  assert_trees_close(one.params, four.params, 1e-6)
  assert_trees_close(one.bank, four.bank, 1e-5)
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
  cfg = ttc_config(tiny_synthetic, tmp_path / 'one', num_steps=3, dropout=0.1)
  one = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                           split_data=dev_data)
  four = trainers.train_ttc(dataclasses.replace(cfg, workdir=str(tmp_path / 'four')),
                            devices=jax.local_devices(), progress=False, split_data=dev_data)
  # The attention key bias has an exactly-zero gradient (softmax is shift-invariant), so its
  # gradient is pure rounding noise, which Adam's normalisation blows up to lr-sized steps.
  assert_trees_close(one.params, four.params, 2e-5, skip=("['key']['bias']",))
  log = [json.loads(l)['loss'] for l in open(tmp_path / 'one' / 'metrics.jsonl')]
  log4 = [json.loads(l)['loss'] for l in open(tmp_path / 'four' / 'metrics.jsonl')]
  np.testing.assert_allclose(log, log4, rtol=1e-5)

def test_kill_and_resume_equals_uninterrupted(tiny_synthetic, dev_data, tmp_path):
  cfg = scl_config(tiny_synthetic, tmp_path / 'straight', num_steps=6)
  straight = trainers.train_scl(cfg, progress=False, split_data=dev_data)
  broken = dataclasses.replace(cfg, workdir=str(tmp_path / 'broken'))
  # "Killed" after step 5: the last checkpoint is step 4, step 5's work is lost.
  trainers.train_scl(broken, stop_after=5, progress=False, split_data=dev_data)
  assert loop.Checkpointer(str(tmp_path / 'broken' / 'checkpoints')).latest_step() == 4
  resumed = trainers.train_scl(broken, progress=False, split_data=dev_data)
  assert int(resumed.step) == 6
  assert_trees_close(straight.params, resumed.params, 0)
  assert_trees_close(straight.opt_state, resumed.opt_state, 0)
  assert_trees_close(straight.bank, resumed.bank, 0)

def test_ttc_resume_equals_uninterrupted(tiny_synthetic, dev_data, tmp_path):
  cfg = ttc_config(tiny_synthetic, tmp_path / 'straight', num_steps=4)
  straight = trainers.train_ttc(cfg, progress=False, split_data=dev_data)
  broken = dataclasses.replace(cfg, workdir=str(tmp_path / 'broken'))
  trainers.train_ttc(broken, stop_after=3, progress=False, split_data=dev_data)
  resumed = trainers.train_ttc(broken, progress=False, split_data=dev_data)
  assert_trees_close(straight.params, resumed.params, 0)

def test_compiled_init_gives_the_eager_init(tiny_synthetic, dev_data, tmp_path, monkeypatch):
  """The trainers initialise parameters and the optimiser's state as compiled programs: the
  same trees, dtypes and shapes as flax's eager `init` and `TrainState.create` (g, and phi with
  its heads and a position embedding), the same values to float32 rounding (a compiled program
  and op-by-op execution may round differently on another machine) and integers exactly."""
  scl_cfg = scl_config(tiny_synthetic, tmp_path / 'scl')
  ttc_cfg = ttc_config(tiny_synthetic, tmp_path / 'ttc', relevance_weight=1.0, pair_weight=1.0,
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
      ttc_config(tiny_synthetic, tmp_path / 'w'), dev_data)

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
  make, train = ((scl_config, trainers.train_scl) if kind == 'scl'
                 else (ttc_config, trainers.train_ttc))
  first = make(tiny_synthetic, tmp_path / 'a', seed=5)  # other tests' programs: cached
  train(first, progress=False, split_data=dev_data)
  again = dataclasses.replace(first, workdir=str(tmp_path / 'b'), seed=6)
  assert _lowerings(lambda: train(again, progress=False, split_data=dev_data)) == []
  other = dataclasses.replace(first, workdir=str(tmp_path / 'c'), learning_rate=2e-3)
  assert _lowerings(lambda: train(other, progress=False, split_data=dev_data))

def test_checkpoints_carry_config_and_restore(tiny_synthetic, dev_data, tmp_path):
  cfg = scl_config(tiny_synthetic, tmp_path / 'scl', num_steps=2)
  state = trainers.train_scl(cfg, progress=False, split_data=dev_data)
  saved = json.load(open(tmp_path / 'scl' / 'config.json'))
  # the config (fields added later left out at their defaults), the store's encoder and the
  # method (g is the paper's in every method: method_registry)
  assert saved == dict(configs.saved_dict(cfg), encoder='synthetic', method='colt')
  g = restore.load_reencoder(str(tmp_path / 'scl'))
  assert g.config == cfg
  assert_trees_close(g.params, state.params, 0)
  raw_state, raw_cfg = loop.restore_checkpoint(str(tmp_path / 'scl'))
  assert raw_cfg == dict(configs.saved_dict(cfg), encoder='synthetic', method='colt')
  assert int(raw_state['step']) == 2
  assert_trees_close(raw_state['bank'], state.bank, 0)
  with pytest.raises(InputError, match='no such checkpoint folder'):
    loop.restore_checkpoint(str(tmp_path / 'nothing'))

def test_resume_refuses_a_changed_configuration(tiny_synthetic, dev_data, tmp_path):
  cfg = scl_config(tiny_synthetic, tmp_path / 'w', num_steps=2)
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
  cfg = ttc_config(tiny_synthetic, tmp_path / 'w', label_scheme='local', num_groups=3,
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
    scl_cfg = scl_config(tiny_synthetic, tmp_path / name / 'scl', num_steps=3)
    out = [trainers.train_scl(scl_cfg, devices=one, progress=False, split_data=train)]
    for scheme in ('global', 'local'):
      cfg = ttc_config(tiny_synthetic, tmp_path / name / scheme, num_steps=2, label_scheme=scheme,
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
      scl_config(tiny_synthetic, tmp_path / 'scl', vocabulary='all'), dev_data)
  np.testing.assert_allclose(state.bank, np.asarray(store.categories), atol=1e-6)
  *_, space = trainers.ttc_setup(
      ttc_config(tiny_synthetic, tmp_path / 'ttc', vocabulary='all'), dev_data)
  assert space == labels_lib.LabelSpace(len(store.category_names))
  with pytest.raises(configs.ConfigError, match='--vocabulary'):
    ttc_config(tiny_synthetic, tmp_path / 'ttc', vocabulary='test')

def test_held_out_f1_at_each_checkpoint_goes_to_metrics_and_tensorboard(tiny_synthetic,
                                                                        dev_data, tmp_path):
  cfg = ttc_config(tiny_synthetic, tmp_path / 'phi')  # 4 steps, checkpoints at 2 and 4
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
