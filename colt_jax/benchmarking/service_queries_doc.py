"""The parts of docs/SERVICE.md on queries by photo, scores, labels and titles (QUERIES) and
on the live search page (PAGE), placed by `service_report.usage_sections`."""

QUERIES = r"""
## Queries by photo, scores, labels and titles

- `"photo_id": "ID"` instead of `"query"` (a photo of the store; the page's "more like this"
  on each tile): its stored feature, f's, is the query (no encoding). `"image": "BASE64"`
  (an image file's bytes in base64, or a `data:` URL; the page's "Or a photo" control,
  shown when `/healthz` says `"image_queries": true`): the image tower of the store's CLIP
  model encodes it as the store's photos were (EXIF orientation, CLIP's preprocessing); a
  store of a text encoder (MiniLM) answers 422 naming `image`. The body limit
  (`--max_body_bytes`, 1 MiB) bounds an upload: the page sends a file over 700 KiB
  downscaled to 640 pixels (JPEG); other clients raise the limit for larger files. The image
  tower compiles on the first image query (the warm-up does not run it).
- The query photo is left out of its own results (not marked): a `photo_id`'s photo, and
  the store's photo an uploaded image is (the same bytes: its sha256 in the store's
  `files.json`). The answer's `"photo_id"` names it (null for other queries). The list still
  holds `list_length` photos when the store has as many others: colt's is its full list
  without the query photo, then cut; the model-free methods rank the candidates without it.
  `experiments/search.py --image PHOTO` does the same for a photo of the store (its indexed
  file, or the same bytes) and says so ("the query photo ID left out"; `"photo_id"` in
  `--json`).
- `score` means one thing for every method: the cosine similarity of the photo and the query
  over the features the service searches (g's h^ with a model, f's own without), the
  similarity colt orders its candidates by. mmr's, msd's and dpp's own objective when they
  picked the photo is `objective` (null for colt, topk and umons). `search.py` prints the
  same score (and `objective` with `--json`).
- `category` is phi's name of a colt photo's label: its category or group (`group` >= 0), or,
  with `group` -1, `irrelevant` or `query` (phi's query class: photos phi puts with the query
  token), the names `search.py` prints and the page shows; null for the model-free methods
  (the page: "no group").
- `title` is the photo's caption when the store was indexed from a list with captions, else
  its file name; the page shows it as the tile's tooltip (and as its text when there is no
  image), not the photo's path.
- `GET /healthz`: `"images"`: the photos have files (`GET /photos`); `"photo_queries"`:
  `photo_id` queries are taken (always); `"image_queries"`: uploads are (CLIP stores).
- Refused in one line naming the field (422), nothing written: an unknown `photo_id`; an
  `image` that is not base64, empty, or not an image that can be read; an image on a store
  without an image tower; two query fields. `tests/service/test_service_image_query.py`,
  `tests/service/test_service_page_queries.py` (the page, in headless Chromium) and
  `tests/evaluation/test_bad_inputs_written.py` (search.py and serve.py: status 2) test them.
"""

# The live search page and its screenshot (after QUERIES).
PAGE = r"""
Open `http://127.0.0.1:8000/` in a browser: a search box (it searches as you type, or on
Enter), the number of photos k, X (photos per predicted category), the method (those the
service offers, its default chosen) and its parameters (JSON). The answer is a grid grouped by predicted category or group, groups in
the order of their best photo; each tile shows the thumbnail (`/photos/{id}`; the photo's
title or id when the store has no image files), its rank, group, score and a "more like
this" button; the line above the grid gives the service's time per stage and the round trip. Errors are shown as text.
The page is one file, `colt_jax/service/static/index.html`, with no external scripts, fonts
or CDNs; `tests/service/test_service_page.py` drives it in headless Chromium.

![The live search page](figures/service.png)

Made by `python benchmarks/service_screenshot.py --out docs/figures/service.png`: the demo
collection it builds (48 drawn pictures of four landmarks at four times of day, indexed by
their captions with the packaged MiniLM-L6 text encoder) served by `experiments/serve.py`,
the query "bridge at night", k = 12, X = 1, CoLT. Its phi is randomly initialised, so the
photos follow the query but the groups are arbitrary; `--store STORE --model MODEL_DIR`
(or `--url` of a running service) screenshots your own. It needs Playwright
(`requirements.txt`) and Debian's Chromium (`apt-get install -y chromium`).
"""
