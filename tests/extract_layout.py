"""A tiny official layout with photos for the extraction tests (build_split)."""
from __future__ import annotations
import os
from xml.sax.saxutils import escape, quoteattr
from tiny_clip import random_image  # pylint: disable=g-bad-import-order


# Two topics; photo 104 is in both (its image only in the second topic's folder). 7 unique
# photos: with a global batch of 4 the last batch holds 3.
TOPICS = [
    dict(number=11, title='Tower of Tests',
         photos=[('101', 'first', 'tower night', '<b>Night</b> shot &amp; more'),
                 ('102', 'second', 'tower', ''), ('103', 'third', 'door', 'the <i>door</i>'),
                 ('104', 'shared', 'bridge tower', 'both')],
         rgt=[('101', 1), ('102', 1), ('103', 0), ('104', 1)],
         dgt=[('101', 1), ('102', 2), ('104', 2)], names=[(1, 'Night view '), (2, 'close up')]),
    dict(number=12, title='Old Bridge',
         photos=[('104', 'shared', 'bridge tower', 'both'), ('105', 'arch', 'bridge', ''),
                 ('106', 'river', 'water', 'calm'), ('107', 'x', '', '')],
         rgt=[('104', 1), ('105', 1), ('106', 1), ('107', -1)],
         dgt=[('104', 1), ('105', 2), ('106', 1)], names=[(1, 'night VIEW'), (2, 'side  View')]),
]


PHOTO_IDS = ['101', '102', '103', '104', '105', '106', '107']


IMAGE_ONLY_IN = {'104': 'Old Bridge'}


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text)


def build_split(root: str) -> str:
  """A tiny Div400 testset (official layout, images and two descriptors); returns root."""
  split_dir = os.path.join(root, 'testset', 'keywords')
  topics = ''.join(f'<topic>\n<number>{t["number"]}</number>\n<title>{escape(t["title"])}'
                   '</title>\n</topic>\n' for t in TOPICS)
  _write(os.path.join(split_dir, 'testsetkeywords_topics.xml'),
         f'<?xml version="1.0" encoding="UTF-8"?>\n<topics>\n{topics}</topics>\n')
  for t in TOPICS:
    title = t['title']
    rows = []
    for rank, (pid, ptitle, tags, desc) in enumerate(t['photos'], 1):
      attrs = dict(id=pid, rank=str(rank), views='3', title=ptitle, tags=tags,
                   description=desc, username='u')
      rows.append('<photo ' + ' '.join(f'{k}={quoteattr(v)}' for k, v in attrs.items()) + '/>')
      if IMAGE_ONLY_IN.get(pid, title) == title:
        image_path = os.path.join(split_dir, 'img', title, f'{pid}.jpg')
        os.makedirs(os.path.dirname(image_path), exist_ok=True)
        random_image(int(pid), size=(36 + int(pid) % 5, 28)).save(image_path, quality=95)
    _write(os.path.join(split_dir, 'xml', f'{title}.xml'),
           '<?xml version="1.0" encoding="UTF-8"?>\n<photos>\n' + '\n'.join(rows) +
           '\n</photos>\n')
    gt = os.path.join(split_dir, 'gt')
    _write(os.path.join(gt, 'rGT', f'{title} rGT.txt'), ''.join(f'{p},{r}\n' for p, r in t['rgt']))
    _write(os.path.join(gt, 'dGT', f'{title} dGT.txt'),
           ''.join(f'{p},{c}\r\n' for p, c in t['dgt']))
    _write(os.path.join(gt, 'dGT', f'{title} dclusterGT.txt'),
           '\r\n'.join(f'{c},{n}' for c, n in t['names']))
    for feat, dim in (('CM', 2), ('HOG', 3)):
      lines = [','.join([pid] + [repr(float(int(pid) % 7 * (j + 1) + (feat == 'HOG') * 10))
                                 for j in range(dim)]) for pid, *_ in t['photos']]
      _write(os.path.join(split_dir, 'descvis', 'img', f'{title} {feat}.csv'),
             '\n'.join(lines) + '\n')
  return root
