"""Read, validate and merge results files (JSON lines, docs/results-schema.md).

:func:`load` returns :class:`Results`: the merged rows in matrix order (as column lists, and as
a DataFrame on demand), the entries, the matrix columns and the run headers. Every problem is
a :class:`ResultsError` with a one-line message ``FILE:LINE: problem`` that the command line
prints as is; all input is validated before anything is written anywhere.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import re
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from detconf.vocabulary import DISPLAY_ORDER, MODES, PHASES, READABLE_SCHEMAS, SCHEMA_VERSION, meaning
from detconf.vocabulary import PASSING as _PASSING

# Display order is the order of this mapping: conforms, failures from the worst, then the
# other passing verdicts.
VERDICTS: dict[str, str] = {v: meaning(v) for v in DISPLAY_ORDER}
PASSING = frozenset(_PASSING)
FAILING = tuple(v for v in VERDICTS if v not in PASSING)


KNOWN_DEVICES = ("cpu", "cuda", "mps", "npu", "xpu")

#: Two rows with the same key describe the same cell; the later file/line wins.
MERGE_KEY = ("source", "doc_version", "entry_id", "phase", "device", "mode", "torch_version")
#: One matrix row per entry and phase (a backward entry's ``backward-only`` phase is a row of its own).
ENTRY_KEY = ("source", "doc_version", "entry_id", "phase")
#: What the matrix shows of an entry (from its latest row).
ENTRY_ATTRIBUTES = ("source", "doc_version", "list_name", "position", "entry_id", "phase", "op",
                    "sentence", "promise")
#: The phase of rows written before phases existed (schema 1).
DEFAULT_PHASE = "program"

_REQUIRED_STR = (
    "run_id", "entry_id", "op", "sentence", "source", "list_name", "promise",
    "device", "mode", "verdict", "torch_version",
)
_NON_EMPTY = ("entry_id", "source", "device", "mode", "verdict", "torch_version")
_REQUIRED = frozenset(_REQUIRED_STR)

#: Fields of result records in the long-form frame (``Results.rows``), in order. The
#: sentence is on the entry (``Results.entries``); the evidence (``detail``) stays in
#: ``Results.records``.
ROW_FIELDS = (
    "source", "doc_version", "list_name", "entry_id", "phase", "op", "promise", "torch_version",
    "device", "device_name", "mode", "expected", "observed", "verdict", "examples", "runs",
    "reach", "run_id", "nodeid", "duration_s",
)
#: Fields every result record is checked on (column-wise, see _first_bad).
_CHECKED_FIELDS = _REQUIRED_STR + ("doc_version", "position", "detail")


class ResultsError(ValueError):
    """Bad input: a one-line message naming the file and, where there is one, the line."""


class NoResults(ResultsError):
    """The files are valid but hold no result record (e.g. a run that selected no test)."""


@dataclass
class Results:
    """Merged result rows of one or more results files, in matrix order."""

    values: dict[str, list]  # ROW_FIELDS, file, line, seq -> one value per row (None: absent)
    entry_codes: np.ndarray  # per row: its entry, an index into ``entries``
    column_codes: np.ndarray  # per row: its column, an index into ``columns``
    records: list[dict]  # the same rows as the parsed JSON objects
    texts: list[str]  # the same rows as the lines read
    runs: list[dict]  # run headers (a repeated run_id: the later header wins)
    inputs: list[dict]  # per file: path, numbers of result and run records
    overrides: int  # result records replaced by a later record with the same key
    entries: pd.DataFrame  # ENTRY_ATTRIBUTES, one row per entry; row n has entry code n
    columns: list[tuple[str, str, str]]  # (torch_version, device, mode); index = column code

    @functools.cached_property
    def rows(self) -> pd.DataFrame:
        """The rows as a DataFrame: ROW_FIELDS, file, line, seq, entry_code, column_code.
        Built on first use (the report writers work from ``values``)."""
        frame = pd.DataFrame(self.values)
        frame["doc_version"] = frame["doc_version"].fillna("")
        frame["entry_code"] = self.entry_codes
        frame["column_code"] = self.column_codes
        return frame


# ----------------------------------------------------------------------------- ordering

def natural_key(text: str) -> tuple:
    """Sort key that orders ``2.9.0`` before ``2.10.0``."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)


def device_key(device: str) -> tuple:
    return (KNOWN_DEVICES.index(device), "") if device in KNOWN_DEVICES else (len(KNOWN_DEVICES), device)


