"""Merging: the rows of the files read, the latest row of each cell kept, in matrix order
(:class:`reports.results.Results`); the run and end records and what each file held."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from detconf.reports import planned as planned_mod
from detconf.reports.digests import DIGEST_BYTES, NO_DIGEST
from detconf.reports.ordering import column_sort_key, entry_sort_key
from detconf.reports.records import COLUMN_KEY, ENTRY_ATTRIBUTES, ENTRY_KEY, TABLE_SCHEMA, NoResults, fail
from detconf.reports.results import Columns, Results


def kept_schema(keep: tuple[str, ...]) -> pa.Schema:
    """The schema of the tables :func:`reports.load.read_file` keeps (the kept columns, then where each row is)."""
    return pa.schema([TABLE_SCHEMA.field(n) for n in keep] + [
        ("file", pa.int32()), ("line", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
        ("newline_after", pa.bool_())])


def group_codes(table: pa.Table, names: tuple[str, ...], rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Group number of each row (of ``rows``, default all) by the values of ``names``."""
    combined = None
    cardinality = 1
    for name in names:
        encoded = pc.dictionary_encode(table.column(name))
        codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks]).astype(np.int64)
        if rows is not None:
            codes = codes[rows]
        size = len(encoded.chunk(0).dictionary) if encoded.num_chunks else 1
        if combined is None:
            combined, cardinality = codes, size
            continue
        if cardinality * size >= 1 << 62:
            uniq, combined = np.unique(combined, return_inverse=True)
            cardinality = len(uniq)
        combined = combined * size + codes
        cardinality *= size
    uniq, inverse = np.unique(combined, return_inverse=True)
    return inverse.reshape(-1), len(uniq)


def merge(files: list, key: tuple[str, ...], want_fingerprints: bool) -> Results:
    """The rows of ``files`` (as :func:`reports.load.read_file` read them, in order) merged:
    the last row of each ``key`` wins; rows of planned cases that got none are ``missing``."""
    names = [f.name for f in files]
    first_seen: dict[str, tuple[int, int]] = {}
    for f in files:
        for line, rec in f.runs:
            seen = first_seen.setdefault(rec["run_id"], (f.index, line))
            if seen != (f.index, line):
                raise fail(f.name, line, f"run {rec['run_id']!r} was read already ({files[seen[0]].name}:{seen[1]}): "
                                          "a file given twice, or a copy of a run? give each run once")
    inputs = [{"path": f.name, "results": f.results, "runs": len(f.runs), "ends": len(f.ends)} for f in files]
    runs_by_id: dict[str, dict] = {}
    for f in files:
        for _, rec in f.runs:
            runs_by_id.pop(rec["run_id"], None)  # a repeated run id: the later record wins
            runs_by_id[rec["run_id"]] = rec
    ends = [rec for f in files for _, rec in f.ends]
    missing, completeness = planned_mod.missing_rows(files, key, kept_schema(files[0].keep))
    if not any(f.results for f in files) and not missing:
        raise NoResults(f"{', '.join(names)}: no result records")

    tables = list(missing)  # before every row read: a row that judged the cell wins
    for f in files:
        tables += f.parts
        f.parts = []
    table = pa.concat_tables(tables)
    del tables
    digests = [d for f in files for d in f.fingerprints] if want_fingerprints else None
    if digests is not None:
        digests = [None] * sum(t.num_rows for t in missing) + digests

    # Merge: the last row of each key wins (the table is in the order read).
    n = table.num_rows
    groups, n_groups = group_codes(table, key)
    last = np.full(n_groups, -1, dtype=np.int64)
    np.maximum.at(last, groups, np.arange(n, dtype=np.int64))
    kept = np.sort(last)

    # Entries, ordered by their latest row; columns.
    entry_of, n_entries = group_codes(table, ENTRY_KEY, kept)
    latest = np.full(n_entries, -1, dtype=np.int64)
    np.maximum.at(latest, entry_of, kept)
    available = [c for c in ENTRY_ATTRIBUTES if c in table.column_names]
    attributes = table.select(available).take(latest).to_pylist()
    entry_order = sorted(range(n_entries), key=lambda e: entry_sort_key(attributes[e]))
    entry_rank = np.empty(n_entries, dtype=np.int64)
    entry_rank[entry_order] = np.arange(n_entries)
    column_of, n_columns = group_codes(table, COLUMN_KEY, kept)
    first = np.full(n_columns, len(kept), dtype=np.int64)
    np.minimum.at(first, column_of, np.arange(len(kept), dtype=np.int64))
    column_values = table.select(list(COLUMN_KEY)).take(kept[first]).to_pylist()
    column_order = sorted(range(n_columns), key=lambda c: column_sort_key(column_values[c]))
    column_rank = np.empty(n_columns, dtype=np.int64)
    column_rank[column_order] = np.arange(n_columns)

    e_codes, c_codes = entry_rank[entry_of], column_rank[column_of]
    perm = np.lexsort((c_codes, e_codes))
    entries = pd.DataFrame([attributes[e] for e in entry_order], columns=list(ENTRY_ATTRIBUTES))
    entries = entries.astype({c: object for c in ENTRY_ATTRIBUTES if c != "position"})
    order = kept[perm]
    if digests is not None:
        digests = np.frombuffer(b"".join(d or NO_DIGEST for d in digests), dtype=np.uint64).reshape(
            -1, DIGEST_BYTES // 8)[order]
    # The sentence is the entry's (above); the rows do without it.
    if "sentence" in table.column_names:
        table = table.drop_columns(["sentence"])
    table_verdicts = table.column("verdict").take(pa.array(order)).combine_chunks()
    holder = [table.append_column("seq", pa.array(np.arange(n, dtype=np.int64)))]
    del table
    return Results(
        store=Columns(holder.pop(), order),
        entry_codes=e_codes[perm],
        column_codes=c_codes[perm],
        runs=list(runs_by_id.values()),
        ends=ends,
        inputs=inputs,
        overrides=n - len(kept),
        entries=entries,
        columns=[tuple(column_values[c][k] for k in COLUMN_KEY) for c in column_order],
        paths=names,
        fingerprints=digests,
        completeness=completeness,
        missing=int(np.count_nonzero(np.asarray(pc.equal(table_verdicts, planned_mod.MISSING), dtype=bool))),
    )
