"""The demo collection of the service's screenshot and quick start: 48 drawn pictures of four
landmarks (tower, bridge, dome, gate) at four times of day in three materials, captioned ("red
brick bridge at night") and indexed by their captions with the packaged MiniLM-L6 text encoder
(`data_prep/index_collection.py --list captions.csv --encoder minilm`), and a CoLT model of that
dimension whose phi is randomly initialised: the photos retrieved follow the query, the groups
phi gives them are arbitrary (a trained model's are not).
"""
from __future__ import annotations

import csv
import io
import json
import os

from colt_jax.benchmarking import synthetic_collection
from colt_jax.inference import settings as settings_lib
from colt_jax.util import atomic

LANDMARKS = ('tower', 'bridge', 'dome', 'gate')
TIMES = {  # sky top, sky bottom, light of the ground
    'midday': ((70, 140, 225), (170, 210, 245), (110, 160, 80)),
    'sunset': ((60, 40, 110), (250, 150, 70), (90, 80, 60)),
    'night': ((8, 12, 40), (30, 40, 90), (25, 30, 35)),
    'fog': ((200, 200, 205), (225, 225, 228), (160, 165, 160)),
}
MATERIALS = {'red brick': (170, 60, 45), 'grey stone': (120, 120, 125),
             'white marble': (235, 232, 222)}


def _picture(landmark: str, time_of_day: str, material: str, seed: int):
  """A 240x180 drawing of the landmark at that time of day."""
  from PIL import Image, ImageDraw  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  w, h = 240, 180
  top, bottom, ground = TIMES[time_of_day]
  t = np.linspace(0, 1, h)[:, None, None]
  sky = (np.asarray(top) * (1 - t) + np.asarray(bottom) * t) * np.ones((1, w, 1))
  img = Image.fromarray(sky.astype(np.uint8), 'RGB')
  d = ImageDraw.Draw(img)
  if time_of_day == 'night':
    for _ in range(40):
      x, y = rng.integers(0, w), rng.integers(0, h // 2)
      d.point((int(x), int(y)), fill=(255, 255, 230))
    d.ellipse((190, 18, 214, 42), fill=(245, 240, 210))
  elif time_of_day == 'midday':
    d.ellipse((20, 15, 50, 45), fill=(255, 240, 150))
  elif time_of_day == 'sunset':
    d.ellipse((150, 110, 210, 170), fill=(255, 190, 90))
  horizon = 135 + int(rng.integers(-6, 6))
  d.rectangle((0, horizon, w, h), fill=ground)
  c = MATERIALS[material]
  if time_of_day == 'night':
    c = tuple(int(v * 0.45) for v in c)
  elif time_of_day == 'fog':
    c = tuple(int(v * 0.5 + 200 * 0.5) for v in c)
  dark = tuple(max(0, v - 45) for v in c)
  x0 = 70 + int(rng.integers(-30, 30))
  if landmark == 'tower':
    d.rectangle((x0 + 30, 40, x0 + 70, horizon), fill=c, outline=dark)
    d.polygon([(x0 + 26, 42), (x0 + 50, 8), (x0 + 74, 42)], fill=dark)
    d.ellipse((x0 + 38, 55, x0 + 62, 79), fill=(240, 235, 200), outline=dark)
  elif landmark == 'bridge':
    d.rectangle((0, horizon - 38, w, horizon - 30), fill=c, outline=dark)
    for px in (50, 120, 190):
      d.rectangle((px - 6, horizon - 70, px + 6, horizon), fill=dark)
    d.arc((20, horizon - 110, 220, horizon + 40), 200, 340, fill=c, width=5)
    d.rectangle((0, horizon, w, h), fill=tuple(max(0, v - 30) for v in top))
  elif landmark == 'dome':
    d.rectangle((x0, 85, x0 + 100, horizon), fill=c, outline=dark)
    d.pieslice((x0 + 5, 35, x0 + 95, 135), 180, 360, fill=dark)
    for px in range(x0 + 10, x0 + 100, 18):
      d.rectangle((px, 100, px + 6, horizon - 5), fill=tuple(min(255, v + 25) for v in c))
  else:  # gate
    d.rectangle((x0, 55, x0 + 110, horizon), fill=c, outline=dark)
    d.rectangle((x0 - 5, 45, x0 + 115, 60), fill=dark)
    for gx in (x0 + 15, x0 + 60):
      d.rectangle((gx, 80, gx + 35, horizon), fill=tuple(top))
      d.pieslice((gx, 65, gx + 35, 100), 180, 360, fill=tuple(top))
  return img


def pictures() -> list:
  """(path under the workdir, landmark, time of day, material) of each demo picture."""
  return [(f'photos/{landmark}-{time_of_day}-{material.replace(" ", "-")}.png', landmark,
           time_of_day, material)
          for landmark in LANDMARKS for time_of_day in TIMES for material in MATERIALS]


def demo_collection(root: str) -> tuple:
  """(store, model): the demo collection (module docstring) written under `root`: its
  photos, captions.csv, store and model."""
  from colt_jax.encoders import collection  # pylint: disable=g-import-not-at-top
  from colt_jax.encoders import minilm  # pylint: disable=g-import-not-at-top
  photos = os.path.join(root, 'photos')
  os.makedirs(photos, exist_ok=True)
  rows = []
  for seed, (rel, landmark, time_of_day, material) in enumerate(pictures()):
    _picture(landmark, time_of_day, material, seed).save(os.path.join(root, rel))
    rows.append((rel, f'{material} {landmark} at {time_of_day}'))
  captions = os.path.join(root, 'captions.csv')
  text = io.StringIO(newline='')
  csv.writer(text).writerows([('path', 'caption')] + rows)
  atomic.write_text(captions, text.getvalue())
  encoder = minilm.MiniLMEncoder()
  store = os.path.join(root, 'store')
  collection.index_collection(collection.list_items(captions), encoder, store, source=captions,
                              progress=False)
  model = synthetic_collection.synthetic_model(
      os.path.join(root, 'model'), dim=encoder.dim, num_layers=2, num_heads=2, model_dim=64,
      num_images=48, categories=12, settings=settings_lib.InferenceSettings())
  # The model claims MiniLM as its encoder, as if trained on such features.
  with open(os.path.join(model, settings_lib.MODEL_FILE), encoding='utf-8') as f:
    info = json.load(f)
  info['encoder'] = encoder.name
  atomic.write_json(os.path.join(model, settings_lib.MODEL_FILE), info)
  return store, model
