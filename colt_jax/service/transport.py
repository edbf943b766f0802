"""A transport that sends a response's head and body in one write.

`CoalescingTransport` holds a write until the next write or the end of the event loop's turn,
whichever comes first, and sends both together (one vectored `writelines`): a search's head
and body leave in one syscall, and nothing waits beyond the turn in which it was written
(protocol.py: why two writes per answer cost the event loop under load).
"""
from __future__ import annotations

import asyncio
from typing import Optional


class CoalescingTransport:
  """An asyncio transport whose writes go out in pairs (module docstring); every other
  method is the wrapped transport's."""

  def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
    self._transport = transport
    self._loop = loop
    self._held: Optional[bytes] = None
    self._shut = False  # after write_eof: writes are dropped (the transport would raise)

  def write(self, data) -> None:
    if not data or self._shut:
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

  def write_now(self, chunks) -> None:
    """Sends what is held and then `chunks`, in one vectored write."""
    if self._shut:
      return
    held, self._held = self._held, None
    self._transport.writelines((held, *chunks) if held is not None else chunks)

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
    self._shut = True
    self._transport.write_eof()

  def close(self) -> None:
    self.flush()
    self._transport.close()

  def abort(self) -> None:
    self._held = None
    self._transport.abort()

  def __getattr__(self, name):
    return getattr(self._transport, name)
