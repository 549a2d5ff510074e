"""Reports people read: the answer first (matrix.md, matrix.html, the terminal summary), torch's
own docs before the other sources, the compact heatmap, the offline HTML, the overview and
sensitivity charts, all byte-stable."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from detconf.reports.answer import ANSWER_WORDS, answer_for, part_answers
from detconf.reports.build import build
from detconf.reports.load import load
from detconf.reports.matrix import PNG_MAX_MARKS, PNG_MAX_SIZE, Matrix, png_spec
from detconf.reports.records import ROW_FIELDS
from detconf.reports.summary import summary_lines
from tests.test_hostile_reports import assert_one_line_error, call
from tests.test_reports import PNG_SIGNATURE, embedded, header, row, write

FINDING = "inductor lowers put_ to index_put and never raises (seen on CPU, torch 2.13.0)"


def mixed_run(tmp_path, name="r.jsonl"):
    """Ascend rows first in the file; a failing cell, a waived one, a missing one (planned, no
    row), a sweep entry (not a default source) and passing cells."""
    run = header()
    entries = [
        {"source": "torch-docs", "doc_version": None, "entry_id": "lost_op", "op": "torch.lost_op",
         "sentence": "lost", "list_name": "deterministic", "position": 9, "promise": "deterministic"},
    ]
    run.update(schema=3, planned=1, planned_entries=entries,
               planned_cases=[{"id": "lost_op-cpu-error", "entry": 0, "phase": "program", "device": "cpu",
                               "mode": "error", "compile": "eager"}])
    records = [run]
    records += [row(f"npu_{k}", source="ascend", list_name="ascend-table-1", position=k) for k in range(3)]
    records += [row("scatter_add_", position=1),
                row("index_add_", position=2, verdict="nondeterministic", observed="nondeterministic",
                    detail={"example": "torch.index_add on cpu: x: float32[4]", "repro": "import torch\nprint(1)"}),
                row("put_(accumulate=False)", position=3, verdict="stale-doc", expected="raises",
                    detail={"known_finding": FINDING}),
                row("put_(accumulate=False)", mode="off", position=3, verdict="no-difference-seen"),
                row("sweep_op", source="sweep", list_name="opinfo", position=0)]
    return write(tmp_path / name, [dict(r, schema=3) for r in records])


def test_matrix_md_opens_with_the_answer_then_the_torch_docs_rows(tmp_path):
    build([mixed_run(tmp_path)], tmp_path / "out")
    md = (tmp_path / "out" / "matrix.md").read_text(encoding="utf-8")
    first, matrix = md.split("## Matrix", 1)
    assert first.splitlines()[2].startswith("**FAIL**: 2 of ")  # the answer on the first screen
    assert "1 missing (planned, no row)" in first.splitlines()[2]
    listed = first.split("## Failing and missing cells", 1)[1]
    failing = listed.index("`index_add_`")
    assert "**nondeterministic**" in listed and "example: torch.index\\_add on cpu" in listed
    assert ("rerun: `python -m pytest 'conformance/test_documented.py::test_entry[index_add_-cpu-error]' "
            "--source torch-docs --device cpu --mode error") in listed[failing:]
    waived = listed.index("`put_(accumulate=False)`")
    assert listed[waived - 4:waived] == "- ~ "  # waived, not a plain failure
    assert f"known finding: {FINDING.replace('_', chr(92) + '_')}" in listed
    assert "`lost_op`" in listed and "**missing** — planned, but the run wrote no row" in listed
    assert "rerun: `python -m pytest conformance --source torch-docs --device cpu --mode error" in listed
    # the matrix: torch's own docs first, then the vendor list, then the sweep
    order = [m.group(1) for m in re.finditer(r"^\| (torch-docs|ascend|sweep) ", matrix, re.M)]
    assert order == ["torch-docs"] * 4 + ["ascend"] * 3 + ["sweep"]


def test_a_run_whose_failures_are_all_waived_passes(tmp_path):
    records = [header(), row("a"), row("b", position=1, verdict="violated", detail={"known_finding": "known"})]
    build([write(tmp_path / "r.jsonl", records)], tmp_path / "out")
    md = (tmp_path / "out" / "matrix.md").read_text(encoding="utf-8")
    assert md.splitlines()[2] == "**PASS WITH WAIVERS**: 2 cells; the failing one is waived by a known finding"
    html = (tmp_path / "out" / "matrix.html").read_text(encoding="utf-8")
    assert '<div class="answer pass" id="answer"><strong>PASS WITH WAIVERS</strong>' in html
    assert "<title>detconf PASS WITH WAIVERS · torch 2.13.0+cpu · cpu · torch-docs · suite abc1234" in html


def test_terminal_summary_answers_first(tmp_path):
    lines = summary_lines(mixed_run(tmp_path))
    assert lines[0].startswith("detconf: FAIL: 2 of ") and "1 missing" in lines[0]
    assert lines[1].startswith("  FAIL = a cell failed") and "torch 2.13.0+cpu · cpu · torch-docs, ascend, sweep" in lines[1]
    assert lines[2].startswith("verdicts: conforms ")
    assert "  nondeterministic: outputs differed between runs where determinism is promised" in lines
    failing = next(i for i, line in enumerate(lines) if "index_add_ (torch-docs) [cpu/error]: nondeterministic" in line)
    assert lines[failing].startswith("  ✗ ")
    assert lines[failing + 1].startswith("      ↳ rerun: python -m pytest ")
    command = shlex.split(lines[failing + 1].split("rerun: ", 1)[1])
    assert command[3] == "conformance/test_documented.py::test_entry[index_add_-cpu-error]"
    waived = next(i for i, line in enumerate(lines) if "put_(accumulate=False) (torch-docs) [cpu/error]" in line)
    assert lines[waived].startswith("  ~ ") and lines[waived + 1] == f"      ↳ known finding: {FINDING}"
    assert any("lost_op (torch-docs) [cpu/error]: missing" in line for line in lines)
    # then the counts per column
    first_column = next(i for i, line in enumerate(lines) if line.startswith("cpu/error: conforms"))
    assert first_column > waived


def test_heatmap_fits_one_screen_grouped_by_list_with_failing_cells_labelled(tmp_path):
    results = load([mixed_run(tmp_path)], columns=ROW_FIELDS)
    matrix = Matrix.from_results(results)
    spec = png_spec(matrix)
    n_default = int((matrix.entries["source"] != "sweep").sum())
    assert spec["codes"].shape == (len(matrix.columns), n_default)  # columns down, default-source entries across
    assert spec["row_labels"] == matrix.labels
    assert spec["figsize"][0] <= PNG_MAX_SIZE[0] and spec["figsize"][1] <= PNG_MAX_SIZE[1]
    assert spec["group_labels"] == ["torch-docs · deterministic", "ascend · ascend-table-1"]
    assert spec["group_starts"] == [0, 4]
    assert len(spec["marks"]) == 3  # index_add_, put_ (waived but failing), lost_op (missing)
    assert [label.split(" [")[0] for label in spec["mark_labels"]] == ["1. index_add_", "2. put_(accumulate=False)",
                                                                       "3. lost_op"]
    assert "1 more entries in matrix.html" in spec["title"]
    assert spec["waived"] == [False, False, False]  # no answer given: nothing is known to be waived
    answer = answer_for(matrix, results)
    spec = png_spec(matrix, answer=answer)
    assert spec["title"].startswith("detconf FAIL · torch 2.13.0+cpu · cpu · torch-docs, ascend, sweep · suite abc1234")
    assert "x failing (2), o waived by a known finding (1)" in spec["title"]
    marked = {spec["entries"][e]: w for (_, e), w in zip(spec["marks"], spec["waived"])}
    assert marked == {"index_add_": False, "put_(accumulate=False)": True, "lost_op": False}
    assert "(waived)" in spec["mark_labels"][1] and "(waived)" not in spec["mark_labels"][0]


def test_heatmap_of_many_entries_and_columns_stays_on_one_screen(tmp_path):
    records = [header()]
    for k in range(900):
        for mode in ("error", "warn_only", "off"):
            verdict = "nondeterministic" if k % 20 == 0 and mode == "error" else "conforms"
            records.append(row(f"op_{k:03d}", mode=mode, position=k, verdict=verdict))
    matrix = Matrix.from_results(load([write(tmp_path / "r.jsonl", records)], columns=ROW_FIELDS))
    spec = png_spec(matrix)
    assert spec["codes"].shape[0] == 3 and spec["codes"].shape[1] <= 700
    assert spec["figsize"][0] <= PNG_MAX_SIZE[0] and spec["figsize"][1] <= PNG_MAX_SIZE[1]
    assert spec["numbered"] == PNG_MAX_MARKS and len(spec["marks"]) == 45
    assert spec["mark_labels"][-1].startswith("… 15 more failing cells")
    # No overprint: a mark fits its cell, and numbers that share a lane do not touch.
    layout = spec["layout"]
    assert (min(layout["cell_w"], layout["cell_h"]) * 72 * 0.7) <= min(layout["cell_w"], layout["cell_h"]) * 72
    assert_numbers_apart(spec)


def assert_numbers_apart(spec):
    """Numbers under the grid that share a lane are at least their widths apart."""
    width = {e: (len(str(n)) * 0.05 + 0.03) / spec["layout"]["cell_w"] for e, _, n in spec["numbers"]}
    by_lane: dict[int, list] = {}
    for e, lane, _ in spec["numbers"]:
        if lane >= 0:
            by_lane.setdefault(lane, []).append(e)
    for xs in by_lane.values():
        for a, b in zip(xs, xs[1:]):
            assert b - a >= (width[a] + width[b]) / 2, (a, b)


def test_numbers_under_the_heatmap_take_lanes_and_a_planted_overlap_is_caught():
    from detconf.reports.matrix import _lanes

    lanes = _lanes([0.0, 1.0, 2.0, 10.0], [3.0, 3.0, 3.0, 3.0], 4)
    assert lanes == [0, 1, 2, 0]
    spec = {"layout": {"cell_w": 0.01}, "numbers": [(0, 0, 1), (1, 1, 2), (2, 2, 3), (10, 0, 4)]}
    assert_numbers_apart(spec)
    spec["numbers"][1] = (1, 0, 2)  # planted: two numbers side by side in one lane
    with pytest.raises(AssertionError):
        assert_numbers_apart(spec)
    assert _lanes([0.0, 0.1], [1.0, 1.0], 1) == [0, -1]  # no lane free: the number is not drawn


def test_html_works_offline_filters_and_opens_every_cells_evidence(tmp_path):
    src = mixed_run(tmp_path)
    build([src], tmp_path / "out")
    html = (tmp_path / "out" / "matrix.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched
    assert "http://" not in html and "https://" not in html
    assert html.count("<script>") == 1 and "<script src" not in html and "<link" not in html
    for key in ("verdict", "device", "mode", "source", "text"):
        assert f'data-filter="{key}"' in html
    assert re.findall(r'<th data-sortable data-key="(\w+)">', html) == ["source", "entry", "device", "mode", "verdict"]
    results = load([src])
    cells = embedded(html, "cell-data")
    assert len(cells["ids"]) == len(results)  # every cell, each with its evidence and rerun command
    strings = cells["strings"]
    assert all(strings[e[2]].startswith("python -m pytest ") for e in cells["evidence"])
    matrix = embedded(html, "matrix-data")
    links = sorted(link for r in matrix["rows"] if r[0] != "g" for link in r[4] if link >= 0)
    assert links == sorted(cells["ids"])  # each matrix cell links to its evidence
    assert "import torch\nprint(1)" in strings  # the reproducer the run recorded
    assert FINDING in strings
    # The first screen: title, heading and answer, then a link to the matrix; the matrix before the cells.
    assert html.index("<title>detconf FAIL · torch 2.13.0+cpu") < html.index('<h1>detconf <span class="word')
    assert html.index('class="answer fail"') < html.index('<a href="#matrix">') < html.index('id="matrix"')
    assert html.index('id="matrix"') < html.index('id="cells"')


def test_every_place_says_the_same_answer_word(tmp_path):
    """Terminal, matrix.md, matrix.html, matrix.png's title and summary.json: one word, explained."""
    cases = {
        "FAIL": [header(), row("a"), row("b", position=1, verdict="violated")],
        "PASS WITH WAIVERS": [header(), row("a"), row("b", position=1, verdict="violated",
                                                        detail={"known_finding": "known"})],
        "PASS": [header(), row("a"), row("b", position=1, verdict="unsupported")],
        "NO VERDICT": [header(), row("a", verdict="unsupported"), row("b", position=1, verdict="skipped"),
                       row("b", position=1, mode="off", verdict="recorded")],
    }
    for word, records in cases.items():
        src = write(tmp_path / f"{len(word)}.jsonl", records)
        out = tmp_path / f"out-{len(word)}"
        build([src], out)
        results = load([src], columns=ROW_FIELDS)
        matrix = Matrix.from_results(results)
        answer = answer_for(matrix, results)
        assert answer.word == word
        lines = summary_lines(src)
        assert lines[0].startswith(f"detconf: {word}: ") and lines[1].startswith(f"  {word} = {ANSWER_WORDS[word]}")
        md = (out / "matrix.md").read_text(encoding="utf-8")
        assert md.startswith(f"# detconf {word} · torch 2.13.0+cpu") and f"**{word}**: " in md.splitlines()[2]
        assert f"{word} = {ANSWER_WORDS[word]}" in md
        html = (out / "matrix.html").read_text(encoding="utf-8")
        assert f"<title>detconf {word} · " in html and f"<strong>{word}</strong>: " in html
        assert f"{word} = {ANSWER_WORDS[word]}." in html
        assert png_spec(matrix, answer=answer)["title"].startswith(f"detconf {word} · torch 2.13.0+cpu")
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        assert summary["answer"]["word"] == word and summary["answer"]["meaning"] == ANSWER_WORDS[word]
    assert answer.headline == ("NO VERDICT: none of the 3 cells was judged (every one unsupported, skipped or "
                               "informational)")


