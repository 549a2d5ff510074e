"""The compatibility matrix: one row per documented entry, one column per (torch,) device, mode
(, compile setting).

``Matrix.from_results`` pivots merged result rows; the ``write_*`` functions render it.
Cells hold verdict strings; a cell that was not run is ``None`` and is shown empty or as
``MISSING``, never as a verdict. The writers work column-wise or per entry, never per cell in
Python, so a matrix of a million cells is written in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from reports.load import DEFAULT_COMPILE, PASSING, ROW_FIELDS, VERDICTS, Results
from reports.safe import csv_arrow, csv_text, holds_any, md_cell, one_line

MISSING = "—"
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
MISSING_COLOUR = "#ffffff"
_VERDICT_OR_NONE = np.array(list(VERDICT_NAMES) + [None], dtype=object)
# Verdicts whose colour is dark enough to need white text.
_DARK = frozenset({"conforms", "nondeterministic", "undocumented-nondeterminism", "wrong-result",
                   "violated", "missing-raise", "undocumented-raise", "not-reached", "harness-error", "missing",
                   "nondeterminism-seen"})

#: Entry columns shown with the matrix, in order.
ENTRY_COLUMNS = ("source", "doc_version", "list_name", "entry_id", "phase", "op", "promise", "sentence")
_HEADINGS = {"source": "source", "doc_version": "doc version", "list_name": "list",
             "entry_id": "entry", "phase": "phase", "op": "op", "promise": "promise", "sentence": "sentence"}

#: Beyond this many entries the picture shows a selection (failing entries first).
PNG_MAX_ENTRIES = 200
#: Beyond this many columns the picture shows the first ones.
PNG_MAX_COLUMNS = 200
#: Beyond this many columns, narrower ones.
PNG_WIDE_COLUMNS = 24


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
        return any(c[3] != DEFAULT_COMPILE for c in self.columns)

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
        return cls(entries=results.entries, columns=list(results.columns), codes=codes,
                   device_names=device_names, d2d=d2d)

    # ------------------------------------------------------------------ derived frames

    def wide(self, missing: str | None = None) -> pd.DataFrame:
        """Entry columns followed by one column per label; missing cells -> ``missing``."""
        frame = self.entries[list(ENTRY_COLUMNS)].copy()
        cells = self.cells if missing is None else np.where(self.codes == NOT_RUN, missing, self.cells)
        verdicts = pd.DataFrame(cells, columns=self.labels, index=frame.index, dtype=object)
        return pd.concat([frame, verdicts], axis=1)

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

def write_csv(matrix: Matrix, results: Results, out: Path) -> None:
    """``matrix.csv`` (one row per entry) and ``results.csv`` (one row per kept result row)."""
    write_matrix_csv(matrix, out)
    write_results_csv(results, out / "results.csv")


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
    from tabulate import tabulate

    if formats is None:
        rows = [[md_cell(v) for v in row] for row in rows]
    else:
        rows = [[f(v) for f, v in zip(formats, row)] for row in rows]
    return tabulate(rows, headers=[md_cell(h) for h in headers], tablefmt="github",
                    disable_numparse=True)


def _md_column(header: str, cells: list[str]) -> tuple[str, str, list[str]]:
    """One column of a GitHub Markdown table, as tabulate lays it out: the header's piece, the
    rule's piece and each cell's piece (``" text |"``; a row is ``"|"`` and its pieces).

    tabulate lays out each column on its own: cells stripped, the column as wide as its widest
    cell and at least its header plus two, everything left-aligned. For printable ASCII that
    is done here (the width of such text is its length); other text goes through tabulate,
    which measures wide and combining characters."""
    if header.isascii() and header.isprintable() and all(c.isascii() and c.isprintable() for c in cells):
        stripped = [c.strip() for c in cells]
        width = max(len(header) + 2, max(map(len, stripped), default=0))
        return f" {header.ljust(width)} |", "-" * (width + 2) + "|", [f" {c.ljust(width)} |" for c in stripped]
    from tabulate import tabulate

    lines = tabulate([[c] for c in cells], headers=[header], tablefmt="github", disable_numparse=True).split("\n")
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
    words = list(VERDICT_NAMES) + [MISSING]
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


def write_markdown(matrix: Matrix, results: Results, out: Path) -> None:
    entry_cols = [c for c in ENTRY_COLUMNS if (c != "doc_version" or matrix.show_doc_version())
                  and (c != "phase" or matrix.show_phase())]
    counts = matrix.column_counts()
    runs = [describe_run(r) for r in results.runs]
    parts = ["# detconf compatibility matrix", ""]
    if runs:
        fields = [k for k in runs[0] if any(r[k] for r in runs)]
        parts += ["## Runs", "", _md_table([[r[k] for k in fields] for r in runs], fields), ""]
    parts += [
        "## Matrix", "",
        f"{len(matrix.entries)} entries × {len(matrix.columns)} columns; "
        f"`{MISSING}` = not run on that device/mode.", "",
        _md_matrix(
            list(matrix.entries[entry_cols].itertuples(index=False, name=None)),
            [_HEADINGS[c] for c in entry_cols],
            [_md_code if c in ("entry_id", "op") else md_cell for c in entry_cols],
            matrix.codes, matrix.labels,
        ),
        "",
        "## Counts per column", "",
    ]
    rows = [[v] + [str(c["counts"][v]) for c in counts] for v in VERDICTS
            if any(c["counts"][v] for c in counts)]
    rows.append([f"not run ({MISSING})"] + [str(c["not_run"]) for c in counts])
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
    legend.append([MISSING, "", "not run on that device/mode"])
    parts += [_md_table(legend, ["verdict", "passing", "meaning"]), ""]
    (out / "matrix.md").write_text("\n".join(parts), encoding="utf-8")


# The page is one jinja2 template with autoescape on: every text from the results (sentences,
# ops, environment strings) is HTML-escaped, and nothing in it varies between builds of the
# same input (no timestamps, no random ids, rows in matrix order). The rows of the matrix are
# rendered by _html_body (escaped with markupsafe, as the template escapes): a template loop
# over a million cells takes seconds, joining one pre-rendered cell per verdict does not.
_HTML_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>detconf compatibility matrix</title>
<style>
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; }
th { background: #f5f5f5; text-align: left; }
table.matrix td.v { text-align: center; white-space: nowrap; }
table.matrix tr.group th { background: #e8eaf6; }
{% for name, colour, dark in colours %}.v-{{ name }} { background: {{ colour }};{% if dark %} color: #fff;{% endif %} }
{% endfor %}.v-not-run { background: {{ missing_colour }}; color: #999; }
</style>
</head>
<body>
<h1>detconf compatibility matrix</h1>
{% if runs %}<h2>Runs</h2>
<table class="runs">
<tr>{% for k in run_fields %}<th>{{ k }}</th>{% endfor %}</tr>
{% for r in runs %}<tr>{% for k in run_fields %}<td>{{ r[k] }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% endif %}<h2>Legend</h2>
<table class="legend">
<tr><th>verdict</th><th>passing</th><th>meaning</th></tr>
{% for name, meaning, passing in legend %}<tr><td class="v-{{ name }}">{{ name }}</td><td>{{ passing }}</td><td>{{ meaning }}</td></tr>
{% endfor %}<tr><td class="v-not-run">{{ missing }}</td><td></td><td>not run on that device/mode</td></tr>
</table>
<h2>Counts per column</h2>
<table class="counts">
<tr><th>verdict</th>{% for c in counts %}<th>{{ c.column }}</th>{% endfor %}</tr>
{% for v in count_verdicts %}<tr><td class="v-{{ v }}">{{ v }}</td>{% for c in counts %}<td>{{ c.counts[v] }}</td>{% endfor %}</tr>
{% endfor %}<tr><td class="v-not-run">not run ({{ missing }})</td>{% for c in counts %}<td>{{ c.not_run }}</td>{% endfor %}</tr>
<tr><th>passing / run</th>{% for c in counts %}<th>{{ c.passing }}/{{ c.total }}</th>{% endfor %}</tr>
</table>
<h2>Matrix</h2>
<p>{{ n_entries }} entries &times; {{ columns|length }} columns; {{ missing }} = not run on that device/mode.</p>
<table class="matrix">
<thead>
{% for level in header_levels %}<tr>{% if loop.last %}{% for h in entry_headings %}<th>{{ h }}</th>{% endfor %}{% else %}<th colspan="{{ entry_headings|length }}"></th>{% endif %}{% for label, span in level %}<th{% if span > 1 %} colspan="{{ span }}"{% endif %}>{{ label }}</th>{% endfor %}</tr>
{% endfor %}</thead>
<tbody>
{{ body }}</tbody>
</table>
</body>
</html>
"""

