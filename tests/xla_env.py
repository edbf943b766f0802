"""XLA_FLAGS of the test processes (conftest.py sets them before JAX is imported) and of the
command lines a test starts with a device count of its own."""

# XLA's CPU backend without LLVM's optimisation passes (XLA's own HLO passes, fusion included,
# still run): compiling, not computing, is most of the suite's time (tiny models, many
# shapes), and this compiles about 3x faster. Results agree with optimised code to float
# rounding; a test comparing two runs compiles both alike.
COMPILE_FAST = '--xla_backend_optimization_level=0'


def xla_flags(devices: int) -> str:
  """XLA_FLAGS for a process with `devices` host CPU devices, compiled as the tests are."""
  return f'--xla_force_host_platform_device_count={devices} {COMPILE_FAST}'
