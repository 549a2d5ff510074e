"""Hostile inputs of round 3 (``../shared/hostile-2026-11-25.md``): one test per id, named after it.

"Trust: a certification that cannot be cherry-picked, nothing lost": a run knows its own
results file (replaced, deleted or truncated during the run: it stops non-zero and keeps its
rows), a run that tested nothing is not green, the report builder overwrites only what it
wrote, and bad input is one line, never a traceback or a hang.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_hostile_plugin import (
    DATA, PLUGIN, ROOT, SOURCE_OF, _env, _plugin_module, assert_usage_error, records, run_pytest, runs_in,
)
from tests.test_hostile_reports import (
    assert_one_line_error, call, child, end_record, good_file, lines, result, run_record,
)
from tests import warm

#: Two quick flag-API cases (error, warn_only), as the hostile file's ``$P -k are_deterministic``.
FLAG = ["--source", "flag-api", "--device", "cpu", "--hypothesis-profile", "ci", "-p", "no:randomly", "-n", "0"]
TWO = [*FLAG, "-k", "are_deterministic"]


def _ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def _shown(out: subprocess.CompletedProcess) -> str:
    return f"rc={out.returncode}\nstdout: {out.stdout[-3000:]}\nstderr: {out.stderr[-3000:]}"


def _complete_run(path: Path) -> Path:
    """A complete flag-API run of two cases in ``path`` (no matrix)."""
    _ok(run_pytest(*TWO, "--no-report-build", "--results", str(path)))
    return path


# ----------------------------------------------------------------------------- 1. a run knows its own file
TAMPER = '''
import os, shutil
_calls = [0]
def pytest_runtest_call(item):
    _calls[0] += 1
    if _calls[0] != 2:
        return
    path, action = os.environ["TAMPER_PATH"], os.environ["TAMPER_ACTION"]
    if action == "replace":
        shutil.copy(os.environ["TAMPER_WITH"], path + ".other")
        os.replace(path + ".other", path)
    elif action == "delete":
        os.unlink(path)
    elif action == "truncate":
        open(path, "w").close()
    elif action.startswith("inplace"):  # P03: the same number of bytes, in place
        before = os.stat(path)
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(data.index(b'"verdict": "conforms"'))
            f.write(b'"verdict": "violated"')
        if action == "inplace-keep-mtime":  # and the modification time put back
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
'''


def _tampered(tmp_path: Path, action: str) -> tuple[subprocess.CompletedProcess, Path, bytes]:
    """A run of 8 cases whose results file is changed by ``action`` during its second case."""
    other = _complete_run(tmp_path / "other" / "good.jsonl")
    (tmp_path / "tamper.py").write_text(TAMPER)
    results = tmp_path / "mid" / "r.jsonl"
    out = run_pytest("-p", "tamper", *FLAG, "--mode", "error", "-k", "set_deterministic_debug_mode",
                     "--results", str(results),
                     env={"PYTHONPATH": str(tmp_path), "TAMPER_PATH": str(results), "TAMPER_ACTION": action,
                          "TAMPER_WITH": str(other)})
    return out, results, other.read_bytes()


def _assert_the_run_knew(out, results: Path, what: str) -> None:
    assert out.returncode not in (0, 4, 5), _shown(out)
    assert "Traceback" not in out.stdout + out.stderr, _shown(out)
    said = [line for line in out.stdout.splitlines() if line.startswith("results incomplete: ")]
    assert len(said) == 1 and f"results file {results} was {what} during the run" in said[0], _shown(out)
    assert "no matrix is built" in said[0]
    assert "matrix: " not in out.stdout and not (results.parent / "r-report").exists(), "no report from another file"
    [rescued] = results.parent.glob("r.rescued-*.jsonl")
    assert str(rescued) in said[0]
    [run] = runs_in(rescued)  # this run's record and the row written before the change, whole
    assert run["run"]["planned"] == 8 and len(run["rows"]) == 1 and run["rows"][0]["verdict"] == "conforms"


def test_M_results_replaced(tmp_path):
    out, results, other = _tampered(tmp_path, "replace")
    _assert_the_run_knew(out, results, "replaced")
    assert results.read_bytes() == other, "the file that took the name is left as it is"


def test_M_results_deleted(tmp_path):
    out, results, _ = _tampered(tmp_path, "delete")
    _assert_the_run_knew(out, results, "deleted")
    assert not results.exists()


def test_M_results_truncated(tmp_path):
    out, results, _ = _tampered(tmp_path, "truncate")
    _assert_the_run_knew(out, results, "truncated")
    assert results.read_bytes() == b""


def test_P03_a_same_size_write_in_place_is_caught(tmp_path):
    out, results, _ = _tampered(tmp_path, "inplace")
    _assert_the_run_knew(out, results, "written to by another program")
    assert "in place: its size did not change" in out.stdout


def test_P03_a_same_size_write_that_keeps_the_mtime_is_caught_before_the_answer(tmp_path):
    """Caught by the end-of-run read-back of every byte the run wrote: the run's answer and the
    matrix never disagree with the file."""
    out, results, _ = _tampered(tmp_path, "inplace-keep-mtime")
    assert out.returncode not in (0, 4, 5), _shown(out)
    said = [line for line in out.stdout.splitlines() if line.startswith("results incomplete: ")]
    assert len(said) == 1 and "in place: its size did not change" in said[0], _shown(out)
    assert not (results.parent / "r-report").exists()  # no matrix from a file that is not the run's
    [rescued] = results.parent.glob("r.rescued-*.jsonl")
    [run] = runs_in(rescued)  # this run's own lines, as it wrote them
    assert all(r["verdict"] != "violated" for r in run["rows"])


def test_RP_mid_garbage(tmp_path):
    """A corrupt line in the middle (not only a torn last line): the run refuses to append."""
    results = _complete_run(tmp_path / "r.jsonl")
    text = results.read_text().splitlines()
    text.insert(2, "GARBAGE{{{")
    results.write_text("\n".join(text) + "\n")
    before = results.read_bytes()
    assert_usage_error(run_pytest(*TWO, "--results", str(results)), f"{results}:3: corrupt JSON line")
    assert results.read_bytes() == before and not (tmp_path / "r-report").exists()


@pytest.mark.parametrize("path,report", [("/dev/stdout", True), ("/dev/stdout", False), ("/proc/self/fd/1", False)],
                         ids=["RP-dev-stdout-to-file", "RP-dev-stdout-noreport", "RP-proc-self-fd1"])
def test_RP_dev_stdout_to_file(path, report, tmp_path):
    """Standard output redirected to a file: a usage error, no hang, no JSON in the log."""
    log = tmp_path / "log"
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", *TWO,
           *([] if report else ["--no-report-build"]), "--results", path]
    with open(log, "w") as f:
        proc = warm.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.PIPE, text=True, timeout=120, env=_env())
    out = subprocess.CompletedProcess(cmd, proc.returncode, log.read_text(), proc.stderr)
    assert_usage_error(out, f"--results {path} names a standard stream or a process's file")


def test_RP_results_is_the_runs_own_log(tmp_path):
    """The same file as standard output under its own name: refused too."""
    log = tmp_path / "log"
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", *TWO,
           "--results", str(log)]
    with open(log, "w") as f:
        proc = warm.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.PIPE, text=True, timeout=120, env=_env())
    out = subprocess.CompletedProcess(cmd, proc.returncode, log.read_text(), proc.stderr)
    assert_usage_error(out, f"--results {log} is this run's standard output")


# ----------------------------------------------------------------------------- 2. nothing tested is not green
def _assert_nothing_tested(out, results: Path, why: str) -> None:
    assert out.returncode == 5, _shown(out)
    said = [line for line in out.stdout.splitlines() if "no conformance case ran" in line]
    assert len(said) == 1 and why in said[0] and "nothing was tested" in said[0], _shown(out)
    [run] = runs_in(results)
    assert run["end"]["planned"] == 0 and run["end"]["outcome"] == "empty" and run["end"]["exitstatus"] == 5


def test_O_source_vendor(tmp_path):
    results = tmp_path / "r.jsonl"
    out = run_pytest("--hypothesis-profile", "ci", "-n", "0", "--source", "vendor", "--device", "cpu",
                     "--fresh-results", "--results", str(results))
    _assert_nothing_tested(out, results, "source vendor gives no case on device cpu")


def test_O_shard_huge_N(tmp_path):
    results = tmp_path / "r.jsonl"
    out = run_pytest(*FLAG, "--shard", "1/999999999999999999999", "--no-report-build", "--results", str(results))
    _assert_nothing_tested(out, results, "--shard 1/999999999999999999999 holds none of the plan's 28 cases")


def test_k_deselects_everything(tmp_path):
    results = tmp_path / "r.jsonl"
    out = run_pytest(*FLAG, "-k", "no_such_case_anywhere", "--results", str(results))
    _assert_nothing_tested(out, results, "the selection (-k, -m, --lf or node ids) left none of the 28 planned")


# ----------------------------------------------------------------------------- 3. the builder overwrites only what it wrote
def test_D2c(tmp_path):
    report = tmp_path / "z-report"
    report.mkdir()
    (report / "results.csv").write_text("my own csv\n")
    out = _ok(run_pytest(*TWO, "--results", str(tmp_path / "z.jsonl")))
    assert (f"matrix not built: {report} holds files the report builder did not write (results.csv)" in out), out
    assert (report / "results.csv").read_text() == "my own csv\n"
    assert sorted(p.name for p in report.iterdir()) == ["results.csv"]


def test_RP_trick2_second(tmp_path):
    first = tmp_path / "x-report" / "results.csv"
    _complete_run(first)
    before = first.read_bytes()
    out = _ok(run_pytest(*TWO, "--results", str(tmp_path / "x.jsonl")))
    assert "did not write (results.csv)" in out and "matrix: " not in out, out
    assert first.read_bytes() == before, "the first run's results file is left as it was"


def test_RP_stem_b(tmp_path):
    _ok(run_pytest(*TWO, "--results", str(tmp_path / "r.jsonl")))
    report = tmp_path / "r-report"
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    assert ".detconf-report.json" in before
    out = _ok(run_pytest(*FLAG, "-k", "are_deterministic and error", "--results", str(tmp_path / "r.json")))
    said = [line for line in out.splitlines() if line.startswith("matrix not built: ")]
    assert said == [f"matrix not built: {report} holds the report of {tmp_path / 'r.jsonl'}, which this run's "
                    f"{tmp_path / 'r.json'} would replace; give another --results or remove the folder"], out
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before
    # The same results file again: its own report, rebuilt.
    assert "matrix: " in _ok(run_pytest(*TWO, "--results", str(tmp_path / "r.jsonl")))


SLOW_BUILD = '''
import signal, sys, time
# Ctrl-C as in a terminal: a run started in the background by a non-interactive shell inherits
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
import detconf.reports.build as build
real = build.write_png
def slow(*args, **kwargs):
    print("writing", flush=True)
    time.sleep(60)
    return real(*args, **kwargs)
build.write_png = slow
from detconf.reports.__main__ import main
sys.exit(main(sys.argv[1:]))
'''


def _slow_build(tmp_path: Path, results: Path, out: Path) -> subprocess.Popen:
    """``python -m detconf.reports build`` that stops for a minute while it writes into its temporary folder."""
    proc = subprocess.Popen([sys.executable, "-c", SLOW_BUILD, "build", str(results), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing", proc.communicate()
    return proc


def test_S_TERM_build(tmp_path):
    """SIGTERM: exit 143, one line, no temporary folder left. SIGKILL leaves one, marked: it
    neither blocks the next build nor the run's own matrix, and the next build removes it."""
    results = _complete_run(tmp_path / "r.jsonl")
    out = tmp_path / "out"
    proc = _slow_build(tmp_path, results, out)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err == "reports: terminated (SIGTERM); nothing half-written is left\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]

    # A run's report folder, then a build killed inside it.
    report = tmp_path / "r-report"
    assert "matrix: " in _ok(run_pytest(*TWO, "--results", str(results)))
    killed = _slow_build(tmp_path, results, report)
    killed.kill()
    killed.communicate(timeout=60)
    [left] = [p for p in report.iterdir() if p.name.startswith(".reports.tmp-")]
    plugin = _plugin_module()
    assert plugin._report_dir_problem(report, results) is None, "a killed build's leftover blocks nothing"
    said = _ok(run_pytest(*TWO, "--results", str(results)))
    assert "matrix: " in said and not left.exists(), said