#: Entry columns of the HTML matrix; source and list head each group of rows instead.
_HTML_ENTRY_COLUMNS = ("entry_id", "op", "promise", "sentence")


def _spans(labels: list) -> list[tuple[str, int]]:
    """Runs of equal consecutive header labels as (label, colspan)."""
    out: list[list] = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    return [(label, span) for label, span in out]


def _html_body(matrix: Matrix, entry_cols: list[str]) -> str:
    """The rows of the matrix table: a group row at each (source, list), then one row per entry."""
    from markupsafe import escape

    entries = matrix.entries
    cell_html = np.array([f'<td class="v v-{escape(v)}">{escape(v)}</td>' for v in VERDICT_NAMES]
                         + [f'<td class="v v-not-run">{escape(MISSING)}</td>'], dtype=object)
    colspan = len(entry_cols) + len(matrix.columns)
    attrs = zip(*(entries[c].tolist() for c in entry_cols))
    groups = list(zip(entries["source"].tolist(), entries["list_name"].tolist()))
    parts = []
    previous = None
    for group, row, codes in zip(groups, attrs, matrix.codes):
        if group != previous:
            parts.append(f'<tr class="group"><th colspan="{colspan}">{escape(f"{group[0]} · {group[1]}")}</th></tr>\n')
            previous = group
        parts.append("<tr>" + "".join(f"<td>{escape(a)}</td>" for a in row) + "".join(cell_html[codes]) + "</tr>\n")
    return "".join(parts)


