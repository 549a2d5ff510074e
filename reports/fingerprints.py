"""Cross-GPU fingerprints: did two GPUs give the same bytes, example by example?

    python -m detconf.reports fingerprints A.jsonl B.jsonl [--out DIR]

Two results files, typically of the same suite and torch on two GPU models (the ``ci`` profile
draws the same examples everywhere), are matched cell by cell: (source, doc version, entry,
phase, device type, mode, compile setting); the latest row of a cell in each file counts. A
cell is compared where it is a *deterministic cell* in both files -- mode ``error`` or
``warn_only``, verdict ``conforms``, and a promise of determinism (not a documented alert:
``expected`` ``raises`` or ``warns``, whose ops may run their nondeterministic kernels) -- and
both rows carry per-example fingerprints (``detail.fingerprints``: example index -> SHA-256 of
the example's output bytes) for the same examples. Each cell is then

- ``same``: every example gave the same bytes on both;
- ``differs``: some did not (how many is given; ``detail.fingerprint``, the fingerprint of the
  case, is compared as well);
- ``not-comparable``: the reason is given (mode off, a verdict other than ``conforms``, a
  documented alert, no per-example fingerprints, other examples);
- ``only-in-a`` / ``only-in-b``: the other file has no such cell.

Nothing here is a promise of the docs (determinism is promised run to run on one device), so
the exit status is 0 whatever the bytes; bad input is one line and exit status 2.

Writes ``fingerprints.md`` and ``fingerprints.csv`` to ``--out`` (without it the Markdown goes
to standard output), rows sorted (``differs`` first), byte-stable for the same input, and one
summary line on standard output.

The files are read line by line here, not with :func:`reports.load.load`: the CUDA checks of
the reproducibility notes (cuBLAS workspace) write ``detail.fingerprints`` as a *list* of run
fingerprints, which that reader rejects; here such a row simply has no per-example fingerprints.
They are opened and their lines read by the reports' one reader (:mod:`reports.readfile`: a
pipe or a device is refused unread, a line is at most 16 MiB of UTF-8 JSON), and every other
field is checked as the other reports check it (:func:`reports.records.check_record`, device
names, rows after a run's end record). A and B must be two runs: the same file twice, or a
cell whose rows in both are one run's (a copy), is refused rather than reported as agreement.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from detconf.vocabulary import COMPILERS, DISPLAY_ORDER, MODES, PHASES
from detconf.reports.output import ArgumentParser, check_out_dir, emit, write_files
from detconf.reports.readfile import BadLine, Unreadable, json_lines, open_regular
from detconf.reports.records import (
    DEFAULT_PHASE, EAGER, NAME_FIELDS, ResultsError, after_end_problem, check_record, name_problem, second_end_problem,
    without_run_fingerprints,
)
from detconf.reports.safe import csv_table, markdown_frame, md_cell, terminal

#: A cell: what must agree for two rows to describe the same test.
CELL = ("source", "doc_version", "entry_id", "phase", "device", "mode", "compile")
DETERMINISTIC_MODES = ("error", "warn_only")
#: Expectations that promise an alert, not determinism.
ALERTS = ("raises", "warns")
#: How a line that is not JSON is worded ({}: the decoder's message).
NOT_JSON = "not JSON (not a results file?): {}"
STATUSES = ("differs", "same", "not-comparable", "only-in-a", "only-in-b")
COLUMNS = ("status", "source", "doc_version", "entry_id", "phase", "device", "mode", "compile", "verdict_a",
           "verdict_b", "expected", "examples_compared", "examples_differing", "case_fingerprint",
           "device_name_a", "device_name_b", "reason")


@dataclass
class Row:
    cell: tuple
    verdict: str
    expected: str | None
    device_name: str | None
    fingerprints: dict | None  # example index -> hash; None where the row has none (or not per example)
    fingerprint: str | None  # the case's fingerprint (``detail.fingerprint``)
    torch_version: str
    run_id: str = ""


@dataclass
class ResultsFile:
    path: str
    rows: dict[tuple, Row] = field(default_factory=dict)
    device_names: dict[str, set] = field(default_factory=dict)  # device type -> models seen
    torch_versions: set = field(default_factory=set)


def _fail(path: str, line: int | None, problem: str) -> ResultsError:
    return ResultsError(f"{path}:{line}: {problem}" if line is not None else f"{path}: {problem}")


def read(path: str) -> ResultsFile:
    """The result rows of a results file, the latest row of each cell; one-line errors. The file
    is opened and its lines read and checked by the reports' one reader (:mod:`reports.readfile`:
    a regular file, lines of at most 16 MiB of UTF-8 JSON); rows after their run's end record and
    a second end record are refused as :func:`reports.load.load` refuses them."""
    out = ResultsFile(path)
    p = Path(path)
    if p.is_dir():
        raise _fail(path, None, "is a directory, not a results file")
    run_devices: dict[str, dict[tuple, str]] = {}  # run_id -> (device, index) -> model
    end_lines: dict[str, int] = {}  # run_id -> line of its end record
    after_end: dict[str, list[int]] = {}  # run_id -> [first line, rows, end line]
    try:
        f = open_regular(p)
    except Unreadable as exc:
        raise _fail(path, None, f"cannot read it ({exc.problem})") from None
    try:
        with f:
            for number, rec in json_lines(f, not_json=NOT_JSON):
                kind, problem = check_record(without_run_fingerprints(rec))
                if problem:
                    raise _fail(path, number, problem)
                if kind == "run":
                    devices = rec["env"].get("devices") if isinstance(rec["env"].get("devices"), list) else []
                    run_devices[rec["run_id"]] = {
                        (d.get("device"), d.get("device_index")): d.get("device_name")
                        for d in devices if isinstance(d, dict) and d.get("device_name")}
                elif kind == "end":
                    if rec["run_id"] in end_lines:
                        raise _fail(path, number, second_end_problem(rec["run_id"], end_lines[rec["run_id"]]))
                    end_lines[rec["run_id"]] = number
                elif kind == "result":
                    if rec["run_id"] not in run_devices:
                        raise _fail(path, number, f"result row of run {rec['run_id']!r} comes before any run "
                                                  "record with that run_id")
                    row = _row(rec, run_devices[rec["run_id"]], path, number)
                    if rec["run_id"] in end_lines:
                        after_end.setdefault(rec["run_id"], [number, 0, end_lines[rec["run_id"]]])[1] += 1
                    out.rows[row.cell] = row  # a later row of a cell wins
    except BadLine as exc:
        raise _fail(path, exc.line, exc.problem) from None
    except OSError as exc:
        raise _fail(path, None, f"cannot read it ({exc.strerror or exc})") from None
    if after_end:
        run_id, (first, count, end) = min(after_end.items(), key=lambda item: item[1][0])
        raise _fail(path, first, after_end_problem(run_id, count, end))
    if not out.rows:
        raise _fail(path, None, "no result records (not a results file?)")
    for row in out.rows.values():
        out.torch_versions.add(row.torch_version)
        if row.device_name:
            out.device_names.setdefault(row.cell[4], set()).add(row.device_name)
    return out


def _row(rec: dict, devices: dict[tuple, str], path: str, number: int) -> Row:
    values = {name: rec.get(name) for name in CELL}
    values["phase"] = values["phase"] or DEFAULT_PHASE
    values["compile"] = values["compile"] or EAGER
    for name in ("entry_id", "source", "device", "mode", "verdict"):
        if not rec[name]:
            raise _fail(path, number, f"field {name!r} is empty")
    for name in NAME_FIELDS:
        problem = name_problem(name, rec[name])
        if problem:
            raise _fail(path, number, problem)
    for name, known in (("verdict", DISPLAY_ORDER), ("mode", MODES), ("phase", PHASES), ("compile", COMPILERS)):
        value = rec["verdict"] if name == "verdict" else values[name]
        if value not in known:
            raise _fail(path, number, f"unknown {name} {value!r}")
    detail = rec.get("detail") or {}
    prints = detail.get("fingerprints")
    prints = {str(k): v for k, v in prints.items()} if isinstance(prints, dict) and prints else None
    name = rec.get("device_name") or devices.get((rec["device"], rec.get("device_index"))) \
        or devices.get((rec["device"], None)) or next((m for (d, _), m in sorted(devices.items(), key=str)
                                                       if d == rec["device"]), None)
    case = detail.get("fingerprint")
    return Row(tuple(values[n] for n in CELL), rec["verdict"], rec.get("expected"), name, prints,
               case if isinstance(case, str) else None, rec["torch_version"], rec["run_id"])


def same_run_problem(a: ResultsFile, b: ResultsFile) -> str | None:
    """Why A and B cannot be compared: they are one file, or a cell's rows in both are the same
    run's (a copy of a file): a run compared with itself gives the same bytes whatever the GPUs."""
    try:
        same_file = os.path.samefile(a.path, b.path)
    except OSError:
        same_file = False
    if same_file:
        return (f"{b.path}: the same file as A ({a.path}): fingerprints compares the runs of two GPUs; give two "
                "different results files")
    shared = sorted({ra.run_id for cell, ra in a.rows.items() if cell in b.rows and ra.run_id == b.rows[cell].run_id})
    if shared:
        return (f"{b.path}: run {shared[0]!r} is A's too ({a.path}): its rows would be compared with themselves "
                "(B a copy of A?); give the runs of two GPUs")
    return None


