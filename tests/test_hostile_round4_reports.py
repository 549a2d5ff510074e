"""Hostile inputs of round 4 (``/work/shared/hostile-2026-11-27.md``) against the reports, drift,
fingerprints and the ``detconf report`` command line: one test per entry, named after its id.

The classes behind them: every file a reports command reads is opened and read through one
reader (``reports/readfile.py``: a regular file, lines of at most MAX_LINE_BYTES, UTF-8 JSON),
so a device or a pipe is refused unread by every command; a run's end record is its last record
(no row after it, no second one); a device name is a name; a file compared with itself is not two
GPUs agreeing; and no output -- terminal, Markdown, HTML, CSV -- holds a control character or a
bidi/zero-width character.

Whatever could hang or eat memory on a reader that gets it wrong runs as a child with a timeout
and a 2 GiB address-space limit.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from detconf.reports import __main__ as reports_cli
from tests import warm
from tests.test_hostile_reports import assert_one_line_error, call, end_record, lines, result, run_record

REPO = Path(__file__).resolve().parents[1]
#: What no output may hold: C0 controls but tab and newline, DEL, C1; bidi and zero-width characters.
HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
CHILD_TIMEOUT = 120


#: The child's address space: a reader that reads a device whole fails fast, not the machine.
CHILD_ADDRESS_SPACE = 2 << 30


def child(*argv, module="detconf.reports", timeout=CHILD_TIMEOUT) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGV`` in a process of its own, its address space limited (forked from
    the warm ``reports`` interpreter where tests/warm.py may: about 0.4 GiB of it is taken then)."""
    return warm.run([sys.executable, "-m", module, *map(str, argv)], cwd=REPO, capture_output=True, text=True,
                    timeout=timeout, address_space=CHILD_ADDRESS_SPACE)


def assert_child_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("reports: error: "), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def two_rows(run_id="run-1", **over) -> list[dict]:
    return [result(run_id=run_id, **over), result("index_add_", position=1, run_id=run_id)]


def good(tmp_path: Path, name="good.jsonl", run_id="run-1") -> Path:
    path = tmp_path / name
    path.write_bytes(lines(run_record(run_id), *two_rows(run_id), end_record(run_id, planned=2, written=2)))
    return path


def slow(record: dict) -> bytes:
    """``record`` as a line pyarrow refuses (a key given twice), so the reader checks it line by line."""
    return json.dumps(record)[:-1].encode() + b', "examples": ' + json.dumps(record["examples"]).encode() + b"}"


# ----------------------------------------------------------------------------- R18, R19: end records

@pytest.mark.parametrize("reading", ["column-wise", "line by line"])
def test_R18_rows_after_their_runs_end_record_are_refused(tmp_path, capsys, reading):
    first, second = two_rows()
    after = second if reading == "column-wise" else slow(second)
    path = tmp_path / "full_rowafterend.jsonl"
    path.write_bytes(lines(run_record(), first, end_record(planned=2, written=2), after))
    needle = "run 'run-1': 1 row(s) after its end record (line 3)"
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}:4: ", needle)
    assert not (tmp_path / "out").exists()
    for argv in (["diff", good(tmp_path), path], ["fingerprints", good(tmp_path), path],
                 ["sensitivity", path], ["overview", path, "--out", tmp_path / "ov"]):
        code, _, err = call(argv, capsys)
        assert_one_line_error(code, err, f"{path}:4: ", needle)
    # a second run appended after the first run's end record is what a re-run writes: read
    rerun = tmp_path / "rerun.jsonl"
    rerun.write_bytes(good(tmp_path).read_bytes() + lines(run_record("run-2"), result(run_id="run-2")))
    code, out, err = call(["build", rerun, "--out", tmp_path / "rerun"], capsys)
    assert code == 0, err


