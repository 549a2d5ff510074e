"""reports/: matrix build, summary lines, diff and bad input, on small synthetic results files."""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from detconf.reports import build as build_mod
from detconf.reports.build import build
from detconf.reports.diff import main as diff_main
from detconf.reports.digests import rows_digest
from detconf.reports.load import load
from detconf.reports.matrix import NOT_RUN_MARK, Matrix, png_selection
from detconf.reports.records import PASSING, VERDICTS, ResultsError
from detconf.reports.summary import summary_lines
from tests import warm

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- fixtures

def header(run_id="run-1", **env) -> dict:
    base = {
        "torch_version": "2.13.0+cpu", "torch_git": "deadbeef", "cuda": None, "cudnn": None,
        "driver": None, "python": "3.11.7", "platform": "Linux-x86_64", "suite_revision": "abc1234",
        "hypothesis_profile": "ci", "hypothesis_seed": 0, "doc_version": None, "argv": [],
        "devices": [{"device": "cpu", "device_name": "x86_64 (2 threads)", "versions": {}}],
    }
    base.update(env)
    return {"record": "run", "schema": 1, "run_id": run_id, "started": "2026-11-21T10:53:00Z",
            "env": base}


def row(entry_id="put_(accumulate=False)", device="cpu", mode="error", verdict="conforms", **over) -> dict:
    rec = {
        "record": "result", "schema": 1, "run_id": "run-1", "entry_id": entry_id,
        "op": f"torch.{entry_id.split('(')[0]}", "sentence": f"{entry_id} when called on a tensor",
        "source": "torch-docs", "list_name": "deterministic", "position": 0, "doc_version": None,
        "promise": "deterministic", "devices": [], "device": device,
        "device_name": {"cpu": "x86_64 (2 threads)", "cuda": "NVIDIA H100 80GB HBM3"}.get(device, device),
        "mode": mode, "expected": "deterministic", "observed": "deterministic", "verdict": verdict,
        "examples": 10, "runs": 2, "torch_version": "2.13.0+cpu", "detail": {},
        "nodeid": f"conformance/test_documented.py::test_entry[{entry_id}-{device}-{mode}]",
        "duration_s": 0.01,
    }
    rec.update(over)
    return rec


