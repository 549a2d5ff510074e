"""Sensitivity: how often did runs differ with determinism off, with one thread, across processes?

Reads the ``--mode off`` rows of results files (verdicts ``nondeterminism-seen`` /
``no-difference-seen``) and tabulates, per entry and device, the fraction of
examples whose runs differed, with the runs per example and the largest input's size
(``detail.max_numel``: the stress tier's examples are the large ones). A "conforms" cell
means more where the same entry showed nondeterminism with the mode off: the test could see
it. The headline says, per device, how many of the entries documented to throw there did.

Rows of the perturbation tier (``--perturb``, ``detail.tier`` ``perturb``) also carry what the
docs promise neither way (:func:`perturbation_table`): whether the bytes changed when an example
ran on one thread instead of the process's thread count (``detail.sensitivity.threads``), and,
with the mode off, whether fresh processes gave the same bytes (``detail.across_processes``).
They are figures, never verdicts: the exit status is 0 whatever they say.

    python -m detconf.reports sensitivity RESULTS.jsonl [MORE ...] [--out DIR]

writes ``sensitivity.md``, ``sensitivity.csv`` and ``sensitivity.png`` (per device, the entries
whose runs differed) where there are ``--mode off`` rows, and ``perturbation-sensitivity.md`` and
``perturbation-sensitivity.csv`` where there are perturbation-tier rows (default: print Markdown).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from detconf.reports.load import load
from detconf.reports.planned import MISSING
from detconf.reports.output import ArgumentParser, check_out_dir, emit, write_files, write_picture
from detconf.reports.readfile import BadLine, Unreadable, json_lines, open_regular
from detconf.reports.records import DEFAULT_PHASE, EAGER, ResultsError, check_record, without_run_fingerprints
from detconf.reports.safe import csv_table, markdown_frame, md_cell, terminal

SEEN, NOT_SEEN = "nondeterminism-seen", "no-difference-seen"


def sensitivity_table(paths) -> pd.DataFrame:
    """One row per ``--mode off`` cell; a ``compile`` column where some cell is not eager."""
    frame = _off_table(paths)
    if frame is None:
        raise ResultsError(f"{', '.join(map(str, paths))}: no --mode off rows (run the suite with --mode off)")
    return frame


def _off_table(paths) -> pd.DataFrame | None:
    """:func:`sensitivity_table`, or None where no file holds a ``--mode off`` row."""
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
        return None
    frame = pd.DataFrame(rows)
    for name in ("runs", "largest_input"):  # integers, or empty where a row does not say
        frame[name] = frame[name].astype("Int64")
    return frame.sort_values(["source", "device", "fraction_differing", "entry_id"],
                             ascending=[True, True, False, True], na_position="last").reset_index(drop=True)


#: What identifies a cell (the latest row of a cell wins, as in every report).
_CELL = ("source", "doc_version", "entry_id", "phase", "device", "mode", "compile")
PERTURBATION_COLUMNS = ("source", "entry_id", "device", "compile", "mode", "torch_version", "verdict", "threads",
                        "one_thread", "one_thread_compared", "one_thread_differing", "across_processes",
                        "across_compared", "across_differing", "processes")


def _perturbed_rows(path: str) -> list[dict]:
    """The perturbation-tier result rows of one results file (every row checked as the other
    reports check it; one-line errors)."""
    try:
        f = open_regular(Path(path))
    except Unreadable as exc:
        raise ResultsError(f"{path}: cannot read it ({exc.problem})") from None
    rows = []
    try:
        with f:
            for number, rec in json_lines(f):
                kind, problem = check_record(without_run_fingerprints(rec))
                if problem:
                    raise ResultsError(f"{path}:{number}: {problem}")
                if kind == "result" and isinstance(rec.get("detail"), dict) and rec["detail"].get("tier") == "perturb":
                    rows.append(_perturbed_row(rec, path, number))
    except BadLine as exc:
        raise ResultsError(f"{path}:{exc.line}: {exc.problem}") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return rows


def _count(value, what: str, path: str, number: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ResultsError(f"{path}:{number}: field {what!r} must be a count, not {value!r}")
    return value


def _same_or_differs(compared: int | None, differing: int | None) -> str:
    if not compared:
        return "not measured"
    return "differs" if differing else "same"


def _perturbed_row(rec: dict, path: str, number: int) -> dict:
    detail = rec["detail"]
    sensitivity = detail.get("sensitivity") if isinstance(detail.get("sensitivity"), dict) else {}
    threads = sensitivity.get("threads") if isinstance(sensitivity.get("threads"), dict) else {}
    across = detail.get("across_processes") if isinstance(detail.get("across_processes"), dict) else {}
    processes = detail.get("processes") if isinstance(detail.get("processes"), list) else []
    pool = {p.get("threads") for p in processes if isinstance(p, dict)}
    one_compared = _count(threads.get("compared"), "detail.sensitivity.threads.compared", path, number)
    one_differing = _count(threads.get("differing"), "detail.sensitivity.threads.differing", path, number)
    off = rec.get("mode") == "off"
    across_compared = _count(across.get("compared"), "detail.across_processes.compared", path, number)
    across_differing = _count(across.get("differing"), "detail.across_processes.differing", path, number)
    return {
        "cell": tuple(rec.get(name) or (DEFAULT_PHASE if name == "phase" else EAGER if name == "compile" else "")
                      for name in _CELL),
        "source": rec["source"], "entry_id": rec["entry_id"], "device": rec["device"],
        "compile": rec.get("compile") or EAGER, "mode": rec["mode"], "torch_version": rec["torch_version"],
        "verdict": rec["verdict"],
        "threads": ",".join(str(t) for t in sorted(pool, key=str)) if pool else "",
        "one_thread": _same_or_differs(one_compared, one_differing),
        "one_thread_compared": one_compared, "one_thread_differing": one_differing,
        # Mode off only: in the deterministic modes a difference across processes is a verdict.
        "across_processes": _same_or_differs(across_compared, across_differing) if off else "",
        "across_compared": across_compared if off else None,
        "across_differing": across_differing if off else None,
        "processes": len(processes) or None,
    }


def perturbation_table(paths) -> pd.DataFrame | None:
    """One row per perturbation-tier cell (the latest row of a cell wins): the thread-count and
    across-process figures; None where no file holds such rows."""
    latest: dict[tuple, dict] = {}
    for path in paths:
        for row in _perturbed_rows(str(path)):
            latest[row.pop("cell")] = row
    if not latest:
        return None
    frame = pd.DataFrame(list(latest.values()), columns=list(PERTURBATION_COLUMNS))
    for name in ("one_thread_compared", "one_thread_differing", "across_compared", "across_differing", "processes"):
        frame[name] = frame[name].astype("Int64")
    return frame.sort_values(["source", "device", "one_thread", "entry_id", "mode", "compile"],
                             na_position="last").reset_index(drop=True)


def perturbation_headline(frame: pd.DataFrame) -> list[str]:
    """Per device: cells whose bytes changed with one thread; mode-off cells that differed across processes."""
    lines = []
    for device, group in frame.groupby("device", sort=True):
        probed = group[group["one_thread"] != "not measured"]
        changed = int((probed["one_thread"] == "differs").sum())
        pools = sorted({t for t in group["threads"] if t})
        off = group[group["across_processes"].isin(("same", "differs"))]
        lines.append(f"{device}: {changed}/{len(probed)} cells changed bytes on one thread instead of "
                     f"{' or '.join(pools) or '?'}; with the mode off, {int((off['across_processes'] == 'differs').sum())}"
                     f"/{len(off)} cells differed across fresh processes")
    return lines


def perturbation_markdown(frame: pd.DataFrame) -> str:
    return "\n".join(["# Sensitivity under the perturbation tier (`--perturb`)", "",
                       "Neither is promised by the docs; neither fails a cell.", "",
                       *[f"- {md_cell(line)}" for line in perturbation_headline(frame)],
                       "", markdown_frame(frame.astype(object).where(frame.notna(), "")), ""])


def _groups(frame: pd.DataFrame):
    """(label, device, rows) per device, torch version and compile setting; the label names the
    device alone where the table holds one torch version and one compile setting. The headline
    and the picture count over these same groups."""
    keys = ["device", "torch_version"] + (["compile"] if "compile" in frame.columns else [])
    plain = all(frame[k].nunique(dropna=False) <= 1 for k in keys[1:])
    for key, group in frame.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        yield (str(key[0]) if plain else " · ".join(str(k) for k in key)), key[0], group


def _counts(group: pd.DataFrame, device: str) -> dict:
    """Entries that differed over entries judged (at least one example compared) — overall, of
    those documented for ``device`` and of those documented to throw there. An entry none of
    whose examples was compared could not differ and counts in no denominator; those the run
    planned and never reached (verdict ``missing``: a run cut short, by a time budget or a
    signal) are counted apart, as not run."""
    was_judged = (group["examples_judged"] > 0).to_numpy(dtype=bool)
    not_run = int((group["verdict"] == MISSING).sum())
    for_device = np.array([device in ds.split(",") or ds == "all" for ds in group["documented_devices"]], dtype=bool)
    judged, named = group[was_judged], group[was_judged & for_device]
    throws = group[was_judged & for_device & (group["promise"] == "raises").to_numpy(dtype=bool)]

    def share(rows: pd.DataFrame) -> tuple[int, int]:
        return int((rows["examples_differing"] > 0).sum()), len(rows)

    return {"all": share(judged), "named": share(named), "throws": share(throws),
            "unjudged": len(group) - len(judged) - not_run, "not_run": not_run}


def _sentence(counts: dict, device: str) -> str:
    """What the headline and the picture's note say of one group, from the same counts."""
    (seen, judged), (named_seen, named), (throw_seen, throws) = counts["all"], counts["named"], counts["throws"]
    text = (f"{named_seen}/{named} judged entries documented for {device} differed between runs with "
            f"determinism off ({throw_seen}/{throws} of those documented to throw); {seen}/{judged} judged overall")
    text += f"; {counts['unjudged']} not judged (no example compared)" if counts["unjudged"] else ""
    return text + (f"; {counts['not_run']} not run (missing: the run ended before them)" if counts["not_run"] else "")