def test_S_INT_build(tmp_path):
    results = _complete_run(tmp_path / "r.jsonl")
    proc = _slow_build(tmp_path, results, tmp_path / "out")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "reports: interrupted (SIGINT); nothing half-written is left\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


# ----------------------------------------------------------------------------- 4. diff
def _run_with_planned(run_id="run-1", cases=("put_", "index_add_")) -> dict:
    entries = [{"source": "torch-docs", "doc_version": None, "entry_id": c, "op": f"torch.{c}",
                "sentence": f"{c} is deterministic", "list_name": "deterministic", "position": i,
                "promise": "deterministic"} for i, c in enumerate(cases)]
    planned = [{"id": f"{c}-cpu-error", "entry": i, "phase": "program", "device": "cpu", "mode": "error",
                "compile": "eager", "expected": "deterministic"} for i, c in enumerate(cases)]
    return dict(run_record(run_id), planned=len(cases), planned_entries=entries, planned_cases=planned)


def test_R_diff_missing_both(tmp_path, capsys):
    """A cell missing in the new run is a regression even when the baseline misses it too."""
    path = tmp_path / "crashed.jsonl"
    path.write_bytes(lines(_run_with_planned(), result("put_"), end_record(planned=2, written=1)))
    code, out, err = call(["diff", path, path], capsys)
    assert code == 1, out + err
    assert "still missing (1; planned, and no row in either run):" in out
    assert "index_add_ (torch-docs) [cpu/error]: missing  REGRESSION" in out
    assert out.rstrip().endswith("REGRESSED: 1 cell(s) no longer conform (1 of them missing: planned, no row)")


