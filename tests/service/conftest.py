"""Fixtures of the tests in service/ (once per session: they build what several
modules read and none changes)."""
import jax
import jax.numpy as jnp
import pytest
from colt_jax.train import configs
from colt_jax.data import features
from colt_jax.inference import retriever
from colt_jax.encoders import clip
from colt_jax.encoders import collection
from colt_jax.inputs.labels import LabelSpace
from colt_jax.pairs.config import PairsTTCConfig
from colt_jax.service import app as app_lib
from colt_jax.service import service as service_lib
from colt_jax.train import modules
from colt_jax.train import restore
from tiny_clip import random_image  # pylint: disable=g-bad-import-order
from service_shared import NAMES, WARM, DIM, PHOTOS, N, TestClient  # pylint: disable=g-bad-import-order


@pytest.fixture(scope='session')
def served(tiny_clip_dir, tmp_path_factory):
  """(store dir, model dir): a folder of 40 photos in two subfolders indexed by the tiny CLIP
  (data_prep/index_collection.py's library; its text tower encodes the queries), and a model
  of a random g and phi (N=16, 4 named categories) saved for that encoder."""
  root = tmp_path_factory.mktemp('service')
  for i in range(PHOTOS):
    folder = root / 'photos' / ('a' if i < 20 else 'b/c')
    folder.mkdir(parents=True, exist_ok=True)
    random_image(i, (8, 8)).save(folder / f'p{i:02d}.png')
  store_dir = str(root / 'store')
  encoder = clip.ClipEncoder(tiny_clip_dir)
  collection.index_collection(collection.folder_items(str(root / 'photos')), encoder,
                              store_dir, source=str(root / 'photos'), progress=False)
  encoder = encoder.name
  ttc = PairsTTCConfig(num_images=N, num_layers=1, num_heads=2, model_dim=16,
                       query_relative=True)
  phi = modules.classifier_module(ttc, LabelSpace(len(NAMES)))
  phi_params = phi.init(jax.random.PRNGKey(1), jnp.zeros((1, N + 1, DIM)),
                        jnp.ones((1, N + 1), bool))['params']
  scl = configs.SCLConfig(beta=0.5, zero_init=False)
  g = modules.reencoder_module(scl)
  g_params = g.init(jax.random.PRNGKey(2), jnp.zeros((1, DIM)))['params']
  colt = retriever.Retriever(
      restore.ClassifierBundle(phi, phi_params, LabelSpace(len(NAMES)), ttc, NAMES),
      restore.ReEncoderBundle(g, g_params, scl), encoder=encoder)
  colt.index(features.load(store_dir))
  return store_dir, colt.save_pretrained(str(root / 'model'))


@pytest.fixture(scope='session')
def colt(served):
  store_dir, model = served
  return retriever.Retriever.from_pretrained(model).index(features.load(store_dir))


@pytest.fixture(scope='session')
def client(served, colt):
  """The app over `colt`, warmed up for WARM at batch sizes 1, 2, 4 (waiting 50 ms for a
  batch to fill)."""
  store_dir, _ = served
  app = app_lib.create_app(colt, store=features.load(store_dir), config=service_lib.ServiceConfig(
      max_batch_size=4, max_wait_ms=50.0, warm_settings=WARM, max_body_bytes=20_000))
  with TestClient(app) as c:
    yield c
