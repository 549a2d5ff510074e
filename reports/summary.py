"""Counts of a run: the terminal-summary lines pytest prints and the data of ``summary.json``."""

from __future__ import annotations

import os

from reports.load import PASSING, SCHEMA_VERSION, VERDICTS, NoResults, Results, load, rows_digest
from reports.matrix import Matrix

SEP = " · "


def column_line(count: dict) -> str:
    """``cpu/error: conforms 44/48 · stale-doc 1 · unsupported 3``"""
    counts = count["counts"]
    if count["column"].endswith("/off"):
        # The positive control promises nothing: count what was seen, out of all cells.
        parts = [f"{v} {counts[v]}/{count['total']}" for v in VERDICTS if counts[v]]
        return f"{count['column']}: " + SEP.join(parts)
    parts = [f"conforms {counts['conforms']}/{count['total']}"]
    parts += [f"{v} {counts[v]}" for v in VERDICTS if v != "conforms" and counts[v]]
    return f"{count['column']}: " + SEP.join(parts)


def matrix_lines(matrix: Matrix) -> list[str]:
    """Per column a count line, then one line per entry whose verdict there is failing."""
    entries = matrix.entries
    several_sources = entries["source"].nunique() > 1
    names = [
        (f"{e} ({s})" if several_sources else e) + (f" <{p}>" if p != "program" else "")
        for e, s, p in zip(entries["entry_id"], entries["source"], entries["phase"])
    ]
    lines = []
    for j, count in enumerate(matrix.column_counts()):
        lines.append(column_line(count))
        for i, verdict in enumerate(matrix.cells[:, j]):
            if verdict is not None and verdict not in PASSING:
                lines.append(f"  ✗ {names[i]} [{count['column']}]: {verdict}")
    return lines


def summary_lines(results_path: str | os.PathLike) -> list[str]:
    """The lines to print at the end of a conformance run, read from its results file.

    A valid file without result records gives a single explanatory line; bad input raises
    :class:`reports.load.ResultsError` (one-line message naming file and line).
    """
    try:
        results = load([results_path])
    except NoResults:
        return [f"detconf: no results recorded in {os.fspath(results_path)}"]
    return matrix_lines(Matrix.from_results(results)) + reach_lines(results)


def reach_stats(results: Results) -> dict:
    """Reach over the cells that judge it: how many, how many at 100 %, and those below."""
    v = results.values
    judged = [(r, e, p, d, m) for r, e, p, d, m in zip(v["reach"], v["entry_id"], v["phase"], v["device"], v["mode"])
              if isinstance(r, (int, float)) and not isinstance(r, bool)]
    below = sorted(((r, e, p, d, m) for r, e, p, d, m in judged if r < 1), key=lambda t: (t[0], t[1]))
    return {"judged": len(judged), "full": len(judged) - len(below),
            "below": [{"entry_id": e, "phase": p, "device": d, "mode": m, "reach": r} for r, e, p, d, m in below]}


def reach_lines(results: Results) -> list[str]:
    """``reach: 315 cells judged · 311 at 100 % · 4 below`` and the lowest few."""
    stats = reach_stats(results)
    if not stats["judged"]:
        return []
    lines = [f"reach: {stats['judged']} cells judged{SEP}{stats['full']} at 100 %{SEP}{len(stats['below'])} below"]
    for b in stats["below"][:5]:
        phase = f" <{b['phase']}>" if b["phase"] != "program" else ""
        lines.append(f"  ~ {b['entry_id']}{phase} [{b['device']}/{b['mode']}]: {b['reach']:.0%} of examples")
    return lines


def summary_data(matrix: Matrix, results: Results) -> dict:
    """The content of ``summary.json``."""
    columns = matrix.column_counts()
    totals = {v: sum(c["counts"][v] for c in columns) for v in VERDICTS}
    return {
        "schema": SCHEMA_VERSION,
        "entries": len(matrix.entries),
        "cells": int(sum(c["total"] for c in columns)),
        "records_read": sum(i["results"] for i in results.inputs),
        "overrides": results.overrides,
        "passing": sum(c["passing"] for c in columns),
        "failing": sum(c["failing"] for c in columns),
        "totals": totals,
        "reach": reach_stats(results),
        "columns": columns,
        "runs": [
            {"run_id": r.get("run_id"), "started": r.get("started"), "env": r.get("env")}
            for r in results.runs
        ],
        "inputs": results.inputs,
        "digest": {
            "algorithm": "sha256",
            "over": "the merged result rows: each input line as read (surrounding whitespace "
                    "stripped) plus a newline, UTF-8, in matrix order (entries, then torch "
                    "version, device, mode)",
            "rows": len(results.texts),
            "value": rows_digest(results.texts),
        },
    }
