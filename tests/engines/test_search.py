"""Tests for colt_jax.engines.exact: exact cosine top-n, chunked, ties by lower index."""
import numpy as np
import pytest

from colt_jax.engines import exact as search
from float_compare import assert_same_ranking  # pylint: disable=g-bad-import-order


def _unit(rng, n, d):
  x = rng.normal(size=(n, d)).astype(np.float32)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize('max_chunk_rows', [10_000, 300, 97, 50])
def test_equals_reference_with_ties_for_any_chunking(max_chunk_rows):
  rng = np.random.default_rng(0)
  photos = _unit(rng, 1000, 16)
  photos[500:560] = photos[0]  # exact ties spread over several chunks
  photos[900:] = photos[10]
  queries = np.concatenate([photos[:3], photos[10:11], _unit(rng, 4, 16)]) + 1e-3
  queries /= np.linalg.norm(queries, axis=-1, keepdims=True)
  index = search.ExactIndex(photos, max_chunk_rows=max_chunk_rows)
  scores, idx = (np.asarray(a) for a in index.search(queries, 120))
  # XLA's chunked products against NumPy's: the same lists up to float32 rounding (scores
  # of two rows may round differently in another program or on another machine), and equal
  # scores, the duplicated rows' here, in index order.
  want = search.reference_top_n(queries, photos, 120)
  reference = np.einsum('bd,md->bm', queries, photos)
  for b in range(len(queries)):
    assert_same_ranking(idx[b].tolist(), scores[b], want[b].tolist(), reference[b, want[b]],
                        err_msg=f'query {b}')
    tied = scores[b, 1:] == scores[b, :-1]
    assert (idx[b, 1:][tied] > idx[b, :-1][tied]).all(), f'query {b}: ties not by index'
  np.testing.assert_allclose(scores, np.take_along_axis(queries @ photos.T, idx, 1), atol=1e-6)
  assert (np.diff(scores, axis=1) <= 0).all()


def test_padding_is_never_returned_and_n_is_clamped():
  rng = np.random.default_rng(1)
  photos = -_unit(rng, 7, 4)  # some scores below 0 (padding rows would score 0)
  index = search.ExactIndex(photos, max_chunk_rows=3)
  # 7 rows -> 3 chunks of 3, 2 rows padding
  assert [c.shape for c in index.chunks] == [(3, 4)] * 3
  _, idx = index.search(_unit(rng, 2, 4), 50)
  assert idx.shape == (2, 7)
  assert sorted(np.asarray(idx)[0].tolist()) == list(range(7))


def test_one_compilation_per_batch_size():
  from colt_jax.benchmarking import timing
  rng = np.random.default_rng(2)
  index = search.ExactIndex(_unit(rng, 400, 8), max_chunk_rows=128)
  q = _unit(rng, 3, 8)
  index.search(q, 20)
  with timing.CompileCounter() as counter:
    for _ in range(3):
      index.search(_unit(rng, 3, 8), 20)
  assert counter.count == 0


def test_bad_inputs():
  with pytest.raises(ValueError, match='collection'):
    search.ExactIndex(np.zeros((0, 4), np.float32))
  index = search.ExactIndex(np.eye(4, dtype=np.float32))
  with pytest.raises(ValueError, match='queries'):
    index.search(np.zeros((2, 3), np.float32), 2)
  with pytest.raises(ValueError, match='n must be'):
    index.search(np.zeros((2, 4), np.float32), 0)


@pytest.mark.parametrize('max_chunk_rows', [10_000, 3, 4])
def test_rows_gathers_across_chunks(max_chunk_rows):
  rng = np.random.default_rng(4)
  photos = _unit(rng, 11, 5)
  index = search.ExactIndex(photos, max_chunk_rows=max_chunk_rows)
  at = np.array([[0, 10, 3], [7, 7, 5]])
  np.testing.assert_array_equal(np.asarray(index.rows(at)), photos[at])  # a gather: exact
