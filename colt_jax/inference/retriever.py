"""CoLT inference (Alg. 2): the one path that evaluation, the demo, the benchmark and users run.

A `Retriever` holds g (Eq. 1; None = "without SCL"), phi (Eq. 4) and the inference settings
(k and X of Eq. 6, the list length, the relevance threshold, the fill rule). For a query
feature h_q and candidate photos it re-encodes the candidates with g, orders them by cosine
similarity to h_q, keeps phi's N, labels every token with phi and builds the ranked list with
post-processing t (Eq. 6, then its continuation up to the list length; `postprocess`).

Candidates come from one of the two protocols (`protocols`):
* `search(query)` / `search_batch(queries)` / `search_rows(queries)`: the N photos of an indexed
  collection (`index(store)`) most similar to h_q, by exact search over h^ (the paper's
  protocol, and the public API);
* `rank(query, features, ids)` / `rank_batch(...)`: a given candidate set (the official
  protocol's per-topic pool).

Both end in the same jitted core. A list is never empty: when phi labels every candidate
irrelevant and nothing may fill the list, it holds the single most similar candidate (a run
file must name every topic). A model directory (`save_pretrained`, `from_pretrained`) holds g,
phi and the settings. Settings chosen for a phi trained in a workdir travel with it as
`<ttc workdir>/inference.json` (`save_settings`, `saved_settings`): `from_checkpoints` and
`evaluate.py --ttc_checkpoint` use them unless given others (`checkpoint_settings`).

A model knows the encoder f its features came from (`encoder`: the training store's meta.json
'encoder', e.g. 'clip:openai/clip-vit-base-patch32', recorded with phi and in model.json;
None for older checkpoints). Features of another dimension, or a store of another encoder,
are refused before the model runs with one line naming the model (`source`), both dimensions
and both encoders ("model expects 384-d minilm:... features, the store S has 512-d clip:...
features"); where the model's encoder is unknown, only dimensions are compared (and, for a
model directory, the text encoder it was saved with). Two encoders are the same when their
kind and model name (the last part of a path or Hugging Face name) agree.

Queries are features [B, d], texts (`search_text`: f's text tower) or photos (`search_image`:
f's image tower, a CLIP store's recorded model, with the indexing's preprocessing: EXIF
orientation, CLIP's image processor).

Beyond the paper (the `colt-pairs` method), `InferenceSettings.selection` 'coverage',
'cluster' or 'dpp' builds the list from phi's relevance and same-cluster probabilities
(`head_probabilities`, `select_from_heads`, `colt_jax.pairs.selection`) instead of Eq. 6, and
reports each photo's predicted group ('group i') in place of its category; `pair_blend` < 1
mixes the photos' feature cosine into the pair probabilities (`blend_pairs`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Optional, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.util import atomic
from colt_jax.train import configs
from colt_jax import encoders
from colt_jax.engines import approximate as engines
from colt_jax.data import features as features_lib
from colt_jax.util import host_memory
from colt_jax.util import outputs
from colt_jax.model import postprocess
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.engines import exact as search_lib
from colt_jax.pairs import selection
from colt_jax.util.errors import ConfigError
from colt_jax.util.errors import InputError
from colt_jax.inputs.candidates import TopicCandidates
from colt_jax.inputs.examples import token_sequences
from colt_jax.inputs.labels import LabelSpace
from colt_jax.train import loop
from colt_jax.train import restore

MODEL_FORMAT = 'colt_jax.model/1'
MODEL_FILE = 'model.json'
SETTINGS_FORMAT = 'colt_jax.inference/1'
SETTINGS_FILE = 'inference.json'  # beside phi in its trainer workdir (`save_settings`)
LIST_LENGTH = 50  # the official task ranks up to 50 photos per topic
_BATCH = 64  # queries per call of the jitted core (one compilation per batch shape)
# A lone query runs padded to 2 rows: XLA's CPU backend computes a [1, d] x [d, M] product by
# another kernel than [B >= 2, d] x [d, M], whose float32 sums differ in their last bits, and
# near-tied candidates (rank N) then changed places; padded, a query's list is the same alone
# as in any batch (the service batches requests). It costs batch 1's latency a second row.
_MIN_BATCH = 2
# Text queries go through f's text tower in fixed groups of this many (padded): the same
# shapes, so the same float bits, whatever else is encoded with a query.
_TEXT_BATCH = 8
SELECTIONS = ('category', 'coverage', 'cluster', 'dpp')
_HEAD_SELECTIONS = ', '.join(SELECTIONS[1:-1]) + ' or ' + SELECTIONS[-1]  # 'coverage, ... or dpp'


@dataclasses.dataclass(frozen=True)
class InferenceSettings:
  """How phi's labels become a ranked list (Eq. 6 and our choices around it)."""
  k: int = configs.option(20, 'The k of Eq. 6: the diverse head of the list.', low=1,
                          high=LIST_LENGTH)
  per_category: int = configs.option(1, 'X of Eq. 6: images per predicted category.', low=1)
  list_length: int = configs.option(LIST_LENGTH, 'Photos per list: Eq. 6\'s k, then its '
                                    'continuation (postprocess).', low=1, high=LIST_LENGTH)
  irrelevant_threshold: float = configs.option(
      0.0, 'An image is irrelevant only when phi gives that class more than this probability '
      '(0 = argmax, Eq. 4).', low=0.0, high=1.0)
  fill_excluded: bool = configs.option(False, 'Let images phi labels irrelevant fill Eq. 6\'s '
                                       'k slots.')
  # Not in the paper (the colt-pairs method): lists from phi's relevance and pair heads.
  selection: str = configs.option(
      'category', 'How the list is made: category = Eq. 6 over phi\'s class labels (the '
      'paper); coverage = greedy expected coverage of phi\'s relevance and same-cluster '
      'probabilities (selection.expected_coverage); cluster = their average-linkage clusters '
      'in a round-robin (selection.cluster_select); dpp = greedy MAP of a DPP with quality r '
      'and similarity p (selection.dpp_select).', choices=SELECTIONS)
  coverage_weight: float = configs.option(
      0.5, 'w of --selection=coverage: the next photo maximises w r_i + (1 - w) r_i '
      'prod_j (1 - r_j p_ij) over the photos j already listed.', low=0.0, high=1.0)
  cluster_threshold: float = configs.option(
      0.5, '--selection=cluster merges groups while their mean 1 - p_ij is below this.',
      low=0.0, high=2.0, low_open=True)
  selection_theta: float = configs.option(
      0.9, 'theta of --selection=dpp: the next photo maximises theta log r_i + (1 - theta) '
      'log d_i^2, d_i^2 its conditional variance under p given the photos listed (1 = by r).',
      low=0.0, high=1.0)
  pair_blend: float = configs.option(
      1.0, 'b of --selection=coverage, cluster or dpp: they read b p_ij + (1 - b) max(cos_ij, 0), '
      'phi\'s same-cluster probability blended with the two photos\' feature cosine (1 = phi '
      'alone).', low=0.0, high=1.0)

  def __post_init__(self):
    configs.validate(self)
    if self.per_category > self.k:
      raise ConfigError(f'--per_category ({self.per_category}) must be <= --k '
                                f'({self.k})')


