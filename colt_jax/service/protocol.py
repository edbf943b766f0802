"""uvicorn's HTTP protocol (httptools) with each response's head and body sent in one write.

uvicorn writes a response's status line and headers as soon as the app sends
`http.response.start`, and its body at `http.response.body`: two `write` system calls per
answer. On loopback each of them also runs the receiving side's TCP processing and wakes the
client, and under load they were the largest single share of the event loop's time between
batches (benchmarks/bench_service.py; py-spy: `write` ahead of parsing and serialising).
`CoalescingTransport` holds a write until the next write or the end of the event loop's turn,
whichever comes first, and sends both together: a search's head and body leave in one
syscall, and nothing waits beyond the turn in which it was written. `HttpProtocol` is
uvicorn's `HttpToolsProtocol` over that transport (`uvicorn.Config(http=HttpProtocol)`,
as experiments/serve.py starts it).
"""
from __future__ import annotations

import asyncio
from typing import Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
  """An asyncio transport whose writes go out in pairs (module docstring); every other
  method is the wrapped transport's."""

  def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
    self._transport = transport
    self._loop = loop
    self._held: Optional[bytes] = None

  def write(self, data) -> None:
    if not data:
      return
    if self._held is None:
      self._held = data if isinstance(data, bytes) else bytes(data)  # not the caller's buffer
      self._loop.call_soon(self.flush)
      return
    held, self._held = self._held, None
    self._transport.writelines((held, data))  # one vectored write, no copy

  def writelines(self, chunks) -> None:
    for chunk in chunks:
      self.write(chunk)

  def flush(self) -> None:
    """Sends a held write now (called at the end of the turn it was written in); dropped
    when the connection closed meanwhile, as the transport drops writes after it is lost."""
    if self._held is not None:
      held, self._held = self._held, None
      if not self._transport.is_closing():
        self._transport.write(held)

  def get_write_buffer_size(self) -> int:
    return self._transport.get_write_buffer_size() + len(self._held or b'')

  def write_eof(self) -> None:
    self.flush()
    self._transport.write_eof()

  def close(self) -> None:
    self.flush()
    self._transport.close()

  def abort(self) -> None:
    self._held = None
    self._transport.abort()

  def __getattr__(self, name):
    return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
  """uvicorn's httptools protocol whose transport is a `CoalescingTransport`."""

  def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
    super().connection_made(CoalescingTransport(transport, self.loop))
