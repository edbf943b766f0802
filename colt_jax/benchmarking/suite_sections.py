"""The measuring sections of `benchmarks/bench_retrieval.py` (`perf_suite.run` calls them):

* `reference`: a large float32 matmul's FLOP/s and the streaming read bandwidth, measured in
  the same run as what is compared with them.
* `components`: each stage per query at batch 1 and batched (f, search, g, phi, t, MMR,
  UMONS); `paths`: query text to a list of k photos for topk, mmr, umons and colt.
* `ttc`: phi at several depths (FLOPs by XLA's cost analysis, FLOP/s against the matmul's)
  and one encoder layer against its attention core (`layer_breakdown`).
* `search_scaling` (with `half_precision`) and `ttc_scaling`: cost and memory as the
  collection and N grow.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from colt_jax.benchmarking import timing
from colt_jax.benchmarking.suite_stages import Recorder
from colt_jax.benchmarking.suite_stages import Stages
from colt_jax.benchmarking.suite_stages import World
from colt_jax.benchmarking.suite_stages import make_phi
from colt_jax.benchmarking.suite_stages import texts
from colt_jax.engines import exact as search


def reference(rec: Recorder) -> dict:
  s = rec.settings
  rec.log(f'reference: {s.matmul_size}^3 matmul, {s.bandwidth_bytes / 2**20:.0f} MiB read')
  matmul = timing.matmul_rate(s.matmul_size, repeats=max(3, s.batched_repeats * 2))
  bandwidth = timing.memory_bandwidth(s.bandwidth_bytes, repeats=max(3, s.batched_repeats))
  rec.log(f'  matmul {matmul["flops_per_s"] / 1e9:.1f} GFLOP/s (best '
          f'{matmul["best_flops_per_s"] / 1e9:.1f}); read {bandwidth["bytes_per_s"] / 1e9:.1f} '
          f'GB/s (best {bandwidth["best_bytes_per_s"] / 1e9:.1f})')
  return {'matmul': matmul, 'bandwidth': bandwidth}



def components(rec: Recorder, st: Stages) -> dict:
  s = rec.settings
  b, tb = s.batch, s.ttc_batch
  q1, qb = st.queries[:1], st.queries[:b]
  c1, cb = st.candidates[0], st.candidates[:b]
  t_one, t_many = texts(1), texts(b)
  rec.log('components (per query)')
  out = {}
  out['f'] = rec.pair('f (MiniLM, text -> feature)', lambda: st.encode(t_one),
                      lambda: st.encode(t_many), b)
  out['search'] = rec.pair(f'search top-{s.num_images} of {s.collection}',
                           lambda: st.index.search(q1, s.num_images),
                           lambda: st.index.search(qb, s.num_images), b)
  g1, gb = jnp.asarray(st.candidates[:1]), jnp.asarray(st.candidates[:b])
  out['g'] = rec.pair(f'g over {s.num_images} candidates', lambda: st.g(st.g_params, g1),
                      lambda: st.g(st.g_params, gb), b)
  tok1, m1 = st.tokens[:1], st.mask[:1]
  tokb, mb = st.tokens[:tb], st.mask[:tb]
  out['phi'] = rec.pair(f'phi L={s.num_layers} N={s.num_images}',
                        lambda: st.phi(st.phi_params, tok1, m1),
                        lambda: st.phi(st.phi_params, tokb, mb), tb)
  lab = jnp.asarray(st.labels[:, 1:])
  sc, valid = jnp.asarray(st.cand_scores), jnp.ones(st.cand_scores.shape, bool)
  out['post'] = rec.pair('post-processing t', lambda: st.post(lab[:1], sc[:1], valid[:1]),
                         lambda: st.post(lab[:b], sc[:b], valid[:b]), b)
  out['mmr'] = rec.pair(f'MMR over {s.num_images}', lambda: st.mmr_one(q1[0], c1),
                        lambda: st.mmr_many(qb, cb), b)
  out['umons'] = rec.pair(f'UMONS over {s.num_images}', lambda: st.umons_one(q1[0], c1),
                          lambda: [st.umons_one(q, c) for q, c in zip(qb, cb)], b)
  return out


def paths(rec: Recorder, st: Stages) -> dict:
  """Text -> k photo indices, per method, at batch 1 and batched."""
  s = rec.settings
  n, k = s.num_images, s.k

  def topk(t):
    _, idx = st.index.search(st.encode(t), k)
    return np.asarray(idx)

  def candidates(t):
    q = st.encode(t)
    _, idx = st.index.search(q, n)
    return q, np.asarray(idx), np.asarray(st.index.rows(idx))

  def mmr(t):
    q, idx, cand = candidates(t)
    if len(t) == 1:
      return idx[0, st.mmr_one(q[0], cand[0]).indices]
    picks = st.mmr_many(q, cand).indices
    return np.take_along_axis(idx, np.maximum(picks, 0), 1)

  def umons(t):
    q, idx, cand = candidates(t)
    return [idx[i, st.umons_one(q[i], cand[i]).indices] for i in range(len(t))]

  def colt(t):
    return np.asarray(st.colt_core(st.encode(t)))

  fns = {'topk': topk, 'mmr': mmr, 'umons': umons, 'colt': colt}
  rec.log(f'whole paths: text -> {k} photos of {s.collection}')
  out = {}
  for name, fn in fns.items():
    batch = s.ttc_batch if name == 'colt' else s.batch
    one, many = texts(1), texts(batch)
    out[name] = rec.pair(f'path {name}', lambda fn=fn: fn(one), lambda fn=fn: fn(many), batch)
  return out


def ttc(rec: Recorder, st: Stages, matmul_flops_per_s: Optional[float]) -> dict:
  s = rec.settings
  rec.log(f'phi at L={list(s.layers)} (N={s.num_images}, d={s.dim})')
  out = {'layers': {}}
  tb = s.ttc_batch
  for layers in s.layers:
    phi, params, _ = make_phi(s, num_layers=layers)
    tok1, m1, tokb, mb = st.tokens[:1], st.mask[:1], st.tokens[:tb], st.mask[:tb]
    entry = rec.pair(f'phi L={layers}', lambda: phi(params, tok1, m1),
                     lambda: phi(params, tokb, mb), tb)
    cost1 = timing.compiled_cost(phi, params, tok1, m1)
    costb = timing.compiled_cost(phi, params, tokb, mb)
    entry['flops_per_query'] = costb['flops'] / tb if costb['flops'] else None
    entry['flops_per_query_batch1'] = cost1['flops']
    entry['memory_batch1'] = cost1
    entry['memory_batched'] = costb
    entry['params'] = timing.tree_bytes(params) // 4
    for key in ('batch1', 'batched'):
      fl = entry['flops_per_query']
      ms = entry[key]['per_query']['median_ms']
      entry[key]['flops_per_s'] = fl / (ms / 1e3) if fl else None
      if matmul_flops_per_s and fl:
        entry[key]['matmul_ratio'] = entry[key]['flops_per_s'] / matmul_flops_per_s
    out['layers'][str(layers)] = entry
  out['matmul_flops_per_s'] = matmul_flops_per_s
  out['flops_counted_on'] = costb.get('flops_counted_on')
  out['breakdown'] = layer_breakdown(rec, st)
  return out


def layer_breakdown(rec: Recorder, st: Stages) -> dict:
  """One encoder layer of phi against its attention core (scores, softmax, weighted sum), the
  core as the layer runs it (`phi_lib.padded_attention` with a key-padding mask)."""
  from colt_jax.model import phi as phi_lib  # pylint: disable=g-import-not-at-top
  s = rec.settings
  tb = s.ttc_batch
  x = jnp.asarray(st.tokens[:tb])
  mask = st.mask[:tb]
  layer = phi_lib.EncoderLayer(num_heads=s.num_heads)
  params = layer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)['params']
  layer_fn = jax.jit(lambda p, x, m: layer.apply({'params': p}, x, m, deterministic=True))
  head = s.dim // s.num_heads
  q = jnp.asarray(np.random.default_rng(0).standard_normal(
      (tb, x.shape[1], s.num_heads, head), dtype=np.float32))
  attn_mask = jnp.asarray(mask, bool)[:, None, None, :]
  core_fn = jax.jit(lambda q, k, v, m: phi_lib.padded_attention(q, k, v, mask=m,
                                                               deterministic=True))
  rec.log('phi layer breakdown')
  layer_t = rec.time(f'one layer b{tb}', layer_fn, params, x, mask, items=tb, batched=True)
  core_t = rec.time(f'attention core b{tb}', core_fn, q, q, q, attn_mask, items=tb,
                    batched=True)
  layer_flops = timing.compiled_cost(layer_fn, params, x, mask)['flops']
  core_flops = timing.compiled_cost(core_fn, q, q, q, attn_mask)['flops']
  lt, ct = layer_t['per_query']['median_ms'], core_t['per_query']['median_ms']
  rest_ms = max(lt - ct, 1e-9)
  return {'layer': layer_t, 'attention_core': core_t,
          'layer_flops_per_query': layer_flops / tb, 'core_flops_per_query': core_flops / tb,
          'core_time_share': ct / lt, 'core_flop_share': core_flops / layer_flops,
          'core_flops_per_s': core_flops / tb / (ct / 1e3),
          'rest_flops_per_s': (layer_flops - core_flops) / tb / (rest_ms / 1e3)}


def search_scaling(rec: Recorder, world: World, bandwidth: Optional[float]) -> dict:
  s = rec.settings
  sizes = sorted(int(m) for m in s.search_sizes)
  rec.log(f'search scaling over {sizes} photos (d={s.dim}, top {s.num_images})')
  full = world.collection(sizes[-1])
  q = world.queries(s.batch)
  rows = []
  index = None
  for m in sizes:
    del index
    index = search.ExactIndex(full[:m])
    one = lambda index=index: index.search(q[:1], s.num_images)
    many = lambda index=index: index.search(q, s.num_images)
    entry = {'photos': m, 'collection_bytes': index.nbytes, 'chunk_rows': index.chunk_rows,
             **rec.pair(f'search {m}', one, many, s.batch)}
    entry['memory_batch1'] = timing.compiled_cost(
        search.search_chunks, jnp.asarray(q[:1]), index.chunks, n=s.num_images,
        num_rows=index.num_rows)
    entry['memory_batched'] = timing.compiled_cost(
        search.search_chunks, jnp.asarray(q), index.chunks, n=s.num_images,
        num_rows=index.num_rows)
    if bandwidth:
      entry['bandwidth_bound_ms'] = index.nbytes / bandwidth * 1e3
    rows.append(entry)
  del full
  out = {'rows': rows, 'dim': s.dim, 'n': s.num_images, 'batch': s.batch}
  out['growth_batch1'] = timing.growth_exponent(
      sizes, [r['batch1']['per_query']['median_ms'] for r in rows])
  out['growth_batched'] = timing.growth_exponent(
      sizes, [r['batched']['per_query']['median_ms'] for r in rows])
  out['half_precision'] = half_precision(rec, index, q)
  return out


def half_precision(rec: Recorder, index: search.ExactIndex, queries: np.ndarray) -> dict:
  """The collection stored as bfloat16 / float16 (scored in float32): batch-1 search time
  against float32 storage, and whether the top-N sets equal float32's."""
  s = rec.settings
  n = s.num_images
  _, ref = index.search(queries, n)
  ref = np.asarray(ref)
  q1 = jnp.asarray(queries[:1])
  out = {'photos': index.num_rows}
  fn = functools.partial(search.search_chunks, n=n, num_rows=index.num_rows)
  out['float32'] = rec.time(f'search float32 {index.num_rows}', fn, q1, index.chunks)
  for name, dtype in (('bfloat16', jnp.bfloat16), ('float16', jnp.float16)):
    half = tuple(c.astype(dtype) for c in index.chunks)
    entry = rec.time(f'search {name} {index.num_rows}', fn, q1, half)
    idx = np.asarray(fn(jnp.asarray(queries), half)[1])
    entry['same_top_n_sets'] = float(np.mean([set(a) == set(b) for a, b in zip(idx, ref)]))
    entry['top_n_overlap'] = float(np.mean([len(set(a) & set(b)) / n
                                            for a, b in zip(idx, ref)]))
    entry['speedup'] = out['float32']['median_ms'] / entry['median_ms']
    out[name] = entry
    del half
  return out


