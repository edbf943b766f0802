"""Diverse search as an HTTP service (the top layer: it may import every other).

* `app.create_app(retriever, ...)`: the FastAPI app (POST /search, GET /photos/{id},
  /healthz, /metrics, /docs, the live page at /);
* `service.Service`: the app without HTTP: a `searcher.Searcher` (the Retriever's batched
  path at fixed padded sizes, and the baselines over its candidates) fed by a
  `request_batching.DynamicBatcher`, its warm-up and metrics (`prometheus_metrics`);
* `schemas`: the request and response bodies; `photos.PhotoCatalog`: photo files and titles;
  `loading.load`: a store and a model directory into an indexed Retriever.

`experiments/serve.py` runs it under uvicorn.
"""
