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
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from detconf.gc_pause import gc_paused
from detconf.vocabulary import COMPILERS, DISPLAY_ORDER, MODES, PHASES, READABLE_SCHEMAS, SCHEMA_VERSION, meaning
from detconf.vocabulary import PASSING as _PASSING
from reports import planned as planned_mod
from reports import spans as spans_mod

# Display order is the order of this mapping: conforms, failures from the worst, then the
# other passing verdicts.
VERDICTS: dict[str, str] = {v: meaning(v) for v in DISPLAY_ORDER}
PASSING = frozenset(_PASSING)
FAILING = tuple(v for v in VERDICTS if v not in PASSING)

KNOWN_DEVICES = ("cpu", "cuda", "mps", "npu", "xpu")

#: Two rows with the same key describe the same cell; the later file/line wins.
MERGE_KEY = ("source", "doc_version", "entry_id", "phase", "device", "mode", "compile", "torch_version")
#: One matrix row per entry and phase (a backward entry's ``backward-only`` phase is a row of its own).
ENTRY_KEY = ("source", "doc_version", "entry_id", "phase")
#: One matrix column per torch version, device, mode and compile setting.
COLUMN_KEY = ("torch_version", "device", "mode", "compile")
#: What the matrix shows of an entry (from its latest row).
ENTRY_ATTRIBUTES = ("source", "doc_version", "list_name", "position", "entry_id", "phase", "op",
                    "sentence", "promise")
#: The phase of rows written before phases existed (schema 1).
DEFAULT_PHASE = "program"
#: The compile setting of rows written before the compile axis existed (schemas 1 and 2).
DEFAULT_COMPILE = "eager"

#: Fields of result rows in the long form (``results.csv``, ``Results.rows``), in order. The
#: sentence is on the entry (``Results.entries``); the evidence (``detail``) stays in the file.
ROW_FIELDS = (
    "source", "doc_version", "list_name", "entry_id", "phase", "op", "promise", "torch_version",
    "device", "device_name", "mode", "compile", "expected", "observed", "verdict", "examples", "runs",
    "reach", "run_id", "nodeid", "duration_s", "device_index", "d2d",
)
#: What the device-to-device check found (``d2d.result``): the same bytes on two devices of one
#: model, or not.
D2D_RESULTS = ("same", "differs")

#: Bytes of a file read (and parsed) at a time.
CHUNK_BYTES = 32 << 20
#: Chunks parsed at once, at most (pyarrow and numpy let go of the interpreter while they work).
READ_THREADS = 2
#: A longer line is rejected (no results line comes near it; it bounds what one line can cost).
MAX_LINE_BYTES = 16 << 20
#: A line nested deeper is rejected (result rows nest five levels or so).
MAX_DEPTH = 100

_SEEN, _QUIET = "nondeterminism-seen", "no-difference-seen"

# The fields of a result record the reports read, with what each must hold. Kinds: str, int,
# num (a JSON number), strlist (a list of strings), obj (an object), detail (an object whose
# ``fingerprints`` and ``verdicts_per_example`` are objects). Required fields are non-null strings.
_REQUIRED_STR = (
    "run_id", "entry_id", "op", "sentence", "source", "list_name", "promise",
    "device", "mode", "verdict", "torch_version",
)
_NON_EMPTY = ("entry_id", "source", "device", "mode", "verdict", "torch_version")
_REQUIRED = frozenset(_REQUIRED_STR)
_FIELD_KINDS: dict[str, str] = {
    "run_id": "str", "entry_id": "str", "op": "str", "sentence": "str", "source": "str",
    "list_name": "str", "position": "int", "doc_version": "str", "promise": "str", "devices": "strlist",
    "device": "str", "device_name": "str", "mode": "str", "phase": "str", "compile": "str",
    "targets": "strlist", "reach": "num", "dispatched": "obj", "expected": "str", "observed": "str",
    "verdict": "str", "examples": "int", "runs": "int", "torch_version": "str", "detail": "detail",
    "nodeid": "str", "duration_s": "num", "device_index": "int", "d2d": "d2d",
}
_KIND_NAMES = {"str": "a string", "int": "an integer", "num": "a number", "strlist": "a list of strings",
               "obj": "an object"}
_DETAIL_TYPE = pa.struct([
    ("fingerprints", pa.struct([])),
    ("verdicts_per_example", pa.struct([(_SEEN, pa.int64()), (_QUIET, pa.int64())])),
    ("max_numel", pa.int64()),
])
_D2D_TYPE = pa.struct([("result", pa.string()), ("compared", pa.int64()), ("differing", pa.int64())])
_ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "num": pa.float64(), "strlist": pa.list_(pa.string()),
                "obj": pa.struct([]), "detail": _DETAIL_TYPE, "d2d": _D2D_TYPE}
#: What pyarrow parses of every line; everything else in a line is skipped.
PARSE_SCHEMA = pa.schema([("record", pa.string()), ("schema", pa.int64())]
                         + [(name, _ARROW_TYPES[kind]) for name, kind in _FIELD_KINDS.items()])

#: The columns of ``Results.table``: the result fields kept, then what the reports use of
#: ``detail`` (the counts of ``verdicts_per_example`` for the positive control; whether
#: there are fingerprints), then where each row came from.
_KEPT_FIELDS = tuple(n for n, k in _FIELD_KINDS.items() if k in ("str", "int", "num", "strlist")
                     and n != "targets")
TABLE_SCHEMA = pa.schema([(n, _ARROW_TYPES[_FIELD_KINDS[n]]) for n in _KEPT_FIELDS] + [
    ("examples_differing", pa.int64()), ("examples_not_differing", pa.int64()),
    ("has_fingerprints", pa.bool_()), ("d2d", pa.string()), ("max_numel", pa.int64()),
])
_INT64 = (-(1 << 63), (1 << 63) - 1)


