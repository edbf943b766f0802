r"""Diverse search with words or a photo over a feature store: CoLT (Alg. 2) with a model, or a
model-free method (top-k, MMR, MSD, DPP, UMONS) with none.

  # Your photos, no model: index them, then search (the model-free default, DPP)
  python data_prep/index_collection.py --images ~/photos --encoder clip \
      --model openai/clip-vit-base-patch32 --out work/features/my-photos
  python experiments/search.py --store work/features/my-photos --query "red bridge at night"
  python experiments/search.py --store STORE --query "big ben" --method mmr \
      --params '{"lambda": 0.5}'
  python experiments/search.py --store STORE --image PHOTO.jpg       # CLIP stores
  # With a CoLT model
  python experiments/search.py --query "big ben" --k 20    # the recommended model (make model)
  python experiments/search.py --store STORE --model MODEL_DIR --query "big ben" --k 20
  python experiments/search.py --store STORE --model MODEL_DIR --queries queries.txt --json
  python experiments/search.py ... --engine faiss-hnsw     # or faiss-ivf, faiss-ivfpq, qdrant

--method: colt (g + phi + Eq. 6; needs a model) or one of the model-free methods topk, mmr,
msd, dpp, umons over the same candidates (the store's exact or --engine's most similar
photos: by f's features without a model, by the model's h^ with one). Default: colt when
--model is given, or when the recommended model that `make model` writes
(work/models/div400-minilm-recommended) is there and fits the store; otherwise the model-free
default of colt_jax/evaluation/model_free.json (DPP, the strongest post-processing baseline
of docs/RESULTS.md, with the parameters its cross-validation chose; the file says why).
--params: the method's parameters as a JSON object, as POST /search takes them (mmr
{"lambda"}, msd {"lambda"}, dpp {"theta"}, umons {"eps", "threshold", "min_samples"});
default model_free.json's. Without --store: the store the model names (the recommended
model's: the Div400 view store of its training photos). colt without a model that fits, or
neither --store nor a model: one line saying what works now and how to get a learned model.

STORE: a feature store (data_prep/index_collection.py for your own photos, or
extract_features.py); its encoder (CLIP or MiniLM) encodes the query (padded with zeros to a
view store's rows, as its own queries are). --image PHOTO encodes a
photo with the image tower of the store's CLIP model, as the store's photos were (EXIF
orientation, CLIP's preprocessing): photos like it, diverse; a photo of the store (its file
as indexed, or the same bytes) is left out of its own list; a text store (MiniLM) refuses it.
MODEL_DIR: a CoLT model directory (Retriever.save_pretrained); one of another feature
dimension or encoder than the store's is refused, naming both. With local labels the
categories are the groups phi finds among the query's candidates, so a collection whose
categories the model never saw works too. Prints rank, score, predicted category (colt:
phi's label name, "irrelevant" or "query" for phi's query class, as the service names them)
and photo id per result; the score is, for every method, the photo's cosine similarity to
the query over the features searched (h^ with a model, f's without); --json prints one JSON
object per query ({"query": ...} or {"image": ..., "photo_id": the query photo left out, or
null}), with mmr's, msd's and dpp's own objective as "objective". A folder that is not a store,
a store without photos, an unknown method or parameter, an image on a text store or one that
cannot be read: one line, exit status 2, nothing written.
"""
import json
import os
import sys

from colt_jax.util import openmp

openmp.sleep_when_idle()  # before faiss or scikit-learn loads libgomp (as serve.py)

from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from colt_jax.util import cli
from colt_jax import encoders
from colt_jax.data import features
from colt_jax.evaluation import model_free
from colt_jax.inference import retriever
from colt_jax.util.errors import InputError
from colt_jax.engines import engine_flags
from colt_jax.inference import settings as settings_lib
from colt_jax.inference import default_model
from colt_jax.service import store_models
from colt_jax.service import photos

_STORE = flags.DEFINE_string('store', '', 'The feature store to search (default: the one the '
                             'model names).')
_MODEL = flags.DEFINE_string('model', '', 'The CoLT model directory (default: the recommended '
                             f'model of `make model`, {default_model.RECOMMENDED_MODEL} in the '
                             'working folder).')
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
_METHOD = flags.DEFINE_string('method', '', 'colt (needs a model) or a model-free method: '
                              f'{", ".join(model_free.METHODS)}. Default: colt when a model '
                              'fits the store, else model_free.json\'s '
                              f'({model_free.default_method()}).')
_PARAMS = flags.DEFINE_string('params', '', 'The method\'s parameters as a JSON object (e.g. '
                              '\'{"theta": 0.95}\' for dpp); default: model_free.json\'s.')


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


