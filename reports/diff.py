"""Compare two results files cell by cell: entries added/removed, verdicts changed.

Cells are matched on (source, doc_version, entry_id, phase, device, mode, compile setting) --
the torch version is left out so that two torch releases can be compared. Rows without a
compile setting (schemas 1 and 2) are eager, so an eager-only file and one with compiled runs
match on their eager cells. A regression is a cell that was ``conforms`` and now holds any
other verdict, or a cell that is ``missing`` in the new run (planned, and no row came: the run
crashed or was cut short), whatever it was before; a cell that disappeared (not planned) is
reported, and counts as a regression only with ``strict=True``.

Between two torch releases a change has one of two causes, and the diff names it:
``docs`` when the documented promise changed (the cell's ``expected`` differs, or the entry
entered or left the docs), ``behaviour`` when the promise is the same and torch behaves
differently. A promise that changed with the verdict unchanged is listed too.

The cells are matched column-wise (one key code per cell over both files); only the cells
that are reported become Python objects. Example fingerprints are compared by a digest of each
row's fingerprints; rows whose digests differ are read back and compared example by example.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detconf.reports.load import load
from detconf.reports.merge import group_codes
from detconf.reports.ordering import compile_key, device_key, entry_sort_key, mode_key
from detconf.reports.planned import MISSING
from detconf.reports.records import DEFAULT_PHASE, EAGER, ENTRY_KEY
from detconf.reports.results import Results

#: What ``diff`` keeps of each row (besides what merging and ordering need).
DIFF_COLUMNS = ("verdict", "expected", "has_fingerprints")
DIFF_KEY = ("source", "doc_version", "entry_id", "phase", "device", "mode", "compile")


@dataclass(frozen=True)
class Cell:
    entry: tuple  # (source, doc_version, entry_id, phase)
    device: str
    mode: str
    compile: str = EAGER

    @property
    def column(self) -> str:
        """``device/mode``, and the compile setting where it is not eager."""
        return f"{self.device}/{self.mode}" + (f"/{self.compile}" if self.compile != EAGER else "")


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
    still_missing: list[tuple] = field(default_factory=list)  # (cell,): missing in both runs
    regressions: list[tuple] = field(default_factory=list)  # (cell, before, after or None)
    show_compile: bool = False  # some cell of either file is not eager: columns name the setting

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def column(self, cell: Cell) -> str:
        return f"{cell.device}/{cell.mode}" + (f"/{cell.compile}" if self.show_compile else "")


_FIELDS = DIFF_KEY + ("verdict", "expected", "list_name", "position")


def _codes(values: pa.Array) -> np.ndarray:
    """Dictionary code of each value (-1 for null), comparable within ``values``."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = pc.dictionary_encode(values)
    return np.asarray(pc.fill_null(encoded.indices, -1))


def _fingerprint_dicts(results: Results, rows: list[int]) -> list[dict | None]:
    """``detail.fingerprints`` of rows of ``results.table``, read back from the file."""
    out = []
    for text in (t for batch in results.line_batches(rows) for t in batch):
        fingerprints = (json.loads(text).get("detail") or {}).get("fingerprints")
        out.append(fingerprints if isinstance(fingerprints, dict) else None)
    return out


