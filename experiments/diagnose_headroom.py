r"""How far could better heads take colt-pairs' list rule? Its lists rebuilt from oracle heads.

  python experiments/diagnose_headroom.py --dataset div400 --data_dir ../shared/data/div400

After `experiments/reproduce.py` (its cross-validation rows and their trainings in the work
folder): per held-out topic, the `colt-pairs rule` row's lists rebuilt by its own rule from
phi's relevance and pair heads, from the ground truth in place of either or both, and from
phi's pair head mixed with the ground truth (`experiments/headroom.py`), scored by the
official scorer. Writes --out (default docs/results/<dataset>-headroom.json), prints the
table; `reproduce.py --report_only` adds it to docs/RESULTS.md. About 30 seconds in all on
2 cores. A bound that reads held-out ground truth: it chooses nothing.
"""
from absl import flags
from absl import logging

from colt_jax.util import cli
import diagnosis_cli
import headroom

flags.adopt_module_key_flags(diagnosis_cli)  # --dataset, --data_dir, --folds, --out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  out = diagnosis_cli.out_path(headroom.headroom_path)
  result = headroom.diagnose(diagnosis_cli.reproduce_config(),
                             log=lambda text: print(text, flush=True))
  result['command'] = diagnosis_cli.command('diagnose_headroom.py')
  diagnosis_cli.write(out, result)
  print('\n'.join(headroom.summary_lines(result)))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