def test_one_answer_per_release_in_release_order(tmp_path):
    records = [header()]
    for version, verdict in (("2.14.1", "conforms"), ("2.5.1", "violated"), ("2.11.0", "unsupported")):
        records.append(dict(row("a", torch_version=version, verdict=verdict)))
    src = write(tmp_path / "r.jsonl", records)
    results = load([src], columns=ROW_FIELDS)
    matrix = Matrix.from_results(results)
    parts = part_answers(answer_for(matrix, results), matrix)
    assert [(p["torch_version"], p["word"]) for p in parts] == [
        ("2.5.1", "FAIL"), ("2.11.0", "NO VERDICT"), ("2.14.1", "PASS")]
    build([src], tmp_path / "out")
    html = (tmp_path / "out" / "matrix.html").read_text(encoding="utf-8")
    table = html.split('<table class="parts">', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<tr><td>([^<]+)</td>", table) == ["2.5.1", "2.11.0", "2.14.1"]
    assert html.index('id="parts"') < html.index('id="verdicts"')  # before the counts
    select = html.split('<select data-filter="torch">', 1)[1].split("</select>", 1)[0]
    assert re.findall(r'<option value="([^"]*)">', select) == ["", "2.5.1", "2.11.0", "2.14.1"]
    cells = embedded(html, "cell-data")
    assert cells["values"]["torch"] == ["2.5.1", "2.11.0", "2.14.1"]  # sort ranks in release order


def test_every_text_colour_meets_wcag_aa_and_a_planted_low_contrast_is_caught():
    from detconf.reports.matrix import COLOURS, NOT_RUN_COLOUR
    from detconf.reports.page import NOT_RUN_TEXT, WORD_COLOURS, contrast, text_colour

    for colour in list(COLOURS.values()) + list(WORD_COLOURS.values()):
        assert contrast(colour, text_colour(colour)) >= 4.5, colour
    assert contrast(NOT_RUN_TEXT, NOT_RUN_COLOUR) >= 4.5
    assert round(contrast("#ffffff", "#000000"), 2) == 21.0
    # The old colours: white on the conforms green and #999 for the not-run mark fall short.
    assert contrast(COLOURS["conforms"], "#ffffff") < 4.5 and contrast("#999999", NOT_RUN_COLOUR) < 4.5


def test_reports_are_byte_stable(tmp_path):
    src = mixed_run(tmp_path)
    build([src], tmp_path / "a")
    build([src], tmp_path / "b")
    for name in ("matrix.csv", "results.csv", "matrix.md", "matrix.html", "matrix.png", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "matrix.png").read_bytes().startswith(PNG_SIGNATURE)


def test_overview_and_sensitivity_charts_are_byte_stable(tmp_path, capsys):
    one = mixed_run(tmp_path, "one.jsonl")
    other = write(tmp_path / "two.jsonl", [dict(header("run-2", torch_version="2.5.1"), schema=3)] + [
        dict(row("index_add_", mode=m, verdict="conforms" if m != "off" else "nondeterminism-seen",
                 torch_version="2.5.1", run_id="run-2", detail={"verdicts_per_example": {"nondeterminism-seen": 2}}),
             schema=3) for m in ("error", "off")])
    for out in ("a", "b"):
        assert call(["overview", one, other, "--out", tmp_path / out], capsys)[0] == 0
        assert call(["sensitivity", one, other, "--out", tmp_path / out], capsys)[0] == 0
    for name in ("overview.png", "overview.md", "sensitivity.png", "sensitivity.md"):
        data = (tmp_path / "a" / name).read_bytes()
        assert data == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "overview.png").read_bytes().startswith(PNG_SIGNATURE)
    overview = (tmp_path / "a" / "overview.md").read_text(encoding="utf-8")
    assert "torch 2.5.1 · cpu (x86\\_64 (2 threads)) · off" in overview and "![overview](overview.png)" in overview
    assert "![sensitivity per device](sensitivity.png)" in (tmp_path / "a" / "sensitivity.md").read_text()


