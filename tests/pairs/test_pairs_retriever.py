"""colt-pairs inference (colt_jax/pairs/inference/): lists from relevance and pairs, coverage,
class-head and cluster selection, blends, relevance mixes, DPP over phi's heads, ensembles."""
import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest

from colt_jax.data import splits as data
from colt_jax.inputs import candidates as candidates_lib
from colt_jax.inference import retriever
from colt_jax.inputs import examples as examples_lib
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError
from colt_jax.train import restore
from colt_jax.pairs import head_selection
from colt_jax.pairs import pairs_phi
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.pairs.inference.pairs_retriever import PairsRetriever
from colt_jax.pairs.inference.pairs_settings import PairsInferenceSettings
from colt_jax.inference import settings as settings_lib
from colt_jax.inference import cores
from colt_jax.pairs import selection as selection_lib
from float_compare import assert_close  # pylint: disable=g-bad-import-order
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order
from float_compare import tolerance  # pylint: disable=g-bad-import-order


# The Retriever's lists come from its jitted programs (one per batch size, search or rank);
# the lists these tests make by hand come from phi applied here and NumPy: programs whose
# float32 sums may round differently on another machine (phi's outputs agree to ~1e-6). Lists
# are compared exactly where their decisions are separated by more than that, and up to ties
# otherwise: photos ranked by similarity may trade places only where their similarities tie
# (`_assert_same_list`), a greedy pick may be any candidate whose gain ties the best one's
# (`_assert_greedy`), a photo's group any earlier pick it shares a cluster with up to a tie
# at p = .5 (`_assert_groups`). phi's labels (Eq. 4's argmax) are compared exactly: a token's
# two best logits are ~1e-3 apart or more, a thousand times what two programs differ by.
TIE = tolerance(np.float32)[1]  # 256 float32 ulps of values of order 1

def _assert_greedy(picks, gains_of, what, tie=TIE):
  """`picks` (token indices, -1 once none is left) are a greedy sequence of `gains_of(chosen)`
  (the gains [n] after the picks `chosen`, -inf where none) up to ties: each pick's gain is
  within `tie` (relative to the best's scale) of the best one left. Where the gains are
  separated by more, that is the reference's sequence exactly."""
  chosen = []
  for t, j in enumerate(picks):
    gains = np.asarray(gains_of(chosen), np.float64)
    gains[chosen] = -np.inf
    best = gains.max()
    if j < 0:
      assert not np.isfinite(best), f'{what}: nothing picked at {t}, {np.argmax(gains)} was left'
      continue
    assert np.isfinite(gains[j]) and gains[j] >= best - tie * max(1.0, abs(best)), (
        f'{what}: pick {t} is {j} (gain {gains[j]!r}), not a tie with {np.argmax(gains)} '
        f'(gain {best!r})')
    chosen.append(j)

def _coverage_gains(r, p, valid, w):
  """gains_of(chosen) of the expected coverage greedy (`_numpy_coverage`), in float64."""
  r, p = np.asarray(r, np.float64), np.asarray(p, np.float64)

  def gains_of(chosen):
    missed = np.prod(1 - r[chosen] * p[:, chosen], axis=1) if chosen else np.ones_like(r)
    return np.where(valid, w * r + (1 - w) * r * missed, -np.inf)
  return gains_of

def _dpp_gains(r, p, theta):
  """gains_of(chosen) of the DPP greedy (`selection.dpp_select`) by determinants, in float64:
  theta log r_i + (1 - theta) log var_i, var_i = det S_{B+i} / det S_B over the basis B of
  the picks whose variance was above eps."""
  eps = selection_lib.DPP_EPS
  n = len(r)
  s = np.where(np.eye(n, dtype=bool), 1.0, (p + p.T) / 2.0).astype(np.float64)
  det = lambda idx: np.linalg.det(s[np.ix_(idx, idx)]) if idx else 1.0
  quality = theta * np.log(np.maximum(np.asarray(r, np.float64), eps))
  basis, seen = [], []

  def variances(basis):
    base = det(basis)
    return np.array([det(basis + [i]) / base for i in range(n)])

  def gains_of(chosen):
    for j in chosen[len(seen):]:  # the picks since the last call join the basis if they add
      if variances(basis)[j] > eps:
        basis.append(j)
      seen.append(j)
    return quality + (1 - theta) * np.log(np.maximum(variances(basis), eps))
  return gains_of

