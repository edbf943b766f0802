r"""Extracts frozen-encoder features of one split into a feature store.

  python data_prep/extract_features.py --dataset div400 --data_dir $DIV400_ROOT --split test \
      --encoder clip --model openai/clip-vit-base-patch32 --out work/features/div400-clip/test

  python data_prep/extract_features.py --dataset div400 --split test --encoder minilm

`--encoder clip` encodes photos from `<split dir>/img/<topic title>/<photo id>.jpg`, queries
(topic titles) and category names with FlaxCLIPModel and CLIP's own preprocessing.

`--encoder minilm` is TEXT ONLY: photos are represented by their metadata text (title, tags,
description without HTML, truncated to 256 tokens), queries by their titles, categories by
their names, embedded with all-MiniLM-L6-v2. It measures the diversification machinery, not
CLIP; its numbers are not comparable with the paper's.

The `--views_*` flags write a view store (colt_jax/data/views.py), the features of
colt_jax/reproduction/pipeline.py's view rows (`colt + descvis`, `colt + descvis + metadata`): each
photo row is [t, w_d * d, w_m * m] / sqrt(1 + w_d^2 + w_m^2) with t the encoder's unit feature,
d the official descriptors of --views_descriptors (each z-scored with the mean and std of the
photos of --views_fit_split, default dev: a test store never takes its own statistics; unit
norm per descriptor, concatenated, / sqrt(count)), m the one-hots of the photo's user and day
taken (/ sqrt(2)), w_d = --views_descriptor_weight and w_m = --views_metadata_weight; queries
and categories are [q, 0, 0]. The fitted statistics go into meta.json 'views'. Any command that
reads a store (--features_dir) takes a view store:

  python data_prep/extract_features.py --dataset div400 --split test --encoder minilm \
      --views_descriptors=CM,CM3x3,CN,CN3x3,CSD,GLRLM,GLRLM3x3,HOG,LBP,LBP3x3

`--source tfds` reads the split through the TFDS dataset `div400` / `div150cred`
(colt_jax/data/tfds_builders.py) in --tfds_data_dir, built there first from --data_dir
(the official root) when it is not there yet; images are then the bytes stored in the
dataset. It gives the same store (rows, ids, order, values; meta.json adds 'tfds', the
dataset read) and the same resume settings as the default `--source official`, which reads
the official layout directly:

  python data_prep/extract_features.py --dataset div400 --data_dir $DIV400_ROOT --split dev \
      --encoder minilm --source tfds --tfds_data_dir work/tfds

Work is saved in shards under `<out>.partial/`; rerunning the same command after an
interruption resumes without recomputing finished shards (other settings are refused). The
store is written atomically and the partial directory removed at the end. Photos without an
image file stop the run (their ids are listed) unless --allow_missing, which leaves them out
of the store (and records them in meta.json 'missing_photos'); training and evaluation then
refuse the store if those photos are in the ground truth.

Every photo's image is checked before any encoding (decoded at a reduced size). A dataset's
photo list is fixed by its metadata, so by default (--max_bad_fraction=0) a photo whose image
cannot be read (not an image, corrupt, truncated) stops the run with one line naming the first
such file and how many there are, and nothing written. With --max_bad_fraction above 0, up to
that share of the split's photos is left out of the store as --allow_missing leaves missing
photos (listed in meta.json 'bad_images' with the reason); training and evaluation then refuse
the store if those photos are in the ground truth.
"""

from absl import app
from absl import flags
from absl import logging

from colt_jax.util import cli
from colt_jax.data import splits as data
from colt_jax.util import distributed
from colt_jax import encoders
from colt_jax.util import flagcheck
from colt_jax.data import views as views_lib
from colt_jax.data import tfds_builders
from colt_jax.data import tfds_splits
from colt_jax.data.vocabulary import CategoryVocabulary
from colt_jax.encoders import extract
from colt_jax.encoders import stores
from colt_jax.util.errors import InputError

_DATASET = flags.DEFINE_enum('dataset', 'div400', data.DATASETS, 'Dataset to encode.')
_DATA_DIR = flags.DEFINE_string(
    'data_dir', '', 'Dataset root (or the split directory); default $DIV400_ROOT / '
    '$DIV150CRED_ROOT.')
_SPLIT = flags.DEFINE_enum('split', 'test', data.SPLITS, 'Split to encode.')
_SOURCE = flags.DEFINE_enum(
    'source', 'official', ('official', 'tfds'),
    'official: read the official layout under --data_dir. tfds: read the TFDS dataset '
    '(div400, div150cred) in --tfds_data_dir, built first from --data_dir when missing; the '
    'same store and resume settings either way.')
_TFDS_DATA_DIR = flags.DEFINE_string(
    'tfds_data_dir', tfds_builders.DEFAULT_DATA_DIR, '--source tfds: the TFDS data_dir.')
