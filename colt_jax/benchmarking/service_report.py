"""docs/SERVICE.md from the service benchmark's JSON reports: the targets (throughput at the
most clients, latency at one, against the in-process path measured in the same run) and their
verdicts over the rounds' interval, each size's tables, the gap between a batch's model call and
the next, and how to run it."""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from colt_jax.benchmarking import method_speed
from colt_jax.benchmarking import startup
from colt_jax.benchmarking import service_queries_doc
from colt_jax.benchmarking import timing


THROUGHPUT_TARGET = 0.9  # service q/s at the most clients over the in-process batched path


LATENCY_TARGET = 1.2  # service p50 at 1 client over the in-process batch-1 p50


def entry_round_ratios(entry: dict) -> Optional[list]:
  """The round ratios at the most clients of a size's entry (None in older reports)."""
  level = entry['levels'].get(str(entry['targets']['clients']), {})
  return level.get('round_ratios')


def targets(entry: dict, clients: list) -> dict:
  """The issue's targets for one size: throughput at the most clients, p50 at 1 client."""
  most = str(max(clients))
  level = entry['levels'][most]
  out = {'clients': int(most), 'throughput_ratio': level['throughput_ratio'],
         'throughput_met': level['throughput_ratio'] >= THROUGHPUT_TARGET,
         'errors': sum(l['service']['errors'] for l in entry['levels'].values())}
  if '1' in entry['levels'] and entry.get('batch1'):
    ratio = entry['levels']['1']['p50_over_batch1']
    out.update(latency_ratio=ratio, latency_met=ratio <= LATENCY_TARGET)
  return out


def round_interval(ratios) -> Optional[tuple]:
  """(mean, low, high): the 95% t-interval of the mean of the rounds' ratios; None with fewer
  than 2 rounds."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  r = np.asarray(ratios or [], float)
  if r.size < 2:
    return None
  half = stats.t.ppf(0.975, r.size - 1) * r.std(ddof=1) / np.sqrt(r.size)
  return float(r.mean()), float(r.mean() - half), float(r.mean() + half)


def throughput_verdict(ratio: float, rounds=None) -> str:
  """'met' or 'NOT met' by the pooled ratio; when the rounds' interval (`round_interval`) holds
  the target on the other side, that the rounds do not settle it."""
  met = ratio >= THROUGHPUT_TARGET
  verdict = 'met' if met else 'NOT met'
  interval = round_interval(rounds)
  if interval is None:
    return verdict
  mean, low, high = interval
  text = (f'the rounds\' mean {mean:.3f}, 95% interval [{low:.3f}, {high:.3f}] over '
          f'{len(rounds)} rounds')
  if (low >= THROUGHPUT_TARGET) if met else (high < THROUGHPUT_TARGET):
    return f'{verdict} ({text})'
  return (f'{verdict} by the pooled figure, not settled by the rounds ({text}, which holds '
          f'{THROUGHPUT_TARGET})')


def target_lines(t: dict, rounds=None) -> list:
  """The target lines of `targets`; `rounds`: the round ratios at its most clients."""
  lines = [f'target: at {t["clients"]} clients the service answers '
           f'{t["throughput_ratio"]:.3f}x the in-process batched path\'s queries/s '
           f'(>= {THROUGHPUT_TARGET}): {throughput_verdict(t["throughput_ratio"], rounds)}']
  if 'latency_ratio' in t:
    lines.append(f'target: at 1 client the service\'s p50 is {t["latency_ratio"]:.2f}x the '
                 f'in-process batch-1 p50 (<= {LATENCY_TARGET}): '
                 f'{"met" if t["latency_met"] else "NOT met"}')
  lines.append(f'errors: {t["errors"]} (must be 0)')
  return lines


def read_report(path: str) -> dict:
  """A JSON report of this benchmark (--out of an earlier run), for --doc_also."""
  return timing.read_json_report(path, 'bench_service.py')


def markdown(reports: list) -> str:
  """docs/SERVICE.md: how to run the service, then the figures of the reports."""
  kind = lambda name: [r for r in reports if r.get('benchmark') == name]
  lines = usage_sections() + [line for r in kind('startup') for line in startup.section(r)]
  methods = [line for r in kind('methods') for line in method_speed.section(r)]
  reports = [r for r in reports if r.get('benchmark') not in ('startup', 'methods')]
  if not reports:  # bench_startup.py's and bench_methods.py's alone
    return '\n'.join(lines + methods).rstrip() + '\n'
  m = reports[0]['machine']
  lines += [
      '## Under load', '',
      f'Measured by benchmarks/bench_service.py on {m.get("cpu", "this CPU")}, '
      f'{m.get("cpu_count", "?")} cores, {m.get("backend", "cpu")} backend (JAX '
      f'{m.get("jax", "?")}); each table names the command that produced it (with --out it '
      'writes the JSON the table is made from; `--doc_only` re-renders this file from the '
      'JSON). The service is `experiments/serve.py` on 127.0.0.1, a child process of the '
      'benchmark; the clients are keep-alive HTTP/1.1 connections in the benchmark\'s '
      'process (on uvloop), each sending `POST /search` with a query vector as soon as its '
      'previous answer is in; they keep the answers\' bodies, read and compared after the '
      'timed run. They share the machine\'s cores with the service, so the service\'s '
      'figures include the cost of being driven. "in-process" is `Retriever.search_batch` in '
      'the benchmark\'s process over the same model and store, at a batch of as many queries '
      'as there are clients, measured before, between and after the service\'s timed rounds '
      '(their mean): the batched path the service calls, without HTTP. The service\'s '
      'figures pool its rounds; "each round" is each round\'s ratio over the mean of the '
      'in-process runs just before and after it: the spread of the measurement. "b-call '
      'p50" is the median time of one in-process call (a batch). "differ": answers whose '
      'photo ids are not the in-process answer to the same query (not counted as errors). '
      'The service\'s own stage times (`timing_ms` of its answers) are means. "CPU ms per '
      'query": the CPU time (all threads, user + system) the service\'s process, the '
      'clients\' process and the in-process path used per query while it was measured: less '
      'sensitive than times to '
      'other processes on the machine; on a quiet machine of C cores the service can answer '
      'at most 1000 C / (service + clients) queries/s.', '']
  for report in reports:
    for size, entry in report['sizes'].items():
      lines += size_section(report, int(size), entry)
  return '\n'.join(lines + methods).rstrip() + '\n'


def usage_sections() -> list:
  """The parts of docs/SERVICE.md that no measurement makes: starting the service, its
  endpoints, queries by photo (`service_queries_doc`), the page and its screenshot."""
  return (USAGE.strip('\n') + '\n' + service_queries_doc.QUERIES
          + '\n## The live search page\n' + service_queries_doc.PAGE.rstrip('\n')).split(
              '\n') + ['']


USAGE = r"""
# Diverse search as a service

