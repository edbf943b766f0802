"""TREC-style run files as the official MediaEval scorer accepts them.

One line per returned photo: `qid iter docno rank sim runid`, e.g.
`26 0 4914949671 0 1.000000 myrun`. The scorer rejects a whole file that breaks any of
these rules (see `shared/spec/mediaeval-eval.md`), all enforced by `validate_run`:

1. exactly 6 whitespace-separated fields per line (blank lines included);
2. qid is an int and a topic of the split; every topic of the split has lines;
3. the lines of one qid are contiguous;
4. rank is an int that starts at 0 (or 1) and grows by exactly 1 from line to line within
   a qid;
5. sim is a finite number that never increases within a qid (ties allowed);
6. a docno appears at most once per qid and, when `allowed_ids` is given, is a photo id of
   that topic's rGT file;
7. at most 50 lines per qid;
8. one runid for the whole file.

Protocols: the official protocol ranks only the topic's own photos, so pass the rGT ids
as `allowed_ids`. Under the CoLT paper's whole-collection protocol the lists may hold
photos of other topics; pass `allowed_ids=None` to skip rule 6's membership check (such
files are for this project's evaluator, the official scorer would refuse them).
"""
from __future__ import annotations

import math
import os
import tempfile
from typing import Collection, Mapping, Optional, Sequence, Union

from colt_jax.util import outputs
from colt_jax.util.errors import InputError

MAX_PER_TOPIC = 50

Entry = Union[str, tuple]


class RunFileError(InputError):
  """A run file (or a run about to be written) breaks a rule of the scorer."""

  def __init__(self, path: str, line: Optional[int], rule: str):
    self.path = str(path)
    self.line = line
    self.rule = rule
    where = self.path if line is None else f'{self.path}:{line}'
    super().__init__(f'{where}: {rule}')


def _is_token(s: str) -> bool:
  return bool(s) and len(s.split()) == 1 and s == s.strip()


def _parse_float(s: str) -> Optional[float]:
  if '_' in s:  # Python accepts '1_0'; Java's parser does not.
    return None
  try:
    v = float(s)
  except ValueError:
    return None
  return v if math.isfinite(v) else None


def _parse_int(s: str) -> Optional[int]:
  if '_' in s:
    return None
  try:
    return int(s)
  except ValueError:
    return None


def _numbered_lines(name: str) -> list:
  """[(1-based line number, text)] of a run file; unreadable files are a `RunFileError`."""
  try:
    with open(name, encoding='utf-8') as f:
      return list(enumerate(f, start=1))
  except UnicodeDecodeError as e:
    raise RunFileError(name, None, f'not UTF-8 text ({e.reason} at byte {e.start})') from None
  except OSError as e:
    raise RunFileError(name, None, f'cannot read ({e.strerror})') from None


