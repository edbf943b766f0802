"""The address the service listens on, checked before anything is loaded."""
import socket

from colt_jax.util.errors import InputError


def check_bindable(host: str, port: int) -> None:
  """Bad input, before any loading, when `host`:`port` cannot be bound (port 0: any free one,
  always bindable)."""
  if port == 0:
    return
  try:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
  except socket.gaierror as e:
    raise InputError(f'--host {host}: not an address of this machine ({e.strerror})') from None
  family, kind, proto, _, address = infos[0]
  with socket.socket(family, kind, proto) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind(address)
    except OSError as e:
      raise InputError(f'--host {host} --port {port}: cannot listen there ({e.strerror})') from None
