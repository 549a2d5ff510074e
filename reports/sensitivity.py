"""Positive-control sensitivity: how often did runs differ with determinism off?

Reads the ``--mode off`` rows of results files (verdicts ``nondeterminism-seen`` /
``no-difference-seen``) and tabulates, per entry and device, the fraction of
examples whose runs differed. A "conforms" cell means more where the same
entry showed nondeterminism with the mode off: the test could see it.

    python -m reports sensitivity RESULTS.jsonl [MORE ...] [--out DIR]

writes ``sensitivity.md`` and ``sensitivity.csv`` (default: print Markdown).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

from reports.load import ResultsError, load
from reports.safe import csv_frame, md_cell, md_frame, terminal

SEEN, NOT_SEEN = "nondeterminism-seen", "no-difference-seen"


def sensitivity_table(paths) -> pd.DataFrame:
    results = load(paths)
    rows = []
    for rec in results.records:
        if rec.get("mode") != "off":
            continue
        per_example = (rec.get("detail") or {}).get("verdicts_per_example") or {}
        seen, quiet = int(per_example.get(SEEN, 0)), int(per_example.get(NOT_SEEN, 0))
        judged = seen + quiet
        rows.append({
            "source": rec["source"], "entry_id": rec["entry_id"], "promise": rec["promise"],
            "documented_devices": ",".join(rec.get("devices") or []) or "all",
            "device": rec["device"], "torch_version": rec["torch_version"], "verdict": rec["verdict"],
            "examples_judged": judged, "examples_differing": seen,
            "fraction_differing": round(seen / judged, 3) if judged else None,
        })
    if not rows:
        raise ResultsError(f"{', '.join(map(str, paths))}: no --mode off rows (run the suite with --mode off)")
    frame = pd.DataFrame(rows)
    return frame.sort_values(["source", "device", "fraction_differing", "entry_id"],
                             ascending=[True, True, False, True], na_position="last").reset_index(drop=True)


def headline(frame: pd.DataFrame) -> list[str]:
    """Per device: share of entries documented for it whose nondeterminism the control exposed."""
    lines = []
    for device, group in frame.groupby("device", sort=True):
        named = group[group["documented_devices"].str.split(",").apply(lambda ds: device in ds or ds == ["all"])]
        exposed = int((named["examples_differing"] > 0).sum())
        lines.append(f"{device}: {exposed}/{len(named)} entries documented for {device} showed run-to-run "
                     f"differences with determinism off; {int((group['examples_differing'] > 0).sum())}/{len(group)} overall")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports sensitivity", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out", help="write sensitivity.md and sensitivity.csv here")
    args = parser.parse_args(argv)
    try:
        frame = sensitivity_table(args.results)
    except ResultsError as exc:
        print(f"reports: error: {exc}", file=sys.stderr)
        return 2
    markdown = "\n".join(["# Positive-control sensitivity (`--mode off`)", "", *[f"- {md_cell(l)}" for l in headline(frame)],
                          "", md_frame(frame).to_markdown(index=False, disable_numparse=True), ""])
    if not args.out:
        print(terminal(markdown))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("sensitivity.md", markdown), ("sensitivity.csv", csv_frame(frame).to_csv(index=False))):
        with tempfile.NamedTemporaryFile("w", dir=out, delete=False, encoding="utf-8") as tmp:
            tmp.write(text)
        os.replace(tmp.name, out / name)
    print(f"wrote sensitivity.md, sensitivity.csv to {out}")
    return 0
