"""``matrix.html`` in a real browser: headless Chromium (Debian's ``/usr/bin/chromium``) driven by
playwright, 1440x900, ``file://``, over the published pages and a generated page of 20,000 cells.

What is checked: no console error; the answer on the first screen (title, heading, answer word
and its meaning, a link to the matrix); every filter gives the cells the page's data says and
the counter says how many; every sort orders the listed rows; Enter and Space sort from the
keyboard; a link to a cell that the filters hide clears them (and says so) and opens the
evidence, also when followed a second time; hostile text in results fields stays text. The
timings are printed by ``benchmarks/bench_browser.py``, not asserted here.

Skipped, with the reason, where Chromium or playwright is missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from detconf.reports.answer import ANSWER_WORDS
from detconf.reports.build import build
from tests.test_reports import header, row, write

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
PUBLISHED = sorted((REPO / "reports" / "published").glob("**/matrix.html"))
VIEWPORT = {"width": 1440, "height": 900}


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the python package playwright is not installed (.ci/run installs it)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


@pytest.fixture(scope="module")
def browser():
    """One Chromium and one browser context (1440x900) for the module; each test opens pages of
    its own in it. The pages keep nothing between them (the page script stores nothing: no
    storage, no cookie). The 16 tests of the published pages took 19.7-19.9 s and 22 busy
    core-seconds so, 20.7-20.9 s and 24 with a context per page (2-core sandbox)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = chromium.new_context(viewport=VIEWPORT)
        yield context
        context.close()
        chromium.close()


CELL_DATA = re.compile(r'<script type="application/json" id="cell-data">(.*?)</script>', re.S)


def cell_data(path: Path) -> dict:
    """The data the page's script reads: the text of its ``cell-data`` element, read from the
    file (a script element's text is the file's bytes between its tags; asking the browser for it
    moved up to 3 MB through the driver for every page, 0.12-0.16 s of the renderer's time)."""
    [text] = CELL_DATA.findall(path.read_text(encoding="utf-8"))
    return json.loads(text)


class Page:
    """One page open in the browser, with the errors it logged and the data its table shows."""

    def __init__(self, browser, path: Path):
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.goto(path.resolve().as_uri(), wait_until="load")
        self.data = cell_data(path)

    def close(self):
        self.page.close()

    def choose(self, key: str, value: str) -> None:
        if key == "text":
            self.page.fill("input[data-filter='text']", value)
        else:
            self.page.select_option(f"select[data-filter='{key}']", value)

    def shown(self) -> int:
        return int(self.page.inner_text("#shown"))

    def listed_ids(self) -> list[int]:
        return [int(i[1:]) for i in self.page.eval_on_selector_all("#cells tbody tr", "rs => rs.map(r => r.id)")]

    def expected_ids(self, key: str, value: str) -> list[int]:
        """The rows the filter should leave, in matrix order, from the page's own data."""
        data = self.data
        if value == "(failing)":
            keep = [bool(data["failing"][c]) for c in data["codes"]["verdict"]]
        elif key == "text":
            keep = [value.lower() in t for t in data["text"]]
        else:
            code = data["values"][key].index(value)
            keep = [c == code for c in data["codes"][key]]
        return [i for i, k in zip(data["ids"], keep) if k]


def open_page(browser, path: Path) -> Page:
    page = Page(browser, path)
    assert page.errors == []
    return page


def first_screen(page: Page) -> dict:
    """What the first 1440x900 screen shows of the answer."""
    return page.page.evaluate("""() => {
      const box = (sel) => { const e = document.querySelector(sel); if (!e) return null;
                             const r = e.getBoundingClientRect(); return [r.top, r.bottom]; };
      return {title: document.title, heading: document.querySelector("h1").innerText,
              answer: document.getElementById("answer").innerText, answerBox: box("#answer"),
              link: box("nav a[href='#matrix']"), height: window.innerHeight};
    }""")


