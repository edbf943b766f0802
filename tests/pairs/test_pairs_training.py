"""colt-pairs training (colt_jax/pairs/): phi's extra heads against NumPy, under pmap, restored
and resumed; view and appearance tokens; the re-encoder's effect."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from colt_jax.model.phi import TokenClassifier
from colt_jax.train import configs
from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.inference import retriever
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError
from colt_jax.train import loop
from colt_jax.train import modules
from colt_jax.train import restore
from colt_jax.train import trainers
from colt_jax.pairs import heads_step
from colt_jax.inference import encoder_checks
from colt_jax.pairs.inference.pairs_retriever import PairsRetriever
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
import label_rule  # pylint: disable=g-bad-import-order
from train_configs import ttc_config, assert_trees_close  # pylint: disable=g-bad-import-order


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
  cfg = ttc_config(tiny_synthetic, tmp_path / 'one', num_steps=2, dropout=0.1,
                 relevance_weight=1.0, pair_weight=0.5, class_weight=0.5, pair_dim=8)
  one = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                           split_data=dev_data)
  four = trainers.train_ttc(dataclasses.replace(cfg, workdir=str(tmp_path / 'four')),
                            devices=jax.local_devices(), progress=False, split_data=dev_data)
  assert {'relevance_head', 'pair_head'} <= set(one.params)
  assert_trees_close(one.params, four.params, 2e-5, skip=("['key']['bias']",))
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
  assert_trees_close(phi.params, one.params, 0)

def test_old_style_checkpoints_restore_and_resume(tiny_synthetic, dev_data, tmp_path):
  """The paper's configuration saves exactly the config saved before the heads existed (no
  head field), so its checkpoints restore as the paper's phi (the missing fields default),
  its runs resume, its parameters hold no head and its step is Eq. 5's."""
  cfg = ttc_config(tiny_synthetic, tmp_path / 'old', num_steps=1)
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
  assert_trees_close(phi.params, state.params, 0)
  resumed = trainers.train_ttc(dataclasses.replace(cfg, num_steps=2), devices=one,
                               progress=False, split_data=dev_data)
  assert int(resumed.step) == 2
  with pytest.raises(configs.ConfigError, match='--class_weight'):
    ttc_config(tiny_synthetic, tmp_path / 'x', class_weight=0.0)
  with pytest.raises(configs.ConfigError, match='--class_weight'):
    ttc_config(tiny_synthetic, tmp_path / 'x', class_weight=2.0)

def test_a_saved_config_names_its_method_and_a_run_resumes_under_it_alone(
    tiny_synthetic, dev_data, tmp_path):
  """A TTC run records its method (`method_registry`): the paper's TTCConfig saves 'colt' and
  restores as the paper's phi; colt-pairs' class saves 'colt-pairs'. The method is part of a
  run's identity: a paper run does not continue as colt-pairs', even at its defaults."""
  paper_fields = {f.name for f in dataclasses.fields(configs.TTCConfig)}
  paper = configs.TTCConfig(**{k: v for k, v in dataclasses.asdict(
      ttc_config(tiny_synthetic, tmp_path / 'paper', num_steps=1)).items() if k in paper_fields})
  pairs = ttc_config(tiny_synthetic, tmp_path / 'paper', num_steps=2)
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
  cfg = ttc_config(tiny_synthetic, tmp_path / 'vt', num_steps=2, relevance_weight=1.0,
                 pair_weight=1.0, view_tokens=True)
  state = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                             split_data=_with_parts(dev_data, parts))
  assert {'part_0_projection', 'part_2_norm'} <= set(state.params)
  assert 'cosine_hidden' in state.params['pair_head']
  saved = json.load(open(tmp_path / 'vt' / 'config.json'))
  assert saved['token_parts'] == parts and saved['view_tokens'] is True
  phi = restore.load_classifier(str(tmp_path / 'vt'))
  assert phi.parts == tuple(tuple(p) for p in parts) and phi.feature_dim == dim
  assert_trees_close(phi.params, state.params, 0)
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
  cfg = ttc_config(tiny_synthetic, tmp_path / 'at', num_steps=2, relevance_weight=1.0,
                 pair_weight=1.0, relational_tokens=True, appearance_tokens=True)
  state = trainers.train_ttc(cfg, devices=jax.local_devices()[:1], progress=False,
                             split_data=_with_parts(dev_data, parts))
  assert {'relational_projection', 'part_1_projection', 'part_1_norm'} <= set(state.params)
  assert not {'part_0_projection', 'part_2_projection'} & set(state.params)
  assert json.load(open(tmp_path / 'at' / 'config.json'))['appearance_tokens'] is True
  phi = restore.load_classifier(str(tmp_path / 'at'))
  assert phi.module.appearance_parts == (1,)
  assert_trees_close(phi.params, state.params, 0)
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