def save_settings(ttc_workdir: str, settings: InferenceSettings, chosen_by: str = '') -> str:
  """Writes `settings` beside phi as `<ttc_workdir>/inference.json`, so that they travel with
  the model: `Retriever.from_checkpoints` and `evaluate.py --ttc_checkpoint` use them unless
  given other settings (flags). The file is recorded in the workdir's manifest
  (`outputs.write_owned_json`): a file of that name colt_jax did not write is refused, never
  overwritten. `chosen_by`: who decided them (kept in the file for the reader). Returns the
  file's path."""
  return outputs.write_owned_json(
      os.path.join(ttc_workdir, SETTINGS_FILE),
      {'format': SETTINGS_FORMAT, 'settings': dataclasses.asdict(settings),
       'chosen_by': chosen_by}, "phi's inference settings")


def saved_settings(ttc_workdir: str) -> Optional[InferenceSettings]:
  """The settings `save_settings` wrote beside phi; None when the workdir has none."""
  path = os.path.join(ttc_workdir, SETTINGS_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      info = json.load(f)
  except (FileNotFoundError, NotADirectoryError):
    return None
  except json.JSONDecodeError as e:
    raise InputError(f'{path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: cannot be read ({e})') from None
  if not isinstance(info, dict) or info.get('format') != SETTINGS_FORMAT:
    found = info.get('format') if isinstance(info, dict) else None
    raise InputError(f'{path}: format {found!r}, expected {SETTINGS_FORMAT!r}')
  if not isinstance(info.get('settings'), dict):
    raise InputError(f'{path}: missing required key \'settings\' (an object)')
  try:
    return configs.from_dict(InferenceSettings, info['settings'])
  except (ConfigError, TypeError) as e:
    raise InputError(f'{path}: {e}') from None


def read_model_info(model_dir: str) -> tuple:
  """(model.json as a dict, its InferenceSettings) of a model directory (`save_pretrained`),
  every field of the right kind; anything else is an `InputError` naming the file."""
  path = os.path.join(model_dir, MODEL_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      info = json.load(f)
  except (FileNotFoundError, NotADirectoryError):
    raise InputError(f'{model_dir}: not a CoLT model directory (no {MODEL_FILE})') from None
  except json.JSONDecodeError as e:
    raise InputError(f'{path}:{e.lineno}: malformed JSON ({e.msg})') from None
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f'{path}: cannot be read ({e})') from None
  if not isinstance(info, dict) or info.get('format') != MODEL_FORMAT:
    raise InputError(f'{path}: format {info.get("format") if isinstance(info, dict) else None!r},'
                     f' expected {MODEL_FORMAT!r}')
  for key in ('settings', 'category_names'):
    if key not in info:
      raise InputError(f'{path}: missing required key {key!r}')
  if not isinstance(info['settings'], dict):
    raise InputError(f'{path}: settings must be an object, got {info["settings"]!r}')
  try:
    settings = configs.from_dict(InferenceSettings, info['settings'])
  except (ConfigError, TypeError, ValueError) as e:
    raise InputError(f'{path}: settings: {e}') from None
  names = info['category_names']
  if not (isinstance(names, list) and all(isinstance(n, str) for n in names)
          and len(set(names)) == len(names)):
    raise InputError(f'{path}: category_names must be a list of distinct names')
  if not isinstance(info.get('encoder'), (str, type(None))):
    raise InputError(f'{path}: encoder must be a name or null, got {info["encoder"]!r}')
  if not isinstance(info.get('text_encoder'), (dict, type(None))):  # how to load f's towers
    raise InputError(f'{path}: text_encoder must be an object or null, got '
                     f'{info["text_encoder"]!r}')
  for key in ('g', 'relevance_model'):
    if not isinstance(info.get(key, False), bool):
      raise InputError(f'{path}: {key} must be true or false, got {info[key]!r}')
  return info, settings


def checkpoint_settings(ttc_workdir: str, overrides: Optional[dict] = None) -> InferenceSettings:
  """The settings phi in `ttc_workdir` runs with: those saved beside it (`saved_settings`;
  defaults when none), each of `overrides` (field -> value, e.g. the flags given on a command
  line) replacing its saved value."""
  base = saved_settings(ttc_workdir) or InferenceSettings()
  if not overrides:
    return base
  try:
    return dataclasses.replace(base, **overrides)
  except ConfigError as e:
    raise ConfigError(f'{e} (with the settings saved in '
                      f'{os.path.join(ttc_workdir, SETTINGS_FILE)})') from None


def labels_from_logits(logits, space: LabelSpace, irrelevant_threshold):
  """Token labels (Eq. 4); with a threshold > 0 (not in the paper, its "easy to control"
  post-processing in spirit) a token is 'irrelevant' only when phi gives that class more than
  `irrelevant_threshold`, otherwise its most probable category (the query token keeps
  'query'). 1 never drops an image. The threshold may be traced (one compiled program for
  every threshold: the choices score several)."""
  logits = jnp.asarray(logits, jnp.float32)
  argmax = jnp.argmax(logits, -1)
  if isinstance(irrelevant_threshold, (int, float)) and irrelevant_threshold <= 0:
    return argmax
  probs = jax.nn.softmax(logits, -1)
  labels = jnp.argmax(logits[..., :space.num_categories], -1)
  labels = jnp.where(probs[..., space.irrelevant_id] > irrelevant_threshold,
                     space.irrelevant_id, labels)
  labels = jnp.where(argmax == space.query_id, space.query_id, labels)
  return jnp.where(irrelevant_threshold > 0, labels, argmax)


def phi_slice() -> int:
  """Sequences phi runs on at a time inside a batched call (`apply_phi`): 16 on a CPU, where
  phi over more sequences at once costs more per sequence (its activations leave the caches;
  `benchmarks/bench_batch_cost.py` measures it), all of them at once on an accelerator (0)."""
  return 16 if jax.default_backend() == 'cpu' else 0


def apply_phi(params, tokens, mask, *, module, with_heads: bool = False):
  """phi's outputs (`module.apply`, deterministic) for tokens [B, T, d] and mask [B, T],
  computed `phi_slice()` sequences at a time (`jax.lax.map` over slices; the last one padded
  by repeating its first sequence): per sequence, bit for bit what one call over those 16
  gives, and one call over all B's values up to float rounding (a sequence's outputs depend on
  it alone), in the cache's reach on a CPU."""
  run = lambda t, m: module.apply({'params': params}, t, m, deterministic=True,
                                  with_heads=with_heads)
  size, b = phi_slice(), tokens.shape[0]
  if not size or b <= size:
    return run(tokens, mask)
  slices = -(-b // size)
  pad = slices * size - b

  def sliced(a):
    if pad:
      a = jnp.concatenate([a, jnp.repeat(a[:1], pad, 0)])
    return a.reshape((slices, size) + a.shape[1:])

  out = jax.lax.map(lambda tm: run(*tm), (sliced(tokens), sliced(mask)))
  return jax.tree_util.tree_map(lambda a: a.reshape((slices * size,) + a.shape[2:])[:b], out)


def _label_and_select(params, tokens, mask, scores, threshold, *, module, space: LabelSpace,
                      settings: InferenceSettings):
  """phi (Eq. 4) + t (Eq. 6): (picks [B, L] positions among the N images (-1 = none), image
  labels [B, N]); an empty list gets the most similar valid image. `threshold`: the
  irrelevant_threshold, an argument (`settings` is static, `_static`)."""
  logits = apply_phi(params, tokens, mask, module=module)
  labels = labels_from_logits(logits, space, threshold)[:, 1:]
  valid = mask[:, 1:]
  picks = postprocess.select_per_category_batch(
      labels, scores, valid, k=settings.k, per_category=settings.per_category,
      num_categories=space.num_categories, fill_excluded=settings.fill_excluded,
      length=settings.list_length)
  best = jnp.argmax(jnp.where(valid, scores, -jnp.inf), -1).astype(picks.dtype)
  empty = (picks[:, 0] < 0) & valid.any(-1)
  picks = picks.at[:, 0].set(jnp.where(empty, best, picks[:, 0]))
  return picks, labels


_rank_tokens = jax.jit(_label_and_select, static_argnames=('module', 'space', 'settings'))


def _static(settings: InferenceSettings) -> tuple:
  """(`settings` as the compiled calls' static argument, its irrelevant_threshold as their
  traced one): models scored at several thresholds share one program."""
  return (dataclasses.replace(settings, irrelevant_threshold=0.0),
          jnp.float32(settings.irrelevant_threshold))


def head_probabilities(outputs, space: LabelSpace):
  """(r [B, N], p [B, N, N]) of the N image tokens from phi's outputs (`with_heads=True`):
  r_i = P(image i is relevant), p_ij = P(i and j are in the same cluster | both relevant).

  From the relevance and pair heads where phi has them (the colt-pairs method: sigmoid of
  their logits); otherwise from the class head (Eq. 4's softmax P_i over LabelSpace): r_i =
  sum_{c < V} P_i(c), and p_ij = sum_{c < V} P_i(c) P_j(c) / (r_i r_j), the probability that
  two relevant images fall in one class (in [0, 1])."""
  probs = jax.nn.softmax(jnp.asarray(outputs['class'], jnp.float32)[:, 1:], -1)
  cats = probs[..., :space.num_categories]
  class_r = jnp.sum(cats, -1)
  if 'relevance' in outputs:
    r = jax.nn.sigmoid(jnp.asarray(outputs['relevance'], jnp.float32)[:, 1:])
  else:
    r = class_r
  if 'pair' in outputs:
    p = jax.nn.sigmoid(jnp.asarray(outputs['pair'], jnp.float32)[:, 1:, 1:])
  else:
    joint = jnp.einsum('bic,bjc->bij', cats, cats)
    p = jnp.clip(joint / jnp.maximum(class_r[:, :, None] * class_r[:, None, :], 1e-12), 0, 1)
  return r, p


def blend_pairs(p, tokens, blend):
  """b p_ij + (1 - b) max(cos_ij, 0) over the image tokens (tokens [B, 1+N, d], the query
  first): phi's pair probabilities [B, N, N] blended with the photos' feature cosine (padding:
  cosine 0). b = 1 returns p unchanged, without computing the cosines (`lax.cond`: one
  compiled program for every b, the N x N x d product only where b < 1)."""

  def blended():
    images = jnp.asarray(tokens, jnp.float32)[:, 1:]
    norm = jnp.maximum(jnp.linalg.norm(images, axis=-1, keepdims=True), 1e-12)
    unit = images / norm
    cos = jnp.maximum(jnp.einsum('bid,bjd->bij', unit, unit), 0.0)
    return (blend * p + (1.0 - blend) * cos).astype(p.dtype)

  return jax.lax.cond(blend < 1.0, blended, lambda: p)


def _heads(params, tokens, mask, blend, *, module, space: LabelSpace, members: int = 0):
  """(r, p) of phi's heads (`head_probabilities`), p blended (`blend_pairs`); an ensemble's
  (`members` > 0: params stacked on a leading axis) are its members' r and p averaged."""

  def one(member_params):
    return head_probabilities(
        apply_phi(member_params, tokens, mask, module=module, with_heads=True), space)

  if members:
    r, p = jax.vmap(one)(params)
    r, p = jnp.mean(r, 0), jnp.mean(p, 0)
  else:
    r, p = one(params)
  return r, blend_pairs(p, tokens, blend)


_token_heads = jax.jit(_heads, static_argnames=('module', 'space', 'members'))


def select_from_heads(r, p, valid, settings: InferenceSettings) -> tuple:
  """The lists of `settings.selection` 'coverage' or 'cluster' from (r [B, N], p [B, N, N],
  valid [B, N]) (`head_probabilities`): (picks [B, L] positions among the N images, -1 =
  none; groups [B, N] each image's predicted group, -1 = none).

  coverage: `selection.expected_coverage` (w = `coverage_weight`, L picks); an image's group
  is the pick-order index of the first listed photo j with p_ij > 0.5 (itself, if none
  before it). dpp: `selection.dpp_select` (theta = `selection_theta`), groups as coverage's.
  cluster: `selection.cluster_select` (threshold `cluster_threshold`, X = `per_category`) over
  the images with r > 0.5, then the other valid images by r; the group is cluster_select's
  (none for the images listed after it).
  """
  r, p, valid = np.asarray(r, np.float32), np.asarray(p, np.float32), np.asarray(valid, bool)
  length, (b, n) = settings.list_length, r.shape
  if settings.selection in ('coverage', 'dpp'):
    if settings.selection == 'dpp':
      picks = selection.dpp_select(r, p, valid, theta=settings.selection_theta, k=length).indices
    else:
      picks = selection.expected_coverage_batch(r, p, valid, weight=settings.coverage_weight,
                                                k=length).indices
    safe = np.maximum(picks, 0)
    together = np.take_along_axis(p, np.broadcast_to(safe[:, None, :], (b, n, length)), 2)
    match = ((together > 0.5) | (safe[:, None, :] == np.arange(n)[None, :, None]))
    match &= (picks >= 0)[:, None, :]
    groups = np.where(match.any(-1), np.argmax(match, -1), -1)
    return picks, groups
  picks = np.full((b, length), -1, np.int64)
  groups = np.full((b, n), -1, np.int64)
  for i in range(b):
    relevant = valid[i] & (r[i] > 0.5)
    grouped = selection.cluster_select(r[i], p[i], relevant, threshold=settings.cluster_threshold,
                                       per_cluster=settings.per_category, k=length)
    head = grouped.indices[grouped.indices >= 0]
    groups[i, head] = grouped.groups[:len(head)]
    rest = np.flatnonzero(valid[i] & ~relevant)
    rest = rest[np.argsort(-r[i, rest], kind='stable')]
    order = np.concatenate([head, rest])[:length]
    picks[i, :len(order)] = order
  return picks, groups


@functools.partial(jax.jit, static_argnames=('module', 'space', 'settings', 'n', 'num_rows',
                                             'num_images'))
def _search_and_rank(params, queries, chunks, threshold, *, module, space, settings, n, num_rows,
                     num_images):
  """Exact search of the n most similar rows, tokens [h_q, h^_1..h^_N] (padded to N), phi,
  t: (rows [B, L] of the collection (-1 = none), scores [B, L], labels [B, L])."""
  tokens, mask, scores, idx = _search_tokens(queries, chunks, n, num_rows, num_images)
  picks, labels = _label_and_select(params, tokens, mask, scores, threshold, module=module,
                                    space=space,
                                    settings=settings)
  safe = jnp.maximum(picks, 0)
  take = lambda a: jnp.take_along_axis(a, safe, 1)
  return (jnp.where(picks >= 0, take(idx), -1), jnp.where(picks >= 0, take(scores), -jnp.inf),
          jnp.where(picks >= 0, take(labels), -1))


@functools.partial(jax.jit, static_argnames=('module', 'space', 'n', 'num_rows', 'num_images',
                                             'members'))
def _search_heads(params, queries, chunks, blend, *, module, space, n, num_rows, num_images,
                  members=0):
  """`_search_and_rank`'s search and phi, for `select_from_heads`: (rows [B, N] of the
  collection (-1 = none), scores [B, N], r [B, N], p [B, N, N] (`blend_pairs`), valid [B, N])."""
  tokens, mask, scores, idx = _search_tokens(queries, chunks, n, num_rows, num_images)
  r, p = _heads(params, tokens, mask, blend, module=module, space=space, members=members)
  return idx, scores, r, p, mask[:, 1:]


def _search_tokens(queries, chunks, n, num_rows, num_images):
  """The n most similar rows of each query as phi's input: (tokens [B, 1+N, d], mask, their
  scores [B, N] and rows [B, N], padded with -inf and -1)."""
  scores, idx = search_lib.search_chunks(queries, chunks, n=n, num_rows=num_rows)
  cand = search_lib.gather_rows(chunks, idx)
  pad = num_images - n
  b = queries.shape[0]
  tokens = jnp.concatenate([queries[:, None], cand,
                            jnp.zeros((b, pad, cand.shape[-1]), cand.dtype)], 1)
  mask = jnp.arange(1 + num_images)[None, :] <= n
  mask = jnp.broadcast_to(mask, (b, 1 + num_images))
  scores = jnp.concatenate([scores, jnp.full((b, pad), -jnp.inf, scores.dtype)], 1)
  idx = jnp.concatenate([idx, jnp.full((b, pad), -1, idx.dtype)], 1)
  return tokens, mask, scores, idx


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """One ranked list: photo ids, phi's category per photo, its name, and the photo's cosine
  similarity (h^ to h_q)."""
  photo_ids: tuple
  categories: tuple
  category_names: tuple
  scores: tuple

  def entries(self) -> list:
    """[(photo id, score)]: a run file's lines."""
    return list(zip(self.photo_ids, self.scores))


def _spec_name(spec: Optional[dict]) -> Optional[str]:
  """'kind:model' (or 'kind') of a text encoder spec (`encoders.text_encoder_spec`)."""
  if not spec:
    return None
  return f'{spec["encoder"]}:{spec["model"]}' if spec.get('model') else str(spec['encoder'])


def same_encoder(a: str, b: str) -> bool:
  """Whether two encoder names ('clip:openai/clip-vit-base-patch32', 'minilm:...',
  'synthetic') are one encoder: the same kind and model name (the last part of a local path
  or a Hugging Face name, so a downloaded copy is the model it was downloaded from)."""
  def key(name):
    kind, _, model = str(name).partition(':')
    return kind, os.path.basename(model.rstrip('/\\'))
  return key(a) == key(b)


def mismatch_error(source: str, model_dim: int, model_encoder: Optional[str], dim: int,
                   encoder: Optional[str], what: str = 'the features') -> InputError:
  """The one message for features that do not fit a model: both dimensions and, where known,
  both encoders ("<source>: model expects 384-d minilm:m features, the store S has 512-d
  clip:c features")."""
  expects = f'{model_dim}-d {model_encoder + " " if model_encoder else ""}features'
  has = f'{dim}-d {encoder} features' if encoder else f'{dim}-d'
  return InputError(f'{source or "the model"}: model expects {expects}, {what} has {has}')


def _batches(n: int, pad_to: int = 0):
  """Slices of at most _BATCH queries, each padded (by the caller) to `size` rows: a last,
  shorter batch when there are several, and a single query to _MIN_BATCH rows (or, with
  `pad_to`, to that many rows, at most _BATCH)."""
  size = max(min(max(n, pad_to), _BATCH), _MIN_BATCH)
  return [(s, min(s + size, n), size) for s in range(0, n, size)]


def _pad_rows(x: np.ndarray, size: int) -> np.ndarray:
  if x.shape[0] == size:
    return x
  return np.concatenate([x, np.zeros((size - x.shape[0],) + x.shape[1:], x.dtype)])


class Retriever:
  """CoLT (Alg. 2): g, phi and the inference settings; see the module docstring."""

  def __init__(self, classifier: restore.ClassifierBundle,
               reencoder: Optional[restore.ReEncoderBundle] = None,
               settings: Optional[InferenceSettings] = None,
               category_names: Optional[Sequence[str]] = None,
               text_encoder: Optional[dict] = None, source: str = '',
               encoder: Optional[str] = None,
               relevance_model: Optional[relevance_lib.RelevanceModel] = None,
               relevance_mix: float = 0.0):
    host_memory.keep_freed_buffers()  # its batched calls reuse their host buffers
    self.classifier = classifier
    self.reencoder = reencoder
    self.source = source or classifier.path  # the model directory (or phi's workdir)
    if reencoder is not None and reencoder.feature_dim != classifier.feature_dim:
      raise InputError(f'{self.source or "the model"}: g ({reencoder.path or "re-encoder"}) '
                       f'takes {reencoder.feature_dim}-d features but phi '
                       f'({classifier.path or "classifier"}) reads {classifier.feature_dim}-d')
    # The encoder f of the training features: given, else recorded with phi or g (None:
    # unknown, e.g. an older checkpoint).
    phi_f = getattr(classifier, 'encoder', None)
    g_f = getattr(reencoder, 'encoder', None) if reencoder is not None else None
    if phi_f and g_f and not same_encoder(phi_f, g_f):
      raise InputError(f'{self.source or "the model"}: g ({reencoder.path or "re-encoder"}) '
                       f'was trained on {g_f} features but phi '
                       f'({classifier.path or "classifier"}) on {phi_f} features')
    trained_over = getattr(classifier, 'g_sha256', None)
    if trained_over and reencoder is not None and reencoder.digest != trained_over:
      logging.warning('%s: phi (%s) was trained over another g than %s (its parameters '
                      'differ); its labels may not fit these features', self.source or
                      'the model', classifier.path or 'classifier', reencoder.path or 'g')
    self.encoder = encoder or phi_f or g_f
    self.settings = settings or InferenceSettings()
    # A relevance model beside phi and a, its share of r: the selections from phi's heads read
    # r = (1 - a) r_phi + a r_model (colt_jax.pairs.relevance_model; a = 0: phi alone).
    self.relevance_model, self.relevance_mix = relevance_model, float(relevance_mix)
    space = classifier.space
    local = classifier.config.label_scheme == 'local'
    if category_names is None and not local:
      category_names = classifier.category_names  # the training vocabulary saved with phi
    if category_names is None:
      prefix = 'group' if local else 'category'
      category_names = [f'{prefix} {i}' for i in range(space.num_categories)]
    if len(category_names) != space.num_categories:
      raise InputError(f'{len(category_names)} category names for a classifier of '
                       f'{space.num_categories} categories')
    self.category_names = tuple(str(n) for n in category_names)
    self._names = self.category_names + ('irrelevant', 'query')
    self._check_selection()
    if self.settings.selection != 'category':  # groups of `select_from_heads`; -1: none
      self._names = tuple(f'group {i}' for i in range(self.num_images)) + ('ungrouped',)
    self._index = None
    self._engine = None
    self._photo_ids = None
    self.text_encoder = text_encoder  # how to load f's towers (encoders.text_encoder_spec)
    self._runners = {}  # (f's spec, kind) -> BatchRunner of f's text or image tower
    self._store = None  # (path, encoder) of the indexed store

  def _check_selection(self) -> None:
    """Refuses a list made from a head phi was not trained to give."""
    cfg = self.classifier.config
    if not 0.0 <= self.relevance_mix <= 1.0:
      raise InputError(f'{self.source or "the model"}: relevance_mix {self.relevance_mix:g} '
                       'is a share of r, in [0, 1]')
    if self.relevance_mix > 0 and (self.relevance_model is None
                                   or self.settings.selection == 'category'):
      raise InputError(f'{self.source or "the model"}: relevance_mix '
                       f'{self.relevance_mix:g} mixes a relevance model into the r of '
                       f'--selection={_HEAD_SELECTIONS}: '
                       + ('the model has none' if self.relevance_model is None
                          else f'not {self.settings.selection}'))
    if (self.relevance_model is not None and self.classifier.parts
        and tuple(self.relevance_model.parts) != tuple(self.classifier.parts)):
      raise InputError(f'{self.source or "the model"}: the relevance model reads the views '
                       f'{self.relevance_model.parts}, phi {self.classifier.parts}')
    if self.classifier.members and self.settings.selection == 'category':
      raise InputError(f'{self.source or "the model"}: an ensemble of {self.classifier.members} '
                       f'phi averages their relevance and pair heads: use --selection='
                       f'{_HEAD_SELECTIONS}')
    if cfg.class_weight == 0 and self.settings.selection == 'category':
      raise InputError(f'{self.source or "the model"}: phi was trained without its class head '
                       f'(--class_weight=0): Eq. 6 needs it; use --selection={_HEAD_SELECTIONS}')
    if (cfg.class_weight == 0 and self.settings.selection != 'category'
        and not self.classifier.module.relevance_head):
      raise InputError(f'{self.source or "the model"}: phi has neither a trained class head '
                       'nor a relevance head to rank by')

  # -- construction

  @classmethod
  def from_checkpoints(cls, scl_checkpoint: Optional[str], ttc_checkpoint: str,
                       settings: Optional[InferenceSettings] = None,
                       ttc_step: Optional[int] = None,
                       category_names: Optional[Sequence[str]] = None) -> 'Retriever':
    """From trainer workdirs (`scl_checkpoint` empty or None: without SCL).

    `ttc_checkpoint` may name several phi workdirs, comma-separated: an ensemble (one
    configuration, e.g. its seeds; `restore.load_classifier_ensemble`) whose relevance and
    pair heads are averaged (selection coverage, cluster or dpp). `settings` default: those saved
    beside phi (`<ttc_checkpoint>/inference.json` of the first, `save_settings`), else
    `InferenceSettings()`. `category_names` default: with global labels, the training
    vocabulary saved with phi (categories of held-out topics that it lacks are unseen: phi
    never predicts them); with local labels, 'group i'.
    """
    reencoder = restore.load_reencoder(scl_checkpoint) if scl_checkpoint else None
    paths = [p for p in ttc_checkpoint.split(',') if p] if ',' in ttc_checkpoint else []
    if settings is None:
      settings = checkpoint_settings(paths[0] if paths else ttc_checkpoint)
    classifier = (restore.load_classifier_ensemble(paths, ttc_step) if paths else
                  restore.load_classifier(ttc_checkpoint, ttc_step))
    return cls(classifier, reencoder, settings, category_names, source=ttc_checkpoint)

  @classmethod
  def from_pretrained(cls, model_dir: str) -> 'Retriever':
    """From a model directory written by `save_pretrained`."""
    info, settings = read_model_info(model_dir)
    path, names = os.path.join(model_dir, MODEL_FILE), info['category_names']
    reencoder = restore.load_reencoder(os.path.join(model_dir, 'g')) if info.get('g') else None
    relevance = (relevance_lib.load(os.path.join(model_dir, 'relevance'))
                 if info.get('relevance_model') else None)
    try:
      mix = float(info.get('relevance_mix', 0.0))
    except (TypeError, ValueError):
      raise InputError(f'{path}: relevance_mix must be a number') from None
    return cls(restore.load_classifier(os.path.join(model_dir, 'phi')), reencoder, settings,
               names, info.get('text_encoder'), source=model_dir, encoder=info.get('encoder'),
               relevance_model=relevance, relevance_mix=mix)

  def save_pretrained(self, model_dir: str) -> str:
    """Writes g, phi (orbax checkpoints with their configs) and the settings to `model_dir`,
    whole or not at all; returns its path."""
    with outputs.ResultSet(model_dir, 'a CoLT model') as out:
      if self.reencoder is not None:
        _save_params(out.path('g'), self.reencoder.params,
                     dataclasses.asdict(self.reencoder.config))
      phi_config = dict(dataclasses.asdict(self.classifier.config),
                        num_categories=self.classifier.space.num_categories)
      if self.classifier.category_names is not None:
        phi_config['category_names'] = list(self.classifier.category_names)
      if self.classifier.parts:
        phi_config['token_parts'] = [list(p) for p in self.classifier.parts]
      if self.classifier.members:  # the members' parameters, stacked
        phi_config['members'] = self.classifier.members
      _save_params(out.path('phi'), self.classifier.params, phi_config)
      if self.relevance_model is not None:
        self.relevance_model.save(out.path('relevance'))
      atomic.write_json(out.path(MODEL_FILE), {
          'format': MODEL_FORMAT, 'g': self.reencoder is not None, 'phi': True,
          'settings': dataclasses.asdict(self.settings),
          'category_names': list(self.category_names),
          'num_images': self.num_images, 'label_scheme': self.classifier.config.label_scheme,
          'text_encoder': self.text_encoder, 'encoder': self.encoder,
          'relevance_model': self.relevance_model is not None,
          'relevance_mix': self.relevance_mix})
    return out.final

  def with_relevance_model(self, model: Optional[relevance_lib.RelevanceModel],
                           mix: float = 0.0) -> 'Retriever':
    """A copy with `model` beside phi and its share `mix` of r (None, 0: phi alone; g, phi
    and the index shared). The model reads the tokens phi sees: fit it on the features phi
    reads (a store re-encoded by g, when the Retriever has one)."""
    other = self.with_settings()
    other.relevance_model, other.relevance_mix = model, float(mix)
    other._check_selection()  # pylint: disable=protected-access
    return other

  def _mixed_relevance(self, r, tokens, valid) -> np.ndarray:
    """phi's r [B, N] mixed with the relevance model's over the token sequences [B, 1 + N, d]
    (`relevance_mix` a; r itself when a is 0)."""
    a = self.relevance_mix
    if not a:
      return r
    model_r = self.relevance_model.predict_tokens(np.asarray(tokens), np.asarray(valid))
    return ((1.0 - a) * np.asarray(r, np.float32) + a * model_r).astype(np.float32)

  def with_settings(self, **changes) -> 'Retriever':
    """A copy with some inference settings changed (g, phi and the index are shared)."""
    other = Retriever(self.classifier, self.reencoder,
                      dataclasses.replace(self.settings, **changes), self.category_names,
                      self.text_encoder, self.source, self.encoder, self.relevance_model,
                      self.relevance_mix)
    other._index, other._photo_ids = self._index, self._photo_ids  # pylint: disable=protected-access
    other._engine, other._store = self._engine, self._store  # pylint: disable=protected-access
    other._runners = self._runners  # pylint: disable=protected-access
    return other

  @property
  def collection_index(self) -> Optional[search_lib.ExactIndex]:
    """The exact index over the indexed collection's h^ (None before `index`)."""
    return self._index

  @property
  def num_images(self) -> int:
    """N: candidates per query that phi sees."""
    return self.classifier.config.num_images

  @property
  def feature_dim(self) -> int:
    """d of the features (photos and queries) the model takes."""
    return self.classifier.feature_dim

  @property
  def _encoder_name(self) -> Optional[str]:
    """The model's encoder for messages: `encoder`, else its text tower's (model.json)."""
    return self.encoder or _spec_name(self.text_encoder)

  def check_dim(self, dim: int, what: str = 'the features') -> None:
    """Refuses features of another dimension than the model's, naming both."""
    if int(dim) != self.feature_dim:
      raise mismatch_error(self.source, self.feature_dim, self._encoder_name, dim, None, what)

  def check_store(self, store: features_lib.FeatureStore) -> None:
    """Refuses a store of another dimension or another encoder than the model's (module
    docstring), or, for per-view token parts, of other views: one line naming both."""
    where = f'the store {store.meta.get("path", "")}'.rstrip()
    store_f = str(store.meta['encoder']) if store.meta.get('encoder') else None
    if self.encoder and store_f:
      differs = not same_encoder(self.encoder, store_f)
    else:  # an older model: the text tower it was saved with, if any
      mine, theirs = _spec_name(self.text_encoder), _spec_name(
          encoders.text_encoder_spec(store.meta))
      differs = bool(mine and theirs and not same_encoder(mine, theirs))
    if differs or int(store.dim) != self.feature_dim:
      raise mismatch_error(self.source, self.feature_dim, self._encoder_name, store.dim,
                           store_f, where)
    self.classifier.check_store(store)

  def reencode(self, features: np.ndarray) -> np.ndarray:
    """h^ (Eq. 1) of [n, d] photo features; the features themselves without g."""
    features = np.asarray(features, np.float32)
    return features if self.reencoder is None else self.reencoder(features)

  # -- the collection protocol: search

  def index(self, store: features_lib.FeatureStore,
            engine: Optional[engines.EngineSpec] = None) -> 'Retriever':
    """Indexes the store's photos (re-encoded once) for `search`; returns self. A store of
    another dimension or encoder is refused (`check_store`). The store's encoder becomes the
    text (and, for CLIP, image) tower of `search_text` and `search_image` unless the model
    names one. `engine`: the candidate engine over h^ (`colt_jax.engines.approximate`; default exact)."""
    self.check_store(store)
    self.text_encoder = self.text_encoder or encoders.text_encoder_spec(store.meta)
    self.index_features(np.asarray(store.photos), [str(p) for p in store.photo_ids], engine)
    self._store = (str(store.meta.get('path', '')), str(store.meta.get('encoder', '')))
    return self

  # -- text queries

  def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised features [B, d] of text queries by f's text tower (loaded once, the path
    extraction encodes topic titles with)."""
    if not self.text_encoder:
      raise InputError('this model knows no text encoder: index a store made by '
                       'data_prep/index_collection.py or extract_features.py (clip or minilm), '
                       'or pass query features to search()')
    return self._runner('queries').encode('queries', [str(t) for t in texts])

  def _runner(self, kind: str):
    """f's BatchRunner for `kind` ('queries': the text tower; 'photos': the image tower), on
    one device; f is loaded once for both."""
    from colt_jax.encoders import batching  # pylint: disable=g-import-not-at-top
    spec = json.dumps(self.text_encoder, sort_keys=True)
    if (spec, kind) not in self._runners:
      loaded = [r.encoder for (s, _), r in self._runners.items() if s == spec]
      encoder = loaded[0] if loaded else encoders.load_text_encoder(self.text_encoder)
      # Queries come one or a few at a time: small fixed batches pad little.
      size = _TEXT_BATCH
      self._runners[spec, kind] = batching.BatchRunner(encoder, jax.local_devices()[:1], size)
    return self._runners[spec, kind]

  # -- image queries

  def _check_image_tower(self) -> None:
    """Refuses image queries unless f is CLIP (it has an image tower in the query space)."""
    path, store_f = self._store or ('', '')
    kind = (self.text_encoder or {}).get('encoder')
    if kind == 'clip':
      return
    if kind:
      what = f'{kind} text features'
    elif store_f:
      what = f'{store_f} features, of no image tower colt_jax can run'
    else:
      raise InputError(f'{self.source or "this model"} knows no image encoder: index a store '
                       'made with the clip encoder (data_prep/index_collection.py --encoder '
                       'clip), or pass query features to search()')
    where = f'store {path}' if path else f'{self.source or "this model"}: f'
    raise InputError(f'{where} has {what}: image queries need a CLIP store')

  def encode_images(self, images: Sequence) -> np.ndarray:
    """L2-normalised features [B, d] of query photos (file paths or PIL images) by f's image
    tower: the indexed CLIP store's recorded model, with the indexing's preprocessing (EXIF
    orientation, CLIP's image processor, `encoders.clip`). A missing or unreadable file is
    one line naming it; a store of a text encoder (minilm) refuses."""
    self._check_image_tower()
    from colt_jax.encoders import clip  # pylint: disable=g-import-not-at-top
    from PIL import Image  # pylint: disable=g-import-not-at-top
    pictures = []
    for image in images:
      if isinstance(image, Image.Image):
        pictures.append(image)
        continue
      path = os.fspath(image)
      if not os.path.isfile(path):
        raise InputError(f'{path}: no such file' if not os.path.exists(path)
                         else f'{path}: not a file')
      try:
        pictures.append(clip.load_image(path))
      except ValueError as e:
        raise InputError(str(e)) from None
    return self._runner('photos').encode('photos', pictures)

  def search_images(self, images: Sequence) -> list:
    """`SearchResult` per query photo (path or PIL image) over the indexed collection (Alg. 2
    after f's image tower): photos like it, diverse."""
    if self._index is None:
      raise InputError('Retriever.search needs a collection: call index(store) first')
    images = list(images)
    return self.search_batch(self.encode_images(images)) if images else []

  def search_image(self, image) -> SearchResult:
    """The ranked list of one query photo (a file path or a PIL image) over the indexed
    collection; the same result type as `search_text`."""
    return self.search_images([image])[0]

  def search_texts(self, texts: Sequence[str]) -> list:
    """`SearchResult` per text query over the indexed collection (Alg. 2 after f's text
    tower)."""
    return self.search_batch(self.encode_queries(texts))

  def search_text(self, text: str) -> SearchResult:
    """The ranked list of one text query ("big ben") over the indexed collection."""
    return self.search_texts([text])[0]

  def index_features(self, photos: np.ndarray, photo_ids: Sequence[str],
                     engine: Optional[engines.EngineSpec] = None) -> 'Retriever':
    if len(photo_ids) != photos.shape[0]:
      raise InputError(f'{photos.shape[0]} photo features but {len(photo_ids)} ids')
    self.check_dim(np.shape(photos)[-1], 'a photo')
    hat = self.reencode(photos)
    self._engine = None
    if engine is not None and engine.name != 'exact':
      self._engine = engines.build(engine, hat)
    index = search_lib.ExactIndex(hat)
    if min(self.num_images, index.num_rows) > index.chunk_rows:  # a chunk must hold N rows
      index = search_lib.ExactIndex(hat, max_chunk_rows=index.num_rows)
    self._index = index
    self._photo_ids = tuple(photo_ids)
    return self

  def _engine_rows(self, queries: np.ndarray) -> tuple:
    """`search_rows` with an approximate engine: its top N, re-ordered by exact cosine, then
    phi and Eq. 6 as `rank` runs them. A batch that repeats a query (a padded one) does each
    distinct query's work once; phi still runs at the batch's size (its compiled shape)."""
    return engines.distinct_rows(
        queries, lambda distinct: self._engine_rows_of(distinct, pad_to=len(queries)))

  def _engine_rows_of(self, queries: np.ndarray, pad_to: int = 0) -> tuple:
    n = min(self.num_images, self._index.num_rows)
    _, rows = self._engine.search(queries, n)
    rows = np.asarray(rows)
    hat = np.asarray(self._index.rows(np.maximum(rows, 0)))
    feats = [hat[b][rows[b] >= 0] for b in range(len(rows))]
    ids = [[str(r) for r in rr if r >= 0] for rr in rows]
    results = self._rank_pools(queries, feats, ids, reencoded=True, pad_to=pad_to)[0]
    length = self.settings.list_length
    out_rows = np.full((len(rows), length), -1, np.int64)
    out_scores = np.full((len(rows), length), -np.inf, np.float32)
    out_labels = np.full((len(rows), length), -1, np.int64)
    for b, r in enumerate(results):
      m = len(r.photo_ids)
      out_rows[b, :m] = [int(p) for p in r.photo_ids]
      out_scores[b, :m] = r.scores
      out_labels[b, :m] = r.categories
    return out_rows, out_scores, out_labels

  def search_rows(self, queries: np.ndarray) -> tuple:
    """(rows [B, L] of the indexed collection, -1 = none; scores [B, L]; labels [B, L]) for
    L2-normalised query features [B, d]: the whole of Alg. 2 in one jitted call per batch."""
    if self._index is None:
      raise InputError('Retriever.search needs a collection: call index(store) first')
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    self.check_dim(queries.shape[-1], 'a query')
    if self._engine is not None:
      return self._engine_rows(queries)
    ix = self._index
    n = min(self.num_images, ix.num_rows)
    outs = []
    for start, stop, size in _batches(queries.shape[0]):
      q = _pad_rows(queries[start:stop], size)
      if self.settings.selection != 'category':  # phi's heads, then selection (colt-pairs)
        out = self._search_select(q, n)
      else:
        static, threshold = _static(self.settings)
        out = _search_and_rank(self.classifier.params, jnp.asarray(q), ix.chunks, threshold,
                               module=self.classifier.module, space=self.classifier.space,
                               settings=static, n=n, num_rows=ix.num_rows,
                               num_images=self.num_images)
      outs.append([np.asarray(a)[:stop - start] for a in out])
    return tuple(np.concatenate(parts) for parts in zip(*outs))

  def _search_select(self, queries: np.ndarray, n: int) -> tuple:
    """`search_rows` of a batch with `select_from_heads`: (rows, scores, groups) [B, L]."""
    ix = self._index
    c = self.classifier
    out = _search_heads(c.params, jnp.asarray(queries), ix.chunks,
                        np.float32(self.settings.pair_blend), module=c.module, space=c.space,
                        n=n, num_rows=ix.num_rows, num_images=self.num_images,
                        members=c.members)
    idx, scores, r, p, valid = (np.asarray(a) for a in out)
    if self.relevance_mix:  # the model over the tokens phi saw (padded query rows: none)
      valid = valid & np.any(queries != 0, axis=1)[:, None]
      tokens = np.concatenate([queries[:, None], np.asarray(ix.rows(np.maximum(idx, 0)))], 1)
      r = self._mixed_relevance(r, tokens, valid)
    picks, groups = select_from_heads(r, p, valid, self.settings)
    safe = np.maximum(picks, 0)
    take = lambda a: np.take_along_axis(a, safe, 1)
    return (np.where(picks >= 0, take(idx), -1), np.where(picks >= 0, take(scores), -np.inf),
            np.where(picks >= 0, take(groups), -1))

  def search_batch(self, queries: np.ndarray) -> list:
    """`SearchResult` per query feature [B, d] over the indexed collection."""
    rows, scores, labels = self.search_rows(queries)
    ids = self._photo_ids
    return [self._result([ids[r] for r in rr if r >= 0], s, l)
            for rr, s, l in zip(np.asarray(rows).tolist(), scores, labels)]

  def search(self, query_feature: np.ndarray) -> SearchResult:
    """The ranked list for one L2-normalised query feature [d]."""
    return self.search_batch(np.asarray(query_feature)[None])[0]

  # -- the pool protocol: given candidates

  def rank_batch(self, queries: np.ndarray, features: Sequence[np.ndarray],
                 photo_ids: Sequence[Sequence[str]]) -> list:
    """`SearchResult` per query [B, d], each over its own candidates (raw f features [n_b, d]
    and ids): re-encoded, ordered by similarity, phi's N kept."""
    return self._rank_pools(queries, features, photo_ids)[0]

  def candidate_labels(self, query_feature: np.ndarray, features: np.ndarray,
                       photo_ids: Sequence[str]) -> dict:
    """phi's label (Eq. 4, with the inference threshold) of each of the N candidates it sees
    for one query, as `rank` computes them: photo id -> category name ('irrelevant' too)."""
    _, (seq_ids, labels) = self._rank_pools(np.asarray(query_feature)[None], [features],
                                            [photo_ids])
    return {p: self._names[int(c)] for p, c in zip(seq_ids[0], labels[0])}

  def pool_heads(self, query_feature: np.ndarray, features: np.ndarray,
                 photo_ids: Sequence[str]) -> tuple:
    """What phi's heads say of one query's candidates, as `rank` feeds them to phi (re-encoded,
    ordered by similarity, the first N): (token photo ids [n], r [n] = P(relevant), p [n, n] =
    P(same cluster | both relevant)) by `head_probabilities` (the class head's reading when
    phi has no relevance or pair head), p blended with the feature cosine as the settings'
    `pair_blend` says (`blend_pairs`). What the coverage and cluster selections read."""
    query = np.atleast_2d(np.asarray(query_feature, np.float32))
    self.check_dim(query.shape[-1], 'a query')
    self.check_dim(np.shape(features)[-1], 'a candidate photo')
    hat = self.reencode(np.asarray(features, np.float32))
    seqs = token_sequences([TopicCandidates(topic=0, photo_ids=tuple(photo_ids),
                                            flickr_ranks=None, query=query[0], features=hat)],
                           self.num_images)
    c = self.classifier
    r, p = _token_heads(c.params, jnp.asarray(seqs.tokens), jnp.asarray(seqs.mask),
                        np.float32(self.settings.pair_blend), module=c.module, space=c.space,
                        members=c.members)
    r = self._mixed_relevance(r, seqs.tokens, seqs.mask[:, 1:])
    n = len(seqs.photo_ids[0])
    return (tuple(seqs.photo_ids[0]), np.asarray(r[0, :n], np.float32),
            np.asarray(p[0, :n, :n], np.float32))

  def _rank_pools(self, queries, features, photo_ids, reencoded: bool = False,
                  pad_to: int = 0) -> tuple:
    """(results, (token photo ids per query, phi's labels of those tokens per query));
    `reencoded`: the features are h^ already; `pad_to`: phi's batch at least this many rows
    (at most _BATCH)."""
    queries = np.atleast_2d(np.asarray(queries, np.float32))
    self.check_dim(queries.shape[-1], 'a query')
    for f in features:
      if len(f):
        self.check_dim(np.shape(f)[-1], 'a candidate photo')
    sizes = [len(f) for f in features]
    hat = np.concatenate([np.asarray(f, np.float32) for f in features])
    if not reencoded:
      hat = self.reencode(hat)
    cands, start = [], 0
    for b, size in enumerate(sizes):
      cands.append(TopicCandidates(topic=b, photo_ids=tuple(photo_ids[b]), flickr_ranks=None,
                                   query=queries[b], features=hat[start:start + size]))
      start += size
    seqs = token_sequences(cands, self.num_images)
    results, token_labels = [], []
    for start, stop, size in _batches(len(cands), pad_to):
      if self.settings.selection != 'category':  # phi's heads, then selection (colt-pairs)
        mask = _pad_rows(seqs.mask[start:stop], size)
        tokens = _pad_rows(seqs.tokens[start:stop], size)
        r, p = _token_heads(
            self.classifier.params, jnp.asarray(tokens),
            jnp.asarray(mask), np.float32(self.settings.pair_blend),
            module=self.classifier.module, space=self.classifier.space,
            members=self.classifier.members)
        r = self._mixed_relevance(r, tokens, mask[:, 1:])
        picks, labels = select_from_heads(r, p, mask[:, 1:], self.settings)
      else:
        static, threshold = _static(self.settings)
        picks, labels = _rank_tokens(
            self.classifier.params, jnp.asarray(_pad_rows(seqs.tokens[start:stop], size)),
            jnp.asarray(_pad_rows(seqs.mask[start:stop], size)),
            jnp.asarray(_pad_rows(seqs.scores[start:stop], size)), threshold,
            module=self.classifier.module, space=self.classifier.space, settings=static)
      picks, labels = np.asarray(picks), np.asarray(labels)
      for i in range(stop - start):
        b = start + i
        pp = [int(p) for p in picks[i] if p >= 0]
        results.append(self._result([seqs.photo_ids[b][p] for p in pp], seqs.scores[b, pp],
                                    labels[i, pp]))
        token_labels.append(labels[i, :len(seqs.photo_ids[b])])
    return results, ([list(ids) for ids in seqs.photo_ids], token_labels)

  def rank(self, query_feature: np.ndarray, features: np.ndarray,
           photo_ids: Sequence[str]) -> SearchResult:
    """The ranked list of one query over its own candidate photos."""
    return self.rank_batch(np.asarray(query_feature)[None], [features], [photo_ids])[0]

  def _result(self, ids, scores, labels) -> SearchResult:
    n = len(ids)
    cats = tuple(np.asarray(labels)[:n].tolist())  # Python ints and floats, in one C call each
    return SearchResult(photo_ids=tuple(ids), categories=cats,
                        category_names=tuple(self._names[c] for c in cats),
                        scores=tuple(np.asarray(scores)[:n].tolist()))


def _save_params(workdir: str, params, config: dict) -> None:
  """An orbax checkpoint of `params` with its config, as a trainer's workdir holds it."""
  ckpt = loop.Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=1)
  try:
    ckpt.save(0, {'params': jax.device_get(params)}, config)
    ckpt.wait()
  finally:
    ckpt.close()
  atomic.write_json(os.path.join(workdir, loop.CONFIG_FILE), config)


__all__: Sequence[str] = ('Retriever', 'InferenceSettings', 'SearchResult', 'labels_from_logits',
                          'LIST_LENGTH', 'save_settings', 'saved_settings',
                          'checkpoint_settings')
