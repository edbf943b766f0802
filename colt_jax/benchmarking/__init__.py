"""The benchmarks' library (scripts in benchmarks/): timing with compile counting and cost
analysis (`timing`), the retrieval suites and their settings (`suites`, `suite_*`), the
performance report (`perf_report`, `perf_devices`), the service's benchmark tools
(`service_tools`) and a headless browser for the live page (`headless_chromium`). The top
layer: it may start the service under test as a subprocess and writes its reports in docs/."""