def test_the_bar_specs_say_what_they_draw(tmp_path):
    from detconf.reports.overview import bars_spec, overview_rows
    from detconf.reports.sensitivity import chart_spec, sensitivity_table

    src = mixed_run(tmp_path)
    matrix = Matrix.from_results(load([src], columns=ROW_FIELDS))
    spec = bars_spec(overview_rows(matrix), "t")
    assert spec["rows"] == ["torch 2.13.0+cpu · cpu (x86_64 (2 threads)) · error",
                            "torch 2.13.0+cpu · cpu (x86_64 (2 threads)) · off"]
    assert spec["share"] and {label for label, _, _ in spec["segments"]} >= {"conforms", "nondeterministic", "missing"}
    chart = chart_spec(sensitivity_table([src]))
    assert chart["rows"] == ["cpu"] and chart["notes"][0].endswith("0/0 judged overall; 1 not judged (no example compared)")


@pytest.mark.parametrize("argv", [["overview", "missing.jsonl", "--out", "o"], ["overview"]], ids=["no-file", "usage"])
def test_overview_bad_input_is_one_line(tmp_path, capsys, argv, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = call(argv, capsys)
    assert_one_line_error(code, err, "")
    assert not (tmp_path / "o" / "overview.png").exists()


def test_the_answer_lists_a_bounded_number_of_cells_and_fails_beyond(tmp_path, monkeypatch):
    from detconf.reports import answer as answer_mod

    monkeypatch.setattr(answer_mod, "ANSWER_MAX_CELLS", 2)
    records = [header()] + [row(f"op_{k}", position=k, verdict="violated", detail={"known_finding": "known"})
                            for k in range(5)]
    results = load([write(tmp_path / "r.jsonl", records)], columns=ROW_FIELDS)
    answer = answer_mod.answer_for(Matrix.from_results(results), results)
    assert [c.entry_id for c in answer.cells] == ["op_0", "op_1"] and answer.more == 3
    assert not answer.passed  # the cells not read cannot count as waived
    assert answer.headline == "FAIL: 5 of 5 cells failing (2 waived by a known finding), the first 2 listed"


def test_every_published_table_is_what_this_checkout_builds():
    """The published Markdown, HTML, CSV and pictures are rebuilt from their committed results
    files by this checkout's reports, byte for byte (scripts/rebuild_published.py check)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "scripts" / "rebuild_published.py"), "check"], cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    assert "all as this checkout builds them" in out.stdout


def test_markdown_tables_are_the_same_with_or_without_wcwidth(monkeypatch):
    """tabulate counts a wide character as two columns where the optional wcwidth package is
    installed: the reports' tables count one, so every machine writes the same bytes."""
    import types

    import tabulate

    from detconf.reports import safe

    rows, headers = [["Ascend (确定性计算API支持清单)", "conforms"]], ["sentence", "cpu/error"]
    plain = safe.markdown_table(rows, headers)
    monkeypatch.setattr(tabulate, "WIDE_CHARS_MODE", True)  # as where wcwidth is installed
    monkeypatch.setattr(tabulate, "wcwidth", types.SimpleNamespace(
        wcswidth=lambda s: sum(2 if ord(c) > 0x2e80 else 1 for c in s)), raising=False)
    assert tabulate.tabulate(rows, headers=headers, tablefmt="github") != plain  # the difference is real
    assert safe.markdown_table(rows, headers) == plain
    assert tabulate.WIDE_CHARS_MODE is True  # put back


def test_the_rebuild_keeps_each_commands_exit_status_output_and_refusal(tmp_path, monkeypatch):
    """scripts/rebuild_published.py runs every command as a child of one launcher (the imports made
    once): a command's output is its own, ``diff`` may exit 1, and any other failure stops the
    rebuild naming the table, the command and its status."""
    from pathlib import Path

    from tests.by_path import load_script
    from tests.test_hostile_reports import good_file

    root = Path(__file__).resolve().parents[1]
    rp = load_script(root / "scripts" / "rebuild_published.py", "rebuild_published_under_test")
    good = good_file(tmp_path)
    worse = tmp_path / "worse.jsonl"
    worse.write_text(good.read_text().replace('"verdict": "conforms"', '"verdict": "nondeterministic"', 1))
    monkeypatch.setattr(rp, "TABLES", {"t": [("diff", [str(good), str(good)], "same.txt"),
                                             ("diff", [str(good), str(worse)], "worse.txt")]})
    rp.rebuild(root, tmp_path / "out")
    same, regressed = (tmp_path / "out" / "t" / "same.txt").read_text(), (tmp_path / "out" / "t" / "worse.txt").read_text()
    assert same.splitlines()[-2:] == ["no differences", "no regression"], same
    assert "no regression" not in regressed and "regress" in regressed.lower(), regressed
    bad = tmp_path / "bad.jsonl"
    bad.write_text("GARBAGE{{{\n")
    monkeypatch.setattr(rp, "TABLES", {"t": [("build", [str(bad), "--out", "OUT"], None)]})
    with pytest.raises(SystemExit) as stopped:
        rp.rebuild(root, tmp_path / "out2")
    assert "t: build exited 2" in str(stopped.value) and "bad.jsonl:1" in str(stopped.value), stopped.value
