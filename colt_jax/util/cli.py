"""How every command line of colt_jax starts and fails: `cli.run(main)` instead of `app.run`.

* Bad input (`errors.InputError` and its subclasses, absl flag errors, `app.UsageError`) is
  printed as one line, `<program>: error: <message>`, and the exit status is 2.
* A write to a full disk (ENOSPC, EDQUOT) is the user's to fix too: one line naming the path
  and the free space (`colt_jax.util.diskspace`), status 2; the libraries' own log lines of it
  (orbax's threads', with tracebacks) are dropped unless --verbose.
* Any other exception is an internal error: one line, `<program>: internal error: ...`, and
  status 1.
* `--debug` (or the environment variable COLT_JAX_DEBUG=1) prints the traceback instead.
* `--helpshort` lists the program's flags, each with a one-line help, and exits 0.
* A number flag given as nan or inf, or an integer beyond 64 bits, is bad input before `main`
  runs (each command bounds its own flags further: `colt_jax.util.flagcheck`).
* SIGTERM (`kill`, `timeout`, a scheduler's or CI's stop) unwinds the command as Ctrl-C does,
  so its clean-up runs (a result set, store or dataset being written is removed, the
  temporaries of atomic writes too; the last complete one stays) before it exits with status
  143 and one line (Python's default would end it at once, leaving them behind; a second
  SIGTERM does). Ctrl-C: status 130 and one line (the traceback with --debug). A signal
  that arrives inside a finaliser or a garbage-collection callback (JAX runs one), where
  Python would print the exception and go on, is delivered again a moment later. Once the
  clean-up has run, the process ends without the interpreter's own shutdown, which could
  crash while XLA's or orbax's threads still run.
"""
from __future__ import annotations

import gc
import functools
import logging as std_logging
import math
import os
import re
import signal
import sys
import threading
import time
import warnings
from typing import Callable, Optional

from absl import app
from absl import flags
from absl import logging

from colt_jax.util import diskspace
from colt_jax.util.errors import InputError

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 1
EXIT_TERMINATED = 128 + signal.SIGTERM  # the shell's status of a process ended by SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT  # ... and by Ctrl-C

_DEBUG = flags.DEFINE_bool('debug', False, 'Show the Python traceback of an error instead of '
                           'its one-line message (also COLT_JAX_DEBUG=1).')


_VERBOSE = flags.DEFINE_bool('verbose', False, "Show the libraries' INFO log lines and "
                             'notices (orbax, jax, transformers, faiss) besides colt_jax\'s own.')


@functools.lru_cache(maxsize=1)
def _own_roots() -> tuple:
  """The folders whose log records are colt_jax's own: the package's and the running main's
  (found from the package and the command, not from where a checkout lies)."""
  import colt_jax  # pylint: disable=g-import-not-at-top
  roots = [os.path.dirname(os.path.abspath(colt_jax.__file__))]
  main = getattr(sys.modules.get('__main__'), '__file__', None)
  if main:
    roots.append(os.path.dirname(os.path.abspath(main)))
  return tuple(r + os.sep for r in roots)


class _OwnLines(std_logging.Filter):
  """Keeps colt_jax's own records and the libraries' warnings and errors, but for those of a
  full disk, which the command reports once (orbax logs each of its threads' with a
  traceback)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    if os.path.abspath(record.pathname or '').startswith(_own_roots()):
      return True
    if record.exc_info and diskspace.is_full(record.exc_info[1]):
      return False
    return record.levelno >= std_logging.WARNING and not record.name.startswith(
        ('transformers', 'jax._src.xla_bridge'))


def quiet_libraries() -> None:
  """Installs the quiet default (module docstring) unless --verbose or absl's -v is given."""
  verbose = (flags.FLAGS.is_parsed() and (_VERBOSE.value or flags.FLAGS.verbosity > 0)
             or '--verbose' in sys.argv)
  if verbose:
    return
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _OwnLines) for f in handler.filters):
    handler.addFilter(_OwnLines())
  for name in ('transformers', 'orbax', 'faiss', 'jax._src.xla_bridge', 'absl'):
    std_logging.getLogger(name).addFilter(_OwnLines())
  warnings.filterwarnings('ignore', category=FutureWarning)
  warnings.filterwarnings('ignore', category=DeprecationWarning)
  warnings.filterwarnings('ignore', message='.*TensorFlow and JAX classes are deprecated.*')
  os.environ.setdefault('TRANSFORMERS_VERBOSITY', 'error')
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def _program() -> str:
  return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else 'colt_jax'


def _debug() -> bool:
  env = os.environ.get('COLT_JAX_DEBUG', '').lower() in ('1', 'true', 'yes')
  return env or (flags.FLAGS.is_parsed() and _DEBUG.value) or '--debug' in sys.argv


