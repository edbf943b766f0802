"""Real CoLT model directories trained on every topic of a dataset (`make model`,
`experiments/make_model.py`), each saved with g, phi and its inference settings:

* `recommended`: the method the reproduction's rule chose on dev (`recommendation.RULE` over
  the cached inner-fold scores of dev, `recommended`), with the setting that row chose on
  dev's inner folds (its list rule and parameters, phi's checkpoint, a), its feature views
  (a view store of every topic, written beside the text stores and named in the model
  directory: `model_dirs.recorded_store`) and, for a relevance row, its relevance model
  fitted on every topic;
* `colt`: the paper's method in this repo's tuned configuration;
* `colt-pairs-text-only`: colt-pairs on text features alone (the row a collection without
  official descriptors can use; `colt-pairs` before the recommended row).

Resumable: trainings resume from their checkpoints; finished ones and the view store are reused.
"""
import dataclasses
import os
import time
from typing import Optional

from colt_jax.data import features as features_lib
from colt_jax.data import folds as folds_lib
from colt_jax.data import splits as data_lib
from colt_jax.data import views as views_lib
from colt_jax.encoders import stores
from colt_jax.evaluation import methods as evaluation
from colt_jax.inference import default_model
from colt_jax.pairs import relevance_model as relevance_lib
from colt_jax.reproduction import recommendation
from colt_jax.reproduction import reproduce_config
from colt_jax.reproduction import row_cache
from colt_jax.reproduction import row_training
from colt_jax.reproduction import variants
from colt_jax.util import devices
from colt_jax.util import outputs
from colt_jax.util.errors import InputError

RECOMMENDED = recommendation.NAME
TEXT_ONLY = 'colt-pairs-text-only'
# Row -> the reproduction's variant it trains (the recommended row's: read from the row cache),
# in the order `make model` builds them: first the row a collection of your own can use.
ROWS = {TEXT_ONLY: 'colt-pairs text-only tokens', RECOMMENDED: '', 'colt': 'colt'}
OLD_NAMES = default_model.RENAMED_ROWS  # documented names of rows since renamed
# search.py's hint for a row not built yet names these rows (colt_jax.inference.default_model).
assert tuple(ROWS) == default_model.MAKE_MODEL_ROWS, (tuple(ROWS), default_model.MAKE_MODEL_ROWS)
PROTOCOL = 'pool'  # whose dev choice the recommended row takes (the report's headline)
# Folders relative to the working folder (make_model.py's --out and --rows_dir).
DEFAULT_OUT = default_model.MODELS_DIR
DEFAULT_ROWS_DIR = row_cache.committed_rows_dir('div400')
# What search.py and serve.py search with when no --model is given: `make model` writes it
# where colt_jax.inference.default_model looks (model_name of div400's recommended row).
RECOMMENDED_MODEL = default_model.RECOMMENDED_MODEL


@dataclasses.dataclass(frozen=True)
class Recommended:
  """The recommended row as chosen on dev: the rule's choice and the variant to train."""
  choice: recommendation.Choice
  chosen: dict  # the setting the row chose on dev's inner folds ('coverage choice' record)
  variant: variants.Variant  # that row with `chosen` applied


def recommended(cfg: reproduce_config.ReproduceConfig,
                rows_dir: str = DEFAULT_ROWS_DIR) -> Recommended:
  """RULE over the official (dev) choice records of the row cache `rows_dir`, and the chosen
  row's setting from its own record; a one-line InputError when they are missing."""
  cache = row_cache.RowCache(rows_dir, own_folder=False)
  choice = recommendation.official_choice(cache.saved_row, PROTOCOL)
  name = f'coverage choice {choice.chosen} ({PROTOCOL})' if choice else ''
  record = cache.saved_row('official', name) if choice else None
  if not record or not isinstance(record.get('chosen'), dict):
    raise InputError(
        f'{rows_dir}: no dev choice of the recommended method (the official `coverage choice '
        f'<row> ({PROTOCOL})` records of {", ".join(recommendation.CANDIDATES)}): run '
        'experiments/reproduce.py, pass --rows_dir, or --rows colt,' + TEXT_ONLY)
  chosen = dict(record['chosen'])
  unknown = sorted(set(chosen) - {f.name for f in dataclasses.fields(variants.Variant)})
  if unknown:
    raise InputError(f'{cache.row_path("official", name)}: unknown settings {unknown}')
  base = cfg.own_schedule(variants.row(choice.chosen))
  if cfg.dataset == 'synthetic':  # no descriptors: text-only, as the reproduction runs it
    base = dataclasses.replace(base, views=None)
  return Recommended(choice, chosen, dataclasses.replace(base, **chosen))