def mode_key(mode: str) -> int:
    return MODES.index(mode)


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
            mode_key(rec["mode"]))


# ----------------------------------------------------------------------------- reading

def _fail(path: str, line: int | None, problem: str) -> ResultsError:
    where = f"{path}:{line}" if line is not None else path
    return ResultsError(f"{where}: {problem}")


def _check_result(rec: dict, path: str, lineno: int) -> None:
    missing = _REQUIRED - rec.keys()
    if missing:
        names = ", ".join(sorted(missing))
        raise _fail(path, lineno, f"result record missing required field(s): {names}")
    for name in _REQUIRED_STR:
        value = rec[name]
        if not isinstance(value, str):
            raise _fail(path, lineno, f"field {name!r} must be a string, got {type(value).__name__}")
    for name in _NON_EMPTY:
        if not rec[name]:
            raise _fail(path, lineno, f"field {name!r} is empty")
    if rec["verdict"] not in VERDICTS:
        raise _fail(path, lineno, f"unknown verdict {rec['verdict']!r}")
    if rec["mode"] not in MODES:
        raise _fail(path, lineno, f"unknown mode {rec['mode']!r} (expected one of {', '.join(MODES)})")
    if rec.get("phase", DEFAULT_PHASE) not in PHASES:
        raise _fail(path, lineno, f"unknown phase {rec['phase']!r} (expected one of {', '.join(PHASES)})")
    doc_version = rec.get("doc_version")
    if doc_version is not None and not isinstance(doc_version, str):
        raise _fail(path, lineno, "field 'doc_version' must be a string or null")
    position = rec.get("position")
    if position is not None and (not isinstance(position, int) or isinstance(position, bool)):
        raise _fail(path, lineno, "field 'position' must be an integer or null")
    detail = rec.get("detail")
    if detail is not None:
        if not isinstance(detail, dict):
            raise _fail(path, lineno, "field 'detail' must be an object")
        fingerprints = detail.get("fingerprints")
        if fingerprints is not None and not isinstance(fingerprints, dict):
            raise _fail(path, lineno, "field 'detail.fingerprints' must be an object (example index -> hash)")


def _check_run(rec: dict, path: str, lineno: int) -> None:
    if not isinstance(rec.get("run_id"), str) or not rec["run_id"]:
        raise _fail(path, lineno, "run record needs a non-empty string 'run_id'")
    if not isinstance(rec.get("env"), dict):
        raise _fail(path, lineno, "run record needs an object 'env'")


def _parse(name: str, text: str) -> tuple[list, list[int], list[str]]:
    """JSON-decode every non-blank line; returns the objects, their line numbers and their
    texts (surrounding whitespace stripped)."""
    stripped = [line.strip() for line in text.split("\n")]
    linenos = [n for n, line in enumerate(stripped, start=1) if line]
    lines = [line for line in stripped if line]
    numbered = zip(linenos, lines)
    # Fast path: one decode of all lines as a JSON array (several times faster than one call per
    # line). It is trusted only when every line looks like one object and the count matches;
    # anything else is decoded line by line, which also names the bad line.
    if all(line[0] == "{" and line[-1] == "}" for line in lines):
        try:
            objs = json.loads("[" + ",".join(lines) + "]")
        except ValueError:
            objs = None
        if objs is not None and len(objs) == len(lines) and all(type(o) is dict for o in objs):
            return objs, linenos, lines
    objs = []
    for lineno, line in numbered:
        try:
            objs.append(json.loads(line))
        except ValueError as exc:
            msg = getattr(exc, "msg", str(exc))
            raise _fail(name, lineno, f"corrupt JSON line ({msg})") from None
    return objs, linenos, lines


def _check_record(rec: object, name: str, lineno: int, schema_seen: list) -> str:
    """Full check of one record except the column-wise checks of results; returns its kind."""
    if not isinstance(rec, dict):
        raise _fail(name, lineno, f"expected a JSON object, got {type(rec).__name__}")
    schema = rec.get("schema")
    if schema not in READABLE_SCHEMAS or type(schema) is not int:
        what = "missing 'schema'" if schema is None else f"unsupported schema {schema!r}"
        known = ", ".join(map(str, READABLE_SCHEMAS))
        raise _fail(name, lineno, f"{what} (this reader knows schemas {known}; it writes {SCHEMA_VERSION})")
    if not schema_seen:
        schema_seen.append(schema)
    kind = rec.get("record")
    if kind == "result":
        missing = _REQUIRED - rec.keys()
        if missing:
            names = ", ".join(sorted(missing))
            raise _fail(name, lineno, f"result record missing required field(s): {names}")
    elif kind == "run":
        _check_run(rec, name, lineno)
    elif kind is None:
        raise _fail(name, lineno, "missing field 'record'")
    else:
        raise _fail(name, lineno, f"unknown record type {kind!r}")
    return kind


