"""Outputs are safe to open: no formulas in CSV cells, escaped Markdown, no control characters
in terminal output — checked through the real writers with hostile entry ids."""
import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from detconf.reports.safe import csv_cell, md_cell, terminal
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["=HYPERLINK(\"http://x\",\"y\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)", "\tx", "\rx",
           "a|b", "`tick`", "x\x1b[31mred\x1b[0m", "line\nbreak"]


@pytest.mark.parametrize("value", ["=1+1", "+A1", "-x", "@a", "\tx", "\rx"])
def test_a_cell_a_spreadsheet_would_evaluate_is_quoted(value):
    assert csv_cell(value) == "'" + value


@pytest.mark.parametrize("value", ["-1.5", "+2", "3e-5", "plain", "", 7, None, "a=b"])
def test_numbers_and_plain_text_are_left_alone(value):
    assert csv_cell(value) == value


def test_markdown_and_terminal_text_is_neutralised():
    assert md_cell("a|b`c<d>\x1b[31m") == "a\\|b\\`c\\<d\\>?\\[31m"
    assert terminal("ok\x1b[2Jgone\x07") == "ok?[2Jgone?"
    assert terminal("two\nlines") == "two\nlines"


def _results(tmp_path, ids, mode="error"):
    rows = [{"record": "run", "schema": 2, "run_id": "r", "started": "2026-11-22T00:00:00Z", "env": {}}]
    for i, entry_id in enumerate(ids):
        rows.append({"record": "result", "schema": 2, "run_id": "r", "entry_id": entry_id, "op": entry_id,
                     "sentence": entry_id, "source": "torch-docs", "list_name": "deterministic", "position": i,
                     "promise": "deterministic", "device": "cpu", "mode": mode,
                     "verdict": "conforms" if mode != "off" else "no-difference-seen",
                     "expected": "deterministic" if mode != "off" else "observe", "observed": "deterministic", "torch_version": "2.13.0",
                     "examples": 1, "runs": 2, "detail": {}})
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cli(*args):
    return warm.reports(*args, timeout=120)


def test_published_outputs_of_hostile_ids_are_safe(tmp_path):
    path = _results(tmp_path, HOSTILE)
    proc = _cli("build", path, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    for name in ("matrix.csv", "results.csv"):
        with open(tmp_path / "out" / name, newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                for cell in row:
                    assert not cell.startswith(("=", "+", "@", "\t", "\r")) or cell.startswith("'"), (name, cell)
                    assert not (cell.startswith("-") and not cell[1:2].isdigit()), (name, cell)
    md = (tmp_path / "out" / "matrix.md").read_text(encoding="utf-8")
    assert "\x1b" not in md and "a\\|b" in md
    table_rows = [line for line in md.splitlines() if line.startswith("| torch-docs")]
    header = next(line for line in md.splitlines() if line.startswith("| source"))
    cells = lambda line: len(re.split(r"(?<!\\)\|", line))  # noqa: E731
    assert table_rows and {cells(line) for line in table_rows} == {cells(header)}  # no id broke a row
    assert "\x1b" not in proc.stdout


def test_diff_and_sensitivity_output_hold_no_control_characters(tmp_path):
    a = _results(tmp_path, HOSTILE)
    b_dir = tmp_path / "b"
    b_dir.mkdir()
    b = _results(b_dir, HOSTILE[:3])
    proc = _cli("diff", a, b)
    assert "\x1b" not in proc.stdout and "x?[31mred" in proc.stdout
    off_dir = tmp_path / "off"
    off_dir.mkdir()
    proc = _cli("sensitivity", _results(off_dir, HOSTILE, mode="off"), "--out", tmp_path / "sens")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in (tmp_path / "sens" / "sensitivity.md").read_text(encoding="utf-8")
    frame = pd.read_csv(tmp_path / "sens" / "sensitivity.csv", dtype=str, keep_default_na=False)
    assert all(not str(v).startswith("=") for v in frame.to_numpy().ravel())