def compare(a: Results, b: Results, *, strict: bool = False) -> Diff:
    na = len(a)
    both = pa.table({name: pa.concat_arrays([a.column(name), b.column(name)]) for name in _FIELDS})
    cell_code, _ = group_codes(both, DIFF_KEY)
    entry_code, n_entries = group_codes(both, ENTRY_KEY)
    verdict = _codes(both.column("verdict"))
    expected = _codes(both.column("expected"))
    code_a, code_b = cell_code[:na], cell_code[na:]
    n_cells = int(cell_code.max()) + 1
    row_in_b = np.full(n_cells, -1, dtype=np.int64)
    row_in_b[code_b] = np.arange(len(b))
    row_in_a = np.full(n_cells, -1, dtype=np.int64)
    row_in_a[code_a] = np.arange(na)
    in_a_entry = np.zeros(n_entries, dtype=bool)
    in_a_entry[entry_code[:na]] = True
    in_b_entry = np.zeros(n_entries, dtype=bool)
    in_b_entry[entry_code[na:]] = True

    match = row_in_b[code_a]  # per A row: its B row, -1 where the cell is not in B
    matched = match >= 0
    a_rows = np.flatnonzero(matched)
    b_rows = match[matched]
    changed = verdict[a_rows] != verdict[na + b_rows]
    promise = expected[a_rows] != expected[na + b_rows]
    # A cell missing in the new run is a regression even where the baseline misses it too.
    is_missing = np.asarray(pc.fill_null(pc.equal(both.column("verdict"), MISSING), False), dtype=bool)
    stays_missing = is_missing[na + b_rows] & ~changed

    # Fingerprints: rows of both files with fingerprints whose digests differ are read back.
    fp_pairs: list[tuple[int, int]] = []
    if a.fingerprints is not None and b.fingerprints is not None:
        has_a = a.column("has_fingerprints").to_numpy(zero_copy_only=False)[a_rows]
        has_b = b.column("has_fingerprints").to_numpy(zero_copy_only=False)[b_rows]
        moved = has_a & has_b & (a.fingerprints[a_rows] != b.fingerprints[b_rows]).any(axis=1)
        fp_pairs = list(zip(a_rows[moved].tolist(), b_rows[moved].tolist()))

    # What is reported, as (side, row) of the file whose row orders the cell (A where it is in A).
    removed = np.flatnonzero(~matched)
    added = np.flatnonzero(row_in_a[code_b] < 0)
    interesting = sorted(set(removed.tolist()) | set(a_rows[changed | promise | stays_missing].tolist())
                         | {i for i, _ in fp_pairs})
    match_of = dict(zip(a_rows.tolist(), b_rows.tolist()))
    counterpart = [match_of[i] for i in interesting if i in match_of]
    records: dict[tuple[str, int], dict] = {}
    afters: dict[int, dict] = {}
    for side, rows, offset, into in (("a", interesting, 0, records), ("b", added.tolist(), na, records),
                                     ("b-match", counterpart, na, afters)):
        if not rows:
            continue
        take = pa.array(np.asarray(rows, dtype=np.int64) + offset)
        columns = {name: both.column(name).take(take).to_pylist() for name in _FIELDS}
        for k, row in enumerate(rows):
            rec = {name: columns[name][k] for name in _FIELDS}
            if side == "b-match":
                afters[row] = rec
            else:
                records[(side, row)] = rec

    def cell_of(rec: dict) -> Cell:
        return Cell((rec["source"], rec["doc_version"], rec["entry_id"], rec["phase"]),
                    rec["device"], rec["mode"], rec["compile"])

    def order(key: tuple[str, int]) -> tuple:
        rec = records[key]
        return (entry_sort_key(rec), device_key(rec["device"]), mode_key(rec["mode"]), compile_key(rec["compile"]))

    diff = Diff(a=a, b=b)
    compiles = set(pc.unique(both.column("compile")).to_pylist())
    diff.show_compile = compiles != {EAGER}
    fp_found = {}
    if fp_pairs:
        dicts_a = _fingerprint_dicts(a, [i for i, _ in fp_pairs])
        dicts_b = _fingerprint_dicts(b, [j for _, j in fp_pairs])
        for (i, _), fa, fb in zip(fp_pairs, dicts_a, dicts_b):
            if fa and fb:
                shared = sorted(set(fa) & set(fb), key=lambda k: (len(str(k)), str(k)))
                moved = [k for k in shared if fa[k] != fb[k]]
                if moved:
                    fp_found[i] = (moved, len(shared))
    entry_of = entry_code
    new_entries: dict[tuple, dict] = {}
    gone_entries: dict[tuple, dict] = {}
    for key in sorted(records, key=order):
        side, row = key
        rec = records[key]
        cell = cell_of(rec)
        if side == "b":
            if not in_a_entry[entry_of[na + row]]:
                new_entries.setdefault(cell.entry, {})[cell] = rec["verdict"]
            else:
                diff.added_cells.append((cell, rec["verdict"]))
            if rec["verdict"] == MISSING:  # planned and never judged: a failure wherever it is
                diff.regressions.append((cell, None, MISSING))
            continue
        if row not in match_of:
            if not in_b_entry[entry_of[row]]:
                gone_entries.setdefault(cell.entry, {})[cell] = rec["verdict"]
            else:
                diff.removed_cells.append((cell, rec["verdict"]))
            if strict and rec["verdict"] == "conforms":
                diff.regressions.append((cell, "conforms", None))
            continue
        after = afters[match_of[row]]
        before_expected, after_expected = rec["expected"], after["expected"]
        cause = "behaviour" if before_expected == after_expected else (
            f"docs: expected {before_expected} → {after_expected}")
        if rec["verdict"] != after["verdict"]:
            diff.changed.append((cell, rec["verdict"], after["verdict"], cause))
            if rec["verdict"] == "conforms" or after["verdict"] == MISSING:
                diff.regressions.append((cell, rec["verdict"], after["verdict"]))
        elif after["verdict"] == MISSING:
            diff.still_missing.append((cell,))
            diff.regressions.append((cell, MISSING, MISSING))
        elif cause.startswith("docs"):
            diff.promises.append((cell, before_expected, after_expected, rec["verdict"]))
        if row in fp_found:
            moved, compared = fp_found[row]
            diff.fingerprints.append((cell, moved, compared))
    diff.added_entries = list(new_entries.items())
    diff.removed_entries = list(gone_entries.items())
    return diff