<!-- Generated by benchmarks/bench_service.py --doc from the JSON reports of docs/results/service
(--doc_also startup.json,service-100k.json,service-1M.json,methods.json there); do not edit
by hand: change the scripts and re-render with --doc_only. -->

What it is for: serving diverse search over HTTP (`experiments/serve.py`), and what it costs
under load against the in-process Retriever (`benchmarks/bench_service.py`, which writes this
file).

## Start it

    python experiments/serve.py --store STORE --host 127.0.0.1 --port 8000    # no model
    python experiments/serve.py --store STORE --model MODEL_DIR --host 127.0.0.1 --port 8000
    python experiments/serve.py --store STORE --model MODEL_DIR --engine faiss-ivf   # large collections

STORE is a feature store (`data_prep/index_collection.py` for a folder of photos, or
`extract_features.py`), MODEL_DIR a CoLT model directory (`Retriever.save_pretrained`,
`experiments/make_model.py`); without either, the recommended model that `make model` writes
and the Div400 store it names. With a store and no model (nor a recommended model that fits
it), the service offers the model-free methods `topk`, `mmr`, `msd`, `dpp` and `umons` over
the store's own features, through the same request schema, batching, engines and metrics,
and a request's default method is the model-free default (colt_jax/evaluation/model_free.json
holds the default method and every method's default parameters, chosen by a rule and says
why; docs/RESULTS.md, "Without training: parameters that travel"); `colt` is offered only
with a model that fits the store, and `--methods colt` without one is one line saying what
works and how to get a learned model. The service is FastAPI on uvicorn; it binds to 127.0.0.1
unless told otherwise. Concurrent requests are gathered into batches (`--max_batch_size`,
`--max_wait_ms`) and answered by the one inference path, `Retriever`'s batched jitted call.
Behind a reverse proxy on the same machine, `--proxy_headers` takes the client's address and
scheme from its X-Forwarded-For/-Proto headers (off by default: each request skips the check).
`python experiments/serve.py --helpshort` lists every flag.

To try it offline in about a minute, without a trained model:

    python benchmarks/service_screenshot.py --workdir work/demo-service --out work/demo-service/page.png
    python experiments/serve.py --store work/demo-service/store --model work/demo-service/model
    python experiments/serve.py --store work/demo-service/store    # or no model: DPP, MMR, ...

