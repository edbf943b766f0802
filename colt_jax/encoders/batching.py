"""Batched encoding over devices: an encoder's forward function pmap-ed over local devices.

`BatchRunner(encoder, devices, batch_size).encode(kind, items)` encodes a list of any length
and returns float32 [len(items), dim], row i for items[i]. Items go in global batches of
`batch_size` (rounded up to a multiple of the device count), split evenly over the devices by
`jax.pmap`. An encoder that defines `lengths(kind, items)` (token counts) gets the items
sorted by length first, so that a batch holds texts of similar length and is padded little;
rows go back to item order. The last batch is padded by repeating its last item and the
padded rows are dropped after the call: no item is ever dropped. Host-side preparation
(tokenising, image decoding) of the next batch overlaps the devices' work.

Used by the extraction of a split (`extract.py`), of a collection (`collection.py`) and by the
`Retriever`'s text queries.
"""
from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import jax
import numpy as np

from colt_jax.util import devices as devices_lib


class Encoder(Protocol):
  """A frozen encoder f as the extraction machinery drives it.

  `prepare` runs on the host (tokenising, image decoding) and returns arrays with a leading
  batch dimension; `forward(kind)` is a pure `(params, batch) -> [b, dim]` function of those
  arrays, run under `jax.pmap`, returning L2-normalised float32 features. Optionally,
  `lengths(kind, items)` gives each item's length so that batches group similar lengths.
  """
  name: str  # meta 'encoder', e.g. 'clip:openai/clip-vit-base-patch32'
  dim: int
  params: Any
  needs_images: bool  # photos are encoded from image files (else from their metadata text)
  settings: Mapping[str, Any]  # JSON-serialisable; part of the resume settings and meta

  def prepare(self, kind: str, items: Sequence[Any]) -> dict:
    ...

  def forward(self, kind: str) -> Callable[[Any, Mapping[str, Any]], jax.Array]:
    ...


def default_devices(num_devices: int = 0) -> list:
  """The first `num_devices` local devices (0: all)."""
  devices = jax.local_devices()
  return devices[:num_devices] if num_devices > 0 else devices


class BatchRunner:
  """Runs an encoder's `forward` pmap-ed over `devices` on lists of items of any length."""

  def __init__(self, encoder: Encoder, devices: Sequence[Any], batch_size: int):
    self.encoder = encoder
    self.devices = list(devices)
    n = len(self.devices)
    self.batch_size = -(-max(1, batch_size) // n) * n  # a multiple of the device count
    self._sharding = devices_lib.device_sharding(self.devices)
    self._params = devices_lib.replicate(encoder.params, self.devices)
    self._fns = []

  def _fn(self, kind: str):
    forward = self.encoder.forward(kind)
    for fn, pmapped in self._fns:  # kinds sharing a forward function share its compilations
      if fn is forward:
        return pmapped
    pmapped = jax.pmap(forward, axis_name=devices_lib.AXIS, devices=self.devices)
    self._fns.append((forward, pmapped))
    return pmapped

  def _prepare(self, kind: str, items: Sequence[Any]) -> tuple:
    """Host side of one batch: padded to the global batch by repeating the last item."""
    arrays = self.encoder.prepare(kind, items)
    n, pad = len(items), self.batch_size - len(items)
    out = {}
    for k, v in arrays.items():
      v = np.asarray(v)
      if v.shape[0] != n:
        raise ValueError(f'{self.encoder.name}: prepare({kind!r}) gave {k} with {v.shape[0]} '
                         f'rows for {n} items')
      if pad:
        v = np.concatenate([v, np.repeat(v[-1:], pad, axis=0)])
      out[k] = v
    return devices_lib.shard(out, len(self.devices)), n

  def encode(self, kind: str, items: Sequence[Any],
             on_batch: Optional[Callable[[int], None]] = None) -> np.ndarray:
    """float32 [len(items), dim], row i = features of items[i]."""
    dim = self.encoder.dim
    if not items:
      return np.zeros((0, dim), np.float32)
    fn = self._fn(kind)
    order = None
    lengths = getattr(self.encoder, 'lengths', None)
    if lengths is not None:  # similar lengths in a batch: less padding
      order = np.argsort(np.asarray(lengths(kind, items)), kind='stable')
      items = [items[i] for i in order]
    starts = range(0, len(items), self.batch_size)
    batches = [items[s:s + self.batch_size] for s in starts]
    outs, pending = [], None

    def collect(entry):
      out, n = entry
      rows = np.asarray(jax.device_get(out), np.float32).reshape(-1, dim)[:n]
      outs.append(rows)
      if on_batch:
        on_batch(n)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      future = pool.submit(self._prepare, kind, batches[0])
      for j in range(len(batches)):
        batch, n = future.result()
        if j + 1 < len(batches):
          future = pool.submit(self._prepare, kind, batches[j + 1])
        out = fn(self._params, jax.device_put(batch, self._sharding))
        if pending is not None:
          collect(pending)
        pending = (out, n)
      collect(pending)
    feats = np.concatenate(outs)
    if order is not None:
      restored = np.empty_like(feats)
      restored[order] = feats
      feats = restored
    return feats