def view_store_dir(cfg: reproduce_config.ReproduceConfig, spec: views_lib.ViewSpec) -> str:
  """<text stores>-<view name>/all: the view store of every topic, beside the text stores."""
  text = cfg.features_root or os.path.dirname(
      stores.default_store_dir(cfg.dataset, cfg.encoder, 'dev'))
  return os.path.join(f'{os.path.normpath(text)}-{spec.name}', 'all')


def view_data(cfg: reproduce_config.ReproduceConfig, everything: tuple,
              spec: Optional[views_lib.ViewSpec], log=print) -> tuple:
  """((split, store), store path) of `everything` under the feature setting `spec`: the view
  store of extract_features.py's --views_* (`stores.view_transform`), its statistics fitted
  on every photo (all are training photos here), written once and read back; text-only:
  `everything` itself and no path."""
  if spec is None or spec.text_only:
    return everything, ''
  split, text = everything
  path = view_store_dir(cfg, spec)
  old = (features_lib.load(path)
         if os.path.isfile(os.path.join(path, 'meta.json')) else None)
  views = (old.meta.get('views') or {}) if old is not None else {}
  if (old is not None and views.get('fit_split') == split.split
      and views_lib.ViewSpec(**views.get('spec', {})) == spec
      and list(old.photo_ids) == list(text.photo_ids)):
    log(f'views: reusing {path}')
    return (split, old), path
  log(f'views: writing {path} ({spec.name}, statistics of all {len(split.topics)} topics)')
  features_lib.write(path, stores.view_transform(spec, split, split)(text))
  return (split, features_lib.load(path)), path


def build(cfg: reproduce_config.ReproduceConfig, out: str, workdir: str = '', seed: int = 0,
          rows=tuple(ROWS), coverage_weight: float = 0.5, rows_dir: str = DEFAULT_ROWS_DIR,
          log=print) -> dict:
  """Trains the `rows` on every topic of `cfg.dataset` (dev and test) and saves their model
  directories under `out`; returns {row: model directory}. `coverage_weight`: w of the
  text-only colt-pairs row; `rows_dir`: the row cache the recommended row is read from. One
  build of `out` at a time (`outputs.exclusive`): a second stops at once, naming the first."""
  with outputs.exclusive(out, 'the model directories', flag='--out'):
    return _build(cfg, out, workdir, seed, rows, coverage_weight, rows_dir, log)


def _build(cfg, out, workdir, seed, rows, coverage_weight, rows_dir, log) -> dict:
  rows = tuple(dict.fromkeys(OLD_NAMES.get(r, r) for r in rows))
  unknown = [r for r in rows if r not in ROWS]
  if unknown:
    raise InputError(f'--rows: unknown {unknown}; expected some of {", ".join(ROWS)}')
  picked = recommended(cfg, rows_dir) if RECOMMENDED in rows else None  # before any writing
  if picked:
    log(f'{RECOMMENDED}: {picked.choice.chosen} (chosen on dev by the rule: '
        + ', '.join(f'{c} {s:.4f}' for c, s in picked.choice.scores.items())
        + f'), its dev setting {picked.chosen}')
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
    started = time.monotonic()
    if row == RECOMMENDED:
      variant = picked.variant
    else:
      variant = variants.row(ROWS[row])
      if variant.selection == 'coverage':
        variant = dataclasses.replace(variant, coverage_weight=coverage_weight, coverage_of='')
    data, store = view_data(cfg, everything, variant.view_spec, log)
    scl_cfg, ttc_cfg = trainer.train(variant, seed, data, 'all', PROTOCOL)
    params = row_training.colt_params(variant, scl_cfg, ttc_cfg,
                                      irrelevant_threshold=cfg.threshold_for(PROTOCOL))
    model = evaluation.colt_retriever(params)  # phi at the chosen checkpoint (ttc_step)
    if variant.relevance_mixes and variant.relevance_mix:  # fitted on every topic
      folder = row_training.relevance_model(root, data, 'all', PROTOCOL, ttc_cfg.num_images, log)
      model = model.with_relevance_model(relevance_lib.load(folder), variant.relevance_mix)
    saved[row] = model.save_pretrained(os.path.join(out, model_name(cfg, row)), store=store)
    log(f'{row}: {saved[row]}' + (f' (search it over {store})' if store else '')
        + f', in {(time.monotonic() - started) / 60:.1f} min')
  return saved


def model_name(cfg: reproduce_config.ReproduceConfig, row: str) -> str:
  return f'{cfg.dataset}-{cfg.encoder}-{row}'
