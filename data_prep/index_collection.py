r"""Indexes your own photo collection into a feature store (no labels needed).

  python data_prep/index_collection.py --images DIR --encoder clip \
      --model openai/clip-vit-base-patch32 --out work/features/my-photos
  python data_prep/index_collection.py --list photos.csv --encoder clip --model DIR --out STORE
  python data_prep/index_collection.py --list captions.csv --encoder minilm --out STORE

--images: every JPEG/PNG/WebP file under DIR (photo ids: their paths relative to DIR).
--list: a CSV of path[,caption] lines (relative paths are relative to the CSV's folder); the
minilm encoder (text only) reads the captions. Images are decoded upright (EXIF orientation).

Rerun the command when the folder changes: only new and changed photos are encoded (by path and
sha256 of the content; a renamed photo keeps its features), removed ones are dropped, and the
store's engines are rebuilt or updated; meta.json 'changes' says what changed.
--engines faiss-hnsw,qdrant: engines saved with the store (<out>/engines/; default: those it
has; none: drop them). --target_recall 0.95: its IVF engines (faiss-ivf, faiss-ivfsq,
faiss-ivfpq) search the fewest cells that reach this recall@200 of the exact search on 100
sample photos of the collection as queries (engine.json records the choice). Unreadable
images are found before encoding, skipped, printed and listed in meta.json (bad_images); more
than --max_bad_fraction of them stops the run as soon as that many are found. Work is saved
shard by shard in <out>.partial/: rerun the same command to resume after an interruption
(colt_jax/encoders/collection.py).
Several hosts (--coordinator_address, --num_processes, --process_id; a shared file system):
each process encodes every num_processes-th shard, and process 0 writes the store.
Search the store with experiments/search.py.
"""
import os

from absl import flags

from colt_jax.util import cli
from colt_jax.util import distributed
from colt_jax import encoders
from colt_jax.engines import approximate as engines
from colt_jax.engines import saved_engines
from colt_jax.util import flagcheck
from colt_jax.util import outputs
from colt_jax.encoders import collection
from colt_jax.encoders import extract
from colt_jax.util.errors import InputError

_IMAGES = flags.DEFINE_string('images', '', 'A folder tree of images to index.')
_LIST = flags.DEFINE_string('list', '', 'Or: a CSV file of path[,caption] lines.')
_ENCODER = flags.DEFINE_enum('encoder', 'clip', encoders.ENCODERS, 'The frozen encoder f.')
_MODEL = flags.DEFINE_string('model', '', 'clip: a Hugging Face name or local directory; '
                             'minilm: default the packaged all-MiniLM-L6-v2.')
_OUT = flags.DEFINE_string('out', '', 'The feature store to write (a new or colt_jax folder).')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Global batch (split over devices).',
                                   lower_bound=1, upper_bound=flagcheck.MAX_ENCODE_BATCH)
_SHARD_SIZE = flags.DEFINE_integer('shard_size', 1024, 'Photos per resumable shard.',
                                   lower_bound=1, upper_bound=flagcheck.MAX_COUNT)
_NUM_DEVICES = flags.DEFINE_integer('num_devices', 0, 'Local devices to use; 0 = all.',
                                    lower_bound=0, upper_bound=flagcheck.MAX_LAYERS)
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ('float32', 'bfloat16', 'float16'),
                           'Compute dtype of the encoder.')
_MAX_BAD = flags.DEFINE_float('max_bad_fraction', 0.5, 'Stop as soon as more than this share '
                              'of the images cannot be read (fewer are skipped and listed).',
                              lower_bound=0.0, upper_bound=1.0)
_ENGINES = flags.DEFINE_list('engines', None, 'Engines to save with the store and keep up to '
                             f'date: some of {",".join(engines.SAVED_ENGINES)}, or none; '
                             'default: those the store has.')
_TARGET_RECALL = flags.DEFINE_float(
    'target_recall', None, 'IVF engines in --engines: search the fewest cells (nprobe) whose '
    'recall@200 against exact search, on sample photos of the collection, reaches this; '
    '0: nprobe 32. Default: the store\'s saved setting (0 when new).', lower_bound=0.0,
    upper_bound=1.0)
_REHASH = flags.DEFINE_bool('rehash', False, 'Read and hash every file again, even those whose '
                            'size and modification time match the store\'s records.')
