"""CoLT inference (colt_jax/inference/retriever.py, Alg. 2): the one path, batches, model
directories and their saved settings, lists never empty, features of another dimension."""
import dataclasses
import json
import os
import re
import shutil

import jax
import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.util import outputs
from colt_jax.model import postprocess
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inference import retriever
from colt_jax.evaluation import runfile
from colt_jax.inputs import examples as examples_lib
from colt_jax.inputs import labels as labels_lib
from colt_jax.util.errors import InputError
from colt_jax.train import restore
from colt_jax.inference import settings as settings_lib
from colt_jax.inference import cores
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from float_compare import assert_same_result  # pylint: disable=g-bad-import-order


def _assert_same_list(got_ids, want_ids, sim_of, what=''):
  """Two programs' lists for one query: the same photos, in the same order where their
  similarities (`sim_of`: photo id -> similarity to the query) are separated."""
  got_ids, want_ids = list(got_ids), list(want_ids)
  assert_same_ranking(got_ids, [sim_of[p] for p in got_ids], want_ids,
                      [sim_of[p] for p in want_ids], err_msg=what)

def _sims_of(colt, query, feats, ids):
  """photo id -> the similarity of its h^ to the query (what lists are ordered by)."""
  return dict(zip(ids, np.asarray(colt.reencode(feats) @ query, np.float64)))

def _manual(colt, query, feats, ids):
  """Alg. 2 spelled out with the building blocks: h^, sort, phi's argmax, Eq. 6."""
  hat = colt.reencode(feats)
  cands = [candidates_lib.TopicCandidates(0, tuple(ids), None, query, hat)]
  seqs = examples_lib.token_sequences(cands, colt.num_images)
  c = colt.classifier
  logits = c.module.apply({'params': c.params}, seqs.tokens, seqs.mask, deterministic=True)
  labels = np.asarray(cores.labels_from_logits(logits, c.space, 0.0))[:, 1:]
  s = colt.settings
  picks = np.asarray(postprocess.select_per_category_batch(
      labels, seqs.scores, seqs.mask[:, 1:], k=s.k, per_category=s.per_category,
      num_categories=c.space.num_categories, fill_excluded=s.fill_excluded,
      length=s.list_length))[0]
  return [seqs.photo_ids[0][p] for p in picks if p >= 0], labels[0]

def test_search_and_rank_are_alg2(tiny_synthetic, tiny_colt):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store)
  space = colt.classifier.space
  dev_names = labels_lib.training_vocabulary(*data.load('synthetic', 'dev', tiny_synthetic)).names
  assert colt.category_names == colt.classifier.category_names == dev_names
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  for q in np.asarray(store.queries)[:3]:
    hit = colt.search(q)
    assert len(hit.photo_ids) == 50 == len(set(hit.photo_ids))  # N = 64 >= 50
    manual, labels = _manual(colt, q, photos, ids)
    sim_of = _sims_of(colt, q, photos, ids)
    _assert_same_list(hit.photo_ids, manual, sim_of, 'search')
    # Searching the collection = ranking its N most similar photos as a candidate pool.
    sims = colt.reencode(photos) @ q
    top = np.argsort(-sims, kind='stable')[:colt.num_images]
    pooled = colt.rank(q, photos[top], [ids[i] for i in top])
    _assert_same_list(pooled.photo_ids, hit.photo_ids, sim_of, 'rank')
    np.testing.assert_allclose(hit.scores, sims[[ids.index(p) for p in hit.photo_ids]],
                               rtol=1e-5, atol=1e-6)
    # The first k are Eq. 6's: one per category, never irrelevant or query.
    head = hit.categories[:colt.settings.k]
    assert all(0 <= c < space.num_categories for c in head)
    # Global labels: named by the training vocabulary saved with phi (dev's names only).
    assert all(n == colt.classifier.category_names[c]
               for n, c in zip(hit.category_names, hit.categories) if c < space.num_categories)
    short = colt.with_settings(list_length=10).search(q)
    _assert_same_list(short.photo_ids, hit.photo_ids[:10], sim_of, 'list_length 10')
    # phi's label of every token it saw, as `rank` computed them (Eq. 4's argmax here).
    seen = colt.candidate_labels(q, photos[top], [ids[i] for i in top])
    order = np.argsort(-sims[top], kind='stable')
    tokens = [ids[top[i]] for i in order]
    _assert_same_list(seen, tokens, sim_of, 'tokens')  # by similarity, up to ties
    names = colt.category_names + ('irrelevant', 'query')
    assert dict(seen) == dict(zip(tokens, (names[c] for c in labels)))

