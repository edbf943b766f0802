r"""Diverse search as an HTTP service over a feature store, with dynamic batching: CoLT with a
model, the model-free methods (top-k, MMR, MSD, DPP, UMONS) with or without one.

  python experiments/serve.py --store STORE --port 8000   # your photos, no model: DPP, MMR, ...
  python experiments/serve.py --port 8000     # the recommended model and its store (make model)
  python experiments/serve.py --store STORE --model MODEL_DIR --port 8000
  python experiments/serve.py ... --engine faiss-ivf        # or faiss-hnsw, faiss-ivfpq, qdrant

then open http://127.0.0.1:8000/ (the search page) or /docs (the API), or

  curl -s localhost:8000/search -H 'content-type: application/json' \
      -d '{"query": "big ben", "k": 20, "per_category": 1, "list_length": 50}'

STORE and MODEL_DIR as for experiments/search.py (default: the recommended model that `make
model` writes and the store it names; a model of another dimension or encoder than the store's
is refused, naming both). --methods: the methods offered (default: every one there is: colt
with a model that fits the store, which is then a request's default method, and topk, mmr,
msd, dpp, umons; without a model, those five, model_free.json's default (dpp) a request's
default). colt asked for without a model: one line saying what works now and how to get a
learned model. The model-free methods' default parameters are
colt_jax/evaluation/model_free.json's (--mmr_lambda, --msd_lambda, --dpp_theta, --umons_eps,
--umons_threshold change them; a request's "params" change them for it). Concurrent requests
are gathered into batches of at most --max_batch_size, waiting at most --max_wait_ms for
more once the previous batch is done, and run through the Retriever's batched jitted path (or
the model-free methods') padded to a few fixed sizes (2, 4, 8, 12, 16, 24, 32, 48, 64 up to
--max_batch_size), compiled for the list shapes of --warm_settings: with --warm_up=first (the
default) the smallest size of every method and the text tower's shapes of queries of up to 16
words before the server accepts connections, the others in a background thread, batches held
to the sizes compiled so far meanwhile (/healthz "warm": compiled of all;
colt_jax/service/warm_up.py); with --warm_up=all every one before (another k and X
for colt compiles once, on first use; another k and X for colt compiles once, on first use; mmr, msd and dpp
compute every list at its full length and cut it, so no list length compiles). The programs are kept in JAX's persistent compilation cache
(--compilation_cache_dir, default ~/.cache/colt_jax/compilation-cache): a second start loads
them instead of compiling (docs/SERVICE.md, "Start-up"). The warm-up also times each padded
size: a batch that would be mostly padding runs at a smaller size and its newest requests join
the next batch (colt_jax/service/request_batching.py). SIGTERM or Ctrl-C: the requests in
flight are answered, then the process exits 0. Binds to 127.0.0.1 unless --host says otherwise. FAISS's OpenMP
threads sleep soon when idle (about 0.2 ms: colt_jax/util/openmp.py, unless the environment sets
OMP_WAIT_POLICY or GOMP_SPINCOUNT): spinning longer, they took the cores the event loop and
the batcher need.
"""
import signal

from colt_jax.util import openmp

openmp.sleep_when_idle()  # before faiss or scikit-learn loads libgomp

from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import uvicorn

from colt_jax.util import cli
from colt_jax.evaluation import model_free
from colt_jax.util import flagcheck
from colt_jax.util.errors import InputError
from colt_jax.service import address
from colt_jax.service import app as app_lib
from colt_jax.service import compile_cache
from colt_jax.service import protocol
from colt_jax.service import schemas
from colt_jax.service import searcher
from colt_jax.service import service
from colt_jax.engines import engine_flags
from colt_jax.inference import default_model
from colt_jax.service import store_models

_STORE = flags.DEFINE_string('store', '', 'The feature store to search (default: the one the '
                             'model names).')
_MODEL = flags.DEFINE_string('model', '', 'The CoLT model directory (default: the recommended '
                             f'model of `make model`, {default_model.RECOMMENDED_MODEL} in the '
                             'working folder).')
_HOST = flags.DEFINE_string('host', '127.0.0.1', 'The address to listen on (0.0.0.0: every '
                            'interface).')
_PORT = flags.DEFINE_integer('port', 8000, 'The port (0: any free one).', lower_bound=0,
                             upper_bound=65535)