# ----------------------------------------------------------------------------- 5. one line, never a traceback or a hang
def _data_run(tmp_path: Path, name: str, text: str | None, *extra: str, schemas: dict | None = None, source=None):
    """A run against a copy of the data files with ``name`` replaced by ``text`` (None: removed),
    and schema files replaced by ``schemas`` (name -> text, None: removed)."""
    data = tmp_path / "data"
    data.mkdir()
    for shipped in SOURCE_OF:
        shutil.copy(DATA / shipped, data / shipped)
    shutil.copytree(DATA / "schemas", data / "schemas")
    if text is None:
        (data / name).unlink()
    elif name:
        (data / name).write_text(text)
    for schema, body in (schemas or {}).items():
        if body is None:
            (data / "schemas" / schema).unlink()
        else:
            (data / "schemas" / schema).write_text(body)
    plugin = PLUGIN + ("import detconf.conformance.datafiles as datafiles\n"
                       "datafiles.SCHEMAS = catalog.DATA / 'schemas'\ndatafiles._validator.cache_clear()\n")
    (tmp_path / "detconf_test_data.py").write_text(plugin)
    out = run_pytest("-p", "detconf_test_data", "--source", source or SOURCE_OF.get(name, "flag-api"), *extra,
                     "--device", "cpu", "--hypothesis-profile", "ci", "-n", "0",
                     "--results", str(tmp_path / "r.jsonl"), "--no-report-build",
                     env={"PYTHONPATH": str(tmp_path), "DETCONF_TEST_DATA": str(data)})
    return out, data


