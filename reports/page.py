"""``matrix.html``: one self-contained page that works offline (inline CSS and script, no
network). The first screen answers: the title and heading name the answer word, torch, the
devices, the sources, the suite's revision and the dates; the answer says what the word means and
links to the matrix; then one answer per (torch version, device) where there are several, the
cells per verdict with each verdict's meaning, the first failing cells, the matrix (its cells
link to their evidence), every cell in a table that filters and sorts, the counts per column,
the runs and the legend.

The cells table is data, not markup: its rows, their sort ranks and their evidence are one JSON
object in the page (``<`` ``>`` ``&`` written as JSON escapes, so nothing in it is markup), and
the page's script renders rows a batch at a time and a cell's evidence when it is opened, with
``textContent`` only. A page of 20,000 cells loads, filters and sorts in well under a second
(``benchmarks/bench_browser.py``). Everything else from the results is HTML-escaped (jinja2's
autoescape, markupsafe where rows are joined in Python), and nothing varies between builds of
the same input (no timestamps, no random ids, rows in matrix order). Beyond
:data:`HTML_MAX_CELLS` cells the table lists the failing and missing cells only (each still with
its evidence) and the matrix cells are plain: the page stays a page.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from detconf.vocabulary import COMPILERS, MODES
from detconf.reports.answer import ANSWER_WORDS, Answer, answer_for, cell_facts, part_answers, read_details
from detconf.reports.matrix import (
    COLOURS, HEADINGS, NOT_RUN, NOT_RUN_COLOUR, NOT_RUN_MARK, VERDICT_NAMES, Matrix, describe_run, source_order,
)
from detconf.reports.ordering import device_key, natural_key
from detconf.reports.records import PASSING, VERDICTS
from detconf.reports.results import Results
from detconf.reports.safe import one_line, plain_text

#: Up to this many cells, every cell is in the cells table with its evidence.
HTML_MAX_CELLS = 20_000
#: Longest reproducer shown per cell, in characters.
REPRO_CHARS = 4_000
#: Failing cells listed near the top (all of them are in the cells table).
FIRST_FAILING = 50
#: Text on the not-run mark (7:1 on white; WCAG AA asks 4.5:1).
NOT_RUN_TEXT = "#595959"
#: The background of each answer word's badge.
WORD_COLOURS = {"PASS": "#2e7d32", "PASS WITH WAIVERS": "#ef6c00", "FAIL": "#c62828", "NO VERDICT": "#757575"}


def luminance(colour: str) -> float:
    """WCAG relative luminance of ``#rrggbb``."""
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (one of them is always at least
    4.58:1, above WCAG AA's 4.5:1)."""
    return "#000000" if contrast(background, "#000000") >= contrast(background, "#ffffff") else "#ffffff"


# The script is the page's own (no library). The cells table's rows are in the JSON object
# ``cell-data``: the script keeps the positions that pass the filters in sort order, renders
# them a batch at a time (more as the list scrolls into view) and fills a cell's evidence when
# it is opened. A link to a cell (``#c<row>``) clears filters that hide it, saying so, and opens
# its evidence, also when it is followed a second time.
_SCRIPT = """\
(function () {
  "use strict";
  var holder = document.getElementById("cell-data");
  var table = document.getElementById("cells");
  if (!holder || !table) { return; }
  var data = JSON.parse(holder.textContent);
  var n = data.ids.length;
  var body = table.tBodies[0];
  var shown = document.getElementById("shown");
  var listed = document.getElementById("listed");
  var status = document.getElementById("status");
  var more = document.getElementById("more");
  var filters = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
  var matrixRows = Array.prototype.slice.call(document.querySelectorAll("table.matrix tbody tr[data-source]"));
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var position = {};
  var k;
  for (k = 0; k < n; k += 1) { position[data.ids[k]] = k; }
  var earlier = document.getElementById("earlier");
  var mholder = document.getElementById("matrix-data");
  var mdata = mholder ? JSON.parse(mholder.textContent) : null;
  var mbody = document.querySelector("table.matrix tbody");
  var mmore = document.getElementById("matrix-more");
  var sorted = null;
  var order = [];
  var first = 0;
  var rendered = 0;
  var mrows = [];
  var mdone = 0;
  var matrixKey = null;
  var BATCH = 100;
  var MBATCH = 25;

  function wanted() {
    var want = {};
    filters.forEach(function (el) {
      var key = el.getAttribute("data-filter"), w = el.value;
      if (!w) { return; }
      if (key === "text") { want.text = w.toLowerCase(); }
      else if (key === "verdict" && w === "(failing)") { want.failing = true; }
      else { want[key] = data.values[key].indexOf(w); }
    });
    return want;
  }
  function matches(p, want) {
    for (var key in want) {
      if (key === "text") { if (data.text[p].indexOf(want.text) < 0) { return false; } }
      else if (key === "failing") { if (!data.failing[data.codes.verdict[p]]) { return false; } }
      else if (data.codes[key][p] !== want[key]) { return false; }
    }
    return true;
  }
  function add(parent, tag, text, cls) {
    var el = document.createElement(tag);
    if (text !== null) { el.textContent = text; }
    if (cls) { el.className = cls; }
    parent.appendChild(el);
    return el;
  }
  function fill(details, p) {
    if (details.getAttribute("data-filled")) { return; }
    details.setAttribute("data-filled", "1");
    var e = data.evidence[p], s = data.strings;
    add(details, "p", s[e[0]], "");
    if (e[1]) { add(details, "p", "known finding: " + s[e[1]], ""); }
    var rerun = add(details, "p", "rerun: ", "");
    add(rerun, "code", s[e[2]], "rerun");
    if (e[3]) { add(details, "p", "example: " + s[e[3]], ""); }
    if (e[4]) { add(details, "pre", s[e[4]], ""); }
  }
  function makeRow(p) {
    var tr = document.createElement("tr");
    tr.id = "c" + data.ids[p];
    data.keys.forEach(function (key) {
      var v = data.values[key][data.codes[key][p]];
      add(tr, "td", v, key === "verdict" ? "v-" + v : "");
    });
    var details = add(add(tr, "td", null, ""), "details", null, "");
    add(details, "summary", "evidence", "");
    details.addEventListener("toggle", function () { if (details.open) { fill(details, p); } });
    return tr;
  }
  function renderUpTo(stop) {
    stop = Math.min(order.length, stop);
    if (stop > rendered) {
      var frag = document.createDocumentFragment();
      for (var i = rendered; i < stop; i += 1) { frag.appendChild(makeRow(order[i])); }
      body.appendChild(frag);
      rendered = stop;
    }
    listed.textContent = order.length ? (first + 1) + "\u2013" + rendered : "none";
    var left = order.length - rendered;
    more.hidden = left <= 0;
    more.textContent = "list " + Math.min(BATCH, left) + " more (" + left + " after these)";
    earlier.hidden = first <= 0;
    earlier.textContent = "list " + Math.min(BATCH, first) + " earlier (" + first + " before these)";
  }
  function showFrom(start, count) {
    body.textContent = "";
    first = rendered = Math.max(0, start);
    renderUpTo(first + count);
  }
  function renderEarlier() {
    var start = Math.max(0, first - BATCH);
    var frag = document.createDocumentFragment();
    for (var i = start; i < first; i += 1) { frag.appendChild(makeRow(order[i])); }
    body.insertBefore(frag, body.firstChild);
    first = start;
    renderUpTo(rendered);
  }
  function matrixRender(stop) {
    stop = Math.min(mrows.length, stop);
    var frag = document.createDocumentFragment();
    for (var i = mdone; i < stop; i += 1) {
      var r = mrows[i], tr = document.createElement("tr");
      if (r[0] === "g") {
        tr.className = "group";
        add(tr, "th", r[1], "").colSpan = mdata.width;
      } else {
        r[0].forEach(function (a) { add(tr, "td", a, ""); });
        for (var j = 0; j < r[3].length; j += 1) {
          var code = r[3][j], word = mdata.words[code];
          var td = add(tr, "td", null, "v v-" + (code === mdata.not_run ? "not-run" : word));
          if (r[4][j] >= 0) { add(td, "a", word, "").href = "#c" + r[4][j]; } else { td.textContent = word; }
        }
      }
      frag.appendChild(tr);
    }
    mbody.appendChild(frag);
    mdone = stop;
    var left = mrows.length - mdone;
    mmore.hidden = left <= 0;
    mmore.textContent = "show " + Math.min(MBATCH, left) + " more matrix rows (" + left + " not shown yet)";
  }
  function matrixFilter(want) {
    var source = want.hasOwnProperty("source") ? String(data.values.source[want.source]) : null;
    var key = JSON.stringify([source, want.text || ""]);
    if (key === matrixKey) { return; }
    matrixKey = key;
    if (!mdata) {
      matrixRows.forEach(function (row) {
        var ok = (source === null || row.getAttribute("data-source") === source.toLowerCase())
          && (!want.text || row.getAttribute("data-text").indexOf(want.text) >= 0);
        if (row.hidden === ok) { row.hidden = !ok; }
      });
      return;
    }
    mrows = [];
    var group = null;
    mdata.rows.forEach(function (r) {
      if (r[0] === "g") { group = r; return; }
      if ((source === null || r[1] === source) && (!want.text || r[2].indexOf(want.text) >= 0)) {
        if (group) { mrows.push(group); group = null; }
        mrows.push(r);
      }
    });
    mbody.textContent = "";
    mdone = 0;
    matrixRender(MBATCH);
  }
  function apply() {
    var want = wanted();
    order = [];
    for (var i = 0; i < n; i += 1) {
      var p = sorted ? sorted[i] : i;
      if (matches(p, want)) { order.push(p); }
    }
    showFrom(0, BATCH);
    shown.textContent = String(order.length);
    matrixFilter(want);
  }
  function onFilter() { status.textContent = ""; apply(); }
  filters.forEach(function (el) { el.addEventListener("input", onFilter); el.addEventListener("change", onFilter); });
  more.addEventListener("click", function () { renderUpTo(rendered + BATCH); });
  earlier.addEventListener("click", renderEarlier);
  mmore.addEventListener("click", function () { matrixRender(mdone + MBATCH); });
  if (window.IntersectionObserver) {
    // Only a button that comes in at the bottom of the window lists more: rows added above
    // what the reader looks at (after following a link) would push it away.
    var observer = new IntersectionObserver(function (seen) {
      seen.forEach(function (s) {
        if (!s.isIntersecting || s.boundingClientRect.top < 0.6 * window.innerHeight) { return; }
        if (s.target === more && rendered < order.length) { renderUpTo(rendered + BATCH); }
        if (s.target === mmore && mdone < mrows.length) { matrixRender(mdone + MBATCH); }
      });
    });
    observer.observe(more);
    observer.observe(mmore);
  }
  heads.forEach(function (th) {
    var key = th.getAttribute("data-key");
    if (!th.hasAttribute("data-sortable") || !key) { return; }
    th.tabIndex = 0;
    function sort() {
      var descending = th.getAttribute("aria-sort") === "ascending";
      heads.forEach(function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      var codes = data.codes[key], idx = new Array(n);
      for (var i = 0; i < n; i += 1) { idx[i] = i; }
      idx.sort(function (a, b) { var d = codes[a] - codes[b]; return d ? (descending ? -d : d) : a - b; });
      sorted = idx;
      apply();
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(); }
    });
  });
  function reveal(id) {
    var p = position[id];
    if (p === undefined) { status.textContent = "Cell " + id + " is not in the cells table."; return; }
    if (!matches(p, wanted())) {
      filters.forEach(function (el) { el.value = ""; });
      apply();
      status.textContent = "The filters hid the cell followed, so they were cleared.";
    }
    var at = order.indexOf(p);
    if (at < first || at >= rendered) { showFrom(at - 10, 70); }  // more are listed as they scroll in
    var tr = document.getElementById("c" + id);
    if (!tr) { return; }
    var details = tr.querySelector("details");
    fill(details, p);
    details.open = true;
    var old = table.querySelector("tr.target");
    if (old) { old.classList.remove("target"); }
    tr.classList.add("target");
    tr.scrollIntoView({block: "center"});
  }
  var CELL = /^#c(\\d+)$/;
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest ? ev.target.closest("a[href]") : null;
    var m = a ? CELL.exec(a.getAttribute("href")) : null;
    if (!m) { return; }
    ev.preventDefault();
    if (window.location.hash !== m[0]) {
      try { history.pushState(null, "", m[0]); } catch (err) { /* file pages of some browsers */ }
    }
    reveal(m[1]);
  });
  window.addEventListener("hashchange", function () {
    var m = CELL.exec(window.location.hash);
    if (m) { reveal(m[1]); }
  });
  apply();
  var first = CELL.exec(window.location.hash);
  if (first) { reveal(first[1]); }
}());
"""

_STYLE = """\
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.5em; color: #000; background: #fff; }
h1 { font-size: 20px; margin: 0 0 0.4em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; }
th { background: #f5f5f5; text-align: left; }
thead { position: sticky; top: 0; z-index: 2; background: #f5f5f5; }
th[data-sortable] { cursor: pointer; }
th[data-sortable]:focus { outline: 2px solid #1565c0; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
table.matrix td.v { text-align: center; white-space: nowrap; }
table.matrix td.v a { color: inherit; }
table.matrix tr.group th { background: #e8eaf6; }
.answer { font-size: 16px; padding: 0.6em 1em; border-radius: 4px; margin: 0.4em 0; }
.answer.pass { background: #e8f5e9; border: 1px solid #2e7d32; }
.answer.fail { background: #ffebee; border: 1px solid #c62828; }
.answer.none { background: #f5f5f5; border: 1px solid #757575; }
.word { padding: 0 0.3em; border-radius: 3px; font-weight: bold; }
nav a { margin-right: 1em; }
#cells { table-layout: fixed; width: 100%; }
#cells th { overflow: hidden; }
#cells td { overflow-wrap: anywhere; }
#cells th[data-key="entry"] { width: 18em; }
#cells th[data-key="verdict"] { width: 12em; }
#cells th[data-key="source"], #cells th[data-key="phase"], #cells th[data-key="torch"] { width: 8em; }
#cells th[data-key="device"], #cells th[data-key="mode"], #cells th[data-key="compile"] { width: 6em; }
code.rerun { white-space: pre-wrap; word-break: break-all; }
pre { white-space: pre-wrap; max-width: 100em; background: #fafafa; border: 1px solid #eee; padding: 4px; }
.controls { margin: 0.5em 0 1em; }
.controls label { margin-right: 1em; }
#status { font-weight: bold; }
tr.target, tr:target { outline: 2px solid #1565c0; }
details > summary { cursor: pointer; }
"""

_HTML_TEMPLATE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ answer_title }}</title>
<style>
{{ style }}{% for name, colour, text in colours %}.v-{{ name }} { background: {{ colour }}; color: {{ text }}; }
{% endfor %}.v-not-run { background: {{ not_run_colour }}; color: {{ not_run_text }}; }
{% for word, colour, text in word_colours %}.word-{{ loop.index }} { background: {{ colour }}; color: {{ text }}; }
{% endfor %}</style>
</head>
<body>
<h1>detconf <span class="word word-{{ word_index }}">{{ answer.word }}</span> · {{ scope }}</h1>
<div class="answer {{ answer_class }}" id="answer"><strong>{{ answer.word }}</strong>: {{ answer.rest }}<br>
<small>{{ answer.word }} = {{ answer.meaning }}.</small></div>
<nav><a href="#matrix">the compatibility matrix</a><a href="#cells-section">every cell, with its evidence</a>{% if answer.cells %}<a href="#failing">failing cells</a>{% endif %}<a href="#counts">counts per column</a>{% if runs %}<a href="#runs">runs</a>{% endif %}<a href="#legend">legend</a></nav>
{% if parts|length > 1 %}<h2 id="parts">Answer per torch version and device</h2>
<table class="parts">
<thead><tr><th>torch</th><th>device</th><th>answer</th><th>cells</th><th>judged</th><th>failing</th><th>waived</th></tr></thead>
<tbody>
{% for p in parts %}<tr><td>{{ p.torch_version }}</td><td>{{ p.device }}</td><td><span class="word word-{{ word_numbers[p.word] }}">{{ p.word }}</span></td><td>{{ p.cells }}</td><td>{{ p.judged }}</td><td>{{ p.failing }}</td><td>{{ p.waived }}</td></tr>
{% endfor %}</tbody>
</table>
<p>{% for word, meaning in words %}<strong>{{ word }}</strong>: {{ meaning }}. {% endfor %}</p>
{% endif %}<h2 id="verdicts">Cells per verdict</h2>
<table class="verdicts">
<thead><tr><th>verdict</th><th>cells</th><th>passing</th><th>meaning</th></tr></thead>
<tbody>
{% for v, n, passing, meaning in verdict_rows %}<tr><td class="v-{{ v }}">{{ v }}</td><td>{{ n }}</td><td>{{ passing }}</td><td>{{ meaning }}</td></tr>
{% endfor %}</tbody>
</table>
{% if answer.cells %}<h2 id="failing">Failing and missing cells</h2>
<p>{{ n_failing }} cells, in matrix order (&#10007; failing, ~ failing but waived by a known finding the run recorded){% if answer.cells|length > first_failing|length %}; the first {{ first_failing|length }} here, every one in the cells table (verdict: failing){% endif %}. An entry opens the cell's evidence.</p>
<table class="failing">
<thead><tr><th></th><th>entry</th><th>column</th><th>verdict</th><th>evidence</th><th>known finding</th></tr></thead>
<tbody>
{% for c in first_failing %}<tr><td>{{ '~' if c.finding else '&#10007;'|safe }}</td><td><a href="#c{{ c.row }}">{{ c.entry_id }}</a>{% if c.phase != 'program' %} &lt;{{ c.phase }}&gt;{% endif %} <small>({{ c.source }})</small></td><td>{{ c.column }}</td><td class="v-{{ c.verdict }}">{{ c.verdict }}</td><td>{{ c.evidence }}</td><td>{{ c.finding }}</td></tr>
{% endfor %}</tbody>
</table>
{% endif %}<h2 id="matrix">Matrix</h2>
<p>{{ n_entries }} entries &times; {{ columns|length }} columns, torch's own docs first.{% if linked %} A cell opens its evidence.{% endif %}
{% for v in matrix_verdicts %}<span class="v-{{ v }}">&nbsp;{{ v }}&nbsp;</span> {{ verdict_meanings[v] }}. {% endfor %}<span class="v-not-run">&nbsp;{{ not_run }}&nbsp;</span> not run on that device/mode.</p>
<table class="matrix">
<thead>
{% for level in header_levels %}<tr>{% if loop.last %}{% for h in entry_headings %}<th>{{ h }}</th>{% endfor %}{% else %}<th colspan="{{ entry_headings|length }}"></th>{% endif %}{% for label, span in level %}<th{% if span > 1 %} colspan="{{ span }}"{% endif %}>{{ label }}</th>{% endfor %}</tr>
{% endfor %}</thead>
<tbody>
{{ body }}</tbody>
</table>
<button type="button" id="matrix-more" hidden>more matrix rows</button>
{% if matrix_data %}<script type="application/json" id="matrix-data">{{ matrix_data }}</script>
{% endif %}<h2 id="cells-section">Cells</h2>
<p>{{ cells_note }}</p>
<div class="controls">
{% for key, label, options in selects %}<label>{{ label }} <select data-filter="{{ key }}"><option value="">all</option>{% if key == 'verdict' %}<option value="(failing)">(any failing verdict)</option>{% endif %}{% for o in options %}<option value="{{ o }}">{{ o }}</option>{% endfor %}</select></label>
{% endfor %}<label>text <input type="search" data-filter="text" placeholder="entry, op, evidence"></label>
<span><span id="shown">{{ n_cell_rows }}</span> of {{ n_cell_rows }} cells match the filters; listed: <span id="listed">none</span></span>
<span id="status" role="status"></span>
</div>
<button type="button" id="earlier" hidden>list earlier</button>
<table id="cells">
<thead><tr>{% for key, label in cell_columns %}<th data-sortable data-key="{{ key }}">{{ label }}</th>{% endfor %}<th>evidence and rerun</th></tr></thead>
<tbody></tbody>
</table>
<button type="button" id="more" hidden>list more</button>
<script type="application/json" id="cell-data">{{ cell_data }}</script>
<h2 id="counts">Counts per column</h2>
<table class="counts">
<thead><tr><th>verdict</th>{% for c in counts %}<th>{{ c.column }}</th>{% endfor %}</tr></thead>
<tbody>
{% for v in count_verdicts %}<tr><td class="v-{{ v }}">{{ v }}</td>{% for c in counts %}<td>{{ c.counts[v] }}</td>{% endfor %}</tr>
{% endfor %}<tr><td class="v-not-run">not run ({{ not_run }})</td>{% for c in counts %}<td>{{ c.not_run }}</td>{% endfor %}</tr>
<tr><th>passing / run</th>{% for c in counts %}<th>{{ c.passing }}/{{ c.total }}</th>{% endfor %}</tr>
</tbody>
</table>
{% if runs %}<h2 id="runs">Runs</h2>
<table class="runs">
<thead><tr>{% for k in run_fields %}<th>{{ k }}</th>{% endfor %}</tr></thead>
<tbody>
{% for r in runs %}<tr>{% for k in run_fields %}<td>{{ r[k] }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table>
{% endif %}<h2 id="legend">Legend</h2>
<table class="legend">
<thead><tr><th>word</th><th>passing</th><th>meaning</th></tr></thead>
<tbody>
{% for word, meaning in words %}<tr><td><span class="word word-{{ loop.index }}">{{ word }}</span></td><td></td><td>the answer: {{ meaning }}</td></tr>
{% endfor %}{% for name, meaning, passing in legend %}<tr><td class="v-{{ name }}">{{ name }}</td><td>{{ passing }}</td><td>{{ meaning }}</td></tr>
{% endfor %}<tr><td class="v-not-run">{{ not_run }}</td><td></td><td>not run on that device/mode</td></tr>
</tbody>
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


def matrix_data(matrix: Matrix, entry_cols: list[str], links: np.ndarray) -> dict:
    """The matrix rows as data for the page's script: a group row ``["g", label]`` at each
    (source, list), then per entry ``[attributes, source, search text, codes, links]``; a
    code indexes ``words`` (the verdicts, then the not-run mark), a link is the results row
    of the cell's evidence (-1: none)."""
    entries = matrix.entries
    attrs = zip(*([one_line(v) for v in entries[c].tolist()] for c in entry_cols))
    groups = list(zip(entries["source"].tolist(), entries["list_name"].tolist()))
    texts = [" ".join(one_line(v) for v in row).lower()
             for row in zip(*(entries[c].tolist() for c in ("entry_id", "op", "sentence")))]
    rows: list = []
    previous = None
    for i, (group, row, codes) in enumerate(zip(groups, attrs, matrix.codes.tolist())):
        if group != previous:
            rows.append(["g", one_line(f"{group[0]} · {group[1]}")])
            previous = group
        rows.append([list(row), group[0], texts[i], codes, links[i].tolist()])
    return {"rows": rows, "width": len(entry_cols) + len(matrix.columns),
            "words": list(VERDICT_NAMES) + [NOT_RUN_MARK], "not_run": NOT_RUN}


#: The cells table's columns: (key, heading, results column), in table order.
_CELL_COLUMNS = (("source", "source", "source"), ("entry", "entry", "entry_id"), ("phase", "phase", "phase"),
                 ("torch", "torch", "torch_version"), ("device", "device", "device"), ("mode", "mode", "mode"),
                 ("compile", "compile", "compile"), ("verdict", "verdict", "verdict"))


def _rank_key(key: str, source_rank: dict[str, int]):
    """How the values of a cells-table column sort: releases and entries in natural order
    (2.5.1 before 2.11.0), sources, devices, modes, compile settings and verdicts in the
    matrix's order."""
    verdicts = list(VERDICTS)
    return {
        "source": lambda v: (source_rank.get(v, len(source_rank)), v),
        "entry": lambda v: (natural_key(v), v),
        "phase": lambda v: (v != "program", v),
        "torch": lambda v: (natural_key(v), v),
        "device": lambda v: (device_key(v), v),
        "mode": lambda v: (MODES.index(v) if v in MODES else len(MODES), v),
        "compile": lambda v: (COMPILERS.index(v) if v in COMPILERS else len(COMPILERS), v),
        "verdict": lambda v: (verdicts.index(v) if v in verdicts else len(verdicts), v),
    }[key]


def _json_script(data) -> str:
    """``data`` as JSON that is inert inside ``<script type="application/json">``: ``<``, ``>``
    and ``&`` (and the line separators JavaScript once refused) as escapes."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def cell_data(matrix: Matrix, results: Results, rows: list[int], keys: list[str]) -> dict:
    """The cells table as data: per column (``keys``) its values in sort order and each row's
    code into them, the rows' results row numbers (``ids``, the ``#c<row>`` anchors), their
    lower-case search text, and their evidence as indices into ``strings`` (evidence line,
    known finding, rerun command, example, reproducer; 0: none)."""
    details = read_details(results, rows)
    facts = cell_facts(results, rows, details)
    display = matrix.display_rank(results.entry_codes)
    source_rank = {s: k for k, s in enumerate(
        matrix.entries["source"].iloc[source_order(matrix.entries["source"].tolist())].drop_duplicates().tolist())}
    column_of = {key: name for key, _, name in _CELL_COLUMNS}
    index = np.asarray(rows, dtype=np.int64)
    values, codes = {}, {}
    for key in keys:
        column = results.column(column_of[key]).take(index).to_pylist()
        distinct = sorted(set(column), key=_rank_key(key, source_rank))
        code_of = {v: k for k, v in enumerate(distinct)}
        values[key] = distinct
        codes[key] = [code_of[v] for v in column]
    strings: dict[str, int] = {"": 0}

    def intern(text) -> int:
        if not isinstance(text, str) or not text:
            return 0
        return strings.setdefault(text, len(strings))

    ops = matrix.entries["op"].tolist()
    entry_ids = results.column("entry_id").take(index).to_pylist() if len(rows) else []
    texts, evidence = [], []
    for r, entry_id in zip(rows, entry_ids):
        rec = details.get(r) or {}
        detail = rec.get("detail") if isinstance(rec.get("detail"), dict) else {}
        line, finding, rerun = facts[r]
        example = detail.get("example")
        repro = detail.get("repro")
        if isinstance(repro, str) and len(repro) > REPRO_CHARS:
            repro = repro[:REPRO_CHARS] + "\n…"
        texts.append(one_line(" ".join([entry_id, one_line(ops[int(display[r])]), line, finding])).lower())
        evidence.append([intern(line), intern(finding), intern(rerun),
                         intern(one_line(example) if isinstance(example, str) else ""), intern(repro)])
    verdicts = values.get("verdict", [])
    return {"keys": keys, "values": values, "codes": codes, "ids": [int(r) for r in rows], "text": texts,
            "evidence": evidence, "strings": list(strings),
            "failing": [0 if v in PASSING else 1 for v in verdicts]}


def source_firsts(matrix: Matrix) -> list[int]:
    """The first matrix row of each source, in display order."""
    sources = matrix.entries["source"].tolist()
    return [i for i, s in enumerate(sources) if i == 0 or s != sources[i - 1]]


@functools.lru_cache(maxsize=1)
def _page_template():
    """The page's template, compiled once a process (15 ms a compile on the 2-core sandbox)."""
    import jinja2

    return jinja2.Environment(autoescape=True, keep_trailing_newline=True).from_string(_HTML_TEMPLATE)


def write_html(matrix: Matrix, results: Results, out: Path, answer: Answer | None = None) -> None:
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
        rows = np.lexsort((results.column_codes, display)).tolist()
        links = np.full(matrix.codes.shape, -1, dtype=np.int64)
        links[display, results.column_codes] = np.arange(len(results))
        note = ("Every cell, in matrix order; choose a verdict, torch version, device, mode or source, or type to "
                "filter; click a heading (or press Enter on it) to sort; open a cell's evidence.")
    else:
        rows = [c.row for c in answer.cells[:HTML_MAX_CELLS]]
        links = None
        note = (f"The failing and missing cells (the results hold {len(results)} cells: results.csv has "
                "every one); choose a verdict, torch version, device, mode or source, or type to filter; click a "
                "heading (or press Enter on it) to sort; open a cell's evidence.")
    keys = ["source", "entry"] + (["phase"] if matrix.show_phase() else []) + (
        ["torch"] if matrix.multi_torch else []) + ["device", "mode"] + (
        ["compile"] if matrix.shows_compile else []) + ["verdict"]
    data = cell_data(matrix, results, rows, keys)
    values = {n: set(results.column(n).to_pylist()) for n in ("torch_version", "device", "mode", "compile")}
    selects = [("verdict", "verdict", [v for v in VERDICTS if v in answer.counts])]
    if matrix.multi_torch:
        selects.append(("torch", "torch", sorted(values["torch_version"], key=lambda v: (natural_key(v), v))))
    selects += [("device", "device", sorted(values["device"], key=device_key)),
                ("mode", "mode", [m for m in MODES if m in values["mode"]])]
    if matrix.shows_compile:
        selects.append(("compile", "compile", [c for c in COMPILERS if c in values["compile"]]))
    selects.append(("source", "source", [matrix.entries["source"].iloc[i] for i in source_firsts(matrix)]))

    counts = matrix.column_counts()
    runs = [describe_run(r) for r in results.runs]
    words = list(ANSWER_WORDS.items())
    word_numbers = {w: k + 1 for k, (w, _) in enumerate(words)}
    matrix_verdicts = [VERDICT_NAMES[c] for c in sorted(set(np.unique(matrix.codes).tolist()) - {NOT_RUN})]
    headings = {key: label for key, label, _ in _CELL_COLUMNS}
    page = _page_template().render(
        style=Markup(_STYLE),
        script=Markup(_SCRIPT),
        colours=[(v, COLOURS[v], text_colour(COLOURS[v])) for v in VERDICTS],
        not_run_colour=NOT_RUN_COLOUR,
        not_run_text=NOT_RUN_TEXT,
        word_colours=[(w, WORD_COLOURS[w], text_colour(WORD_COLOURS[w])) for w, _ in words],
        word_index=word_numbers[answer.word],
        word_numbers=word_numbers,
        words=words,
        not_run=NOT_RUN_MARK,
        answer=answer,
        answer_title=answer.title,
        answer_class={"FAIL": "fail", "NO VERDICT": "none"}.get(answer.word, "pass"),
        scope=answer.scope.text if answer.scope else "",
        parts=part_answers(answer, matrix),
        verdict_rows=[(v, n, "yes" if v in PASSING else "no", VERDICTS[v]) for v, n in answer.counts.items()],
        n_failing=len(answer.cells) + answer.more,
        first_failing=answer.cells[:FIRST_FAILING],
        selects=selects,
        cells_note=note,
        n_cell_rows=len(rows),
        cell_columns=[(k, headings[k]) for k in keys],
        cell_data=Markup(_json_script(data)),
        runs=runs,
        run_fields=[k for k in (runs[0] if runs else {}) if any(r[k] for r in runs)],
        legend=[(v, m, "yes" if v in PASSING else "no") for v, m in VERDICTS.items()],
        verdict_meanings=VERDICTS,
        matrix_verdicts=[v for v in VERDICTS if v in matrix_verdicts],
        counts=counts,
        count_verdicts=[v for v in VERDICTS if any(c["counts"][v] for c in counts)],
        n_entries=len(matrix.entries),
        columns=cols,
        linked=links is not None,
        header_levels=header_levels,
        entry_headings=[HEADINGS[c] for c in entry_cols],
        # Up to HTML_MAX_CELLS the script renders the matrix rows as they scroll into view.
        body=Markup("" if links is not None else _matrix_body(matrix, entry_cols, links)),
        matrix_data=Markup(_json_script(matrix_data(matrix, entry_cols, links))) if links is not None else "",
    )
    # Whatever reached the page, no escape sequence, bidi override or zero-width character does.
    (out / "matrix.html").write_text(plain_text(page), encoding="utf-8")
