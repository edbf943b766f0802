"""Per-topic figures: f's and g's features (UMAP), ground-truth clusters, phi's categories and
the top-20 of top-k, MMR, UMONS and CoLT (`colt_jax/reproduction/figures.py`).

  python experiments/visualize.py                      # synthetic default (after make demo)
  python experiments/visualize.py --dataset div400 --split test --topics 262,300 \\
      --model MODEL_DIR --out docs/figures

MMR's and UMONS's settings are tuned on the dev split (F1@20, pool protocol), as everywhere
else; CoLT is the model directory's `Retriever` (or --scl_checkpoint/--ttc_checkpoint).
"""
import dataclasses
import os

from absl import flags

from colt_jax.util import cli
from colt_jax.train import configs
from colt_jax.data import splits as data_lib
from colt_jax.evaluation import methods as evaluation
from colt_jax.evaluation import result_sets
from colt_jax.util import flagcheck
from colt_jax.util import outputs
from colt_jax.util.errors import InputError
from colt_jax.reproduction import figures

_DATASET = flags.DEFINE_enum('dataset', 'synthetic', list(data_lib.DATASETS), 'Dataset.')
_SPLIT = flags.DEFINE_enum('split', 'test', ['dev', 'test'], 'Split whose topics are drawn.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Dataset root (default: the synthetic default '
                                'or $DIV400_ROOT / $DIV150CRED_ROOT).')
_FEATURES = flags.DEFINE_string('features_dir', '', 'Feature store of --split (default: the '
                                'dataset\'s default store).')
_DEV_FEATURES = flags.DEFINE_string('dev_features_dir', '', 'Feature store of dev (tuning).')
_TOPICS = flags.DEFINE_list('topics', [], 'Topic numbers (default: the split\'s first two).')
_OUT = flags.DEFINE_string('out', os.path.join('work', 'figures'), 'Folder for the PNGs.')
_SEED = flags.DEFINE_integer('seed', 0, 'UMAP seed.', lower_bound=0,
                             upper_bound=flagcheck.MAX_SEED)
# CoLT (--model, or --scl_checkpoint/--ttc_checkpoint with the inference flags), as in
# evaluate.py; the synthetic default's model: work/demo-seed0/model (make demo).
configs.define_flags(evaluation.MethodParams)


def main(argv):
  del argv
  # Every flag and the output folder checked before any work; the folder is made last.
  topics = flagcheck.parse_ints('--topics', _TOPICS.value, low=0, nonempty=False)
  outputs.check_writable_dir(_OUT.value, 'figures', flag='--out')  # before any data is read
  params = configs.from_flags(evaluation.MethodParams)
  if not params.model and not params.ttc_checkpoint and _DATASET.value == 'synthetic':
    model = os.path.join('work', 'demo-seed0', 'model')
    if not os.path.isdir(model):
      raise InputError(f'{model}: no model yet; run `make demo` first or pass --model')
    params = dataclasses.replace(params, model=model)
  split, store = data_lib.load(_DATASET.value, _SPLIT.value, _DATA_DIR.value, _FEATURES.value)
  unknown = [t for t in topics if t not in split.topic_numbers]
  if unknown:
    shown = ', '.join(map(str, split.topic_numbers[:5]))
    raise InputError(f'--topics: topic {unknown[0]} is not in {split.dataset}/{split.split} '
                     f'(its topics: {shown}{", ..." if len(split.topic_numbers) > 5 else ""})')
  topics = list(topics) or split.topic_numbers[:2]
  colt = evaluation.colt_retriever(params)
  dev, dev_store = data_lib.load(_DATASET.value, 'dev', _DATA_DIR.value, _DEV_FEATURES.value)
  result_sets.check_same_dim(dev_store, store, split.split)
  for method in ('mmr', 'umons'):
    params, _ = evaluation.tune(method, dev, dev_store, 'pool', params)
  out = outputs.claim_dir(_OUT.value, 'figures', flag='--out')
  for picture in figures.topic_pictures(split, store, colt, params, topics, seed=_SEED.value):
    name = f'{split.dataset}-{split.split}-topic{picture.topic}.png'
    outputs.record(out, files=(name,))
    path = figures.draw(picture, os.path.join(out, name))
    print(f'topic {picture.topic} ({picture.title}): {path}')


if __name__ == '__main__':
  cli.run(main)