def write(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def small_run(tmp_path: Path, name="results.jsonl") -> Path:
    """Three entries over cpu/error, cpu/warn_only and cuda/error; one cell never ran."""
    records = [header()]
    for pos, entry in enumerate(["put_(accumulate=False)", "index_add_", "scatter_add_"]):
        for device, mode in [("cpu", "error"), ("cpu", "warn_only"), ("cuda", "error")]:
            if entry == "scatter_add_" and device == "cuda":
                continue  # not run: must show as missing, never as a verdict
            verdict = "conforms"
            if entry == "index_add_" and mode == "warn_only":
                verdict = "missing-warning"
            if entry == "put_(accumulate=False)" and device == "cuda":
                verdict = "missing-raise"
            records.append(row(entry, device, mode, verdict, position=pos))
    return write(tmp_path / name, records)


def run_cli(*args, cwd=REPO):
    return warm.reports(*args, cwd=cwd, timeout=120)


# ----------------------------------------------------------------------------- build

def test_build_writes_every_file(tmp_path):
    result = build([small_run(tmp_path)], tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(["matrix.csv", "results.csv", "matrix.md", "matrix.html", "matrix.png",
                            "summary.json"])
    assert {p.name for p in result.files} == set(names)
    # no temporary directory left next to the output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results.jsonl"]


def test_matrix_csv_cells_and_shape(tmp_path):
    build([small_run(tmp_path)], tmp_path / "out")
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", keep_default_na=False, dtype=str)
    assert list(wide.columns) == ["source", "doc_version", "list_name", "entry_id", "phase", "op", "promise",
                                  "sentence", "cpu/error", "cpu/warn_only", "cuda/error"]
    assert set(wide["phase"]) == {"program"}  # schema-1 rows: the whole program
    assert list(wide["entry_id"]) == ["put_(accumulate=False)", "index_add_", "scatter_add_"]
    cells = wide.set_index("entry_id")
    assert cells.loc["put_(accumulate=False)", "cuda/error"] == "missing-raise"
    assert cells.loc["index_add_", "cpu/warn_only"] == "missing-warning"
    assert cells.loc["index_add_", "cpu/error"] == "conforms"
    assert cells.loc["scatter_add_", "cuda/error"] == ""  # not run: empty, never "conforms"
    assert cells.loc["put_(accumulate=False)", "sentence"] == "put_(accumulate=False) when called on a tensor"

    long = pd.read_csv(tmp_path / "out" / "results.csv", keep_default_na=False, dtype=str)
    assert len(long) == 8
    assert {"entry_id", "device", "mode", "verdict", "torch_version", "run_id"} <= set(long.columns)
    assert set(long["verdict"]) == {"conforms", "missing-warning", "missing-raise"}


def test_rows_sorted_by_source_list_then_position(tmp_path):
    records = [header()]
    # Written out of order; position decides within a list, entry id where it is missing.
    for entry, source, list_name, pos in [
        ("zeta", "torch-docs", "raises", 1), ("alpha", "torch-docs", "raises", 2),
        ("mid", "torch-docs", "deterministic", 5), ("first", "torch-docs", "deterministic", 0),
        ("npu_b", "ascend", "deterministic", None), ("npu_a", "ascend", "deterministic", None),
    ]:
        records.append(row(entry, source=source, list_name=list_name, position=pos))
    build([write(tmp_path / "r.jsonl", records)], tmp_path / "out")
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", keep_default_na=False, dtype=str)
    # torch's own docs first (the sources in their vocabulary order), then position within a list
    assert list(wide["entry_id"]) == ["first", "mid", "zeta", "alpha", "npu_a", "npu_b"]


def test_markdown_has_legend_counts_and_missing_marker(tmp_path):
    build([small_run(tmp_path)], tmp_path / "out")
    md = (tmp_path / "out" / "matrix.md").read_text(encoding="utf-8")
    assert "## Legend" in md and "## Counts per column" in md
    for verdict in VERDICTS:
        assert f"| {verdict} " in md
    counts = [line for line in md.splitlines() if line.startswith("| passing / run")]
    assert len(counts) == 1
    assert [c.strip() for c in counts[0].strip("|").split("|")[1:]] == ["3/3", "2/3", "1/2"]
    scatter = next(line for line in md.splitlines() if line.startswith("| torch-docs") and "scatter_add_" in line)
    assert [c.strip() for c in scatter.strip().strip("|").split("|")][-3:] == ["conforms", "conforms", NOT_RUN_MARK]
    assert "2.13.0+cpu (deadbeef)" in md  # the run's environment is shown


def test_markdown_escapes_table_breaking_text(tmp_path):
    records = [header(), row("a|b", op="torch.Tensor.__getitem__", sentence="x | y <b>bold</b>\nnext *not* emphasis")]
    build([write(tmp_path / "r.jsonl", records)], tmp_path / "out")
    md = (tmp_path / "out" / "matrix.md").read_text(encoding="utf-8")
    line = next(line for line in md.splitlines() if "`a\\|b`" in line)
    cells = [c.strip() for c in line.replace("\\|", "\0").strip().strip("|").split("|")]
    assert len(cells) == 6 + 1  # 6 entry columns, 1 verdict; the escaped pipes added none
    assert "`torch.Tensor.__getitem__`" in line  # a code span: no bold "getitem"
    assert "x \\| y \\<b\\>bold\\</b\\> next \\*not\\* emphasis" in line
    assert "<b>" not in md


def test_html_is_byte_identical_and_escaped(tmp_path):
    records = [header(platform="Linux <evil>"),
               row("put_", sentence='<script>alert("x")</script> & friends'),
               row("put_", mode="warn_only", verdict="stale-doc",
                   sentence='<script>alert("x")</script> & friends')]
    src = write(tmp_path / "r.jsonl", records)
    build([src], tmp_path / "a")
    build([src], tmp_path / "b")
    a = (tmp_path / "a" / "matrix.html").read_bytes()
    assert a == (tmp_path / "b" / "matrix.html").read_bytes()
    html = a.decode("utf-8")
    assert "<script>alert" not in html and html.count("<script>") == 1  # the page's own script only
    # The matrix rows are data: the sentence is there with < > & as JSON escapes, never markup.
    assert "\\u003cscript\\u003ealert(\\\"x\\\")\\u003c/script\\u003e \\u0026 friends" in html
    matrix = embedded(html, "matrix-data")
    entry = next(r for r in matrix["rows"] if r[0] != "g")
    assert '<script>alert("x")</script> & friends' in entry[0]
    assert [matrix["words"][c] for c in entry[3]] == ["conforms", "stale-doc"]
    assert all(link >= 0 for link in entry[4])  # each cell links to its evidence
    cells = embedded(html, "cell-data")
    assert sorted(cells["ids"]) == sorted(entry[4])
    assert "Linux &lt;evil&gt;" in html
    assert ".v-stale-doc { background: #" in html  # colour-coded
    assert "Legend" in html


def embedded(html: str, name: str):
    """The JSON object ``<script type="application/json" id=name>`` of a page holds."""
    found = re.search(f'<script type="application/json" id="{name}">(.*?)</script>', html, re.S)
    assert found, f"no {name} in the page"
    return json.loads(found.group(1))


def test_html_marks_missing_cells(tmp_path):
    build([small_run(tmp_path)], tmp_path / "out")
    html = (tmp_path / "out" / "matrix.html").read_text(encoding="utf-8")
    matrix = embedded(html, "matrix-data")
    not_run = [c for r in matrix["rows"] if r[0] != "g" for c in r[3] if c == matrix["not_run"]]
    assert len(not_run) == 1 and matrix["words"][matrix["not_run"]] == NOT_RUN_MARK


def test_png_is_valid_and_stable(tmp_path):
    src = small_run(tmp_path)
    build([src], tmp_path / "a")
    build([src], tmp_path / "b")
    data = (tmp_path / "a" / "matrix.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    from PIL import Image

    with Image.open(tmp_path / "a" / "matrix.png") as img:
        img.verify()
    with Image.open(tmp_path / "a" / "matrix.png") as img:
        width, height = img.size
        assert width > 200 and height > 150
        assert "Software" not in img.info  # no tool version in the file
    assert data == (tmp_path / "b" / "matrix.png").read_bytes()


def test_the_png_draws_its_labels_unhinted_and_leaves_matplotlibs_settings_alone(tmp_path, monkeypatch):
    import matplotlib
    from matplotlib.figure import Figure

    seen = []
    real = Figure.savefig

    def watching(self, *args, **kwargs):
        seen.append(matplotlib.rcParams["text.hinting"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", watching)
    before = dict(matplotlib.rcParams)
    build([small_run(tmp_path)], tmp_path / "out")
    assert seen == ["none"]
    assert dict(matplotlib.rcParams) == before


def test_png_width_grows_with_entries_and_fits_one_screen(tmp_path):
    def png_size(n_entries, out):
        records = [header()] + [row(f"op_{i}", position=i) for i in range(n_entries)]
        build([write(tmp_path / f"{out}.jsonl", records)], tmp_path / out)
        from PIL import Image

        with Image.open(tmp_path / out / "matrix.png") as img:
            return img.size

    small, medium, huge = png_size(5, "s"), png_size(120, "m"), png_size(2000, "h")
    assert small[0] <= medium[0] <= huge[0]
    assert max(huge[0], medium[0]) <= 1600 and huge[1] <= 1000  # one screen, whatever the entries


def test_png_selection_puts_failing_entries_first(tmp_path):
    records = [header()] + [row(f"op_{i:03d}", position=i,
                                verdict="nondeterministic" if i in (7, 42) else "conforms")
                            for i in range(100)]
    matrix = Matrix.from_results(load([write(tmp_path / "r.jsonl", records)]))
    chosen = png_selection(matrix, limit=10)
    ids = list(matrix.entries["entry_id"].to_numpy()[chosen])
    assert len(ids) == 10 and "op_007" in ids and "op_042" in ids
    assert ids == sorted(ids)  # drawn in matrix order


def test_summary_json_counts_env_and_digest(tmp_path):
    build([small_run(tmp_path)], tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    cols = {c["column"]: c for c in summary["columns"]}
    assert list(cols) == ["cpu/error", "cpu/warn_only", "cuda/error"]
    assert cols["cpu/error"]["counts"]["conforms"] == 3 and cols["cpu/error"]["total"] == 3
    assert cols["cpu/warn_only"]["counts"]["missing-warning"] == 1
    assert cols["cpu/warn_only"]["passing"] == 2 and cols["cpu/warn_only"]["failing"] == 1
    assert cols["cuda/error"]["counts"]["missing-raise"] == 1 and cols["cuda/error"]["not_run"] == 1
    assert cols["cuda/error"]["device_name"] == "NVIDIA H100 80GB HBM3"
    assert summary["totals"]["conforms"] == 6 and summary["cells"] == 8 and summary["entries"] == 3
    assert summary["overrides"] == 0
    assert summary["runs"][0]["env"]["suite_revision"] == "abc1234"
    assert summary["runs"][0]["env"]["hypothesis_seed"] == 0
    assert summary["digest"]["rows"] == 8 and len(summary["digest"]["value"]) == 64
    assert summary["inputs"] == [{"path": str(tmp_path / "results.jsonl"), "results": 8, "runs": 1, "ends": 0}]
    kept = [line.strip() for line in (tmp_path / "results.jsonl").read_text().splitlines()[1:]]
    assert summary["digest"]["value"] == hashlib.sha256(
        "".join(line + "\n" for line in sorted(kept, key=_matrix_order)).encode()).hexdigest()


def _matrix_order(line: str) -> tuple:
    rec = json.loads(line)
    return (rec["position"], ["cpu", "cuda"].index(rec["device"]), ["error", "warn_only"].index(rec["mode"]))


def test_digest_ignores_line_order_but_not_content(tmp_path):
    lines = small_run(tmp_path).read_text().splitlines()
    shuffled = [lines[0]] + random.Random(3).sample(lines[1:], len(lines) - 1)
    (tmp_path / "shuffled.jsonl").write_text("\n".join(shuffled) + "\n")
    changed = [line.replace('"verdict": "missing-warning"', '"verdict": "conforms"') for line in lines]
    (tmp_path / "changed.jsonl").write_text("\n".join(changed) + "\n")

    def digest(name):
        return rows_digest(load([tmp_path / name]).texts)

    assert digest("results.jsonl") == digest("shuffled.jsonl")
    assert digest("results.jsonl") != digest("changed.jsonl")


def test_merge_later_file_wins_and_overrides_are_counted(tmp_path):
    first = write(tmp_path / "cpu.jsonl", [header(), row("put_", verdict="conforms"), row("index_add_")])
    rerun = write(tmp_path / "rerun.jsonl", [header("run-2"), row("put_", verdict="missing-raise", run_id="run-2")])
    gpu = write(tmp_path / "gpu.jsonl", [header("run-3"), row("put_", device="cuda", run_id="run-3")])

    result = build([first, rerun, gpu], tmp_path / "out")
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", keep_default_na=False, dtype=str).set_index("entry_id")
    assert wide.loc["put_", "cpu/error"] == "missing-raise"
    assert wide.loc["put_", "cuda/error"] == "conforms"
    assert wide.loc["index_add_", "cuda/error"] == ""
    assert result.summary["overrides"] == 1
    assert [r["run_id"] for r in result.summary["runs"]] == ["run-1", "run-2", "run-3"]
    # the overridden row is not part of the digest
    alone = write(tmp_path / "alone.jsonl", [header(), header("run-2"), header("run-3"), row("index_add_"),
                                             row("put_", verdict="missing-raise", run_id="run-2"),
                                             row("put_", device="cuda", run_id="run-3")])
    assert result.summary["digest"]["value"] == rows_digest(load([alone]).texts)

    build([rerun, first], tmp_path / "out2")  # the other order: the first run's row wins
    wide = pd.read_csv(tmp_path / "out2" / "matrix.csv", keep_default_na=False, dtype=str).set_index("entry_id")
    assert wide.loc["put_", "cpu/error"] == "conforms"


def test_same_file_rerun_later_line_wins(tmp_path):
    path = write(tmp_path / "r.jsonl", [header(), row("put_", verdict="harness-error"), row("put_")])
    results = load([path])
    assert results.overrides == 1 and list(results.rows["verdict"]) == ["conforms"]
    assert list(results.rows["line"]) == [3]


def test_several_torch_versions_become_a_column_level(tmp_path):
    records = [header(), row("put_"), row("put_", torch_version="2.9.0", verdict="missing-raise"),
               row("put_", torch_version="2.10.0")]
    build([write(tmp_path / "r.jsonl", records)], tmp_path / "out")
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", keep_default_na=False, dtype=str)
    # torch versions in version order, not string order
    assert list(wide.columns[-3:]) == ["2.9.0/cpu/error", "2.10.0/cpu/error", "2.13.0+cpu/cpu/error"]
    assert list(wide.iloc[0, -3:]) == ["missing-raise", "conforms", "conforms"]
    html = (tmp_path / "out" / "matrix.html").read_text()
    assert ">torch 2.9.0<" in html


def test_build_into_existing_directory_keeps_other_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    src = small_run(out)  # the run's own results.jsonl lives in the output folder
    (out / "matrix.md").write_text("old")
    build([src], out)
    assert src.exists() and (out / "matrix.md").read_text() != "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_build_leaves_output_alone_when_a_writer_fails(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "matrix.md").write_text("old")

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(build_mod, "write_png", broken)
    with pytest.raises(RuntimeError):
        build([small_run(tmp_path)], out)
    assert sorted(p.name for p in out.iterdir()) == ["matrix.md"]
    assert (out / "matrix.md").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results.jsonl"]


def test_cli_build_prints_counts(tmp_path):
    proc = run_cli("build", small_run(tmp_path), "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "cpu/warn_only: conforms 2/3 · missing-warning 1" in proc.stdout
    assert (tmp_path / "out" / "matrix.html").exists()


# ----------------------------------------------------------------------------- summary lines

def test_summary_lines(tmp_path):
    records = [header()]
    records += [row(f"ok_{i}", position=i) for i in range(3)]
    records += [row("put_(accumulate=False)", verdict="missing-raise", position=10),
                row("bincount", verdict="stale-doc", position=11),
                row("gone", verdict="unsupported", position=12),
                row("put_(accumulate=False)", mode="warn_only", verdict="missing-warning", position=10),
                row("bincount", mode="warn_only", position=11)]
    lines = summary_lines(write(tmp_path / "r.jsonl", records))
    rerun = ("python -m pytest 'conformance/test_documented.py::test_entry[{}-cpu-{}]' --source torch-docs "
             "--device cpu --mode {} --hypothesis-profile ci --hypothesis-seed 0")
    assert lines == [
        "detconf: FAIL: 3 of 8 cells failing",
        "  FAIL = a cell failed (or is missing: planned, no row) and no known finding waives it · torch 2.13.0+cpu "
        "· cpu · torch-docs · suite abc1234 · 2026-11-21",
        "verdicts: conforms 4 · missing-raise 1 · stale-doc 1 · missing-warning 1 · unsupported 1",
        "  conforms: behaves as documented",
        "  missing-raise: documented to raise in deterministic mode, did not",
        "  stale-doc: documented to raise, did not, and was bitwise deterministic (docs out of date)",
        "  missing-warning: documented to warn in warn_only mode, did not",
        "  unsupported: op or dtype not implemented on that device",
        "  ✗ put_(accumulate=False) [cpu/error]: missing-raise — expected deterministic, observed deterministic",
        "      ↳ rerun: " + rerun.format("put_(accumulate=False)", "error", "error"),
        "  ✗ put_(accumulate=False) [cpu/warn_only]: missing-warning — expected deterministic, observed deterministic",
        "      ↳ rerun: " + rerun.format("put_(accumulate=False)", "warn_only", "warn_only"),
        "  ✗ bincount [cpu/error]: stale-doc — expected deterministic, observed deterministic",
        "      ↳ rerun: " + rerun.format("bincount", "error", "error"),
        "cpu/error: conforms 3/6 · missing-raise 1 · stale-doc 1 · unsupported 1",
        "cpu/warn_only: conforms 1/2 · missing-warning 1",
    ]


def test_summary_lines_without_results(tmp_path):
    path = write(tmp_path / "r.jsonl", [header()])
    assert summary_lines(path) == [f"detconf: no results recorded in {path}"]


def test_summary_lines_bad_input_raises(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(header()) + "\n{oops\n")
    with pytest.raises(ResultsError, match=r"r\.jsonl:2: corrupt JSON line"):
        summary_lines(path)


# ----------------------------------------------------------------------------- diff

def test_diff_regression_exits_1(tmp_path):
    a = write(tmp_path / "a.jsonl", [header(), row("put_"), row("index_add_", verdict="missing-raise")])
    b = write(tmp_path / "b.jsonl", [header("run-2"),
                                     row("put_", verdict="nondeterministic", torch_version="2.14.0", run_id="run-2"),
                                     row("index_add_", torch_version="2.14.0", run_id="run-2")])
    proc = run_cli("diff", a, b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "put_ (torch-docs) [cpu/error]: conforms → nondeterministic (behaviour)  REGRESSION" in proc.stdout
    assert "index_add_ (torch-docs) [cpu/error]: missing-raise → conforms (behaviour)" in proc.stdout
    assert "REGRESSED: 1 cell(s)" in proc.stdout


def test_diff_without_regression_exits_0(tmp_path):
    a = write(tmp_path / "a.jsonl", [header(), row("put_"), row("old_op"), row("index_add_", verdict="missing-raise")])
    b = write(tmp_path / "b.jsonl", [header(), row("put_"), row("new_op", verdict="stale-doc"), row("index_add_")])
    code, lines = diff_main(a, b)
    assert code == 0
    text = "\n".join(lines)
    assert "entries added (1; docs):\n  + new_op (torch-docs): stale-doc 1" in text
    assert "entries removed (1; docs):\n  - old_op (torch-docs): was conforms 1" in text
    assert text.endswith("no regression")
    assert run_cli("diff", a, a).returncode == 0


def test_diff_names_doc_changes_apart_from_behaviour_changes(tmp_path):
    a = write(tmp_path / "a.jsonl", [header(), row("cumsum", expected="raises", observed="raised", promise="raises"),
                                     row("mm", expected="raises"), row("put_")])
    b = write(tmp_path / "b.jsonl", [header("run-2"),
                                     row("cumsum", torch_version="2.14.1", verdict="conforms", run_id="run-2"),
                                     row("mm", torch_version="2.14.1", verdict="stale-doc", expected="raises",
                                         run_id="run-2"),
                                     row("put_", torch_version="2.14.1", verdict="undocumented-raise",
                                         expected="raises", run_id="run-2")])
    code, lines = diff_main(a, b)
    text = "\n".join(lines)
    assert "verdicts changed (2; 1 behaviour, 1 docs):" in text
    assert "mm (torch-docs) [cpu/error]: conforms → stale-doc (behaviour)  REGRESSION" in text
    assert "put_ (torch-docs) [cpu/error]: conforms → undocumented-raise (docs: expected deterministic → raises)" in text
    assert ("promises changed, verdict unchanged (1; docs):\n"
            "  = cumsum (torch-docs) [cpu/error]: expected raises → deterministic, still conforms") in text
    assert code == 1


def test_diff_removed_cell_is_a_regression_only_when_strict(tmp_path):
    a = write(tmp_path / "a.jsonl", [header(), row("put_"), row("put_", device="cuda")])
    b = write(tmp_path / "b.jsonl", [header(), row("put_")])
    code, lines = diff_main(a, b)
    assert code == 0 and "  - put_ (torch-docs) [cuda/error]: was conforms" in lines
    assert diff_main(a, b, strict=True)[0] == 1
    assert run_cli("diff", "--strict", a, b).returncode == 1


def test_diff_reports_fingerprint_changes(tmp_path):
    fp = {"0": "a" * 64, "1": "b" * 64, "2": "c" * 64}
    a = write(tmp_path / "a.jsonl", [header(), row("put_", detail={"fingerprints": fp}), row("index_add_")])
    b = write(tmp_path / "b.jsonl", [header(), row("put_", detail={"fingerprints": dict(fp, **{"1": "d" * 64})}),
                                     row("index_add_", detail={"fingerprints": fp})])
    code, lines = diff_main(a, b)
    assert code == 0
    assert "  # put_ (torch-docs) [cpu/error]: examples 1 of 3 compared" in lines


def test_diff_bad_input_exits_2(tmp_path):
    a = write(tmp_path / "a.jsonl", [header(), row("put_")])
    proc = run_cli("diff", a, tmp_path / "missing.jsonl")
    assert proc.returncode == 2 and "missing.jsonl" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- bad input

def _bad_cases():
    good = json.dumps(row())
    run = json.dumps(header())
    missing = dict(row())
    del missing["verdict"], missing["device"]
    return {
        "missing-file": (None, "cannot read", None),
        "empty": ("", "empty file", None),
        "blank-lines-only": ("\n  \n", "empty file", None),
        "corrupt-json": (f"{run}\n{good}\n{good[:-5]}\n", "corrupt JSON line", 3),
        "not-an-object": (f"{run}\n[1, 2]\n", "expected a JSON object", 2),
        "missing-fields": (f"{run}\n{json.dumps(missing)}\n", "missing required field(s): device, verdict", 2),
        "later-unsupported-schema": (f"{run}\n{json.dumps(dict(row(), schema=4))}\n", "unsupported schema 4", 2),
        "unsupported-schema": (f"{json.dumps(dict(header(), schema=4))}\n", "unsupported schema 4", 1),
        "schema-as-text": (f"{json.dumps(dict(header(), schema='2'))}\n", "unsupported schema '2'", 1),
        "unknown-phase": (f"{run}\n{json.dumps(dict(row(), schema=2, phase='sideways'))}\n", "unknown phase 'sideways'", 2),
        "unknown-verdict": (f"{run}\n{good}\n{json.dumps(row('x', verdict='great'))}\n", "unknown verdict 'great'", 3),
        "unknown-mode": (f"{run}\n{json.dumps(row(mode='strict'))}\n", "unknown mode 'strict'", 2),
        "wrong-type": (f"{run}\n{good}\n{json.dumps(dict(row('x'), entry_id=7))}\n", "field 'entry_id' must be a string", 3),
        "empty-id": (f"{run}\n{json.dumps(dict(row(), entry_id=''))}\n", "field 'entry_id' is empty", 2),
        "bad-fingerprints": (f"{run}\n{json.dumps(row(detail={'fingerprints': [1]}))}\n", "detail.fingerprints", 2),
        "unknown-record": (f"{run}\n{json.dumps({'record': 'note', 'schema': 1})}\n", "unknown record type 'note'", 2),
        "no-record-field": (f"{json.dumps({'schema': 1})}\n", "missing field 'record'", 1),
        "two-objects-on-a-line": (f"{run}\n{good}, {good}\n", "corrupt JSON line", 2),
        "not-utf8": (None, "not UTF-8", 2),
        "header-without-results": (f"{run}\n", "no result records", None),
    }


BAD_CASES = _bad_cases()


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case):
    content, message, line = BAD_CASES[case]
    path = tmp_path / "bad.jsonl"
    if case == "not-utf8":
        path.write_bytes(json.dumps(header()).encode() + b"\n" + b'{"record": "\xff"}\n')
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    out = tmp_path / "out"
    proc = run_cli("build", path, "--out", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and message in lines[0], lines[0]
    if line is not None:
        assert f"{path}:{line}: " in lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["bad.jsonl"] if path.exists() else [])


def test_bad_second_file_is_named_and_nothing_is_written(tmp_path):
    good = write(tmp_path / "good.jsonl", [header(), row()])
    bad = write(tmp_path / "bad.jsonl", [header("run-2"), dict(row(), schema=4, run_id="run-2")])
    proc = run_cli("build", good, bad, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"reports: error: {bad}:2: unsupported schema 4 "
                                   "(this reader knows schemas 1, 2, 3; it writes 3)")
    assert not (tmp_path / "out").exists()


def test_schema_1_and_schema_2_files_merge_with_phases_as_rows(tmp_path):
    """Files written before phases (schema 1) read as phase ``program``; a backward-only row of a
    schema-2 file is a matrix row of its own, and the markdown shows the phase column."""
    old = write(tmp_path / "old.jsonl", [header(), row()])
    new_rows = [dict(header("run-2"), schema=2),
                dict(row(), schema=2, run_id="run-2", phase="backward-only", verdict="not-reached", reach=0.0,
                     targets=["aten.put_"])]
    new = write(tmp_path / "new.jsonl", new_rows)
    proc = run_cli("build", old, new, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", keep_default_na=False, dtype=str)
    assert list(zip(wide["entry_id"], wide["phase"])) == [(row()["entry_id"], "program"),
                                                          (row()["entry_id"], "backward-only")]
    assert "not-reached" in set(wide.iloc[1])
    assert re.search(r"\| entry +\| phase +\|", (tmp_path / "out" / "matrix.md").read_text())


def test_bad_input_leaves_an_existing_output_untouched(tmp_path):
    out = tmp_path / "out"
    build([small_run(tmp_path)], out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row(verdict="??")) + "\n")
    proc = run_cli("build", bad, "--out", out)
    assert proc.returncode == 2 and "bad.jsonl:1: unknown verdict" in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_output_path_that_is_a_file_is_an_error(tmp_path):
    target = tmp_path / "out"
    target.write_text("not a directory")
    proc = run_cli("build", small_run(tmp_path), "--out", target)
    assert proc.returncode == 2 and "not a directory" in proc.stderr and "Traceback" not in proc.stderr
    assert target.read_text() == "not a directory"


# ----------------------------------------------------------------------------- boundaries

def test_reports_never_import_the_test_machinery():
    code = (
        "import sys, detconf.reports.build, detconf.reports.diff, detconf.reports.summary, detconf.reports.load\n"
        "import detconf.reports.matrix, detconf.reports.__main__\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'hypothesis')\n"
        "             or m.startswith(('detconf.engine', 'detconf.conformance', 'detconf.plugin')))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_drift_subcommand_is_optional(monkeypatch, capsys):
    import importlib.util

    from detconf.reports import __main__ as cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "detconf.reports.drift" else real(name, *a))
    assert cli.main(["drift"]) == 2
    assert "detconf.reports.drift" in capsys.readouterr().err


def test_verdict_vocabulary_matches_the_engine():
    verdict = pytest.importorskip("detconf.engine.verdict")
    assert set(VERDICTS) == set(verdict.VERDICTS)
    assert PASSING == set(verdict.PASSING)
