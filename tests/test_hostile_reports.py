"""Hostile input to ``python -m detconf.reports``: every bad file, field or output path is one line on
stderr (``reports: error: ...`` naming the problem) and exit status 2, never a traceback and
never a file written; input that is odd but valid gives the right output.

Most cases call ``reports.__main__.main(argv)`` in this process with stdout and stderr captured
(the same code the command runs); those that depend on the process itself (standard output on
a full device, what is printed at exit) run ``python -m detconf.reports`` as a child.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from detconf.reports import __main__ as cli
from detconf.reports import load as load_mod
from detconf.reports.lines import MAX_DEPTH, MAX_LINE_BYTES
from tests import warm

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- records

def run_record(run_id="run-1", schema=3, **env) -> dict:
    return {"record": "run", "schema": schema, "run_id": run_id, "started": "2026-11-23T10:00:00Z",
            "env": {"torch_version": "2.13.0", "python": "3.11.7", "suite_revision": "abc", **env}}


def result(entry_id="put_", device="cpu", mode="error", verdict="conforms", schema=3, **over) -> dict:
    rec = {"record": "result", "schema": schema, "run_id": "run-1", "entry_id": entry_id,
           "op": f"torch.{entry_id}", "sentence": f"{entry_id} is deterministic", "source": "torch-docs",
           "list_name": "deterministic", "position": 0, "doc_version": None, "promise": "deterministic",
           "devices": [], "device": device, "device_name": "x86_64", "mode": mode, "phase": "program",
           "expected": "deterministic", "observed": "deterministic", "verdict": verdict, "examples": 6,
           "runs": 2, "torch_version": "2.13.0", "targets": ["aten.put_"], "reach": 1.0,
           "dispatched": {"aten.put_.default": 6}, "detail": {"fingerprints": {"0": "a" * 64}},
           "nodeid": f"t::test[{entry_id}-{device}-{mode}]", "duration_s": 0.01}
    if schema not in (1, 2):
        rec["compile"] = "eager"
    rec.update(over)
    return rec


def end_record(run_id="run-1", **over) -> dict:
    return {"record": "end", "schema": 3, "run_id": run_id, "ended": "2026-11-23T10:05:00Z", "exitstatus": 0,
            "planned": 1, "written": 1, **over}


def lines(*records) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records)


def good_file(tmp_path: Path, name="results.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(lines(run_record(), result(), result("index_add_", position=1)))
    return path


def deep(depth: int) -> bytes:
    """A result line whose ``detail`` nests ``depth`` levels (the line itself is 2 more)."""
    text = json.dumps(result())
    return text[:-1].encode() + b', "extra": ' + b"[" * depth + b"]" * depth + b"}"


def with_field(name, value, **over) -> bytes:
    return lines(run_record(), result(**{name: value}, **over))


def raw_field(name: str, raw: bytes) -> bytes:
    """A result line with ``name`` spelled as the raw JSON text ``raw``."""
    rec = result()
    rec.pop(name, None)
    text = json.dumps(rec).encode()
    return lines(run_record(), text[:-1] + b', "' + name.encode() + b'": ' + raw + b"}")


# ----------------------------------------------------------------------------- runner

def call(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def child(argv, stdout=subprocess.PIPE):
    return warm.reports(*argv, cwd=REPO, stdout=stdout, timeout=300)


def assert_one_line_error(code, err: str, *needles: str):
    assert code == 2, err
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)
    assert err.startswith("reports: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)


# ----------------------------------------------------------------------------- bad results files

# name -> (file content, [texts the one line must hold]); the line number is always named.
BAD_FILES = {
    "deeply-nested-json": (lines(run_record(), deep(10_000)), [":2: ", f"nested deeper than {MAX_DEPTH} levels"]),
    "nested-one-level-too-deep": (lines(run_record(), deep(MAX_DEPTH)), [":2: ", "nested deeper"]),
    "not-utf8-in-a-field": (lines(run_record(), json.dumps(result()).encode().replace(b"is deterministic", b"is \xff")),
                            [":2: ", "not UTF-8"]),
    "not-utf8-in-the-evidence": (lines(run_record(), result(), json.dumps(result("b")).encode()
                                       .replace(b'"0": "a', b'"0": "\xc3\x28')), [":3: ", "not UTF-8"]),
    "nul-byte": (lines(run_record(), result(), json.dumps(result("b")).encode().replace(b"is det", b"is\x00det")),
                 [":3: ", "NUL byte"]),
    "nul-bytes-only": (b"\x00" * 64, [":1: ", "NUL byte"]),
    "byte-order-mark": (b"\xef\xbb\xbf" + lines(run_record(), result()), [":1: ", "corrupt JSON line"]),
    "two-objects-on-a-line": (lines(run_record(), json.dumps(result()).encode() + b" " + json.dumps(result()).encode()),
                              [":2: ", "corrupt JSON line"]),
    "carriage-return-between-objects": (lines(run_record(), json.dumps(result()).encode() + b"\r"
                                              + json.dumps(result("b")).encode()), [":2: ", "corrupt JSON line"]),
    "truncated-last-line": (lines(run_record(), result()) + json.dumps(result("b")).encode()[:40],
                            [":3: ", "corrupt JSON line"]),
    "lone-surrogate": (lines(run_record(), json.dumps(result()).encode().replace(b"is deterministic", b"\\ud800")),
                       [":2: ", "lone surrogate"]),
    "array-instead-of-object": (lines(run_record(), b"[1, 2]"), [":2: ", "expected a JSON object, got list"]),
    "number-line": (lines(run_record(), b"42"), [":2: ", "expected a JSON object, got int"]),
    "position-as-text": (with_field("position", "3"), [":2: ", "field 'position' must be an integer or null, got str"]),
    "position-too-big": (raw_field("position", b"99999999999999999999"), [":2: ", "field 'position' is out of range"]),
    "devices-as-text": (with_field("devices", "cuda"), [":2: ", "field 'devices' must be a list of strings"]),
    "devices-with-a-number": (with_field("devices", ["cuda", 1]), [":2: ", "field 'devices' must be a list of strings"]),
    "devices-with-null": (with_field("devices", [None]), [":2: ", "field 'devices' must be a list of strings"]),
    "targets-as-text": (with_field("targets", "aten.put_"), [":2: ", "field 'targets' must be a list of strings"]),
    "reach-as-text": (with_field("reach", "high"), [":2: ", "field 'reach' must be a number or null, got str"]),
    "reach-above-one": (with_field("reach", 1.5), [":2: ", "field 'reach' must be a number from 0 to 1"]),
    "reach-nan": (raw_field("reach", b"NaN"), [":2: ", "field 'reach' must be a number from 0 to 1"]),
    "duration-infinite": (raw_field("duration_s", b"1e400"), [":2: ", "field 'duration_s' must be a finite number"]),
    "duration-as-text": (with_field("duration_s", "fast"), [":2: ", "field 'duration_s' must be a number or null"]),
    "compile-unknown": (with_field("compile", "jit"), [":2: ", "unknown compile setting 'jit'",
                                                       "eager, aot_eager, inductor"]),
    "compile-as-number": (with_field("compile", 3), [":2: ", "field 'compile' must be a string or null, got int"]),
    "phase-unknown": (with_field("phase", "sideways"), [":2: ", "unknown phase 'sideways'"]),
    "mode-as-number": (with_field("mode", 1), [":2: ", "field 'mode' must be a string, got int"]),
    "mode-unknown": (with_field("mode", "strict"), [":2: ", "unknown mode 'strict'"]),
    "verdict-null": (with_field("verdict", None), [":2: ", "field 'verdict' must be a string, got NoneType"]),
    "verdict-unknown": (with_field("verdict", "great"), [":2: ", "unknown verdict 'great'"]),
    "entry-id-empty": (with_field("entry_id", ""), [":2: ", "field 'entry_id' is empty"]),
    "entry-id-missing": (lines(run_record(), {k: v for k, v in result().items() if k != "entry_id"}),
                         [":2: ", "missing required field(s): entry_id"]),
    "examples-as-text": (with_field("examples", "6"), [":2: ", "field 'examples' must be an integer or null, got str"]),
    "examples-as-float": (with_field("examples", 6.0), [":2: ", "field 'examples' must be an integer or null, got float"]),
    "examples-as-bool": (with_field("examples", True), [":2: ", "field 'examples' must be an integer or null, got bool"]),
    "runs-negative": (with_field("runs", -1), [":2: ", "field 'runs' must not be negative"]),
    "doc-version-as-number": (with_field("doc_version", 2.13), [":2: ", "field 'doc_version' must be a string or null"]),
    "nodeid-as-number": (with_field("nodeid", 5), [":2: ", "field 'nodeid' must be a string or null, got int"]),
    "expected-as-list": (with_field("expected", []), [":2: ", "field 'expected' must be a string or null, got list"]),
    "dispatched-as-list": (with_field("dispatched", []), [":2: ", "field 'dispatched' must be an object or null"]),
    "detail-as-text": (with_field("detail", "x"), [":2: ", "field 'detail' must be an object"]),
    "fingerprints-as-list": (with_field("detail", {"fingerprints": [1]}), [":2: ", "detail.fingerprints"]),
    "verdict-counts-as-text": (with_field("detail", {"verdicts_per_example": {"nondeterminism-seen": "3"}}),
                               [":2: ", "detail.verdicts_per_example.nondeterminism-seen' must be an integer"]),
    "schema-as-text": (lines(run_record(), result(schema="3")), [":2: ", "unsupported schema '3'"]),
    "schema-from-the-future": (lines(run_record(schema=4)), [":1: ", "unsupported schema 4"]),
    "record-unknown": (lines(run_record(), {"record": "note", "schema": 3}), [":2: ", "unknown record type 'note'"]),
    "record-as-list": (lines(run_record(), {"record": ["result"], "schema": 3}), [":2: ", "unknown record type"]),
    "row-before-any-run-record": (lines(result(), run_record()), [":1: ", "result row of run 'run-1' comes before"]),
    "row-of-a-run-never-recorded": (lines(run_record(), result(run_id="run-9")),
                                    [":2: ", "result row of run 'run-9' comes before any run record"]),
    "row-of-a-later-run": (lines(run_record(), result(run_id="run-2"), run_record("run-2")),
                           [":2: ", "result row of run 'run-2'"]),
    "run-record-without-env": (lines({"record": "run", "schema": 3, "run_id": "r"}), [":1: ", "needs an object 'env'"]),
    "end-record-before-its-run": (lines(end_record(), run_record(), result()), [":1: ", "end record of run 'run-1'"]),
    "end-record-exitstatus-as-text": (lines(run_record(), result(), end_record(exitstatus="0")),
                                      [":3: ", "end record field 'exitstatus' must be an integer, got str"]),
    "blank-lines-only": (b"\n \n\t\n", ["empty file"]),
    "empty": (b"", ["empty file"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_results_file_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, case):
    content, needles = BAD_FILES[case]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    out = tmp_path / "out"
    code, _, err = call(["build", path, "--out", out], capsys)
    assert_one_line_error(code, err, str(path), *needles)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


@pytest.mark.parametrize("case", ["nul-byte", "row-before-any-run-record", "compile-unknown", "deeply-nested-json"])
def test_bad_file_given_to_diff_and_sensitivity(tmp_path, capsys, case):
    content, needles = BAD_FILES[case]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    good = good_file(tmp_path)
    for argv in (["diff", good, bad], ["diff", bad, good], ["sensitivity", bad]):
        code, _, err = call(argv, capsys)
        assert_one_line_error(code, err, str(bad), *needles)


def test_a_line_longer_than_the_limit(tmp_path, capsys):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as f:
        f.write(lines(run_record(), result()))
        f.write(b'{"record": "result", "sentence": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
        f.write(lines(result("b")))
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}:3: ", f"line longer than {MAX_LINE_BYTES >> 20} MiB")


def test_a_huge_line_without_a_newline(tmp_path, capsys):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as f:
        f.write(lines(run_record(), result()))
        f.write(b"[" * (MAX_LINE_BYTES + 10))
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}:3: ", "line longer than")


def test_missing_file(tmp_path, capsys):
    code, _, err = call(["build", tmp_path / "nope.jsonl", "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{tmp_path / 'nope.jsonl'}: cannot read (No such file or directory)")


def test_directory_given_as_a_file(tmp_path, capsys):
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    code, _, err = call(["diff", folder, good_file(tmp_path)], capsys)
    assert_one_line_error(code, err, f"{folder}: cannot read (Is a directory)")


def test_file_with_runs_but_no_results(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record(), end_record(planned=0, written=0)))
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}: no result records")


def test_usage_error_is_one_line(tmp_path, capsys):
    for argv in (["build", good_file(tmp_path)], ["diff", "--bogus"], ["sensitivity"], ["frobnicate"]):
        code, _, err = call(argv, capsys)
        assert_one_line_error(code, err)


# ----------------------------------------------------------------------------- output paths

def _out_is_a_file(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep me")
    return target, ["output exists and is not a directory"]


def _out_under_a_file(tmp_path):
    (tmp_path / "file").write_text("keep me")
    return tmp_path / "file" / "sub", ["is not a directory"]


def _out_dev_full(tmp_path):
    return Path("/dev/full"), ["/dev/full: output exists and is not a directory"]


def _out_read_only_system_folder(tmp_path):
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no /sys here")
    return Path("/sys/kernel/detconf-reports"), ["cannot create the output folder"]


def _out_unwritable_folder(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into any folder: /sys stands in for an unwritable one")
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    return folder, ["not writable"]


OUT_CASES = {"is-a-file": _out_is_a_file, "under-a-file": _out_under_a_file, "dev-full": _out_dev_full,
             "read-only-system-folder": _out_read_only_system_folder, "unwritable-folder": _out_unwritable_folder}


def _off_file(tmp_path: Path) -> Path:
    path = tmp_path / "off.jsonl"
    path.write_bytes(lines(run_record(), result(mode="off", verdict="nondeterminism-seen", expected="observe",
                                                detail={"verdicts_per_example": {"nondeterminism-seen": 2}})))
    return path


def _history(tmp_path: Path) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps({"doc_version": v, "entry_id": "put_", "op": "torch.Tensor.put_",
                                        "list_name": "deterministic", "sentence": "put_"}) + "\n"
                            for v in ("2.12.0", "2.13.0")))
    return path


COMMANDS = {
    "build": lambda tmp: ["build", good_file(tmp)],
    "drift": lambda tmp: ["drift", _history(tmp)],
    "sensitivity": lambda tmp: ["sensitivity", _off_file(tmp)],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", sorted(OUT_CASES))
def test_output_that_cannot_be_written_is_one_line(tmp_path, capsys, command, case):
    out, needles = OUT_CASES[case](tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = COMMANDS[command](tmp_path)
    inputs = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p not in before}
    code, _, err = call([*argv, "--out", out], capsys)
    try:
        assert_one_line_error(code, err, os.fspath(out), *needles)
        after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        assert after == {**before, **inputs}  # nothing written, nothing changed
    finally:
        if case == "unwritable-folder":
            out.chmod(0o755)


def test_a_full_disk_while_writing_is_one_line_and_leaves_the_folder_alone(tmp_path, capsys, monkeypatch):
    import errno

    from detconf.reports import build as build_mod

    out = tmp_path / "out"
    out.mkdir()
    (out / "matrix.md").write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(build_mod, "write_html", full)
    code, _, err = call(["build", good_file(tmp_path), "--out", out], capsys)
    assert_one_line_error(code, err, str(out), "No space left on device")
    assert sorted(p.name for p in out.iterdir()) == ["matrix.md"] and (out / "matrix.md").read_text() == "old"


def test_a_report_name_taken_by_a_folder_stops_the_build_before_writing(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "matrix.png").mkdir(parents=True)
    (out / "matrix.md").write_text("old")
    code, _, err = call(["build", good_file(tmp_path), "--out", out], capsys)
    assert_one_line_error(code, err, f"{out / 'matrix.png'}: exists and is not a file")
    assert (out / "matrix.md").read_text() == "old" and sorted(p.name for p in out.iterdir()) == ["matrix.md",
                                                                                                  "matrix.png"]


def test_an_input_named_like_a_report_is_never_overwritten(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    data = good_file(tmp_path).read_bytes()
    (out / "results.csv").write_bytes(data)  # a results file that happens to carry a report's name
    code, _, err = call(["build", out / "results.csv", "--out", out], capsys)
    assert_one_line_error(code, err, f"{out / 'results.csv'}: is an input")
    assert (out / "results.csv").read_bytes() == data


def test_build_writes_only_its_own_names_and_replaces_links_not_their_targets(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "matrix.md.bak").write_text("mine too")
    elsewhere = tmp_path / "elsewhere.md"
    elsewhere.write_text("not the build's")
    (out / "matrix.md").symlink_to(elsewhere)
    code, _, err = call(["build", good_file(tmp_path), "--out", out, "--quiet"], capsys)
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine" and (out / "matrix.md.bak").read_text() == "mine too"
    assert elsewhere.read_text() == "not the build's"
    assert not (out / "matrix.md").is_symlink() and "compatibility matrix" in (out / "matrix.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["notes.txt", "matrix.md.bak", "matrix.csv", "results.csv", "matrix.md", "matrix.html", "matrix.png",
         "summary.json"])


@pytest.mark.parametrize("argv", [["diff", "{a}", "{a}"], ["sensitivity", "{off}"], ["build", "{a}", "--out", "{out}"]],
                         ids=["diff", "sensitivity", "build"])
def test_standard_output_on_a_full_device(tmp_path, argv):
    names = {"a": good_file(tmp_path), "off": _off_file(tmp_path), "out": tmp_path / "out"}
    with open("/dev/full", "w") as full:
        proc = child([a.format(**names) for a in argv], stdout=full)
    assert_one_line_error(proc.returncode, proc.stderr, "cannot write to standard output (No space left on device)")


# ----------------------------------------------------------------------------- valid but odd

def test_crlf_blank_lines_and_padding_are_read(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    body = lines(run_record(), result(), result("index_add_", position=1)).replace(b"\n", b"\r\n")
    path.write_bytes(b"\r\n  \n" + body.replace(b'{"record": "result"', b'   {"record": "result"', 1) + b"\n\n")
    code, out, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", dtype=str, keep_default_na=False)
    assert list(wide["entry_id"]) == ["put_", "index_add_"] and set(wide["cpu/error"]) == {"conforms"}


def test_a_key_given_twice_keeps_the_later_value(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    text = json.dumps(result()).encode()
    path.write_bytes(lines(run_record(), text[:-1] + b', "verdict": "stale-doc"}'))
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", dtype=str, keep_default_na=False)
    assert list(wide["cpu/error"]) == ["stale-doc"]


def test_nesting_up_to_the_limit_is_read(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record(), deep(MAX_DEPTH - 1)))  # the row's object is one level more
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err


def test_two_runs_in_one_file_the_later_row_wins(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record("run-1"), result(verdict="harness-error"), result("index_add_", position=1),
                           end_record("run-1", planned=2, written=2),
                           run_record("run-2"), result(verdict="conforms", run_id="run-2"),
                           end_record("run-2", exitstatus=1)))
    code, out, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", dtype=str, keep_default_na=False).set_index("entry_id")
    assert wide.loc["put_", "cpu/error"] == "conforms" and wide.loc["index_add_", "cpu/error"] == "conforms"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["run_id"] for r in summary["runs"]] == ["run-1", "run-2"]
    assert summary["runs"][1]["end"]["exitstatus"] == 1 and summary["runs"][0]["end"]["written"] == 2
    assert summary["overrides"] == 1 and summary["inputs"][0]["ends"] == 2
    long = pd.read_csv(tmp_path / "out" / "results.csv", dtype=str, keep_default_na=False)
    assert sorted(long["run_id"]) == ["run-1", "run-2"]


def test_schema_2_and_schema_3_runs_in_one_file(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record("old", schema=2), result(schema=2, run_id="old", verdict="stale-doc"),
                           run_record("new"), result(run_id="new", compile="inductor"),
                           result(run_id="new", compile="eager", verdict="conforms")))
    code, out, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", dtype=str, keep_default_na=False)
    # the schema-2 row is the eager cell; the later schema-3 eager row replaced it
    assert list(wide.columns[-2:]) == ["cpu/error/eager", "cpu/error/inductor"]
    assert list(wide.iloc[0, -2:]) == ["conforms", "conforms"]
    long = pd.read_csv(tmp_path / "out" / "results.csv", dtype=str, keep_default_na=False)
    assert list(long["compile"]) == ["eager", "inductor"]


def test_hostile_ids_stay_in_their_cells_everywhere(tmp_path, capsys):
    ids = ["a|b", "`tick`", "line\nbreak", "=cmd()", "+1", "-x", "@SUM(A1)", "\tTAB", "\rCR", "\x1b[31mred"]
    path = tmp_path / "r.jsonl"
    records = [run_record()]
    for i, entry in enumerate(ids):
        records.append(result(entry, position=i, op=entry, sentence=entry))
        records.append(result(entry, mode="off", verdict="nondeterminism-seen", expected="observe", position=i,
                              op=entry, sentence=entry, detail={"verdicts_per_example": {"nondeterminism-seen": 1}}))
    path.write_bytes(lines(*records))
    code, out, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    assert "\x1b" not in out
    code, out, err = call(["sensitivity", path, "--out", tmp_path / "sens"], capsys)
    assert code == 0, err
    for md in (tmp_path / "out" / "matrix.md", tmp_path / "sens" / "sensitivity.md"):
        text = md.read_text(encoding="utf-8")
        assert "\x1b" not in text and "\r" not in text
        table = [line for line in text.splitlines() if line.startswith("|")]
        header = next(line for line in table if "entry" in line or "entry_id" in line)
        cells = len(re.split(r"(?<!\\)\|", header))
        rows = [line for line in table if "torch-docs" in line]
        assert len(rows) == len(ids) and all(len(re.split(r"(?<!\\)\|", line)) == cells for line in rows), md
    from detconf.reports.safe import csv_cell

    for name in ("out/matrix.csv", "out/results.csv", "sens/sensitivity.csv"):
        with open(tmp_path / name, newline="", encoding="utf-8") as f:
            cells = [cell for row in csv.reader(f) for cell in row]
        # no cell a spreadsheet would evaluate: each starts with a quote, is a number, or starts harmlessly
        assert all(csv_cell(cell) == cell for cell in cells), name
        for entry in ("=cmd()", "-x", "@SUM(A1)", "\tTAB", "\rCR"):
            assert "'" + entry in cells and entry not in cells, (name, entry)
        assert "+1" in cells  # a number stays a number


def test_terminal_output_of_diff_and_summary_holds_no_control_characters(tmp_path, capsys):
    from detconf.reports.summary import summary_lines

    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_bytes(lines(run_record(), result("x\x1b[2Jy\x07", verdict="conforms")))
    b.write_bytes(lines(run_record(), result("x\x1b[2Jy\x07", verdict="nondeterministic")))
    code, out, err = call(["diff", a, b], capsys)
    assert code == 1 and "x?[2Jy?" in out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    code, out, err = call(["build", b, "--out", tmp_path / "out"], capsys)
    assert code == 0 and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    from detconf.reports.safe import terminal

    printed = terminal("\n".join(summary_lines(b)))  # what pytest's plugin prints of them
    assert "x?[2Jy?" in printed and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", printed)


def test_reading_a_file_while_it_is_appended_to_sees_whole_lines(tmp_path, capsys):
    """A run in progress: the last line is still being written. The reader names it."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record(), result()) + b'{"record": "result", "schema": 3, "run_id": "ru')
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}:3: ", "corrupt JSON line")


def test_no_traceback_when_something_unexpected_breaks(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(load_mod, "_load", broken)
    code, _, err = call(["diff", good_file(tmp_path), good_file(tmp_path, "b.jsonl")], capsys)
    assert_one_line_error(code, err, "internal error (TypeError: a bug)")
