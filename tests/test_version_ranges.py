"""Version-ranged promises: an entry of a data-file source (flag API, reproducibility notes, a
vendor list) may name the torch releases whose docs make its promise (``torch``, a PEP 440
specifier). A case of an entry whose range leaves out the torch under test -- ``--doc-version``'s
release, else the installed torch -- is not run: its row is ``skipped``, says why, and carries
``detail.needs_torch``; certification accepts it as not applicable.

The false alarm this is for: the cuBLAS workspace sentence ("If one of these environment variable
configurations is not set, a RuntimeError will be raised ... torch.mm, torch.mv, torch.bmm") is in
the docstrings of torch 1.8.0 to 2.9.0 only (torch 2.10 removed it and the check,
pytorch/pytorch#161749), yet its cells were judged -- and ``violated`` -- on an H100 with 2.11.0.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from detconf.conformance.catalog import TORCH_DOCS, data_file, doc_versions, load_catalog, read_entries_file
from detconf.conformance.plan import Case, not_applicable, plan
from detconf.engine.entry import CatalogError, Entry
from tests.environments import allow_this_machines_plugins, as_a_whole_plan_run
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
CUBLAS_SENTENCE = "will be raised from these operations when called with CUDA tensors"
NOTES = load_catalog(["repro-notes"])
FLAGS = load_catalog(["flag-api"])
CUBLAS = [e for e in NOTES if e.list_name == "cublas-workspace"]
MODES = ["error", "warn_only"]


def _entry(**fields) -> Entry:
    return Entry(**{"id": "x", "op": "torch.x", "sentence": "s", "promise": "behaves", "source": "repro-notes",
                    **fields})


# ----------------------------------------------------------------------------- the field

def test_the_range_is_read_from_the_data_files_and_round_trips_through_json():
    assert len(CUBLAS) == 12 and {e.torch for e in CUBLAS} == {"<2.10"}
    for entry in NOTES + FLAGS:
        assert Entry.from_json(json.loads(json.dumps(entry.to_json()))) == entry
        hash(entry)
    ranged = _entry(torch=">=2.14")
    assert ranged.to_json()["torch"] == ">=2.14" and Entry.from_json(ranged.to_json()) == ranged
    assert "torch" not in _entry().to_json() and _entry().torch is None  # no range: every release


@pytest.mark.parametrize(("version", "applies"), [
    ("2.9.0", True), ("2.9.1+cu128", True), ("1.8.0", True),
    ("2.10.0", False), ("2.10.0a0+git1234abc", False),  # a pre-release counts as its release
    ("2.11.0", False), ("2.13.0+cpu", False), ("2.14.1+cu130", False),
])
def test_local_labels_and_pre_releases_count_as_their_release(version, applies):
    assert CUBLAS[0].applies_to_torch(version) is applies


@pytest.mark.parametrize(("value", "problem"), [
    ("2.10", "is '2.10'"),  # a bare version is not a range: write "<2.10" or "==2.10.*"
    ("<2.10,", "(empty clause)"),
    ("", "is ''"),
    ("<two", "is '<two'"),
    (2.10, "must be a string, got a number (2.1)"),
])
def test_a_malformed_range_is_a_one_line_error_naming_file_entry_and_field(tmp_path, value, problem):
    raw = json.loads(data_file("repro-notes").read_text(encoding="utf-8"))
    index = next(i for i, item in enumerate(raw) if item["entry_id"] == "CUBLAS_WORKSPACE_CONFIG=wrong:bmm")
    raw[index]["torch"] = value
    path = tmp_path / "repro_notes.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        read_entries_file(path, source="repro-notes")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: malformed catalog entry #{index} ('CUBLAS_WORKSPACE_CONFIG=wrong:bmm'): "
                              "field 'torch' ")
    assert problem in message


def test_an_entry_made_in_code_is_checked_too():
    with pytest.raises(CatalogError, match=r"^entry 'x': field 'torch' is '2\.10' .*expected a PEP 440") as info:
        _entry(torch="2.10")
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- the evidence

def _releases_whose_docstring_says(text: str) -> list[str]:
    return [v for v in doc_versions() if text in " ".join(
        (TORCH_DOCS / v / "use_deterministic_algorithms.txt").read_text(encoding="utf-8").split())]


def test_the_cublas_sentence_is_in_the_docstrings_of_torch_before_2_10_only():
    """The range of the cuBLAS entries is read off the project's docstring snapshots."""
    having = _releases_whose_docstring_says(CUBLAS_SENTENCE)
    assert having == [v for v in doc_versions() if CUBLAS[0].applies_to_torch(v)]
    assert having[-1] == "2.9.0" and "2.10.0" in doc_versions()
    for entry in CUBLAS:
        assert CUBLAS_SENTENCE in entry.sentence and "pytorch/pytorch#161749" in entry.sentence


