"""``matrix.html``: one self-contained page that works offline (inline CSS and script, no
network): the answer first, then every cell in a table that sorts and filters by verdict,
device, mode, compile setting, source and text, each cell opening its evidence and the command
that runs it again; then the runs, the legend, the counts per column and the matrix, whose
cells link to their evidence.

Everything from the results (sentences, ops, messages, environment strings) is HTML-escaped
(jinja2's autoescape, markupsafe where rows are joined in Python), and nothing varies between
builds of the same input (no timestamps, no random ids, rows in matrix order). Beyond
:data:`HTML_MAX_CELLS` cells the table lists the failing and missing cells only (each still
with its evidence) and the matrix cells are plain: the page stays a page.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from detconf.vocabulary import COMPILERS, MODES
from detconf.reports.answer import Answer, answer_for, cell_facts, read_details
from detconf.reports.matrix import (
    COLOURS, DARK_VERDICTS, HEADINGS, NOT_RUN, NOT_RUN_COLOUR, NOT_RUN_MARK, VERDICT_NAMES, Matrix, describe_run,
)
from detconf.reports.ordering import device_key
from detconf.reports.records import PASSING, VERDICTS
from detconf.reports.results import Results
from detconf.reports.safe import one_line, plain_text

#: Up to this many cells, every cell is in the cells table with its evidence.
HTML_MAX_CELLS = 20_000
#: Longest reproducer shown per cell, in characters.
REPRO_CHARS = 4_000

# The script is the page's own (no library): it filters and sorts the rows of the cells table
# and opens a cell's evidence when a matrix cell (a link to it) is followed.
_SCRIPT = """\
(function () {
  "use strict";
  var table = document.getElementById("cells");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var filters = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
  var shown = document.getElementById("shown");
  var matrixRows = Array.prototype.slice.call(document.querySelectorAll("table.matrix tbody tr[data-source]"));
  function value(el) { return el.value.toLowerCase(); }
  function apply() {
    var want = {};
    filters.forEach(function (el) { want[el.getAttribute("data-filter")] = value(el); });
    var count = 0;
    rows.forEach(function (row) {
      var ok = true;
      Object.keys(want).forEach(function (key) {
        var w = want[key];
        if (!w || !ok) { return; }
        if (key === "text") { ok = row.getAttribute("data-text").indexOf(w) >= 0; }
        else { ok = row.getAttribute("data-" + key) === w; }
      });
      row.hidden = !ok;
      if (ok) { count += 1; }
    });
    shown.textContent = String(count);
    matrixRows.forEach(function (row) {
      var ok = (!want.source || row.getAttribute("data-source") === want.source)
        && (!want.text || row.getAttribute("data-text").indexOf(want.text) >= 0);
      row.hidden = !ok;
    });
  }
  filters.forEach(function (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); });
  function key(row, column) {
    var text = row.cells[column].getAttribute("data-sort") || row.cells[column].textContent;
    var number = Number(text);
    return text !== "" && !isNaN(number) ? [0, number, ""] : [1, 0, text.toLowerCase()];
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
    if (!th.hasAttribute("data-sortable")) { return; }
    th.tabIndex = 0;
    th.addEventListener("click", function () {
      var descending = th.getAttribute("aria-sort") === "ascending";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      var order = rows.map(function (row, index) { return [key(row, column), index, row]; });
      order.sort(function (a, b) {
        for (var k = 0; k < 3; k += 1) {
          if (a[0][k] < b[0][k]) { return descending ? 1 : -1; }
          if (a[0][k] > b[0][k]) { return descending ? -1 : 1; }
        }
        return a[1] - b[1];
      });
      order.forEach(function (item) { body.appendChild(item[2]); });
    });
  });
  function open() {
    var id = window.location.hash.slice(1);
    var row = id ? document.getElementById(id) : null;
    if (!row || row.tagName !== "TR") { return; }
    row.hidden = false;
    var details = row.querySelector("details");
    if (details) { details.open = true; }
  }
  window.addEventListener("hashchange", open);
  open();
  apply();
}());
"""

_STYLE = """\
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; }
th { background: #f5f5f5; text-align: left; }
th[data-sortable] { cursor: pointer; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
table.matrix td.v { text-align: center; white-space: nowrap; }
table.matrix td.v a { color: inherit; }
table.matrix tr.group th { background: #e8eaf6; }
.answer { font-size: 16px; padding: 0.6em 1em; border-radius: 4px; display: inline-block; }
.answer.pass { background: #e8f5e9; border: 1px solid #43a047; }
.answer.fail { background: #ffebee; border: 1px solid #e53935; }
code.rerun { white-space: pre-wrap; word-break: break-all; }
pre { white-space: pre-wrap; max-width: 100em; background: #fafafa; border: 1px solid #eee; padding: 4px; }
.controls { margin: 0.5em 0 1em; }
.controls label { margin-right: 1em; }
tr:target { outline: 2px solid #1e88e5; }
details > summary { cursor: pointer; }
"""

_HTML_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>detconf compatibility matrix</title>
<style>
{{ style }}{% for name, colour, dark in colours %}.v-{{ name }} { background: {{ colour }};{% if dark %} color: #fff;{% endif %} }
{% endfor %}.v-not-run { background: {{ not_run_colour }}; color: #999; }
</style>
</head>
<body>
<h1>detconf compatibility matrix</h1>
<p class="answer {{ 'pass' if answer.passed else 'fail' }}"><strong>{{ headline_word }}</strong>:{{ headline_rest }}</p>
<table class="verdicts">
<tr>{% for v in answer.counts %}<th class="v-{{ v }}">{{ v }}</th>{% endfor %}</tr>
<tr>{% for n in answer.counts.values() %}<td>{{ n }}</td>{% endfor %}</tr>
</table>
{% if answer.cells %}<h2>Failing and missing cells</h2>
<p>{{ answer.cells|length }} cells, in matrix order (&#10007; failing, ~ failing but waived by a known finding the run recorded).</p>
<table class="failing">
<tr><th></th><th>entry</th><th>column</th><th>verdict</th><th>evidence</th><th>known finding</th><th>rerun</th></tr>
{% for c in answer.cells %}<tr><td>{{ '~' if c.finding else '&#10007;'|safe }}</td><td><a href="#c{{ c.row }}">{{ c.entry_id }}</a>{% if c.phase != 'program' %} &lt;{{ c.phase }}&gt;{% endif %} <small>({{ c.source }})</small></td><td>{{ c.column }}</td><td class="v-{{ c.verdict }}">{{ c.verdict }}</td><td>{{ c.evidence }}</td><td>{{ c.finding }}</td><td><code class="rerun">{{ c.rerun }}</code></td></tr>
{% endfor %}</table>
{% endif %}<h2>Cells</h2>
<p>{{ cells_note }}</p>
<div class="controls">
{% for key, label, options in selects %}<label>{{ label }} <select data-filter="{{ key }}"><option value="">all</option>{% for o in options %}<option value="{{ o|lower }}">{{ o }}</option>{% endfor %}</select></label>
{% endfor %}<label>text <input type="search" data-filter="text" placeholder="entry, op, evidence"></label>
<span><span id="shown">{{ cell_rows|length }}</span> of {{ cell_rows|length }} cells shown</span>
</div>
<table id="cells">
<thead><tr><th data-sortable>source</th><th data-sortable>entry</th><th data-sortable>phase</th>{% if multi_torch %}<th data-sortable>torch</th>{% endif %}<th data-sortable>device</th><th data-sortable>mode</th>{% if shows_compile %}<th data-sortable>compile</th>{% endif %}<th data-sortable>verdict</th><th>evidence and rerun</th></tr></thead>
<tbody>
{{ cells_body }}</tbody>
</table>
{% if runs %}<h2>Runs</h2>
<table class="runs">
<tr>{% for k in run_fields %}<th>{{ k }}</th>{% endfor %}</tr>
{% for r in runs %}<tr>{% for k in run_fields %}<td>{{ r[k] }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% endif %}<h2>Legend</h2>
<table class="legend">
<tr><th>verdict</th><th>passing</th><th>meaning</th></tr>
{% for name, meaning, passing in legend %}<tr><td class="v-{{ name }}">{{ name }}</td><td>{{ passing }}</td><td>{{ meaning }}</td></tr>
{% endfor %}<tr><td class="v-not-run">{{ not_run }}</td><td></td><td>not run on that device/mode</td></tr>
</table>
<h2>Counts per column</h2>
<table class="counts">
<tr><th>verdict</th>{% for c in counts %}<th>{{ c.column }}</th>{% endfor %}</tr>
{% for v in count_verdicts %}<tr><td class="v-{{ v }}">{{ v }}</td>{% for c in counts %}<td>{{ c.counts[v] }}</td>{% endfor %}</tr>
{% endfor %}<tr><td class="v-not-run">not run ({{ not_run }})</td>{% for c in counts %}<td>{{ c.not_run }}</td>{% endfor %}</tr>
<tr><th>passing / run</th>{% for c in counts %}<th>{{ c.passing }}/{{ c.total }}</th>{% endfor %}</tr>
</table>
<h2>Matrix</h2>
<p>{{ n_entries }} entries &times; {{ columns|length }} columns, torch's own docs first; {{ not_run }} = not run on that device/mode.{% if linked %} A cell opens its evidence.{% endif %}</p>
<table class="matrix">
<thead>
{% for level in header_levels %}<tr>{% if loop.last %}{% for h in entry_headings %}<th>{{ h }}</th>{% endfor %}{% else %}<th colspan="{{ entry_headings|length }}"></th>{% endif %}{% for label, span in level %}<th{% if span > 1 %} colspan="{{ span }}"{% endif %}>{{ label }}</th>{% endfor %}</tr>
{% endfor %}</thead>
<tbody>
{{ body }}</tbody>
</table>
<script>
{{ script }}</script>
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


def _matrix_body(matrix: Matrix, entry_cols: list[str], links: np.ndarray | None) -> str:
    """The rows of the matrix table: a group row at each (source, list), then one row per entry;
    ``links`` (entries x columns): the results row of each cell whose evidence the page holds
    (-1: none). Without links a pre-rendered cell per verdict is joined (a million cells)."""
    from markupsafe import escape

    entries = matrix.entries
    cell_html = np.array([f'<td class="v v-{escape(v)}">{escape(v)}</td>' for v in VERDICT_NAMES]
                         + [f'<td class="v v-not-run">{escape(NOT_RUN_MARK)}</td>'], dtype=object)
    colspan = len(entry_cols) + len(matrix.columns)
    attrs = zip(*(entries[c].tolist() for c in entry_cols))
    groups = list(zip(entries["source"].tolist(), entries["list_name"].tolist()))
    texts = [" ".join(one_line(v) for v in row).lower()
             for row in zip(*(entries[c].tolist() for c in ("entry_id", "op", "sentence")))]
    parts = []
    previous = None
    for i, (group, row, codes) in enumerate(zip(groups, attrs, matrix.codes)):
        if group != previous:
            parts.append(f'<tr class="group"><th colspan="{colspan}">{escape(f"{group[0]} · {group[1]}")}</th></tr>\n')
            previous = group
        if links is None:
            cells = "".join(cell_html[codes])
        else:
            cells = "".join(
                f'<td class="v v-{VERDICT_NAMES[c]}"><a href="#c{r}">{VERDICT_NAMES[c]}</a></td>'
                if c != NOT_RUN and r >= 0 else cell_html[c] for c, r in zip(codes.tolist(), links[i].tolist()))
        parts.append(f'<tr data-source="{escape(group[0].lower())}" data-text="{escape(texts[i])}">'
                     + "".join(f"<td>{escape(a)}</td>" for a in row) + cells + "</tr>\n")
    return "".join(parts)


def _evidence_html(row: int, rec: dict, facts: tuple[str, str, str]) -> str:
    """A cell's evidence: the line of the answer, the known finding, the rerun command, the
    example and the reproducer the run recorded."""
    from markupsafe import escape

    evidence, finding, rerun = facts
    detail = rec.get("detail") if isinstance(rec.get("detail"), dict) else {}
    parts = [f"<p>{escape(evidence)}</p>"]
    if finding:
        parts.append(f"<p>known finding: {escape(finding)}</p>")
    parts.append(f'<p>rerun: <code class="rerun">{escape(rerun)}</code></p>')
    example = detail.get("example")
    if isinstance(example, str) and example:
        parts.append(f"<p>example: {escape(one_line(example))}</p>")
    repro = detail.get("repro")
    if isinstance(repro, str) and repro:
        text = repro if len(repro) <= REPRO_CHARS else repro[:REPRO_CHARS] + "\n…"
        parts.append(f"<pre>{escape(text)}</pre>")
    return "<details><summary>evidence</summary>" + "".join(parts) + "</details>"


def _cells_body(matrix: Matrix, results: Results, rows: list[int], display: np.ndarray,
                show_torch: bool, show_compile: bool) -> str:
    """One table row per results row in ``rows``: what filters and sorting read, and the evidence."""
    from markupsafe import escape

    details = read_details(results, rows)
    facts = cell_facts(results, rows, details)
    names = ("source", "entry_id", "phase", "torch_version", "device", "mode", "compile", "verdict")
    values = {n: results.column(n) for n in names}
    entries = matrix.entries
    parts = []
    for r in rows:
        v = {n: values[n][r].as_py() for n in names}
        e = int(display[r])
        text = " ".join([v["entry_id"], one_line(entries["op"].iloc[e]), facts[r][0], facts[r][1]]).lower()
        cells = [v["source"], v["entry_id"], v["phase"]] + ([v["torch_version"]] if show_torch else []) + [
            v["device"], v["mode"]] + ([v["compile"]] if show_compile else [])
        parts.append(
            f'<tr id="c{r}" data-verdict="{escape(v["verdict"])}" data-device="{escape(v["device"].lower())}" '
            f'data-mode="{escape(v["mode"])}" data-compile="{escape(v["compile"])}" '
            f'data-source="{escape(v["source"].lower())}" data-text="{escape(one_line(text))}">'
            + "".join(f"<td>{escape(c)}</td>" for c in cells)
            + f'<td class="v-{escape(v["verdict"])}">{escape(v["verdict"])}</td>'
            + f"<td>{_evidence_html(r, details.get(r) or {}, facts[r])}</td></tr>\n")
    return "".join(parts)


def source_firsts(matrix: Matrix) -> list[int]:
    """The first matrix row of each source, in display order."""
    sources = matrix.entries["source"].tolist()
    return [i for i, s in enumerate(sources) if i == 0 or s != sources[i - 1]]


def write_html(matrix: Matrix, results: Results, out: Path, answer: Answer | None = None) -> None:
    import jinja2
    from markupsafe import Markup

    answer = answer or answer_for(matrix, results)
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

    display = matrix.display_rank(results.entry_codes)
    every = len(results) <= HTML_MAX_CELLS
    if every:
        rows = sorted(range(len(results)), key=lambda r: (int(display[r]), int(results.column_codes[r])))
        links = np.full(matrix.codes.shape, -1, dtype=np.int64)
        links[display, results.column_codes] = np.arange(len(results))
        note = "Every cell; choose a verdict, device, mode or source, or type to filter; click a heading to sort."
    else:
        rows = [c.row for c in answer.cells[:HTML_MAX_CELLS]]
        links = None
        note = (f"The failing and missing cells (the results hold {len(results)} cells: results.csv has "
                "every one); choose a verdict, device, mode or source, or type to filter; click a heading to sort.")
    values = {n: set(results.column(n).to_pylist()) for n in ("device", "mode", "compile", "source")}
    values = {"device": sorted(values["device"], key=device_key), "mode": [m for m in MODES if m in values["mode"]],
              "compile": [c for c in COMPILERS if c in values["compile"]],
              "source": [matrix.entries["source"].iloc[i] for i in source_firsts(matrix)]}
    selects = [("verdict", "verdict", [v for v in VERDICTS if v in answer.counts]),
               ("device", "device", values["device"]), ("mode", "mode", values["mode"])]
    if matrix.shows_compile:
        selects.append(("compile", "compile", values["compile"]))
    selects.append(("source", "source", values["source"]))

    counts = matrix.column_counts()
    runs = [describe_run(r) for r in results.runs]
    word, rest = answer.headline.split(":", 1)
    env = jinja2.Environment(autoescape=True, keep_trailing_newline=True)
    page = env.from_string(_HTML_TEMPLATE).render(
        style=Markup(_STYLE),
        script=Markup(_SCRIPT),
        colours=[(v, COLOURS[v], v in DARK_VERDICTS) for v in VERDICTS],
        not_run_colour=NOT_RUN_COLOUR,
        not_run=NOT_RUN_MARK,
        answer=answer,
        headline_word=word,
        headline_rest=rest,
        selects=selects,
        cells_note=note,
        cell_rows=rows,
        multi_torch=matrix.multi_torch,
        shows_compile=matrix.shows_compile,
        cells_body=Markup(_cells_body(matrix, results, rows, display, matrix.multi_torch, matrix.shows_compile)),
        runs=runs,
        run_fields=[k for k in (runs[0] if runs else {}) if any(r[k] for r in runs)],
        legend=[(v, m, "yes" if v in PASSING else "no") for v, m in VERDICTS.items()],
        counts=counts,
        count_verdicts=[v for v in VERDICTS if any(c["counts"][v] for c in counts)],
        n_entries=len(matrix.entries),
        columns=cols,
        linked=links is not None,
        header_levels=header_levels,
        entry_headings=[HEADINGS[c] for c in entry_cols],
        body=Markup(_matrix_body(matrix, entry_cols, links)),
    )
    # Whatever reached the page, no escape sequence, bidi override or zero-width character does.
    (out / "matrix.html").write_text(plain_text(page), encoding="utf-8")