def headline(frame: pd.DataFrame) -> list[str]:
    """Per device (and torch version, compile setting where the table holds several): entries
    whose nondeterminism the control exposed, over the entries judged."""
    return [f"{label}: {_sentence(_counts(group, device), device)}" for label, device, group in _groups(frame)]


def chart_spec(frame: pd.DataFrame) -> dict:
    """:func:`reports.picture.draw_bars` data: per device (and torch version, compile setting),
    the judged entries whose runs differed with determinism off, and those where none did; each
    row's note is the headline's sentence for that row (same groups, same denominators)."""
    rows, differed, quiet, notes = [], [], [], []
    for label, device, group in _groups(frame):
        counts = _counts(group, device)
        seen, judged = counts["all"]
        rows.append(label)
        differed.append(seen)
        quiet.append(judged - seen)
        notes.append(_sentence(counts, device))
    return {
        "rows": rows,
        "segments": [("runs differed (nondeterminism seen)", "#1e88e5", differed),
                     ("no difference seen", "#bbdefb", quiet)],
        "notes": notes,
        "title": "Positive control (--mode off): judged entries whose runs differed",
        "xlabel": "entries judged with determinism off (at least one example compared)",
        "share": False,
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m detconf.reports sensitivity", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out", help="write sensitivity.md and sensitivity.csv (and perturbation-sensitivity.md "
                                      "and .csv for --perturb rows) here")
    try:
        args = parser.parse_args(argv)
        if args.out:
            check_out_dir(args.out)
        frame = _off_table(args.results)
        perturbed = perturbation_table(args.results)
        if frame is None and perturbed is None:
            raise ResultsError(f"{', '.join(args.results)}: no --mode off rows and no --perturb rows "
                               "(run the suite with --mode off or --perturb)")
        files: dict[str, str] = {}
        if frame is not None:
            files["sensitivity.md"] = "\n".join(["# Positive-control sensitivity (`--mode off`)", "",
                                                 *(["![sensitivity per device](sensitivity.png)", ""] if args.out else []),
                                                 *[f"- {md_cell(line)}" for line in headline(frame)],
                                                 "", markdown_frame(frame.astype(object).where(frame.notna(), "")), ""])
            files["sensitivity.csv"] = csv_table(frame)
        if perturbed is not None:
            files["perturbation-sensitivity.md"] = perturbation_markdown(perturbed)
            files["perturbation-sensitivity.csv"] = csv_table(perturbed)
        if not args.out:
            emit(terminal("\n".join(text for name, text in files.items() if name.endswith(".md"))))
            return 0
        out = write_files(args.out, files)
        written = list(files)
        if frame is not None:
            from detconf.reports.picture import draw_bars

            write_picture(out, "sensitivity.png", draw_bars, chart_spec(frame))
            written.insert(2, "sensitivity.png")
        emit(terminal(f"wrote {', '.join(written)} to {out}"))
        return 0
    except ResultsError as exc:
        print(f"reports: error: {terminal(str(exc))}", file=sys.stderr)
        return 2
