"""colt_jax.util.cli: exit status 2 for bad input, 1 for internal errors, one line, --debug."""
import os
import signal
import subprocess
import sys
import textwrap
import preloaded
from checkout import REPO  # pylint: disable=g-bad-import-order

PROGRAM = textwrap.dedent('''
    import sys
    from absl import flags
    from colt_jax.util import cli
    from colt_jax.util.errors import InputError
    _N = flags.DEFINE_integer('n', 1, 'A number.', lower_bound=1)

    def main(argv):
      if sys.argv[-1] == 'bad':
        raise InputError('some.csv:3: not a number')
      if sys.argv[-1] == 'bug':
        raise KeyError('oops')
      print('ok', _N.value)

    cli.run(main)
''')


def _run(tmp_path, *args, env=None):
  prog = tmp_path / 'prog.py'
  prog.write_text(PROGRAM)
  return preloaded.run([sys.executable, str(prog), *args], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=REPO, **(env or {})))


def test_exit_statuses_and_one_line(tmp_path):
  ok = _run(tmp_path, '--n=3')
  assert ok.returncode == 0 and ok.stdout.strip() == 'ok 3'
  bad = _run(tmp_path, 'bad')
  assert bad.returncode == 2
  assert bad.stderr.strip() == 'prog.py: error: some.csv:3: not a number'
  flag = _run(tmp_path, '--n=0')
  assert flag.returncode == 2 and len(flag.stderr.strip().splitlines()) == 1
  assert '--n' in flag.stderr
  bug = _run(tmp_path, 'bug')
  assert bug.returncode == 1 and len(bug.stderr.strip().splitlines()) == 1
  assert 'internal error: KeyError' in bug.stderr and '--debug' in bug.stderr


def test_a_flagfile_that_is_not_utf8_is_one_line(tmp_path):
  flagfile = tmp_path / 'bad.flags'
  flagfile.write_bytes(b'\xff\xfe--n=3\n')
  for args in ([f'--flagfile={flagfile}'], ['--flagfile', str(flagfile)]):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f'prog.py: error: --flagfile {flagfile}: not UTF-8 text'


def test_debug_shows_the_traceback(tmp_path):
  for proc in (_run(tmp_path, '--debug', 'bad'),
               _run(tmp_path, 'bad', env={'COLT_JAX_DEBUG': '1'})):
    assert proc.returncode != 0
    assert 'Traceback' in proc.stderr and 'some.csv:3' in proc.stderr


TERMINATED_PROGRAM = textwrap.dedent('''
    import signal
    import time
    from colt_jax.util import atomic
    from colt_jax.util import cli
    from colt_jax.util import outputs

    def main(argv):
      folder = argv[1]
      with outputs.ResultSet(folder + '/results', 'results') as out:
        atomic.write_text(out.path('half.txt'), 'half of the results')
        print('writing', flush=True)
        time.sleep(120)

    # Ctrl-C's handler even when this test runs in the background (SIGINT then ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cli.run(main)
''')


def _stopped_mid_write(tmp_path, sig, program: str = None, ready: str = 'writing') -> tuple:
  """Runs `program` (TERMINATED_PROGRAM), sends `sig` once it prints `ready` (its result set
  being written): (exit status, stderr, what its output folder held then, what it holds
  after)."""
  prog, out = tmp_path / 'prog.py', tmp_path / 'out'
  prog.write_text(program or TERMINATED_PROGRAM)
  out.mkdir()
  proc = subprocess.Popen([sys.executable, str(prog), str(out)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO))
  try:
    assert proc.stdout.readline().strip() == ready
    during = [p.name for p in out.iterdir()]
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
  finally:
    proc.kill()
  return proc.returncode, stderr.strip(), during, list(out.iterdir())


def test_sigterm_unwinds_and_leaves_nothing_half_written(tmp_path):
  """SIGTERM in the middle of a result set: its staging folder is removed (as on Ctrl-C or an
  error), the exit status is 143, the message one line."""
  status, stderr, during, after = _stopped_mid_write(tmp_path, signal.SIGTERM)
  assert during[0].startswith('.results.tmp-')  # being written
  assert status == 143
  assert stderr == 'prog.py: terminated by SIGTERM'
  assert after == []


def test_ctrl_c_leaves_nothing_half_written_and_says_so_in_one_line(tmp_path):
  status, stderr, _, after = _stopped_mid_write(tmp_path, signal.SIGINT)
  assert (status, stderr) == (130, 'prog.py: interrupted')
  assert after == []


GC_PROGRAM = textwrap.dedent('''
    import gc
    import sys
    import time
    from colt_jax.util import atomic
    from colt_jax.util import cli
    from colt_jax.util import outputs

    def slow_once(phase, info, calls=[]):
      if phase == 'start' and not calls:
        calls.append(1)
        print('in callback', flush=True)
        time.sleep(2)  # SIGTERM arrives here, where Python would print and drop an exception

    def main(argv):
      with outputs.ResultSet(argv[1] + '/results', 'results') as out:
        atomic.write_text(out.path('half.txt'), 'half of the results')
        gc.callbacks.append(slow_once)
        gc.collect()
        time.sleep(120)

    cli.run(main)
''')


def test_a_sigterm_inside_a_gc_callback_still_unwinds(tmp_path):
  """JAX runs a garbage-collection callback; a SIGTERM that lands in one is delivered again
  a moment later instead of being printed and dropped (the command went on to the end)."""
  status, stderr, _, after = _stopped_mid_write(tmp_path, signal.SIGTERM, GC_PROGRAM,
                                                 ready='in callback')
  assert status == 143, stderr
  assert stderr == 'prog.py: terminated by SIGTERM'
  assert after == []
