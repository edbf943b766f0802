"""The HTTP contract of the service: request and response bodies (pydantic) and one-line
errors.

`POST /search` takes a `SearchRequest`: a text `query`, a query feature `vector`, a
`photo_id` of the store (its stored feature) or an uploaded `image` (base64; the store's
CLIP image tower encodes it): exactly one; the list's shape (`k`: Eq. 6's diverse head, `per_category`: X, `list_length`: photos
listed, k <= list_length <= 50) and a `method` with its `params` (`METHOD_PARAMS`). Every
field is checked here except what depends on the model (the vector's dimension, text queries
without a text tower, an unknown photo, an image unreadable or on a text store):
`service.Service.check` refuses those. A refused request is answered
`{"error": "<field>: <why>"}` (`error_message`): 400 for a body that is not JSON, 422
otherwise. A checked request's `vector` is a float32 array [d] (the JSON list as the model
reads it).
"""
from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Annotated, Literal, Optional

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field

# A JSON number (an integer too), never true/false or a string holding one ("1"), as k and the
# other counts are checked.
StrictFloat = Annotated[float, pydantic.Strict()]

from colt_jax.evaluation import model_free
from colt_jax.inference import settings as settings_lib

# colt (with a model) and the model-free methods over the same candidates.
METHODS = ('colt',) + model_free.METHODS
MAX_QUERY_CHARS = 1000
MAX_PER_CATEGORY = 50
VECTOR_NORM_TOLERANCE = 1e-3  # a query vector must be L2-normalised to this

# Each method's parameters: name -> (MethodParams field, low, high, integer, what it is).
METHOD_PARAMS = {'colt': {}, **model_free.PARAMS}

def _count(default: int, high: int, text: str):
  """An integer field in [1, high] (strict: "20" or 20.0 is refused)."""
  return Field(default, ge=1, le=high, strict=True, description=text)


class SearchRequest(BaseModel):
  """The body of `POST /search`."""
  model_config = ConfigDict(extra='forbid')
  # Set by `Service.check`: an `image`'s decoded picture, and the store's photo it is.
  _picture: object = pydantic.PrivateAttr(None)
  _same_photo: Optional[str] = pydantic.PrivateAttr(None)

  query: Optional[str] = Field(None, max_length=MAX_QUERY_CHARS,
                               description='A text query, encoded by the store\'s text tower.')
  vector: Optional[list[StrictFloat]] = Field(
      None, description='Instead of query: an L2-normalised query feature of the model\'s '
      'dimension.')
  photo_id: Optional[str] = Field(
      None, max_length=MAX_QUERY_CHARS, description='Instead of query: a photo of the store '
      '("more like this"); its stored feature is the query, and the photo is left out of its '
      'results.')
  image: Optional[str] = Field(
      None, description='Instead of query: an image file (JPEG, PNG, WebP, ...) in base64 '
      '(a data: URL too), encoded by the image tower of the store\'s CLIP model (GET /healthz '
      'image_queries); a photo of the store (the same bytes) is left out of its results.')
  k: int = _count(20, settings_lib.LIST_LENGTH, "Eq. 6's k: the diverse head of the list "
                  '(<= list_length).')
  per_category: int = _count(1, MAX_PER_CATEGORY, 'X of Eq. 6: photos per predicted category '
                             '(<= k).')
  list_length: int = _count(settings_lib.LIST_LENGTH, settings_lib.LIST_LENGTH,
                            'Photos listed: the head of k, then its continuation.')
  method: Optional[Literal[METHODS]] = Field(
      None, description='colt (g + phi + Eq. 6, with a model) or a model-free method over the '
      'same candidates (topk, mmr, msd, dpp, umons); default: the service\'s (GET /healthz '
      'method_default).')
  params: dict[str, StrictFloat] = Field(
      default_factory=dict, description='The method\'s parameters: mmr {"lambda"}, msd '
      '{"lambda"}, dpp {"theta"}, umons {"eps", "threshold", "min_samples"}; colt and topk '
      'take none.')

  @pydantic.model_validator(mode='after')
  def _check(self) -> 'SearchRequest':
    given = [f for f in QUERY_FIELDS if getattr(self, f) is not None]
    if len(given) != 1:
      raise ValueError('query: give exactly one of "query" (text), "vector", "photo_id" and '
                       '"image"' + (f' (got {", ".join(given)})' if given else ''))
    if self.photo_id is not None and not self.photo_id.strip():
      raise ValueError('photo_id: empty')
    if self.image is not None:
      self.image = image_bytes(self.image)
    if self.query is not None and not self.query.strip():
      raise ValueError('query: empty text')
    if self.vector is not None:
      if not self.vector:
        raise ValueError('vector: empty')
      norm = math.hypot(*self.vector)  # in C, without an array
      if not math.isfinite(norm):  # a number that is not finite, or a norm that overflows
        if not all(map(math.isfinite, self.vector)):
          raise ValueError('vector: every number must be finite')
        raise ValueError('vector: must be L2-normalised, its norm overflows')
      if abs(norm - 1.0) > VECTOR_NORM_TOLERANCE:
        raise ValueError(f'vector: must be L2-normalised, its norm is {norm:.6g}')
    if self.k > self.list_length:
      raise ValueError(f'k: must be <= list_length ({self.list_length}), got {self.k}')
    if self.per_category > self.k:
      raise ValueError(f'per_category: must be <= k ({self.k}), got {self.per_category}')
    error = params_error(self.method, self.params) if self.method is not None else None
    if error:  # without a method, the service checks them for its default (Service.check)
      raise ValueError(error)
    if self.vector is not None:
      # Checked, the vector is kept as the float32 array the model reads: converted here, on
      # the event loop, while its Python floats are fresh in the CPU's caches, not by the
      # batcher after a model call has evicted them, which would be work between two model
      # calls (the batcher's CPU per request: benchmarks/bench_service.py, docs/SERVICE.md).
      self.vector = np.asarray(self.vector, np.float32)
    return self