class ResultsError(ValueError):
    """Bad input: a one-line message naming the file and, where there is one, the line."""


class NoResults(ResultsError):
    """The files are valid but hold no result record (e.g. a run that selected no test)."""


# ----------------------------------------------------------------------------- ordering

def natural_key(text: str) -> tuple:
    """Sort key that orders ``2.9.0`` before ``2.10.0``."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)


def device_key(device: str) -> tuple:
    return (KNOWN_DEVICES.index(device), "") if device in KNOWN_DEVICES else (len(KNOWN_DEVICES), device)


def mode_key(mode: str) -> int:
    return MODES.index(mode)


def compile_key(setting: str) -> int:
    return COMPILERS.index(setting)


def entry_sort_key(rec: dict) -> tuple:
    """Matrix row order: source, list, position in the list if known, else entry id."""
    pos = rec.get("position")
    return (
        rec["source"], rec["list_name"], pos is None, pos if pos is not None else 0,
        natural_key(rec["entry_id"]), rec["entry_id"], rec.get("doc_version") or "",
        (rec.get("phase") or DEFAULT_PHASE) != DEFAULT_PHASE,
    )


def column_sort_key(rec: dict) -> tuple:
    return (natural_key(rec["torch_version"]), rec["torch_version"], device_key(rec["device"]),
            mode_key(rec["mode"]), compile_key(rec.get("compile") or DEFAULT_COMPILE))


# ----------------------------------------------------------------------------- records

def _fail(path: str, line: int | None, problem: str) -> ResultsError:
    where = f"{path}:{line}" if line is not None else path
    return ResultsError(f"{where}: {problem}")


def _type_name(value) -> str:
    return type(value).__name__


def _is_int(value) -> bool:
    return type(value) is int


def _check_int(value, what: str) -> str | None:
    if not _is_int(value):
        return f"{what} must be an integer, got {_type_name(value)}"
    if not _INT64[0] <= value <= _INT64[1]:
        return f"{what} is out of range"
    return None


def _field_problem(name: str, kind: str, value) -> str | None:
    """What is wrong with one present, non-null field of a result record (None: nothing)."""
    if kind == "str":
        ok = type(value) is str
    elif kind == "int":
        if _is_int(value):
            return None if _INT64[0] <= value <= _INT64[1] else f"field {name!r} is out of range"
        ok = False
    elif kind == "num":
        if type(value) is float:
            return None
        if _is_int(value):
            try:
                float(value)
            except OverflowError:
                return f"field {name!r} is out of range"
            return None
        ok = False
    elif kind == "strlist":
        ok = type(value) is list and all(type(v) is str for v in value)
    elif kind == "obj":
        ok = type(value) is dict
    elif kind == "d2d":
        if type(value) is not dict:
            return f"field 'd2d' must be an object or null, got {_type_name(value)}"
        if value.get("result") not in D2D_RESULTS:
            return f"field 'd2d.result' must be one of {', '.join(D2D_RESULTS)}, got {value.get('result')!r}"
        for key in ("compared", "differing"):
            problem = _check_int(value[key], f"field 'd2d.{key}'") if value.get(key) is not None else None
            if problem:
                return problem
        return None
    else:  # detail
        if type(value) is not dict:
            return "field 'detail' must be an object"
        fingerprints = value.get("fingerprints")
        if fingerprints is not None and type(fingerprints) is not dict:
            return "field 'detail.fingerprints' must be an object (example index -> hash)"
        if value.get("max_numel") is not None:
            problem = _check_int(value["max_numel"], "field 'detail.max_numel'")
            if problem:
                return problem
        per_example = value.get("verdicts_per_example")
        if per_example is None:
            return None
        if type(per_example) is not dict:
            return "field 'detail.verdicts_per_example' must be an object (verdict -> examples)"
        for verdict in (_SEEN, _QUIET):
            count = per_example.get(verdict)
            if count is not None:
                problem = _check_int(count, f"field 'detail.verdicts_per_example.{verdict}'")
                if problem:
                    return problem
        return None
    if ok:
        return None
    got = _type_name(value)
    if name in _REQUIRED:
        return f"field {name!r} must be a string, got {got}"
    return f"field {name!r} must be {_KIND_NAMES[kind]} or null, got {got}"


def _check_result(rec: dict) -> str | None:
    missing = _REQUIRED - rec.keys()
    if missing:
        return f"result record missing required field(s): {', '.join(sorted(missing))}"
    for name, kind in _FIELD_KINDS.items():
        value = rec.get(name)
        if value is None and name not in _REQUIRED:
            continue
        problem = _field_problem(name, kind, value)
        if problem:
            return problem
    return None


def _check_run(rec: dict) -> str | None:
    if not isinstance(rec.get("run_id"), str) or not rec["run_id"]:
        return "run record needs a non-empty string 'run_id'"
    if not isinstance(rec.get("env"), dict):
        return "run record needs an object 'env'"
    return planned_mod.planned_problem(rec)


#: Fields of an end record, after ``run_id``: name -> kind (each optional, never of another type).
END_FIELDS = {"ended": "str", "exitstatus": "int", "planned": "int", "written": "int", "missing": "int",
              "outcome": "str"}


def _check_end(rec: dict) -> str | None:
    if not isinstance(rec.get("run_id"), str) or not rec["run_id"]:
        return "end record needs a non-empty string 'run_id'"
    for name, kind in END_FIELDS.items():
        value = rec.get(name)
        if value is None:
            continue
        if kind == "str" and type(value) is not str:
            return f"end record field {name!r} must be a string, got {_type_name(value)}"
        if kind == "int":
            problem = _check_int(value, f"end record field {name!r}")
            if problem:
                return problem
    return None


_KIND_CHECKS = {"result": _check_result, "run": _check_run, "end": _check_end}


def _check_record(rec: object) -> tuple[str | None, str | None]:
    """Full check of one parsed line: returns ``(kind, problem)``."""
    if not isinstance(rec, dict):
        return None, f"expected a JSON object, got {_type_name(rec)}"
    schema = rec.get("schema")
    if schema not in READABLE_SCHEMAS or type(schema) is not int:
        what = "missing 'schema'" if schema is None else f"unsupported schema {schema!r}"
        known = ", ".join(map(str, READABLE_SCHEMAS))
        return None, f"{what} (this reader knows schemas {known}; it writes {SCHEMA_VERSION})"
    kind = rec.get("record")
    if kind is None:
        return None, "missing field 'record'"
    if type(kind) is not str or kind not in _KIND_CHECKS:
        return None, f"unknown record type {kind!r}"
    return kind, _KIND_CHECKS[kind](rec)


# ----------------------------------------------------------------------------- lines

_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _depth(line: bytes) -> int:
    """How deep a JSON line nests (brackets inside strings do not count)."""
    depth = deepest = 0
    for token in _STRING_OR_BRACKET.finditer(line):
        c = line[token.start()]
        if c in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in b"]}":
            depth -= 1
    return deepest


def _too_deep(line: bytes) -> bool:
    return line.count(b"[") + line.count(b"{") > MAX_DEPTH and _depth(line) > MAX_DEPTH


class _Chunk:
    """Whole lines of a file in the first ``size`` bytes of a reusable buffer."""

    __slots__ = ("buf", "size")

    def __init__(self, buf: bytearray, size: int):
        self.buf, self.size = buf, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        """A byte (an int) or the bytes of a slice (a copy)."""
        if isinstance(index, slice):
            start, stop, _ = index.indices(self.size)
            return bytes(self.buf[start:stop])
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(index)
        return self.buf[index]

    def array(self) -> np.ndarray:
        return np.frombuffer(self.buf, dtype=np.uint8, count=self.size)

    def view(self) -> memoryview:
        return memoryview(self.buf)[:self.size]

    def find(self, sub: bytes) -> int:
        return self.buf.find(sub, 0, self.size)

    def count(self, sub: bytes) -> int:
        return self.buf.count(sub, 0, self.size)

    def isascii(self) -> bool:
        return not self.size or int(self.array().max()) < 0x80

    def valid_utf8(self) -> bool:
        """UTF-8 throughout, checked by Arrow on the buffer in place."""
        offsets = pa.py_buffer(np.array([0, self.size], dtype=np.int32))
        try:
            pa.StringArray.from_buffers(1, offsets, pa.py_buffer(self.view())).validate(full=True)
        except pa.ArrowInvalid:
            return False
        return True


@dataclass
class _Lines:
    """The lines of a chunk: spans of their text with surrounding whitespace stripped."""

    starts: np.ndarray  # per line, offset in the chunk of its stripped text
    ends: np.ndarray  # per line, end offset of the stripped text (== start: blank)
    longest: int  # bytes of the longest line

    @property
    def count(self) -> int:
        return len(self.starts)


def _split(data: _Chunk) -> _Lines:
    """Line spans of a chunk (vectorised; lines not shaped ``{...}`` are measured one by one)."""
    arr = data.array()
    newlines = np.flatnonzero(arr == 10)
    if len(data) and data[-1] != 10:
        ends = np.append(newlines, len(data))
    else:
        ends = newlines
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    if not len(ends):
        return _Lines(starts, ends, 0)
    lengths = ends - starts
    longest = int(lengths.max())
    first = arr[np.minimum(starts, len(data) - 1)]
    last = arr[np.maximum(ends - 1, 0)]
    irregular = (first != ord("{")) | (last != ord("}")) | (lengths == 0)
    if irregular.any():
        starts, ends = starts.copy(), ends.copy()
        for i in np.flatnonzero(irregular).tolist():
            s, e = int(starts[i]), int(ends[i])
            line = data[s:e]
            stripped = line.strip()
            if not stripped:
                starts[i] = ends[i] = s
                continue
            starts[i] = s + len(line) - len(line.lstrip())
            ends[i] = starts[i] + len(stripped)
    return _Lines(starts, ends, longest)


def _deep_lines(data: _Chunk, lines: _Lines) -> bool:
    """True when some line nests deeper than MAX_DEPTH. Opening brackets are counted per line
    (numpy: ``[`` and ``{`` are the bytes that ``| 0x20`` makes 0x7b); a line with more than
    MAX_DEPTH of them is scanned."""
    arr = data.array()
    opening = np.flatnonzero((arr | 0x20) == 0x7B)
    if len(opening) <= MAX_DEPTH:
        return False
    counts = np.bincount(np.searchsorted(lines.ends, opening), minlength=lines.count + 1)
    for i in np.flatnonzero(counts > MAX_DEPTH).tolist():
        if i < lines.count and _depth(data[lines.starts[i]:lines.ends[i]]) > MAX_DEPTH:
            return True
    return False


# ----------------------------------------------------------------------------- chunks

@dataclass
class _Part:
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


class _LineProblem(Exception):
    """What is wrong with a line of a chunk (0: its first line); the reader names file and line."""

    def __init__(self, index: int, problem: str):
        super().__init__(index, problem)
        self.index, self.problem = index, problem


def _flatten(results: pa.Table) -> pa.Table:
    """The parsed result rows as TABLE_SCHEMA columns."""
    detail = results.column("detail")
    per_example = pc.struct_field(detail, "verdicts_per_example")
    columns = [results.column(n) for n in _KEPT_FIELDS] + [
        pc.struct_field(per_example, _SEEN),
        pc.struct_field(per_example, _QUIET),
        pc.is_valid(pc.struct_field(detail, "fingerprints")),
        pc.struct_field(results.column("d2d"), "result"),
        pc.struct_field(detail, "max_numel"),
    ]
    return pa.Table.from_arrays(columns, schema=TABLE_SCHEMA)


_RECORD_KINDS = pa.array(["result", "run", "end"])
_SCHEMAS = pa.array(list(READABLE_SCHEMAS), pa.int64())


def _read_fast(data: _Chunk, lines: _Lines) -> tuple[pa.Table, pa.Table, np.ndarray, np.ndarray] | None:
    """The chunk's records parsed by pyarrow, its result records, which lines the records
    are, and which of them are results; None when the chunk needs the line-by-line reading
    (see the module docstring)."""
    if lines.longest > MAX_LINE_BYTES or data.find(b"\x00") >= 0:
        return None
    if not data.isascii() and (not data.valid_utf8() or data.find(b"\xef\xbb\xbf") >= 0):
        return None  # (a byte-order mark is not ASCII)
    if _deep_lines(data, lines):
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
    for name in _REQUIRED_STR:
        if results.column(name).null_count:
            return None
    for name in ("devices", "targets"):
        if pc.list_flatten(results.column(name)).null_count:
            return None
    return table, results, rows, is_result


def _newline_after(data: _Chunk, ends: np.ndarray) -> np.ndarray:
    arr = data.array()
    out = np.zeros(len(ends), dtype=bool)
    inside = ends < len(data)
    out[inside] = arr[ends[inside]] == 10
    return out


def _parse_chunk(data: _Chunk, base: int, want_fingerprints: bool) -> _Part:
    """The records of a chunk of whole lines that starts at byte ``base`` of its file. Runs in
    a worker thread; a bad line raises :class:`_LineProblem`."""
    lines = _split(data)
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
            raise _LineProblem(i, f"corrupt JSON line ({getattr(exc, 'msg', exc)})") from None
        kind, problem = _check_record(rec)
        if problem:
            raise _LineProblem(i, problem)
        others.append((i, rec))
    result_rows = rows[is_result]
    part = _Part(
        table=_flatten(results),
        lines=result_rows,
        starts=lines.starts[result_rows] + base,
        ends=lines.ends[result_rows] + base,
        others=others,
        count=lines.count,
        newline_after=_newline_after(data, lines.ends[result_rows]),
    )
    if want_fingerprints:
        part.fingerprints = _fingerprint_digests(data, lines, result_rows, part.table.column("has_fingerprints"))
    return part


def _read_slow(data: _Chunk, lines: _Lines, base: int, want_fingerprints: bool) -> _Part:
    """Line by line with Python's json: the first bad line raises; otherwise the same part as
    the fast reading."""
    columns: dict[str, list] = {n: [] for n in TABLE_SCHEMA.names}
    kept_lines, starts, ends, others, digests = [], [], [], [], []
    for i in range(lines.count):
        s, e = int(lines.starts[i]), int(lines.ends[i])
        if s == e:
            continue
        lineno = i
        line = data[s:e]
        if len(line) > MAX_LINE_BYTES:
            raise _LineProblem(lineno, f"line longer than {MAX_LINE_BYTES >> 20} MiB")
        if b"\x00" in line:
            raise _LineProblem(lineno, "NUL byte in the line (not JSON text)")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise _LineProblem(lineno, "not UTF-8 text") from None
        if _too_deep(line):
            raise _LineProblem(lineno, f"JSON nested deeper than {MAX_DEPTH} levels")
        try:
            rec = json.loads(text)
        except RecursionError:  # pragma: no cover - _too_deep catches it first
            raise _LineProblem(lineno, f"JSON nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:
            raise _LineProblem(lineno, f"corrupt JSON line ({getattr(exc, 'msg', exc)})") from None
        if _SURROGATE_ESCAPE.search(line):
            try:
                json.dumps(rec, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise _LineProblem(lineno, "a string holds a lone surrogate escape (not Unicode text)") from None
        kind, problem = _check_record(rec)
        if problem:
            raise _LineProblem(lineno, problem)
        if kind != "result":
            others.append((lineno, rec))
            continue
        for n in _KEPT_FIELDS:
            value = rec.get(n)
            columns[n].append(float(value) if _FIELD_KINDS[n] == "num" and value is not None else value)
        detail = rec.get("detail") or {}
        per_example = detail.get("verdicts_per_example") or {}
        columns["examples_differing"].append(per_example.get(_SEEN))
        columns["examples_not_differing"].append(per_example.get(_QUIET))
        fingerprints = detail.get("fingerprints")
        columns["has_fingerprints"].append(fingerprints is not None)
        columns["d2d"].append((rec.get("d2d") or {}).get("result"))
        columns["max_numel"].append(detail.get("max_numel"))
        if want_fingerprints:
            digests.append(None if fingerprints is None else _canonical_digest(fingerprints))
        kept_lines.append(lineno)
        starts.append(base + s)
        ends.append(base + e)
    return _Part(
        table=pa.table(columns, schema=TABLE_SCHEMA),
        lines=np.asarray(kept_lines, dtype=np.int64),
        starts=np.asarray(starts, dtype=np.int64),
        ends=np.asarray(ends, dtype=np.int64),
        others=others,
        count=lines.count,
        newline_after=_newline_after(data, np.asarray(ends, dtype=np.int64) - base),
        fingerprints=digests if want_fingerprints else None,
    )


def _chunks(f, buffer) -> Iterator[tuple[_Chunk | None, int]]:
    """``(chunk, offset)`` for consecutive chunks of whole lines of a file, each read straight
    into a buffer from ``buffer(size)``; the chunk is None where a line longer than
    MAX_LINE_BYTES starts."""
    carry = b""
    offset = 0
    while True:
        buf = buffer(len(carry) + CHUNK_BYTES)
        buf[:len(carry)] = carry
        size = len(carry) + f.readinto(memoryview(buf)[len(carry):len(carry) + CHUNK_BYTES])
        if size == len(carry):  # end of file
            if carry:
                yield _Chunk(buf, size), offset
            return
        cut = buf.rfind(b"\n", 0, size) + 1
        if cut == 0:
            if size > MAX_LINE_BYTES:
                yield None, offset
                return
            carry = bytes(buf[:size])
            continue
        carry = bytes(buf[cut:size])
        yield _Chunk(buf, cut), offset
        offset += cut
        if len(carry) > MAX_LINE_BYTES:
            yield None, offset
            return


# ----------------------------------------------------------------------------- fingerprints

# Where a row's fingerprints object is, without parsing the row: the key spelled out, then a
# flat object, found by RE2 over the chunk's lines as an Arrow array (no copy). This is exact
# where the line holds the key spelled out once and spells no ASCII letter as an escape (so the
# one key found is the row's: an escaped key would need a letter escape, a second key a second
# spelling), and the object holds no brace or backslash and an even number of quotes (so it is
# the whole object). Other rows are parsed.
_FP_KEY = '"fingerprints"'
_FP_PATTERN = r'"fingerprints"[ \t\r\n]*:[ \t\r\n]*(?P<fp>\{[^{}\\]*\})'
_LETTER_ESCAPE = r"\\u00[4-7]"
#: Bytes of a fingerprints digest.
DIGEST_BYTES = 16
_NO_DIGEST = bytes(DIGEST_BYTES)


def _digest(text: bytes) -> bytes:
    return hashlib.blake2b(text, digest_size=DIGEST_BYTES).digest()


def _canonical_digest(fingerprints) -> bytes:
    return _digest(json.dumps(fingerprints, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _fingerprint_digests(data: _Chunk, lines: _Lines, result_rows: np.ndarray, has: pa.ChunkedArray) -> list:
    """Per result row of a chunk: a digest of the text of its ``detail.fingerprints`` (equal
    digests: equal objects), or None where it has none."""
    bounds = np.append(lines.starts, len(data)).astype(np.int32)
    every_line = pa.StringArray.from_buffers(lines.count, pa.py_buffer(bounds), pa.py_buffer(data.view()))
    rows = every_line.take(pa.array(result_rows))
    has = np.asarray(has.combine_chunks() if isinstance(has, pa.ChunkedArray) else has, dtype=bool)
    capture = pc.struct_field(pc.extract_regex(rows, _FP_PATTERN), "fp")
    found = np.asarray(capture.is_valid(), dtype=bool)
    # One spelled-out key per row that has fingerprints, none elsewhere: counted over the whole
    # chunk when that settles it, else row by row.
    if data.count(_FP_KEY.encode()) == int(has.sum()) and not (has & ~found).any():
        once = np.ones(len(rows), dtype=bool)
    else:
        once = np.asarray(pc.equal(pc.count_substring(rows, _FP_KEY), 1), dtype=bool)
    simple = (once & found & ~np.asarray(pc.match_substring_regex(rows, _LETTER_ESCAPE), dtype=bool)
              & np.asarray(pc.fill_null(pc.equal(pc.bit_wise_and(pc.count_substring(capture, '"'), 1), 0), False),
                           dtype=bool))
    texts = capture.cast(pa.binary()).to_pylist()
    out = []
    for k, (has_fp, ok) in enumerate(zip(has.tolist(), simple.tolist())):
        if not has_fp:
            out.append(None)
        elif ok:
            out.append(_digest(texts[k]))
        else:
            i = int(result_rows[k])
            rec = json.loads(data[lines.starts[i]:lines.ends[i]])
            out.append(_canonical_digest(rec["detail"]["fingerprints"]))
    return out


# ----------------------------------------------------------------------------- results

class _Columns:
    """The columns of every row read, each in one piece (in the order read), and which rows the
    merge kept in which order. A column in matrix order is taken on first use; ``results.csv``
    takes its columns a batch of rows at a time instead (in a thread of its own)."""

    def __init__(self, table: pa.Table, order: np.ndarray):
        self.order = order
        self._order = pa.array(order)
        self.names = table.column_names
        self.source: dict[str, pa.Array] = {}
        pool = pa.default_memory_pool()
        for name in self.names:  # one column at a time: the chunks of each are let go of at once
            self.source[name] = table.column(0).combine_chunks()
            table = table.remove_column(0)
            pool.release_unused()
        self.taken: dict[str, pa.Array] = {}

    def column(self, name: str) -> pa.Array:
        if name not in self.taken:
            self.taken[name] = self.source[name].take(self._order)
        return self.taken[name]

    def rows(self, name: str, start: int, stop: int) -> pa.Array:
        """Rows ``start:stop`` (matrix order) of one column."""
        if name in self.taken:
            return self.taken[name].slice(start, stop - start)
        return self.source[name].take(pa.array(self.order[start:stop]))


@dataclass
class Results:
    """Result rows of one or more results files, merged: the rows the merge kept, in matrix
    order (entries, then torch version, device, mode, compile setting).

    ``column(name)`` gives one column of them (TABLE_SCHEMA, then ``file`` -- an index into
    ``paths`` --, ``line``, ``start`` and ``end`` -- the byte span of the row's text in its
    file --, ``newline_after`` and ``seq``, the row's place among all rows read);
    ``entry_codes`` and ``column_codes`` give each row's entry (an index into ``entries``) and
    column (into ``columns``).
    """

    store: _Columns
    entry_codes: np.ndarray  # per row, its entry
    column_codes: np.ndarray  # per row, its column
    runs: list[dict]  # run records (a repeated run_id: the later record wins)
    ends: list[dict]  # end records, in the order read
    inputs: list[dict]  # per file: path, numbers of result, run and end records
    overrides: int  # result rows replaced by a later row with the same key
    entries: pd.DataFrame  # ENTRY_ATTRIBUTES, one row per entry; row n has entry code n
    columns: list[tuple[str, str, str, str]]  # (torch_version, device, mode, compile); index = code
    paths: list[str]  # the files read, in order
    fingerprints: np.ndarray | None = None  # per row: digest of its fingerprints (2 words), zeros where none
    completeness: list[dict] = dataclasses.field(default_factory=list)  # per run: planned, listed, rows, missing
    missing: int = 0  # rows of planned cases that got none (verdict ``missing``, made by the reader)

    def __len__(self) -> int:
        return len(self.store.order)

    def column(self, name: str) -> pa.Array:
        """One column of the rows, in matrix order."""
        return self.store.column(name)

    def column_rows(self, name: str, start: int, stop: int) -> pa.Array:
        """Rows ``start:stop`` of one column (without taking the whole column)."""
        return self.store.rows(name, start, stop)

    @property
    def column_names(self) -> list[str]:
        return list(self.store.names)

    @property
    def table(self) -> pa.Table:
        """All the columns, in matrix order (for small results: every column is taken)."""
        return pa.table({name: self.column(name) for name in self.store.names})

    def pylist(self, name: str) -> list:
        return self.column(name).to_pylist()

    @functools.cached_property
    def values(self) -> dict[str, list]:
        """ROW_FIELDS, file, line, seq -> one value per row (matrix order)."""
        out = {name: self.pylist(name) for name in ROW_FIELDS}
        out["file"] = [self.paths[i] for i in self.pylist("file")]
        out["line"] = self.pylist("line")
        out["seq"] = self.pylist("seq")
        return out

    @functools.cached_property
    def rows(self) -> pd.DataFrame:
        """The rows as a DataFrame: ROW_FIELDS, file, line, seq, entry_code, column_code."""
        frame = pd.DataFrame(self.values)
        frame["entry_code"] = self.entry_codes
        frame["column_code"] = self.column_codes
        return frame

    def spans(self, rows: Iterable[int] | None = None) -> tuple:
        """``(paths, file, start, end, newline_after)`` of rows (default: all, in matrix order):
        where each row's text is (see :mod:`reports.spans`). ``missing`` rows have no text (the
        reader made them from a run record): they are left out."""
        index = slice(None) if rows is None else np.asarray(list(rows), dtype=np.int64)
        if self.missing:
            starts = self.column("start").to_numpy()
            keep = np.flatnonzero(starts >= 0) if rows is None else index[starts[index] >= 0]
            index = keep
        column = self.column
        return (self.paths, column("file").to_numpy()[index], column("start").to_numpy()[index],
                column("end").to_numpy()[index], column("newline_after").to_numpy(zero_copy_only=False)[index])

    def line_batches(self, rows: Iterable[int] | None = None) -> Iterator[list[bytes]]:
        """The text of rows (default: all, in matrix order) as read, surrounding whitespace
        stripped, a batch at a time."""
        paths, files, starts, ends, _ = self.spans(rows)
        return spans_mod.texts(paths, files, starts, ends)

    @property
    def texts(self) -> list[str]:
        """The rows' lines as read, in matrix order."""
        return [t.decode("utf-8") for batch in self.line_batches() for t in batch]

    @property
    def records(self) -> list[dict]:
        """The rows as parsed JSON objects, in matrix order (for small results: it parses)."""
        return [json.loads(t) for batch in self.line_batches() for t in batch]

    def digest(self) -> str:
        """:func:`rows_digest` of the rows, hashed straight from the files."""
        return spans_mod.digest(*self.spans())


def rows_digest(texts: list[str]) -> str:
    """sha256 of the merged result rows: each line exactly as read (surrounding whitespace
    stripped) followed by a newline, in matrix order. Matrix order follows from the rows'
    content, so shuffling the lines of a file does not change the digest."""
    h = hashlib.sha256()
    for start in range(0, len(texts), 10_000):  # in slices: no second copy of all the text
        h.update(("\n".join(t.strip() for t in texts[start:start + 10_000]) + "\n").encode("utf-8"))
    return h.hexdigest()


# ----------------------------------------------------------------------------- loading

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


def _normalise(table: pa.Table) -> pa.Table:
    """Rows written before phases (schema 1) or the compile axis (schemas 1, 2) have neither;
    a missing doc version is the installed torch's, like an empty one."""
    for name, value in (("phase", DEFAULT_PHASE), ("compile", DEFAULT_COMPILE), ("doc_version", "")):
        column = table.column(name)
        if column.null_count:
            table = table.set_column(table.schema.get_field_index(name), name, pc.fill_null(column, value))
    return table


def _first_semantic_problem(table: pa.Table, lines: np.ndarray, run_lines: np.ndarray) -> tuple[int, str] | None:
    """(row, problem) for the first row of ``table`` (TABLE_SCHEMA, normalised) that a
    column-wise check rejects; ``run_lines``: per row, the line of its run's record (-1: none)."""
    checks = [pc.equal(table.column(name), "") for name in _NON_EMPTY]
    checks.append(pc.invert(pc.is_in(table.column("verdict"), value_set=pa.array(list(VERDICTS)))))
    checks.append(pc.invert(pc.is_in(table.column("mode"), value_set=pa.array(list(MODES)))))
    checks.append(pc.invert(pc.is_in(table.column("phase"), value_set=pa.array(list(PHASES)))))
    checks.append(pc.invert(pc.is_in(table.column("compile"), value_set=pa.array(list(COMPILERS)))))
    reach = table.column("reach")
    checks.append(pc.fill_null(pc.invert(pc.and_(pc.greater_equal(reach, 0.0), pc.less_equal(reach, 1.0))), False))
    duration = table.column("duration_s")
    checks.append(pc.fill_null(pc.invert(pc.and_(pc.is_finite(duration), pc.greater_equal(duration, 0.0))), False))
    for name in ("examples", "runs", "examples_differing", "examples_not_differing", "device_index", "max_numel"):
        checks.append(pc.fill_null(pc.less(table.column(name), 0), False))
    d2d = table.column("d2d")
    checks.append(pc.and_(pc.is_valid(d2d), pc.invert(pc.is_in(d2d, value_set=pa.array(list(D2D_RESULTS))))))
    bad = (run_lines < 0) | (run_lines > lines)
    for check in checks:
        bad |= np.asarray(check.combine_chunks() if isinstance(check, pa.ChunkedArray) else check, dtype=bool)
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    rec = {n: table.column(n)[row].as_py() for n in table.column_names}
    return row, _semantic_problem(rec)


def _semantic_problem(rec: dict) -> str:
    for name in _NON_EMPTY:
        if not rec[name]:
            return f"field {name!r} is empty"
    if rec["verdict"] not in VERDICTS:
        return f"unknown verdict {rec['verdict']!r}"
    if rec["mode"] not in MODES:
        return f"unknown mode {rec['mode']!r} (expected one of {', '.join(MODES)})"
    if rec["phase"] not in PHASES:
        return f"unknown phase {rec['phase']!r} (expected one of {', '.join(PHASES)})"
    if rec["compile"] not in COMPILERS:
        return f"unknown compile setting {rec['compile']!r} (expected one of {', '.join(COMPILERS)})"
    reach = rec["reach"]
    if reach is not None and not 0.0 <= reach <= 1.0:
        return f"field 'reach' must be a number from 0 to 1 or null, got {reach!r}"
    duration = rec["duration_s"]
    if duration is not None and not (math.isfinite(duration) and duration >= 0):
        return f"field 'duration_s' must be a finite number of seconds (0 or more) or null, got {duration!r}"
    if rec["d2d"] is not None and rec["d2d"] not in D2D_RESULTS:
        return f"field 'd2d.result' must be one of {', '.join(D2D_RESULTS)}, got {rec['d2d']!r}"
    for name, shown in (("examples", "examples"), ("runs", "runs"), ("device_index", "device_index"),
                        ("examples_differing", f"detail.verdicts_per_example.{_SEEN}"),
                        ("examples_not_differing", f"detail.verdicts_per_example.{_QUIET}"),
                        ("max_numel", "detail.max_numel")):
        if rec[name] is not None and rec[name] < 0:
            return f"field {shown!r} must not be negative, got {rec[name]}"
    return f"result row of run {rec['run_id']!r} comes before any run record with that run_id"


def _run_lines(table: pa.Table, run_lines: dict[str, int]) -> np.ndarray:
    """Per row, the line of the first record of its run (-1: none yet)."""
    encoded = pc.dictionary_encode(table.column("run_id")).combine_chunks()
    lookup = np.asarray([run_lines.get(r, -1) for r in encoded.dictionary.to_pylist()] or [-1], dtype=np.int64)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


def _accept(out: _File, part: _Part, first_line: int) -> None:
    """Take in a parsed chunk, in file order: its run and end records, then its result rows,
    checked column-wise and cut down to the columns kept."""
    for index, rec in part.others:
        line = first_line + index
        if rec["record"] == "run":
            out.runs.append((line, rec))
            out.run_lines.setdefault(rec["run_id"], line)
        else:
            if out.run_lines.get(rec["run_id"], line) >= line:
                raise _fail(out.name, line, f"end record of run {rec['run_id']!r} comes before any run record "
                                            "with that run_id")
            out.ends.append((line, rec))
    n = part.table.num_rows
    if not n:
        return
    lines = part.lines + first_line
    table = _normalise(part.table)
    bad = _first_semantic_problem(table, lines, _run_lines(table, out.run_lines))
    if bad is not None:
        row, problem = bad
        raise _fail(out.name, int(lines[row]), problem)
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
        return bytearray(max(size, CHUNK_BYTES + (1 << 20)))

    def collect() -> None:
        nonlocal lines_before
        future, chunk = pending.popleft()
        try:
            part = future.result()
        except _LineProblem as exc:
            raise _fail(name, lines_before + exc.index + 1, exc.problem) from None
        _accept(out, part, lines_before + 1)
        lines_before += part.count
        buf, chunk.buf = chunk.buf, None
        if sys.getrefcount(buf) == 2:  # nothing made from the chunk still points into it
            free.append(buf)

    try:
        info = os.stat(path)
    except OSError as exc:
        raise _fail(name, None, f"cannot read ({exc.strerror or exc})") from None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):  # a folder: open() names it below
        kind = "a pipe" if stat.S_ISFIFO(info.st_mode) else "a device" if (
            stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)) else "not a regular file"
        raise _fail(name, None, f"cannot read ({kind}, which a reader would wait on; a results file is a "
                                "regular file)")
    try:
        with open(path, "rb") as f:
            for data, offset in _chunks(f, buffer):
                if data is None:
                    while pending:
                        collect()
                    raise _fail(name, lines_before + 1, f"line longer than {MAX_LINE_BYTES >> 20} MiB")
                pending.append((pool.submit(_parse_chunk, data, offset, want_fingerprints), data))
                del data
                while len(pending) > ahead:
                    collect()
            while pending:
                collect()
    except OSError as exc:
        raise _fail(name, None, f"cannot read ({exc.strerror or exc})") from None
    if not out.runs and not out.ends and not out.results:
        raise _fail(name, None, "empty file (no records)")
    return out