DEEP = "[" * 100_000 + "]" * 100_000


def test_DF_kf_huge_nesting(tmp_path):
    out, data = _data_run(tmp_path, "known-findings.json", DEEP, "-k", "are_deterministic")
    assert_usage_error(out, f"{data / 'known-findings.json'}: malformed JSON: nested deeper than 64 levels")


def test_DF_ascend_nesting(tmp_path):
    out, data = _data_run(tmp_path, "ascend.json", DEEP, "-k", "batch_norm")
    assert_usage_error(out, f"{data / 'ascend.json'}: malformed JSON: nested deeper than 64 levels")


def test_DF_schema_deleted(tmp_path):
    out, data = _data_run(tmp_path, "", "", "-k", "batch_norm", source="ascend",
                          schemas={"catalog-entries.schema.json": None})
    assert_usage_error(out, f"{data / 'schemas' / 'catalog-entries.schema.json'}: cannot read the schema: No such file")


def test_DF_schema_garbage(tmp_path):
    out, data = _data_run(tmp_path, "", "", "-k", "are_deterministic",
                          schemas={"known-findings.schema.json": '{"type": 5}'})
    assert_usage_error(out, f"{data / 'schemas' / 'known-findings.schema.json'}: not a valid JSON Schema")


def test_DF_kf_unknown_entry(tmp_path):
    findings = json.loads((DATA / "known-findings.json").read_text())
    findings.append({"entry_id": "no_such_entry_xyz", "source": "flag-api", "torch": ">=2.0",
                     "verdict": "nondeterministic", "why": "x"})
    out, _ = _data_run(tmp_path, "known-findings.json", json.dumps(findings), "-k", "are_deterministic")
    assert out.returncode == 0, _shown(out)
    said = [line for line in out.stdout.splitlines() if "no_such_entry_xyz" in line]
    assert said == [f"warning: known finding #{len(findings) - 1} (flag-api: 'no_such_entry_xyz', torch >=2.0) "
                    "names no entry of the catalog: it waives nothing (a typo?)"], _shown(out)
    assert "warning: known finding" not in run_pytest(*TWO, "--results", str(tmp_path / "x.jsonl")).stdout


