"""Benchmark: ``matrix.html`` in a real browser (a script, not a test).

    python benchmarks/bench_browser.py [--cells 20000] [--page PATH ...] [--keep DIR]

Builds a page of ``--cells`` synthetic cells (the fleet of ``bench_reports.py``: 3 torch
versions x 3 devices x 3 modes x 3 compile settings, rows shaped like the suite's evidence), or
takes the pages given, opens each in headless Chromium (``/usr/bin/chromium``, driven by
playwright; 1440x900, ``file://``) and prints, in milliseconds, what a reader waits for:

- ``load``: from navigation to the ``load`` event (the page's script has rendered its first rows);
- ``filter <name>``: one filter chosen, to the next frame rendered (style, layout and paint);
  ``text`` types an entry name;
- ``sort <heading>``: a click on a heading, to the next frame rendered;
- ``link to a hidden cell``: following a matrix cell's link while a verdict filter hides the
  cell (the filters are cleared), to its row listed, its evidence open and the frame rendered; ``link to a
  cell``: the same, unfiltered;
- ``evidence``: a listed row's evidence opened (rendered from the page's data), to the next
  frame rendered.

Each line says the budget (load 2,000 ms; filter, sort and link 200 ms; evidence 50 ms) and whether
it was kept. Nothing is asserted: times depend on the machine (``tests/test_browser.py`` checks
what the page does).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_reports import write_fleet  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
BUDGETS_MS = {"load": 2000.0, "filter": 200.0, "sort": 200.0, "evidence": 50.0, "link": 200.0}

# Runs an action in the page and resolves with the milliseconds until the frame after it is
# rendered: a task queued from the next animation frame runs once that frame's style, layout and
# paint are done.
_TIMED = """async (action) => {
  const t0 = performance.now();
  action();
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  return performance.now() - t0;
}"""


def make_page(directory: Path, cells: int = 20_000) -> Path:
    """Build a report of ``cells`` synthetic cells into ``directory/report``; its ``matrix.html``."""
    from detconf.reports.build import build

    results = directory / "results"
    results.mkdir(parents=True, exist_ok=True)
    paths = write_fleet(results, cells, "suite")
    build(paths, directory / "report")
    return directory / "report" / "matrix.html"


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


def _timed(page, script: str) -> float:
    return float(page.evaluate(f"({_TIMED})(() => {{ {script} }})"))


def measure(browser, path: Path) -> list[tuple[str, float, float]]:
    """(what, milliseconds, budget) for one page."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    start = time.perf_counter()
    page.goto(path.resolve().as_uri(), wait_until="load")
    out = [("load", (time.perf_counter() - start) * 1000, BUDGETS_MS["load"])]
    for key in page.eval_on_selector_all("select[data-filter]", "els => els.map(e => e.getAttribute('data-filter'))"):
        options = page.eval_on_selector(f"select[data-filter='{key}']", "e => Array.from(e.options).map(o => o.value)")
        value = options[-1]
        ms = _timed(page, f"const e = document.querySelector(\"select[data-filter='{key}']\"); "
                          f"e.value = {value!r}; e.dispatchEvent(new Event('change'));")
        out.append((f"filter {key}", ms, BUDGETS_MS["filter"]))
        _timed(page, f"const e = document.querySelector(\"select[data-filter='{key}']\"); "
                     "e.value = ''; e.dispatchEvent(new Event('change'));")
    entry = page.evaluate("JSON.parse(document.getElementById('cell-data').textContent).values.entry.slice(-1)[0]")
    ms = _timed(page, f"const e = document.querySelector(\"input[data-filter='text']\"); e.value = {entry!r}; "
                      "e.dispatchEvent(new Event('input'));")
    out.append(("filter text", ms, BUDGETS_MS["filter"]))
    _timed(page, "const e = document.querySelector(\"input[data-filter='text']\"); e.value = ''; "
                 "e.dispatchEvent(new Event('input'));")
    for key in page.eval_on_selector_all("#cells th[data-sortable]", "els => els.map(e => e.getAttribute('data-key'))"):
        ms = _timed(page, f"document.querySelector(\"#cells th[data-key='{key}']\").click();")
        out.append((f"sort {key}", ms, BUDGETS_MS["sort"]))
    # A matrix cell's link, with a verdict filter that hides it; then one that is listed.
    links = page.query_selector_all("table.matrix a[href^='#c']")
    if links:
        last = len(links) - 1
        verdict = links[last].inner_text()
        other = page.eval_on_selector("select[data-filter='verdict']",
                                      f"e => Array.from(e.options).map(o => o.value).filter(v => v && v !== {verdict!r})[0]")
        page.select_option("select[data-filter='verdict']", other)
        ms = _timed(page, f"document.querySelectorAll(\"table.matrix a[href^='#c']\")[{last}].click();")
        out.append(("link to a hidden cell", ms, BUDGETS_MS["link"]))
        ms = _timed(page, f"document.querySelectorAll(\"table.matrix a[href^='#c']\")[{last // 2}].click();")
        out.append(("link to a cell", ms, BUDGETS_MS["link"]))
    for k in (5, 20, 35):
        ms = _timed(page, f"document.querySelectorAll('#cells tbody summary')[{k}].click();")
        out.append((f"evidence (row {k + 1} listed)", ms, BUDGETS_MS["evidence"]))
    if errors:
        out.append((f"page errors: {errors[:3]}", float("nan"), 0.0))
    page.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_browser.py", description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=20_000, help="cells of the synthetic page (default 20000)")
    parser.add_argument("--page", nargs="*", default=[], help="time these matrix.html files instead")
    parser.add_argument("--keep", help="build the synthetic page here and keep it")
    args = parser.parse_args(argv)
    if args.cells < 1:
        print(f"bench_browser: error: --cells must be at least 1, not {args.cells}", file=sys.stderr)
        return 2
    if not Path(CHROMIUM).exists():
        print(f"bench_browser: error: no Chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("bench_browser: error: the python package playwright is not installed", file=sys.stderr)
        return 2
    for page in args.page:
        if not Path(page).is_file():
            print(f"bench_browser: error: no such page: {page}", file=sys.stderr)
            return 2
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-browser-"))
    try:
        pages = [Path(p) for p in args.page]
        if not pages:
            start = time.perf_counter()
            pages = [make_page(scratch, args.cells)]
            size = pages[0].stat().st_size
            print(f"built {args.cells} cells in {time.perf_counter() - start:.1f} s: {pages[0]} ({size / 1e6:.1f} MB)")
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                for path in pages:
                    print(f"\n{path}")
                    print(f"{'what':<30} {'ms':>8} {'budget':>8}  kept")
                    for what, ms, budget in measure(browser, path):
                        print(f"{what:<30} {ms:>8.1f} {budget:>8.0f}  {'yes' if ms <= budget else 'NO'}")
            finally:
                browser.close()
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