def test_batches_give_the_same_lists_as_single_queries(tiny_synthetic, tiny_colt):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store)
  queries = np.asarray(store.queries)
  many = colt.search_batch(queries)
  # The same lists up to float32 rounding (a lone query runs padded; batches of other sizes
  # are other programs, whose sums may round differently on another machine): the same
  # photos and categories, in the same order where the scores are separated.
  for i, (q, m) in enumerate(zip(queries, many)):
    one = colt.search(q)
    assert_same_result(dataclasses.asdict(one), dataclasses.asdict(m), err_msg=f'query {i}')
  three = colt.search_batch(queries[:3])  # a batch of another size
  assert len(three) == 3
  for i, (got, want) in enumerate(zip(three, many[:3])):
    assert_same_result(dataclasses.asdict(got), dataclasses.asdict(want), err_msg=f'query {i}')

def test_evaluation_writes_exactly_what_search_and_rank_return(tiny_synthetic, tiny_colt,
                                                               tmp_path):
  scl, ttc = tiny_colt
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  params = evaluation.MethodParams(scl_checkpoint=scl.workdir, ttc_checkpoint=ttc.workdir,
                                   irrelevant_threshold=0.6)
  out = result_sets.run_evaluation(
      dataset='synthetic', split='test', methods=['colt'], protocols_=['pool', 'global'],
      params=params, data_dir=tiny_synthetic, out_dir=str(tmp_path / 'out'),
      log=lambda *_: None)
  colt = evaluation.colt_retriever(params).index(store)
  assert colt.settings.irrelevant_threshold == 0.6
  global_run = runfile.read_run(out['results']['colt (global)']['run_file'])
  pool_run = runfile.read_run(out['results']['colt (pool)']['run_file'])
  pool = {c.topic: c for c in candidates_lib.build_candidates(split, store, 'pool')}
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  for t in split.topic_numbers:
    q = store.query_feature(t)
    # The evaluation's batches and a lone query: the same lists up to ties.
    _assert_same_list([p for p, _ in global_run[t]], colt.search(q).photo_ids,
                      _sims_of(colt, q, photos, ids), f'global {t}')
    c = pool[t]
    _assert_same_list([p for p, _ in pool_run[t]],
                      colt.rank(q, c.features, c.photo_ids).photo_ids,
                      _sims_of(colt, q, np.asarray(c.features), list(c.photo_ids)), f'pool {t}')