def test_every_range_holds_the_releases_whose_snapshot_names_what_the_promise_is_about():
    """Each ranged entry's promise names a thing (a sentence, a function, an attribute) whose
    first and last release in the snapshots are the range's ends."""
    marks = {"cublas-workspace": CUBLAS_SENTENCE, "inductor": "the Inductor deterministic mode is also tuned on",
             "fill-uninitialized-memory": "torch.utils.deterministic.fill_uninitialized_memory",
             "flag-api": "warn_only", "debug-mode": "torch.set_deterministic_debug_mode` offers an alternative"}
    ranged = [e for e in NOTES + FLAGS if e.torch is not None]
    assert len(ranged) == 12 + 21 + 3 + 12
    for entry in ranged:
        mark = marks["debug-mode" if entry.source == "flag-api" and "debug_mode" in entry.id else entry.list_name]
        documented = _releases_whose_docstring_says(mark)
        assert documented == [v for v in doc_versions() if entry.applies_to_torch(v)], entry.id


# ----------------------------------------------------------------------------- planning

def test_on_2_13_the_cublas_cells_plan_as_not_applicable_with_the_reason():
    cases = plan(NOTES, ["cuda", "cpu"], MODES, torch_version="2.13.0+cpu")
    cublas = [c for c in cases if c.entry.list_name == "cublas-workspace"]
    assert len(cublas) == 12 * 2 * 2
    for case in cublas:
        assert case.not_applicable == ("not applicable: the promise is made by the docs of torch <2.10 only; "
                                       "this torch is 2.13.0+cpu")
        assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case
    assert all(c.not_applicable is None for c in cases if c.entry.list_name != "cublas-workspace")


def test_the_h100_false_alarm_cells_do_not_apply_to_2_11():
    cases = plan(CUBLAS, ["cuda"], MODES, torch_version="2.11.0")
    alarm = [c for c in cases if c.entry.id.split(":")[0] in ("CUBLAS_WORKSPACE_CONFIG=unset", "CUBLAS_WORKSPACE_CONFIG=wrong")]
    assert len(alarm) == 12 and all(c.not_applicable and "this torch is 2.11.0" in c.not_applicable for c in alarm)


def test_with_doc_version_the_promises_of_that_release_apply():
    cases = plan(NOTES, ["cuda"], MODES, torch_version="2.13.0", doc_version="2.9.0")
    assert all(c.not_applicable is None for c in cases if c.entry.list_name == "cublas-workspace")
    inductor = [c for c in cases if c.entry.list_name == "inductor"]
    assert inductor and all(c.not_applicable == "not applicable: the promise is made by the docs of torch >=2.10 "
                            "only; this run judges the promises of torch 2.9.0 (--doc-version)" for c in inductor)
    # --doc-version wins over the installed torch either way
    assert plan(CUBLAS, ["cuda"], ["error"], torch_version="2.9.0", doc_version="2.13.0")[0].not_applicable


def test_an_entry_for_a_later_release_is_skipped_on_this_one():
    later = _entry(torch=">=2.14")
    assert not_applicable(later, torch_version="2.13.0") == (
        "not applicable: the promise is made by the docs of torch >=2.14 only; this torch is 2.13.0")
    for version in ("2.14.0", "2.14.1+cu130", "2.14.0rc1", "2.15.0a0+gitabc"):
        assert not_applicable(later, torch_version=version) is None, version
    assert not_applicable(later, torch_version=None) is None  # no torch named: every entry applies
    assert not_applicable(_entry(), torch_version="1.8.0") is None


def test_a_raise_is_not_documented_elsewhere_by_an_entry_that_does_not_apply():
    cpu = _entry(id="put", op="torch.Tensor.put_", promise="deterministic", devices=("cpu",), source="vendor")
    cuda = _entry(id="put[cuda]", op="torch.Tensor.put_", promise="raises", devices=("cuda",), source="vendor",
                  torch=">=2.14")
    by_id = {c.entry.id: c for c in plan([cpu, cuda], ["cuda"], ["error"], torch_version="2.14.0")}
    assert by_id["put"].raise_documented_by == "put[cuda]"
    by_id = {c.entry.id: c for c in plan([cpu, cuda], ["cuda"], ["error"], torch_version="2.13.0")}
    assert by_id["put"].raise_documented_by is None and by_id["put[cuda]"].not_applicable


# ----------------------------------------------------------------------------- a run, its rows, certification

