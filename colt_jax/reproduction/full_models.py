"""Real CoLT model directories trained on every topic of a dataset (`make model`,
`experiments/make_model.py`): the `colt` row (the paper's method in this repo's tuned
configuration) and the `colt-pairs` row, each saved with g, phi and its inference settings.
Resumable: trainings resume from their checkpoints; finished ones are reused.
"""
import dataclasses
import os

from colt_jax.data import folds as folds_lib
from colt_jax.data import splits as data_lib
from colt_jax.inference import retriever
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_training
from colt_jax.reproduction import variants
from colt_jax.util import devices
from colt_jax.util import outputs

ROWS = {'colt': 'colt', 'colt-pairs': 'colt-pairs text-only tokens'}


def build(cfg: reproduce_config.ReproduceConfig, out: str, workdir: str = '', seed: int = 0,
          rows=tuple(ROWS), coverage_weight: float = 0.5, log=print) -> dict:
  """Trains the `rows` on every topic of `cfg.dataset` (dev and test) and saves their model
  directories under `out`; returns {row: model directory}."""
  if workdir and os.path.abspath(workdir) == os.path.abspath(os.path.join(out, 'training')):
    workdir = ''  # the default: a tree of --out's
  if workdir:  # checked before anything is written to either
    outputs.check_writable_dir(workdir, 'the trainings', flag='--workdir')
  outputs.claim_dir(out, 'the model directories', trees=('training',) + tuple(
      model_name(cfg, r) for r in ROWS), flag='--out')
  if workdir:
    outputs.claim_dir(workdir, 'the trainings', trees=('train', 'jax_cache'), flag='--workdir')
  root = workdir or os.path.join(out, 'training')
  if cfg.compilation_cache:
    devices.use_compilation_cache(os.path.join(root, 'jax_cache'))
  parts = []
  for split in ('dev', 'test'):
    store = '' if cfg.dataset == 'synthetic' else row_training.ensure_features(cfg, split, log)
    parts.append(data_lib.load(cfg.dataset, split, cfg.data_dir, store))
  everything = folds_lib.merge(parts, 'all')
  log(f'training on all {len(everything[0].topics)} topics ({everything[1].dim}-d '
      f'{everything[1].meta.get("encoder")} features) -> {root}')
  trainer = row_training.Trainer(cfg, root, log)
  saved = {}
  for row in rows:
    variant = next(v for v in variants.VARIANTS if v.name == ROWS[row])
    if variant.selection == 'coverage':
      variant = dataclasses.replace(variant, coverage_weight=coverage_weight, coverage_of='')
    scl_cfg, ttc_cfg = trainer.train(variant, seed, everything, 'all', 'pool')
    params = row_training.colt_params(variant, scl_cfg, ttc_cfg,
                                  irrelevant_threshold=cfg.threshold_for('pool'))
    model = retriever.Retriever.from_checkpoints(
        scl_cfg.workdir if scl_cfg else None, ttc_cfg.workdir, params.inference_settings())
    saved[row] = model.save_pretrained(os.path.join(out, model_name(cfg, row)))
    log(f'{row}: {saved[row]}')
  return saved


def model_name(cfg: reproduce_config.ReproduceConfig, row: str) -> str:
  return f'{cfg.dataset}-{cfg.encoder}-{row}'