def read_file(path: str | os.PathLike, schema_seen: list | None = None) -> tuple:
    """Parse one results file and check each record's shape.

    Returns ``(runs, results, result_lines, result_texts)``: run headers, and result
    records with their line numbers and line texts.
    Field types and vocabularies of result records are checked afterwards, column-wise, by
    :func:`load`. ``schema_seen`` (shared across files) detects mixed schema versions.
    """
    name = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise _fail(name, None, f"cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(name, data.count(b"\n", 0, exc.start) + 1, "not UTF-8 text") from None
    if schema_seen is None:
        schema_seen = []
    objs, linenos, texts = _parse(name, text)
    if not objs:
        raise _fail(name, None, "empty file (no records)")

    runs: list[dict] = []
    results: list[dict] = []
    result_lines: list[int] = []
    result_texts: list[str] = []
    required = _REQUIRED
    for rec, lineno, line in zip(objs, linenos, texts):
        # Fast path for the common case; everything else gets the full check.
        if (schema_seen and type(rec) is dict and rec.get("record") == "result"
                and rec.get("schema") == schema_seen[0] and rec.keys() >= required) or (
                _check_record(rec, name, lineno, schema_seen) == "result"):
            results.append(rec)
            result_lines.append(lineno)
            result_texts.append(line)
        else:
            runs.append(rec)
    return runs, results, result_lines, result_texts


def _columns(records: list[dict], fields: tuple[str, ...]) -> dict[str, list]:
    """Field -> list of values (None where absent). When every record has every field (rows
    written by the suite do) one C-level itemgetter per record replaces a .get per field."""
    wanted = frozenset(fields)
    if all(r.keys() >= wanted for r in records):
        return dict(zip(fields, map(list, zip(*map(itemgetter(*fields), records)))))
    return {c: [r.get(c) for r in records] for c in fields}


def _first_bad(columns: dict[str, list]) -> int | None:
    """Index of the first result record some column-wise check rejects (None: all good)."""
    bad: list[int] = []

    def first(col: list, ok) -> None:
        for i, v in enumerate(col):
            if not ok(v):
                bad.append(i)
                return

    for name in _REQUIRED_STR:
        col = columns[name]
        types = set(map(type, col))
        if types != {str}:
            first(col, lambda v: type(v) is str)
        elif name in _NON_EMPTY and "" in set(col):
            first(col, bool)
    if not set(columns["verdict"]) <= VERDICTS.keys():
        first(columns["verdict"], lambda v: v in VERDICTS)
    if not set(columns["mode"]) <= set(MODES):
        first(columns["mode"], lambda v: v in MODES)
    if not set(columns["phase"]) <= set(PHASES):
        first(columns["phase"], lambda v: v in PHASES)
    if not set(map(type, columns["doc_version"])) <= {str, type(None)}:
        first(columns["doc_version"], lambda v: v is None or type(v) is str)
    if not set(map(type, columns["position"])) <= {int, type(None)}:
        first(columns["position"], lambda v: v is None or type(v) is int)
    details = columns["detail"]
    if not set(map(type, details)) <= {dict, type(None)}:
        first(details, lambda v: v is None or type(v) is dict)
    else:
        fingerprints = [d.get("fingerprints") for d in details if d]
        if not set(map(type, fingerprints)) <= {dict, type(None)}:
            first(details, lambda d: not d or type(d.get("fingerprints")) in (dict, type(None)))
    return min(bad) if bad else None


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector: parsing 10^5 JSON objects otherwise triggers
    repeated full collections that cost about as much as the parsing (the objects hold no
    cycles, so nothing is lost by collecting later)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load(paths: Iterable[str | os.PathLike], key: tuple[str, ...] = MERGE_KEY) -> Results:
    """Read, validate and merge results files; a later file/line wins for a repeated ``key``.

    Rows come back in matrix order: entries (see :func:`entry_sort_key`; an entry's list,
    position, op, sentence and promise are those of its latest row), then torch version,
    device, mode.
    """
    with gc_paused():
        return _load(paths, key)


def _load(paths, key: tuple[str, ...]) -> Results:
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise ResultsError("no results files given")
    schema_seen: list = []
    runs_by_id: dict[str, dict] = {}
    records: list[dict] = []
    files: list[str] = []
    lines: list[int] = []
    texts: list[str] = []
    inputs = []
    for path in paths:
        name = os.fspath(path)
        runs, results, result_lines, result_texts = read_file(path, schema_seen)
        for run in runs:
            runs_by_id.pop(run["run_id"], None)  # a repeated run id: the later header wins
            runs_by_id[run["run_id"]] = run
        records += results
        lines += result_lines
        texts += result_texts
        files += [name] * len(results)
        inputs.append({"path": name, "results": len(results), "runs": len(runs)})
    if not records:
        raise NoResults(f"{', '.join(os.fspath(p) for p in paths)}: no result records")

    columns = _columns(records, _CHECKED_FIELDS + tuple(f for f in ROW_FIELDS if f not in _CHECKED_FIELDS))
    if None in set(columns["phase"]):
        columns["phase"] = [p if p is not None else DEFAULT_PHASE for p in columns["phase"]]
    bad = _first_bad(columns)
    if bad is not None:
        _check_result(records[bad], files[bad], lines[bad])
        raise _fail(files[bad], lines[bad], "invalid result record")  # pragma: no cover

    # Merge: the last record of each key wins.
    last = dict(zip(zip(*(columns[c] for c in key)), range(len(records))))
    kept = sorted(last.values())
    overrides = len(records) - len(kept)

    # Entry order, from each entry's latest row.
    entry_of = list(zip(*(columns[c] for c in ENTRY_KEY)))
    latest = {entry_of[i]: i for i in kept}
    entry_order = sorted(latest, key=lambda e: entry_sort_key(records[latest[e]]))
    entry_rank = {e: n for n, e in enumerate(entry_order)}
    column_of = list(zip(columns["torch_version"], columns["device"], columns["mode"]))
    column_order = sorted({column_of[i] for i in kept}, key=lambda c: column_sort_key(
        {"torch_version": c[0], "device": c[1], "mode": c[2]}))
    column_rank = {c: n for n, c in enumerate(column_order)}
    kept_arr = np.asarray(kept)
    e_codes = np.fromiter((entry_rank[entry_of[i]] for i in kept), dtype=np.int64, count=len(kept))
    c_codes = np.fromiter((column_rank[column_of[i]] for i in kept), dtype=np.int64, count=len(kept))
    perm = np.lexsort((c_codes, e_codes))
    order = kept_arr[perm].tolist()

    pick = itemgetter(*order) if len(order) > 1 else (lambda col: [col[order[0]]])
    values = {c: list(pick(columns[c])) for c in ROW_FIELDS}
    values["file"] = list(pick(files))
    values["line"] = list(pick(lines))
    values["seq"] = order  # arrival order across all files

    entry_records = []
    for e in entry_order:
        rec = records[latest[e]]
        entry_records.append({c: rec.get(c) for c in ENTRY_ATTRIBUTES})
    entries = pd.DataFrame(entry_records, columns=list(ENTRY_ATTRIBUTES))
    entries["doc_version"] = entries["doc_version"].fillna("").astype(object)
    entries["phase"] = entries["phase"].fillna(DEFAULT_PHASE).astype(object)
    return Results(
        values=values,
        entry_codes=e_codes[perm],
        column_codes=c_codes[perm],
        records=list(pick(records)),
        texts=list(pick(texts)),
        runs=list(runs_by_id.values()),
        inputs=inputs,
        overrides=overrides,
        entries=entries,
        columns=column_order,
    )


def rows_digest(texts: list[str]) -> str:
    """sha256 of the merged result rows: each line exactly as read (surrounding whitespace
    stripped) followed by a newline, in matrix order. Matrix order follows from the rows'
    content, so shuffling the lines of a file does not change the digest."""
    h = hashlib.sha256()
    for start in range(0, len(texts), 10_000):  # in slices: no second copy of all the text
        h.update(("\n".join(t.strip() for t in texts[start:start + 10_000]) + "\n").encode("utf-8"))
    return h.hexdigest()