def _assert_cluster_list(got_ids, want_ids, token_ids, r, what):
  """A 'cluster' list against the one made by hand: the same photos in the same order, but
  photos of tied relevance r may trade places (the round-robin orders by r). (Clusters and
  the r > .5 cut are compared exactly: a merge or a cut within rounding of the threshold is
  a far rarer tie.)"""
  r_of = dict(zip(token_ids, np.asarray(r, np.float64)))
  got_ids, want_ids = list(got_ids), list(want_ids)
  assert_same_ranking(got_ids, [r_of[p] for p in got_ids], want_ids, [r_of[p] for p in want_ids],
                      err_msg=what)

def _assert_groups(groups, picks, p, what, tie=TIE):
  """groups[t]: the pick-order index of the first listed photo picks[t] shares a cluster with
  (p > .5), t itself when none, up to ties of p at .5."""
  for t, (g, j) in enumerate(zip(groups, picks)):
    assert 0 <= g <= t, f'{what}: group {g} at {t}'
    assert g == t or p[j, picks[g]] > 0.5 - tie, f'{what}: {t} is not in group {g}'
    for s in range(g):
      assert p[j, picks[s]] <= 0.5 + tie, f'{what}: {t} is in group {s}, not {g}'

@pytest.fixture(scope='module')
def tiny_pairs(tiny_synthetic, tiny_colt, tmp_path_factory):
  """phi with relevance and pair heads (colt-pairs) on tiny_colt's g, 2 steps, N = 64."""
  from colt_jax.train import configs  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_colt
  cfg = PairsTTCConfig(**dict(dataclasses.asdict(ttc), num_steps=2, relevance_weight=1.0,
                              pair_weight=1.0,
                              workdir=str(tmp_path_factory.mktemp('pairs') / 'ttc')))
  assert isinstance(cfg, configs.TTCConfig)
  trainers.train_ttc(cfg, progress=False,
                     split_data=data.load('synthetic', 'dev', tiny_synthetic))
  return scl, cfg

def _numpy_coverage(r, p, valid, w, k):
  """The greedy of expected coverage, transcribed: next = argmax w r_i + (1 - w) r_i m_i with
  m_i = prod over picked j of (1 - r_j p_ij); ties to the lower index; -1 when none is left."""
  r, p = r.astype(np.float32), p.astype(np.float32)
  missed = np.ones_like(r)
  chosen = np.zeros(len(r), bool)
  picks = []
  for _ in range(k):
    gain = np.where(valid & ~chosen, w * r + (1 - w) * r * missed, -np.inf)
    if not np.isfinite(gain.max()):
      picks.append(-1)
      continue
    j = int(np.argmax(gain))
    picks.append(j)
    chosen[j] = True
    missed = missed * (1 - r[j] * p[:, j])
  return picks

def _heads_of(colt, query, feats, ids):
  """(token photo ids, r, p) of phi's heads for one query, computed by hand."""
  hat = colt.reencode(feats)
  seqs = examples_lib.token_sequences(
      [candidates_lib.TopicCandidates(0, tuple(ids), None, query, hat)], colt.num_images)
  c = colt.classifier
  out = c.module.apply({'params': c.params}, seqs.tokens, seqs.mask, deterministic=True,
                       with_heads=True)
  sig = lambda x: 1 / (1 + np.exp(-np.asarray(x, np.float64)))
  n = len(seqs.photo_ids[0])
  return (seqs.photo_ids[0], sig(out['relevance'][0, 1:n + 1]),
          sig(out['pair'][0, 1:n + 1, 1:n + 1]))

