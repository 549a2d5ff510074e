"""``python -m detconf.reports fingerprints``: two GPUs' results files compared example by example.

The data are rows of the first GPU runs (tests/data/fingerprints/: 14 cells of an H100 run and
13 of an H200 run of the same suite and torch, cut from ../shared/cuda-evidence/), chosen to
cover each status and reason."""
from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from detconf.reports.fingerprints import main
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "fingerprints"
H100, H200 = DATA / "h100.jsonl", DATA / "h200.jsonl"

#: (entry, phase, device, mode) -> (status, reason)
EXPECTED = {
    ("NLLLoss2d[npu]", "program", "cuda", "error"): ("same", ""),
    ("addbmm[npu]", "program", "cuda", "error"): ("same", ""),
    ("addbmm[npu]", "program", "cuda", "warn_only"): ("same", ""),
    ("Conv2d[cuda]", "program", "cuda", "error"): ("same", ""),
    ("gather.backward[cuda]", "backward-only", "cuda", "error"): ("same", ""),
    ("index_add[cuda]", "program", "cuda", "error"): ("same", ""),
    ("ctc_loss[npu]", "program", "cuda", "error"): ("not-comparable", "no per-example fingerprints in A and B"),
    ("put_[npu]", "program", "cuda", "warn_only"): ("not-comparable", "verdict is not conforms on both"),
    # the cuBLAS check's detail.fingerprints is a list of run fingerprints, not per example
    ("CUBLAS_WORKSPACE_CONFIG=:4096:8:mm", "program", "cuda", "warn_only"):
        ("not-comparable", "no per-example fingerprints in A and B"),
    ("AdaptiveAvgPool3d.backward[cuda]", "program", "cuda", "error"):
        ("not-comparable", "expected raises: a documented alert, not determinism (the op may run its "
                           "nondeterministic kernel)"),
    ("AdaptiveAvgPool3d.backward[cuda]", "program", "cuda", "off"): ("not-comparable", "mode off: no determinism promised"),
    ("AdaptiveAvgPool3d.backward[cuda]", "program", "cuda", "warn_only"):
        ("not-comparable", "expected warns: a documented alert, not determinism (the op may run its "
                           "nondeterministic kernel)"),
    ("ReplicationPad2d.backward[cuda]", "program", "cuda", "error"): ("not-comparable", "verdict is not conforms on both"),
    ("addbmm[npu]", "program", "cpu", "error"): ("only-in-a", "no such cell in B"),
}


def run(a: Path, b: Path, out: Path, capsys) -> tuple[int, str, list[dict], str]:
    code = main([str(a), str(b), "--out", str(out)])
    printed = capsys.readouterr()
    assert printed.err == ""
    text = (out / "fingerprints.csv").read_text(encoding="utf-8") if code == 0 else ""
    return code, printed.out, list(csv.DictReader(io.StringIO(text))), text


def by_cell(rows: list[dict]) -> dict:
    return {(r["entry_id"], r["phase"], r["device"], r["mode"]): r for r in rows}


def test_every_cell_gets_its_status_and_reason(tmp_path, capsys):
    code, out, rows, _ = run(H100, H200, tmp_path / "fp", capsys)
    assert code == 0
    assert {cell: (r["status"], r["reason"]) for cell, r in by_cell(rows).items()} == EXPECTED
    cells = by_cell(rows)
    assert cells[("index_add[cuda]", "program", "cuda", "error")]["examples_compared"] == "18"
    assert cells[("index_add[cuda]", "program", "cuda", "error")]["examples_differing"] == "0"
    assert cells[("index_add[cuda]", "program", "cuda", "error")]["device_name_a"] == "NVIDIA H100 80GB HBM3"
    assert cells[("index_add[cuda]", "program", "cuda", "error")]["device_name_b"] == "NVIDIA H200"
    # not compared, but where both fingerprint the same examples the counts are there: the warn_only
    # case documented to warn ran its nondeterministic kernel and gave other bytes on the other GPU
    assert cells[("AdaptiveAvgPool3d.backward[cuda]", "program", "cuda", "warn_only")]["examples_differing"] == "6"
    assert out.splitlines() == [
        "fingerprints: 6 deterministic cells gave the same bytes, 0 differ (0 examples); 7 cells not comparable, "
        "1 only in A, 0 only in B; mode error: 5 same, 0 differ (A: NVIDIA H100 80GB HBM3; B: NVIDIA H200)",
        f"wrote fingerprints.md, fingerprints.csv to {tmp_path / 'fp'}",
    ]
    statuses = [r["status"] for r in rows]
    assert statuses == sorted(statuses, key=["differs", "same", "not-comparable", "only-in-a", "only-in-b"].index)