def check_first_screen(page: Page) -> str:
    screen = first_screen(page)
    word = next(w for w in sorted(ANSWER_WORDS, key=len, reverse=True) if screen["title"].startswith(f"detconf {w} · "))
    assert "torch " in screen["title"] and " · suite " in screen["title"]
    assert screen["heading"].startswith(f"detconf {word} · torch ")
    assert screen["answer"].startswith(f"{word}: ") and f"{word} = {ANSWER_WORDS[word]}" in screen["answer"]
    assert screen["answerBox"][1] <= screen["height"] and screen["link"][1] <= screen["height"]
    # One click from the top reaches the matrix.
    page.page.click("nav a[href='#matrix']")
    top = page.page.evaluate("document.getElementById('matrix').getBoundingClientRect().top")
    assert -2 <= top < screen["height"]
    return word


def check_every_filter(page: Page) -> None:
    total = len(page.data["ids"])
    assert page.shown() == total
    selects = page.page.eval_on_selector_all(
        "select[data-filter]", "els => els.map(e => [e.getAttribute('data-filter'), "
        "Array.from(e.options).map(o => o.value).filter(v => v)])")
    assert {key for key, _ in selects} >= {"verdict", "device", "mode", "source"}
    for key, options in selects:
        for value in options:
            page.choose(key, value)
            expected = page.expected_ids(key, value)
            assert page.shown() == len(expected), (key, value)
            assert page.listed_ids() == expected[:len(page.listed_ids())] and page.listed_ids(), (key, value)
        page.choose(key, "")
    entry = page.data["values"]["entry"][-1]
    page.choose("text", entry)
    assert page.shown() == len(page.expected_ids("text", entry)) > 0
    page.choose("text", "")
    assert page.shown() == total


def check_every_sort(page: Page) -> None:
    data = page.data
    position = {r: k for k, r in enumerate(data["ids"])}
    for key in page.page.eval_on_selector_all("#cells th[data-sortable]", "els => els.map(e => e.dataset.key)"):
        for direction in ("ascending", "descending"):
            page.page.click(f"#cells th[data-key='{key}']")
            assert page.page.get_attribute(f"#cells th[data-key='{key}']", "aria-sort") == direction
            ranks = [data["codes"][key][position[r]] for r in page.listed_ids()]
            assert ranks == sorted(ranks, reverse=direction == "descending") and ranks, (key, direction)
    # Keyboard: Enter and Space on a focused heading sort too.
    heading = "#cells th[data-key='verdict']"
    page.page.focus(heading)
    page.page.keyboard.press("Enter")
    state = page.page.get_attribute(heading, "aria-sort")
    page.page.keyboard.press(" ")
    assert {state, page.page.get_attribute(heading, "aria-sort")} == {"ascending", "descending"}


#: Resolves once the page has drawn ``SETTLED_FRAMES`` frames in a row with the same number of
#: table rows and the same place for the element named: what the page lists as rows scroll into
#: view (an ``IntersectionObserver``'s callback runs after the frame that showed them) has been
#: listed by then. At most ``MAX_FRAMES`` frames (2 s at 60 frames a second).
SETTLED_FRAMES, MAX_FRAMES = 5, 120
_SETTLE = """([selector, settled, most]) => new Promise((resolve) => {
  let last = null, same = 0, frames = 0;
  function frame() {
    const e = document.querySelector(selector);
    const now = document.querySelectorAll("tbody tr").length + " " + (e ? e.getBoundingClientRect().top : "none");
    same = now === last ? same + 1 : 0;
    last = now;
    frames += 1;
    if (same >= settled || frames >= most) { resolve(frames); } else { requestAnimationFrame(frame); }
  }
  requestAnimationFrame(frame);
})"""


def settle(page: Page, selector: str) -> int:
    """Wait until the page stops listing rows and ``selector`` stops moving (see :data:`_SETTLE`);
    the frames it took. (A fixed wait of 300 ms did this before, whatever the page did.)"""
    return page.page.evaluate(_SETTLE, [selector, SETTLED_FRAMES, MAX_FRAMES])