def _findings_link(tmp_path: Path, target: str) -> tuple[subprocess.CompletedProcess, Path]:
    data = tmp_path / "links"
    data.mkdir()
    for shipped in SOURCE_OF:
        if shipped != "known-findings.json":
            shutil.copy(DATA / shipped, data / shipped)
    (data / "known-findings.json").symlink_to(target)
    (tmp_path / "detconf_test_data.py").write_text(PLUGIN)
    out = run_pytest("-p", "detconf_test_data", *TWO, "--results", str(tmp_path / "r.jsonl"),
                     env={"PYTHONPATH": str(tmp_path), "DETCONF_TEST_DATA": str(data)})
    return out, data / "known-findings.json"


def test_DF_kf_dangling(tmp_path):
    out, path = _findings_link(tmp_path, "nowhere.json")
    assert_usage_error(out, f"{path}: a symbolic link to 'nowhere.json', which does not exist")


def test_DF_kf_symlinkloop(tmp_path):
    out, path = _findings_link(tmp_path, "known-findings.json")
    assert_usage_error(out, f"{path}: a symbolic link that cannot be followed (Too many levels of symbolic links)")


def test_DF_kf_missing_is_no_findings(tmp_path):
    """Truly absent: no findings (a recorded finding then fails, which is safe)."""
    out, _ = _data_run(tmp_path, "known-findings.json", None, "-k", "are_deterministic")
    assert out.returncode == 0, _shown(out)


def test_O_source_dup(tmp_path):
    results = tmp_path / "r.jsonl"
    _ok(run_pytest(*TWO, "--source", "flag-api", "--no-report-build", "--results", str(results)))
    [run] = runs_in(results)
    assert len(run["rows"]) == 2 and run["end"]["outcome"] == "complete"


def test_O_docver_flagapi(tmp_path):
    results = tmp_path / "r.jsonl"
    _ok(run_pytest(*TWO, "--doc-version", "1.8.0", "--no-report-build", "--results", str(results)))
    [run] = runs_in(results)
    assert [r["doc_version"] for r in run["rows"]] == ["1.8.0", "1.8.0"]
    assert {e["doc_version"] for e in run["run"]["planned_entries"]} == {"1.8.0"}


def test_O_wm_1e308(tmp_path):
    assert_usage_error(run_pytest(*TWO, "--worker-memory", "1e308", "--results", str(tmp_path / "r.jsonl")),
                       "--worker-memory must be at most")