def test_coverage_selection_is_the_numpy_greedy(tiny_synthetic, tiny_pairs, tmp_path):
  """Retriever's lists (search and rank) with selection='coverage' are the greedy of expected
  coverage over sigmoid(phi's relevance and pair logits), and each photo's group is the
  pick-order index of the first listed photo it shares a cluster with (p > 0.5)."""
  scl, ttc = tiny_pairs
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  for w in (0.0, 0.5):
    colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir,
                                                PairsInferenceSettings(
                                                    selection='coverage', coverage_weight=w))
    colt.index(store)
    for q in np.asarray(store.queries)[:2]:
      sims = colt.reencode(photos) @ q
      top = np.argsort(-sims, kind='stable')[:colt.num_images]
      token_ids, r, p = _heads_of(colt, q, photos[top], [ids[i] for i in top])
      got_ids, got_r, got_p = colt.pool_heads(q, photos[top], [ids[i] for i in top])
      assert got_ids == tuple(token_ids)  # what the coverage selection reads
      np.testing.assert_allclose(got_r, r, atol=1e-5)
      np.testing.assert_allclose(got_p, p, atol=1e-5)
      picks = _numpy_coverage(r, p, np.ones(len(r), bool), w, 50)
      want = [token_ids[j] for j in picks]
      assert len(set(want)) == 50
      position = {pid: j for j, pid in enumerate(token_ids)}
      gains = _coverage_gains(r, p, np.ones(len(r), bool), w)
      ranked = colt.rank(q, photos[top], [ids[i] for i in top])
      hit = colt.search(q)
      for name, got in (('rank', ranked), ('search', hit)):
        assert len(got.photo_ids) == 50, name
        got_picks = [position[pid] for pid in got.photo_ids]
        _assert_greedy(got_picks, gains, f'{name}, w {w}')  # `want`, up to ties
        _assert_groups(list(got.categories), got_picks, p, f'{name}, w {w}')
        assert got.category_names == tuple(f'group {g}' for g in got.categories)
  # The settings travel with a model directory.
  loaded = retriever.Retriever.from_pretrained(colt.save_pretrained(str(tmp_path / 'm')))
  assert loaded.settings == colt.settings and loaded.classifier.module.pair_head

def test_selection_from_the_class_head_and_by_clusters(tiny_synthetic, tiny_colt, tiny_pairs):
  """The paper's phi (no extra heads) ranks by coverage of its class head's probabilities
  (r = P(some category), p = P(same category | both relevant)); 'cluster' lists are
  selection.cluster_select's over the photos with r > 0.5, then the rest by r."""
  from colt_jax.pairs import selection  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  q = np.asarray(store.queries)[0]
  colt = retriever.Retriever.from_checkpoints(
      scl.workdir, ttc.workdir, PairsInferenceSettings(selection='coverage',
                                                            coverage_weight=0.25))
  hat = colt.reencode(photos)
  seqs = examples_lib.token_sequences(
      [candidates_lib.TopicCandidates(0, tuple(ids), None, q, hat)], colt.num_images)
  c = colt.classifier
  logits = np.asarray(c.module.apply({'params': c.params}, seqs.tokens, seqs.mask),
                      np.float64)[0, 1:]
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  cats = probs[:, :c.space.num_categories]
  r = cats.sum(-1)
  p = np.clip(cats @ cats.T / np.outer(r, r), 0, 1)
  got_r, got_p = head_selection.head_probabilities(
      pairs_phi.head_outputs(c.module, {'params': c.params}, seqs.tokens, seqs.mask), c.space)
  np.testing.assert_allclose(got_r[0], r, atol=1e-5)
  np.testing.assert_allclose(got_p[0], p, atol=1e-4)
  ranked = colt.rank(q, photos, ids)
  assert len(ranked.photo_ids) == 50 == len(set(ranked.photo_ids))
  # Clusters, with phi's heads.
  scl, ttc = tiny_pairs
  colt = retriever.Retriever.from_checkpoints(
      scl.workdir, ttc.workdir, PairsInferenceSettings(selection='cluster'))
  sims = colt.reencode(photos) @ q
  top = np.argsort(-sims, kind='stable')[:colt.num_images]
  token_ids, r, p = _heads_of(colt, q, photos[top], [ids[i] for i in top])
  relevant = r > 0.5
  grouped = selection.cluster_select(r, p, relevant, threshold=0.5, k=50)
  head = [int(i) for i in grouped.indices if i >= 0]
  rest = [int(i) for i in np.flatnonzero(~relevant)[np.argsort(-r[~relevant], kind='stable')]]
  ranked = colt.rank(q, photos[top], [ids[i] for i in top])
  _assert_cluster_list(ranked.photo_ids, [token_ids[i] for i in (head + rest)[:50]], token_ids,
                       r, 'cluster')
  assert list(ranked.categories[:len(head)]) == list(grouped.groups[:len(head)])
  assert all(c == -1 for c in ranked.categories[len(head):])
  assert all(n == 'ungrouped' for n in ranked.category_names[len(head):])
  # Eq. 6 needs a trained class head.
  no_class = dataclasses.replace(
      colt.classifier, config=dataclasses.replace(colt.classifier.config, class_weight=0.0))
  with pytest.raises(InputError, match='class head'):
    PairsRetriever(no_class)
  PairsRetriever(no_class, settings=PairsInferenceSettings(selection='coverage'))

