"""The compatibility matrix: one row per documented entry, one column per (torch,) device, mode
(, compile setting).

``Matrix.from_results`` pivots merged result rows (torch's own docs first); the ``write_*``
functions render it as CSV, Markdown (the answer first, :mod:`reports.answer`) and the picture's
data (:func:`png_spec`, drawn by :mod:`reports.picture`); ``matrix.html`` is :mod:`reports.page`.
Cells hold verdict strings; a cell that was not run is ``None`` and is shown empty or as
``NOT_RUN_MARK``, never as a verdict. The writers work column-wise or per entry, never per cell in
Python, so a matrix of a million cells is written in about a second.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from detconf.vocabulary import DEFAULT_SOURCES, SOURCE_NAMES
from detconf.reports.answer import ANSWER_WORDS, Answer, answer_for, part_answers
from detconf.reports.records import EAGER, PASSING, ROW_FIELDS, VERDICTS
from detconf.reports.results import Results
from detconf.reports.safe import csv_arrow, csv_text, holds_any, markdown_table, md_cell, one_line, plain_text

#: How a cell that was not run is shown (never the verdict ``missing`` of a planned case without a row).
NOT_RUN_MARK = "—"
VERDICT_NAMES = tuple(VERDICTS)
NOT_RUN = len(VERDICT_NAMES)  # the code of a cell that was not run

COLOURS: dict[str, str] = {
    "conforms": "#43a047",
    "nondeterministic": "#7f0000",
    "undocumented-nondeterminism": "#b71c1c",
    "wrong-result": "#d81b60",
    "violated": "#e53935",
    "missing-raise": "#e65100",
    "undocumented-raise": "#f4511e",
    "stale-doc": "#ffb74d",
    "missing-warning": "#fb8c00",
    "spurious-warning": "#ffe0b2",
    "not-reached": "#6d4c41",
    "harness-error": "#7b1fa2",
    "missing": "#212121",
    "unsupported": "#9e9e9e",
    "skipped": "#e0e0e0",
    "nondeterminism-seen": "#1e88e5",
    "no-difference-seen": "#bbdefb",
    "recorded": "#b0bec5",
}
NOT_RUN_COLOUR = "#ffffff"
_VERDICT_OR_NONE = np.array(list(VERDICT_NAMES) + [None], dtype=object)

#: Entry columns shown with the matrix, in order.
ENTRY_COLUMNS = ("source", "doc_version", "list_name", "entry_id", "phase", "op", "promise", "sentence")
HEADINGS = {"source": "source", "doc_version": "doc version", "list_name": "list",
             "entry_id": "entry", "phase": "phase", "op": "op", "promise": "promise", "sentence": "sentence"}

#: Beyond this many entries the picture shows a selection (failing entries first).
PNG_MAX_ENTRIES = 700
#: Beyond this many columns the picture shows the first ones.
PNG_MAX_COLUMNS = 40
#: Failing cells numbered in the picture and listed under it (the rest are marked only).
PNG_MAX_MARKS = 30
#: The picture's largest size, in inches (one screen at 100 dpi).
PNG_MAX_SIZE = (16.0, 10.0)


def source_order(sources: list[str]) -> np.ndarray:
    """Entry order that shows the sources as SOURCE_NAMES lists them (torch's own docs first),
    others after them by name; entries of one source keep their order."""
    known = {name: k for k, name in enumerate(SOURCE_NAMES)}
    keys = [(known.get(s, len(known)), "" if s in known else s) for s in sources]
    return np.asarray(sorted(range(len(sources)), key=lambda i: keys[i]), dtype=np.int64)


@dataclass
class Matrix:
    """Verdicts of every entry (rows) on every (torch version, device, mode) (columns)."""

    entries: pd.DataFrame  # load.ENTRY_ATTRIBUTES, one row per entry, in display order
    columns: list[tuple[str, str, str, str]]  # (torch_version, device, mode, compile), in display order
    codes: np.ndarray  # int array (entries x columns): index in VERDICT_NAMES, NOT_RUN where not run
    device_names: dict[tuple[str, str, str, str], str]  # column -> device name, where known
    _counts: list | None = field(default=None, repr=False, compare=False)
    #: The device-to-device level (entries x columns): "same", "differs" or None (not checked).
    d2d: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: Per entry of the results (``Results.entries``), its row here (sources in SOURCE_NAMES order).
    rank: np.ndarray | None = field(default=None, repr=False, compare=False)

    def display_rank(self, entry_codes: np.ndarray) -> np.ndarray:
        """The matrix rows of results rows whose entries are ``entry_codes``."""
        return entry_codes if self.rank is None else self.rank[entry_codes]

    @property
    def d2d_columns(self) -> list[int]:
        """The columns where some cell was checked device to device."""
        if self.d2d is None:
            return []
        return [j for j in range(len(self.columns)) if any(v is not None for v in self.d2d[:, j])]

    def d2d_counts(self) -> list[dict]:
        """Per column with a device-to-device level: cells checked, same, differing, and the
        entries that differ."""
        out = []
        for j in self.d2d_columns:
            cells = self.d2d[:, j]
            differ = [i for i, v in enumerate(cells) if v == "differs"]
            out.append({"column": self.labels[j], "checked": int(sum(v is not None for v in cells)),
                        "same": int(sum(v == "same" for v in cells)), "differs": len(differ),
                        "entries": [str(self.entries["entry_id"].iloc[i]) for i in differ]})
        return out

    @property
    def cells(self) -> np.ndarray:
        """Object array (entries x columns): verdict, or None where not run."""
        return _VERDICT_OR_NONE[self.codes]

    @property
    def multi_torch(self) -> bool:
        return len({c[0] for c in self.columns}) > 1

    @property
    def shows_compile(self) -> bool:
        """Columns name their compile setting unless every one is eager (tables of eager runs
        keep the labels they had before the compile axis)."""
        return any(c[3] != EAGER for c in self.columns)

    @property
    def labels(self) -> list[str]:
        compile_ = self.shows_compile
        torch = self.multi_torch
        return [(f"{t}/" if torch else "") + f"{d}/{m}" + (f"/{c}" if compile_ else "")
                for t, d, m, c in self.columns]

    @classmethod
    def from_results(cls, results: Results) -> "Matrix":
        shape = (len(results.entries), len(results.columns))
        verdict = pc.dictionary_encode(results.column("verdict"))
        names = verdict.dictionary.to_pylist()
        code_of = np.asarray([VERDICT_NAMES.index(v) for v in names], dtype=np.int8)
        codes = np.full(shape, NOT_RUN, dtype=np.int8)
        codes[results.entry_codes, results.column_codes] = code_of[verdict.indices.to_numpy(zero_copy_only=False)]
        # Device name of a column: that of its last row (matrix order) that names one.
        name = results.column("device_name")
        named = np.flatnonzero(np.asarray(pc.fill_null(pc.not_equal(name, ""), False), dtype=bool))
        last = np.full(shape[1], -1, dtype=np.int64)
        np.maximum.at(last, results.column_codes[named], named)
        device_names = {results.columns[j]: name[int(i)].as_py() for j, i in enumerate(last.tolist()) if i >= 0}
        d2d = None
        if "d2d" in results.column_names:
            level = np.asarray(results.column("d2d").to_pylist(), dtype=object)
            if any(v is not None for v in level):
                d2d = np.full(shape, None, dtype=object)
                d2d[results.entry_codes, results.column_codes] = level
        order = source_order(results.entries["source"].tolist())
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return cls(entries=results.entries.iloc[order].reset_index(drop=True), columns=list(results.columns),
                   codes=codes[order], device_names=device_names, d2d=None if d2d is None else d2d[order],
                   rank=rank)

    # ------------------------------------------------------------------ derived frames

    def column_counts(self) -> list[dict]:
        """Per column: counts of every verdict (zeros included), totals and cells not run (no row
        and no planned case: an entry the column's runs did not plan)."""
        if self._counts is None:
            n = len(self.entries)
            self._counts = []
            for j, (torch_version, device, mode, compile_) in enumerate(self.columns):
                per_code = np.bincount(self.codes[:, j], minlength=NOT_RUN + 1).tolist()
                counts = dict(zip(VERDICT_NAMES, per_code))
                total = sum(counts.values())
                passing = sum(c for v, c in counts.items() if v in PASSING)
                self._counts.append({
                    "column": self.labels[j],
                    "torch_version": torch_version,
                    "device": device,
                    "device_name": self.device_names.get((torch_version, device, mode, compile_)),
                    "mode": mode,
                    "compile": compile_,
                    "counts": counts,
                    "total": total,
                    "passing": passing,
                    "failing": total - passing,
                    "not_run": n - total,
                })
        return [dict(c, counts=dict(c["counts"])) for c in self._counts]

    def failing_rows(self) -> np.ndarray:
        """Boolean mask of entries with at least one failing cell."""
        failing_codes = [i for i, v in enumerate(VERDICT_NAMES) if v not in PASSING]
        return np.isin(self.codes, failing_codes).any(axis=1)

    def show_doc_version(self) -> bool:
        return bool((self.entries["doc_version"] != "").any())

    def show_phase(self) -> bool:
        """Only when some row is not the whole program (tables of older results stay as they were)."""
        return bool((self.entries["phase"] != "program").any())


# ---------------------------------------------------------------------- environment

def describe_run(run: dict) -> dict[str, str]:
    """The run header as display strings (missing values become empty strings)."""
    env = run.get("env") or {}

    def s(value) -> str:
        return "" if value is None else str(value)

    devices = []
    for dev in env.get("devices") or []:
        if isinstance(dev, dict):
            name = dev.get("device_name")
            devices.append(f"{s(dev.get('device'))} ({s(name)})" if name else s(dev.get("device")))
        else:
            devices.append(s(dev))
    seed = env.get("hypothesis_seed")
    profile = env.get("hypothesis_profile")
    hypothesis = s(profile) + (f" seed={seed}" if seed is not None else "")
    return {
        "run": s(run.get("run_id")),
        "started": s(run.get("started")),
        "torch": s(env.get("torch_version")) + (f" ({env['torch_git']})" if env.get("torch_git") else ""),
        "cuda": s(env.get("cuda")),
        "cudnn": s(env.get("cudnn")),
        "driver": s(env.get("driver")),
        "devices": "; ".join(devices),
        "python": s(env.get("python")),
        "platform": s(env.get("platform")),
        "suite": s(env.get("suite_revision")),
        "hypothesis": hypothesis.strip(),
        "doc version": s(env.get("doc_version")),
    }


# ---------------------------------------------------------------------- writers

def write_matrix_csv(matrix: Matrix, out: Path) -> None:
    """``matrix.csv``: one row per entry, one column per label."""
    entry_cells = [[csv_text(v) for v in matrix.entries[c].tolist()] for c in ENTRY_COLUMNS]
    verdicts = np.array(list(VERDICT_NAMES) + [""], dtype=object)[matrix.codes]  # words: nothing to quote
    header = [csv_text(c) for c in ENTRY_COLUMNS] + [csv_text(label) for label in matrix.labels]
    d2d_columns = matrix.d2d_columns
    if d2d_columns:  # the device-to-device level: a column of its own after the verdicts
        header += [csv_text(f"{matrix.labels[j]}/d2d") for j in d2d_columns]
        level = np.where(matrix.d2d[:, d2d_columns] == None, "", matrix.d2d[:, d2d_columns])  # noqa: E711
        verdicts = np.concatenate([verdicts, level.astype(object)], axis=1)
    with open(out / "matrix.csv", "w", newline="", encoding="utf-8") as f:
        f.write(",".join(header) + "\n")
        f.writelines(",".join(attrs) + "," + ",".join(cells) + "\n"
                     for attrs, cells in zip(zip(*entry_cells), verdicts.tolist()))


#: Rows of ``results.csv`` made at a time.
_CSV_BATCH = 1 << 16


#: Columns whose words the loader checked against the vocabulary: nothing to neutralise or quote.
_VOCABULARY_COLUMNS = frozenset({"mode", "phase", "compile", "verdict"})


def _csv_field(name: str, values: pa.Array) -> pa.Array:
    """CSV text of one column: text neutralised (safe.csv_cell) and quoted where it holds a
    comma, quote or line break; numbers as numbers; missing values empty."""
    if name in _VOCABULARY_COLUMNS:
        return values
    if pa.types.is_string(values.type):
        values = csv_arrow(values)
        if holds_any(values, b',"\n\r'):
            quote = pc.fill_null(pc.match_substring_regex(values, '[,"\n\r]'), False)
            quoted = pc.binary_join_element_wise('"', pc.replace_substring(values, '"', '""'), '"', "")
            values = pc.if_else(quote, quoted, values)
    else:
        values = pc.cast(values, pa.string())
    return pc.fill_null(values, "")


def write_results_csv(results: Results, path: Path) -> None:
    """The long form, column-wise: a batch of rows at a time is turned into text by pyarrow
    and written as one buffer."""
    with open(path, "wb") as f:
        f.write((",".join(ROW_FIELDS) + "\n").encode("utf-8"))
        for start in range(0, len(results), _CSV_BATCH):
            stop = min(start + _CSV_BATCH, len(results))
            fields = [_csv_field(name, results.column_rows(name, start, stop)) for name in ROW_FIELDS]
            lines = pc.binary_join_element_wise(pc.binary_join_element_wise(*fields, ","), "", "\n")
            _, offsets, data = lines.buffers()
            bounds = np.frombuffer(offsets, dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
            f.write(memoryview(data)[int(bounds[0]):int(bounds[-1])])


def _md_code(value) -> str:
    """An identifier as a code span, which shows ``__getitem__`` or ``a<b`` literally."""
    text = one_line(value)
    if not text or "`" in text:
        return md_cell(text)
    return "`" + text.replace("|", "\\|") + "`"


def _md_table(rows, headers, formats=None) -> str:
    """A GitHub Markdown table. ``formats``: one function per column turning a value into cell
    text (default: :func:`md_cell` everywhere)."""
    if formats is None:
        rows = [[md_cell(v) for v in row] for row in rows]
    else:
        rows = [[f(v) for f, v in zip(formats, row)] for row in rows]
    return markdown_table(rows, [md_cell(h) for h in headers])


def _md_column(header: str, cells: list[str]) -> tuple[str, str, list[str]]:
    """One column of a GitHub Markdown table, as tabulate lays it out: the header's piece, the
    rule's piece and each cell's piece (``" text |"``; a row is ``"|"`` and its pieces).

    tabulate lays out each column on its own: cells stripped, the column as wide as its widest
    cell and at least its header plus two, everything left-aligned. For printable ASCII that
    is done here (the width of such text is its length); other text goes through tabulate
    (:func:`reports.safe.markdown_table`: one column per character on every machine)."""
    if header.isascii() and header.isprintable() and all(c.isascii() and c.isprintable() for c in cells):
        stripped = [c.strip() for c in cells]
        width = max(len(header) + 2, max(map(len, stripped), default=0))
        return f" {header.ljust(width)} |", "-" * (width + 2) + "|", [f" {c.ljust(width)} |" for c in stripped]
    lines = markdown_table([[c] for c in cells], [header]).split("\n")
    return lines[0][1:], lines[1][1:], [line[1:] for line in lines[2:]]


def _md_matrix(entry_rows: list, entry_headers: list[str], formats: list, codes: np.ndarray,
               labels: list[str]) -> str:
    """The matrix as one GitHub Markdown table, the text ``tabulate`` makes of it: column by
    column (:func:`_md_column`; the table-wide switches of tabulate -- wide characters,
    invisible codes, multi-line cells -- are the same for every column here, since cells are
    one line without control characters). A verdict column holds a few words: each is laid
    out once."""
    heads, rules, pieces = [], [], []
    for header, fmt, values in zip(entry_headers, formats, zip(*entry_rows)):
        head, rule, cells = _md_column(md_cell(header), [fmt(v) for v in values])
        heads.append(head)
        rules.append(rule)
        pieces.append(cells)
    words = list(VERDICT_NAMES) + [NOT_RUN_MARK]
    for j, label in enumerate(labels):
        present = np.unique(codes[:, j]).tolist()
        head, rule, cells = _md_column(md_cell(label), [words[c] for c in present])
        heads.append(head)
        rules.append(rule)
        column = np.empty(len(words), dtype=object)
        column[present] = cells
        pieces.append(column[codes[:, j]].tolist())
    lines = ["|" + "".join(heads), "|" + "".join(rules)]
    lines += ["|" + "".join(row) for row in zip(*pieces)]
    return "\n".join(lines)


def _md_command(text: str) -> str:
    """A command as a code span whatever backticks it holds (a fence longer than any run of them)."""
    text = one_line(text)
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


#: Failing or missing cells the Markdown lists (the HTML and the CSV hold every one).
MD_MAX_CELLS = 200


def answer_markdown(answer: Answer, several_sources: bool, per_part: list[dict] | None = None) -> list[str]:
    """The answer: the headline and what its word means, links to the matrix and the legend,
    one answer per (torch version, device) where ``per_part`` has several, counts per verdict
    with each verdict's meaning, then each failing or missing cell."""
    parts = [f"**{answer.word}**: {md_cell(answer.rest)}", "",
             f"{answer.word} = {md_cell(answer.meaning)}.", "",
             "Jump to: [the compatibility matrix](#matrix) · [counts per column](#counts-per-column) · [legend](#legend)", ""]
    if per_part and len(per_part) > 1:
        parts += ["## Answer per torch version and device", "",
                  _md_table([[p["torch_version"], p["device"], f"**{p['word']}**", str(p["cells"]), str(p["judged"]),
                              str(p["failing"]), str(p["waived"])] for p in per_part],
                            ["torch", "device", "answer", "cells", "judged", "failing", "waived"],
                            [md_cell, md_cell, str, str, str, str, str]), "",
                  " ".join(f"**{w}**: {md_cell(m)}." for w, m in ANSWER_WORDS.items()), ""]
    parts += ["Cells per verdict:", "",
              _md_table([[v, str(n), "yes" if v in PASSING else "no", VERDICTS[v]] for v, n in answer.counts.items()],
                        ["verdict", "cells", "passing", "meaning"]), ""]
    if answer.cells:
        parts += ["## Failing and missing cells", "",
                  f"{len(answer.cells) + answer.more} cells, in matrix order (`✗` failing, `~` failing but waived by a "
                  "known finding the run recorded); each with its evidence and a command that runs it again "
                  "from the suite's checkout.", ""]
        for cell in answer.cells[:MD_MAX_CELLS]:
            mark = "~" if cell.finding else "✗"
            name = _md_code(cell.entry_id) + (f" ({md_cell(cell.source)})" if several_sources else "") + (
                f" <{md_cell(cell.phase)}>" if cell.phase != "program" else "")
            parts.append(f"- {mark} {name} \\[{md_cell(cell.column)}\\]: **{md_cell(cell.verdict)}** — "
                         f"{md_cell(cell.evidence)}")
            if cell.finding:
                parts.append(f"  - known finding: {md_cell(cell.finding)}")
            parts.append(f"  - rerun: {_md_command(cell.rerun)}")
        shown = min(len(answer.cells), MD_MAX_CELLS)
        if len(answer.cells) + answer.more > shown:
            parts.append(f"- … {len(answer.cells) + answer.more - shown} more: see `matrix.html` (the cells with "
                         "their evidence) or `results.csv`")
        parts.append("")
    return parts


def write_markdown(matrix: Matrix, results: Results, out: Path, answer: Answer | None = None) -> None:
    """``matrix.md``: titled with the answer word and what the report covers, the answer first
    (:mod:`reports.answer`), then the runs, the matrix (torch's
    own docs first), the counts per column and the legend."""
    entry_cols = [c for c in ENTRY_COLUMNS if (c != "doc_version" or matrix.show_doc_version())
                  and (c != "phase" or matrix.show_phase())]
    counts = matrix.column_counts()
    runs = [describe_run(r) for r in results.runs]
    answer = answer or answer_for(matrix, results)
    parts = [f"# {md_cell(answer.title)}", ""]
    parts += answer_markdown(answer, matrix.entries["source"].nunique() > 1, part_answers(answer, matrix))
    if runs:
        fields = [k for k in runs[0] if any(r[k] for r in runs)]
        parts += ["## Runs", "", _md_table([[r[k] for k in fields] for r in runs], fields), ""]
    parts += [
        "## Matrix", "",
        f"{len(matrix.entries)} entries × {len(matrix.columns)} columns; "
        f"`{NOT_RUN_MARK}` = not run on that device/mode.", "",
        _md_matrix(
            list(matrix.entries[entry_cols].itertuples(index=False, name=None)),
            [HEADINGS[c] for c in entry_cols],
            [_md_code if c in ("entry_id", "op") else md_cell for c in entry_cols],
            matrix.codes, matrix.labels,
        ),
        "",
        "## Counts per column", "",
    ]
    rows = [[v] + [str(c["counts"][v]) for c in counts] for v in VERDICTS
            if any(c["counts"][v] for c in counts)]
    rows.append([f"not run ({NOT_RUN_MARK})"] + [str(c["not_run"]) for c in counts])
    rows.append(["passing / run"] + [f"{c['passing']}/{c['total']}" for c in counts])
    parts += [_md_table(rows, ["verdict"] + matrix.labels), ""]
    d2d = matrix.d2d_counts()
    if d2d:
        parts += ["## Device to device", "",
                  "The same examples on two devices of one model (rows' `d2d`): `same` bytes, or `differs`.", "",
                  _md_table([[c["column"], str(c["checked"]), str(c["same"]), str(c["differs"]),
                              ", ".join(c["entries"][:50]) + (" …" if len(c["entries"]) > 50 else "")] for c in d2d],
                            ["column", "cells checked", "same", "differs", "entries that differ"]), ""]
    parts += ["## Legend", ""]
    legend = [[v, "yes" if v in PASSING else "no", meaning] for v, meaning in VERDICTS.items()]
    legend.append([NOT_RUN_MARK, "", "not run on that device/mode"])
    parts += [_md_table(legend, ["verdict", "passing", "meaning"]), ""]
    (out / "matrix.md").write_text(plain_text("\n".join(parts)), encoding="utf-8")


def png_selection(matrix: Matrix, limit: int = PNG_MAX_ENTRIES, rows: np.ndarray | None = None) -> np.ndarray:
    """Indices of the entries drawn (of ``rows``, default all): all when they fit, else failing
    entries first, then the rest in matrix order, up to ``limit``, shown in matrix order."""
    rows = np.arange(len(matrix.entries)) if rows is None else rows
    if len(rows) <= limit:
        return rows
    failing_mask = matrix.failing_rows()[rows]
    failing = rows[failing_mask]
    if len(failing) >= limit:
        return failing[:limit]
    others = rows[~failing_mask][: limit - len(failing)]
    return np.sort(np.concatenate([failing, others]))


def _png_text(value) -> str:
    """A label for the picture: one line, control characters and tabs shown as ``?``."""
    return one_line(value).replace("\t", "?")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _lanes(xs: list[float], widths: list[float], lanes: int) -> list[int]:
    """A lane (0 = nearest the grid) for each label centred at ``xs`` (ascending) with
    ``widths`` (same units), so that no two labels in one lane overlap; -1 where none is free."""
    ends = [-np.inf] * lanes
    out = []
    for x, w in zip(xs, widths):
        lane = next((k for k in range(lanes) if ends[k] < x - w / 2), -1)
        if lane >= 0:
            ends[lane] = x + w / 2
        out.append(lane)
    return out


def png_spec(matrix: Matrix, limit: int = PNG_MAX_ENTRIES, answer: Answer | None = None) -> dict:
    """What ``matrix.png`` shows, as plain data for :func:`reports.picture.draw`: a heatmap that
    fits one screen (at most PNG_MAX_SIZE inches).

    The title says the answer (``answer``: the report's, where given) and what it covers; then
    entries across, grouped by source and list (torch's own docs first), one row per column of
    the matrix (torch version, device, mode, compile setting); one colour per verdict. Only the
    default sources are drawn where the matrix has entries of them (the sweep's OpInfos and
    other opt-in sources are in the HTML and CSV). Failing and missing cells are marked, those
    a known finding waives with a ring, the others with a cross; the entries of the first
    PNG_MAX_MARKS marked cells are numbered under the grid (in lanes, so no number covers
    another) and listed under it with their column and verdict. Beyond ``limit`` entries a
    selection (:func:`png_selection`: failing entries first), beyond PNG_MAX_COLUMNS columns
    the first ones; the title says so.
    """
    sources_all = matrix.entries["source"].to_numpy()
    default = np.flatnonzero(np.isin(sources_all, list(DEFAULT_SOURCES)))
    pool = default if len(default) else np.arange(len(matrix.entries))
    selected = png_selection(matrix, limit, pool)
    shown_columns = min(len(matrix.columns), PNG_MAX_COLUMNS)
    codes = matrix.codes[selected][:, :shown_columns].astype(np.int64).T  # columns down, entries across
    n_rows, n_entries = codes.shape
    sources = sources_all[selected]
    lists = matrix.entries["list_name"].to_numpy()[selected]
    entry_ids = matrix.entries["entry_id"].to_numpy()[selected]
    group_starts = [i for i in range(n_entries)
                    if i == 0 or (sources[i], lists[i]) != (sources[i - 1], lists[i - 1])]
    seen = set(np.unique(codes).tolist())
    legend = [(v, COLOURS[v]) for i, v in enumerate(VERDICT_NAMES) if i in seen]
    if NOT_RUN in seen:
        legend.append((f"not run ({NOT_RUN_MARK})", NOT_RUN_COLOUR))
    failing_codes = [i for i, v in enumerate(VERDICT_NAMES) if v not in PASSING]
    marked = np.argwhere(np.isin(codes.T, failing_codes))  # (entry, row) pairs, in matrix order
    labels = matrix.labels[:shown_columns]
    position = {int(e): k for k, e in enumerate(selected.tolist())}
    waived_cells = {(position[c.entry], c.column_code) for c in (answer.cells if answer else [])
                    if c.finding and c.entry in position and 0 <= c.column_code < shown_columns}
    marks = [(int(r), int(e)) for e, r in marked.tolist()]
    waived = [(e, r) in waived_cells for r, e in marks]
    # The numbers name entries (the list under the grid gives each one's columns and verdicts).
    numbered_entries = list(dict.fromkeys(e for _, e in marks))[:PNG_MAX_MARKS]
    number_of = {e: k + 1 for k, e in enumerate(numbered_entries)}
    mark_labels = []
    for e in numbered_entries:
        cells = [(r, w) for (r, e2), w in zip(marks, waived) if e2 == e]
        text = "; ".join(f"{labels[r]}: {VERDICT_NAMES[codes[r, e]]}" + (" (waived)" if w else "") for r, w in cells)
        mark_labels.append(_shorten(_png_text(f"{number_of[e]}. {entry_ids[e]} [{text}]"), 110))
    unlisted = sum(1 for _, e in marks if e not in number_of)
    if unlisted:
        mark_labels.append(f"… {unlisted} more failing cells marked (see matrix.md)")
    total = len(matrix.entries)
    what = f"{len(pool)} entries x {len(matrix.columns)} columns"
    if len(pool) < total:
        what += f" (default sources; {total - len(pool)} more entries in matrix.html)"
    if n_entries < len(pool):
        what += f"; {n_entries} shown, failing entries first"
    if shown_columns < len(matrix.columns):
        what += f"; the first {shown_columns} columns shown"
    n_waived = sum(waived)
    marked_parts = ([f"x failing ({len(marks) - n_waived})"] if len(marks) > n_waived else []) + (
        [f"o waived by a known finding ({n_waived})"] if n_waived else [])
    if marked_parts:
        what += "; " + ", ".join(marked_parts)
    if answer is not None:
        title = _png_text(f"{answer.title}") + "\n" + _png_text(f"{answer.word}: {answer.meaning}. {what}")
    else:
        title = f"detconf: {what}"
    label_w = 0.3 + max((len(s) for s in labels), default=8) * 0.07
    cell_w = min(0.12, (PNG_MAX_SIZE[0] - label_w - 0.4) / max(n_entries, 1))
    cell_h = min(0.24, 4.0 / max(n_rows, 1))
    number_w = [(len(str(number_of[e])) * 0.05 + 0.03) / cell_w for e in numbered_entries]
    max_lanes = 4
    lanes = _lanes([float(e) for e in numbered_entries], number_w, max_lanes)
    numbers = [(e, lane, number_of[e]) for e, lane in zip(numbered_entries, lanes)]
    lanes_used = max([lane + 1 for lane in lanes], default=0)
    group_h = 0.15 + min(30, max((len(f"{sources[i]} · {lists[i]}") for i in group_starts), default=0)) * 0.055
    two = len(mark_labels) > 12
    marks_h = 0.13 * (((len(mark_labels) + 1) // 2) if two else len(mark_labels)) + (0.2 if mark_labels else 0)
    numbers_h = 0.14 * lanes_used
    legend_h = 0.2 * ((len(legend) + 2 + 5) // 6) + 0.15
    width = max(8.0, label_w + n_entries * cell_w + 0.4)
    height = min(PNG_MAX_SIZE[1], 0.55 + group_h + n_rows * cell_h + numbers_h + legend_h + marks_h)
    return {
        "codes": codes,
        "palette": [COLOURS[v] for v in VERDICT_NAMES] + [NOT_RUN_COLOUR],
        "row_labels": [_png_text(label) for label in labels],
        "entries": [_png_text(e) for e in entry_ids],
        "group_starts": group_starts,
        "group_labels": [_shorten(_png_text(f"{sources[i]} · {lists[i]}"), 30) for i in group_starts],
        "marks": marks,
        "waived": waived,
        "numbers": numbers,
        "mark_labels": mark_labels,
        "two_columns": two,
        "numbered": len(numbered_entries),
        "legend": legend,
        "title": title,
        "figsize": (round(width, 3), round(height, 3)),
        "layout": {"label_w": label_w, "group_h": group_h, "cell_w": cell_w, "cell_h": cell_h, "marks_h": marks_h,
                   "numbers_h": numbers_h, "legend_h": legend_h},
    }


def write_png(matrix: Matrix, out: Path, limit: int = PNG_MAX_ENTRIES, answer: Answer | None = None) -> None:
    """``matrix.png``: the heatmap of :func:`png_spec`."""
    from detconf.reports.picture import draw

    draw(png_spec(matrix, limit, answer), str(out / "matrix.png"))