def test_R19_two_end_records_for_one_run_are_refused(tmp_path, capsys):
    path = tmp_path / "full_twoends.jsonl"
    end = end_record(planned=2, written=2)
    path.write_bytes(lines(run_record(), *two_rows(), end, end))
    needle = "a second end record of run 'run-1' (the first is at line 4)"
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}:5: ", needle)
    assert not (tmp_path / "out").exists()
    code, _, err = call(["fingerprints", good(tmp_path), path], capsys)
    assert_one_line_error(code, err, f"{path}:5: ", needle)


# ----------------------------------------------------------------------------- R22: device names

@pytest.mark.parametrize("field,value", [("device", "cpu "), ("device", " cpu"), ("device", "cp\u200bu"),
                                         ("device", "cpu\x1b"), ("torch_version", "2.13.0 ")])
@pytest.mark.parametrize("reading", ["column-wise", "line by line"])
def test_R22_a_device_name_with_surrounding_whitespace_is_not_a_device(tmp_path, capsys, field, value, reading):
    first, second = two_rows()
    bad = dict(first, **{field: value})
    path = tmp_path / "devspace.jsonl"
    path.write_bytes(lines(run_record(), bad if reading == "column-wise" else slow(bad), second))
    code, _, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{path}:2: ", f"field {field!r} must be a name without spaces or control "
                                                    "characters")
    assert not (tmp_path / "out").exists()
    code, _, err = call(["fingerprints", good(tmp_path), path], capsys)
    assert_one_line_error(code, err, f"{path}:2: ", f"field {field!r} must be a name")


# ----------------------------------------------------------------------------- R13, R14, D01, D02: one reader

def test_R13_fingerprints_holds_a_line_to_the_line_limit(tmp_path, capsys, monkeypatch):
    from detconf.reports import readfile

    limit = 1 << 20  # the real MAX_LINE_BYTES (16 MiB) made small: the reader's own constant
    monkeypatch.setattr(readfile, "MAX_LINE_BYTES", limit)
    huge = tmp_path / "huge1g.jsonl"
    with open(huge, "wb") as f:  # the hostile line: a run record whose one string never ends in time
        f.write(b'{"record": "run", "schema": 3, "x": "' + b"A" * (2 * limit) + b'"}')
    code, _, err = call(["fingerprints", good(tmp_path), huge], capsys)
    assert_one_line_error(code, err, f"{huge}:1: line longer than 1 MiB")
    history = tmp_path / "history.jsonl"
    history.write_bytes(b'{"doc_version": "' + b"9" * (2 * limit) + b'"}\n')
    code, _, err = call(["drift", history, "--out", tmp_path / "dr"], capsys)
    assert_one_line_error(code, err, f"{history}:1: line longer than 1 MiB")
    # a line of exactly the limit (its newline after it) is read
    record = json.dumps(run_record()).encode()
    padded = record[:-1] + b', "pad": "' + b"p" * (limit - len(record) - 11) + b'"}'
    assert len(padded) == limit
    ok = tmp_path / "ok.jsonl"
    ok.write_bytes(padded + b"\n" + lines(*two_rows()))
    code, out, err = call(["fingerprints", good(tmp_path, run_id="run-0"), ok], capsys)
    assert code == 0, err


def test_R14_fingerprints_refuses_a_device(tmp_path):
    proc = child("fingerprints", good(tmp_path), "/dev/zero")
    assert_child_error(proc, "/dev/zero: cannot read it (a device, which a reader would wait on")
    fifo = tmp_path / "fifo1"
    os.mkfifo(fifo)
    proc = child("fingerprints", fifo, good(tmp_path))
    assert_child_error(proc, f"{fifo}: cannot read it (a pipe, which a reader would wait on")


def test_D01_drift_refuses_a_device(tmp_path):
    proc = child("drift", "/dev/zero", "--out", tmp_path / "dr2")
    assert_child_error(proc, "/dev/zero: cannot read spec history: a device, which a reader would wait on")
    assert not (tmp_path / "dr2").exists()


