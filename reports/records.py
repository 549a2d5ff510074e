"""What a results line may hold (docs/results-schema.md): the record kinds and their fields,
the vocabulary of the reports (verdicts, keys, row fields), the Arrow schemas a chunk is parsed
into, and the checks of one record and of a column of rows.

Every check returns a problem as text (None: nothing wrong); the reader puts the file and line
in front of it (:class:`ResultsError`).
"""

from __future__ import annotations

import math
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detconf.vocabulary import COMPILERS, DISPLAY_ORDER, MODES, PHASES, READABLE_SCHEMAS, SCHEMA_VERSION, meaning
from detconf.vocabulary import PASSING as _PASSING
from detconf.reports import planned as planned_mod

# Display order is the order of this mapping: conforms, failures from the worst, then the
# other passing verdicts.
VERDICTS: dict[str, str] = {v: meaning(v) for v in DISPLAY_ORDER}
PASSING = frozenset(_PASSING)

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
#: The compile setting of rows written before the compile axis existed (schemas 1 and 2), and
#: the one a table of eager runs does not name in its labels.
EAGER = "eager"

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

#: The two words of the positive control counted per example (``detail.verdicts_per_example``).
SEEN, QUIET = "nondeterminism-seen", "no-difference-seen"

# The fields of a result record the reports read, with what each must hold. Kinds: str, int,
# num (a JSON number), strlist (a list of strings), obj (an object), detail (an object whose
# ``fingerprints`` and ``verdicts_per_example`` are objects). Required fields are non-null strings.
REQUIRED_STR = (
    "run_id", "entry_id", "op", "sentence", "source", "list_name", "promise",
    "device", "mode", "verdict", "torch_version",
)
_NON_EMPTY = ("entry_id", "source", "device", "mode", "verdict", "torch_version")
#: Fields that name a matrix column (a device type, a torch version): a name, never padded or
#: spaced (``"cpu "`` is not a device, and would make a column of its own beside ``cpu``).
NAME_FIELDS = ("device", "torch_version")
#: What a name may not hold: spaces and separators (Z*), control, format (bidi, zero-width),
#: private-use and surrogate characters (C*).
_NOT_IN_NAMES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cs"})
_REQUIRED = frozenset(REQUIRED_STR)
FIELD_KINDS: dict[str, str] = {
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
    ("verdicts_per_example", pa.struct([(SEEN, pa.int64()), (QUIET, pa.int64())])),
    ("max_numel", pa.int64()),
])
_D2D_TYPE = pa.struct([("result", pa.string()), ("compared", pa.int64()), ("differing", pa.int64())])
_ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "num": pa.float64(), "strlist": pa.list_(pa.string()),
                "obj": pa.struct([]), "detail": _DETAIL_TYPE, "d2d": _D2D_TYPE}
#: What pyarrow parses of every line; everything else in a line is skipped.
PARSE_SCHEMA = pa.schema([("record", pa.string()), ("schema", pa.int64())]
                         + [(name, _ARROW_TYPES[kind]) for name, kind in FIELD_KINDS.items()])

#: The columns of ``Results.table``: the result fields kept, then what the reports use of
#: ``detail`` (the counts of ``verdicts_per_example`` for the positive control; whether
#: there are fingerprints), then where each row came from.
KEPT_FIELDS = tuple(n for n, k in FIELD_KINDS.items() if k in ("str", "int", "num", "strlist")
                    and n != "targets")
TABLE_SCHEMA = pa.schema([(n, _ARROW_TYPES[FIELD_KINDS[n]]) for n in KEPT_FIELDS] + [
    ("examples_differing", pa.int64()), ("examples_not_differing", pa.int64()),
    ("has_fingerprints", pa.bool_()), ("d2d", pa.string()), ("max_numel", pa.int64()),
])
_INT64 = (-(1 << 63), (1 << 63) - 1)


class ResultsError(ValueError):
    """Bad input: a one-line message naming the file and, where there is one, the line."""


class NoResults(ResultsError):
    """The files are valid but hold no result record (e.g. a run that selected no test)."""


def fail(path: str, line: int | None, problem: str) -> ResultsError:
    """The error for a problem at ``path:line`` (``line`` None: the file as a whole)."""
    where = f"{path}:{line}" if line is not None else path
    return ResultsError(f"{where}: {problem}")


# ----------------------------------------------------------------------------- one record

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
        for verdict in (SEEN, QUIET):
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
    for name, kind in FIELD_KINDS.items():
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
              "outcome": "str", "suite_plan": "dict"}