def test_pair_blend_mixes_the_feature_cosine_into_every_path(tiny_synthetic, tiny_pairs):
  """pair_blend b: the selections read b p_ij + (1 - b) max(cos_ij, 0), cos between the
  tokens' features; search and rank list the same photos as clusters of that blend by hand,
  and b = 1 is phi's p exactly."""
  from colt_jax.pairs import selection  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_pairs
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  q = np.asarray(store.queries)[1]
  plain = retriever.Retriever.from_checkpoints(
      scl.workdir, ttc.workdir, PairsInferenceSettings(selection='cluster'))
  sims = plain.reencode(photos) @ q
  top = np.argsort(-sims, kind='stable')[:plain.num_images]
  token_ids, r, p = _heads_of(plain, q, photos[top], [ids[i] for i in top])
  hat = plain.reencode(photos[top])
  unit = hat / np.linalg.norm(hat, axis=1, keepdims=True)
  cos = np.maximum(unit @ unit.T, 0)
  blended = None
  for b in (1.0, 0.3):
    colt = retriever.Retriever.from_checkpoints(
        scl.workdir, ttc.workdir, PairsInferenceSettings(
            selection='cluster', cluster_threshold=0.4, pair_blend=b)).index(store)
    want_p = b * p + (1 - b) * cos
    _, got_r, got_p = colt.pool_heads(q, photos[top], [ids[i] for i in top])
    np.testing.assert_allclose(got_r, r, atol=1e-5)
    np.testing.assert_allclose(got_p, want_p, atol=1e-5)
    relevant = r > 0.5
    grouped = selection.cluster_select(r, want_p, relevant, threshold=0.4, k=50)
    head = [int(i) for i in grouped.indices if i >= 0]
    rest = [int(i) for i in np.flatnonzero(~relevant)[np.argsort(-r[~relevant], kind='stable')]]
    want = [token_ids[i] for i in (head + rest)[:50]]
    _assert_cluster_list(colt.rank(q, photos[top], [ids[i] for i in top]).photo_ids, want,
                         token_ids, r, f'rank, blend {b}')
    _assert_cluster_list(colt.search(q).photo_ids, want, token_ids, r, f'search, blend {b}')
    if b < 1:
      blended = want
  assert not np.allclose(cos, p, atol=0.05)  # the blend reads something phi's p does not
  assert blended is not None
  with pytest.raises(Exception, match='pair_blend'):
    PairsInferenceSettings(pair_blend=1.5)

