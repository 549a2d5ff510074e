"""Positive-control sensitivity: how often did runs differ with determinism off?

Reads the ``--mode off`` rows of results files (verdicts ``nondeterminism-seen`` /
``no-difference-seen``) and tabulates, per entry and device, the fraction of
examples whose runs differed, with the runs per example and the largest input's size
(``detail.max_numel``: the stress tier's examples are the large ones). A "conforms" cell
means more where the same entry showed nondeterminism with the mode off: the test could see
it. The headline says, per device, how many of the entries documented to throw there did.

    python -m detconf.reports sensitivity RESULTS.jsonl [MORE ...] [--out DIR]

writes ``sensitivity.md``, ``sensitivity.csv`` and ``sensitivity.png`` (per device, the entries
whose runs differed; default: print Markdown).
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from detconf.reports.load import load
from detconf.reports.output import ArgumentParser, check_out_dir, emit, write_files, write_picture
from detconf.reports.records import EAGER, ResultsError
from detconf.reports.safe import csv_table, markdown_frame, md_cell, terminal

SEEN, NOT_SEEN = "nondeterminism-seen", "no-difference-seen"


def sensitivity_table(paths) -> pd.DataFrame:
    """One row per ``--mode off`` cell; a ``compile`` column where some cell is not eager."""
    names = ("source", "entry_id", "promise", "devices", "device", "compile", "torch_version", "verdict",
             "examples_differing", "examples_not_differing", "runs", "max_numel")
    results = load(paths, columns=("mode", *names))
    off = np.flatnonzero(np.asarray(pc.equal(results.column("mode"), "off"), dtype=bool))
    columns = {name: results.column(name).take(off).to_pylist() for name in names}
    shows_compile = any(c != EAGER for c in columns["compile"])
    rows = []
    for source, entry_id, promise, devices, device, compile_, torch_version, verdict, seen, quiet, runs, numel in zip(
            *columns.values()):
        seen, quiet = seen or 0, quiet or 0
        judged = seen + quiet
        row = {
            "source": source, "entry_id": entry_id, "promise": promise,
            "documented_devices": ",".join(devices or []) or "all",
            "device": device, "torch_version": torch_version, "verdict": verdict,
            "examples_judged": judged, "examples_differing": seen,
            "fraction_differing": round(seen / judged, 3) if judged else None,
            "runs": runs, "largest_input": numel,
        }
        if shows_compile:
            row = dict(list(row.items())[:5] + [("compile", compile_)] + list(row.items())[5:])
        rows.append(row)
    if not rows:
        raise ResultsError(f"{', '.join(map(str, paths))}: no --mode off rows (run the suite with --mode off)")
    frame = pd.DataFrame(rows)
    for name in ("runs", "largest_input"):  # integers, or empty where a row does not say
        frame[name] = frame[name].astype("Int64")
    return frame.sort_values(["source", "device", "fraction_differing", "entry_id"],
                             ascending=[True, True, False, True], na_position="last").reset_index(drop=True)


def headline(frame: pd.DataFrame) -> list[str]:
    """Per device: share of entries documented for it whose nondeterminism the control exposed."""
    lines = []
    for device, group in frame.groupby("device", sort=True):
        named = group[group["documented_devices"].str.split(",").apply(lambda ds: device in ds or ds == ["all"])]
        exposed = int((named["examples_differing"] > 0).sum())
        throws = named[named["promise"] == "raises"]
        lines.append(f"{device}: {exposed}/{len(named)} entries documented for {device} showed run-to-run "
                     f"differences with determinism off ({int((throws['examples_differing'] > 0).sum())}/{len(throws)} "
                     f"of those documented to throw); {int((group['examples_differing'] > 0).sum())}/{len(group)} overall")
    return lines


def chart_spec(frame: pd.DataFrame) -> dict:
    """:func:`reports.picture.draw_bars` data: per device (and torch version, compile setting),
    the entries whose runs differed with determinism off, and those where none did."""
    keys = ["device", "torch_version"] + (["compile"] if "compile" in frame.columns else [])
    rows, differed, quiet, notes = [], [], [], []
    for key, group in frame.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        seen = int((group["examples_differing"] > 0).sum())
        judged = int((group["examples_judged"] > 0).sum())
        throws = group[group["promise"] == "raises"]
        rows.append(" · ".join(str(k) for k in key))
        differed.append(seen)
        quiet.append(judged - seen)
        notes.append(f"{seen}/{judged} entries differed ({int((throws['examples_differing'] > 0).sum())}/"
                     f"{len(throws)} documented to throw)")
    return {
        "rows": rows,
        "segments": [("runs differed (nondeterminism seen)", "#1e88e5", differed),
                     ("no difference seen", "#bbdefb", quiet)],
        "notes": notes,
        "title": "Positive control (--mode off): entries whose runs differed, per device",
        "xlabel": "entries judged with determinism off",
        "share": False,
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m detconf.reports sensitivity", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out", help="write sensitivity.md and sensitivity.csv here")
    try:
        args = parser.parse_args(argv)
        if args.out:
            check_out_dir(args.out)
        frame = sensitivity_table(args.results)
        markdown = "\n".join(["# Positive-control sensitivity (`--mode off`)", "",
                              *(["![sensitivity per device](sensitivity.png)", ""] if args.out else []),
                              *[f"- {md_cell(line)}" for line in headline(frame)],
                              "", markdown_frame(frame.astype(object).where(frame.notna(), "")), ""])
        if not args.out:
            emit(terminal(markdown))
            return 0
        out = write_files(args.out, {"sensitivity.md": markdown,
                                     "sensitivity.csv": csv_table(frame)})
        from detconf.reports.picture import draw_bars

        write_picture(out, "sensitivity.png", draw_bars, chart_spec(frame))
        emit(terminal(f"wrote sensitivity.md, sensitivity.csv, sensitivity.png to {out}"))
        return 0
    except ResultsError as exc:
        print(f"reports: error: {terminal(str(exc))}", file=sys.stderr)
        return 2
