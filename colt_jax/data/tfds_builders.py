"""TFDS builders `div400` and `div150cred`: the MediaEval datasets as `tensorflow-datasets`.

Both read the official layout from the manual directory (`mediaeval.read_split`: the root
holding devset/ and testset/) and store one example per (topic, photo) of splits `dev` and
`test` as array_record, in the official order (topics file order, then Flickr rank):
shuffling is disabled, so example i of a data source is the i-th photo of the split.

Key: `<topic number>/<photo id>`. Photo ids are unique within a topic, but not within a split
(61 photos of Div400's testset are in two or three topics), so a shared photo has one example
per topic, each with that topic's ground truth and image file.

Features (see `_features` for their docs): photo_id, topic, topic_title, text (exactly
`Photo.text`: title, tags and description with HTML removed), title, tags, description,
views, user ('' when the XML has none), rank, relevance (1, 0, -1 as in rGT; `NOT_IN_RGT` for
a photo the rGT file does not list), cluster_id (`NO_CLUSTER` = 0 for a photo not in dGT),
cluster_name (normalised by `vocabulary.normalize_name`; '' without a cluster), has_image and
image (the bytes of `<split dir>/img/<topic title>/<photo id>.jpg` when that file exists,
else b''). The topic tables (coordinates, wiki, every cluster name as spelled, the largest
cluster id, ground-truth lines of ids that are not among the topic's photos) and the split
directory that was read are in the dataset's metadata (`metadata.json`), so that
`load_split` gives back a `Split` equal to `mediaeval.read_split`.

No TensorFlow: TFDS 4.9 writes examples with its own `tf.train.Example` protos
(`tensorflow_datasets.proto`), array_record stores them and `tfds.data_source` /
`builder.as_data_source()` parse them with numpy. Only features whose encoding needs no
TensorFlow are used: `Text`, `Scalar` of ints and bools, and the image as raw bytes
(`Scalar(np.object_)`; `tfds.features.Image` would decode it and cannot be empty). Text
features read back as UTF-8 bytes.

    builder = tfds_builders.Div400(data_dir='work/tfds')
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=os.environ['DIV400_ROOT']))
    dev = tfds.data_source('div400', split='dev', data_dir='work/tfds')   # after this import
    split = tfds_splits.load_split('div400', 'dev', 'work/tfds').split  # == read_split

A prepared dataset is reused as it is: delete `<data_dir>/<name>/1.2.0` to rebuild it after
the manual directory changed.
"""
from __future__ import annotations

import inspect
import os

from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from colt_jax.data import mediaeval
from colt_jax.data import official_files
from colt_jax.data.types import Split
from colt_jax.data.vocabulary import normalize_name

DEFAULT_DATA_DIR = os.path.join('work', 'tfds')
FILE_FORMAT = 'array_record'
METADATA_FORMAT = 'colt_jax.mediaeval_tfds/1'
NOT_IN_RGT = -2  # relevance of a photo that its topic's rGT file does not list
NO_CLUSTER = 0  # cluster id of a photo that is in no dGT cluster (cluster ids start at 1)
IMAGE_EXTENSION = '.jpg'

_LAYOUT = """\
Place the official MediaEval "Retrieving Diverse Social Images" data in the manual directory
(`DownloadConfig(manual_dir=...)`, `tfds_splits.prepare(..., manual_dir)`), unchanged:

{layout}
    <split dir>/xml/<topic title>.xml, gt/rGT/, gt/dGT/ (as distributed)
    <split dir>/img/<topic title>/<photo id>.jpg   (optional: photo files, stored as bytes)

colt_jax.data.mediaeval.read_split('{dataset}', <manual dir>, 'dev' | 'test') must read
it. Photos without a file get has_image=False and empty image bytes.
"""


def image_path(split_dir: str, topic_title: str, photo_id: str) -> str:
  """Where the official layout keeps a photo file (the extractor looks in the same place)."""
  return os.path.join(split_dir, 'img', topic_title, photo_id + IMAGE_EXTENSION)