def test_relevance_mix_reads_a_relevance_model_in_every_path(tiny_synthetic, tiny_pairs,
                                                             tmp_path):
  """relevance_mix a with a relevance model beside phi: the selections read
  (1 - a) r_phi + a r_model (the model over the tokens phi sees); search and rank list the
  clusters of that r by hand; the model travels in a model directory; a mix without a model,
  or with Eq. 6, is refused in one line."""
  from colt_jax.pairs import relevance_model  # pylint: disable=g-import-not-at-top
  from colt_jax.pairs import selection  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_pairs
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  plain = retriever.Retriever.from_checkpoints(
      scl.workdir, ttc.workdir, PairsInferenceSettings(selection='cluster',
                                                            cluster_threshold=0.4))
  dev_split, dev_store = data.load('synthetic', 'dev', tiny_synthetic)
  hat_store = restore.reencode_store(dev_store, plain.reencoder)  # the tokens phi sees
  model = relevance_model.fit_split(dev_split, hat_store, plain.num_images,
                                    relevance_model.RelevanceConfig(max_iter=20))
  q = np.asarray(store.queries)[1]
  top = np.argsort(-(plain.reencode(photos) @ q), kind='stable')[:plain.num_images]
  token_ids, r, p = _heads_of(plain, q, photos[top], [ids[i] for i in top])
  model_r = model.predict(q, plain.reencode(photos[top]))
  assert not np.allclose(model_r, r, atol=0.05)
  for a in (0.0, 0.6):
    colt = plain.with_relevance_model(model, a).index(store)
    want_r = (1 - a) * r + a * model_r
    _, got_r, got_p = colt.pool_heads(q, photos[top], [ids[i] for i in top])
    np.testing.assert_allclose(got_r, want_r, atol=1e-5)
    np.testing.assert_allclose(got_p, p, atol=1e-5)
    relevant = want_r > 0.5
    grouped = selection.cluster_select(want_r, p, relevant, threshold=0.4, k=50)
    head = [int(i) for i in grouped.indices if i >= 0]
    rest = [int(i) for i in np.flatnonzero(~relevant)[np.argsort(-want_r[~relevant],
                                                                 kind='stable')]]
    want = [token_ids[i] for i in (head + rest)[:50]]
    _assert_cluster_list(colt.rank(q, photos[top], [ids[i] for i in top]).photo_ids, want,
                         token_ids, want_r, f'rank, mix {a}')
    _assert_cluster_list(colt.search(q).photo_ids, want, token_ids, want_r, f'search, mix {a}')
  # A batch (padded to the compiled size) lists what each query lists alone: the same photos,
  # in the same order up to ties of r (another program: its sums may round differently).
  queries = np.asarray(store.queries)[:3]
  batch = colt.search_batch(queries)
  assert len(batch) == len(queries)
  for i, (got, query) in enumerate(zip(batch, queries)):
    near = np.argsort(-(colt.reencode(photos) @ query), kind='stable')[:colt.num_images]
    near_ids, near_r, _ = colt.pool_heads(query, photos[near], [ids[j] for j in near])
    _assert_cluster_list(got.photo_ids, colt.search(query).photo_ids, near_ids, near_r,
                         f'query {i}')
  back = retriever.Retriever.from_pretrained(colt.save_pretrained(str(tmp_path / 'model')))
  assert back.relevance_mix == 0.6 and back.relevance_model is not None
  # Exact: the same parameters and relevance model (read back), the same program.
  assert back.rank(q, photos[top], [ids[i] for i in top]).photo_ids == colt.rank(
      q, photos[top], [ids[i] for i in top]).photo_ids
  with pytest.raises(InputError, match=r'relevance_mix 0.5 mixes a relevance model .*: '
                     r'the model has none$'):
    plain.with_relevance_model(None, 0.5)
  with pytest.raises(InputError, match=r'relevance_mix 0.5 .*: not category$'):
    plain.with_settings(selection='category').with_relevance_model(model, 0.5)
  with pytest.raises(InputError, match=r'relevance_mix 1.5 is a share of r, in \[0, 1\]'):
    plain.with_relevance_model(model, 1.5)
  # A relevance model of other views than the store's is refused at index, not at a search.
  import dataclasses  # pylint: disable=g-import-not-at-top
  viewed = dataclasses.replace(model, parts=(('text', store.dim - 1), ('HOG', 1)))
  with pytest.raises(InputError, match=r'its relevance model reads the views '
                     r"\(\('text', \d+\), \('HOG', 1\)\), the store .* has \(\('text'"):
    plain.with_relevance_model(viewed, 0.6).index(store)