def _one_line(e: BaseException) -> str:
  text = str(e) or type(e).__name__
  return ' '.join(text.split())


def fail(message: str, status: int = EXIT_BAD_INPUT) -> None:
  print(f'{_program()}: {"error" if status == EXIT_BAD_INPUT else "internal error"}: '
        f'{message}', file=sys.stderr)
  sys.exit(status)


_HELP = ('--help', '-h', '-?', '--helpshort', '--helpfull', '--helpxml')


def _check_numbers(values) -> None:
  """Given number flags are finite and integers fit 64 bits (what no command can use)."""
  for name in list(values):
    flag = values[name]
    value = flag.value
    if not flag.present or isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if isinstance(flag.parser, flags.FloatParser) and not math.isfinite(value):
      fail(f'--{name} must be a finite number, got {value}')
    if isinstance(flag.parser, flags.IntegerParser) and abs(value) > 2**63 - 1:
      fail(f'--{name} must be at most {2**63 - 1}, got {value}')


_NOT_INT = re.compile(r'^flag --(\w+)=(.*): invalid literal for int\(\) with base 10: ')


# name -> a hint for a flag this program does not define ('' = none), e.g. the method that
# defines it (`add_unknown_flag_hint`; train_ttc.py: trainer_cli.other_method_flag).
_unknown_flag_hints = []


def add_unknown_flag_hint(hint: Callable[[str], str]) -> None:
  """Adds `hint(flag name)` (a few words, or '') to the line that refuses an unknown flag."""
  _unknown_flag_hints.append(hint)


def _flag_error(e: Exception) -> str:
  """absl's message, clearer for an integer flag given as 1e11 or 2.5, and for an unknown
  flag that a hint knows (`add_unknown_flag_hint`)."""
  text = _one_line(e)
  if isinstance(e, flags.UnrecognizedFlagError):
    name = e.flagname[2:] if e.flagname.startswith('no') and e.flagname != 'no' else ''
    hints = [h for hint in _unknown_flag_hints for h in (hint(e.flagname), hint(name)) if h]
    if hints:
      return f'{text} ({hints[0]})'
  match = _NOT_INT.match(text)
  if match:
    return (f'--{match.group(1)}: expected an integer, got {match.group(2)!r} (write integers '
            'in full: 100000, not 1e5)')
  return text


def _flagfile_error(argv, error: Exception) -> str:
  """One line for a --flagfile absl could not read: the named ones that fail to read."""
  names = [a.split('=', 1)[1] for a in argv[1:] if a.lstrip('-').startswith('flagfile=')]
  names += [b for a, b in zip(argv[1:], argv[2:]) if a.lstrip('-') == 'flagfile']
  bad = []
  for name in names:
    try:
      with open(os.path.expanduser(name), encoding='utf-8') as f:
        f.read()
    except (UnicodeDecodeError, OSError):
      bad.append(name)
  what = ('not UTF-8 text' if isinstance(error, UnicodeDecodeError)
          else f'cannot be read ({getattr(error, "strerror", None) or error})')
  where = ', '.join(bad) or f'one that {", ".join(names) or "the command line"} names'
  return f'--flagfile {where}: {what}'


def _parse_flags(argv):
  try:
    rest = flags.FLAGS(argv)
    _check_numbers(flags.FLAGS)
    return rest
  except flags.Error as e:
    fail(_flag_error(e))
  except (UnicodeDecodeError, OSError) as e:  # absl reading a --flagfile
    fail(_flagfile_error(argv, e))
  except SystemExit as e:  # absl's --help exits 1 after printing it: asking for help is no error
    if e.code == 1 and any(a.split('=')[0] in _HELP for a in argv[1:]):
      sys.exit(0)
    raise


def _swallowed_here(frame) -> bool:
  """Whether an exception raised at `frame` would be printed and dropped by Python: inside a
  `__del__` or a garbage-collection callback (jax's `_xla_gc_callback`)."""
  callbacks = {getattr(cb, '__code__', None) for cb in gc.callbacks}
  while frame is not None:
    if frame.f_code.co_name == '__del__' or frame.f_code in callbacks:
      return True
    frame = frame.f_back
  return False