def _example_order(key: str) -> tuple:
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def _examples(a: Row, b: Row) -> tuple[list[str], list[str]] | None:
    """(examples, those that differ) where both rows fingerprint the same examples; else None."""
    if a.fingerprints is None or b.fingerprints is None or a.fingerprints.keys() != b.fingerprints.keys():
        return None
    keys = sorted(a.fingerprints, key=_example_order)
    return keys, [k for k in keys if a.fingerprints[k] != b.fingerprints[k]]


def compare_cell(a: Row, b: Row) -> dict:
    """The status of one cell present in both files, with its counts and reason. The example
    counts are filled wherever both rows fingerprint the same examples, also for a cell that is
    not compared (for information: its bytes are not promised to repeat)."""
    examples = _examples(a, b)
    out = {"examples_compared": len(examples[0]) if examples else None,
           "examples_differing": len(examples[1]) if examples else None,
           "case_fingerprint": "" if a.fingerprint is None or b.fingerprint is None
           else ("same" if a.fingerprint == b.fingerprint else "differs"),
           "expected": a.expected if a.expected == b.expected else f"{a.expected} / {b.expected}"}
    mode = a.cell[5]
    if mode not in DETERMINISTIC_MODES:
        return {**out, "status": "not-comparable", "reason": f"mode {mode}: no determinism promised"}
    if a.verdict != "conforms" or b.verdict != "conforms":
        return {**out, "status": "not-comparable", "reason": "verdict is not conforms on both"}
    alert = [e for e in (a.expected, b.expected) if e in ALERTS]
    if alert:
        return {**out, "status": "not-comparable",
                "reason": f"expected {alert[0]}: a documented alert, not determinism (the op may run its "
                          "nondeterministic kernel)"}
    if a.fingerprints is None or b.fingerprints is None:
        which = " and ".join(s for s, r in (("A", a), ("B", b)) if r.fingerprints is None)
        return {**out, "status": "not-comparable", "reason": f"no per-example fingerprints in {which}"}
    if examples is None:
        return {**out, "status": "not-comparable",
                "reason": f"different examples: {len(a.fingerprints)} in A, {len(b.fingerprints)} in B"}
    differing = examples[1]
    if differing:
        return {**out, "status": "differs",
                "reason": f"examples {', '.join(differing[:12])}{' ...' if len(differing) > 12 else ''} differ"}
    if out["case_fingerprint"] == "differs":
        return {**out, "status": "differs", "reason": "every example the same, the case fingerprint differs"}
    return {**out, "status": "same", "reason": ""}