def _run(tmp_path, *args) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q",
                          "--source", "repro-notes", "--device", "cpu", "--hypothesis-profile", "ci", "-n", "0",
                          "--no-report-build", "--results", str(results), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    return out, results


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def cublas_run(tmp_path_factory):
    """The cuBLAS cells on the CPU with the installed torch's promises."""
    return _run(tmp_path_factory.mktemp("ranges"), "-k", "CUBLAS_WORKSPACE_CONFIG")


def test_a_run_writes_a_valid_skipped_row_for_each_cell_that_does_not_apply(cublas_run):
    from detconf.reports.load import load

    out, results = cublas_run
    assert out.returncode == 0, out.stdout[-3000:]
    records = _records(results)
    run, end = records[0], records[-1]
    rows = [r for r in records if r["record"] == "result"]
    assert len(rows) == len(run["planned_cases"]) == 12 * 2 and end["missing"] == 0 and end["outcome"] == "complete"
    assert {c["expected"] for c in run["planned_cases"]} == {row["expected"] for row in rows}
    installed = str(torch.__version__)
    # The sentence's last release is 2.9 (the snapshots, above); this torch's own release decides.
    documented_here = Version(Version(installed).base_version) < Version("2.10")
    for row in rows:
        assert row["verdict"] == "skipped" and row["observed"] == "skipped"
        if documented_here:  # the promise applies; the CPU is not CUDA
            assert row["detail"].get("needs_device") == "cuda" and "needs_torch" not in row["detail"]
        else:
            assert row["detail"]["needs_torch"] == "<2.10"
            assert row["detail"]["reason"] == ("not applicable: the promise is made by the docs of torch <2.10 only; "
                                               f"this torch is {installed}")
    assert load([results]).column("verdict").to_pylist() == ["skipped"] * len(rows)  # the reports read the rows


def test_certification_accepts_the_cells_that_do_not_apply(cublas_run, tmp_path):
    from detconf.reports.verify import verify

    out, results = cublas_run
    assert out.returncode == 0, out.stdout[-3000:]
    records = _records(results)
    as_a_whole_plan_run(records)  # the small run stands for a certifiable one (see test_certify)
    copy = tmp_path / "results.jsonl"
    copy.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    made = warm.reports("certify", copy, "--out", tmp_path / "pkg", "--product", "x86-64 CPU", "--vendor",
                        "Example Inc.", *allow_this_machines_plugins(records[0]), timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    code, lines = verify(str(tmp_path / "pkg"))
    assert code == 0 and "24 must-pass cases" in lines[-1], lines


def test_with_doc_version_the_run_judges_that_releases_promises(tmp_path):
    out, results = _run(tmp_path, "--doc-version", "2.9.0", "-k", "CUBLAS_WORKSPACE_CONFIG or inductor")
    assert out.returncode == 0, out.stdout[-3000:]
    rows = [r for r in _records(results) if r["record"] == "result"]
    # the cuBLAS entries and the two about Inductor's setting ("torch.compile:deterministic" is not selected)
    assert len(rows) == (12 + 2) * 2 and all(r["verdict"] == "skipped" for r in rows)
    for row in rows:
        if row["list_name"] == "cublas-workspace":  # 2.9.0's docs make the promise: judged, about CUDA
            assert row["detail"]["needs_device"] == "cuda" and "needs_torch" not in row["detail"]
        else:
            assert row["detail"]["needs_torch"] == ">=2.10"
            assert row["detail"]["reason"].endswith("this run judges the promises of torch 2.9.0 (--doc-version)")


@pytest.mark.parametrize(("needs_torch", "judged", "accepted"), [
    ("<2.10", "2.11.0", True), ("<2.10", "2.13.0+cpu", True), ("<2.10", "2.9.1+cu128", False),
    (">=2.14", "2.13.0", True), (">=2.14", "2.14.0", False),
    ("2.10", "2.13.0", False), (None, "2.13.0", False), ("<2.10", "", False), ("<2.10", "not-a-version", False),
])
def test_verify_takes_a_torch_skip_only_where_the_range_leaves_out_the_torch_under_test(needs_torch, judged, accepted):
    from detconf.reports.verify import _not_applicable, _torch_under_test

    row = {"verdict": "skipped", "device": "cuda", "detail": {"reason": "r", "needs_torch": needs_torch}}
    assert _not_applicable(row, judged, {"torch": needs_torch}) is accepted
    # The row's range is taken only where the planned entry's own range is the same.
    assert _not_applicable(row, judged, {"torch": ">=2.0"}) is False
    assert _not_applicable(row, judged) is False
    assert _torch_under_test({"env": {"torch_version": "2.13.0+cpu", "doc_version": "2.9.0"}}) == "2.9.0"
    assert _torch_under_test({"env": {"torch_version": "2.13.0+cpu", "doc_version": None}}) == "2.13.0+cpu"
