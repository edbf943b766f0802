"""Tests for colt_jax.evaluation.runfile."""
from __future__ import annotations

import os

import pytest

from colt_jax.evaluation import runfile
from colt_jax.evaluation.runfile import RunFileError

TOPICS = (26, 27)
ALLOWED = {26: {'a1', 'a2', 'a3'}, 27: {'b1', 'b2'}}
VALID_LINES = [
    '26 0 a1 0 0.900 r',
    '26 0 a2 1 0.900 r',
    '26 0 a3 2 0.100 r',
    '27 0 b2 0 1.000 r',
    '27 0 b1 1 -2.5 r',
]


def write_lines(tmp_path, lines, name='run.txt'):
  path = tmp_path / name
  path.write_text(''.join(l + '\n' for l in lines))
  return path


def test_valid_file(tmp_path):
  path = write_lines(tmp_path, VALID_LINES)
  assert runfile.validate_run(path, TOPICS, ALLOWED) == {26: ['a1', 'a2', 'a3'],
                                                        27: ['b2', 'b1']}
  assert runfile.read_run(path)[27] == [('b2', 1.0), ('b1', -2.5)]


def test_rank_may_start_at_one(tmp_path):
  lines = ['26 0 a1 1 1 r', '26 0 a2 2 1 r', '27 0 b1 0 1 r']
  path = write_lines(tmp_path, lines)
  assert runfile.validate_run(path, TOPICS, ALLOWED) == {26: ['a1', 'a2'], 27: ['b1']}


def test_whole_collection_protocol_skips_membership(tmp_path):
  lines = ['26 0 b1 0 1 r', '27 0 zzz 0 1 r']
  path = write_lines(tmp_path, lines)
  assert runfile.validate_run(path, TOPICS) == {26: ['b1'], 27: ['zzz']}
  with pytest.raises(RunFileError, match=r'run\.txt:1: .*rGT'):
    runfile.validate_run(path, TOPICS, ALLOWED)


def bad(lineno, text):
  lines = list(VALID_LINES)
  lines[lineno - 1] = text
  return lines


CASES = [
    # (lines, bad line number, message fragment)
    (bad(2, '26 0 a2 1 0.900'), 2, 'expected 6'),
    (bad(2, '26 0 a2 1 0.900 r extra'), 2, 'expected 6'),
    (bad(3, ''), 3, 'expected 6'),
    (bad(4, 'x 0 b2 0 1.0 r'), 4, 'not an integer'),
    (bad(4, '99 0 b2 0 1.0 r'), 4, 'qid 99 is not a topic'),
    (VALID_LINES[:3] + ['27 0 b2 0 1.0 r', '26 0 a9 0 1.0 r'], 5, 'not contiguous'),
    (bad(1, '26 0 a1 2 0.900 r'), 1, 'first rank of qid 26 is 2'),
    (bad(3, '26 0 a3 3 0.100 r'), 3, 'rank 3 follows rank 1 for qid 26'),
    (bad(2, '26 0 a2 0 0.900 r'), 2, 'rank 0 follows rank 0'),
    (bad(2, '26 0 a2 1.5 0.900 r'), 2, 'rank'),
    (bad(2, '26 0 a2 1_0 0.900 r'), 2, 'rank'),
    (bad(3, '26 0 a3 2 0.95 r'), 3, 'increases'),
    (bad(3, '26 0 a3 2 nan r'), 3, 'finite'),
    (bad(3, '26 0 a3 2 abc r'), 3, 'finite'),
    (bad(3, '26 0 a1 2 0.100 r'), 3, 'docno a1 repeated for qid 26'),
    (bad(5, '27 0 a1 1 -2.5 r'), 5, 'docno a1 is not a photo of the rGT file of qid 27'),
    (bad(5, '27 0 b1 1 -2.5 other'), 5, 'runid'),
]


@pytest.mark.parametrize('lines,lineno,fragment', CASES)
def test_rule_violations_name_the_line(tmp_path, lines, lineno, fragment):
  path = write_lines(tmp_path, lines)
  with pytest.raises(RunFileError) as info:
    runfile.validate_run(path, TOPICS, ALLOWED)
  assert info.value.line == lineno
  assert str(info.value).startswith(f'{path}:{lineno}: ')
  assert fragment in str(info.value)
  assert isinstance(info.value, ValueError)


def test_more_than_50_lines(tmp_path):
  allowed = {26: {f'p{i}' for i in range(60)}}
  lines = [f'26 0 p{i} {i} {100 - i} r' for i in range(51)]
  path = write_lines(tmp_path, lines)
  with pytest.raises(RunFileError, match=r':51: more than 50 lines for qid 26'):
    runfile.validate_run(path, (26,), allowed)
  path = write_lines(tmp_path, lines[:50])
  assert len(runfile.validate_run(path, (26,), allowed)[26]) == 50