def test_E_lcall_C(tmp_path):
    """A non-ASCII results path under LC_ALL=C: the file is UTF-8 the reports read, the matrix is built."""
    results = tmp_path / "ü✓ r.jsonl"
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", *TWO, "--fresh-results",
           "--results", os.fsencode(results)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=240, env=_env(env))
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert b"matrix build failed" not in proc.stdout and (tmp_path / "ü✓ r-report" / "matrix.md").is_file()
    [run] = runs_in(results)  # UTF-8 throughout, the path as it is
    assert run["run"]["env"]["argv"][-1] == str(results) and "\\udc" not in results.read_text(encoding="utf-8")
    build = subprocess.run([sys.executable, "-m", "detconf.reports", "build", os.fsencode(results), "--out",
                            os.fsencode(tmp_path / "ü out"), "--quiet"], cwd=ROOT, capture_output=True,
                           timeout=240, env=_env(env))
    assert build.returncode == 0, build.stderr


def test_R_drift_wrongtype(tmp_path, capsys):
    history = tmp_path / "hist.jsonl"
    history.write_bytes(lines({"doc_version": "2.13.0", "entry_id": "put_", "op": "torch.Tensor.put_",
                               "list_name": "raises", "sentence": "x", "position": "x"}))
    code, _, err = call(["drift", history, "--out", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, f"{history}:1: field 'position' must be a whole number")
    assert not (tmp_path / "out").exists()


def test_R_drift_badver(tmp_path, capsys):
    history = tmp_path / "hist.jsonl"
    row = {"doc_version": "2.13.0", "entry_id": "put_", "op": "torch.Tensor.put_", "list_name": "raises",
           "sentence": "x", "position": 0}
    for version, needle in (("9.9.9-bogus", "doc_version '9.9.9-bogus' is not a release (X.Y.Z)"),
                            ("9.9.9", "doc_version '9.9.9' is not a release whose docs this checkout keeps")):
        history.write_bytes(lines(row, dict(row, doc_version=version)))
        code, _, err = call(["drift", history, "--out", tmp_path / "out"], capsys)
        assert_one_line_error(code, err, f"{history}:2: {needle}")
    assert not (tmp_path / "out").exists()


def test_R_build_duprunid(tmp_path, capsys):
    one = good_file(tmp_path)
    two = tmp_path / "copy.jsonl"
    two.write_bytes(one.read_bytes() + one.read_bytes())
    for argv, where in (([two], f"{two}:4"), ([one, one], f"{one}:1")):
        code, _, err = call(["build", *argv, "--out", tmp_path / "out"], capsys)
        assert_one_line_error(code, err, where, "run 'run-1' was read already")
    assert not (tmp_path / "out").exists()


def test_R_build_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    began = time.monotonic()
    proc = child(["build", fifo, "--out", tmp_path / "out"])
    assert time.monotonic() - began < 60
    assert_one_line_error(proc.returncode, proc.stderr, f"{fifo}: cannot read (a pipe")


def test_R_diff_closedstdout(tmp_path):
    good = good_file(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "detconf.reports", "diff", str(good), str(good)], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(1))
    assert_one_line_error(proc.returncode, proc.stderr, "cannot write to standard output (it is closed)")


