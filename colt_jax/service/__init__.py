"""Diverse search as an HTTP service (the top layer: it may import every other).

* `app.create_app(source, ...)`: the FastAPI app (POST /search, GET /photos/{id},
  /healthz, /metrics, /docs, the live page at /) over an indexed Retriever, or over a
  `inference.store_search.StoreSearch` (a store without a model: the model-free methods);
* `service.Service`: the app without HTTP: a `searcher.Searcher` (the Retriever's batched
  path at fixed padded sizes, and the model-free methods over the same candidates) fed by a
  `request_batching.DynamicBatcher`, its warm-up and metrics (`prometheus_metrics`);
* `schemas`: the request and response bodies; `photos.PhotoCatalog`: photo files and titles;
  `loading.load`: a store, and a model directory when there is one, into what is served.

`experiments/serve.py` runs it under uvicorn (`store_models` picks the model;
`inference.default_model` names the default one).
"""