def check_link_to_a_hidden_cell(page: Page) -> None:
    # The last link (a handle for it alone: handles for all of them cost 0.09 s a page).
    link = page.page.evaluate_handle("sel => { const all = document.querySelectorAll(sel); "
                                     "return all.length ? all[all.length - 1] : null; }",
                                     "table.matrix a[href^='#c'], table.failing a[href^='#c']").as_element()
    assert link is not None
    target = int(link.get_attribute("href")[2:])
    verdict = page.data["values"]["verdict"][page.data["codes"]["verdict"][page.data["ids"].index(target)]]
    others = [v for v in page.data["values"]["verdict"] if v != verdict]
    if others:
        page.choose("verdict", others[0])
        assert target not in page.expected_ids("verdict", others[0])
    link.click()
    assert page.page.input_value("select[data-filter='verdict']") == ""
    assert page.shown() == len(page.data["ids"])  # the counter follows the cleared filters
    if others:
        assert "cleared" in page.page.inner_text("#status")
    details = f"#c{target} details"
    assert page.page.eval_on_selector(details, "d => d.open")
    settle(page, f"#c{target}")  # rows listed as they scroll into view must not push it away
    top = page.page.eval_on_selector(f"#c{target}", "r => r.getBoundingClientRect().top")
    assert 0 <= top < VIEWPORT["height"]
    assert "rerun: " in page.page.inner_text(details)
    # Closed, then followed again: open again.
    page.page.eval_on_selector(details, "d => { d.open = false; }")
    link.click()
    assert page.page.eval_on_selector(details, "d => d.open")
    assert page.errors == []


# --------------------------------------------------------------------------------- published pages

@pytest.mark.parametrize("path", PUBLISHED, ids=[str(p.parent.relative_to(REPO / "reports" / "published"))
                                                 for p in PUBLISHED])
def test_published_page_answers_on_the_first_screen_and_links_reach_hidden_cells(browser, path):
    page = open_page(browser, path)
    try:
        word = check_first_screen(page)
        summary = json.loads((path.parent / "summary.json").read_text(encoding="utf-8"))
        assert summary["answer"]["word"] == word
        check_link_to_a_hidden_cell(page)
        assert page.errors == []
    finally:
        page.close()


def test_cross_version_page_every_filter_and_sort(browser):
    page = open_page(browser, REPO / "reports" / "published" / "cross-version" / "matrix.html")
    try:
        releases = page.page.eval_on_selector_all("table.parts tbody tr td:first-child", "ts => ts.map(t => t.innerText)")
        assert [r.split("+")[0] for r in releases] == ["2.5.1", "2.11.0", "2.13.0", "2.14.1", "2.15.0"]
        assert page.page.query_selector("select[data-filter='torch']")
        check_every_filter(page)
        check_every_sort(page)
        assert page.errors == []
    finally:
        page.close()


@pytest.mark.parametrize("plant, check", [
    ('      filters.forEach(function (el) { el.value = ""; });\n', check_link_to_a_hidden_cell),
    ('if (ev.key === "Enter" || ev.key === " ")', check_every_sort),
], ids=["link-keeps-the-filter", "no-keyboard-sort"])
def test_a_planted_fault_in_the_page_script_is_caught(browser, tmp_path, plant, check):
    """The same checks on the published page with one behaviour taken out of its script fail."""
    html = (REPO / "reports" / "published" / "torch-2.14.1" / "cpu" / "matrix.html").read_text(encoding="utf-8")
    assert plant in html
    assert_caught(browser, tmp_path / "planted.html", html.replace(plant, "" if plant.endswith("\n") else "if (false)"),
                  check)


def assert_caught(browser, planted: Path, html: str, check) -> None:
    """``check`` fails on the page ``html`` (a planted fault), written to ``planted``."""
    planted.write_text(html, encoding="utf-8")
    page = open_page(browser, planted)
    try:
        with pytest.raises(AssertionError):
            check(page)
    finally:
        page.close()


# --------------------------------------------------------------------------------- 20,000 cells

