"""The candidate-engine flags of the commands that search a store (search.py, serve.py), and
the EngineSpec they ask for."""
from absl import flags

from colt_jax.engines import approximate as engines
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError

ENGINE = flags.DEFINE_enum('engine', 'exact', engines.ENGINES, 'The candidate engine '
                           '(colt_jax/engines/approximate.py): exact JAX search, FAISS or Qdrant.')
NPROBE = flags.DEFINE_integer('nprobe', 32, 'faiss-ivf/ivfsq/ivfpq: cells searched.',
                              lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
EF_SEARCH = flags.DEFINE_integer('ef_search', 256, 'faiss-hnsw/qdrant: search beam.',
                                 lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
QDRANT_URL = flags.DEFINE_string('qdrant_url', '', 'qdrant: a server URL (default: the '
                                 'embedded local mode, in memory).')

# Each engine flag and the engines it applies to.
APPLIES_TO = {'nprobe': ('faiss-ivf', 'faiss-ivfsq', 'faiss-ivfpq'),
              'ef_search': ('faiss-hnsw', 'qdrant'), 'qdrant_url': ('qdrant',)}


def check(engine: str, given: dict) -> None:
  """Refuses an engine flag given (`given`: flag -> whether present) for another engine."""
  for flag, names in APPLIES_TO.items():
    if given.get(flag) and engine not in names:
      raise InputError(f'--{flag} applies to --engine {" or ".join(names)}, not {engine}')


def spec() -> engines.EngineSpec:
  """The EngineSpec the parsed flags ask for (a flag given for another engine: one line)."""
  check(ENGINE.value, {f: flags.FLAGS[f].present for f in APPLIES_TO})
  return engines.EngineSpec(ENGINE.value, nprobe=NPROBE.value, ef_search=EF_SEARCH.value,
                            url=QDRANT_URL.value)
