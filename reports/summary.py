"""Counts of a run: the terminal-summary lines pytest prints and the data of ``summary.json``."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.compute as pc

from detconf.vocabulary import SCHEMA_VERSION
from detconf.reports.answer import ANSWER_WORDS, Answer, answer_for, part_answers, terminal_lines
from detconf.reports.load import load
from detconf.reports.matrix import Matrix
from detconf.reports.records import ROW_FIELDS, VERDICTS, NoResults
from detconf.reports.results import Results

SEP = " · "


def column_line(count: dict) -> str:
    """``cpu/error: conforms 44/48 · stale-doc 1 · unsupported 3``"""
    counts = count["counts"]
    if count["mode"] == "off":
        # The positive control promises nothing: count what was seen, out of all cells.
        parts = [f"{v} {counts[v]}/{count['total']}" for v in VERDICTS if counts[v]]
        return f"{count['column']}: " + SEP.join(parts)
    parts = [f"conforms {counts['conforms']}/{count['total']}"]
    parts += [f"{v} {counts[v]}" for v in VERDICTS if v != "conforms" and counts[v]]
    return f"{count['column']}: " + SEP.join(parts)


def matrix_lines(matrix: Matrix) -> list[str]:
    """Per column a count line (the failing cells are listed by the answer above them)."""
    return [column_line(count) for count in matrix.column_counts()]


def summary_lines(results_path: str | os.PathLike) -> list[str]:
    """The lines to print at the end of a conformance run, read from its results file: the
    answer first (pass or fail, counts per verdict, every failing or missing cell with its
    evidence, known finding and rerun command), then a count line per column, the
    device-to-device and the reach lines.

    A valid file without result records gives a single explanatory line; bad input raises
    :class:`reports.records.ResultsError` (one-line message naming file and line).
    """
    try:
        results = load([results_path], columns=ROW_FIELDS)
    except NoResults:
        return [f"detconf: no results recorded in {os.fspath(results_path)}"]
    matrix = Matrix.from_results(results)
    answer = answer_for(matrix, results)
    several_sources = matrix.entries["source"].nunique() > 1
    return (terminal_lines(answer, several_sources) + matrix_lines(matrix) + d2d_lines(matrix)
            + reach_lines(results))


def d2d_lines(matrix: Matrix) -> list[str]:
    """``d2d cuda/error: 40 cells checked · 39 same · 1 differs`` and the entries that differ."""
    lines = []
    for c in matrix.d2d_counts():
        lines.append(f"d2d {c['column']}: {c['checked']} cells checked{SEP}{c['same']} same{SEP}{c['differs']} differs")
        lines += [f"  ✗ {e} [{c['column']}]: different bytes on two devices of one model" for e in c["entries"][:20]]
    return lines


def reach_stats(results: Results) -> dict:
    """Reach over the cells that judge it: how many, how many at 100 %, and those below
    (lowest first; their compile setting named where it is not eager)."""
    reach = results.column("reach")
    judged = len(reach) - reach.null_count
    low = np.flatnonzero(np.asarray(pc.fill_null(pc.less(reach, 1.0), False), dtype=bool))
    columns = {name: results.column(name).take(low).to_pylist()
               for name in ("reach", "entry_id", "phase", "device", "mode", "compile")}
    below = sorted(zip(*columns.values()), key=lambda t: (t[0], t[1]))
    return {"judged": judged, "full": judged - len(below),
            "below": [dict({"entry_id": e, "phase": p, "device": d, "mode": m, "reach": r},
                           **({"compile": c} if c != "eager" else {}))
                      for r, e, p, d, m, c in below]}


def reach_lines(results: Results) -> list[str]:
    """``reach: 315 cells judged · 311 at 100 % · 4 below`` and the lowest few."""
    stats = reach_stats(results)
    if not stats["judged"]:
        return []
    lines = [f"reach: {stats['judged']} cells judged{SEP}{stats['full']} at 100 %{SEP}{len(stats['below'])} below"]
    for b in stats["below"][:5]:
        phase = f" <{b['phase']}>" if b["phase"] != "program" else ""
        column = f"{b['device']}/{b['mode']}" + (f"/{b['compile']}" if "compile" in b else "")
        lines.append(f"  ~ {b['entry_id']}{phase} [{column}]: {b['reach']:.0%} of examples")
    return lines


def answer_data(answer: Answer, matrix: Matrix) -> dict:
    """``summary.json``'s ``answer``: the word the other reports say, what it means, the
    headline, the scope and one answer per (torch version, device)."""
    scope = answer.scope
    return {
        "word": answer.word,
        "meaning": answer.meaning,
        "words": dict(ANSWER_WORDS),
        "headline": answer.headline,
        "judged": answer.judged,
        "scope": None if scope is None else {"torch": scope.torch, "devices": scope.devices, "sources": scope.sources,
                                             "suites": scope.suites, "dates": scope.dates, "text": scope.text},
        "parts": part_answers(answer, matrix),
    }


def summary_data(matrix: Matrix, results: Results, digest: str | None = None, answer: Answer | None = None) -> dict:
    """The content of ``summary.json`` (``digest``: the rows' digest where it was taken already;
    ``answer``: the answer where it was made already)."""
    answer = answer or answer_for(matrix, results)
    columns = matrix.column_counts()
    totals = {v: sum(c["counts"][v] for c in columns) for v in VERDICTS}
    ends = {e["run_id"]: {k: v for k, v in e.items() if k not in ("record", "schema", "run_id")}
            for e in results.ends}  # a run closed twice: the later end record
    return {
        "schema": SCHEMA_VERSION,
        "answer": answer_data(answer, matrix),
        "entries": len(matrix.entries),
        "cells": int(sum(c["total"] for c in columns)),
        "records_read": sum(i["results"] for i in results.inputs),
        "overrides": results.overrides,
        "passing": sum(c["passing"] for c in columns),
        "failing": sum(c["failing"] for c in columns),
        "totals": totals,
        "reach": reach_stats(results),
        "columns": columns,
        "d2d": matrix.d2d_counts(),
        "runs": [
            {"run_id": r.get("run_id"), "started": r.get("started"), "env": r.get("env"),
             "end": ends.get(r.get("run_id"))}
            for r in results.runs
        ],
        "inputs": results.inputs,
        "digest": {
            "algorithm": "sha256",
            "over": "the merged result rows: each input line as read (surrounding whitespace "
                    "stripped) plus a newline, UTF-8, in matrix order (entries, then torch "
                    "version, device, mode, compile setting); missing rows have no line",
            "rows": len(results) - results.missing,
            "value": digest if digest is not None else results.digest(),
        },
        "missing": results.missing,
        "completeness": results.completeness,
    }