@pytest.fixture(scope="module")
def large_page(tmp_path_factory) -> Path:
    from benchmarks.bench_browser import make_page

    return make_page(tmp_path_factory.mktemp("large"), 20_000)


def test_twenty_thousand_cells_filter_sort_and_render_as_needed(browser, large_page):
    page = open_page(browser, large_page)
    try:
        assert len(page.data["ids"]) == 20_000 and page.shown() == 20_000
        assert len(page.listed_ids()) == 100 and page.page.inner_text("#listed") == "1\u2013100"
        assert page.page.eval_on_selector_all("#cells details p", "ps => ps.length") == 0  # evidence on demand
        page.page.click("#more")  # and the list, scrolled into view, lists more as it is seen
        listed = len(page.listed_ids())
        assert listed >= 200 and page.page.inner_text("#listed") == f"1\u2013{listed}" and page.shown() == 20_000
        check_first_screen(page)
        check_every_filter(page)
        check_every_sort(page)
        check_link_to_a_hidden_cell(page)
        # A cell far down the list: its neighbours are listed around it, earlier ones on request.
        far = page.data["ids"][15_000]
        page.page.evaluate(f"window.location.hash = '#c{far}'")
        page.page.wait_for_selector(f"#c{far} details[open]")
        assert not page.page.is_hidden("#earlier")
        before = len(page.listed_ids())
        page.page.click("#earlier")
        assert len(page.listed_ids()) == before + 100
        # The headings stay on screen while the table scrolls under them.
        page.page.evaluate(f"document.getElementById('c{far}').scrollIntoView({{block: 'center'}})")
        top = page.page.evaluate("document.querySelector('#cells thead').getBoundingClientRect().top")
        table_top = page.page.evaluate("document.getElementById('cells').getBoundingClientRect().top")
        assert table_top < -100 and abs(top) <= 1
        assert page.errors == []
    finally:
        page.close()


def headings_top_after_scrolling(browser, path: Path) -> float:
    page = open_page(browser, path)
    try:
        row = page.data["ids"][50]
        page.page.evaluate(f"document.getElementById('c{row}').scrollIntoView({{block: 'center'}})")
        return page.page.evaluate("document.querySelector('#cells thead').getBoundingClientRect().top")
    finally:
        page.close()


def test_rows_listed_above_a_followed_cell_are_caught(browser, large_page, tmp_path):
    """Planted fault: the page lists the earlier rows as soon as their button is seen, wherever it
    is on the screen, so rows come in above the cell a link opened, in the frames after the link,
    and push it off the screen: the link check sees it."""
    html = large_page.read_text(encoding="utf-8")
    plants = [(" || s.boundingClientRect.top < 0.6 * window.innerHeight", ""),
              ("if (s.target === more && rendered < order.length)",
               "if (s.target === earlier && first > 0) { renderEarlier(); }\n        "
               "if (s.target === more && rendered < order.length)"),
              ("observer.observe(more);", "observer.observe(more); observer.observe(earlier);")]
    for old, new in plants:
        assert html.count(old) == 1, old
        html = html.replace(old, new)
    assert_caught(browser, tmp_path / "rows-above.html", html, check_link_to_a_hidden_cell)


def test_headings_stay_on_screen_and_a_page_without_sticky_headings_is_caught(browser, large_page, tmp_path):
    assert abs(headings_top_after_scrolling(browser, large_page)) <= 1
    planted = tmp_path / "not-sticky.html"  # planted fault: the sticky rule taken out
    html = large_page.read_text(encoding="utf-8")
    planted.write_text(html.replace("thead { position: sticky;", "thead { position: static;"), encoding="utf-8")
    assert planted.read_text(encoding="utf-8") != html
    assert headings_top_after_scrolling(browser, planted) < -100