def test_model_directory_round_trip(tiny_synthetic, tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  settings = settings_lib.InferenceSettings(k=10, per_category=2, list_length=30,
                                         irrelevant_threshold=0.7, fill_excluded=True)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir, settings)
  model = colt.save_pretrained(str(tmp_path / 'model'))
  loaded = retriever.Retriever.from_pretrained(model)
  assert loaded.settings == settings and loaded.num_images == ttc.num_images
  assert loaded.category_names == colt.category_names
  colt.index(store)
  loaded.index(store)
  # Exact: the same parameters (read back) through the same programs, in this process.
  assert loaded.search_batch(store.queries) == colt.search_batch(store.queries)
  # Without SCL: no g in the directory, and h^ = h.
  plain = retriever.Retriever.from_checkpoints('', ttc.workdir)
  loaded_plain = retriever.Retriever.from_pretrained(plain.save_pretrained(str(tmp_path / 'p')))
  assert loaded_plain.reencoder is None
  assert not os.path.exists(tmp_path / 'p' / 'g')
  # Evaluation through --model gives the same run as through the checkpoints + flags.
  split = data.load_split('synthetic', tiny_synthetic, 'test')
  via_model = evaluation.rank('colt', split, store, 'pool', evaluation.MethodParams(model=model))
  via_flags = evaluation.rank('colt', split, store, 'pool', evaluation.MethodParams(
      scl_checkpoint=scl.workdir, ttc_checkpoint=ttc.workdir, **dataclasses.asdict(settings)))
  assert via_model == via_flags  # the same parameters, settings and programs: exact

def test_settings_saved_beside_phi_travel_with_it(tiny_synthetic, tiny_colt, tmp_path):
  """`save_settings` writes <ttc workdir>/inference.json under the manifest rule;
  from_checkpoints uses it unless given settings; overrides replace single values."""
  scl, ttc = tiny_colt
  work = str(tmp_path / 'ttc')
  shutil.copytree(ttc.workdir, work)  # the session's tiny phi stays without settings
  assert settings_lib.saved_settings(work) is None
  assert retriever.Retriever.from_checkpoints(scl.workdir, work).settings == (
      settings_lib.InferenceSettings())
  chosen = settings_lib.InferenceSettings(k=10, irrelevant_threshold=0.5)
  path = settings_lib.save_settings(work, chosen, 'a test')
  assert path == os.path.join(work, settings_lib.SETTINGS_FILE)
  assert settings_lib.SETTINGS_FILE in outputs.Manifest.load(work).files
  outputs.check_writable_dir(work, 'a training run')  # nothing foreign: training resumes
  assert settings_lib.saved_settings(work) == chosen
  assert retriever.Retriever.from_checkpoints(scl.workdir, work).settings == chosen
  given = settings_lib.InferenceSettings(k=5)
  assert retriever.Retriever.from_checkpoints(scl.workdir, work, given).settings == given
  assert settings_lib.checkpoint_settings(work, {'k': 5}) == dataclasses.replace(chosen, k=5)
  with pytest.raises(InputError, match=r'--per_category.*inference\.json'):
    settings_lib.checkpoint_settings(work, {'per_category': 11})  # > the saved k=10
  # The model directory of these workdirs carries the same settings.
  model = retriever.Retriever.from_checkpoints(scl.workdir, work).save_pretrained(
      str(tmp_path / 'model'))
  assert retriever.Retriever.from_pretrained(model).settings == chosen
  settings_lib.save_settings(work, settings_lib.InferenceSettings())  # its own file: rewritten
  assert settings_lib.saved_settings(work) == settings_lib.InferenceSettings()

def test_bad_saved_settings_are_one_line_errors(tmp_path):
  path = tmp_path / settings_lib.SETTINGS_FILE
  cases = [('{', r'inference\.json:1: malformed JSON'),
           (json.dumps({'format': 'other'}), "format 'other'"),
           (json.dumps({'format': settings_lib.SETTINGS_FORMAT}), "'settings'"),
           (json.dumps({'format': settings_lib.SETTINGS_FORMAT, 'settings': {'k': 0}}),
            r'inference\.json: .*--k'),
           (json.dumps({'format': settings_lib.SETTINGS_FORMAT, 'settings': {'kk': 1}}),
            r'inference\.json: .*unknown fields')]
  for text, message in cases:
    path.write_text(text)
    with pytest.raises(InputError, match=message):
      settings_lib.saved_settings(str(tmp_path))
  # A file of that name colt_jax did not write is refused, never overwritten.
  path.write_text('my notes')
  with pytest.raises(InputError, match='refusing to overwrite'):
    settings_lib.save_settings(str(tmp_path), settings_lib.InferenceSettings())
  assert path.read_text() == 'my notes'

