"""The answer a report opens with: did the run pass, how many cells of each verdict, and every
failing or missing cell with its evidence in one line, the known finding that waives it (where
the run recorded one) and a command that runs it again.

The answer is one word of :data:`ANSWER_WORDS`: ``FAIL`` when a cell fails (or is missing) and no
known finding waives it (the row's ``detail.known_finding``, recorded by the run that judged it; a
``missing`` cell, planned with no row, is never waived); ``PASS WITH WAIVERS`` when every failing
cell is waived; ``NO VERDICT`` when no cell was judged (every one unsupported, skipped or
informational); ``PASS`` otherwise. The terminal, ``matrix.md``, ``matrix.html``, ``matrix.png``
and ``summary.json`` all say the word this module gives. The evidence comes from the rows' own lines, read back from the results
files for the cells listed only (:meth:`reports.results.Results.line_batches`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detconf.vocabulary import INFORMATIONAL
from detconf.reports.planned import MISSING
from detconf.reports.records import EAGER, PASSING, VERDICTS
from detconf.reports.safe import one_line

#: Longest evidence line, in characters (the rest is in the row's ``detail``).
EVIDENCE_CHARS = 240
#: Fields of ``detail`` that say best what happened, most telling first.
_EVIDENCE_FIELDS = ("unsupported", "wrong_result", "reason", "error", "mismatch", "example")
#: Failing or missing cells listed with their evidence (beyond: counted, and the run fails).
ANSWER_MAX_CELLS = 10_000
#: Passing verdicts that judge nothing: the op is not there, the device is not, or mode off
#: only records what it saw. A report whose every cell is one of these has no verdict.
NOT_JUDGED = ("unsupported", "skipped") + INFORMATIONAL

#: The answer words, worst first, with what each means (every place that shows a word explains it).
ANSWER_WORDS: dict[str, str] = {
    "FAIL": "a cell failed (or is missing: planned, no row) and no known finding waives it",
    "PASS WITH WAIVERS": "cells failed, but each one is waived by a known finding the run recorded",
    "NO VERDICT": "nothing was judged: every cell is unsupported, skipped or informational (mode off)",
    "PASS": "every judged cell conforms to what the docs promise",
}


@dataclass(frozen=True)
class Cell:
    """One failing or missing cell, as the answer lists it."""

    row: int  # the row of the merged results (matrix order of :class:`Results`)
    entry: int  # the matrix row (display order)
    source: str
    entry_id: str
    phase: str
    column: str  # the matrix column's label
    verdict: str
    evidence: str
    finding: str  # the known finding that waives it ("" where none)
    rerun: str
    column_code: int = -1  # the matrix column (index into ``Matrix.columns``)


@dataclass(frozen=True)
class Scope:
    """What a report covers, for its title: torch versions, device types, sources, the suite's
    revisions and the days the runs started."""

    torch: list[str]
    devices: list[str]
    sources: list[str]
    suites: list[str]
    dates: list[str]

    @property
    def text(self) -> str:
        """``torch 2.13.0 · cpu · torch-docs, ascend · suite 64930ba · 2026-11-27``"""
        dates = self.dates[0] if len(self.dates) == 1 else (f"{self.dates[0]} to {self.dates[-1]}" if self.dates else "")
        parts = ["torch " + (", ".join(self.torch) or "?"), ", ".join(self.devices) or "no device",
                 ", ".join(self.sources) or "no source", "suite " + (", ".join(self.suites) or "unknown")]
        return one_line(" · ".join(parts + ([dates] if dates else [])))


def scope_of(matrix, results) -> Scope:
    """The scope of a matrix built from ``results``: columns and entries in matrix order, the
    suite revisions and start days of the runs that wrote the rows."""
    def unique(values) -> list[str]:
        return list(dict.fromkeys(str(v) for v in values if v not in (None, "")))

    suites, dates = [], []
    for run in results.runs:
        env = run.get("env") if isinstance(run.get("env"), dict) else {}
        revision = env.get("suite_revision")
        if isinstance(revision, str) and revision:
            suites.append(revision + (" (modified)" if env.get("suite_dirty") else ""))
        started = run.get("started")
        if isinstance(started, str) and len(started) >= 10:
            dates.append(started[:10])
    return Scope(torch=unique(c[0] for c in matrix.columns), devices=unique(c[1] for c in matrix.columns),
                 sources=unique(matrix.entries["source"].tolist()), suites=unique(suites), dates=sorted(set(dates)))


@dataclass
class Answer:
    passed: bool
    counts: dict[str, int]  # verdict -> cells (display order; verdicts with no cell left out)
    cells: list[Cell] = field(default_factory=list)  # failing or missing cells, matrix order
    total: int = 0  # cells judged or planned
    more: int = 0  # failing or missing cells beyond the ANSWER_MAX_CELLS listed (counted as not waived)
    scope: Scope | None = None  # what the report covers (None: not known)

    @property
    def judged(self) -> int:
        """Cells with a verdict that judges something (not unsupported, skipped or informational)."""
        return self.total - sum(n for v, n in self.counts.items() if v in NOT_JUDGED)

    @property
    def word(self) -> str:
        """One of :data:`ANSWER_WORDS`."""
        return answer_word(self.passed, len(self.cells) - self.missing + self.more, self.judged)

    @property
    def meaning(self) -> str:
        return ANSWER_WORDS[self.word]

    @property
    def rest(self) -> str:
        """The headline after its word and colon."""
        return self.headline.split(": ", 1)[1]

    @property
    def title(self) -> str:
        """``detconf PASS · torch 2.13.0 · cpu · …``: what a page or picture is titled."""
        return "detconf " + self.word + (f" · {self.scope.text}" if self.scope is not None else "")

    @property
    def waived(self) -> int:
        return sum(1 for c in self.cells if c.finding)

    @property
    def missing(self) -> int:
        return sum(1 for c in self.cells if c.verdict == MISSING)

    @property
    def headline(self) -> str:
        """``FAIL: 3 of 931 cells failing (1 waived by a known finding), 2 missing``"""
        failing = len(self.cells) - self.missing + self.more
        word = self.word
        if word == "NO VERDICT":
            return (f"NO VERDICT: none of the {self.total} cells was judged "
                    "(every one unsupported, skipped or informational)")
        if word == "PASS":
            rest = self.total - self.judged
            return f"PASS: all {self.judged} judged cells conform" + (
                f" ({rest} more unsupported, skipped or informational)" if rest else "")
        if word == "PASS WITH WAIVERS":
            return (f"PASS WITH WAIVERS: {self.total} cells; the {failing} failing ones are all waived by known findings"
                    if failing > 1 else
                    f"PASS WITH WAIVERS: {self.total} cells; the failing one is waived by a known finding")
        parts = [f"{failing} of {self.total} cells failing" + (f" ({self.waived} waived by a known finding)"
                                                             if self.waived else "")]
        if self.missing:
            parts.append(f"{self.missing} missing (planned, no row)")
        if self.more:
            parts.append(f"the first {len(self.cells)} listed")
        return "FAIL: " + ", ".join(parts)


def answer_word(passed: bool, failing: int, judged: int) -> str:
    """The word for a report or a part of one: ``passed`` (no failing cell left unwaived),
    ``failing`` cells (waived or not, missing included) and ``judged`` cells."""
    if not passed:
        return "FAIL"
    if failing:
        return "PASS WITH WAIVERS"
    return "PASS" if judged else "NO VERDICT"


def rerun_command(row: dict, env: dict) -> str:
    """A command that runs the cell of ``row`` again from the suite's checkout: its test where
    the row names it (a ``missing`` cell names none: its column's cases), with the options of
    the run that planned it which shape the case (source, doc version, device, mode, compile
    setting, runs, Hypothesis profile and seed)."""
    args = ["python", "-m", "pytest", row.get("nodeid") or "conformance", "--source", str(row.get("source"))]
    if env.get("doc_version"):
        args += ["--doc-version", str(env["doc_version"])]
    args += ["--device", str(row.get("device")), "--mode", str(row.get("mode"))]
    if (row.get("compile") or EAGER) != EAGER:
        args += ["--compile", str(row["compile"])]
    if env.get("runs") is not None:
        args += ["--runs", str(env["runs"])]
    if env.get("hypothesis_profile"):
        args += ["--hypothesis-profile", str(env["hypothesis_profile"])]
    if env.get("hypothesis_seed") is not None:
        args += ["--hypothesis-seed", str(env["hypothesis_seed"])]
    return one_line(shlex.join(args))


def _shorten(text: str, width: int = EVIDENCE_CHARS) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def evidence_line(row: dict, detail: dict | None) -> str:
    """What was expected, what was observed, and the most telling field of ``detail``."""
    if row.get("verdict") == MISSING:
        return "planned, but the run wrote no row for it (it crashed or was cut short)"
    parts = []
    expected, observed = row.get("expected"), row.get("observed")
    if expected or observed:
        parts.append(f"expected {expected or '?'}, observed {observed or '?'}")
    for name in _EVIDENCE_FIELDS:
        value = (detail or {}).get(name)
        if value not in (None, "", [], {}):
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
            parts.append(f"{name}: {text}")
            break
    return _shorten(one_line("; ".join(parts)))


def read_details(results, rows: list[int]) -> dict[int, dict]:
    """``row -> parsed line`` of ``rows`` (rows of ``results``; ``missing`` rows have no line and
    are left out)."""
    if not rows:
        return {}
    starts = results.column("start").to_numpy()
    readable = [r for r in rows if starts[r] >= 0]
    out: dict[int, dict] = {}
    texts = (t for batch in results.line_batches(readable) for t in batch)
    for r, text in zip(readable, texts):
        try:
            out[r] = json.loads(text)
        except ValueError:  # pragma: no cover - every line was checked when it was read
            out[r] = {}
    return out


def cell_facts(results, rows: list[int], details: dict[int, dict]) -> dict[int, tuple[str, str, str]]:
    """``row -> (evidence, finding, rerun)`` for ``rows`` of ``results``."""
    names = ("verdict", "expected", "observed", "nodeid", "source", "device", "mode", "compile", "run_id")
    columns = {n: results.column(n) for n in names}
    envs = {r.get("run_id"): (r.get("env") or {}) for r in results.runs}
    out = {}
    for r in rows:
        row = {n: columns[n][r].as_py() for n in names}
        rec = details.get(r) or {}
        detail = rec.get("detail") if isinstance(rec.get("detail"), dict) else None
        finding = (detail or {}).get("known_finding")
        finding = _shorten(one_line(finding)) if isinstance(finding, str) and row["verdict"] != MISSING else ""
        out[r] = (evidence_line(row, detail), finding, rerun_command(row, envs.get(row["run_id"], {})))
    return out


def answer_for(matrix, results) -> Answer:
    """The answer for a matrix (:class:`reports.matrix.Matrix`) built from ``results``."""
    codes = matrix.codes
    verdict_names = list(VERDICTS)
    per_code = np.bincount(codes.ravel(), minlength=len(verdict_names) + 1)[: len(verdict_names)]
    counts = {v: int(n) for v, n in zip(verdict_names, per_code.tolist()) if n}
    verdict = results.column("verdict")
    failing = np.flatnonzero(~np.asarray(pc.is_in(verdict, value_set=pa.array(list(PASSING))), dtype=bool))
    display = matrix.display_rank(results.entry_codes)
    failing = failing[np.lexsort((results.column_codes[failing], display[failing]))]
    more = max(0, len(failing) - ANSWER_MAX_CELLS)
    failing = failing[:ANSWER_MAX_CELLS].tolist()
    verdicts = verdict.take(pa.array(failing, type=pa.int64())).to_pylist()
    details = read_details(results, failing)
    facts = cell_facts(results, failing, details)
    entries = matrix.entries
    labels = matrix.labels
    cells = []
    for r, v in zip(failing, verdicts):
        e = int(display[r])
        evidence, finding, rerun = facts[r]
        cells.append(Cell(row=r, entry=e, source=str(entries["source"].iloc[e]), entry_id=str(entries["entry_id"].iloc[e]),
                          phase=str(entries["phase"].iloc[e]), column=labels[int(results.column_codes[r])],
                          verdict=str(v), evidence=evidence, finding=finding, rerun=rerun,
                          column_code=int(results.column_codes[r])))
    passed = not more and all(c.finding for c in cells)
    return Answer(passed=passed, counts=counts, cells=cells, total=int(per_code.sum()), more=more,
                  scope=scope_of(matrix, results))


def part_answers(answer: Answer, matrix) -> list[dict]:
    """One answer per (torch version, device) of the matrix, in column order: its word, cells,
    judged, failing and waived cells. Failing cells beyond those the answer lists count as not
    waived."""
    waived: dict[int, int] = {}
    for c in answer.cells:
        if c.finding:
            waived[c.column_code] = waived.get(c.column_code, 0) + 1
    parts: dict[tuple[str, str], dict] = {}
    for j, count in enumerate(matrix.column_counts()):
        part = parts.setdefault((count["torch_version"], count["device"]), {
            "torch_version": count["torch_version"], "device": count["device"], "cells": 0, "judged": 0,
            "failing": 0, "waived": 0})
        part["cells"] += count["total"]
        part["judged"] += count["total"] - sum(count["counts"][v] for v in NOT_JUDGED)
        part["failing"] += count["failing"]
        part["waived"] += waived.get(j, 0)
    for part in parts.values():
        part["word"] = answer_word(part["failing"] == part["waived"], part["failing"], part["judged"])
    return list(parts.values())


def cell_name(cell: Cell, several_sources: bool = True) -> str:
    """``put_(accumulate=False) (torch-docs) <backward-only>``"""
    return (cell.entry_id + (f" ({cell.source})" if several_sources else "")
            + (f" <{cell.phase}>" if cell.phase != "program" else ""))


def terminal_lines(answer: Answer, several_sources: bool, limit: int = 50) -> list[str]:
    """The answer as the terminal shows it: the headline, counts per verdict, then each failing
    or missing cell (the first ``limit``) with its evidence, finding and rerun command."""
    lines = [f"detconf: {answer.headline}",
             f"  {answer.word} = {answer.meaning}" + (f" · {answer.scope.text}" if answer.scope else ""),
             "verdicts: " + " · ".join(f"{v} {n}" for v, n in answer.counts.items())]
    lines += [f"  {v}: {VERDICTS[v]}" for v in answer.counts]
    for cell in answer.cells[:limit]:
        mark = "~" if cell.finding else "✗"
        lines.append(f"  {mark} {cell_name(cell, several_sources)} [{cell.column}]: {cell.verdict} — {cell.evidence}")
        if cell.finding:
            lines.append(f"      ↳ known finding: {cell.finding}")
        lines.append(f"      ↳ rerun: {cell.rerun}")
    if len(answer.cells) + answer.more > limit:
        lines.append(f"  … {len(answer.cells) + answer.more - limit} more failing or missing cells (see matrix.md)")
    return lines