def ttc_scaling(rec: Recorder, world: World) -> dict:
  s = rec.settings
  sizes = sorted(int(n) for n in s.ttc_sizes)
  rec.log(f'phi scaling over N={sizes} (L={s.num_layers}, d={s.dim})')
  tb = s.ttc_batch
  rows = []
  for n in sizes:
    phi, params, _ = make_phi(s, num_images=n)
    tokens = jnp.asarray(np.concatenate([world.queries(tb)[:, None],
                                         world.collection(tb * n).reshape(tb, n, s.dim)], 1))
    mask = jnp.ones(tokens.shape[:2], bool)
    entry = {'n': n, **rec.pair(f'phi N={n}', lambda: phi(params, tokens[:1], mask[:1]),
                                lambda: phi(params, tokens, mask), tb)}
    entry['memory_batch1'] = timing.compiled_cost(phi, params, tokens[:1], mask[:1])
    entry['memory_batched'] = timing.compiled_cost(phi, params, tokens, mask)
    flops = entry['memory_batched']['flops']
    entry['flops_per_query'] = flops / tb if flops else None
    rows.append(entry)
  return {'rows': rows, 'batch': tb,
          'growth_batch1': timing.growth_exponent(
              sizes, [r['batch1']['per_query']['median_ms'] for r in rows]),
          'growth_batched': timing.growth_exponent(
              sizes, [r['batched']['per_query']['median_ms'] for r in rows]),
          'growth_flops': timing.growth_exponent(
              sizes, [r['flops_per_query'] for r in rows])}