def _check_end(rec: dict) -> str | None:
    if not isinstance(rec.get("run_id"), str) or not rec["run_id"]:
        return "end record needs a non-empty string 'run_id'"
    for name, kind in END_FIELDS.items():
        value = rec.get(name)
        if value is None:
            continue
        if kind == "str" and type(value) is not str:
            return f"end record field {name!r} must be a string, got {_type_name(value)}"
        if kind == "dict" and type(value) is not dict:
            return f"end record field {name!r} must be an object, got {_type_name(value)}"
        if kind == "int":
            problem = _check_int(value, f"end record field {name!r}")
            if problem:
                return problem
    return None


_KIND_CHECKS = {"result": _check_result, "run": _check_run, "end": _check_end}


def without_run_fingerprints(rec: object) -> object:
    """``rec`` as :func:`check_record` takes it from a reader that allows a check's run
    fingerprints: the CUDA checks of the reproducibility notes (cuBLAS workspace) write
    ``detail.fingerprints`` as a *list* of run fingerprints, not per-example ones; such a row is
    checked without them (``fingerprints``, ``sensitivity``)."""
    if isinstance(rec, dict) and isinstance(rec.get("detail"), dict) and isinstance(rec["detail"].get("fingerprints"), list):
        return {**rec, "detail": {k: v for k, v in rec["detail"].items() if k != "fingerprints"}}
    return rec


def check_record(rec: object) -> tuple[str | None, str | None]:
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


# ----------------------------------------------------------------------------- columns of rows

def normalise(table: pa.Table) -> pa.Table:
    """Rows written before phases (schema 1) or the compile axis (schemas 1, 2) have neither;
    a missing doc version is the installed torch's, like an empty one."""
    for name, value in (("phase", DEFAULT_PHASE), ("compile", EAGER), ("doc_version", "")):
        column = table.column(name)
        if column.null_count:
            table = table.set_column(table.schema.get_field_index(name), name, pc.fill_null(column, value))
    return table


def first_semantic_problem(table: pa.Table, lines: np.ndarray, run_lines: np.ndarray) -> tuple[int, str] | None:
    """(row, problem) for the first row of ``table`` (TABLE_SCHEMA, normalised) that a
    column-wise check rejects; ``run_lines``: per row, the line of its run's record (-1: none)."""
    checks = [pc.equal(table.column(name), "") for name in _NON_EMPTY]
    for name in NAME_FIELDS:  # few distinct names: each checked once
        column = table.column(name)
        bad_names = [v for v in pc.unique(column).to_pylist() if v is not None and name_problem(name, v)]
        if bad_names:
            checks.append(pc.fill_null(pc.is_in(column, value_set=pa.array(bad_names, pa.string())), False))
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


def name_problem(name: str, value: str) -> str | None:
    """What is wrong with ``value`` as the name in field ``name`` (one of NAME_FIELDS): a space,
    a control or format character anywhere in it (the plugin refuses such a ``--device``)."""
    if value and any(unicodedata.category(c) in _NOT_IN_NAMES for c in value):
        return (f"field {name!r} must be a name without spaces or control characters, got {value!r}"
                + (" (spaces around it)" if value != value.strip() else ""))
    return None


def after_end_problem(run_id: str, count: int, end_line: int) -> str:
    """Rows of a run after its end record (the suite writes none there: something appended them)."""
    return (f"run {run_id!r}: {count} row(s) after its end record (line {end_line}): the suite writes no row "
            "after a run's end record, so something else appended them; give the file as the run wrote it")


def second_end_problem(run_id: str, first_line: int) -> str:
    """A second end record of one run (a run ends once)."""
    return (f"a second end record of run {run_id!r} (the first is at line {first_line}): a run ends once, so "
            "something else appended it; give the file as the run wrote it")


def _semantic_problem(rec: dict) -> str:
    for name in _NON_EMPTY:
        if not rec[name]:
            return f"field {name!r} is empty"
    for name in NAME_FIELDS:
        problem = name_problem(name, rec[name])
        if problem:
            return problem
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
                        ("examples_differing", f"detail.verdicts_per_example.{SEEN}"),
                        ("examples_not_differing", f"detail.verdicts_per_example.{QUIET}"),
                        ("max_numel", "detail.max_numel")):
        if rec[name] is not None and rec[name] < 0:
            return f"field {shown!r} must not be negative, got {rec[name]}"
    return f"result row of run {rec['run_id']!r} comes before any run record with that run_id"