_MAX_BATCH = flags.DEFINE_integer('max_batch_size', 32, 'Requests per batched call, at most.',
                                  lower_bound=1, upper_bound=searcher.MAX_BATCH_SIZE)
_MAX_WAIT = flags.DEFINE_float('max_wait_ms', service.ServiceConfig.max_wait_ms,
                               'How long a batch waits for more requests to join it, from the '
                               'later of its oldest request\'s arrival and the previous '
                               'batch\'s end; it runs sooner once the requests of the previous '
                               'batch and those waiting at its end are queued '
                               '(colt_jax/service/request_batching.py).',
                               lower_bound=0.0, upper_bound=60_000.0)
_TIMEOUT = flags.DEFINE_float('request_timeout_s', 30.0, 'A search not answered in this many '
                              'seconds (queueing included) is answered 503.', lower_bound=1e-3,
                              upper_bound=86_400.0)
_MAX_BODY = flags.DEFINE_integer('max_body_bytes', 1 << 20, 'Larger request bodies are '
                                 'refused (413).', lower_bound=1, upper_bound=1 << 30)
_WARM = flags.DEFINE_list('warm_settings', ['20:1:50'], 'List shapes k:per_category:'
                          'list_length compiled at start for every batch size.')
_WARM_UP = flags.DEFINE_enum(
    'warm_up', 'first', ['first', 'all'], 'first: ready once the smallest padded batch size '
    'and short queries\' token shapes are compiled, the others compile in the background '
    '(batches wait for their size meanwhile); all: ready once every one is compiled.')
_MAX_NEW_SHAPES = flags.DEFINE_integer(
    'max_new_shapes', service.ServiceConfig.max_new_shapes, 'colt\'s list shapes (k:X) '
    'compiled on first use beyond --warm_settings, at most; '
    'requests of further shapes are answered 422. Each compiles while every batch waits.',
    lower_bound=0, upper_bound=10_000)
_METHODS = flags.DEFINE_list('methods', [], 'The methods offered, each warmed up: colt (needs '
                             f'a model) and any of {", ".join(model_free.METHODS)}; default: '
                             'every one there is.')
_DEFAULTS = model_free.defaults()['params']
# (method, request parameter) of each flag that changes a model-free method's default.
_PARAM_FLAGS = {
    'mmr_lambda': ('mmr', 'lambda', 'MMR\'s default trade-off'),
    'msd_lambda': ('msd', 'lambda', 'MSD\'s default trade-off'),
    'dpp_theta': ('dpp', 'theta', 'DPP\'s default theta'),
    'umons_eps': ('umons', 'eps', 'UMONS\'s default DBSCAN radius'),
    'umons_threshold': ('umons', 'threshold', 'UMONS\'s default relevance threshold'),
}
for _flag, (_method, _name, _what) in _PARAM_FLAGS.items():
  flags.DEFINE_float(_flag, None, f'{_what} (request params.{_name}; default '
                     f'{_DEFAULTS[_method][_name]}, colt_jax/evaluation/model_free.json).')
_CACHE_DIR = flags.DEFINE_string(
    'compilation_cache_dir', None, 'The folder of JAX\'s persistent compilation cache: a '
    'second start loads the warm-up\'s programs from it instead of compiling them (default: '
    f'{compile_cache.default_dir()}, or JAX_COMPILATION_CACHE_DIR; '
    'colt_jax/service/compile_cache.py). A folder that is '
    'not writable is only read; a full disk saves no new programs.')
_CACHE = flags.DEFINE_bool('compilation_cache', True, 'Use JAX\'s persistent compilation '
                           'cache (--compilation_cache_dir).')
_READ_TIMEOUT = flags.DEFINE_float('read_timeout_s', protocol.READ_TIMEOUT_S, 'A request (its '
                                   'head and body) must arrive whole within this many seconds '
                                   'of its first byte or of the connection\'s opening; else 408 '
                                   'and the connection is closed.', lower_bound=0.001,
                                   upper_bound=86_400.0)
_MAX_HEADER = flags.DEFINE_integer('max_header_bytes', protocol.MAX_HEADER_BYTES, 'Larger '
                                   'request heads are answered 431.', lower_bound=1024,
                                   upper_bound=1 << 30)