def test_dpp_selection_lists_the_greedy_of_phis_heads(tiny_synthetic, tiny_pairs, tmp_path):
  """selection='dpp': search and rank list selection.dpp_select over phi's r and p (theta
  from the settings), groups as the coverage rule's; the settings travel with the model."""
  from colt_jax.pairs import selection  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_pairs
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  q = np.asarray(store.queries)[0]
  lists = []
  for theta in (0.3, 1.0):
    colt = retriever.Retriever.from_checkpoints(
        scl.workdir, ttc.workdir, PairsInferenceSettings(selection='dpp',
                                                              selection_theta=theta)).index(store)
    sims = colt.reencode(photos) @ q
    top = np.argsort(-sims, kind='stable')[:colt.num_images]
    token_ids, r, p = _heads_of(colt, q, photos[top], [ids[i] for i in top])
    picks = selection.dpp_select(r[None], p[None], theta=theta, k=50).indices[0]
    want = [token_ids[j] for j in picks]
    position = {pid: j for j, pid in enumerate(token_ids)}
    if theta == 1.0:  # by relevance alone
      by_r = np.argsort(-r, kind='stable')[:50]
      assert_same_ranking(want, r[picks], [token_ids[j] for j in by_r], r[by_r],
                          err_msg='by relevance')
    hit = colt.search(q)
    ranked = colt.rank(q, photos[top], [ids[i] for i in top])
    for name, got in (('rank', ranked), ('search', hit)):
      _assert_greedy([position[pid] for pid in got.photo_ids], _dpp_gains(r, p, theta),
                     f'{name}, theta {theta}')  # `want`, up to ties
    _assert_groups(list(hit.categories), [position[pid] for pid in hit.photo_ids], p,
                   f'search, theta {theta}')
    lists.append(want)
  assert lists[0] != lists[1]
  loaded = retriever.Retriever.from_pretrained(colt.save_pretrained(str(tmp_path / 'm')))
  assert loaded.settings.selection == 'dpp' and loaded.settings.selection_theta == 1.0