def validate_run(path: Union[str, os.PathLike],
                 topics: Collection[int],
                 allowed_ids: Optional[Mapping[int, Collection[str]]] = None
                 ) -> dict[int, list[str]]:
  """Checks every rule of the module docstring; returns qid -> docnos in rank order.

  Args:
    path: the run file.
    topics: the split's topic numbers; the file must cover exactly these.
    allowed_ids: topic -> photo ids of its rGT file; None skips the docno-membership check
      (whole-collection protocol).

  Raises:
    RunFileError: naming the file, the 1-based line and the rule broken.
    ValueError: `allowed_ids` lacks a topic of `topics`.
  """
  topics = set(topics)
  if allowed_ids is not None:
    lacking = sorted(topics - set(allowed_ids))
    if lacking:
      raise ValueError(f'allowed_ids lacks topics {lacking}')
  name = os.fspath(path)
  run: dict[int, list[str]] = {}
  run_id = None
  cur = None  # qid of the current block
  prev_rank = prev_sim = None
  seen: set = set()
  for lineno, raw in _numbered_lines(name):

    def fail(rule, lineno=lineno):
      raise RunFileError(name, lineno, rule)

    fields = raw.split()
    if len(fields) != 6:
      fail(f'expected 6 whitespace-separated fields, got {len(fields)}')
    qid_s, _, docno, rank_s, sim_s, rid = fields
    qid = _parse_int(qid_s)
    if qid is None:
      fail(f'qid {qid_s!r} is not an integer')
    if qid not in topics:
      fail(f'qid {qid} is not a topic of the split')
    rank = _parse_int(rank_s)
    if rank is None:
      fail(f'rank {rank_s!r} is not an integer')
    sim = _parse_float(sim_s)
    if sim is None:
      fail(f'sim {sim_s!r} is not a finite number')
    if run_id is None:
      run_id = rid
    elif rid != run_id:
      fail(f'runid {rid!r} differs from the file\'s runid {run_id!r}')
    if qid != cur:
      if qid in run:
        fail(f'lines of qid {qid} are not contiguous')
      if rank not in (0, 1):
        fail(f'first rank of qid {qid} is {rank}, must be 0 or 1')
      cur, seen = qid, set()
      run[qid] = []
    else:
      if rank != prev_rank + 1:
        fail(f'rank {rank} follows rank {prev_rank} for qid {qid}')
      if sim > prev_sim:
        fail(f'sim {sim_s} increases (previous {prev_sim!r}) for qid {qid}')
    if docno in seen:
      fail(f'docno {docno} repeated for qid {qid}')
    if allowed_ids is not None and docno not in allowed_ids[qid]:
      fail(f'docno {docno} is not a photo of the rGT file of qid {qid}')
    if len(run[qid]) >= MAX_PER_TOPIC:
      fail(f'more than {MAX_PER_TOPIC} lines for qid {qid}')
    seen.add(docno)
    run[qid].append(docno)
    prev_rank, prev_sim = rank, sim
  if not run:
    raise RunFileError(name, None, 'the file has no lines')
  missing = sorted(topics - set(run))
  if missing:
    raise RunFileError(name, None, f'topics of the split without lines: {missing}')
  return run


def read_run(path: Union[str, os.PathLike]) -> dict[int, list[tuple[str, float]]]:
  """Lenient parse: qid -> [(docno, sim)] in file order; skips blank lines, checks little.

  Raises:
    RunFileError: a non-blank line without 6 fields or with a non-numeric qid or sim.
  """
  name = os.fspath(path)
  out: dict[int, list[tuple[str, float]]] = {}
  for lineno, raw in _numbered_lines(name):
    fields = raw.split()
    if not fields:
      continue
    if len(fields) != 6:
      raise RunFileError(name, lineno,
                         f'expected 6 whitespace-separated fields, got {len(fields)}')
    try:
      qid, sim = int(fields[0]), float(fields[4])
    except ValueError as e:
      raise RunFileError(name, lineno, f'bad qid or sim: {e}') from None
    out.setdefault(qid, []).append((fields[2], sim))
  return out


def _split_entry(entry: Entry) -> tuple[str, Optional[float]]:
  if isinstance(entry, str):
    return entry, None
  try:
    docno, score = entry
  except (TypeError, ValueError):
    raise ValueError(f'a run entry is a docno or (docno, score), got {entry!r}') from None
  return docno, score


def _as_score(score) -> Optional[float]:
  """A finite float, or None for a missing or non-finite score."""
  if score is None or isinstance(score, bool):
    return None
  try:
    v = float(score)
  except (TypeError, ValueError):
    return None
  return v if math.isfinite(v) else None


def run_sims(run: Mapping[int, Sequence[Entry]]) -> dict[int, list[float]]:
  """The sims `write_run` writes: the method's scores, or rank-derived ones.

  Rule (one choice for the whole file): when every entry carries a finite score and the
  scores never increase within any qid, the method's scores are written; otherwise every
  qid gets rank-derived sims (n - rank) / n for its n entries (1.0 for the first, strictly
  decreasing), so the file is valid whatever order the method produced (MMR, CoLT, ...).
  """
  parsed = {q: [_as_score(_split_entry(e)[1]) for e in entries]
            for q, entries in run.items()}
  monotone = all(s is not None for scores in parsed.values() for s in scores) and all(
      all(a >= b for a, b in zip(scores, scores[1:])) for scores in parsed.values())
  if monotone:
    return {q: list(scores) for q, scores in parsed.items()}
  return {q: [(len(s) - r) / len(s) for r in range(len(s))] for q, s in parsed.items()}