def _features() -> tfds.features.FeaturesDict:
  text = tfds.features.Text
  scalar = tfds.features.Scalar
  return tfds.features.FeaturesDict({
      'photo_id': text(doc='Flickr photo id (decimal digits, kept as text).'),
      'topic': scalar(np.int32, doc='Topic (location) number.'),
      'topic_title': text(doc='Topic title: the query.'),
      'text': text(doc='Photo metadata as one text: title, tags and description (HTML '
                   'removed), joined by spaces (colt_jax Photo.text).'),
      'title': text(doc='Photo title.'),
      'tags': text(doc='Photo tags, space-separated.'),
      'description': text(doc='Photo description, HTML removed.'),
      'views': scalar(np.int64, doc='Flickr view count (0 when absent).'),
      'user': text(doc="userid (Div150Cred) or username; '' when absent."),
      'date_taken': text(doc="date_taken as written ('2010-08-14 18:23:36'); '' when absent."),
      'url': text(doc="the photo's Flickr URL (url_b); '' when absent."),
      'rank': scalar(np.int32, doc="Flickr's original rank in the topic (1 = first)."),
      'latitude': text(doc="Latitude (repr of the float read from the XML: exact, since "
                       "Example protos hold float32); '' when absent (Div400 writes 0, 0 for "
                       '"no location").'),
      'longitude': text(doc="Longitude, as latitude; '' when absent."),
      'relevance': scalar(np.int32, doc=f'rGT: 1 relevant, 0 not, -1 unknown; {NOT_IN_RGT} '
                          'when rGT does not list the photo.'),
      'cluster_id': scalar(np.int32, doc=f'dGT cluster id (1..); {NO_CLUSTER} = not in dGT '
                           '(photos that are not relevant).'),
      'cluster_name': text(doc="Cluster name from dclusterGT, normalised (stripped, "
                           "lowercase, single spaces); '' without a cluster."),
      'has_image': scalar(np.bool_, doc='Whether img/<topic title>/<photo id>.jpg exists.'),
      'image': scalar(np.object_, doc="The photo file's encoded (JPEG) bytes; b'' when "
                      'has_image is false.'),
  })


class _LocalDatasetInfo(tfds.core.DatasetInfo):
  """A DatasetInfo that does not look for precomputed info in gs://tfds-data: these datasets
  are never there, and tfds's lookup (`initialize_from_bucket`, run when a builder is made
  for an unprepared dataset) leaves an empty temporary folder (`/tmp/tmp*tfds`) behind each
  time."""

  def initialize_from_bucket(self) -> None:
    pass


