"""Doc drift: how the promises of ``torch.use_deterministic_algorithms`` changed across releases.

``python -m detconf.reports drift [HISTORY] [--out DIR]`` reads a spec-history file and
writes ``drift.md`` and ``drift.csv``. Like everything under ``reports/`` it reads
files only: the history is JSON lines, one catalog entry per line with its
``doc_version``, as ``python -m detconf.conformance spec-history`` writes it from the
docstring snapshots (the published one is ``reports/published/drift/spec-history.jsonl``).

The key that follows one promise across releases is the **entry id**
(``MaxPool3d.backward[cuda]``, ``put_(accumulate=False)``): the short op name,
keyword cases, ``.backward`` and the condition tags, devices included.

- The short op name (not the qualified one) keeps a promise whose spelling
  changed on the same key: 1.8's ``torch.__getitem__`` and 1.9's
  ``torch.Tensor.__getitem__`` are one row ("reworded"), not a leave and an enter.
- Devices stay in the key because 2.15 documents MPS promises for ops whose CUDA
  promise sits in the other list (``MaxPool3d.backward[cuda]`` deterministic,
  ``MaxPool3d.backward[mps]`` raises); without devices they would collide.
- A changed condition is a different promise: ``bincount[cuda]`` left in 2.1 and
  ``bincount[weights,cuda]`` entered, which is what a reader of the docs must learn.

Ids are unique within a release across all lists (the catalog rejects duplicates),
so a key has at most one list per release. Changes are ``entered``, ``left``,
``moved`` (between lists) and ``reworded`` (same key and list, other sentence).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from detconf.reports.output import ArgumentParser, check_out_dir, emit, write_files
from detconf.reports.readfile import BadLine, Unreadable, json_lines, open_regular
from detconf.reports.records import ResultsError
from detconf.reports.safe import csv_table, markdown_frame, terminal

DEFAULT_OUT = Path(__file__).resolve().parent / "published" / "drift"
DEFAULT_HISTORY = DEFAULT_OUT / "spec-history.jsonl"
HISTORY_FIELDS = ("doc_version", "entry_id", "op", "list_name", "sentence")
CHANGE_ORDER = ("moved", "entered", "left", "reworded")
EVENT_COLUMNS = ["release", "previous_release", "change", "key", "op", "from_list", "to_list",
                 "sentence", "previous_sentence"]


class HistoryError(ResultsError):
    """A spec-history file that cannot be read; the message is one line naming the file."""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


#: The docstring snapshots the project keeps (read as data: one folder per release).
SNAPSHOTS = Path(__file__).resolve().parents[1] / "conformance" / "data" / "torch-docs"
_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
#: Typed fields of a spec-history line besides HISTORY_FIELDS (``python -m detconf.conformance
#: spec-history`` writes ``Entry.to_json()``): name -> (check, what it must be).
_TYPED = {
    "position": (lambda v: v is None or (type(v) is int and v >= 0), "a whole number from 0 or null"),
    "backward": (lambda v: type(v) is bool, "true or false"),
    "indices_output": (lambda v: type(v) is bool, "true or false"),
    "weights_given": (lambda v: type(v) is bool, "true or false"),
    "quantized": (lambda v: type(v) is bool, "true or false"),
    "sparse_dense": (lambda v: type(v) is bool, "true or false"),
    "devices": (lambda v: type(v) is list and all(type(d) is str and d for d in v), "a list of device names"),
    "dtypes": (lambda v: type(v) is list and all(type(d) is str and d for d in v), "a list of dtype classes"),
    "qualifiers": (lambda v: type(v) is list and all(type(d) is str and d for d in v), "a list of words"),
    "cases": (lambda v: type(v) is list and all(type(c) is dict for c in v), "a list of objects"),
    "promise": (lambda v: type(v) is str and bool(v), "a non-empty string"),
    "source": (lambda v: type(v) is str and bool(v), "a non-empty string"),
    "torch": (lambda v: v is None or (type(v) is str and bool(v)), "a version range or null"),
}


def known_releases() -> list[str]:
    """The releases whose docstring snapshot this checkout keeps (empty: none found here)."""
    if not SNAPSHOTS.is_dir():
        return []
    return sorted((p.name for p in SNAPSHOTS.iterdir() if p.is_dir() and _RELEASE.fullmatch(p.name)),
                  key=_version_key)


def load_history(path: Path = DEFAULT_HISTORY) -> tuple[pd.DataFrame, list[str]]:
    """The presence table of a spec-history file: one row per (release, key) with op, list and
    sentence as that release documents them; and the releases, oldest first."""
    path = Path(path)
    try:
        stream = open_regular(path, "a spec-history file")  # a folder, pipe or device: refused unread
    except Unreadable as exc:
        raise HistoryError(f"{path}: cannot read spec history: {exc.problem}") from None
    rows = []
    releases: list[str] | None = None
    try:
        with stream:
            for lineno, record in json_lines(stream, not_json="not JSON: {}"):
                if not isinstance(record, dict):
                    raise HistoryError(f"{path}:{lineno}: expected an entry object, got {type(record).__name__}")
                bad = [f for f in HISTORY_FIELDS if not isinstance(record.get(f), str) or not record.get(f)]
                if bad:
                    raise HistoryError(f"{path}:{lineno}: field {bad[0]!r} must be a non-empty string")
                for name, (valid, what) in _TYPED.items():
                    if name in record and not valid(record[name]):
                        raise HistoryError(f"{path}:{lineno}: field {name!r} must be {what}, got "
                                           f"{' '.join(json.dumps(record[name], default=str).split())[:40]}")
                release = record["doc_version"]
                if not _RELEASE.fullmatch(release):
                    raise HistoryError(f"{path}:{lineno}: doc_version {release[:40]!r} is not a release (X.Y.Z)")
                if releases is None:
                    releases = known_releases()
                if releases and release not in releases:
                    raise HistoryError(f"{path}:{lineno}: doc_version {release!r} is not a release whose docs this "
                                       f"checkout keeps ({releases[0]} … {releases[-1]})")
                rows.append({"release": record["doc_version"], "key": record["entry_id"], "op": record["op"],
                             "list_name": record["list_name"], "sentence": record["sentence"]})
    except BadLine as exc:
        raise HistoryError(f"{path}:{exc.line}: {exc.problem}") from None
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read spec history: {exc.strerror or exc}") from None
    if not rows:
        raise HistoryError(f"{path}: no entries")
    table = pd.DataFrame(rows, columns=["release", "key", "op", "list_name", "sentence"])
    versions = sorted(set(table.release), key=_version_key)
    # A multi-op bullet shares its sentence between entries, never its key.
    return table.drop_duplicates(["release", "key"]), versions


def drift_events(presence: pd.DataFrame, versions: Sequence[str]) -> pd.DataFrame:
    """Changes between consecutive releases, sorted by release, change and key."""
    rows = []
    for previous, release in zip(versions, versions[1:]):
        before = presence[presence.release == previous].set_index("key")
        after = presence[presence.release == release].set_index("key")
        for key in sorted(set(before.index) | set(after.index)):
            old = before.loc[key] if key in before.index else None
            new = after.loc[key] if key in after.index else None
            if old is None:
                change = "entered"
            elif new is None:
                change = "left"
            elif old.list_name != new.list_name:
                change = "moved"
            elif old.sentence != new.sentence:
                change = "reworded"
            else:
                continue
            rows.append({
                "release": release,
                "previous_release": previous,
                "change": change,
                "key": key,
                "op": (new if new is not None else old).op,
                "from_list": "" if old is None else old.list_name,
                "to_list": "" if new is None else new.list_name,
                "sentence": "" if new is None else new.sentence,
                "previous_sentence": "" if old is None else old.sentence,
            })
    events = pd.DataFrame(rows, columns=EVENT_COLUMNS)
    order = {v: i for i, v in enumerate(versions)}
    events["_r"] = events.release.map(order)
    events["_c"] = events.change.map(CHANGE_ORDER.index)
    return events.sort_values(["_r", "_c", "key"]).drop(columns=["_r", "_c"]).reset_index(drop=True)


def key_history(presence: pd.DataFrame, versions: Sequence[str]) -> pd.DataFrame:
    """One row per key: its runs of releases per list, e.g. ``raises 1.8.0–2.12.0; deterministic 2.13.0–2.15.0``."""
    lists = presence.pivot(index="key", columns="release", values="list_name")
    ops = presence.assign(_r=presence.release.map({v: i for i, v in enumerate(versions)}))
    latest_op = ops.sort_values("_r").groupby("key").op.last()
    rows = []
    for key in sorted(lists.index):
        runs: list[tuple[str, str, str]] = []
        previous_list = None
        for v in versions:
            current = lists.at[key, v] if v in lists.columns else None
            current = None if pd.isna(current) else current
            if current is not None and current == previous_list:
                runs[-1] = (runs[-1][0], runs[-1][1], v)
            elif current is not None:
                runs.append((current, v, v))
            previous_list = current
        rows.append({
            "key": key,
            "op": latest_op[key],
            "history": "; ".join(f"{name} {a}–{b}" if a != b else f"{name} {a}" for name, a, b in runs),
            "in_latest": runs[-1][2] == versions[-1],
        })
    return pd.DataFrame(rows, columns=["key", "op", "history", "in_latest"])


def _md_table(frame: pd.DataFrame) -> str:
    # Keys such as ``cumsum[floating|complex,cuda]`` hold pipes, which end a Markdown cell.
    return markdown_frame(frame)


def render_markdown(events: pd.DataFrame, history: pd.DataFrame, versions: Sequence[str]) -> str:
    counts = events.change.value_counts()
    summary = ", ".join(f"{counts.get(c, 0)} {c}" for c in CHANGE_ORDER)
    short_events = events[["release", "change", "key", "op", "from_list", "to_list"]]
    return "\n".join([
        "# Doc drift of `torch.use_deterministic_algorithms`",
        "",
        f"Releases: {', '.join(versions)} (docstring snapshots in `conformance/data/torch-docs/`).",
        "",
        "Key: the entry id (short op name, keyword cases, `.backward`, condition tags and devices), so a",
        "promise keeps its key when the docs respell the op and gets a new one when its condition changes.",
        "`cublas` is the list of ops that raise without `CUBLAS_WORKSPACE_CONFIG` (until 2.9).",
        "",
        f"## Changes between consecutive releases ({summary})",
        "",
        _md_table(short_events),
        "",
        "## History per key",
        "",
        _md_table(history),
        "",
    ])


def build(history: Path = DEFAULT_HISTORY) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    presence, versions = load_history(history)
    return drift_events(presence, versions), key_history(presence, versions), versions


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m detconf.reports drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("history", nargs="?", type=Path, default=DEFAULT_HISTORY,
                        help=f"spec-history JSON lines (default: {DEFAULT_HISTORY})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    try:
        args = parser.parse_args(argv)
        check_out_dir(args.out)
        events, history, versions = build(args.history)
        out = write_files(args.out, {
            "drift.csv": csv_table(events),
            "drift.md": render_markdown(events, history, versions),
        })
        emit(terminal(f"wrote {out / 'drift.md'} and {out / 'drift.csv'} ({len(events)} changes)"))
    except ResultsError as exc:
        print(f"reports: error: {terminal(str(exc))}", file=sys.stderr)
        return 2
    return 0
