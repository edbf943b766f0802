"""The benchmarks' library (scripts in benchmarks/): timing with compile counting and cost
analysis (`timing`), the retrieval suite and its settings (`perf_suite`, `suite_*`), the
performance report (`perf_targets`, `perf_report`, `perf_devices`), the service's benchmark
(`service_load`, `service_report`) over a synthetic collection and model
(`synthetic_collection`) and `experiments/serve.py` as a child process (`service_process`),
the engines at scale (`engine_sizes`) and a headless browser for the live page
(`headless_chromium`). The top layer: it may start the service under test as a subprocess and
writes its reports in docs/."""
