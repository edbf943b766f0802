"""Writes the synthetic Div400-like dataset (official layout + feature stores).

  python data_prep/make_synthetic.py --seed 0 --out work/synthetic-seed0

See `colt_jax/data/synthetic.py` for the generative model.
"""
import os

from absl import flags

from colt_jax.util import cli
from colt_jax.util import flagcheck
from colt_jax.data import synthetic

# Topics get photo ids 10,000,000 + ~1,000 apart and dims a float32 row each: sane bounds,
# and the memory the whole dataset needs is checked before it is drawn.
MAX_TOPICS = 100_000
MAX_DIM = 65_536

_SEED = flags.DEFINE_integer('seed', 0, 'Random seed: the dataset is a function of it.',
                             lower_bound=0, upper_bound=flagcheck.MAX_SEED)
_OUT = flags.DEFINE_string('out', None, 'Output directory (default work/synthetic-seed<seed>).')
_DEV_TOPICS = flags.DEFINE_integer('dev_topics', synthetic.SyntheticConfig.dev_topics,
                                   'Topics in the dev split.', lower_bound=1,
                                   upper_bound=MAX_TOPICS)
_TEST_TOPICS = flags.DEFINE_integer('test_topics', synthetic.SyntheticConfig.test_topics,
                                    'Topics in the test split.', lower_bound=1,
                                    upper_bound=MAX_TOPICS)
_DIM = flags.DEFINE_integer('dim', synthetic.SyntheticConfig.dim, 'Feature dimension.',
                            lower_bound=2, upper_bound=MAX_DIM)


def main(argv):
  del argv
  out = _OUT.value or os.path.join('work', f'synthetic-seed{_SEED.value}')
  cfg = synthetic.SyntheticConfig(dev_topics=_DEV_TOPICS.value, test_topics=_TEST_TOPICS.value,
                                  dim=_DIM.value)
  flagcheck.check_memory(flagcheck.flags_text({'dev_topics': cfg.dev_topics,
                                               'test_topics': cfg.test_topics, 'dim': cfg.dim}),
                         flagcheck.synthetic_bytes(cfg), 'the synthetic dataset')
  path = synthetic.generate(out, seed=_SEED.value, config=cfg)
  print(f'wrote {path}: devset/keywords, testset/keywords, features/dev, features/test')


if __name__ == '__main__':
  cli.run(main)