def test_the_outputs_are_byte_stable_whatever_the_line_order(tmp_path, capsys):
    _, _, _, first = run(H100, H200, tmp_path / "one", capsys)
    lines = H200.read_text(encoding="utf-8").splitlines()
    rows = lines[1:]
    random.Random(7).shuffle(rows)
    shuffled = tmp_path / "h200.jsonl"
    shuffled.write_text("\n".join([lines[0], *rows]) + "\n", encoding="utf-8")
    _, _, _, second = run(H100, shuffled, tmp_path / "two", capsys)
    assert first == second
    md = [(tmp_path / d / "fingerprints.md").read_text(encoding="utf-8") for d in ("one", "two")]
    assert md[0] == md[1]  # the shuffled copy has the same name
    assert "| same " in md[0] and "NVIDIA H200" in md[0]


def _replant(path: Path, out: Path, entry: str, mode: str, change) -> None:
    """A copy of ``path`` with a later row of the cell (a re-run: the later row wins), changed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    row = next(json.loads(line) for line in lines
               if f'"entry_id": {json.dumps(entry)}' in line and f'"mode": "{mode}"' in line)
    change(row["detail"])
    out.write_text("\n".join([*lines, json.dumps(row)]) + "\n", encoding="utf-8")


def test_a_planted_differing_fingerprint_is_reported_as_differing(tmp_path, capsys):
    planted = tmp_path / "h200.jsonl"

    def flip(detail):
        detail["fingerprints"]["3"] = "0" * 64

    _replant(H200, planted, "index_add[cuda]", "error", flip)
    code, out, rows, _ = run(H100, planted, tmp_path / "fp", capsys)
    assert code == 0
    cell = by_cell(rows)[("index_add[cuda]", "program", "cuda", "error")]
    assert (cell["status"], cell["examples_compared"], cell["examples_differing"], cell["reason"]) == (
        "differs", "18", "1", "examples 3 differ")
    assert rows[0]["entry_id"] == "index_add[cuda]"  # differing cells come first
    assert out.startswith("fingerprints: 5 deterministic cells gave the same bytes, 1 differ (1 examples); ")
    assert "mode error: 4 same, 1 differ" in out


def test_other_examples_and_a_case_fingerprint_alone_are_told_apart(tmp_path, capsys):
    planted = tmp_path / "h200.jsonl"
    _replant(H200, planted, "Conv2d[cuda]", "error", lambda d: d["fingerprints"].pop("11"))
    twice = tmp_path / "h200-2.jsonl"
    _replant(planted, twice, "gather.backward[cuda]", "error", lambda d: d.update(fingerprint="f" * 64))
    code, _, rows, _ = run(H100, twice, tmp_path / "fp", capsys)
    assert code == 0
    cells = by_cell(rows)
    conv = cells[("Conv2d[cuda]", "program", "cuda", "error")]
    assert (conv["status"], conv["reason"]) == ("not-comparable", "different examples: 12 in A, 11 in B")
    gather = cells[("gather.backward[cuda]", "backward-only", "cuda", "error")]
    assert (gather["status"], gather["examples_differing"], gather["case_fingerprint"], gather["reason"]) == (
        "differs", "0", "differs", "every example the same, the case fingerprint differs")


def test_without_out_the_markdown_goes_to_standard_output(capsys):
    assert main([str(H100), str(H200)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Cross-GPU fingerprints\n") and "| index\\_add\\[cuda\\]" in out


@pytest.mark.parametrize("make,needle", [
    (lambda d: d / "absent.jsonl", "absent.jsonl: cannot read it (No such file or directory)"),
    (lambda d: d, "is a directory, not a results file"),
    (lambda d: _write(d / "notes.txt", "hello\n"), "notes.txt:1: not JSON (not a results file?)"),
    (lambda d: _write(d / "other.json", '{"a": 1}\n'), "other.json:1: missing 'schema'"),
    (lambda d: _write(d / "empty.jsonl", ""), "empty.jsonl: no result records (not a results file?)"),
    (lambda d: _write(d / "rows.jsonl", H200.read_text(encoding="utf-8").splitlines()[1] + "\n"),
     "rows.jsonl:1: result row of run '20261125T184027Z-205212' comes before any run record"),
])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, make, needle):
    bad = make(tmp_path)
    out = warm.reports("fingerprints", H100, bad, "--out", tmp_path / "fp")
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("reports: error: "), out.stderr
    assert needle in out.stderr
    assert out.stdout == "" and not (tmp_path / "fp").exists()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_the_report_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None\nimport detconf.reports.fingerprints\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
