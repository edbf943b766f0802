r"""Turns your own relevance judgments (a CSV) into a dataset in the official MediaEval layout.

  python data_prep/make_dataset.py --csv judgments.csv --out work/data/my-judgments
  python data_prep/make_dataset.py --csv judgments.csv --out DIR --dev_fraction 0.6 --seed 1

The CSV has a header line and one judgment per line: query, photo (an image path, relative
to the CSV's folder, or a photo id), caption (optional column), relevance (1, 0 or -1) and
cluster (a name or an integer id; required for relevant photos, empty otherwise), and
optionally split (dev or test; without it --dev_fraction of the queries go to dev by a seeded
draw). Every command then reads DIR as --dataset div400 --data_dir DIR (docs/COLLECTIONS.md,
"Your own judgments"); DIR/configs/ holds trainer flagfiles for it (experiments/choose_steps.py
--config_dir DIR/configs writes its choices there). Image files are copied into DIR (never
moved or changed), for extract_features.py --encoder clip; --nocopy_images records their
paths only. Bad input: one line naming the CSV, the line and the field, before anything is
written. DIR is written only when new, empty, or written by colt_jax (then replaced whole).
See colt_jax/data/judgments.py.
"""
import os

from absl import flags

from colt_jax.util import cli
from colt_jax.util import flagcheck
from colt_jax.data import judgments
from colt_jax.util.errors import InputError

_TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          'experiments', 'configs', 'tuned')

_CSV = flags.DEFINE_string('csv', None, 'The judgments CSV (UTF-8, with a header line).')
_OUT = flags.DEFINE_string('out', None, 'The dataset folder to write (new, empty, or one '
                           'colt_jax wrote).')
_DEV_FRACTION = flags.DEFINE_float(
    'dev_fraction', judgments.DEFAULT_DEV_FRACTION, 'Fraction of the queries in the dev split '
    '(rounded; each split needs >= 2 queries). Not with a split column.', lower_bound=0.0,
    upper_bound=1.0)
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the dev/test draw of the queries.',
                             lower_bound=0, upper_bound=flagcheck.MAX_SEED)
_COPY_IMAGES = flags.DEFINE_bool(
    'copy_images', True, 'Copy the image files the CSV names into <out>/<split>/keywords/img/ '
    '(for --encoder clip); --nocopy_images only records their paths.')
_CONFIG_TEMPLATES = flags.DEFINE_string(
    'config_templates', _TEMPLATES, 'Folder of div400_scl.flags and div400_ttc.flags (the '
    'tuned ones), made into <out>/configs/; empty = write no configs.')
_ALLOW_OUTSIDE = flags.DEFINE_bool(
    'allow_outside_paths', False, 'Accept image paths outside the CSV\'s folder tree (absolute '
    'paths, ../, links out); without it such a line is refused.')


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  for flag in (_CSV, _OUT):
    if not flag.value:
      raise InputError(f'--{flag.name} is required')
  fraction = _DEV_FRACTION.value if _DEV_FRACTION.present else None
  if fraction is not None and not 0.0 < fraction < 1.0:
    raise InputError(f'--dev_fraction must be in (0, 1), got {fraction}')
  summary = judgments.make_dataset(
      _CSV.value, _OUT.value, dev_fraction=fraction, seed=_SEED.value,
      copy_images=_COPY_IMAGES.value, config_templates=_CONFIG_TEMPLATES.value or None,
      allow_outside=_ALLOW_OUTSIDE.value)
  q = summary.queries
  print(f'wrote {summary.path}: {len(q["dev"])} dev and {len(q["test"])} test queries, '
        f'{summary.photos} photos, {summary.judgments} judgments, {summary.images_copied} '
        'images copied' + (f', trainer flagfiles in {summary.configs}' if summary.configs
                           else ''))
  print(f'read it with --dataset {judgments.LAYOUT} --data_dir {summary.path}')


if __name__ == '__main__':
  cli.run(main)
