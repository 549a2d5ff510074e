"""Planned cases without a row: the ``missing`` verdict.

A run record lists the cases the run planned (``planned_entries`` and ``planned_cases``,
docs/results-schema.md). A planned case with no row of its run becomes a ``missing`` row: a
failing cell, never a blank one. Such a row has no text in any file (it is made here); it
gives way to any row that judged the same cell, in any file read (a re-run that filled it, a
shard that ran it), and the latest of two ``missing`` rows of one cell stands.

Run records written before the list existed (a count only) give no ``missing`` rows; the
reports say so (:func:`completeness_lines`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detconf.vocabulary import COMPILERS, MODES, PHASES

_ENTRY_STR = ("source", "entry_id", "op", "sentence", "list_name", "promise")
_CASE_STR = ("id", "phase", "device", "mode", "compile")
#: The verdict of a planned case without a row.
MISSING = "missing"


def planned_problem(rec: dict) -> str | None:
    """What is wrong with the planned-case fields of a run record (None: nothing, or absent)."""
    entries, cases = rec.get("planned_entries"), rec.get("planned_cases")
    if entries is None and cases is None:
        return None
    if type(entries) is not list or type(cases) is not list:
        return "run record: 'planned_entries' and 'planned_cases' must both be lists"
    for k, entry in enumerate(entries):
        if type(entry) is not dict:
            return f"run record: planned_entries[{k}] must be an object"
        for name in _ENTRY_STR:
            if type(entry.get(name)) is not str or (name in ("source", "entry_id") and not entry[name]):
                return f"run record: planned_entries[{k}].{name} must be a{' non-empty' if name in ('source', 'entry_id') else ''} string"
        if entry.get("doc_version") is not None and type(entry["doc_version"]) is not str:
            return f"run record: planned_entries[{k}].doc_version must be a string or null"
        if entry.get("position") is not None and type(entry["position"]) is not int:
            return f"run record: planned_entries[{k}].position must be an integer or null"
        for name in ("needs_device", "torch"):
            if entry.get(name) is not None and type(entry[name]) is not str:
                return f"run record: planned_entries[{k}].{name} must be a string or null"
    ids: set[str] = set()
    for k, case in enumerate(cases):
        if type(case) is not dict:
            return f"run record: planned_cases[{k}] must be an object"
        for name in _CASE_STR:
            if type(case.get(name)) is not str or not case[name]:
                return f"run record: planned_cases[{k}].{name} must be a non-empty string"
        index = case.get("entry")
        if type(index) is not int or not 0 <= index < len(entries):
            return f"run record: planned_cases[{k}].entry must be an index into planned_entries"
        for name, known in (("phase", PHASES), ("mode", MODES), ("compile", COMPILERS)):
            if case[name] not in known:
                return f"run record: planned_cases[{k}].{name} {case[name]!r} is not one of {', '.join(known)}"
        if case.get("expected") is not None and type(case["expected"]) is not str:
            return f"run record: planned_cases[{k}].expected must be a string or null"
        if case["id"] in ids:
            return f"run record: planned case {case['id']!r} is listed twice"
        ids.add(case["id"])
    planned = rec.get("planned")
    if planned is not None and planned != len(cases):
        return f"run record: 'planned' is {planned!r} but {len(cases)} planned cases are listed"
    return None


def planned_cells(rec: dict) -> list[dict[str, Any]]:
    """The cells a run record's planned cases name, one dict per case (the fields of a row;
    ``doc_version`` "" for the installed torch's docs), in the order listed."""
    entries = rec.get("planned_entries") or []
    torch_version = str((rec.get("env") or {}).get("torch_version") or "")
    out = []
    for case in rec.get("planned_cases") or []:
        entry = entries[case["entry"]]
        out.append({
            "case_id": case["id"], "source": entry["source"], "doc_version": entry.get("doc_version") or "",
            "entry_id": entry["entry_id"], "op": entry["op"], "sentence": entry["sentence"],
            "list_name": entry["list_name"], "position": entry.get("position"), "promise": entry["promise"],
            "phase": case["phase"], "device": case["device"], "mode": case["mode"], "compile": case["compile"],
            "expected": case.get("expected"), "torch_version": torch_version, "run_id": rec["run_id"],
        })
    return out


