"""The merged rows of one or more results files (:class:`Results`), as :func:`reports.load.load`
returns them."""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from detconf.reports import spans as spans_mod
from detconf.reports.records import ROW_FIELDS

class Columns:
    """The columns of every row read, each in one piece (in the order read), and which rows the
    merge kept in which order. A column in matrix order is taken on first use; ``results.csv``
    takes its columns a batch of rows at a time instead (in a thread of its own)."""

    def __init__(self, table: pa.Table, order: np.ndarray):
        self.order = order
        self._order = pa.array(order)
        self.names = table.column_names
        self.source: dict[str, pa.Array] = {}
        pool = pa.default_memory_pool()
        for name in self.names:  # one column at a time: the chunks of each are let go of at once
            self.source[name] = table.column(0).combine_chunks()
            table = table.remove_column(0)
            pool.release_unused()
        self.taken: dict[str, pa.Array] = {}

    def column(self, name: str) -> pa.Array:
        if name not in self.taken:
            self.taken[name] = self.source[name].take(self._order)
        return self.taken[name]

    def rows(self, name: str, start: int, stop: int) -> pa.Array:
        """Rows ``start:stop`` (matrix order) of one column."""
        if name in self.taken:
            return self.taken[name].slice(start, stop - start)
        return self.source[name].take(pa.array(self.order[start:stop]))


@dataclass
class Results:
    """Result rows of one or more results files, merged: the rows the merge kept, in matrix
    order (entries, then torch version, device, mode, compile setting).

    ``column(name)`` gives one column of them (TABLE_SCHEMA, then ``file`` -- an index into
    ``paths`` --, ``line``, ``start`` and ``end`` -- the byte span of the row's text in its
    file --, ``newline_after`` and ``seq``, the row's place among all rows read);
    ``entry_codes`` and ``column_codes`` give each row's entry (an index into ``entries``) and
    column (into ``columns``).
    """

    store: Columns
    entry_codes: np.ndarray  # per row, its entry
    column_codes: np.ndarray  # per row, its column
    runs: list[dict]  # run records (a repeated run_id: the later record wins)
    ends: list[dict]  # end records, in the order read
    inputs: list[dict]  # per file: path, numbers of result, run and end records
    overrides: int  # result rows replaced by a later row with the same key
    entries: pd.DataFrame  # ENTRY_ATTRIBUTES, one row per entry; row n has entry code n
    columns: list[tuple[str, str, str, str]]  # (torch_version, device, mode, compile); index = code
    paths: list[str]  # the files read, in order
    fingerprints: np.ndarray | None = None  # per row: digest of its fingerprints (2 words), zeros where none
    completeness: list[dict] = dataclasses.field(default_factory=list)  # per run: planned, listed, rows, missing
    missing: int = 0  # rows of planned cases that got none (verdict ``missing``, made by the reader)

    def __len__(self) -> int:
        return len(self.store.order)

    def column(self, name: str) -> pa.Array:
        """One column of the rows, in matrix order."""
        return self.store.column(name)

    def column_rows(self, name: str, start: int, stop: int) -> pa.Array:
        """Rows ``start:stop`` of one column (without taking the whole column)."""
        return self.store.rows(name, start, stop)

    @property
    def column_names(self) -> list[str]:
        return list(self.store.names)

    @property
    def table(self) -> pa.Table:
        """All the columns, in matrix order (for small results: every column is taken)."""
        return pa.table({name: self.column(name) for name in self.store.names})

    def pylist(self, name: str) -> list:
        return self.column(name).to_pylist()

    @functools.cached_property
    def values(self) -> dict[str, list]:
        """ROW_FIELDS, file, line, seq -> one value per row (matrix order)."""
        out = {name: self.pylist(name) for name in ROW_FIELDS}
        out["file"] = [self.paths[i] for i in self.pylist("file")]
        out["line"] = self.pylist("line")
        out["seq"] = self.pylist("seq")
        return out

    @functools.cached_property
    def rows(self) -> pd.DataFrame:
        """The rows as a DataFrame: ROW_FIELDS, file, line, seq, entry_code, column_code."""
        frame = pd.DataFrame(self.values)
        frame["entry_code"] = self.entry_codes
        frame["column_code"] = self.column_codes
        return frame

    def spans(self, rows: Iterable[int] | None = None) -> tuple:
        """``(paths, file, start, end, newline_after)`` of rows (default: all, in matrix order):
        where each row's text is (see :mod:`reports.spans`). ``missing`` rows have no text (the
        reader made them from a run record): they are left out."""
        index = slice(None) if rows is None else np.asarray(list(rows), dtype=np.int64)
        if self.missing:
            starts = self.column("start").to_numpy()
            keep = np.flatnonzero(starts >= 0) if rows is None else index[starts[index] >= 0]
            index = keep
        column = self.column
        return (self.paths, column("file").to_numpy()[index], column("start").to_numpy()[index],
                column("end").to_numpy()[index], column("newline_after").to_numpy(zero_copy_only=False)[index])

    def line_batches(self, rows: Iterable[int] | None = None) -> Iterator[list[bytes]]:
        """The text of rows (default: all, in matrix order) as read, surrounding whitespace
        stripped, a batch at a time."""
        paths, files, starts, ends, _ = self.spans(rows)
        return spans_mod.texts(paths, files, starts, ends)

    @property
    def texts(self) -> list[str]:
        """The rows' lines as read, in matrix order."""
        return [t.decode("utf-8") for batch in self.line_batches() for t in batch]

    @property
    def records(self) -> list[dict]:
        """The rows as parsed JSON objects, in matrix order (for small results: it parses)."""
        return [json.loads(t) for batch in self.line_batches() for t in batch]

    def digest(self) -> str:
        """:func:`reports.digests.rows_digest` of the rows, hashed straight from the files."""
        return spans_mod.digest(*self.spans())