_MAX_CONNECTIONS = flags.DEFINE_integer('max_connections', protocol.MAX_CONNECTIONS, 'Open '
                                        'connections at most; another is answered 503 and '
                                        'closed.', lower_bound=1, upper_bound=1_000_000)
_ACCESS_LOG = flags.DEFINE_bool('access_log', False, 'Log every request (uvicorn\'s access '
                                'log).')
_PROXY_HEADERS = flags.DEFINE_bool('proxy_headers', False, 'Behind a reverse proxy on this '
                                   'machine: take the client\'s address and scheme from its '
                                   'X-Forwarded-For/-Proto headers (the access log\'s client). '
                                   'Off, each request skips that check.')


def main(argv):
  if len(argv) > 1:
    raise InputError(f'unexpected arguments {argv[1:]}; flags start with --')
  engine = engine_flags.spec()
  # Before anything compiles: the cache is read when the first program is.
  print(compile_cache.configure(_CACHE_DIR.value, _CACHE.value), flush=True)
  config = service.ServiceConfig(
      max_batch_size=_MAX_BATCH.value, max_wait_ms=_MAX_WAIT.value,
      request_timeout_s=_TIMEOUT.value, max_body_bytes=_MAX_BODY.value,
      warm_settings=tuple(searcher.ListShape.parse(s) for s in _WARM.value),
      methods=tuple(flagcheck.parse_names('--methods', _METHODS.value, schemas.METHODS)
                    if _METHODS.value else ()),
      max_new_shapes=_MAX_NEW_SHAPES.value, warm_up=_WARM_UP.value)
  params = model_free.default_params()
  for flag, (method, name, _) in _PARAM_FLAGS.items():
    value = flags.FLAGS[flag].value
    if value is not None:
      error = model_free.param_error(method, name, value)
      if error:
        raise InputError(f'--{flag}: {error.split(": ", 1)[1]}')
      params = model_free.with_params(params, method, {name: value})
  address.check_bindable(_HOST.value, _PORT.value)
  wants_colt = ('colt' in config.methods) if config.methods else None
  source, store, store_dir, model_dir = store_models.load(_MODEL.value, _STORE.value,
                                                          wants_colt, engine, flag='--methods')
  app = app_lib.create_app(source, store=store, store_dir=store_dir, config=config,
                           method_params=params)
  warm = app.state.service
  print(f'{len(store.photo_ids)} photos of {store_dir}, '
        + (f'model {model_dir}' if model_dir else 'no model')
        + f'; methods {", ".join(warm.methods)} (default {warm.searcher.default_method}): '
        'warming up', flush=True)
  warm.start()  # before the server: a failure is one line; the app's lifespan then only stops it
  print(f'warmed up ({warm.warmup_compilations} compilations, {warm.warmup_cache_hits} of them '
        f'from the compilation cache, {warm.warmup_seconds:.1f} s'
        + (f'; {warm.warm_steps[1] - warm.warm_steps[0]} more batch sizes and token shapes '
           'compile in the background' if warm.background is not None else '') + '); '
        f'serving at http://{_HOST.value}:{_PORT.value}/ (API: /docs)', flush=True)
  errors = warm.metrics.errors
  http = protocol.configured(_READ_TIMEOUT.value, _MAX_HEADER.value, _MAX_CONNECTIONS.value,
                             on_refused=lambda kind: errors.labels(kind).inc(),
                             direct=app.state.search)
  # At SIGTERM, requests in flight are answered (a search within --request_timeout_s, a
  # request still arriving within --read_timeout_s), so the shutdown is bounded.
  server = uvicorn.Server(uvicorn.Config(
      app, host=_HOST.value, port=_PORT.value, access_log=_ACCESS_LOG.value,
      proxy_headers=_PROXY_HEADERS.value, http=http,
      log_level='info', timeout_graceful_shutdown=_TIMEOUT.value + _READ_TIMEOUT.value + 5.0,
      lifespan='on'))
  # uvicorn answers SIGTERM/SIGINT by finishing the requests in flight, then raises the
  # signal again with the handler it found: a no-op one lets the process exit 0.
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: None)
  server.run()
  if not server.started:
    raise InputError('the service did not start (see the lines above)')


if __name__ == '__main__':
  cli.run(main)
