"""Diverse search with words or a photo over a feature store: CoLT (Alg. 2) after f's text
or image tower.

  python experiments/search.py --query "big ben" --k 20    # the recommended model (make model)
  python experiments/search.py --store STORE --model MODEL_DIR --query "big ben" --k 20
  python experiments/search.py --store STORE --model MODEL_DIR --queries queries.txt --json
  python experiments/search.py --store STORE --model MODEL_DIR --image PHOTO.jpg
  python experiments/search.py ... --engine faiss-hnsw     # or faiss-ivf, faiss-ivfpq, qdrant

Without --model: the recommended model that `make model` writes
(work/models/div400-minilm-recommended: the method docs/RESULTS.md's headline names, chosen on
dev); without --store: the store the model names (the recommended model's: the Div400 view
store of its training photos, text + descriptors + metadata). Either missing: one line saying
to run `make model`.

STORE: a feature store (data_prep/index_collection.py for your own photos, or
extract_features.py); its encoder (CLIP or MiniLM) encodes the query (padded with zeros to a
view store's rows, as its own queries are). --image PHOTO encodes a
photo with the image tower of the store's CLIP model, as the store's photos were (EXIF
orientation, CLIP's preprocessing): photos like it, diverse; a text store (MiniLM) refuses it.
MODEL_DIR: a CoLT model directory (Retriever.save_pretrained); one of another feature
dimension or encoder than the store's is refused, naming both. With local labels the
categories are the groups phi finds among the query's candidates, so a collection whose
categories the model never saw works too. Prints rank, photo id, predicted category and score
per result; --json prints one JSON object per query ({"query": ...} or {"image": ...}).
"""
import json
import os

from colt_jax.util import openmp

openmp.sleep_when_idle()  # before faiss or scikit-learn loads libgomp (as serve.py)

from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from colt_jax.util import cli
from colt_jax import encoders
from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError
from colt_jax.engines import engine_flags
from colt_jax.inference import settings as settings_lib
from colt_jax.reproduction import full_models

_STORE = flags.DEFINE_string('store', '', 'The feature store to search (default: the one the '
                             'model names).')
_MODEL = flags.DEFINE_string('model', '', 'The CoLT model directory (default: the recommended '
                             'model of `make model`, work/models/div400-minilm-recommended).')
_QUERY = flags.DEFINE_string('query', '', 'A text query.')
_QUERIES = flags.DEFINE_string('queries', '', 'Or: a text file with one query per line.')
_IMAGE = flags.DEFINE_string('image', '', 'Or: a photo (JPEG, PNG, ...) to search by, encoded '
                             'by the image tower of the store\'s CLIP model.')
_K = flags.DEFINE_integer('k', 20, 'Photos returned per query (Eq. 6\'s k).', lower_bound=1,
                          upper_bound=settings_lib.LIST_LENGTH)
_PER_CATEGORY = flags.DEFINE_integer('per_category', None, 'X of Eq. 6: photos per predicted '
                                     'category (or cluster); default: the model\'s setting.',
                                     lower_bound=1)
_JSON = flags.DEFINE_bool('json', False, 'One JSON object per query instead of a table.')


def _queries() -> list:
  if sum(bool(f.value) for f in (_QUERY, _QUERIES, _IMAGE)) != 1:
    raise InputError('pass exactly one of --query TEXT, --queries FILE and --image PHOTO')
  if _IMAGE.value:
    if not os.path.isfile(_IMAGE.value):
      raise InputError(f'{_IMAGE.value} (--image): '
                       f'{"not a file" if os.path.exists(_IMAGE.value) else "no such file"}')
    return [_IMAGE.value]
  if _QUERY.value:
    return [_QUERY.value]
  try:
    with open(_QUERIES.value, encoding='utf-8') as f:
      lines = [l.strip() for l in f]
  except FileNotFoundError:
    raise InputError(f'{_QUERIES.value} (--queries): no such file') from None
  except IsADirectoryError:
    raise InputError(f'{_QUERIES.value} (--queries): a folder, not a file of queries') from None
  except UnicodeDecodeError as e:
    raise InputError(f'{_QUERIES.value}: not UTF-8 text ({e.reason})') from None
  queries = [q for q in lines if q]
  if not queries:
    raise InputError(f'{_QUERIES.value} (--queries): no queries in it')
  return queries


def _check_image_store(store: features.FeatureStore, store_dir: str) -> None:
  """--image needs f's image tower: a CLIP store."""
  spec = encoders.text_encoder_spec(store.meta)
  if spec and spec['encoder'] == 'clip':
    return
  what = (f'{spec["encoder"]} text features' if spec
          else f'{store.meta.get("encoder")} features, of no image tower colt_jax can run')
  raise InputError(f'store {store_dir} has {what}: --image needs a CLIP store')


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  queries = _queries()
  model_dir, store_dir = full_models.search_inputs(_MODEL.value, _STORE.value)
  engine = engine_flags.spec()
  store = features.load(store_dir)
  if _IMAGE.value:
    _check_image_store(store, store_dir)
  colt = retriever.Retriever.from_pretrained(model_dir)
  per_category = _PER_CATEGORY.value or colt.settings.per_category
  if per_category > _K.value:
    raise InputError(f'--per_category ({per_category}) must be <= --k ({_K.value})')
  colt = colt.with_settings(k=_K.value, per_category=per_category,
                            list_length=settings_lib.LIST_LENGTH).index(store, engine)
  search = colt.search_images if _IMAGE.value else colt.search_texts
  for query, result in zip(queries, search(queries)):
    # The first k of the list: Eq. 6's head, completed by the list's continuation where the
    # head has fewer than k photos (phi labels few groups).
    listed = list(zip(result.photo_ids, result.category_names, result.scores))[:_K.value]
    if _JSON.value:
      print(json.dumps({'image' if _IMAGE.value else 'query': query, 'results': [
          {'photo_id': p, 'category': c, 'score': round(s, 6)} for p, c, s in listed]},
          allow_nan=False))
      continue
    print(f'{query}: {len(listed)} photos')
    for rank, (p, c, s) in enumerate(listed, 1):
      print(f'  {rank:3d}  {s:+.4f}  {c:<24}  {p}')


if __name__ == '__main__':
  cli.run(main)