The first command builds a demo collection of 48 captioned pictures. It indexes them with
the packaged MiniLM-L6 text encoder and writes a CoLT model whose phi is randomly
initialised, so the photos follow the query but the groups are arbitrary. For a trained
model of MiniLM stores, run `make model` (docs/COLLECTIONS.md, "Your own photos").

## Endpoints

- `POST /search`: `{"query": "big ben", "k": 20, "per_category": 1, "list_length": 50,
  "method": "colt", "params": {}}`; `"vector": [...]` (a query feature of the store's
  dimension), `"photo_id"` or `"image"` (below) instead of `"query"`; `"method"` one of
  `colt` (with a model), `topk`, `mmr`, `msd`, `dpp`, `umons` (default: `/healthz`'s `method_default`, `colt` with a model, else
  `dpp`), with their parameters in `"params"` (`mmr` and `msd`: `lambda`; `dpp`: `theta`;
  `umons`: `eps`, `threshold`, `min_samples`). The answer:
  `{"query", "photo_id", "method", "k", "results": [{"rank", "photo_id", "score",
  "objective", "group", "category", "title", "has_image"}], "timing_ms": {"queue", "encode",
  "candidates", "rerank", "total"}, "batch_size"}`. `k` is Eq. 6's diverse head. `results` holds `list_length` photos (fewer
  when the store has fewer), for every method: for `colt` the first `list_length` of its
  full list (50), the diverse head, then the list's continuation, so that a head shorter
  than k (phi labels few groups) is filled from the continuation, as `search.py` fills it.
  The search page sends `list_length` = k. `group` is phi's predicted category or group. `category` is
  that group's name. A photo that phi labels irrelevant, or with the query token's own
  class, has group -1 and category "irrelevant" or "query" (below). The photos, their
  order, scores and groups are the first `list_length` of what `Retriever.search_text` (or `Retriever.search`
  for a vector) returns; the model-free methods' lists are `experiments/evaluate.py`'s
  (`evaluation.rank_baseline`) over the same candidates, with group -1.
  A bad request (no query, k or X out of range, a vector of the wrong dimension, a body too
  large, malformed JSON, an unknown method) is answered 4xx with `{"error": "..."}` naming
  the field; a request that takes longer than the timeout, 503. A colt list shape (k and X)
  not in `--warm_settings` compiles on first use, while every batch waits (about 1.6 s), and
  stays compiled: at most `--max_new_shapes` (8) such shapes are admitted, another is a 422
  naming them; mmr, msd and dpp compute every list at its full length (50) and cut it (a
  greedy list's first picks are the shorter list), so no list length compiles.
- Connections: a request must arrive whole within `--read_timeout_s` (10 s) of its first
  byte (or of the connection's opening), else 408 and the connection is closed; a request
  head over `--max_header_bytes` (64 KiB) is a 431; a connection beyond `--max_connections`
  (1000) is a 503; a request uvicorn cannot parse is a 400; all of them JSON
  `{"error": ...}`, counted in `/metrics`, and written after the answers owed to the
  requests before them on their connection. A search whose client disconnects before its
  batch starts is dropped from the batch. SIGTERM answers what is in flight and exits 0,
  within `--request_timeout_s` + `--read_timeout_s` + 5 s at most.
- `GET /photos/{photo_id}`: the photo's file, for stores indexed from a folder or a list of
  files; 404 otherwise.
- `GET /healthz`: `{"status": "ok", "photos": N, "method_default", "methods", "model", ...}`
  (`model` null without one); the page offers its `methods`.
- `GET /metrics`: Prometheus text (request counts, latency histogram, batch sizes, errors).
- `GET /docs`: the OpenAPI documentation FastAPI generates (Swagger UI). The service serves
  its script and style itself, so the page works without the internet.
- `GET /`: the live search page (below).

    curl -s localhost:8000/search -H 'Content-Type: application/json' \
         -d '{"query": "big ben", "k": 10, "per_category": 2, "list_length": 10}'

"""


def requests_text(requests) -> str:
  """'384 requests per row' (older reports: one count) or '384, 512, 2048 requests at 1, 8,
  32 clients'."""
  if not isinstance(requests, dict):
    return f'{requests} requests per row'
  clients = sorted(requests, key=int)
  return (f'{", ".join(str(requests[c]) for c in clients)} requests at '
          f'{", ".join(clients)} clients')


def rounds_text(rounds) -> str:
  """'in each of 3 timed rounds ' (older reports: one round, '')."""
  return f'in each of {rounds} timed rounds ' if rounds and rounds > 1 else ''


def gap_line(entry: dict) -> Optional[str]:
  """Where the service's time per batch goes beyond the in-process path's, at the most
  clients, from the report's own figures (None when the throughput target is met and its
  rounds settle it, `throughput_verdict`, or a figure is missing): the same queries' time in
  each, the server's stages, the model's idle time
  between batches, the CPU per query of the service's process and the clients, and the ratio
  as the product of CPU per query and how busy the cores were (`ratio_factors`)."""
  t = entry.get('targets') or {}
  level = entry['levels'].get(str(t.get('clients')))
  if level is None:
    return None
  interval = round_interval(level.get('round_ratios'))
  if t.get('throughput_met', True) and (interval is None or interval[1] >= THROUGHPUT_TARGET):
    return None
  s = level['service']
  server_cpu, clients_cpu = s.get('server_cpu_ms_per_request'), s.get('client_cpu_ms_per_request')
  reference_cpu = level.get('in_process_cpu_ms_per_query')
  stages = s.get('server_ms') or {}
  needed = (server_cpu, clients_cpu, reference_cpu, stages.get('rerank'), stages.get('queue'),
            stages.get('total'), s.get('mean_ms'))
  if None in needed or not (s['per_s'] and level['in_process_per_s']):
    return None
  batch, clients = s['batch_size_mean'], t['clients']
  service_ms = batch / s['per_s'] * 1e3
  same_in_process_ms = batch / level['in_process_per_s'] * 1e3
  call_ms = clients / level['in_process_per_s'] * 1e3
  rerank, queue, total = stages['rerank'], stages['queue'], stages['total']
  extra = server_cpu - reference_cpu
  factors = ratio_factors(s['per_s'], server_cpu + clients_cpu, level['in_process_per_s'],
                           reference_cpu)
  cpu = (f'The service\'s process used {extra:.2f} ms more CPU per query than the in-process '
         f'path ({server_cpu:.2f} against {reference_cpu:.2f}; {extra * batch:.1f} ms per '
         f'{batch:.1f} queries)' if extra > 0 else
         f'The service\'s process used no more CPU per query than the in-process path '
         f'({server_cpu:.2f} against {reference_cpu:.2f})')
  return (f'Where the difference goes, at {clients} clients: {batch:.1f} queries (the mean '
          f'batch) took {service_ms:.1f} ms in the service (mean batch / service q/s) against '
          f'{same_in_process_ms:.1f} ms at the in-process rate, '
          f'{service_ms - same_in_process_ms:.1f} ms more. The model\'s call (server rerank, '
          f'padded to {clients} rows) took {rerank:.1f} ms against {call_ms:.1f} ms in-process '
          f'(clients / in-process q/s); requests waited {queue:.1f} ms on average for their '
          f'batch to start (server queue), the rest of the server\'s time took '
          f'{total - queue - rerank:.1f} ms (server total - queue - rerank), and '
          f'{s["mean_ms"] - total:.1f} ms of a request\'s {s["mean_ms"]:.1f} ms mean latency lies '
          'outside the server\'s timing (reading and parsing the request, writing the answer, '
          'the clients). With closed-loop clients all in each batch, that HTTP work falls '
          f'between two batches, while the model is idle ({service_ms - rerank:.1f} ms per '
          f'batch: time per batch - rerank). {cpu}, and the clients {clients_cpu:.2f} ms per '
          f'query ({clients_cpu * batch:.1f} ms). {thread_split(s, batch)}'
          + (f' {factors}' if factors else ''))


def thread_split(service: Mapping, batch: float) -> str:
  """The service's CPU per query by its threads (`THREAD_KINDS`), or that it was not split."""
  by = service.get('server_thread_cpu_ms_per_request')
  if not by:
    return 'CPU times, which these figures do not split between the HTTP layer and the model.'
  loop = by['event loop']
  return (f'By the service\'s threads, per query: the event loop (its main thread: the HTTP '
          f'requests, their parsing, the answers) {loop:.2f} ms ({loop * batch:.1f} ms per '
          f'batch, on one core, while the model waits for the batch\'s next requests), XLA\'s '
          f'threads (the model\'s computation) {by["XLA"]:.2f} ms, the other threads (the '
          f'batcher) {by["other"]:.2f} ms.')


def ratio_factors(per_s: float, cpu: float, reference_per_s: float,
                   reference_cpu: float) -> str:
  """The throughput ratio as the product of two factors of the measured figures (an
  identity): CPU per query (the service's process and the clients together against the
  in-process path) and how busy the cores were (queries/s x CPU ms per query / 1000: cores in
  use on average). '' when a CPU figure is not positive."""
  if cpu <= 0 or reference_cpu <= 0 or reference_per_s <= 0:
    return ''
  cpu_factor = reference_cpu / cpu
  busy, reference_busy = per_s * cpu / 1e3, reference_per_s * reference_cpu / 1e3
  text = (f'The ratio ({per_s / reference_per_s:.2f}) is the product of two factors of these '
          f'figures: CPU per query, {reference_cpu:.2f} ms in-process against {cpu:.2f} ms for '
          f'the service and its clients ({cpu_factor:.2f}), and how busy the cores were, '
          f'{busy:.2f} cores in use on average (q/s x CPU ms per query / 1000) against '
          f'{reference_busy:.2f} in-process ({busy / reference_busy:.2f})')
  if cpu_factor < THROUGHPUT_TARGET:
    needed = THROUGHPUT_TARGET * reference_per_s * cpu / 1e3
    return (text + f': at its CPU per query the service stays below {THROUGHPUT_TARGET}x with '
            f'the cores as busy as in-process; reaching it would take less CPU per query, or '
            f'{needed:.2f} cores in use on average.')
  return text + '.'


def fmt_value(v, spec='.2f') -> str:
  return '-' if v is None else format(v, spec)


def size_section(report: dict, size: int, entry: dict) -> list:
  phi = report['phi']
  engine = report['engine'] + (f' (nprobe {report["nprobe"]})' if report.get('nprobe') else '')
  m = report['machine']
  lines = [f'### {size:,} photos, {engine}', '',
           f'`python {report["command"]}`: d={report["dim"]}, {report["centres"]} centres; '
           f'phi L={phi["num_layers"]}, {phi["num_heads"]} heads, width {phi["model_dim"]}, '
           f'N={phi["num_images"]}, {phi["categories"]} categories (randomly initialised); '
           f'k={report["k"]}, X={report["per_category"]}, lists of '
           f'{report.get("list_length", report["k"])}; {requests_text(report["requests"])} '
           f'{rounds_text(report.get("rounds"))}over {report["queries"]} distinct queries; '
           f'serve.py '
           f'{" ".join(entry["serve_args"])}. Load average at the start '
           f'{m.get("load_average")}, at the end {report.get("load_average_end")}.', '',
           '| clients | service q/s | p50 ms | p99 ms | errors | differ | mean batch | '
           'server total ms | server queue ms | in-process q/s (batch = clients) | '
           'b-call p50 ms | service / in-process | each round | CPU ms per query: service | '
           'clients | in-process |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for c, level in sorted(entry['levels'].items(), key=lambda item: int(item[0])):
    s = level['service']
    server = s.get('server_ms', {})
    lines.append(
        f'| {c} | {s["per_s"]:.1f} | {fmt_value(s["p50_ms"])} | {fmt_value(s["p99_ms"])} | '
        f'{s["errors"]} | {s["differs"]} | {s["batch_size_mean"]:.1f} | '
        f'{fmt_value(server.get("total"))} | {fmt_value(server.get("queue"))} | '
        f'{level["in_process_per_s"]:.1f} | {level["in_process_p50_ms"]:.2f} | '
        f'{level["throughput_ratio"]:.2f}x | '
        f'{", ".join(f"{r:.2f}" for r in level.get("round_ratios", [])) or "-"} | '
        f'{fmt_value(s.get("server_cpu_ms_per_request"))} | '
        f'{fmt_value(s.get("client_cpu_ms_per_request"))} | '
        f'{fmt_value(level.get("in_process_cpu_ms_per_query"))} |')
  lines.append('')
  if entry.get('batch1'):
    lines.append(f'In-process batch-1 latency: p50 {entry["batch1"]["p50_ms"]:.2f} ms, p99 '
                 f'{entry["batch1"]["p99_ms"]:.2f} ms.')
    lines.append('')
  lines += [f'- {line[len("target: "):] if line.startswith("target: ") else line}'
            for line in target_lines(entry['targets'], entry_round_ratios(entry))]
  gap = gap_line(entry)
  if gap:
    lines.append(f'- {gap}')
  lines += [f'- The service started (load, index, warm-up; with the serve.py flags above) in '
            f'{entry["service_start_s"]:.1f} s; '
            f'SIGTERM at the end: exit status {entry["service_exit_status"]} after '
            f'{fmt_value(entry.get("service_stop_s"), ".1f")} s.', '']
  return lines