def _entry_name(entry: tuple) -> str:
    source, doc_version, entry_id, phase = entry
    extra = source + (f", docs {doc_version}" if doc_version else "") + (
        f", {phase}" if phase != DEFAULT_PHASE else "")
    return f"{entry_id} ({extra})"


def _side(label: str, path: str, results: Results) -> str:
    versions = sorted(pc.unique(results.column("torch_version")).to_pylist())
    devices = sorted(pc.unique(results.column("device")).to_pylist(), key=device_key)
    line = (f"{label}: {path} — torch {', '.join(versions)} · devices {', '.join(devices)}"
            f" · {len(results)} cells")
    if results.overrides:
        line += f" ({results.overrides} superseded)"
    return line


def render(diff: Diff, path_a: str, path_b: str) -> list[str]:
    lines = [_side("A", path_a, diff.a), _side("B", path_b, diff.b)]
    column = diff.column

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
        lines += [f"  + {_entry_name(c.entry)} [{column(c)}]: {v}" + ("  REGRESSION" if v == MISSING else "")
                  for c, v in diff.added_cells]
    if diff.removed_cells:
        lines.append(f"cells removed ({len(diff.removed_cells)}):")
        lines += [f"  - {_entry_name(c.entry)} [{column(c)}]: was {v}" for c, v in diff.removed_cells]
    if diff.changed:
        regressed = {r[0] for r in diff.regressions}
        causes = Counter("docs" if cause.startswith("docs") else cause for *_, cause in diff.changed)
        lines.append(f"verdicts changed ({len(diff.changed)}; "
                     + ", ".join(f"{n} {k}" for k, n in sorted(causes.items())) + "):")
        lines += [
            f"  ~ {_entry_name(c.entry)} [{column(c)}]: {before} → {after} ({cause})"
            + ("  REGRESSION" if c in regressed else "")
            for c, before, after, cause in diff.changed
        ]
    if diff.still_missing:
        lines.append(f"still missing ({len(diff.still_missing)}; planned, and no row in either run):")
        lines += [f"  ! {_entry_name(c.entry)} [{column(c)}]: missing  REGRESSION" for (c,) in diff.still_missing]
    if diff.promises:
        lines.append(f"promises changed, verdict unchanged ({len(diff.promises)}; docs):")
        lines += [f"  = {_entry_name(c.entry)} [{column(c)}]: expected {old} → {new}, still {verdict}"
                  for c, old, new, verdict in diff.promises]
    if diff.fingerprints:
        lines.append(f"fingerprints changed ({len(diff.fingerprints)} cells; comparable when both runs "
                     "drew the same examples: same Hypothesis profile and seed):")
        lines += [
            f"  # {_entry_name(c.entry)} [{column(c)}]: examples {', '.join(map(str, moved))}"
            f" of {compared} compared"
            for c, moved, compared in diff.fingerprints
        ]
    if not any((diff.added_entries, diff.removed_entries, diff.added_cells,
                diff.removed_cells, diff.changed, diff.still_missing, diff.promises, diff.fingerprints)):
        lines.append("no differences")
    if diff.regressions:
        gone = sum(1 for _, _, after in diff.regressions if after == MISSING)
        lines.append(f"REGRESSED: {len(diff.regressions)} cell(s) no longer conform"
                     + (f" ({gone} of them missing: planned, no row)" if gone else ""))
    else:
        lines.append("no regression")
    return lines


def main(path_a: str | os.PathLike, path_b: str | os.PathLike, *, strict: bool = False) -> tuple[int, list[str]]:
    """Returns ``(exit_code, lines)``: 1 when any cell regressed, else 0."""
    a = load([path_a], key=DIFF_KEY, fingerprints=True, columns=DIFF_COLUMNS)
    b = load([path_b], key=DIFF_KEY, fingerprints=True, columns=DIFF_COLUMNS)
    diff = compare(a, b, strict=strict)
    return (1 if diff.regressed else 0), render(diff, os.fspath(path_a), os.fspath(path_b))
