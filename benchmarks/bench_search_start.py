r"""search.py's start-up in two checkouts (before and after a change), interleaved in one run:

  git archive 26ce3da | (mkdir -p work/before && tar -x -C work/before)
  python benchmarks/bench_search_start.py --before work/before --reps 7 \
      --out work/bench/search-start.json

`--helpshort`'s wall and CPU time, the modules imported once the flags are parsed, and the
wall and CPU time of a first search over --store (a model-free query; default a store of
--store_photos random rows that says MiniLM made it, written once), medians over --reps
repetitions, for --before and this checkout (colt_jax.benchmarking.library_start). Folders
are relative to the working folder: run from the checkout's root.
"""
import os

from absl import flags

from colt_jax.benchmarking import library_start
from colt_jax.util import cli
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

_BEFORE = flags.DEFINE_string('before', '', 'Another checkout (e.g. an earlier commit, from '
                              'git archive) to measure beside this one.')
_STORE = flags.DEFINE_string('store', 'work/bench/search-start-store', 'The feature store the '
                             'first search searches (a MiniLM or CLIP store: its encoder encodes '
                             '--query); written with --store_photos rows when it is not there.')
_STORE_PHOTOS = flags.DEFINE_integer('store_photos', 2000, 'Photos of the store written when '
                                     '--store is not there.', lower_bound=1)
_QUERY = flags.DEFINE_string('query', 'big ben', 'The first search\'s text query.')
_REPS = flags.DEFINE_integer('reps', 5, 'Repetitions (each runs both checkouts).', lower_bound=1)
_OUT = flags.DEFINE_string('out', '', 'Write the runs and medians as JSON here.')


def main(argv):
  del argv
  if not _BEFORE.value or not os.path.isdir(_BEFORE.value):
    raise InputError(f'--before: no such folder: {_BEFORE.value!r}')
  if _OUT.value:  # checked before anything is measured
    outputs.check_writable_file(_OUT.value, 'the measurements', flag='--out')
  library_start.minilm_store(_STORE.value, _STORE_PHOTOS.value)
  trees = {'before': os.path.abspath(_BEFORE.value), 'after': os.getcwd()}
  result = library_start.measure(trees, _STORE.value, _REPS.value, _QUERY.value)
  print(library_start.table(result))
  if _OUT.value:
    outputs.write_owned_json(_OUT.value, result, 'the measurements', flag='--out')


if __name__ == '__main__':
  cli.run(main)
