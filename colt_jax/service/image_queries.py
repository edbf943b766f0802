"""An uploaded image as a query (`POST /search` {"image": base64}): taken by a store whose
encoder f is CLIP (its image tower encodes the image as the store's photos were: EXIF
orientation, CLIP's preprocessing); read when the request is checked, on the event loop, so
that an unreadable image is a 422 naming the field before it joins a batch. An upload of
the same bytes as one of the store's photos (its sha256 in the store's file records) is that
photo: it is left out of its own results."""
from __future__ import annotations

from colt_jax.inference import query_encoding
from colt_jax.util.errors import InputError


def accepted(search) -> bool:
  """Whether the service's `StoreSearch` takes image queries (f is CLIP)."""
  return (search.text_encoder or {}).get('encoder') == 'clip'


def check(request, search, catalog) -> None:
  """Reads the request's image (bytes, `schemas.image_bytes`) for its batch, and which of
  the store's photos it is; an image on a store of no image tower, or unreadable, is an
  InputError naming the field."""
  try:
    query_encoding.QueryEncoders.check_image_tower(search.text_encoder, search._store,  # pylint: disable=protected-access
                                                   search.source)
  except InputError as e:
    raise InputError(f'image: {e}; send "query" or "photo_id" instead') from None
  from colt_jax.encoders import clip  # pylint: disable=g-import-not-at-top
  raw = request.image
  try:
    picture = clip.load_image(raw, name=f'image ({len(raw)} bytes)')
    picture.load()
  except InputError as e:
    raise InputError(f'image: not an image that can be read ({str(e).split(": ", 1)[-1]})'
                     ) from None
  except Exception as e:  # pylint: disable=broad-except  # PIL's own (a decompression bomb)
    raise InputError(f'image: not an image that can be read ({type(e).__name__}: {e})'
                     ) from None
  request._picture = picture  # pylint: disable=protected-access
  request._same_photo = catalog.photo_of_bytes(raw) if catalog is not None else None  # pylint: disable=protected-access