def test_bad_model_directories(tmp_path):
  with pytest.raises(InputError, match='not a CoLT model directory'):
    retriever.Retriever.from_pretrained(str(tmp_path))
  (tmp_path / 'model.json').write_text('{"format": "other"}')
  with pytest.raises(InputError, match='format'):
    retriever.Retriever.from_pretrained(str(tmp_path))
  good = {'format': settings_lib.MODEL_FORMAT, 'g': False, 'phi': True, 'category_names': ['a'],
          'settings': {'k': 10}, 'encoder': None, 'text_encoder': None}
  path = tmp_path / 'model.json'
  path.write_text(json.dumps(good))
  assert settings_lib.read_model_info(str(tmp_path))[1] == settings_lib.InferenceSettings(k=10)
  # Each field of the wrong kind: one line naming the file (before any weights are read).
  cases = [({'settings': None}, 'settings must be an object'),
           ({'settings': {'k': 0}}, r'settings: .*--k'),
           ({'settings': {'kk': 1}}, 'settings: .*unknown fields'),
           ({'category_names': 'abc'}, 'category_names must be a list of distinct names'),
           ({'category_names': ['a', 'a']}, 'category_names must be a list of distinct'),
           ({'category_names': [1]}, 'category_names must be a list of distinct'),
           ({'encoder': 5}, 'encoder must be a name or null, got 5'),
           ({'text_encoder': 'clip'}, "text_encoder must be an object or null, got 'clip'"),
           ({'g': 'yes'}, "g must be true or false, got 'yes'")]
  for change, message in cases:
    path.write_text(json.dumps(dict(good, **change)))
    with pytest.raises(InputError, match=f'model.json: {message}'):
      retriever.Retriever.from_pretrained(str(tmp_path))
  path.write_bytes(b'{"format": "\xff"}')
  with pytest.raises(InputError, match='model.json: cannot be read'):
    retriever.Retriever.from_pretrained(str(tmp_path))

def test_colt_and_its_ablations_evaluate_to_valid_runs(tiny_synthetic, tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  base = evaluation.MethodParams(scl_checkpoint=scl.workdir, ttc_checkpoint=ttc.workdir, k=20)
  for post in evaluation.POSTS:
    for protocol in candidates_lib.PROTOCOLS:
      run = evaluation.rank('colt', split, store, protocol, dataclasses.replace(base, post=post))
      assert set(run) == set(split.topic_numbers)
      if post == 'ttc':  # full lists: 50 photos, or all of a smaller topic's
        assert {t: len(r) for t, r in run.items()} == {
            t: min(evaluation.RUN_LENGTH, len(split.photos[t]) if protocol == 'pool'
                   else ttc.num_images) for t in run}
      path = tmp_path / f'{post}-{protocol}.txt'
      runfile.write_run(path, run, 'x', allowed_ids=result_sets.allowed_ids(split, protocol),
                        topics=split.topic_numbers)
      assert runfile.validate_run(path, split.topic_numbers,
                                  result_sets.allowed_ids(split, protocol)).keys() == run.keys()
  no_scl = evaluation.rank('colt', split, store, 'pool',
                           dataclasses.replace(base, scl_checkpoint='', post='topk'))
  plain = evaluation.rank('topk', split, store, 'pool', base)
  assert no_scl == plain  # the same NumPy top-k over the same candidates: exact

def test_a_list_is_never_empty(tiny_synthetic, tiny_colt):
  """k-long lists without fill: a topic whose every candidate phi calls irrelevant still gets
  its most similar photo (a run file names every topic)."""
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir, settings_lib.InferenceSettings(
      list_length=20, irrelevant_threshold=1e-9))  # nearly every image 'irrelevant'
  colt.index(store)
  for q in np.asarray(store.queries):
    hit = colt.search(q)
    assert len(hit.photo_ids) >= 1
  c = colt.classifier
  assert restore.load_classifier(ttc.workdir).space == c.space

