"""Read, validate and merge results files (JSON lines, docs/results-schema.md).

:func:`load` returns :class:`Results`: the result rows the merge kept, in matrix order, as an
Arrow table, with the entries, the matrix columns, the run records and the end records. Every
problem is a :class:`ResultsError` with a one-line message ``FILE:LINE: problem`` that the
command line prints as is; all input is validated before anything is written anywhere.

How a file is read. It is read in chunks of whole lines (32 MiB), two chunks parsed at a time
by worker threads and taken in in file order. Each chunk is parsed column by column by
pyarrow's JSON reader with an explicit schema: only the fields the reports use are converted,
the rest of each line (the ``detail`` evidence, most of its bytes) is checked for being JSON
and skipped. Before a chunk is trusted, everything the line-by-line reading below
would reject is ruled out: one row per non-blank line, UTF-8, no byte-order mark, no line
nested deeper than :data:`MAX_DEPTH`, every record of a known kind and schema, required
fields present. A chunk that fails any of these, or that pyarrow refuses, is read again line
by line with Python's ``json`` (the same checks, one line at a time), which names the first
bad line -- or, where nothing is wrong after all (JSON allows a key twice in an object,
pyarrow does not), gives the same columns. Either way the rows then go through the same
column-wise checks (vocabularies, ranges, run records), so both readings accept and reject
the same files with the same messages.

A file may hold several runs one after another (a re-run appends to the file): each starts
with its run record, its rows carry its ``run_id``, and it may end with an end record. The
latest row of a cell wins: the later line of a file, the later file on the command line.

The jobs, one module each: what a line may hold and the checks (:mod:`reports.records`), the
lines of a file in chunks (:mod:`reports.lines`), a chunk into Arrow columns
(:mod:`reports.parse`), the digests (:mod:`reports.digests`), the order of the matrix
(:mod:`reports.ordering`), merging (:mod:`reports.merge`) and what comes back
(:mod:`reports.results`); this module reads the files, one after another, with a pool of parsers.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detconf.gc_pause import gc_paused
from detconf.reports import lines as lines_mod
from detconf.reports.lines import MAX_LINE_BYTES, read_chunks
from detconf.reports.merge import merge
from detconf.reports.parse import LineProblem, Part, parse_chunk
from detconf.reports.readfile import Unreadable, open_regular
from detconf.reports.records import (
    COLUMN_KEY, ENTRY_ATTRIBUTES, ENTRY_KEY, MERGE_KEY, TABLE_SCHEMA, ResultsError, after_end_problem, fail,
    first_semantic_problem, normalise, second_end_problem,
)
from detconf.reports.results import Results

#: Chunks parsed at once, at most (pyarrow and numpy let go of the interpreter while they work).
READ_THREADS = 2

#: The columns merging, ordering and the entries need, whatever a caller keeps.
_ALWAYS = tuple(dict.fromkeys(MERGE_KEY + ENTRY_KEY + COLUMN_KEY + ENTRY_ATTRIBUTES + ("run_id",)))


@dataclass
class _File:
    name: str
    index: int
    keep: tuple[str, ...]
    parts: list[pa.Table] = dataclasses.field(default_factory=list)
    fingerprints: list = dataclasses.field(default_factory=list)
    runs: list[tuple[int, dict]] = dataclasses.field(default_factory=list)
    ends: list[tuple[int, dict]] = dataclasses.field(default_factory=list)
    run_lines: dict[str, int] = dataclasses.field(default_factory=dict)  # run_id -> line of its first record
    end_lines: dict[str, int] = dataclasses.field(default_factory=dict)  # run_id -> line of its end record
    after_end: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # run_id -> [first line, rows, end line]
    results: int = 0


class _Inline:
    """Runs a task at once (no worker threads): the same interface as an executor."""

    def submit(self, fn, *args) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result
            future.set_exception(exc)
        return future


def _run_lines(table: pa.Table, run_lines: dict[str, int]) -> np.ndarray:
    """Per row, the line of its run's record in ``run_lines`` (-1: none yet)."""
    encoded = pc.dictionary_encode(table.column("run_id")).combine_chunks()
    lookup = np.asarray([run_lines.get(r, -1) for r in encoded.dictionary.to_pylist()] or [-1], dtype=np.int64)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


