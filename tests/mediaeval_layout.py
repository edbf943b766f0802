"""A tiny MediaEval dataset written in the official Div400 or Div150Cred layout, for tests.

`build(root, style, split)` writes two topics (photo 'p5' in both), HTML in a description,
BOMs, CRLF and blank lines, and two visual descriptors; shared by the reader and TFDS tests.
"""
from __future__ import annotations

import os
from xml.sax.saxutils import quoteattr

HTML = ('<b>Great</b> view&nbsp;of the &amp;quot;tower&amp;quot;<br/>see '
        '<a href="http://x.org/?a=1&amp;b=2" rel="nofollow">my   site</a> &lt;3')
HTML_CLEAN = 'Great view of the "tower" see my site <3'


def topics_of(style):
  """Two topics; titles follow the dataset's convention. Photo 'p5' is in both topics."""
  t1, t2 = (('Tower of Tests', 'Old Bridge') if style == 'div400' else
            ('angel_of_the_north', 'old_bridge'))
  return [
      dict(number=7, title=t1, lat='47.423056', lon='-9.5', wiki='http://en.wikipedia.org/x',
           # (id, rank, views, username, userid, title, tags, description)
           photos=[('p3', 3, '12', 'ann', 'u1@N00', 'third', 'a b', 'plain'),
                   ('p1', 1, '995', 'bob', None, 'first & best', 'tower night', HTML),
                   ('p2', 2, '0', None, None, 'second', '', ''),
                   ('p5', 4, '7', 'eve', '', 'shared', 'x', '')],
           rgt=[('p1', '1'), ('p2', '0'), ('p3', '1'), ('p5', '-1')],
           dgt=[('p1', 3), ('p3', 1)],
           names=[(1, 'Night view '), (2, 'close up'), (3, 'side  View')]),
      dict(number=8, title=t2, lat='', lon=None, wiki=None,
           photos=[('p5', 1, '5', 'eve', 'u5', 't', '', ''),
                   ('p4', 2, '6', 'dan', 'u4', 't', '', '')],
           rgt=[('p4', '1'), ('p5', '1')],
           dgt=[('p4', 1), ('p5', 2)],
           names=[(1, 'night VIEW'), (2, 'Close up')]),
  ]


def write(path, text, bom=False):
  """Writes UTF-8 text (with a BOM when asked), creating the directories."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write((b'\xef\xbb\xbf' if bom else b'') + text.encode('utf-8'))


def build(root, style='div400', split='dev'):
  """Writes a small dataset in the Div400 or Div150Cred layout; returns the split dir."""
  prefix = f'{split}set'
  if style == 'div400':
    split_dir, topics_name = os.path.join(root, prefix, 'keywords'), f'{prefix}keywords_topics.xml'
  else:
    split_dir, topics_name = os.path.join(root, prefix), f'{prefix}_topics.xml'
  topics = topics_of(style)
  parts = ['<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n<topics>\n']
  for t in topics:
    parts.append(f'<topic>\n\t<number>{t["number"]}</number>\n\t<title>{t["title"]}</title>\n')
    if t['lat'] is not None:
      parts.append(f'\t<latitude>{t["lat"]}</latitude>\n')
    if t['lon'] is not None:
      parts.append(f'\t<longitude>{t["lon"]}</longitude>\n')
    if t['wiki'] is not None:
      parts.append(f'\t<wiki>{t["wiki"]}</wiki>\n')
    parts.append('</topic>\n')
  parts.append('</topics>\n')
  write(os.path.join(split_dir, topics_name), ''.join(parts))
  for k, t in enumerate(topics):
    title = t['title']
    lines = [f'<?xml version="1.0" encoding="UTF-8"?>\n<photos monument="{title}">']
    for pid, rank, views, user, userid, ptitle, tags, desc in t['photos']:
      attrs = dict(date_taken='2010-08-14 18:23:36', description=desc, id=pid, latitude='0',
                   license='1', longitude='0', nbComments='0', rank=str(rank), tags=tags,
                   title=ptitle, url_b='http://x', views=views)
      if user is not None:
        attrs['username'] = user
      if userid is not None and style == 'div150cred':
        attrs['userid'] = userid
      lines.append('<photo ' + ' '.join(f'{a}={quoteattr(v)}' for a, v in attrs.items()) + '/>')
    lines.append('</photos>\n')
    write(os.path.join(split_dir, 'xml', f'{title}.xml'), '\n'.join(lines), bom=k == 1)
    gt = os.path.join(split_dir, 'gt')
    # rGT: LF, blank line inside, trailing CR on one line; dGT: CRLF; dclusterGT: CRLF, no
    # final newline (as in Div400).
    rgt = [f'{p},{r}' for p, r in t['rgt']]
    rgt.insert(2, '')
    rgt[0] += '\r'
    write(os.path.join(gt, 'rGT', f'{title} rGT.txt'), '\n'.join(rgt) + '\n', bom=k == 1)
    write(os.path.join(gt, 'dGT', f'{title} dGT.txt'),
          ''.join(f'{p},{c}\r\n' for p, c in t['dgt']))
    write(os.path.join(gt, 'dGT', f'{title} dclusterGT.txt'),
          '\r\n'.join(f'{c},{n}' for c, n in t['names']))
    ids = sorted(p[0] for p in t['photos'])  # CSV order: by id (as in Div400), not by rank.
    for feat, dim in (('CM', 2), ('HOG', 3)):
      rows = [','.join([pid] + [repr(descriptor_value(feat, pid, j)) for j in range(dim)])
              for pid in ids]
      write(os.path.join(split_dir, 'descvis', 'img', f'{title} {feat}.csv'),
            '\n'.join(rows) + '\n')
  return split_dir


def descriptor_value(feat, pid, j):
  """Value j of descriptor `feat` of photo `pid` in the written CSVs."""
  return (10.0 if feat == 'HOG' else 0.0) + int(pid[1:]) + j / 4