_ENCODER = flags.DEFINE_enum(
    'encoder', 'clip', encoders.ENCODERS,
    'clip: FlaxCLIPModel on images and texts (the paper\'s encoder). minilm: TEXT-ONLY '
    'all-MiniLM-L6-v2 embeddings of photo metadata, titles and names; measures the '
    'diversification machinery, not CLIP.')
_MODEL = flags.DEFINE_string(
    'model', '', 'clip: Hugging Face name or local directory (Flax or safetensors weights, '
    'tokenizer, preprocessor config). minilm: default the packaged all-MiniLM-L6-v2.')
_OUT = flags.DEFINE_string(
    'out', '', 'Feature store directory; default work/features/<dataset>-<encoder>/<split> '
    '(<dataset>-<encoder>-<view name>, e.g. div400-minilm-text+descvis10x1, with --views_*).')
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 64, 'Global batch, split over the devices (rounded up to a multiple of '
    'their number). Not a resume setting.', lower_bound=1,
    upper_bound=flagcheck.MAX_ENCODE_BATCH)
_SHARD_SIZE = flags.DEFINE_integer(
    'shard_size', 1024, 'Items per resumable shard (a resume must use the same value).',
    lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
_NUM_DEVICES = flags.DEFINE_integer('num_devices', 0, 'Local devices to use; 0 = all.',
                                    lower_bound=0, upper_bound=flagcheck.MAX_LAYERS)
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ('float32', 'bfloat16', 'float16'),
                           'Computation dtype of the encoder (features are float32).')