def write_run(path: Union[str, os.PathLike],
              run: Mapping[int, Sequence[Entry]],
              run_id: str,
              allowed_ids: Optional[Mapping[int, Collection[str]]] = None,
              topics: Optional[Collection[int]] = None) -> None:
  """Writes a run file the scorer accepts, atomically, or raises and writes nothing.

  Ranks start at 0; sims follow `run_sims` and are printed with 6 decimals. The written
  file is checked with `validate_run` before it replaces `path`.

  Args:
    path: destination file.
    run: qid -> ranked entries, best first; an entry is (docno, score) or a bare docno.
    run_id: the run's name (no whitespace).
    allowed_ids: topic -> rGT photo ids (official protocol), or None (whole-collection
      protocol: no membership check).
    topics: the split's topics, all of which must be in `run`; defaults to the keys of
      `allowed_ids` when given, else to the keys of `run`.

  Raises:
    ValueError: the run would make an invalid file (the message names the rule).
  """
  name = os.fspath(path)
  if not isinstance(run_id, str) or not _is_token(run_id):
    raise ValueError(f'run_id must be a non-empty string without whitespace: {run_id!r}')
  if topics is None:
    topics = allowed_ids.keys() if allowed_ids is not None else run.keys()
  topics = set(topics)
  if allowed_ids is not None:
    lacking = sorted(topics - set(allowed_ids))
    if lacking:
      raise ValueError(f'allowed_ids lacks topics {lacking}')
  extra = sorted(set(run) - topics)
  if extra:
    raise ValueError(f'{name}: run has qids that are not topics of the split: {extra}')
  missing = sorted(topics - set(run))
  if missing:
    raise ValueError(f'{name}: topics of the split missing from the run: {missing}')
  for qid, entries in run.items():
    if isinstance(qid, bool) or not isinstance(qid, int):
      raise ValueError(f'{name}: qid must be an int, got {qid!r}')
    if not entries:
      raise ValueError(f'{name}: qid {qid} has an empty list')
    if len(entries) > MAX_PER_TOPIC:
      raise ValueError(f'{name}: qid {qid} has {len(entries)} entries, '
                       f'more than {MAX_PER_TOPIC}')
    seen = set()
    for e in entries:
      docno, _ = _split_entry(e)
      if not isinstance(docno, str) or not _is_token(docno):
        raise ValueError(f'{name}: qid {qid}: docno must be a non-empty string without '
                         f'whitespace, got {docno!r}')
      if docno in seen:
        raise ValueError(f'{name}: docno {docno} repeated for qid {qid}')
      seen.add(docno)
      if allowed_ids is not None and docno not in allowed_ids[qid]:
        raise ValueError(f'{name}: docno {docno} is not a photo of the rGT file of '
                         f'qid {qid}')
  sims = run_sims(run)
  directory = os.path.dirname(os.path.abspath(name))
  fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(name) + '.',
                             suffix='.tmp', dir=directory)
  try:
    outputs.usual_mode(tmp)
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      for qid in sorted(run):
        for rank, (e, sim) in enumerate(zip(run[qid], sims[qid])):
          docno, _ = _split_entry(e)
          f.write(f'{qid} 0 {docno} {rank} {sim:.6f} {run_id}\n')
      f.flush()
      os.fsync(f.fileno())
    validate_run(tmp, topics, allowed_ids)
    os.replace(tmp, name)
  except BaseException as e:
    try:
      os.unlink(tmp)
    except FileNotFoundError:
      pass
    if isinstance(e, OSError) and e.filename is None:
      e.filename = name  # a full disk's error names no file
    raise