QUERY_FIELDS = ('query', 'vector', 'photo_id', 'image')
_DATA_URL = re.compile(r'^data:[\w/+.-]*(;[\w=.-]+)*;base64,')


def image_bytes(text: str) -> bytes:
  """The bytes of an `image` field: base64, optionally as a data: URL; one line naming the
  field otherwise (the image itself is read by `Service.check`)."""
  text = _DATA_URL.sub('', text.strip(), count=1)
  try:
    raw = base64.b64decode(text, validate=True)
  except (binascii.Error, ValueError) as e:
    raise ValueError(f'image: not base64 ({e})') from None
  if not raw:
    raise ValueError('image: empty')
  return raw


def query_photo(request: SearchRequest) -> Optional[str]:
  """The store's photo a request queries by (its photo_id, or the photo an uploaded image
  is), left out of its results; None for other queries."""
  return request.photo_id if request.photo_id is not None else request._same_photo  # pylint: disable=protected-access


def picture(request: SearchRequest):
  """The decoded image of an `image` request (`Service.check`)."""
  return request._picture  # pylint: disable=protected-access


def with_default_method(request: SearchRequest, default: str) -> Optional[str]:
  """Gives a request that names no method `default` (the service's); then why its params
  are not that method's, or None."""
  if request.method is not None:
    return None
  request.method = default
  return params_error(default, request.params)


def params_error(method: str, params: dict) -> Optional[str]:
  """Why `params` are not `method`'s (one line naming the first bad one), or None."""
  for name, value in params.items():
    error = (model_free.param_error(method, name, value) if method != 'colt'
             else f'params.{name}: not a parameter of colt (it takes none)')
    if error:
      return error
  return None


class Result(BaseModel):
  """One photo of the ranked list."""
  rank: int = Field(description='1-based position in the list.')
  photo_id: str
  score: float = Field(description='Every method: the cosine similarity of the photo and '
                       'the query over the features the service searches (g\'s h^ with a '
                       'model, f\'s without).')
  objective: Optional[float] = Field(None, description='mmr, msd, dpp: the method\'s own '
                                     'objective when it picked the photo; null otherwise.')
  group: int = Field(description='colt: the predicted category or group id; -1 for phi\'s '
                     'other labels (irrelevant, query) and for the model-free methods.')
  category: Optional[str] = Field(description='colt: the name of phi\'s label: the category or '
                                  'group, or "irrelevant", or "query" (phi\'s query class); '
                                  'null for the model-free methods.')
  title: Optional[str] = Field(description='The photo\'s caption (a list with captions), '
                               'else its file name, when the store was indexed from a folder '
                               'or a list.')
  has_image: bool = Field(description='GET /photos/{photo_id} returns its file.')