_MAX_LENGTH = flags.DEFINE_integer(
    'max_length', None, 'minilm only: token limit per text (default 256, the model\'s).',
    lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
_ALLOW_MISSING = flags.DEFINE_bool(
    'allow_missing', False, 'Leave photos without an image file out of the store (listed in '
    'meta.json missing_photos) instead of failing. Training/evaluation refuse such a store '
    'when the missing photos are in the ground truth.')
_MAX_BAD_FRACTION = flags.DEFINE_float(
    'max_bad_fraction', 0.0, 'The share of the split\'s photos whose image cannot be read (not '
    'an image, corrupt) that may be left out of the store (listed in meta.json bad_images; '
    'training/evaluation refuse such a store when they are in the ground truth). Default 0: a '
    'dataset\'s photos are fixed by its metadata, so any unreadable image stops the run, '
    'naming the first and the count, before any encoding.', lower_bound=0.0, upper_bound=1.0)
_VIEWS_DESCRIPTORS = flags.DEFINE_list(
    'views_descriptors', [], 'Official visual descriptors (descvis/img) of the view store, '
    f'some of {",".join(views_lib.ALL_DESCRIPTORS)}; empty (default) = no descriptor view.')
_VIEWS_DESCRIPTOR_WEIGHT = flags.DEFINE_float(
    'views_descriptor_weight', 1.0, 'w_d: weight of the descriptor part against the unit text '
    'part (needs --views_descriptors).', lower_bound=0.0)
_VIEWS_METADATA_WEIGHT = flags.DEFINE_float(
    'views_metadata_weight', 0.0, 'w_m: weight of the metadata part (one-hots of the photo\'s '
    'user and day taken); 0 (default) = no metadata view.', lower_bound=0.0)
_VIEWS_FIT_SPLIT = flags.DEFINE_enum(
    'views_fit_split', 'dev', data.SPLITS, 'The split whose photos give the descriptors\' '
    'mean and std (the training split; a test store never takes its own). Needs '
    '--views_descriptors.')
_VOCABULARY_SPLITS = flags.DEFINE_list(
    'vocabulary_splits', ['dev', 'test'], 'Splits whose cluster names make the category '
    'vocabulary (stores of one dataset must share it for training and evaluation to agree; '
    'training reads only the rows of its training topics\' names).')
_PROGRESS = flags.DEFINE_bool('progress', True, 'Show progress bars.')
distributed.define_flags()  # several hosts: each encodes its share of the shards


def _read_tfds(dataset: str, split_names) -> dict:
  """Split name -> `TfdsSplit` read through the TFDS dataset (built first when missing)."""
  if dataset not in tfds_builders.BUILDERS:
    raise app.UsageError(f'--source tfds reads {", ".join(tfds_builders.BUILDERS)}, not '
                         f'{dataset}')
  if _VIEWS_DESCRIPTORS.value:
    raise app.UsageError('--views_descriptors reads descvis/ of the official layout, which the '
                         'TFDS datasets do not hold: use --source official')
  try:
    manual_dir = data.resolve(dataset, split_names[0], _DATA_DIR.value).data_dir
  except InputError:  # no --data_dir nor $..._ROOT: the TFDS dataset must be built already
    manual_dir = None
  try:
    return {s: tfds_splits.load_split(dataset, s, _TFDS_DATA_DIR.value, manual_dir)
            for s in dict.fromkeys(split_names)}
  except AssertionError as e:  # tfds: the manual dir is missing
    raise InputError(str(e)) from None


def _view_spec(split_name: str) -> views_lib.ViewSpec:
  """The feature setting of the --views_* flags, checked (one flag named per error)."""
  names = _VIEWS_DESCRIPTORS.value
  unknown = [d for d in names if d not in views_lib.ALL_DESCRIPTORS]
  if unknown or len(set(names)) != len(names):
    what = f'unknown {",".join(unknown)}' if unknown else 'a name given twice'
    raise app.UsageError(f'--views_descriptors: {what}; '
                         f'expected distinct names among {",".join(views_lib.ALL_DESCRIPTORS)}')
  for flag in ('views_descriptor_weight', 'views_fit_split'):
    if flags.FLAGS[flag].present and not names:
      raise app.UsageError(f'--{flag} needs --views_descriptors (it sets the descriptor view)')
  if names and _VIEWS_FIT_SPLIT.value == split_name == 'test':
    raise app.UsageError('--views_fit_split=test: a held-out store takes the training split\'s '
                         'descriptor statistics (dev), never its own')
  return views_lib.ViewSpec(descriptors=tuple(names),
                            descriptor_weight=_VIEWS_DESCRIPTOR_WEIGHT.value,
                            metadata_weight=_VIEWS_METADATA_WEIGHT.value)


def main(argv):
  del argv
  dataset, split_name = _DATASET.value, _SPLIT.value
  spec = _view_spec(split_name)  # every flag checked before any data is read or folder made
  flagcheck.parse_names('--vocabulary_splits', _VOCABULARY_SPLITS.value, data.SPLITS)
  flagcheck.check_encoding(_ENCODER.value, _MODEL.value, _BATCH_SIZE.value, _MAX_LENGTH.value)
  distributed.initialize_from_flags()
  flagcheck.check_num_devices(_NUM_DEVICES.value)
  out = _OUT.value or stores.default_store_dir(dataset, _ENCODER.value, split_name, spec)
  common = dict(batch_size=_BATCH_SIZE.value, shard_size=_SHARD_SIZE.value,
                allow_missing=_ALLOW_MISSING.value, max_bad_fraction=_MAX_BAD_FRACTION.value,
                progress=_PROGRESS.value)
  result = _extract(dataset, split_name, spec, out, common)
  distributed.finish()
  store = result.store
  if store is None:  # not the chief: the chief wrote the store
    return
  for kind in extract.KINDS:
    if result.computed_items[kind]:
      logging.info('%s: %d items in %.1f s (%.1f items/s), %d shard(s) reused', kind,
                   result.computed_items[kind], result.seconds[kind],
                   result.items_per_second(kind), result.reused_shards[kind])
  views = store.meta.get('views')
  bad = store.meta.get('bad_images')
  print(f'wrote {result.path}: {store.meta["encoder"]}'
        + (f' + views {views["name"]} (statistics of {views["fit_split"]})' if views else '')
        + f', dim {store.dim}, '
        f'{len(store.photo_ids)} photos, {len(store.query_ids)} queries, '
        f'{len(store.category_names)} categories'
        + (f', {len(store.meta["missing_photos"])} missing photos left out'
           if store.meta['missing_photos'] else '')
        + (f', {len(bad)} unreadable photos left out (meta.json bad_images)' if bad else ''))


def _extract(dataset: str, split_name: str, spec: views_lib.ViewSpec, out: str,
             common: dict) -> extract.ExtractResult:
  """The split encoded into the store `out`, read from the official layout or TFDS."""
  if _SOURCE.value == 'official':
    return stores.extract_split(
        dataset, split_name, _ENCODER.value, out, data_dir=_DATA_DIR.value,
        model=_MODEL.value or None, dtype=_DTYPE.value, max_length=_MAX_LENGTH.value,
        vocabulary_splits=_VOCABULARY_SPLITS.value, views=spec,
        views_fit_split=_VIEWS_FIT_SPLIT.value, num_devices=_NUM_DEVICES.value, **common)
  fit_split = [] if spec.text_only else [_VIEWS_FIT_SPLIT.value]
  read = _read_tfds(dataset, [split_name] + fit_split + list(_VOCABULARY_SPLITS.value))
  vocabulary = CategoryVocabulary.from_splits([read[s].split
                                               for s in _VOCABULARY_SPLITS.value])
  extra_meta = {'vocabulary_splits': list(_VOCABULARY_SPLITS.value),
                'tfds': {'name': read[split_name].name,
                         'data_dir': read[split_name].data_dir}}
  return stores.encode_split(
      read[split_name].split, _ENCODER.value, out, vocabulary=vocabulary,
      model=_MODEL.value or None, dtype=_DTYPE.value, max_length=_MAX_LENGTH.value,
      num_devices=_NUM_DEVICES.value, extra_meta=extra_meta,
      image_reader=read[split_name].image_reader,
      transform=None if spec.text_only else stores.view_transform(
          spec, read[split_name].split, read[_VIEWS_FIT_SPLIT.value].split), **common)


if __name__ == '__main__':
  cli.run(main)
