"""colt_jax/service/transport.py: writes leave in pairs or at the end of the event loop's turn,
in order."""
import asyncio

from colt_jax.service import transport


class _Recorder:
  """A transport that records what reaches it."""

  def __init__(self):
    self.sent, self.calls, self.closed, self.aborted = [], [], False, False

  def write(self, data):
    self.calls.append('write')
    self.sent.append(bytes(data))

  def writelines(self, chunks):
    self.calls.append('writelines')
    self.sent.append(b''.join(chunks))

  def close(self):
    self.closed = True

  def abort(self):
    self.aborted = True

  def get_write_buffer_size(self):
    return 0

  def is_closing(self):
    return self.closed or self.aborted

  def get_extra_info(self, name, default=None):
    return f'extra:{name}'


def test_a_head_and_body_written_together_leave_in_one_call():
  async def run():
    inner = _Recorder()
    t = transport.CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(b'HTTP/1.1 200 OK\r\n\r\n')
    assert inner.sent == [] and t.get_write_buffer_size() == 19  # held, counted
    t.write(b'{"a": 1}')
    assert inner.calls == ['writelines'] and inner.sent == [b'HTTP/1.1 200 OK\r\n\r\n{"a": 1}']
    await asyncio.sleep(0)  # the end-of-turn flush finds nothing held
    assert len(inner.sent) == 1
    t.write(b'lone')  # a write with no partner leaves at the end of the turn, in order
    t.write(b'')  # nothing to send: not held, not paired
    assert inner.sent == [b'HTTP/1.1 200 OK\r\n\r\n{"a": 1}']
    await asyncio.sleep(0)
    assert inner.sent[1:] == [b'lone']
    t.write(b'a')
    t.write(b'b')
    t.write(b'c')  # a third write in the turn is held again
    t.close()  # flushes before closing
    assert inner.sent[2:] == [b'ab', b'c'] and inner.closed
    t.write(b'dropped')
    t.abort()
    await asyncio.sleep(0)
    assert inner.sent[4:] == [] and inner.aborted
    assert t.get_extra_info('peername') == 'extra:peername'  # the rest is the transport's
    lost = _Recorder()
    t = transport.CoalescingTransport(lost, asyncio.get_running_loop())
    t.write(memoryview(b'held'))  # kept as bytes of its own, not the caller's buffer
    lost.aborted = True  # the connection is lost before the turn ends: the write is dropped
    await asyncio.sleep(0)
    assert lost.sent == []
  asyncio.run(run())
