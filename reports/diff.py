"""Compare two results files cell by cell: entries added/removed, verdicts changed.

Cells are matched on (source, doc_version, entry_id, phase, device, mode) -- the torch version is left
out so that two torch releases can be compared. A regression is a cell that was ``conforms``
and now holds any other verdict; a cell that disappeared is reported, and counts as a
regression only with ``strict=True``.

Between two torch releases a change has one of two causes, and the diff names it:
``docs`` when the documented promise changed (the cell's ``expected`` differs, or the entry
entered or left the docs), ``behaviour`` when the promise is the same and torch behaves
differently. A promise that changed with the verdict unchanged is listed too.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from reports.load import DEFAULT_PHASE, Results, device_key, entry_sort_key, load, mode_key

DIFF_KEY = ("source", "doc_version", "entry_id", "phase", "device", "mode")


@dataclass(frozen=True)
class Cell:
    entry: tuple  # (source, doc_version, entry_id, phase)
    device: str
    mode: str

    @property
    def column(self) -> str:
        return f"{self.device}/{self.mode}"


@dataclass
class Diff:
    a: Results
    b: Results
    added_entries: list[tuple] = field(default_factory=list)  # (entry, {cell: verdict})
    removed_entries: list[tuple] = field(default_factory=list)
    added_cells: list[tuple] = field(default_factory=list)  # (cell, verdict)
    removed_cells: list[tuple] = field(default_factory=list)  # (cell, verdict)
    changed: list[tuple] = field(default_factory=list)  # (cell, before, after, cause)
    promises: list[tuple] = field(default_factory=list)  # (cell, expected before, expected after, verdict)
    fingerprints: list[tuple] = field(default_factory=list)  # (cell, [example], compared)
    regressions: list[tuple] = field(default_factory=list)  # (cell, before, after or None)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)


def _cells(results: Results) -> dict[Cell, dict]:
    out = {}
    for rec in results.records:
        cell = Cell((rec["source"], rec.get("doc_version"), rec["entry_id"], rec.get("phase") or DEFAULT_PHASE),
                    rec["device"], rec["mode"])
        out[cell] = rec  # load() already kept one record per DIFF_KEY (the later line)
    return out


def _fingerprints(rec: dict) -> dict | None:
    detail = rec.get("detail")
    return detail.get("fingerprints") if isinstance(detail, dict) else None


def _cause(before: dict, after: dict) -> str:
    """``docs: expected X → Y`` when the documented promise of the cell changed, else ``behaviour``."""
    if before.get("expected") != after.get("expected"):
        return f"docs: expected {before.get('expected')} → {after.get('expected')}"
    return "behaviour"


def compare(a: Results, b: Results, *, strict: bool = False) -> Diff:
    cells_a, cells_b = _cells(a), _cells(b)
    recs = {**cells_b, **cells_a}  # for ordering: A's record where the cell is in both

    def order(cell: Cell) -> tuple:
        return (entry_sort_key(recs[cell]), device_key(cell.device), mode_key(cell.mode))

    entries_a = {c.entry for c in cells_a}
    entries_b = {c.entry for c in cells_b}
    diff = Diff(a=a, b=b)
    new_entries: dict[tuple, dict] = {}
    gone_entries: dict[tuple, dict] = {}
    for cell in sorted(set(cells_a) | set(cells_b), key=order):
        before = cells_a.get(cell)
        after = cells_b.get(cell)
        if before is None:
            if cell.entry not in entries_a:
                new_entries.setdefault(cell.entry, {})[cell] = after["verdict"]
            else:
                diff.added_cells.append((cell, after["verdict"]))
            continue
        if after is None:
            if cell.entry not in entries_b:
                gone_entries.setdefault(cell.entry, {})[cell] = before["verdict"]
            else:
                diff.removed_cells.append((cell, before["verdict"]))
            if strict and before["verdict"] == "conforms":
                diff.regressions.append((cell, "conforms", None))
            continue
        cause = _cause(before, after)
        if before["verdict"] != after["verdict"]:
            diff.changed.append((cell, before["verdict"], after["verdict"], cause))
            if before["verdict"] == "conforms":
                diff.regressions.append((cell, "conforms", after["verdict"]))
        elif cause.startswith("docs"):
            diff.promises.append((cell, before.get("expected"), after.get("expected"), after["verdict"]))
        fa, fb = _fingerprints(before), _fingerprints(after)
        if fa and fb:
            shared = sorted(set(fa) & set(fb), key=lambda k: (len(str(k)), str(k)))
            moved = [k for k in shared if fa[k] != fb[k]]
            if moved:
                diff.fingerprints.append((cell, moved, len(shared)))
    diff.added_entries = list(new_entries.items())
    diff.removed_entries = list(gone_entries.items())
    return diff


def _entry_name(entry: tuple) -> str:
    source, doc_version, entry_id, phase = entry
    extra = source + (f", docs {doc_version}" if doc_version else "") + (
        f", {phase}" if phase != DEFAULT_PHASE else "")
    return f"{entry_id} ({extra})"


def _side(label: str, path: str, results: Results) -> str:
    versions = sorted({r["torch_version"] for r in results.records})
    devices = sorted({r["device"] for r in results.records}, key=device_key)
    line = (f"{label}: {path} — torch {', '.join(versions)} · devices {', '.join(devices)}"
            f" · {len(results.records)} cells")
    if results.overrides:
        line += f" ({results.overrides} superseded)"
    return line


def render(diff: Diff, path_a: str, path_b: str) -> list[str]:
    lines = [_side("A", path_a, diff.a), _side("B", path_b, diff.b)]

    def tally(cells: dict) -> str:
        counts = Counter(cells.values())
        return ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))

    if diff.added_entries:
        lines.append(f"entries added ({len(diff.added_entries)}; docs):")
        lines += [f"  + {_entry_name(e)}: {tally(c)}" for e, c in diff.added_entries]
    if diff.removed_entries:
        lines.append(f"entries removed ({len(diff.removed_entries)}; docs):")
        lines += [f"  - {_entry_name(e)}: was {tally(c)}" for e, c in diff.removed_entries]
    if diff.added_cells:
        lines.append(f"cells added ({len(diff.added_cells)}):")
        lines += [f"  + {_entry_name(c.entry)} [{c.column}]: {v}" for c, v in diff.added_cells]
    if diff.removed_cells:
        lines.append(f"cells removed ({len(diff.removed_cells)}):")
        lines += [f"  - {_entry_name(c.entry)} [{c.column}]: was {v}" for c, v in diff.removed_cells]
    if diff.changed:
        regressed = {r[0] for r in diff.regressions}
        causes = Counter("docs" if cause.startswith("docs") else cause for *_, cause in diff.changed)
        lines.append(f"verdicts changed ({len(diff.changed)}; "
                     + ", ".join(f"{n} {k}" for k, n in sorted(causes.items())) + "):")
        lines += [
            f"  ~ {_entry_name(c.entry)} [{c.column}]: {before} → {after} ({cause})"
            + ("  REGRESSION" if c in regressed else "")
            for c, before, after, cause in diff.changed
        ]
    if diff.promises:
        lines.append(f"promises changed, verdict unchanged ({len(diff.promises)}; docs):")
        lines += [f"  = {_entry_name(c.entry)} [{c.column}]: expected {old} → {new}, still {verdict}"
                  for c, old, new, verdict in diff.promises]
    if diff.fingerprints:
        lines.append(f"fingerprints changed ({len(diff.fingerprints)} cells; comparable when both runs "
                     "drew the same examples: same Hypothesis profile and seed):")
        lines += [
            f"  # {_entry_name(c.entry)} [{c.column}]: examples {', '.join(map(str, moved))}"
            f" of {compared} compared"
            for c, moved, compared in diff.fingerprints
        ]
    if not any((diff.added_entries, diff.removed_entries, diff.added_cells,
                diff.removed_cells, diff.changed, diff.promises, diff.fingerprints)):
        lines.append("no differences")
    if diff.regressions:
        lines.append(f"REGRESSED: {len(diff.regressions)} cell(s) no longer conform")
    else:
        lines.append("no regression")
    return lines


def main(path_a: str | os.PathLike, path_b: str | os.PathLike, *, strict: bool = False) -> tuple[int, list[str]]:
    """Returns ``(exit_code, lines)``: 1 when any cell regressed, else 0."""
    a = load([path_a], key=DIFF_KEY)
    b = load([path_b], key=DIFF_KEY)
    diff = compare(a, b, strict=strict)
    return (1 if diff.regressed else 0), render(diff, os.fspath(path_a), os.fspath(path_b))