def test_D02_drift_refuses_a_pipe(tmp_path):
    fifo = tmp_path / "fifo2"
    os.mkfifo(fifo)
    proc = child("drift", fifo, "--out", tmp_path / "dr3", timeout=60)
    assert_child_error(proc, f"{fifo}: cannot read spec history: a pipe, which a reader would wait on")
    assert not (tmp_path / "dr3").exists()


@pytest.mark.parametrize("command", ["build", "diff", "sensitivity", "overview", "fingerprints", "drift"])
def test_every_command_refuses_a_pipe_unread(tmp_path, command):
    """The class of R14, D01, D02: every reports command opens its files through the one reader."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = {"build": [fifo, "--out", tmp_path / "o"], "diff": [good(tmp_path), fifo], "sensitivity": [fifo],
            "overview": [fifo, "--out", tmp_path / "o"], "fingerprints": [good(tmp_path), fifo],
            "drift": [fifo, "--out", tmp_path / "o"]}[command]
    assert_child_error(child(command, *argv, timeout=60), str(fifo), "a pipe, which a reader would wait on")


def test_a_byte_order_mark_or_utf16_is_refused_by_fingerprints_and_drift(tmp_path, capsys):
    """The same line checks as build's: UTF-8 without a byte-order mark (json.loads of bytes took both)."""
    text = lines(run_record(), *two_rows()).decode()
    for name, data in (("bom.jsonl", b"\xef\xbb\xbf" + text.encode()), ("utf16.jsonl", text.encode("utf-16"))):
        path = tmp_path / name
        path.write_bytes(data)
        code, _, err = call(["fingerprints", good(tmp_path, run_id="run-0"), path], capsys)
        assert_one_line_error(code, err, f"{path}:1: ")
        code, _, err = call(["build", path, "--out", tmp_path / "o"], capsys)
        assert_one_line_error(code, err, f"{path}:1: ")


# ----------------------------------------------------------------------------- F03: a file and itself

def test_F03_fingerprints_refuses_a_file_compared_with_itself(tmp_path, capsys):
    a = good(tmp_path, "r.jsonl")
    code, out, err = call(["fingerprints", a, a], capsys)
    assert_one_line_error(code, err, f"{a}: the same file as A")
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    code, out, err = call(["fingerprints", a, copy, "--out", tmp_path / "fp"], capsys)
    assert_one_line_error(code, err, f"{copy}: run 'run-1' is A's too")
    assert not (tmp_path / "fp").exists()
    other = good(tmp_path, "other.jsonl", run_id="run-2")  # another run (another GPU): compared
    code, out, err = call(["fingerprints", a, other], capsys)
    assert code == 0 and "2 deterministic cells gave the same bytes" in out, err


# ----------------------------------------------------------------------------- R05, R06: outputs

def _outputs(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir())
            if p.suffix in (".csv", ".md", ".html")}


