"""One chunk of whole lines into records: the result rows as an Arrow table (TABLE_SCHEMA)
parsed by pyarrow's JSON reader with an explicit schema, the run and end records as dicts; a
chunk pyarrow cannot vouch for is read line by line with Python's ``json``, which names the bad
line (see :mod:`reports.load`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from detconf.vocabulary import READABLE_SCHEMAS
from detconf.reports.digests import canonical_digest, fingerprint_digests
from detconf.reports.readfile import BadLine, json_line
from detconf.reports.lines import (
    MAX_LINE_BYTES, Chunk, Lines, deep_lines, newline_after, split_lines,
)
from detconf.reports.records import (
    FIELD_KINDS, KEPT_FIELDS, PARSE_SCHEMA, QUIET, REQUIRED_STR, SEEN, TABLE_SCHEMA, check_record,
)

@dataclass
class Part:
    """The rows of one chunk: result rows as a table (TABLE_SCHEMA) with their lines (0 is the
    chunk's first line) and byte spans in the file, and the run and end records as ``(line,
    record)``; ``count``: the chunk's lines."""

    table: pa.Table
    lines: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    others: list[tuple[int, dict]]
    count: int
    newline_after: np.ndarray | None = None  # per result row: its text is followed by a newline
    fingerprints: list | None = None  # per result row: digest of its fingerprints, or None


class LineProblem(Exception):
    """What is wrong with a line of a chunk (0: its first line); the reader names file and line."""

    def __init__(self, index: int, problem: str):
        super().__init__(index, problem)
        self.index, self.problem = index, problem


def _flatten(results: pa.Table) -> pa.Table:
    """The parsed result rows as TABLE_SCHEMA columns."""
    detail = results.column("detail")
    per_example = pc.struct_field(detail, "verdicts_per_example")
    columns = [results.column(n) for n in KEPT_FIELDS] + [
        pc.struct_field(per_example, SEEN),
        pc.struct_field(per_example, QUIET),
        pc.is_valid(pc.struct_field(detail, "fingerprints")),
        pc.struct_field(results.column("d2d"), "result"),
        pc.struct_field(detail, "max_numel"),
    ]
    return pa.Table.from_arrays(columns, schema=TABLE_SCHEMA)


_RECORD_KINDS = pa.array(["result", "run", "end"])
_SCHEMAS = pa.array(list(READABLE_SCHEMAS), pa.int64())


def _read_fast(data: Chunk, lines: Lines) -> tuple[pa.Table, pa.Table, np.ndarray, np.ndarray] | None:
    """The chunk's records parsed by pyarrow, its result records, which lines the records
    are, and which of them are results; None when the chunk needs the line-by-line reading
    (see the module docstring)."""
    if lines.longest > MAX_LINE_BYTES or data.find(b"\x00") >= 0:
        return None
    if not data.isascii() and (not data.valid_utf8() or data.find(b"\xef\xbb\xbf") >= 0):
        return None  # (a byte-order mark is not ASCII)
    if deep_lines(data, lines):
        return None
    rows = np.flatnonzero(lines.ends > lines.starts)
    try:
        table = pj.read_json(
            pa.py_buffer(data.view()),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, 2 * lines.longest + 2)),
            parse_options=pj.ParseOptions(explicit_schema=PARSE_SCHEMA, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != len(rows):
        return None
    record, schema = table.column("record"), table.column("schema")
    if record.null_count or schema.null_count:
        return None
    if not pc.all(pc.is_in(record, value_set=_RECORD_KINDS)).as_py():
        return None
    if not pc.all(pc.is_in(schema, value_set=_SCHEMAS)).as_py():
        return None
    is_result = np.asarray(pc.equal(record, "result").combine_chunks(), dtype=bool)
    results = table if is_result.all() else table.filter(pa.array(is_result))
    for name in REQUIRED_STR:
        if results.column(name).null_count:
            return None
    for name in ("devices", "targets"):
        if pc.list_flatten(results.column(name)).null_count:
            return None
    return table, results, rows, is_result



def parse_chunk(data: Chunk, base: int, want_fingerprints: bool) -> Part:
    """The records of a chunk of whole lines that starts at byte ``base`` of its file. Runs in
    a worker thread; a bad line raises :class:`LineProblem`."""
    lines = split_lines(data)
    fast = _read_fast(data, lines)
    if fast is None:
        return _read_slow(data, lines, base, want_fingerprints)
    _, results, rows, is_result = fast
    others = []
    for i in rows[~is_result].tolist():
        text = data[lines.starts[i]:lines.ends[i]]
        try:
            rec = json.loads(text)
        except (ValueError, RecursionError) as exc:  # pragma: no cover - pyarrow parsed it
            raise LineProblem(i, f"corrupt JSON line ({getattr(exc, 'msg', exc)})") from None
        kind, problem = check_record(rec)
        if problem:
            raise LineProblem(i, problem)
        others.append((i, rec))
    result_rows = rows[is_result]
    part = Part(
        table=_flatten(results),
        lines=result_rows,
        starts=lines.starts[result_rows] + base,
        ends=lines.ends[result_rows] + base,
        others=others,
        count=lines.count,
        newline_after=newline_after(data, lines.ends[result_rows]),
    )
    if want_fingerprints:
        part.fingerprints = fingerprint_digests(data, lines, result_rows, part.table.column("has_fingerprints"))
    return part


def _read_slow(data: Chunk, lines: Lines, base: int, want_fingerprints: bool) -> Part:
    """Line by line with Python's json: the first bad line raises; otherwise the same part as
    the fast reading."""
    columns: dict[str, list] = {n: [] for n in TABLE_SCHEMA.names}
    kept_lines, starts, ends, others, digests = [], [], [], [], []
    for i in range(lines.count):
        s, e = int(lines.starts[i]), int(lines.ends[i])
        if s == e:
            continue
        lineno = i
        try:
            rec = json_line(data[s:e])  # the one check of a line (detconf.reports.readfile)
        except BadLine as exc:
            raise LineProblem(lineno, exc.problem) from None
        kind, problem = check_record(rec)
        if problem:
            raise LineProblem(lineno, problem)
        if kind != "result":
            others.append((lineno, rec))
            continue
        for n in KEPT_FIELDS:
            value = rec.get(n)
            columns[n].append(float(value) if FIELD_KINDS[n] == "num" and value is not None else value)
        detail = rec.get("detail") or {}
        per_example = detail.get("verdicts_per_example") or {}
        columns["examples_differing"].append(per_example.get(SEEN))
        columns["examples_not_differing"].append(per_example.get(QUIET))
        fingerprints = detail.get("fingerprints")
        columns["has_fingerprints"].append(fingerprints is not None)
        columns["d2d"].append((rec.get("d2d") or {}).get("result"))
        columns["max_numel"].append(detail.get("max_numel"))
        if want_fingerprints:
            digests.append(None if fingerprints is None else canonical_digest(fingerprints))
        kept_lines.append(lineno)
        starts.append(base + s)
        ends.append(base + e)
    return Part(
        table=pa.table(columns, schema=TABLE_SCHEMA),
        lines=np.asarray(kept_lines, dtype=np.int64),
        starts=np.asarray(starts, dtype=np.int64),
        ends=np.asarray(ends, dtype=np.int64),
        others=others,
        count=lines.count,
        newline_after=newline_after(data, np.asarray(ends, dtype=np.int64) - base),
        fingerprints=digests if want_fingerprints else None,
    )