def _kept_schema(keep: tuple[str, ...]) -> pa.Schema:
    """The schema of the tables :func:`_accept` makes (the kept columns, then where each row is)."""
    return pa.schema([TABLE_SCHEMA.field(n) for n in keep] + [
        ("file", pa.int32()), ("line", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
        ("newline_after", pa.bool_())])


def _group(table: pa.Table, names: tuple[str, ...], rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Group number of each row (of ``rows``, default all) by the values of ``names``."""
    combined = None
    cardinality = 1
    for name in names:
        encoded = pc.dictionary_encode(table.column(name))
        codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks]).astype(np.int64)
        if rows is not None:
            codes = codes[rows]
        size = len(encoded.chunk(0).dictionary) if encoded.num_chunks else 1
        if combined is None:
            combined, cardinality = codes, size
            continue
        if cardinality * size >= 1 << 62:
            uniq, combined = np.unique(combined, return_inverse=True)
            cardinality = len(uniq)
        combined = combined * size + codes
        cardinality *= size
    uniq, inverse = np.unique(combined, return_inverse=True)
    return inverse.reshape(-1), len(uniq)


#: What ``diff`` keeps of each row (besides what merging and ordering need).
DIFF_COLUMNS = ("verdict", "expected", "has_fingerprints")


def load(paths: Iterable[str | os.PathLike] | str | os.PathLike, key: tuple[str, ...] = MERGE_KEY, *,
         fingerprints: bool = False, columns: Iterable[str] | None = None) -> Results:
    """Read, validate and merge results files; a later file/line wins for a repeated ``key``.

    Rows come back in matrix order: entries (see :func:`entry_sort_key`; an entry's list,
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
    first_seen: dict[str, tuple[int, int]] = {}
    for f in files:
        for line, rec in f.runs:
            seen = first_seen.setdefault(rec["run_id"], (f.index, line))
            if seen != (f.index, line):
                raise _fail(f.name, line, f"run {rec['run_id']!r} was read already ({files[seen[0]].name}:{seen[1]}): "
                                          "a file given twice, or a copy of a run? give each run once")
    inputs = [{"path": f.name, "results": f.results, "runs": len(f.runs), "ends": len(f.ends)} for f in files]
    runs_by_id: dict[str, dict] = {}
    for f in files:
        for _, rec in f.runs:
            runs_by_id.pop(rec["run_id"], None)  # a repeated run id: the later record wins
            runs_by_id[rec["run_id"]] = rec
    ends = [rec for f in files for _, rec in f.ends]
    missing, completeness = planned_mod.missing_rows(files, key, _kept_schema(files[0].keep))
    if not any(f.results for f in files) and not missing:
        raise NoResults(f"{', '.join(names)}: no result records")

    tables = list(missing)  # before every row read: a row that judged the cell wins
    for f in files:
        tables += f.parts
        f.parts = []
    table = pa.concat_tables(tables)
    del tables
    digests = [d for f in files for d in f.fingerprints] if want_fingerprints else None
    if digests is not None:
        digests = [None] * sum(t.num_rows for t in missing) + digests

    # Merge: the last row of each key wins (the table is in the order read).
    n = table.num_rows
    groups, n_groups = _group(table, key)
    last = np.full(n_groups, -1, dtype=np.int64)
    np.maximum.at(last, groups, np.arange(n, dtype=np.int64))
    kept = np.sort(last)

    # Entries, ordered by their latest row; columns.
    entry_of, n_entries = _group(table, ENTRY_KEY, kept)
    latest = np.full(n_entries, -1, dtype=np.int64)
    np.maximum.at(latest, entry_of, kept)
    available = [c for c in ENTRY_ATTRIBUTES if c in table.column_names]
    attributes = table.select(available).take(latest).to_pylist()
    entry_order = sorted(range(n_entries), key=lambda e: entry_sort_key(attributes[e]))
    entry_rank = np.empty(n_entries, dtype=np.int64)
    entry_rank[entry_order] = np.arange(n_entries)
    column_of, n_columns = _group(table, COLUMN_KEY, kept)
    first = np.full(n_columns, len(kept), dtype=np.int64)
    np.minimum.at(first, column_of, np.arange(len(kept), dtype=np.int64))
    column_values = table.select(list(COLUMN_KEY)).take(kept[first]).to_pylist()
    column_order = sorted(range(n_columns), key=lambda c: column_sort_key(column_values[c]))
    column_rank = np.empty(n_columns, dtype=np.int64)
    column_rank[column_order] = np.arange(n_columns)

    e_codes, c_codes = entry_rank[entry_of], column_rank[column_of]
    perm = np.lexsort((c_codes, e_codes))
    entries = pd.DataFrame([attributes[e] for e in entry_order], columns=list(ENTRY_ATTRIBUTES))
    entries = entries.astype({c: object for c in ENTRY_ATTRIBUTES if c != "position"})
    order = kept[perm]
    if digests is not None:
        digests = np.frombuffer(b"".join(d or _NO_DIGEST for d in digests), dtype=np.uint64).reshape(
            -1, DIGEST_BYTES // 8)[order]
    # The sentence is the entry's (above); the rows do without it.
    if "sentence" in table.column_names:
        table = table.drop_columns(["sentence"])
    table_verdicts = table.column("verdict").take(pa.array(order)).combine_chunks()
    holder = [table.append_column("seq", pa.array(np.arange(n, dtype=np.int64)))]
    del table
    return Results(
        store=_Columns(holder.pop(), order),
        entry_codes=e_codes[perm],
        column_codes=c_codes[perm],
        runs=list(runs_by_id.values()),
        ends=ends,
        inputs=inputs,
        overrides=n - len(kept),
        entries=entries,
        columns=[tuple(column_values[c][k] for k in COLUMN_KEY) for c in column_order],
        paths=names,
        fingerprints=digests,
        completeness=completeness,
        missing=int(np.count_nonzero(np.asarray(pc.equal(table_verdicts, planned_mod.MISSING), dtype=bool))),
    )