def test_R05_control_characters_never_reach_csv_html_or_markdown(tmp_path, capsys):
    hostile_id, hostile_node = "\x1b[31mRED\x1b[0m\x07bell", "x\x1b]0;pwned\x07"
    first, second = two_rows()
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(lines(run_record(), dict(first, entry_id=hostile_id, nodeid=hostile_node, op="\x9bop\x00"),
                           second))
    code, out, err = call(["build", path, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    files = _outputs(tmp_path / "out")
    assert set(files) >= {"matrix.csv", "results.csv", "matrix.md", "matrix.html"}
    for name, text in files.items():
        assert not HIDDEN.search(text), (name, HIDDEN.search(text))
    for name in ("matrix.csv", "results.csv"):
        with open(tmp_path / "out" / name, newline="", encoding="utf-8") as f:
            cells = [cell for row in csv.reader(f) for cell in row]
        assert "?[31mRED?[0m?bell" in cells, name
    assert "x?]0;pwned?" in files["results.csv"]
    assert not HIDDEN.search(out)
    code, out, err = call(["fingerprints", good(tmp_path, run_id="run-0"), path, "--out", tmp_path / "fp"], capsys)
    assert code == 0, err
    for name, text in _outputs(tmp_path / "fp").items():
        assert not HIDDEN.search(text) and "?" in text and "RED" in text, name


def test_R06_bidi_and_zero_width_characters_are_neutralised_in_every_output(tmp_path, capsys):
    tick_id = "bidi \u202eexe.txt \u2066x\u2069 zw\u200bsp"
    first, second = two_rows()
    base = tmp_path / "base.jsonl"
    base.write_bytes(lines(run_record(), first, dict(second, entry_id=tick_id)))
    tick = tmp_path / "tick.jsonl"
    tick.write_bytes(lines(run_record(), first, dict(second, entry_id=tick_id, verdict="nondeterministic")))
    code, out, err = call(["diff", base, tick], capsys)
    assert code == 1, err
    assert "bidi ?exe.txt ?x? zw?sp" in out and not HIDDEN.search(out)
    code, out, err = call(["build", tick, "--out", tmp_path / "out"], capsys)
    assert code == 0 and not HIDDEN.search(out), err
    for name, text in _outputs(tmp_path / "out").items():
        assert not HIDDEN.search(text) and "?exe.txt" in text, name
    code, out, err = call(["sensitivity", tick], capsys)
    assert not HIDDEN.search(out + err)


def test_every_format_character_is_hidden():
    """The class of R06: every format character (Cf), line and paragraph separator this Python
    knows, and every control but tab and newline, is shown as ``?`` by every output's function."""
    from detconf.reports import safe

    hidden = [chr(c) for c in range(0x110000)
              if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp") or (unicodedata.category(chr(c)) == "Cc"
                                                                      and chr(c) not in "\t\n")]
    text = "".join(hidden)
    assert safe.terminal(text) == "?" * len(hidden)
    assert safe.plain_text(text) == "?" * len(hidden)
    assert set(safe.md_cell(text)) <= {"?", " "}
    assert set(safe.csv_cell("a" + text)) <= {"a", "?", "\r"}
    import pyarrow as pa

    column = safe.csv_arrow(pa.array(["a" + text, "plain", None, "中文"]))
    assert set(column[0].as_py()) <= {"a", "?", "\r"} and column[1:].to_pylist() == ["plain", None, "中文"]


# ----------------------------------------------------------------------------- G48: the subcommands

def test_G48_detconf_report_and_help_list_every_reports_subcommand():
    parser = reports_cli._parser()
    commands = [name for action in parser._actions if hasattr(action, "choices") and isinstance(action.choices, dict)
                for name in action.choices]
    assert {"build", "diff", "drift", "sensitivity", "overview", "certify", "verify", "fingerprints"} <= set(commands)
    bare = subprocess.run([sys.executable, "-m", "detconf", "report"], cwd=REPO, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT)
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1, bare.stderr
    helped = subprocess.run([sys.executable, "-m", "detconf", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT)
    reports_help = parser.format_help()
    install = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    listed = re.search(r"detconf report ([a-z|]+) \[args\]", install)
    assert listed, "docs/install.md lists the reports subcommands"
    for name in commands:
        assert re.search(rf"\b{name}\b", bare.stderr), (name, bare.stderr)
        assert re.search(rf"\b{name}\b", helped.stdout), (name, helped.stdout)
        assert re.search(rf"\b{name}\b", reports_help.split("\n\n")[0]), (name, reports_help)
        assert name in listed.group(1).split("|"), (name, listed.group(0))


def test_a_build_marker_that_is_a_pipe_is_no_marker_and_never_waited_on(tmp_path):
    """The build's temporary-folder marker is read only when it is a small regular file."""
    import os
    import signal

    from detconf.reports import manifest

    folder = tmp_path / "tmp-build"
    folder.mkdir()
    os.mkfifo(folder / manifest.TMP_MARKER)
    class Hung(BaseException):  # not an OSError: the reader must not swallow it
        pass

    def hung(*_):
        raise Hung("the marker's reader waited on a pipe")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)  # a blocked open would hang the test: fail it instead
    try:
        assert manifest.is_build_tmp(folder) is False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