@pytest.mark.slow
def test_an_ensemble_averages_its_members_heads(tiny_synthetic, tiny_pairs, tmp_path):
  """Comma-separated phi workdirs are one ensemble: r and p are the means of its members'
  (computed member by member here), search and rank list by them, the model directory keeps
  it whole; Eq. 6 and a member of another configuration are refused in one line."""
  from colt_jax.train import configs  # pylint: disable=g-import-not-at-top
  from colt_jax.train import trainers  # pylint: disable=g-import-not-at-top
  scl, ttc = tiny_pairs
  other = dataclasses.replace(ttc, workdir=str(tmp_path / 'seed1'), seed=1)
  trainers.train_ttc(other, progress=False,
                     split_data=data.load('synthetic', 'dev', tiny_synthetic))
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  settings = PairsInferenceSettings(selection='coverage', coverage_weight=0.25)
  members = [retriever.Retriever.from_checkpoints(scl.workdir, w, settings)
             for w in (ttc.workdir, other.workdir)]
  both = retriever.Retriever.from_checkpoints(scl.workdir, f'{ttc.workdir},{other.workdir}',
                                              settings).index(store)
  assert both.classifier.members == 2
  q = np.asarray(store.queries)[0]
  sims = both.reencode(photos) @ q
  top = np.argsort(-sims, kind='stable')[:both.num_images]
  heads = [_heads_of(m, q, photos[top], [ids[i] for i in top]) for m in members]
  assert not np.allclose(heads[0][2], heads[1][2], atol=1e-3)  # two different phi
  r = (heads[0][1] + heads[1][1]) / 2
  p = (heads[0][2] + heads[1][2]) / 2
  token_ids, got_r, got_p = both.pool_heads(q, photos[top], [ids[i] for i in top])
  np.testing.assert_allclose(got_r, r, atol=1e-5)
  np.testing.assert_allclose(got_p, p, atol=1e-5)
  want = [token_ids[j] for j in _numpy_coverage(r, p, np.ones(len(r), bool), 0.25, 50)]
  position = {pid: j for j, pid in enumerate(token_ids)}
  gains = _coverage_gains(r, p, np.ones(len(r), bool), 0.25)
  searched = both.search(q)
  for name, got in (('rank', both.rank(q, photos[top], [ids[i] for i in top])),
                    ('search', searched)):
    assert len(got.photo_ids) == len(want), name
    _assert_greedy([position[pid] for pid in got.photo_ids], gains, name)  # `want`, up to ties
  loaded = retriever.Retriever.from_pretrained(both.save_pretrained(str(tmp_path / 'model')))
  assert loaded.classifier.members == 2
  # Exact: the same parameters (read back) through the same program, in this process.
  assert loaded.index(store).search(q) == searched
  with pytest.raises(InputError, match='ensemble of 2 phi.*--selection=coverage, cluster or dpp'):
    retriever.Retriever.from_checkpoints(scl.workdir, f'{ttc.workdir},{other.workdir}',
                                         PairsInferenceSettings())
  wider = dataclasses.replace(ttc, workdir=str(tmp_path / 'wider'), model_dim=ttc.model_dim * 2)
  assert isinstance(wider, configs.TTCConfig)
  trainers.train_ttc(wider, progress=False,
                     split_data=data.load('synthetic', 'dev', tiny_synthetic))
  with pytest.raises(InputError, match=r'wider: not a member of one ensemble .* model_dim'):
    retriever.Retriever.from_checkpoints(scl.workdir, f'{ttc.workdir},{wider.workdir}',
                                         settings)

def test_every_threshold_shares_one_compiled_program(tiny_synthetic, tiny_colt):
  """The irrelevant_threshold is an argument of the compiled calls, not part of their static
  settings: scoring a model at several thresholds (the choices do) compiles once per path
  (labels_from_logits' own test checks what each threshold labels)."""
  scl, ttc = tiny_colt
  _, store = data.load('synthetic', 'test', tiny_synthetic)
  colt = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).index(store)
  photos, ids = np.asarray(store.photos), [str(p) for p in store.photo_ids]
  q = np.asarray(store.queries)[:2]
  sizes = []
  for threshold in (0.0, 0.3, 0.9):
    tuned = colt.with_settings(irrelevant_threshold=threshold)
    tuned.search_batch(q)
    tuned.rank_batch(q, [photos, photos], [ids, ids])
    sizes.append((cores.search_and_rank._cache_size(),  # pylint: disable=protected-access
                  cores.rank_tokens._cache_size()))  # pylint: disable=protected-access
  assert sizes[0] == sizes[1] == sizes[2]