def test_the_benchmark_prints_each_budget_and_refuses_bad_input(tmp_path):
    import subprocess
    import sys

    bench = [sys.executable, str(REPO / "benchmarks" / "bench_browser.py")]
    page = REPO / "reports" / "published" / "torch-2.14.1" / "cpu" / "matrix.html"
    out = subprocess.run(bench + ["--page", str(page)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for what in ("load", "filter verdict", "sort verdict", "link to a hidden cell", "evidence (row 6 listed)"):
        assert any(re.match(rf"{re.escape(what)} +\d+\.\d +\d+  (yes|NO)$", line) for line in lines), what
    for argv in (["--page", str(tmp_path / "none.html")], ["--cells", "0"]):
        bad = subprocess.run(bench + argv, capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1, argv
        assert bad.stderr.startswith("bench_browser: error: ")


# --------------------------------------------------------------------------------- hostile payloads

PAYLOADS = [
    '<img src=x onerror="window.__pwned=1">',
    "</script><script>window.__pwned=2</script>",
    '"><svg onload="window.__pwned=3">',
    "=HYPERLINK(\"http://x\",\"csv\")",
    "+cmd|' /C calc'!A0",
    "&lt;b&gt;entity&lt;/b&gt; \u2028 line separator",
]


def hostile_results(tmp_path: Path) -> Path:
    records = [header(platform=PAYLOADS[0])]
    for k, payload in enumerate(PAYLOADS):
        records.append(row(f"op_{k}{payload}", position=k, verdict="violated", sentence=payload, op=payload,
                           detail={"example": payload, "repro": payload + "\n" + payload, "known_finding": payload,
                                   "reason": payload}))
        records.append(row(f"op_{k}{payload}", position=k, mode="warn_only", sentence=payload, op=payload))
    return write(tmp_path / "hostile.jsonl", records)


def open_everything(page: Page) -> None:
    """Every row listed and every evidence opened; every payload typed into the text filter."""
    page.page.eval_on_selector_all("#cells details", "ds => ds.forEach(d => { d.open = true; })")
    page.page.evaluate("new Promise(r => setTimeout(r, 50))")
    for payload in PAYLOADS:
        page.choose("text", payload)
    page.choose("text", "")


def test_hostile_payloads_stay_text(browser, tmp_path):
    build([hostile_results(tmp_path)], tmp_path / "out")
    page = open_page(browser, tmp_path / "out" / "matrix.html")
    try:
        open_everything(page)
        assert page.page.evaluate("window.__pwned") is None
        text = page.page.inner_text("#cells")
        for payload in PAYLOADS[:5]:
            assert payload in text  # shown as written
        assert page.errors == []
    finally:
        page.close()


def test_a_page_that_renders_data_as_markup_is_caught(browser, tmp_path):
    """Planted fault: the same page with its script writing evidence as HTML runs the payload,
    and the check of the test above sees it."""
    build([hostile_results(tmp_path)], tmp_path / "out")
    html = (tmp_path / "out" / "matrix.html").read_text(encoding="utf-8")
    planted = html.replace("if (text !== null) { el.textContent = text; }", "if (text !== null) { el.innerHTML = text; }")
    assert planted != html
    (tmp_path / "planted.html").write_text(planted, encoding="utf-8")
    page = Page(browser, tmp_path / "planted.html")
    try:
        open_everything(page)
        page.page.wait_for_function("window.__pwned !== undefined", timeout=5000)
        assert page.page.evaluate("window.__pwned") in (1, 3)
    finally:
        page.close()


def test_a_script_error_is_caught(browser, tmp_path):
    """Planted fault: a page whose script throws is reported by the console check."""
    build([hostile_results(tmp_path)], tmp_path / "out")
    html = (tmp_path / "out" / "matrix.html").read_text(encoding="utf-8")
    (tmp_path / "broken.html").write_text(html.replace("var data = JSON.parse(", "var data = JSON.parsed("),
                                          encoding="utf-8")
    page = Page.__new__(Page)
    page.page = browser.new_page()
    page.errors = []
    page.page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    try:
        page.page.goto((tmp_path / "broken.html").as_uri(), wait_until="load")
        assert any(re.search("parsed", e) for e in page.errors)
    finally:
        page.page.close()
