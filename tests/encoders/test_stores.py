"""Tests for colt_jax.encoders.stores: the view-store check of a split's descriptor folders."""
import os
import shutil

import pytest

from colt_jax.data import splits as data
from colt_jax.data import folds
from colt_jax.data import views as views_lib
from colt_jax.encoders import stores
from colt_jax.util.errors import InputError


def test_a_merged_split_needs_every_topics_descriptor_folder(tiny_synthetic, tmp_path):
  """A fold's training split holds dev and test topics: the check looks in each topic's own
  split directory and names the one that lacks descvis/img."""
  root = shutil.copytree(tiny_synthetic, tmp_path / 'data')  # the shared fixture stays as is
  dev, test = data.load('synthetic', 'dev', str(root)), data.load('synthetic', 'test', str(root))
  merged, _ = folds.merge([dev, test], 'cv-train')
  spec = views_lib.ViewSpec(descriptors=('CM',))
  os.makedirs(os.path.join(dev[0].root, 'descvis', 'img'), exist_ok=True)
  missing = os.path.join(test[0].root, 'descvis', 'img')
  assert not os.path.isdir(missing)
  with pytest.raises(InputError, match='cv-train has no official visual descriptors') as e:
    stores.view_transform(spec, merged, merged)
  assert missing in str(e.value)