def write_html(matrix: Matrix, results: Results, out: Path) -> None:
    import jinja2
    from markupsafe import Markup

    entry_cols = list(_HTML_ENTRY_COLUMNS)
    if matrix.show_phase():
        entry_cols.insert(1, "phase")
    if matrix.show_doc_version():
        entry_cols.insert(0, "doc_version")

    cols = matrix.columns
    header_levels = []
    if matrix.multi_torch:
        header_levels.append(_spans([f"torch {t}" for t, _, _, _ in cols]))
    # A device label spans its modes (within one torch version), a mode its compile settings.
    header_levels.append([(pair[1], span) for pair, span in _spans([(t, d) for t, d, _, _ in cols])])
    if matrix.shows_compile:
        header_levels.append([(key[2], span) for key, span in _spans([(t, d, m) for t, d, m, _ in cols])])
        header_levels.append([(c, 1) for _, _, _, c in cols])
    else:
        header_levels.append([(m, 1) for _, _, m, _ in cols])

    counts = matrix.column_counts()
    runs = [describe_run(r) for r in results.runs]
    env = jinja2.Environment(autoescape=True, keep_trailing_newline=True)
    page = env.from_string(_HTML_TEMPLATE).render(
        colours=[(v, COLOURS[v], v in _DARK) for v in VERDICTS],
        missing_colour=MISSING_COLOUR,
        missing=MISSING,
        runs=runs,
        run_fields=[k for k in (runs[0] if runs else {}) if any(r[k] for r in runs)],
        legend=[(v, m, "yes" if v in PASSING else "no") for v, m in VERDICTS.items()],
        counts=counts,
        count_verdicts=[v for v in VERDICTS if any(c["counts"][v] for c in counts)],
        n_entries=len(matrix.entries),
        columns=cols,
        header_levels=header_levels,
        entry_headings=[_HEADINGS[c] for c in entry_cols],
        body=Markup(_html_body(matrix, entry_cols)),
    )
    (out / "matrix.html").write_text(page, encoding="utf-8")


