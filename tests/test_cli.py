"""colt_jax.cli: exit status 2 for bad input, 1 for internal errors, one line, --debug."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = textwrap.dedent('''
    import sys
    from absl import flags
    from colt_jax import cli
    from colt_jax.errors import InputError
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
  return subprocess.run([sys.executable, str(prog), *args], capture_output=True, text=True,
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


def test_debug_shows_the_traceback(tmp_path):
  for proc in (_run(tmp_path, '--debug', 'bad'),
               _run(tmp_path, 'bad', env={'COLT_JAX_DEBUG': '1'})):
    assert proc.returncode != 0
    assert 'Traceback' in proc.stderr and 'some.csv:3' in proc.stderr