_PROGRESS = flags.DEFINE_bool('progress', True, 'Show a progress bar.')
_SHOW_BAD = 20  # unreadable images printed (meta.json lists them all)
distributed.define_flags()  # several hosts: each encodes its share of the shards


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  if bool(_IMAGES.value) == bool(_LIST.value):
    raise InputError('pass exactly one of --images DIR and --list FILE.csv')
  if not _OUT.value:
    raise InputError('--out: where to write the feature store')
  flagcheck.check_encoding(_ENCODER.value, _MODEL.value, _BATCH_SIZE.value)
  saved_engines = _engine_names()
  distributed.initialize_from_flags()
  flagcheck.check_num_devices(_NUM_DEVICES.value)
  source = _IMAGES.value or _LIST.value
  items = (collection.folder_items(_IMAGES.value) if _IMAGES.value
           else collection.list_items(_LIST.value))
  outputs.check_writable_dir(_OUT.value, 'a feature store',
                             flag='--out')  # before the encoder loads
  encoder = encoders.load(_ENCODER.value, _MODEL.value or None, dtype=_DTYPE.value)
  store = collection.index_collection(
      items, encoder, _OUT.value, source=source, batch_size=_BATCH_SIZE.value,
      shard_size=_SHARD_SIZE.value, devices=extract.default_devices(_NUM_DEVICES.value),
      max_bad_fraction=_MAX_BAD.value, progress=_PROGRESS.value, engines=saved_engines,
      rehash=_REHASH.value)
  distributed.finish()
  if store is None:  # not the chief: its shards are in <out>.partial, the chief wrote the store
    return
  print(summary(_OUT.value, store))


def _engine_names():
  """--engines as a list of names (None: keep the store's); with --target_recall, its IVF
  engines as EngineSpecs that pick nprobe for it."""
  target = _TARGET_RECALL.value
  if _ENGINES.value is None:
    if target is not None:
      raise InputError('--target_recall needs --engines naming an IVF engine '
                       f'({", ".join(engines.IVF_ENGINES)})')
    return None
  names = [n.strip() for n in _ENGINES.value if n.strip()]
  if names in ([], ['none']):
    names = []
  unknown = [n for n in names if n not in engines.SAVED_ENGINES]
  if unknown:
    raise InputError(f'--engines: unknown {", ".join(unknown)}; expected some of '
                     f'{",".join(engines.SAVED_ENGINES)}, or none')
  if target is None:
    return names
  if not set(names) & set(engines.IVF_ENGINES):
    raise InputError(f'--target_recall applies to IVF engines ({", ".join(engines.IVF_ENGINES)}'
                     f'); --engines names {",".join(names) or "none"}')
  return [engines.EngineSpec(n, target_recall=target) if n in engines.IVF_ENGINES else n
          for n in names]


def summary(out: str, store) -> str:
  """What the run did: the store, what changed, the engines, the unreadable images."""
  meta = store.meta
  c, bad = meta.get('changes', {}), meta['bad_images']
  verb = 'wrote' if c.get('previous', 'none') == 'none' else 'updated'
  lines = [f'{verb} {out}: {meta["encoder"]}, dim {store.dim}, {len(store.photo_ids)} photos'
           + (f', {len(bad)} unreadable images skipped (listed in meta.json bad_images)'
              if bad else '')]
  if c.get('previous') == 'reused':
    if c['encoded'] == 0 and not (c['added'] or c['removed'] or c['changed'] or c['renamed']):
      lines.append('  photos up to date: nothing added, changed or removed')
    else:
      lines.append(f'  changes: {c["added"]} added, {c["changed"]} changed, {c["renamed"]} '
                   f'renamed, {c["removed"]} removed, {c["kept"]} kept; {c["encoded"]} encoded')
  elif c.get('previous', 'none') != 'none':
    lines.append(f'  everything encoded anew (the previous store {c["previous"]})')
  for name, info in (meta.get('engines') or {}).items():
    params = ', '.join(f'{k} {v}' for k, v in info.get('params', {}).items())
    tuning = _tuning(out, info)
    if tuning:
      params += (f', nprobe {tuning["nprobe"]}: recall@{tuning["n"]} {tuning["recall"]:.3f} on '
                 f'{tuning["queries"]} sample photos (target {tuning["target_recall"]}'
                 + ('' if tuning['reached'] else ', not reached') + ')')
    lines.append(f'  engine {name}: {c.get("engines", {}).get(name, info["action"])}'
                 + (f' ({params})' if params else ''))
  if c.get('engines_dropped'):
    lines.append(f'  engines dropped: {", ".join(c["engines_dropped"])}')
  for b in bad[:_SHOW_BAD]:
    lines.append(f'  skipped {b["photo_id"]}: {b["reason"]}')
  if len(bad) > _SHOW_BAD:
    lines.append(f'  ... and {len(bad) - _SHOW_BAD} more (meta.json bad_images)')
  return '\n'.join(lines)


def _tuning(out: str, info: dict):
  """The nprobe choice engine.json records for a target recall (None without one)."""
  try:
    return saved_engines.read_saved(os.path.join(out, info['path'])).get('tuning')
  except (InputError, KeyError):
    return None


if __name__ == '__main__':
  cli.run(main)
