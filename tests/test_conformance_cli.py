"""``python -m detconf.conformance entries``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from detconf.conformance.catalog import snapshot_entries
from detconf.engine.entry import Entry

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "detconf.conformance", *args], cwd=ROOT, capture_output=True, text=True)


def test_entries_for_a_doc_version_are_json_lines_with_sorted_keys():
    out = run_cli("entries", "--doc-version", "2.13.0", "--source", "torch-docs")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    records = [json.loads(line) for line in lines]
    for line, record in zip(lines, records):
        assert list(record) == sorted(record)
        assert line == json.dumps(record, sort_keys=True)
    # The docstring's 48 entries, then the version-ranged facts that add promises for these docs
    # (conformance/data/version-facts.json: kthvalue and integer histc on CUDA).
    from detconf.conformance.findings import fact_entries

    facts = fact_entries("2.13.0")
    assert len(lines) == 48 + len(facts) and all(e.list_name == "fact" for e in facts)
    assert [Entry.from_json(r) for r in records] == snapshot_entries("2.13.0") + facts
    put = next(r for r in records if r["entry_id"] == "put_(accumulate=False)")
    assert put["cases"] == [{"accumulate": False}] and put["doc_version"] == "2.13.0"


def test_entries_default_to_the_installed_torch():
    pytest.importorskip("torch")
    out = run_cli("entries")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert records and all(r["doc_version"] is None for r in records)
    assert {"put_(accumulate=False)", "MaxUnpool1d"} <= {r["entry_id"] for r in records}


@pytest.mark.parametrize(
    "args, words",
    [
        (("entries", "--doc-version", "0.1"), "unknown doc version '0.1'; known versions: 1.8.0,"),
        (("entries", "--source", "nowhere"), "unknown source 'nowhere'"),
        (("entries", "--bogus"), "unrecognized arguments: --bogus"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        ((), "a command is required"),
    ],
)
def test_errors_are_one_line_and_exit_2(args, words):
    out = run_cli(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and words in out.stderr
    assert "Traceback" not in out.stderr