def test_missing_topic_and_empty_file(tmp_path):
  path = write_lines(tmp_path, VALID_LINES[:3])
  with pytest.raises(RunFileError, match=r'without lines: \[27\]') as info:
    runfile.validate_run(path, TOPICS, ALLOWED)
  assert info.value.line is None
  path = write_lines(tmp_path, [])
  with pytest.raises(RunFileError, match='no lines'):
    runfile.validate_run(path, TOPICS, ALLOWED)


def test_round_trip(tmp_path):
  path = tmp_path / 'out.txt'
  run = {27: [('b2', 0.3), ('b1', 0.3)], 26: [('a3', 5.0), ('a1', 1.25), ('a2', -1.0)]}
  runfile.write_run(path, run, 'myrun', ALLOWED)
  assert runfile.validate_run(path, TOPICS, ALLOWED) == {26: ['a3', 'a1', 'a2'],
                                                        27: ['b2', 'b1']}
  lines = path.read_text().splitlines()
  assert lines[0] == '26 0 a3 0 5.000000 myrun'  # monotone scores are kept.
  assert runfile.read_run(path)[26] == [('a3', 5.0), ('a1', 1.25), ('a2', -1.0)]
  assert sorted(os.listdir(tmp_path)) == ['out.txt']


def test_non_monotone_scores_become_rank_derived(tmp_path):
  path = tmp_path / 'out.txt'
  run = {26: [('a1', 0.1), ('a2', 0.9), ('a3', 0.5)], 27: [('b1', 1.0), ('b2', 0.5)]}
  runfile.write_run(path, run, 'mmr', ALLOWED)
  got = runfile.read_run(path)
  assert [d for d, _ in got[26]] == ['a1', 'a2', 'a3']
  assert [s for _, s in got[26]] == pytest.approx([1.0, 2 / 3, 1 / 3], abs=1e-6)
  assert [s for _, s in got[27]] == [1.0, 0.5]  # rank-derived everywhere.
  runfile.validate_run(path, TOPICS, ALLOWED)


def test_bare_ids_and_whole_collection(tmp_path):
  path = tmp_path / 'out.txt'
  runfile.write_run(path, {26: ['b1', 'x'], 27: ['a1']}, 'r', topics=TOPICS)
  assert runfile.validate_run(path, TOPICS) == {26: ['b1', 'x'], 27: ['a1']}


@pytest.mark.parametrize('run,run_id,kwargs,fragment', [
    ({26: [('a1', 1.0)] * 2, 27: ['b1']}, 'r', {}, 'repeated'),
    ({26: ['a1', 'b1'], 27: ['b1']}, 'r', {}, 'not a photo'),
    ({26: ['a1'], 27: ['b1']}, 'my run', {}, 'run_id'),
    ({26: ['a1'], 27: ['b1']}, '', {}, 'run_id'),
    ({26: ['a1']}, 'r', {}, 'missing'),
    ({26: ['a1'], 27: []}, 'r', {}, 'empty'),
    ({26: ['a1'], 27: ['b1'], 28: ['c']}, 'r', {}, 'not topics'),
    ({26: ['a 1'], 27: ['b1']}, 'r', {'allowed_ids': None, 'topics': TOPICS}, 'docno'),
    ({26: [f'p{i}' for i in range(51)]}, 'r', {'allowed_ids': None}, 'more than 50'),
    ({26: [('a1', 1.0, 2)], 27: ['b1']}, 'r', {}, 'entry'),
])
def test_writer_refuses_invalid_runs(tmp_path, run, run_id, kwargs, fragment):
  path = tmp_path / 'out.txt'
  kwargs = {'allowed_ids': ALLOWED, **kwargs}
  with pytest.raises(ValueError, match=fragment):
    runfile.write_run(path, run, run_id, **kwargs)
  assert os.listdir(tmp_path) == []


def test_writer_keeps_old_file_on_error(tmp_path):
  path = tmp_path / 'out.txt'
  runfile.write_run(path, {26: ['a1'], 27: ['b1']}, 'r', ALLOWED)
  before = path.read_text()
  with pytest.raises(ValueError):
    runfile.write_run(path, {26: ['a1', 'a1'], 27: ['b1']}, 'r', ALLOWED)
  assert path.read_text() == before
  assert os.listdir(tmp_path) == ['out.txt']


def test_non_finite_scores_use_rank_derived_sims(tmp_path):
  path = tmp_path / 'out.txt'
  runfile.write_run(path, {26: [('a1', float('nan')), ('a2', 0.0)], 27: ['b1']}, 'r',
                    ALLOWED)
  assert runfile.read_run(path) == {26: [('a1', 1.0), ('a2', 0.5)], 27: [('b1', 1.0)]}