def test_E_ioencoding_ascii_build(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record(), result(), result("index_add_", position=1, verdict="nondeterministic")))
    proc = subprocess.run([sys.executable, "-m", "detconf.reports", "build", str(path), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=_env({"PYTHONIOENCODING": "ascii"}))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "conforms 1/2 ? nondeterministic 1" in proc.stdout


@pytest.mark.parametrize("command", [["spec-history"], ["entries"]], ids=["devfull", "closed-stdout"])
def test_CONF_spec_history_devfull(command, tmp_path):
    if command == ["spec-history"]:
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "detconf.conformance", *command], cwd=ROOT, stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=120)
        needle = "cannot write to standard output (No space left on device)"
    else:
        proc = subprocess.run([sys.executable, "-m", "detconf.conformance", *command], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
        needle = "cannot write to standard output (it is closed)"
    assert proc.returncode == 2 and proc.stderr == needle + "\n", proc.stderr


def test_V_mustpass_binary(tmp_path):
    from detconf.reports.certify import certify, write_sums
    from detconf.reports.verify import verify

    pkg = certify([str(_complete_run(tmp_path / "r.jsonl"))], str(tmp_path / "pkg"), product="X", vendor="Y")
    (pkg / "must-pass.jsonl").write_bytes(b"\xff\xfe")
    write_sums(pkg)
    code, said = verify(str(pkg))
    assert code == 1 and "must-pass.jsonl: cannot read (not UTF-8)" in said, said


# ----------------------------------------------------------------------------- 6. certification
@pytest.fixture(scope="module")
def flag_run(tmp_path_factory) -> tuple[Path, Path]:
    """A complete run of the flag API's 28 cases and its log."""
    folder = tmp_path_factory.mktemp("flag-run")
    out = run_pytest(*FLAG, "--no-report-build", "--results", str(folder / "r.jsonl"))
    (folder / "pytest.log").write_text(out.stdout)
    return folder / "r.jsonl", folder / "pytest.log"


@pytest.fixture
def package(flag_run, tmp_path) -> Path:
    from detconf.reports.certify import certify

    results, log = flag_run
    return certify([str(results)], str(tmp_path / "pkg"), product="X100", vendor="ACME", logs=[str(log)])


def _verify(pkg: Path) -> list[str]:
    from detconf.reports.verify import verify

    return verify(str(pkg))[1]


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def _resum(pkg: Path) -> None:
    from detconf.reports.certify import write_sums

    write_sums(pkg)


def test_C_certify_ksubset(tmp_path):
    from detconf.reports.certify import certify

    results = tmp_path / "k.jsonl"
    _ok(run_pytest(*FLAG, "-k", "are_deterministic and error", "--no-report-build", "--results", str(results)))
    said = _verify(certify([str(results)], str(tmp_path / "pk"), product="X", vendor="Y"))
    run_id = runs_in(results)[0]["run"]["run_id"]
    assert (f"run {run_id}: it ran 1 of the 28 cases of its plan (a -k, -m, --lf, --deselect or node-id selection); "
            "certify a run of the whole plan (or every --shard part of it)") in said, said
    assert any(line.startswith(f"run {run_id}: it left out the default source(s) torch-docs, ascend, vendor, repro-notes")
               for line in said), said
    assert said[-1].startswith("REFUSED: ")


def test_V_statement_bad_date_format(package):
    assert not [line for line in _verify(package) if "'date'" in line or "'format'" in line]
    _edit_json(package / "statement.json", lambda s: s.update(date="not a date", format="detconf-certification/99"))
    _resum(package)
    said = _verify(package)
    assert ("statement.json: 'format' is 'detconf-certification/99', expected detconf-certification/2") in said, said
    assert ("statement.json: 'date' is 'not a date', expected a UTC time such as 2026-11-25T10:00:00Z") in said, said
    _edit_json(package / "statement.json", lambda s: s.update(date="2000-01-01T00:00:00Z",
                                                              format="detconf-certification/2"))
    _resum(package)
    assert any(line.startswith("statement.json: 'date' is 2000-01-01T00:00:00Z, before run ")
               for line in _verify(package))


def test_V_delete_log_and_sum(package):
    assert (package / "logs" / "01-pytest.log").is_file()
    assert not [line for line in _verify(package) if line.startswith("logs/")]
    (package / "logs" / "01-pytest.log").unlink()
    sums = package / "SHA256SUMS"
    sums.write_text("".join(line for line in sums.read_text().splitlines(keepends=True) if "pytest.log" not in line))
    assert "logs/01-pytest.log: named by statement.json but not in the package (a log was removed)" in _verify(package)


def test_V_add_file_resum(package):
    (package / "extra.txt").write_text("extra\n")
    (package / "logs" / "02-more.log").write_text("more\n")
    _resum(package)
    said = _verify(package)
    assert "extra.txt: not a file certify writes (nor a results file or log the statement names)" in said, said
    assert "logs/02-more.log: not a file certify writes (nor a results file or log the statement names)" in said


def test_V_pkg_findings_edited(package):
    assert not [line for line in _verify(package) if "known-findings.json" in line and "note:" not in line]

    def edit(findings):
        findings[0]["why"] = "nothing to see"
        findings.append({"entry_id": "x", "source": "torch-docs", "torch": ">=0", "verdict": "nondeterministic",
                         "why": "fake"})

    _edit_json(package / "known-findings.json", edit)
    _resum(package)
    assert ("known-findings.json is not the known findings recorded at the certified revision (3 finding(s) added, "
            "removed or changed)") in _verify(package)