class Timing(BaseModel):
  """Milliseconds per stage. colt runs its candidate search, phi and Eq. 6 in one jitted
  call: its time is `rerank` and `candidates` is 0."""
  queue: float = Field(description='Waiting for the batch to start.')
  encode: float = Field(description="f's text or image tower (0 for a vector or a "
                        'photo_id).')
  candidates: float = Field(description='The baselines\' candidate search.')
  rerank: float = Field(description='colt: search + phi + Eq. 6; a baseline: its list.')
  total: float = Field(description='From arrival to the answer.')


class SearchResponse(BaseModel):
  """The answer of `POST /search`."""
  query: Optional[str]
  photo_id: Optional[str] = Field(None, description='The query photo (a photo_id query, or '
                                  'the store\'s photo an uploaded image is), left out of the '
                                  'results; null otherwise.')
  method: str
  k: int
  per_category: int
  list_length: int
  results: list[Result]
  timing_ms: Timing
  batch_size: int = Field(description='Requests run together in this one\'s batched call.')


class Health(BaseModel):
  """The answer of `GET /healthz`."""
  status: str
  photos: int
  method_default: str
  methods: list[str]
  model: Optional[str] = Field(description='The CoLT model directory (null: none, the '
                               'model-free methods only).')
  dim: int
  text_queries: bool = Field(description='Whether "query" (text) is accepted: the store\'s '
                             'encoder has a text tower.')
  images: bool = Field(description='Whether photos have files (GET /photos); not whether '
                       'image queries are taken (image_queries).')
  photo_queries: bool = Field(description='Whether "photo_id" queries are taken (always).')
  image_queries: bool = Field(description='Whether "image" (an uploaded image) is taken: the '
                              'store\'s encoder is CLIP.')
  max_batch_size: int
  warm: Optional[dict[str, int]] = Field(
      default=None, description='The warm-up\'s padded batch sizes and token shapes compiled so '
      'far, of all: {"compiled": n, "of": m} (serve.py compiles the first ones before it is '
      'ready, the others in the background); null: no warm-up.')


class Error(BaseModel):
  """Every refused request: one line naming the field."""
  error: str


def _field(loc) -> str:
  parts = [str(p) for p in loc if p != 'body']
  return '.'.join(parts) or 'body'


def error_message(errors: list) -> tuple:
  """(HTTP status, one line) for pydantic's errors of a request body: 400 when the body is
  not JSON, else 422; the first error, naming its field."""
  if not errors:
    return 422, 'body: invalid'
  e = errors[0]
  kind, field, ctx = e.get('type', ''), _field(e.get('loc', ())), e.get('ctx') or {}
  if kind == 'json_invalid':
    return 400, f'body: malformed JSON ({ctx.get("error", e.get("msg", ""))})'
  if field == 'body' and kind in ('missing', 'model_type', 'model_attributes_type',
                                  'dict_type'):
    return 422, 'body: a JSON object is required'
  if kind == 'value_error':
    text = str(ctx.get('error', e.get('msg', '')))
    return 422, text if ': ' in text else f'{field}: {text}'
  if kind == 'extra_forbidden':
    fields = ', '.join(SearchRequest.model_fields)
    return 422, f'{field}: not a field of the request (fields: {fields})'
  given = e.get('input')
  got = f', got {given!r}' if isinstance(given, (int, float, str, bool)) and len(
      repr(given)) <= 40 else ''
  if kind in ('greater_than_equal', 'less_than_equal'):
    return 422, f'{field}: must be in [1, {_high(field)}]{got}'
  return 422, f'{field}: {e.get("msg", "invalid")}{got}'


def _high(field: str):
  info = SearchRequest.model_fields.get(field)
  for m in (info.metadata if info else ()):
    if hasattr(m, 'le'):
      return m.le
  return '?'