def test_phi_runs_in_slices_with_the_values_of_one_call(tiny_synthetic, tiny_colt, tiny_pairs):
  """apply_phi over 40 sequences (on a CPU: 3 slices of 16, the last one padded) gives what
  one call over all of them gives, each slice phi's call on those 16 alone to float32
  rounding (another program: another machine may round it differently), and every head where
  phi has them."""
  assert cores.phi_slice() == (16 if jax.default_backend() == 'cpu' else 0)
  rng = np.random.default_rng(0)
  for scl, ttc in (tiny_colt, tiny_pairs):
    c = retriever.Retriever.from_checkpoints(scl.workdir, ttc.workdir).classifier
    tokens = rng.standard_normal((40, 1 + c.config.num_images, c.feature_dim)).astype(np.float32)
    mask = np.ones(tokens.shape[:2], bool)
    mask[::3, 30:] = False
    apply = lambda t, m: pairs_phi.head_outputs(c.module, {'params': c.params}, t, m,
                                                deterministic=True)
    sliced = jax.jit(lambda t, m: cores.apply_phi(
        c.params, t, m, module=c.module, outputs=pairs_phi.head_outputs))(tokens, mask)
    whole = apply(tokens, mask)
    first = jax.jit(apply)(tokens[:16], mask[:16])
    assert set(sliced) == set(whole) and (('pair' in sliced) == (ttc is tiny_pairs[1]))
    for name in whole:
      assert sliced[name].shape == whole[name].shape
      np.testing.assert_allclose(sliced[name], whole[name], rtol=1e-4, atol=1e-5)
      assert_close(np.asarray(sliced[name])[:16], np.asarray(first[name]), name)

def test_saved_settings_find_their_class_and_the_retriever_that_runs_them(tiny_colt, tmp_path):
  """Settings are saved flat in a file that names their method (`method_registry`); a file
  without one (saved before methods were recorded) is colt-pairs' when it holds colt-pairs'
  fields (every such file), else the paper's. The Retriever built is the method's, and the
  paper's Retriever refuses settings that PairsRetriever runs."""
  scl, ttc = tiny_colt
  paper = settings_lib.InferenceSettings(k=10)
  pairs = PairsInferenceSettings(k=10, selection='dpp')
  assert settings_lib.from_saved(dataclasses.asdict(paper)) == paper
  assert settings_lib.from_saved({'k': 3}) == settings_lib.InferenceSettings(k=3)
  assert settings_lib.from_saved(dataclasses.asdict(pairs), 'colt-pairs') == pairs
  with pytest.raises(ConfigError, match='unknown fields'):
    settings_lib.from_saved(dataclasses.asdict(pairs))
  for settings, kind in ((paper, retriever.Retriever), (pairs, PairsRetriever)):
    work = str(tmp_path / kind.__name__)
    shutil.copytree(ttc.workdir, work)
    settings_lib.save_settings(work, settings)
    assert settings_lib.saved_settings(work) == settings
    colt = retriever.Retriever.from_checkpoints(scl.workdir, work)
    assert type(colt) is kind and colt.settings == settings
    back = retriever.Retriever.from_pretrained(
        colt.save_pretrained(str(tmp_path / 'm' / kind.__name__)))
    assert type(back) is kind and back.settings == settings
  saved = json.load(open(tmp_path / 'PairsRetriever' / settings_lib.SETTINGS_FILE))
  assert saved['method'] == 'colt-pairs'
  del saved['method']  # as saved before methods were recorded: colt-pairs' fields
  (tmp_path / 'PairsRetriever' / settings_lib.SETTINGS_FILE).write_text(json.dumps(saved))
  assert settings_lib.saved_settings(str(tmp_path / 'PairsRetriever')) == pairs
  # colt-pairs' flags over paper settings: colt-pairs' class, named.
  given = settings_lib.checkpoint_settings(str(tmp_path / 'Retriever'), {'selection': 'cluster'},
                                           'colt-pairs')
  assert given == PairsInferenceSettings(k=10, selection='cluster')
  with pytest.raises(ConfigError, match='unknown fields'):
    settings_lib.checkpoint_settings(str(tmp_path / 'Retriever'), {'selection': 'cluster'})
  with pytest.raises(TypeError, match='PairsInferenceSettings are run by PairsRetriever'):
    retriever.Retriever(colt.classifier, settings=pairs)
  # PairsRetriever given the paper's settings lists by Eq. 6 (selection 'category').
  assert PairsRetriever(colt.classifier, settings=paper).settings == PairsInferenceSettings(k=10)