def test_labels_from_logits_drops_only_confidently_irrelevant_tokens():
  space = labels_lib.LabelSpace(3)  # categories 0..2, 3 = irrelevant, 4 = query
  probs = np.array([[[.05, .05, .05, .05, .80],    # query token
                     [.10, .30, .00, .60, .00],    # irrelevant at .6
                     [.05, .05, .05, .85, .00],    # irrelevant at .85
                     [.50, .20, .10, .20, .00]]])  # category 0
  logits = np.log(probs + 1e-12)  # probabilities .1 or more from the thresholds: exact
  argmax = np.argmax(logits, -1)
  np.testing.assert_array_equal(cores.labels_from_logits(logits, space, 0.5), argmax)
  np.testing.assert_array_equal(cores.labels_from_logits(logits, space, 0.7), [[4, 1, 3, 0]])
  np.testing.assert_array_equal(cores.labels_from_logits(logits, space, 1.0), [[4, 1, 0, 0]])

def test_inference_settings_are_checked():
  with pytest.raises(InputError, match='--per_category'):
    settings_lib.InferenceSettings(k=2, per_category=3)
  with pytest.raises(InputError, match='--list_length'):
    settings_lib.InferenceSettings(list_length=51)

def _wider(store, extra=8):
  """`store` with `extra` zero dimensions appended (same ids, another feature dimension)."""
  pad = lambda x: np.concatenate([np.asarray(x), np.zeros((len(x), extra), np.float32)], 1)
  return dataclasses.replace(store, photos=pad(store.photos), queries=pad(store.queries),
                             categories=pad(store.categories))

def test_features_of_another_dimension_are_refused_before_the_model_runs(tiny_synthetic,
                                                                         tiny_colt, tmp_path):
  scl, ttc = tiny_colt
  split, store = data.load('synthetic', 'test', tiny_synthetic)
  wide = _wider(store)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir)
  assert colt.feature_dim == colt.reencoder.feature_dim == store.dim == 16
  # The encoder of the training store, where phi's checkpoint records it (older ones: None).
  assert colt.encoder in (None, 'synthetic')
  f = r'(synthetic )?'
  expected = (rf'{re.escape(ttc.workdir)}: model expects 16-d {f}features, the store '
              rf'{re.escape(store.meta["path"])} has 24-d synthetic features')
  with pytest.raises(InputError, match=expected):
    colt.index(wide)
  with pytest.raises(InputError, match=expected):
    evaluation.run_retriever(colt, split, wide, 'pool')
  with pytest.raises(InputError, match=f'model expects 16-d {f}features, a query has 24-d'):
    colt.index(store).search(wide.queries[0])
  with pytest.raises(InputError, match=f'model expects 16-d {f}features, a candidate photo has '
                     '24-d'):
    colt.rank(store.queries[0], wide.photos[:5], [str(p) for p in store.photo_ids[:5]])
  # g alone (the ablations, phi's training on h^) names g's folder.
  with pytest.raises(InputError, match=rf'{re.escape(scl.workdir)}: model expects 16-d '
                     rf'{f}features, the store .* has 24-d'):
    restore.reencode_store(wide, colt.reencoder)
  # A model directory names itself.
  model = colt.save_pretrained(str(tmp_path / 'model'))
  with pytest.raises(InputError, match=rf'{re.escape(model)}: model expects 16-d'):
    retriever.Retriever.from_pretrained(model).index(wide)
  # g and phi of different dimensions do not make one model.
  g = colt.reencoder
  g24 = dataclasses.replace(g, params=g.module.init(jax.random.PRNGKey(0),
                                                    np.zeros((1, 24)))['params'])
  with pytest.raises(InputError, match=r'takes 24-d features but phi .* reads 16-d'):
    retriever.Retriever(colt.classifier, g24)
