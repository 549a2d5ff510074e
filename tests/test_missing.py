"""Run completeness in the reports: a planned case without a row is ``missing`` (failing, never
blank) in the matrix, the summary, the counts and ``diff``; older run records (a count only)
give no ``missing`` rows, and the output says so."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from detconf.reports.build import build
from detconf.reports.diff import main as diff_main
from detconf.reports.load import ResultsError, load
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = [{"source": "torch-docs", "doc_version": None, "entry_id": f"op{k}", "op": f"torch.op{k}",
            "sentence": f"op{k} is deterministic", "list_name": "deterministic", "position": k,
            "promise": "deterministic"} for k in range(3)]


def _case(k: int, mode: str) -> dict:
    return {"id": f"op{k}-cpu-{mode}", "entry": k, "phase": "program", "device": "cpu", "mode": mode,
            "compile": "eager", "expected": "deterministic"}


def _row(run_id: str, k: int, mode: str, verdict: str = "conforms") -> dict:
    e = ENTRIES[k]
    return {"record": "result", "schema": 3, "run_id": run_id, "entry_id": e["entry_id"], "op": e["op"],
            "sentence": e["sentence"], "source": "torch-docs", "list_name": "deterministic", "position": k,
            "promise": "deterministic", "device": "cpu", "mode": mode, "phase": "program", "compile": "eager",
            "expected": "deterministic", "observed": "deterministic", "verdict": verdict, "torch_version": "2.13.0"}


def _run(run_id: str, cases: list[dict] | None, **extra) -> dict:
    rec = {"record": "run", "schema": 3, "run_id": run_id, "started": "2026-11-23T10:00:00Z",
           "env": {"torch_version": "2.13.0"}, **extra}
    if cases is not None:
        rec.update(planned=len(cases), planned_entries=ENTRIES, planned_cases=cases)
    return rec


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


ALL = [_case(k, m) for k in range(3) for m in ("error", "warn_only")]


def _reports(*args: str) -> subprocess.CompletedProcess:
    return warm.reports(*args, timeout=120)


def test_a_planned_case_without_a_row_is_missing_and_failing(tmp_path):
    path = _write(tmp_path / "r.jsonl", [_run("r1", ALL), _row("r1", 0, "error"), _row("r1", 0, "warn_only"),
                                         _row("r1", 1, "error")])
    result = build([path], tmp_path / "out")
    summary = result.summary
    assert summary["totals"]["missing"] == summary["missing"] == 3
    assert summary["failing"] == 3 and summary["passing"] == 3 and summary["cells"] == 6
    assert summary["completeness"] == [{"run_id": "r1", "path": str(path), "planned": 6, "listed": True,
                                        "rows": 3, "missing": 3}]
    matrix = (tmp_path / "out" / "matrix.csv").read_text()
    assert matrix.count("missing") == 3
    assert "op2" in matrix  # an entry with no row at all is in the matrix, as missing
    md = (tmp_path / "out" / "matrix.md").read_text()
    assert len(re.findall(r"\| missing +\|", md)) >= 3  # the cells, and the legend
    assert summary["digest"]["rows"] == 3  # missing rows have no text: the digest covers the rows read
    out = _reports("build", str(path), "--out", str(tmp_path / "cli"))
    assert out.returncode == 0
    assert "incomplete: run r1" in out.stdout and "3 of 6 planned cases have no row (shown as missing)" in out.stdout
    assert "cpu/error: conforms 2/3 · missing 1" in out.stdout


def test_a_crash_storm_that_lost_most_rows_is_visibly_incomplete(tmp_path):
    entries = [dict(ENTRIES[0], entry_id=f"e{k}", op=f"torch.e{k}", position=k) for k in range(40)]
    cases = [{"id": f"e{k}-cpu-error", "entry": k, "phase": "program", "device": "cpu", "mode": "error",
              "compile": "eager"} for k in range(40)]
    run = _run("r1", None, planned=40, planned_entries=entries, planned_cases=cases)
    row = dict(_row("r1", 0, "error"), entry_id="e0", op="torch.e0", position=0)
    path = _write(tmp_path / "r.jsonl", [run, row])
    summary = build([path], tmp_path / "out").summary
    assert summary["missing"] == 39 and summary["failing"] == 39 and summary["passing"] == 1


def test_a_row_anywhere_fills_the_cell(tmp_path):
    """A shard or re-run that judged the case: not missing. The latest attempt's loss does not
    hide an earlier judgement, and a later run fills an earlier run's hole."""
    crashed = _write(tmp_path / "a.jsonl", [_run("r1", ALL), _row("r1", 0, "error")])
    rerun = _write(tmp_path / "b.jsonl", [_run("r2", [c for c in ALL if c["entry"] != 0]),
                                          *[_row("r2", k, m) for k in (1, 2) for m in ("error", "warn_only")]])
    results = load([crashed, rerun])
    verdicts = dict(zip(zip(results.pylist("entry_id"), results.pylist("mode")), results.pylist("verdict")))
    assert verdicts == {("op0", "error"): "conforms", ("op0", "warn_only"): "missing",
                        **{(f"op{k}", m): "conforms" for k in (1, 2) for m in ("error", "warn_only")}}
    assert results.missing == 1
    # One file, two runs: the second fills the first's holes.
    both = _write(tmp_path / "c.jsonl", [_run("r1", ALL), _row("r1", 0, "error"),
                                         _run("r3", ALL), *[_row("r3", k, m) for k in range(3)
                                                            for m in ("error", "warn_only")]])
    assert load([both]).missing == 0