def compare(a: ResultsFile, b: ResultsFile) -> pd.DataFrame:
    """One row per cell of either file, in a fixed order (status, then the cell)."""
    rows = []
    for cell in set(a.rows) | set(b.rows):
        ra, rb = a.rows.get(cell), b.rows.get(cell)
        base = dict(zip(CELL, cell))
        if ra is not None and rb is not None:
            result = compare_cell(ra, rb)
        else:
            only = "a" if rb is None else "b"
            result = {"status": f"only-in-{only}", "expected": (ra or rb).expected, "examples_compared": None,
                      "examples_differing": None, "case_fingerprint": "",
                      "reason": f"no such cell in {'B' if only == 'a' else 'A'}"}
        rows.append({**base, **result, "verdict_a": ra.verdict if ra else "", "verdict_b": rb.verdict if rb else "",
                     "device_name_a": (ra.device_name or "") if ra else "",
                     "device_name_b": (rb.device_name or "") if rb else ""})
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    if frame.empty:
        return frame
    frame["doc_version"] = frame["doc_version"].fillna("")
    frame["expected"] = frame["expected"].fillna("")
    order = frame["status"].map(STATUSES.index)
    frame = frame.assign(_order=order).sort_values(["_order", *CELL], kind="mergesort").drop(columns="_order")
    for name in ("examples_compared", "examples_differing"):
        frame[name] = frame[name].astype("Int64")
    return frame.reset_index(drop=True)


