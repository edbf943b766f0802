"""The benchmarks' library (scripts in benchmarks/, each a thin absl main over one call here).
Timing with compile counting and cost analysis (`timing`). bench_retrieval.py: the per-query
cost of every stage and method (`perf_suite` over `suite_settings`, `suite_stages`,
`suite_sections`, `suite_training`), its targets (`perf_targets`) and its report
docs/PERFORMANCE.md (`perf_report`, read and placed by `perf_files`, a GPU run beside it by
`perf_devices`). bench_engines.py: the candidate engines at scale (`engine_sizes`) and
docs/ENGINES.md (`engine_report`). bench_service.py: the HTTP service under load
(`service_under_load`) over a synthetic collection and model (`synthetic_collection`),
`experiments/serve.py` as a child process (`service_process`), the clients and the in-process
reference (`service_load`), and docs/SERVICE.md with the targets (`service_report`).
service_screenshot.py: the demo collection (`drawn_collection`) and the live page in Debian's
Chromium (`live_page`, `headless_chromium`). The top layer: it may start the service under test
as a subprocess and writes its reports in docs/."""