def _accept(out: _File, part: Part, first_line: int) -> None:
    """Take in a parsed chunk, in file order: its run and end records, then its result rows,
    checked column-wise and cut down to the columns kept."""
    for index, rec in part.others:
        line = first_line + index
        if rec["record"] == "run":
            out.runs.append((line, rec))
            out.run_lines.setdefault(rec["run_id"], line)
        else:
            if out.run_lines.get(rec["run_id"], line) >= line:
                raise fail(out.name, line, f"end record of run {rec['run_id']!r} comes before any run record "
                                            "with that run_id")
            if rec["run_id"] in out.end_lines:  # a run ends once: the writer never writes two
                raise fail(out.name, line, second_end_problem(rec["run_id"], out.end_lines[rec["run_id"]]))
            out.end_lines[rec["run_id"]] = line
            out.ends.append((line, rec))
    n = part.table.num_rows
    if not n:
        return
    lines = part.lines + first_line
    table = normalise(part.table)
    bad = first_semantic_problem(table, lines, _run_lines(table, out.run_lines))
    if bad is not None:
        row, problem = bad
        raise fail(out.name, int(lines[row]), problem)
    if out.end_lines:  # rows after their run's end record: counted, refused once the file is read
        ends = _run_lines(table, out.end_lines)
        after = (ends >= 0) & (lines > ends)
        if after.any():
            ids = table.column("run_id").to_pylist()
            for k in np.flatnonzero(after).tolist():
                seen = out.after_end.setdefault(ids[k], [int(lines[k]), 0, int(ends[k])])
                seen[1] += 1
    table = table.select(list(out.keep))
    out.parts.append(table.append_column("file", pa.array(np.full(n, out.index, dtype=np.int32)))
                     .append_column("line", pa.array(lines))
                     .append_column("start", pa.array(part.starts))
                     .append_column("end", pa.array(part.ends))
                     .append_column("newline_after", pa.array(part.newline_after)))
    if part.fingerprints is not None:
        out.fingerprints += part.fingerprints
    out.results += n


def read_file(path: str | os.PathLike, want_fingerprints: bool = False, pool=None, ahead: int = 1, *,
              index: int = 0, keep: Iterable[str] | None = None, free: list | None = None) -> _File:
    """Read and check one results file (see the module docstring). Chunks are parsed by
    ``pool`` (default: here), ``ahead`` chunks beyond the one awaited; problems are reported in
    file order all the same. ``keep``: the result columns to keep (default: all); ``free``:
    buffers to read chunks into (those of chunks taken in go back there)."""
    name = os.fspath(path)
    keep = tuple(TABLE_SCHEMA.names) if keep is None else tuple(dict.fromkeys((*_ALWAYS, *keep)))
    out = _File(name, index, keep)
    pool = pool or _Inline()
    pending: collections.deque = collections.deque()
    lines_before = 0
    free = [] if free is None else free  # buffers of chunks already taken in, to read the next ones into

    def buffer(size: int) -> bytearray:
        for k, buf in enumerate(free):
            if len(buf) >= size:
                return free.pop(k)
        if size < lines_mod.CHUNK_BYTES:  # a small file, or the last part of one: its size
            return bytearray(size)
        return bytearray(max(size, lines_mod.CHUNK_BYTES + (1 << 20)))  # room for the next chunk's carry too

    def collect() -> None:
        nonlocal lines_before
        future, chunk = pending.popleft()
        try:
            part = future.result()
        except LineProblem as exc:
            raise fail(name, lines_before + exc.index + 1, exc.problem) from None
        _accept(out, part, lines_before + 1)
        lines_before += part.count
        buf, chunk.buf = chunk.buf, None
        if sys.getrefcount(buf) == 2:  # nothing made from the chunk still points into it
            free.append(buf)

    try:
        f = open_regular(path)  # a folder, pipe or device is refused before a byte is read
    except Unreadable as exc:
        raise fail(name, None, f"cannot read ({exc.problem})") from None
    try:
        with f:
            for data, offset in read_chunks(f, buffer):
                if data is None:
                    while pending:
                        collect()
                    raise fail(name, lines_before + 1, f"line longer than {MAX_LINE_BYTES >> 20} MiB")
                pending.append((pool.submit(parse_chunk, data, offset, want_fingerprints), data))
                del data
                while len(pending) > ahead:
                    collect()
            while pending:
                collect()
    except OSError as exc:
        raise fail(name, None, f"cannot read ({exc.strerror or exc})") from None
    if out.after_end:
        run_id, (first, count, end) = min(out.after_end.items(), key=lambda item: item[1][0])
        raise fail(name, first, after_end_problem(run_id, count, end))
    if not out.runs and not out.ends and not out.results:
        raise fail(name, None, "empty file (no records)")
    return out


def load(paths: Iterable[str | os.PathLike] | str | os.PathLike, key: tuple[str, ...] = MERGE_KEY, *,
         fingerprints: bool = False, columns: Iterable[str] | None = None) -> Results:
    """Read, validate and merge results files; a later file/line wins for a repeated ``key``.

    Rows come back in matrix order: entries (see :func:`reports.ordering.entry_sort_key`; an entry's list,
    position, op, sentence and promise are those of its latest row), then torch version,
    device, mode, compile setting. ``fingerprints=True`` also takes a digest of each row's
    ``detail.fingerprints`` (for ``diff``); ``columns`` names the result columns to keep
    (default: all; every row is checked whatever is kept).
    """
    try:
        with gc_paused():
            return _load(paths, key, fingerprints, columns)
    finally:
        pa.default_memory_pool().release_unused()


def _load(paths, key: tuple[str, ...], want_fingerprints: bool, columns) -> Results:
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise ResultsError("no results files given")
    names = [os.fspath(p) for p in paths]
    workers = min(READ_THREADS, os.cpu_count() or 1)
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reports-read") if workers > 1 else None
    free: list[bytearray] = []
    try:
        files = [read_file(p, want_fingerprints, pool, ahead=workers, index=i, keep=columns, free=free)
                 for i, p in enumerate(paths)]
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return merge(files, key, want_fingerprints)