#: What names a cell within one run (its torch version is the run's).
_RUN_CELL = ("source", "doc_version", "entry_id", "phase", "device", "mode", "compile")


def _tuples(table: pa.Table, names: tuple[str, ...]) -> list[tuple]:
    columns = [table.column(n).to_pylist() for n in names]
    return list(zip(*columns))


def missing_rows(files, key: tuple[str, ...], schema: pa.Schema) -> tuple[list[pa.Table], list[dict]]:
    """``missing`` rows for the planned cases of every run that got no row of that run and
    whose cell (``key``) no row of any file judged; one table per file (``schema``, the
    columns the reader keeps), and per run what the reports say about its completeness:
    ``{"run_id", "path", "planned", "listed", "rows", "missing"}`` (``rows``: the run's rows,
    counted for runs that list their cases; None for the others)."""
    report: list[dict] = []
    candidates: list[list[dict]] = []
    for f in files:
        lists = any(rec.get("planned_cases") is not None for _, rec in f.runs)
        table = pa.concat_tables(f.parts) if f.parts and lists else None
        run_ids = table.column("run_id") if table is not None else None
        counts = {}
        if run_ids is not None and len(run_ids):
            vc = pc.value_counts(run_ids).to_pylist()
            counts = {d["values"]: d["counts"] for d in vc}
        mine: list[dict] = []
        for line, rec in f.runs:
            listed = rec.get("planned_cases") is not None
            entry = {"run_id": rec["run_id"], "path": f.name, "planned": rec.get("planned"), "listed": listed,
                     "rows": counts.get(rec["run_id"], 0) if listed else None, "missing": 0}
            report.append(entry)
            if not listed:
                continue
            cells = planned_cells(rec)
            if not cells:
                continue
            if table is not None and entry["rows"]:
                own = table.filter(pc.equal(table.column("run_id"), rec["run_id"]))
                seen = set(_tuples(own, _RUN_CELL))
            else:
                seen = set()
            lost = [dict(c, _line=line, _report=entry) for c in cells if tuple(c[n] for n in _RUN_CELL) not in seen]
            mine += lost
        candidates.append(mine)
    if not any(candidates):
        return [], report
    # A cell any file judged is not missing.
    wanted = sorted({c["entry_id"] for group in candidates for c in group})
    judged: set[tuple] = set()
    for f in files:
        for part in f.parts:
            rows = part.filter(pc.is_in(part.column("entry_id"), value_set=pa.array(wanted)))
            judged.update(_tuples(rows, key))
    tables = []
    for f, group in zip(files, candidates):
        group = [c for c in group if tuple(c[n] for n in key) not in judged]
        for c in group:
            c["_report"]["missing"] += 1
        if not group:
            continue
        columns: dict[str, Any] = {}
        n = len(group)
        for field in schema:
            name = field.name
            if name == "verdict":
                values = [MISSING] * n
            elif name == "observed":
                values = ["no row"] * n
            elif name == "file":
                values = np.full(n, f.index, dtype=np.int32)
            elif name == "line":
                values = np.asarray([c["_line"] for c in group], dtype=np.int64)
            elif name in ("start", "end"):
                values = np.full(n, -1, dtype=np.int64)  # no text: see Results.spans
            elif name == "newline_after":
                values = np.zeros(n, dtype=bool)
            elif name == "has_fingerprints":
                values = [False] * n
            else:
                values = [c.get(name) for c in group]
            columns[name] = pa.array(values, type=field.type)
        tables.append(pa.table(columns, schema=schema))
    return tables, report


def completeness_lines(report: list[dict]) -> list[str]:
    """One line per run whose planned cases did not all get a row, and one for the runs
    whose record does not list its cases (no ``missing`` inference for them)."""
    lines = []
    for r in report:
        if r["listed"] and r["missing"]:
            lines.append(f"incomplete: run {r['run_id']} ({r['path']}): {r['missing']} of {r['planned']} planned "
                         "cases have no row (shown as missing)")
    unlisted = [r for r in report if not r["listed"]]
    if unlisted:
        lines.append(f"{len(unlisted)} run(s) do not list their planned cases (results written before the list): "
                     "cases they lost cannot be shown as missing")
    return lines