class _Redeliverer:
  """A thread that sends a signal to the main thread again 20 ms after `again(signum)` asks
  (its handler then runs elsewhere), and again every 100 ms until a handler has run
  (`delivered`): a signal that lands as a gc callback returns was seen lost, and a main thread
  asleep (`time.sleep(120)`) then slept on (tests/util/test_cli.py hung about 1 run in 8). The
  handler only writes a byte to a pipe (it starts no thread: threading's locks); `stop()`,
  as a handler unwinds, ends the resending (the next SIGTERM would end the process)."""

  def __init__(self):
    self._read, self._write = os.pipe()
    self._main = threading.main_thread().ident
    self.handled = 0  # handler runs (`delivered`)
    self.stopped = False
    threading.Thread(target=self._run, name='colt-signal-again', daemon=True).start()

  def _run(self) -> None:
    while data := os.read(self._read, 1):
      time.sleep(0.02)
      seen = self.handled
      while not self.stopped and self.handled == seen:
        signal.pthread_kill(self._main, data[0])
        time.sleep(0.1)
    os.close(self._read)

  def delivered(self) -> None:
    self.handled += 1

  def again(self, signum: int) -> None:
    os.write(self._write, bytes([signum]))  # async-signal-safe, no lock

  def stop(self) -> None:
    self.stopped = True

  def close(self) -> None:
    self.stopped = True
    os.close(self._write)  # the thread reads the end and stops


_redeliverer: Optional[_Redeliverer] = None  # while `_unwind_on_signals`' handlers are set


def _redelivered(signum: int, frame) -> bool:
  """A handler's first step: whether the signal arrived where its exception would be
  swallowed (`_swallowed_here`), and is sent again soon (`_Redeliverer`); else the handler
  unwinds, and resending ends."""
  if _redeliverer is not None:
    _redeliverer.delivered()
  if _swallowed_here(frame):
    if _redeliverer is not None:
      _redeliverer.again(signum)
    return True
  if _redeliverer is not None:
    _redeliverer.stop()
  return False


def _unwind(signum, frame) -> None:
  """SIGTERM's handler while a command runs (module docstring)."""
  if _redelivered(signum, frame):
    return
  signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
  print(f'{_program()}: terminated by SIGTERM', file=sys.stderr, flush=True)
  raise SystemExit(EXIT_TERMINATED)


def _interrupt(signum, frame) -> None:
  """SIGINT's handler while a command runs: Python's, except where it would be swallowed."""
  if _redelivered(signum, frame):
    return
  raise KeyboardInterrupt


def _unwind_on_signals() -> Callable[[], None]:
  """Installs `_unwind` for SIGTERM and `_interrupt` for SIGINT where Python's defaults are
  set (and this is the main thread); returns what puts the defaults back."""
  if threading.current_thread() is not threading.main_thread():
    return lambda: None
  ours = {}
  if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    ours[signal.SIGTERM] = (_unwind, signal.SIG_DFL)
  if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    ours[signal.SIGINT] = (_interrupt, signal.default_int_handler)
  global _redeliverer
  if ours and _redeliverer is None:
    _redeliverer = _Redeliverer()
  for signum, (handler, _) in ours.items():
    signal.signal(signum, handler)

  def restore():
    global _redeliverer
    for signum, (handler, default) in ours.items():
      if signal.getsignal(signum) is handler:
        signal.signal(signum, default)
    if ours and _redeliverer is not None:
      _redeliverer.close()
      _redeliverer = None
  return restore


def _end_now(status: int) -> None:
  """Ends the process with `status` once its clean-up has run, without the interpreter's
  shutdown (module docstring): what is written is flushed first."""
  logging.flush()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os._exit(status)  # pylint: disable=protected-access


def run(main: Callable, argv=None) -> None:
  """`absl.app.run(main)` with the error conventions of the module docstring."""

  def wrapped(args):
    quiet_libraries()
    restore = _unwind_on_signals()
    try:
      return main(args)
    except SystemExit as e:  # SIGTERM's unwinding (`_unwind`), the clean-up done
      if e.code == EXIT_TERMINATED and not _debug():
        _end_now(EXIT_TERMINATED)
      raise
    except (InputError, app.UsageError) as e:
      if _debug():
        raise
      fail(_one_line(e))
    except KeyboardInterrupt:  # Ctrl-C: the clean-up has run on the way out
      if _debug():
        raise
      print(f'{_program()}: interrupted', file=sys.stderr, flush=True)
      _end_now(EXIT_INTERRUPTED)
    except Exception as e:  # pylint: disable=broad-except
      if _debug():
        raise
      if diskspace.is_full(e):  # one raised where colt_jax does not name the path
        fail(_one_line(diskspace.error(e)))
      fail(f'{type(e).__name__}: {_one_line(e)} (run with --debug for the traceback)',
           EXIT_INTERNAL)
    finally:
      restore()

  app.run(wrapped, argv=argv, flags_parser=_parse_flags)


__all__ = ('run', 'fail', 'EXIT_BAD_INPUT', 'EXIT_INTERNAL', 'EXIT_TERMINATED',
           'EXIT_INTERRUPTED')
