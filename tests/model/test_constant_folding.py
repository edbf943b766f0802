"""No program of the SCL step makes XLA fold large constants while compiling (issue 64 item 4).

XLA's constant folding evaluates, at compile time and in its slow HLO interpreter, every
instruction whose operands are constants (or broadcasts of one). A large one (a mask of
constant zeros of [B, M C] reduced in windows, as Eq. 2's numerator once was) took over a
second on a busy machine and printed `E... slow_operation_alarm.cc ... Constant folding an
instruction is taking > 1s` with a page of HLO in the middle of `make demo`. This test compiles
the programs at the demo's sizes with XLA's dump of that pass and lists what it folded: nothing
over FOLDED_LIMIT elements. No timing is involved, so it holds on any machine.
"""
import glob
import math
import os
import re
import subprocess
import sys
from checkout import REPO  # pylint: disable=g-bad-import-order


FOLDED_LIMIT = 4096  # elements of a folded instruction's operands or result
_LINE = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = \w+\[([\d,]*)\]\S* ([\w-]+)\((.*)$')

# The SCL loss (Eq. 2) and bank update (Eq. 3) at make demo's sizes: B=32 queries, M=320
# images, C=32 prototypes, d=64.
PROGRAM = '''
import functools, jax, jax.numpy as jnp
from colt_jax.model import scl
B, M, C, D = 32, 320, 32, 64
h, q = jnp.ones((B, M, D)), jnp.ones((B, D))
rel, cat, bank = jnp.ones((B, M), bool), jnp.zeros((B, M), jnp.int32), jnp.ones((C, D))
jax.jit(functools.partial(scl.scl_loss, tau=0.1)).lower(q, h, rel, cat, rel, bank).compile()
jax.jit(functools.partial(scl.update_bank, alpha=0.01)).lower(bank, h, cat, rel).compile()
'''


def _parse(text: str) -> dict:
  """name: (opcode, elements, operand names, the line) of each HLO instruction."""
  out = {}
  for line in text.splitlines():
    m = _LINE.match(line)
    if m:
      name, dims, op, rest = m.groups()
      size = math.prod(int(d) for d in dims.split(',')) if dims else 1
      out[name] = (op, size, re.findall(r'%([\w.\-]+)', rest.split('),')[0]), line.strip())
  return out


def large_folds(dump_dir: str, limit: int = FOLDED_LIMIT) -> list:
  """The instructions XLA's constant folding replaced (present before the pass, gone after
  it, every operand a constant or a broadcast) with an operand or result over `limit`
  elements."""
  found = []
  for before_path in sorted(glob.glob(os.path.join(dump_dir, '*before_constant_folding.txt'))):
    stem = before_path.rsplit('.', 5)[0]
    after_paths = [p for p in sorted(glob.glob(stem + '*after_constant_folding*'))
                   if p > before_path][:1]
    if not after_paths:
      continue
    with open(before_path) as f:
      before = _parse(f.read())
    with open(after_paths[0]) as f:
      after = _parse(f.read())
    for name, (op, size, operands, line) in before.items():
      if (name in after or op in ('constant', 'parameter') or not operands
          or not all(o in before and before[o][0] in ('constant', 'broadcast')
                     for o in operands)):
        continue
      if max([size] + [before[o][1] for o in operands]) > limit:
        found.append(line[:200])
  return found


def _compile_with_dump(program: str, dump_dir: str) -> None:
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu',
             XLA_FLAGS=f'--xla_dump_to={dump_dir} --xla_dump_hlo_pass_re=constant_folding')
  env.pop('JAX_COMPILATION_CACHE_DIR', None)  # compiled here, not read back
  out = subprocess.run([sys.executable, '-c', program], env=env, capture_output=True,
                       text=True, timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-3000:]


def test_scl_programs_fold_no_large_constant(tmp_path):
  _compile_with_dump(PROGRAM, str(tmp_path))
  assert glob.glob(str(tmp_path / '*scl_loss*before_constant_folding.txt'))  # the pass ran
  assert large_folds(str(tmp_path)) == []


def test_the_check_finds_a_large_fold(tmp_path):
  """Eq. 2's numerator as it was (a logsumexp over all 2M + M C terms with a mask of constant
  zeros over the last M + M C): the check names the fold it made XLA do."""
  program = '''
import jax, jax.numpy as jnp
from colt_jax.model import scl
B, M, C = 32, 320, 32
def numerator(s_query, s_own, s_bank, rel, irr):
  pair4 = jnp.broadcast_to(irr[:, :, None], s_bank.shape).reshape(B, -1)
  logits = jnp.concatenate([s_query, s_own, s_query, s_bank.reshape(B, -1)], axis=1)
  mask = jnp.concatenate([rel, rel, jnp.zeros_like(rel), jnp.zeros_like(pair4)], axis=1)
  return scl._masked_logsumexp(logits, mask)
s, m = jnp.ones((B, M)), jnp.ones((B, M), bool)
jax.jit(numerator).lower(s, s, jnp.ones((B, M, C)), m, m).compile()
'''
  _compile_with_dump(program, str(tmp_path))
  found = large_folds(str(tmp_path))
  assert found and all('constant' in line or 'broadcast' in line for line in found), found
