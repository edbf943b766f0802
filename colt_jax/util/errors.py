"""The one exception class for bad input, which every command line reports in one line.

Library code raises `InputError` (or a subclass: `DatasetFormatError`, `FeatureStoreError`,
`RunFileError`, `ConfigError`, ...) for anything the user can fix: a missing or malformed file,
a flag or config value out of range, an output folder that colt_jax did not create. The message
names the file (and line), the flag or the field. `colt_jax.util.cli.run` prints it as one line and
exits with status 2; any other exception is an internal error (status 1).
"""
from __future__ import annotations


class InputError(ValueError):
  """Bad input: the message names the file (and line), the flag or the field, and the cause."""


class ConfigError(InputError):
  """A configuration value (a flag, a flagfile line or a config field) is out of range."""