def _method_params() -> tuple:
  """(--method or '' for the default, its --params as a dict), checked before anything
  loads."""
  method = _METHOD.value.strip()
  if method and method not in ('colt',) + model_free.METHODS:
    raise InputError(f'--method: unknown method {method!r}; expected colt (with a model) or one '
                     f'of {", ".join(model_free.METHODS)}')
  if not _PARAMS.value.strip():
    return method, {}
  try:
    given = json.loads(_PARAMS.value)
  except json.JSONDecodeError as e:
    raise InputError(f'--params: not JSON ({e.msg}); e.g. \'{{"theta": 0.95}}\'') from None
  if not isinstance(given, dict):
    raise InputError('--params: a JSON object, e.g. \'{"theta": 0.95}\'')
  if given and method in ('', 'colt'):
    raise InputError(f'--params applies to the model-free methods ({", ".join(model_free.METHODS)}'
                     f'): pass --method too')
  model_free.with_params(model_free.default_params(), method, given)  # one line per bad one
  return method, given


def _search_model_free(source, method: str, given: dict, queries: list,
                       exclude: list) -> list:
  """[(photo id, group name, score, objective)] per query by a model-free method over the
  candidates of `source` (a Retriever's h^, or the store's own features), each without its
  `exclude`d photo (the query photo, or None)."""
  if _PER_CATEGORY.value:
    raise InputError(f'--per_category applies to colt, not {method}')
  search = source.store_search() if isinstance(source, retriever.Retriever) else source
  feats = search.encode_images(queries) if _IMAGE.value else search.encode_queries(queries)
  params = model_free.with_params(model_free.default_params(), method, given)
  lists = model_free.rank(search, method, feats, params, _K.value, exclude)
  return [[(p, '', s, o) for p, s, o in entries] for entries in lists]


def _search_colt(colt: retriever.Retriever, queries: list, exclude: list) -> list:
  """[(photo id, category name, score, None)] per query: CoLT's list (Alg. 2), without its
  `exclude`d photo (the query photo, or None)."""
  per_category = _PER_CATEGORY.value or colt.settings.per_category
  if per_category > _K.value:
    raise InputError(f'--per_category ({per_category}) must be <= --k ({_K.value})')
  colt = colt.with_settings(k=_K.value, per_category=per_category,
                            list_length=settings_lib.LIST_LENGTH)
  search = colt.search_images if _IMAGE.value else colt.search_texts
  # The first k of the list: Eq. 6's head, completed by the list's continuation where the
  # head has fewer than k photos (phi labels few groups).
  return [[(p, c, s, None) for p, c, s in zip(r.photo_ids, r.category_names, r.scores)
           if p != skip][:_K.value] for r, skip in zip(search(queries), exclude)]


def _query_photos(queries: list, store, store_dir: str) -> list:
  """Per query, the store's photo that an --image is (its file as indexed, or the same
  bytes), left out of its own list; None for text queries and other images."""
  if not _IMAGE.value:
    return [None] * len(queries)
  catalog = photos.PhotoCatalog([str(p) for p in store.photo_ids], store.meta,
                                photos.read_records(store_dir) if store_dir else None)
  return [catalog.photo_of_file(q) for q in queries]


def _number(value: float, places: int) -> float:
  """`value` rounded, without a negative zero."""
  return round(float(value), places) + 0.0


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  queries = _queries()
  method, given = _method_params()
  engine = engine_flags.spec()
  wants_colt = {'': None, 'colt': True}.get(method, False)
  source, store, store_dir, _ = store_models.load(
      _MODEL.value, _STORE.value, wants_colt, engine,
      log=lambda line: print(line, file=sys.stderr),
      check=_check_image_store if _IMAGE.value else None)
  method = method or ('colt' if isinstance(source, retriever.Retriever)
                      else model_free.default_method())
  exclude = _query_photos(queries, store, store_dir)
  if method == 'colt':
    results = _search_colt(source, queries, exclude)
  else:
    results = _search_model_free(source, method, given, queries, exclude)
  for query, skip, listed in zip(queries, exclude, results):
    if _JSON.value:
      print(json.dumps({'image' if _IMAGE.value else 'query': query, 'photo_id': skip,
                        'results': [
          {'photo_id': p, 'category': c or None, 'score': _number(s, 6),
           'objective': None if o is None else _number(o, 6)} for p, c, s, o in listed]},
          allow_nan=False))
      continue
    print(f'{query}: {len(listed)} photos' + ('' if method == 'colt' else f' by {method}')
          + ('' if skip is None else f' (the query photo {skip} left out)'))
    for rank, (p, c, s, _) in enumerate(listed, 1):
      print(f'  {rank:3d}  {_number(s, 4):+.4f}  {c:<24}  {p}')


if __name__ == '__main__':
  cli.run(main)