class _MediaEvalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """One example per (topic, photo) of a MediaEval dataset's dev and test splits."""

  VERSION = tfds.core.Version('1.2.0')
  RELEASE_NOTES = {
      '1.2.0': "Adds the photo's latitude and longitude ('' when the XML has none).",
      '1.1.0': 'Adds date_taken (the photo metadata view, colt_jax.data.views) and url (url_b).',
      '1.0.0': 'Initial release: dev and test splits, one example per (topic, photo) in the '
               'official order, with metadata text, ground truth and photo bytes; topic '
               'tables in metadata.json.',
  }
  DATASET: str  # mediaeval.read_split's dataset name
  DESCRIPTION: str
  HOMEPAGE: str
  CITATION: str

  def __init__(self, *, file_format=None, **kwargs):
    if file_format is not None and str(getattr(file_format, 'value', file_format)) != FILE_FORMAT:
      raise ValueError(f'{self.name} is stored as {FILE_FORMAT} (random access without '
                       f'TensorFlow), not {file_format}')
    super().__init__(file_format=FILE_FORMAT, **kwargs)

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    """This module's file: tfds's own fallback. Its default first asks
    `importlib_resources`, which tfds 4.9.10 declares only for Python < 3.9
    (tensorflow/datasets#11212), so `download_and_prepare` would fail without it."""
    return epath.Path(inspect.getfile(cls))

  def _info(self) -> tfds.core.DatasetInfo:
    return _LocalDatasetInfo(
        builder=self, description=self.DESCRIPTION, features=_features(),
        homepage=self.HOMEPAGE, citation=self.CITATION, disable_shuffling=True,
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    manual_dir = os.fspath(dl_manager.manual_dir)  # tfds: clear error when missing or empty
    splits = {}
    for name in mediaeval.SPLITS:
      try:
        splits[name] = mediaeval.read_split(self.DATASET, manual_dir, name)
      except official_files.DatasetFormatError as e:
        raise official_files.DatasetFormatError(
            e.path, e.line, f'{e.problem} (building {self.name} from the manual directory '
            f'{manual_dir}, which must hold the official devset/ and testset/)') from None
    self.info.metadata.update({
        'format': METADATA_FORMAT,
        'splits': {name: _split_metadata(s) for name, s in splits.items()},
    })
    return {name: self._generate_examples(s) for name, s in splits.items()}

  def _generate_examples(self, split: Split):
    for topic in split.topics:
      gt = split.ground_truth[topic.number]
      for p in split.photos[topic.number]:
        path = image_path(split.root_of(topic.number), topic.title, p.photo_id)
        has_image = os.path.isfile(path)
        image = b''
        if has_image:
          with open(path, 'rb') as f:
            image = f.read()
        cluster = gt.clusters.get(p.photo_id, NO_CLUSTER)
        yield f'{topic.number}/{p.photo_id}', {
            'photo_id': p.photo_id, 'topic': topic.number, 'topic_title': topic.title,
            'text': p.text, 'title': p.title, 'tags': p.tags, 'description': p.description,
            'views': p.views, 'user': p.user_id or '',
            'date_taken': p.date_taken or '', 'url': p.url or '', 'rank': p.rank,
            'latitude': '' if p.latitude is None else repr(p.latitude),
            'longitude': '' if p.longitude is None else repr(p.longitude),
            'relevance': gt.relevance.get(p.photo_id, NOT_IN_RGT), 'cluster_id': cluster,
            'cluster_name': (normalize_name(gt.cluster_names[cluster])
                             if cluster != NO_CLUSTER else ''),
            'has_image': has_image, 'image': image,
        }


class Div400(_MediaEvalBuilder):
  """Div400 (MediaEval 2013 Retrieving Diverse Social Images, keywords subset)."""

  name = 'div400'
  DATASET = 'div400'
  DESCRIPTION = ('Div400 (MediaEval 2013 Retrieving Diverse Social Images): Flickr photos '
                 'of landmark locations with relevance (rGT) and diversity clusters (dGT). '
                 'One example per (topic, photo).')
  HOMEPAGE = 'http://campus.pub.ro/lab7/bionescu/Div400.html'
  CITATION = """\
@inproceedings{ionescu2014div400,
  title={Div400: A Social Image Retrieval Result Diversification Dataset},
  author={Ionescu, Bogdan and Radu, Anca-Livia and Men{\\'e}ndez, Mar{\\'i}a and M{\\"u}ller,
          Henning and Popescu, Adrian and Loni, Babak},
  booktitle={Proceedings of the 5th ACM Multimedia Systems Conference (MMSys)},
  year={2014}
}"""
  MANUAL_DOWNLOAD_INSTRUCTIONS = _LAYOUT.format(dataset='div400', layout="""\
    <manual dir>/devset/keywords/devsetkeywords_topics.xml   (split dir: devset/keywords)
    <manual dir>/testset/keywords/testsetkeywords_topics.xml (split dir: testset/keywords)""")


class Div150Cred(_MediaEvalBuilder):
  """Div150Cred (MediaEval 2014 Retrieving Diverse Social Images)."""

  name = 'div150cred'
  DATASET = 'div150cred'
  DESCRIPTION = ('Div150Cred (MediaEval 2014 Retrieving Diverse Social Images): Flickr '
                 'photos of landmark locations with relevance (rGT) and diversity clusters '
                 '(dGT). One example per (topic, photo).')
  HOMEPAGE = 'http://campus.pub.ro/lab7/bionescu/Div150Cred.html'
  CITATION = """\
@inproceedings{ionescu2015div150cred,
  title={Div150Cred: A Social Image Retrieval Result Diversification with User Tagging
         Credibility Dataset},
  author={Ionescu, Bogdan and Popescu, Adrian and Lupu, Mihai and G{\\^i}nsc{\\u{a}}, Alexandru
          Lucian and Boteanu, Bogdan and M{\\"u}ller, Henning},
  booktitle={Proceedings of the 6th ACM Multimedia Systems Conference (MMSys)},
  year={2015}
}"""
  MANUAL_DOWNLOAD_INSTRUCTIONS = _LAYOUT.format(dataset='div150cred', layout="""\
    <manual dir>/devset/devset_topics.xml    (split dir: devset)
    <manual dir>/testset/testset_topics.xml  (split dir: testset)""")


BUILDERS = {'div400': Div400, 'div150cred': Div150Cred}


# ----------------------------------------------------------------------------- metadata


def _split_metadata(split: Split) -> dict:
  """The split's topic tables and source directory (JSON: `metadata.json`)."""
  topics = []
  for t in split.topics:
    gt = split.ground_truth[t.number]
    listed = {p.photo_id for p in split.photos[t.number]}
    topics.append({
        'number': t.number, 'title': t.title, 'latitude': t.latitude,
        'longitude': t.longitude, 'wiki': t.wiki, 'num_clusters': gt.num_clusters,
        'cluster_names': [[cid, name] for cid, name in gt.cluster_names.items()],
        # rGT/dGT lines of ids that are not among the topic's photos (none in Div400).
        'relevance_without_photo': [[p, r] for p, r in gt.relevance.items() if p not in listed],
        'clusters_without_photo': [[p, c] for p, c in gt.clusters.items() if p not in listed],
    })
  return {'source': os.path.abspath(split.root), 'topics': topics}


# ----------------------------------------------------------------------------- reading