def test_older_run_records_give_no_missing_rows_and_say_so(tmp_path):
    path = _write(tmp_path / "r.jsonl", [_run("r1", None, planned=6), _row("r1", 0, "error")])
    assert load([path]).missing == 0
    out = _reports("build", str(path), "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
    assert "1 run(s) do not list their planned cases" in out.stdout


def test_diff_names_missing_cells_as_regressions(tmp_path):
    before = _write(tmp_path / "a.jsonl", [_run("r1", ALL), *[_row("r1", k, m, "unsupported" if k == 1 else "conforms")
                                                             for k in range(3) for m in ("error", "warn_only")]])
    after = _write(tmp_path / "b.jsonl", [_run("r2", ALL), _row("r2", 0, "error"), _row("r2", 0, "warn_only"),
                                          _row("r2", 2, "error"), _row("r2", 2, "warn_only")])
    code, lines = diff_main(before, after)
    assert code == 1
    regressed = [line for line in lines if line.endswith("REGRESSION")]
    assert len(regressed) == 2 and all("unsupported → missing" in line for line in regressed)
    assert lines[-1] == "REGRESSED: 2 cell(s) no longer conform (2 of them missing: planned, no row)"
    # A complete run against itself: no regression.
    assert diff_main(before, before)[0] == 0
    out = _reports("diff", str(before), str(after))
    assert out.returncode == 1 and "REGRESSION" in out.stdout


@pytest.mark.parametrize("change,needle", [
    (lambda r: r.update(planned_cases="x"), "'planned_entries' and 'planned_cases' must both be lists"),
    (lambda r: r["planned_cases"][0].update(entry=9), "planned_cases[0].entry must be an index"),
    (lambda r: r["planned_cases"][0].update(mode="sometimes"), "planned_cases[0].mode 'sometimes' is not one of"),
    (lambda r: r["planned_cases"].append(dict(r["planned_cases"][0])), "is listed twice"),
    (lambda r: r["planned_entries"][0].update(entry_id=""), "planned_entries[0].entry_id must be a non-empty"),
    (lambda r: r.update(planned=5), "'planned' is 5 but 6 planned cases are listed"),
])
def test_a_malformed_plan_is_a_one_line_error(tmp_path, change, needle):
    run = json.loads(json.dumps(_run("r1", ALL)))
    change(run)
    path = _write(tmp_path / "r.jsonl", [run, _row("r1", 0, "error")])
    with pytest.raises(ResultsError, match=r"r\.jsonl:1: run record: ") as info:
        load([path])
    assert needle in str(info.value) and "\n" not in str(info.value)
    out = _reports("build", str(path), "--out", str(tmp_path / "out"))
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and needle in out.stderr