def png_selection(matrix: Matrix, limit: int = PNG_MAX_ENTRIES) -> np.ndarray:
    """Indices of the entries drawn: all when they fit, else failing entries first, then the
    rest in matrix order, up to ``limit``, shown in matrix order."""
    n = len(matrix.entries)
    if n <= limit:
        return np.arange(n)
    failing = np.flatnonzero(matrix.failing_rows())
    if len(failing) >= limit:
        return failing[:limit]
    others = np.flatnonzero(~matrix.failing_rows())[: limit - len(failing)]
    return np.sort(np.concatenate([failing, others]))


def _png_text(value) -> str:
    """A label for the picture: one line, control characters and tabs shown as ``?``."""
    return one_line(value).replace("\t", "?")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def png_spec(matrix: Matrix, limit: int = PNG_MAX_ENTRIES) -> dict:
    """What ``matrix.png`` shows, as plain data for :func:`reports.picture.draw`.

    Entries down, device/mode (/compile) across, one colour per verdict. Beyond ``limit``
    entries a selection (:func:`png_selection`: failing entries first) and beyond
    PNG_MAX_COLUMNS columns the first ones, and the title says so -- a picture of thousands of
    rows cannot be read, the HTML and CSV hold every row. Columns are 0.45 inch, 0.2 beyond
    PNG_WIDE_COLUMNS (the picture's cost grows with its pixels).
    """
    selected = png_selection(matrix, limit)
    shown_columns = min(len(matrix.columns), PNG_MAX_COLUMNS)
    codes = matrix.codes[selected][:, :shown_columns].astype(np.int64)
    n_rows, n_cols = codes.shape
    sources = matrix.entries["source"].to_numpy()[selected]
    lists = matrix.entries["list_name"].to_numpy()[selected]
    group_starts = [i for i in range(n_rows)
                    if i == 0 or (sources[i], lists[i]) != (sources[i - 1], lists[i - 1])]
    seen = set(np.unique(codes).tolist())
    legend = [(v, COLOURS[v]) for i, v in enumerate(VERDICT_NAMES) if i in seen]
    if NOT_RUN in seen:
        legend.append((f"not run ({MISSING})", MISSING_COLOUR))
    total = len(matrix.entries)
    title = f"detconf compatibility matrix: {total} entries x {len(matrix.columns)} columns"
    if n_rows < total:
        title += f"; {n_rows} shown (failing entries first, see matrix.html for all)"
    if shown_columns < len(matrix.columns):
        title += f"; the first {shown_columns} columns shown"
    return {
        "codes": codes,
        "palette": [COLOURS[v] for v in VERDICT_NAMES] + [MISSING_COLOUR],
        "labels": [_shorten(_png_text(s), 60) for s in matrix.entries["entry_id"].to_numpy()[selected]],
        "column_labels": [_png_text(label) for label in matrix.labels[:shown_columns]],
        "group_starts": group_starts,
        "group_labels": [_shorten(_png_text(f"{sources[i]} · {lists[i]}"), 40) for i in group_starts],
        "legend": legend,
        "legend_slots": len(VERDICTS) + 1,
        "title": title,
        "cell_w": 0.45 if n_cols <= PNG_WIDE_COLUMNS else 0.2,
    }


def write_png(matrix: Matrix, out: Path, limit: int = PNG_MAX_ENTRIES) -> None:
    """``matrix.png``: the heatmap of :func:`png_spec`."""
    from reports.picture import draw

    draw(png_spec(matrix, limit), str(out / "matrix.png"))