def _names(f: ResultsFile, other: ResultsFile | None = None) -> str:
    """The device models of a file: of the device types both files have, where they share one."""
    types = set(f.device_names) & set(other.device_names) if other is not None else set()
    models = sorted({m for t, names in f.device_names.items() if not types or t in types for m in names if m})
    return ", ".join(models) or "device names not recorded"


def summary(a: ResultsFile, b: ResultsFile, frame: pd.DataFrame) -> str:
    counts = frame["status"].value_counts()
    differing_examples = int(frame.loc[frame["status"] == "differs", "examples_differing"].fillna(0).sum())
    deterministic_error = frame[(frame["status"].isin(("same", "differs"))) & (frame["mode"] == "error")]
    line = (f"fingerprints: {int(counts.get('same', 0))} deterministic cells gave the same bytes, "
            f"{int(counts.get('differs', 0))} differ ({differing_examples} examples); "
            f"{int(counts.get('not-comparable', 0))} cells not comparable, {int(counts.get('only-in-a', 0))} only in A, "
            f"{int(counts.get('only-in-b', 0))} only in B; mode error: {int((deterministic_error['status'] == 'same').sum())} "
            f"same, {int((deterministic_error['status'] == 'differs').sum())} differ "
            f"(A: {_names(a, b)}; B: {_names(b, a)})")
    shared = {d for d in set(a.device_names) & set(b.device_names) if d != "cpu"}
    if any(a.device_names[d] == b.device_names[d] for d in shared):
        line += " -- note: the same device model in both files"
    return line


def markdown(a: ResultsFile, b: ResultsFile, frame: pd.DataFrame, line: str) -> str:
    counts = frame["status"].value_counts()
    printed = frame[frame["examples_compared"].notna()]
    by_mode = [f"{mode} {len(group)} ({int((group['examples_differing'] > 0).sum())} differ)"
               for mode, group in sorted(printed.groupby("mode"), key=lambda item: MODES.index(item[0]))]
    reasons = frame.loc[frame["status"] == "not-comparable", "reason"].value_counts()
    lines = [
        "# Cross-GPU fingerprints",
        "",
        f"- A: `{md_cell(Path(a.path).name)}`: {md_cell(_names(a))}; torch {md_cell(', '.join(sorted(a.torch_versions)))}",
        f"- B: `{md_cell(Path(b.path).name)}`: {md_cell(_names(b))}; torch {md_cell(', '.join(sorted(b.torch_versions)))}",
        "",
        "A deterministic cell (mode error or warn_only, verdict conforms on both, a promise of determinism) "
        "is compared example by example where both rows carry per-example fingerprints.",
        "",
        *[f"- {status}: {int(counts.get(status, 0))}" for status in STATUSES],
        *[f"  - not comparable, {md_cell(reason)}: {int(n)}" for reason, n in sorted(reasons.items())],
        "",
        f"Cells whose rows fingerprint the same examples on both, whatever their verdict: {len(printed)} "
        f"({int((printed['examples_differing'] > 0).sum())} with differing bytes); by mode: {', '.join(by_mode) or 'none'}.",
        "",
        md_cell(line),
        "",
        markdown_frame(frame.astype(object).where(frame.notna(), "")),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m detconf.reports fingerprints", description=__doc__.splitlines()[0])
    parser.add_argument("a", help="results file of one GPU (A)")
    parser.add_argument("b", help="results file of the other GPU (B)")
    parser.add_argument("--out", help="write fingerprints.md and fingerprints.csv here")
    try:
        args = parser.parse_args(argv)
        if args.out:
            check_out_dir(args.out)
        a, b = read(args.a), read(args.b)
        problem = same_run_problem(a, b)
        if problem:
            raise ResultsError(problem)
        frame = compare(a, b)
        line = summary(a, b, frame)
        text = markdown(a, b, frame, line)
        if not args.out:
            emit(terminal(text))
            return 0
        out = write_files(args.out, {"fingerprints.md": text, "fingerprints.csv": csv_table(frame)})
        emit(terminal(f"{line}\nwrote fingerprints.md, fingerprints.csv to {out}"))
        return 0
    except ResultsError as exc:
        print(f"reports: error: {terminal(' '.join(str(exc).split()))}", file=sys.stderr)
        return 2
