"""Hostile input to the pytest plugin (the `plugin` package), as a user meets it in a terminal.

Every bad option, data file or results path must stop the run before any test runs with
one ``ERROR:`` line naming the problem and exit status 4 (pytest's usage error); everything
else must work: several runs share a results file without losing a row, a second run on a
file in use fails fast, the end-of-run matrix never overwrites a file it did not write, a
crash leaves a visibly incomplete run, and the rerun hint of a failing case reproduces it
from any folder. Each case runs pytest in a fresh process.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "conformance" / "data"
#: One quick flag-API entry: two cases (error, warn_only).
ENTRY = "is_deterministic_algorithms_warn_only_enabled"
ONE_ENTRY = ["--source", "flag-api", "--device", "cpu", "--hypothesis-profile", "ci", "-k", ENTRY]
#: 16 quick flag-API cases.
SIXTEEN = ["--source", "flag-api", "--device", "cpu", "--hypothesis-profile", "ci", "-k", "set_deterministic_debug_mode"]
#: Appended to the usage-error cases: should a bad input slip through, the run stays tiny.
TINY = ["-k", f"{ENTRY} and error"]


def _env(extra: dict | None = None) -> dict:
    # When these tests run under xdist, its variables must not leak into the inner pytest.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "DETCONF_HYPOTHESIS_PROFILE"}
    env.update(extra or {})
    return env


def run_pytest(*args: str, cwd: Path = ROOT, env: dict | None = None, cache: bool = False, timeout: int = 240,
               fsize: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", *([] if cache else ["-p", "no:cacheprovider"]), *args]
    return warm.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env(env), fsize=fsize)


def assert_usage_error(out: subprocess.CompletedProcess, needle: str) -> str:
    """Exit status 4, exactly one line (``ERROR: ...``) naming the problem, nothing run."""
    shown = f"rc={out.returncode}\nstdout: {out.stdout[-1500:]}\nstderr: {out.stderr[-1500:]}"
    assert out.returncode == 4, shown
    assert "Traceback" not in out.stdout + out.stderr and "INTERNALERROR" not in out.stdout + out.stderr, shown
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), shown
    assert needle in lines[0], shown
    assert out.stdout.strip() == "", "no session started: " + shown
    return lines[0]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def runs_in(path: Path) -> list[dict]:
    """The file's runs: each its run record, result rows and end record (None if absent)."""
    runs: list[dict] = []
    for rec in records(path):
        if rec["record"] == "run":
            runs.append({"run": rec, "rows": [], "end": None})
        elif rec["record"] == "result":
            assert rec["run_id"] == runs[-1]["run"]["run_id"], "a row follows its own run record"
            runs[-1]["rows"].append(rec)
        else:
            assert rec["record"] == "end" and rec["run_id"] == runs[-1]["run"]["run_id"]
            runs[-1]["end"] = rec
    return runs


def run_record(schema: int = 3, run_id: str = "earlier") -> str:
    return json.dumps({"record": "run", "schema": schema, "run_id": run_id, "started": "2026-01-01T00:00:00Z",
                       "env": {}}, sort_keys=True) + "\n"


# ----------------------------------------------------------------------------- options
OPTION_CASES = {
    "runs-1": (["--runs", "1"], "--runs must be at least 2 (got 1)"),
    "runs-0": (["--runs", "0"], "--runs must be at least 2 (got 0)"),
    "runs-negative": (["--runs=-3"], "--runs must be at least 2 (got -3)"),
    "runs-huge": (["--runs", "99999999999999999999"], "--runs must be at most 1000 (got 99999999999999999999)"),
    "runs-above-bound": (["--runs", "1001"], "--runs must be at most 1000 (got 1001)"),
    "runs-word": (["--runs", "abc"], "--runs must be a whole number from 2 to 1000, got 'abc'"),
    "runs-fraction": (["--runs", "2.5"], "--runs must be a whole number from 2 to 1000, got '2.5'"),
    "runs-exponent": (["--runs", "1e3"], "got '1e3'"),
    "runs-empty": (["--runs="], "--runs must be a whole number from 2 to 1000, got ''"),
    "mode-unknown": (["--mode", "sometimes"], "unknown mode 'sometimes'; known: error, warn_only, off"),
    "mode-case": (["--mode", "ERROR"], "unknown mode 'ERROR'"),
    "mode-empty": (["--mode="], "unknown mode ''"),
    "mode-second-bad": (["--mode", "error", "--mode", "warn-only"], "unknown mode 'warn-only'"),
    "source-unknown": (["--source", "rumours"], "unknown source 'rumours'; known: torch-docs, ascend, vendor, "
                                                "flag-api, repro-notes, sdpa, flex-attention, batch-invariance, sweep"),
    "source-empty": (["--source="], "unknown source ''"),
    "source-trailing-space": (["--source", "flag-api "], "unknown source 'flag-api '"),
    "source-underscore": (["--source", "flag_api"], "unknown source 'flag_api'"),
    "doc-version-empty": (["--doc-version="], "--doc-version needs a release, got ''; known versions: 1.8.0,"),
    "doc-version-unknown": (["--doc-version", "0.1.0"], "unknown doc version '0.1.0'; known versions: 1.8.0,"),
    "doc-version-short": (["--doc-version", "2.13"], "unknown doc version '2.13'"),
    "doc-version-space": (["--doc-version", " 2.13.0"], "unknown doc version ' 2.13.0'"),
    "profile-unknown": (["--hypothesis-profile", "nope"], "unknown hypothesis profile 'nope'; known: ci,"),
    "profile-empty": (["--hypothesis-profile="], "--hypothesis-profile needs a profile name; known: ci,"),
    "device-empty": (["--device="], "--device needs a device name such as cpu or cuda, got ''"),
    "device-space": (["--device", " cpu"], "--device needs a device name such as cpu or cuda, got ' cpu'"),
    "device-unknown": (["--device", "tpu"], "unknown device 'tpu'; known: cpu, cuda, mps, npu"),
}


@pytest.mark.parametrize("case", OPTION_CASES)
def test_bad_option_is_a_one_line_usage_error(case, tmp_path):
    args, needle = OPTION_CASES[case]
    results = tmp_path / "r.jsonl"
    assert_usage_error(run_pytest(*args, *TINY, "--results", str(results)), needle)
    assert not results.exists()


@pytest.mark.parametrize("args,needle", [
    (["-n", "2", "-k", "put_ and ("], "wrong expression passed to -k: put_ and ("),
    (["-n", "2", "-k", "not"], "wrong expression passed to -k: not"),
    (["-n", "0", "-k", "bad("], "wrong expression passed to -k: bad("),
    (["-n", "2", "-m", "slow and"], "wrong expression passed to -m: slow and"),
], ids=["k-open-paren-xdist", "k-dangling-not-xdist", "k-serial", "m-dangling-and-xdist"])
def test_a_bad_selection_expression_is_one_line_even_under_xdist(args, needle, tmp_path):
    """Under xdist pytest would find it only in the workers, each crashing on it (INTERNALERROR)."""
    results = tmp_path / "r.jsonl"
    out = run_pytest("--source", "flag-api", "--device", "cpu", *args, "--results", str(results))
    assert_usage_error(out, needle)
    assert not results.exists()


def test_bad_profile_in_the_environment_is_a_one_line_usage_error(tmp_path):
    out = run_pytest(*TINY, "--results", str(tmp_path / "r.jsonl"), env={"DETCONF_HYPOTHESIS_PROFILE": "nope"})
    assert_usage_error(out, "DETCONF_HYPOTHESIS_PROFILE='nope' is not a hypothesis profile; known: ci,")


def _available(device: str) -> bool:
    from detconf.engine.devices import backends

    return backends()[device].describe()["available"]


@pytest.mark.parametrize("requested", [["cuda"], ["mps"], ["npu"], ["cpu", "cuda"]], ids="+".join)
def test_a_requested_device_that_is_absent_is_a_usage_error(requested, tmp_path):
    absent = requested[-1]
    if _available(absent):
        pytest.skip(f"{absent} is available here")
    args = [arg for name in requested for arg in ("--device", name)]
    line = assert_usage_error(run_pytest(*args, *TINY, "--results", str(tmp_path / "r.jsonl")),
                              f"device {absent} is not available here: ")
    assert "leave out --device to test every available device" in line
    assert not (tmp_path / "r.jsonl").exists()


# ----------------------------------------------------------------------------- results paths
def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "pipe")
    return str(tmp_path / "pipe")


def _file_with(text: str):
    def make(tmp_path: Path) -> str:
        (tmp_path / "existing.jsonl").write_text(text, encoding="utf-8")
        return str(tmp_path / "existing.jsonl")
    return make


def _regular_file(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("notes\n")
    return tmp_path / "notes.txt"


def _dir_link(tmp_path: Path) -> str:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    return str(tmp_path / "link")


RESULTS_CASES = {
    "empty": (lambda t: "", [], "--results needs a file path, got ''"),
    "a-folder": (lambda t: str(t), [], "is a folder; give a file path such as"),
    "a-link-to-a-folder": (_dir_link, [], "is a folder"),
    "trailing-slash": (lambda t: str(t / "new") + "/", [], "names a folder"),
    "dot": (lambda t: ".", [], "names a folder"),
    "under-a-regular-file": (lambda t: str(_regular_file(t) / "r.jsonl"), [], "notes.txt is a file, not a folder"),
    "deep-under-a-regular-file": (lambda t: str(_regular_file(t) / "a" / "b" / "r.jsonl"), [],
                                  "notes.txt is a file, not a folder"),
    "dev-full": (lambda t: "/dev/full", [], "--results /dev/full is not a regular file"),
    "dev-null": (lambda t: "/dev/null", [], "--results /dev/null is not a regular file"),
    "fifo": (_fifo, [], "is not a regular file (a device, pipe or socket)"),
    "name-too-long": (lambda t: str(t / ("x" * 300 + ".jsonl")), [], "File name too long"),
    "not-a-results-file": (_file_with("# my notes\n"), [], "is not a detconf results file"),
    "not-a-results-file-fresh": (_file_with("# my notes\n"), ["--fresh-results"], "is not a detconf results file"),
    "json-but-no-run-record": (_file_with('{"record": "result", "schema": 3}\n'), [], "is not a detconf results file"),
    "older-schema": (_file_with(run_record(schema=2)), [], "holds schema 2 results and this suite writes schema 3"),
    "torn-last-line": (_file_with(run_record() + '{"record": "result", "sch'), [], "ends in an incomplete line"),
}


@pytest.mark.parametrize("case", RESULTS_CASES)
def test_bad_results_path_is_refused_before_anything_runs(case, tmp_path):
    make, extra, needle = RESULTS_CASES[case]
    target = make(tmp_path)
    before = Path(target).read_bytes() if target and os.path.isfile(target) else None
    assert_usage_error(run_pytest(*TINY, *extra, "--results", target), needle)
    if before is not None:
        assert Path(target).read_bytes() == before, "the file is left as it was"


def test_results_folder_that_cannot_be_created_is_a_usage_error():
    assert_usage_error(run_pytest(*TINY, "--results", "/proc/detconf-no-such-dir/r.jsonl"),
                       "cannot create the folder of results file /proc/detconf-no-such-dir/r.jsonl: ")


def test_results_file_that_cannot_take_the_run_record_is_a_usage_error(tmp_path):
    """A file system that refuses the first write (here: a file-size limit of 300 bytes)."""
    results = tmp_path / "r.jsonl"
    out = run_pytest(*TINY, "--results", str(results), fsize=300)
    assert_usage_error(out, f"cannot write results file {results}: File too large")
    assert not results.exists(), "a file this run created and could not write is removed"


def test_a_second_run_on_a_file_in_use_fails_fast(tmp_path):
    """Run A holds the file (it waits inside its only test); run B on the same file stops at once."""
    results, started, go = tmp_path / "r.jsonl", tmp_path / "started", tmp_path / "go"
    (tmp_path / "holder.py").write_text(
        "import os, time\n"
        "def pytest_runtest_call(item):\n"
        f"    open({str(started)!r}, 'w').close()\n"
        "    for _ in range(600):\n"
        f"        if os.path.exists({str(go)!r}):\n"
        "            return\n"
        "        time.sleep(0.1)\n")
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "holder", *ONE_ENTRY,
           "--mode", "error", "--no-report-build", "--results", str(results)]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=_env({"PYTHONPATH": str(tmp_path)}))
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)
        began = time.monotonic()
        second = run_pytest(*ONE_ENTRY, "--results", str(results))
        assert_usage_error(second, f"results file {results} is in use by another run")
        assert time.monotonic() - began < 60
    finally:
        go.touch()
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stdout[-2000:] + stderr[-2000:]
    [run] = runs_in(results)  # the second run wrote nothing
    assert len(run["rows"]) == 1 and run["end"]["written"] == 1 and run["end"]["exitstatus"] == 0


# ----------------------------------------------------------------------------- data files
PLUGIN = '''
import os
from pathlib import Path

import detconf.conformance.catalog as catalog
import detconf.conformance.findings as findings

catalog.DATA = Path(os.environ["DETCONF_TEST_DATA"])
findings.FINDINGS_FILE = catalog.DATA / "known-findings.json"
'''

SOURCE_OF = {"ascend.json": "ascend", "flag_api.json": "flag-api", "repro_notes.json": "repro-notes",
             "known-findings.json": "flag-api"}


def _set(index, key, value):
    def change(items):
        items[index][key] = value
    return change


def _drop(index, key):
    def change(items):
        del items[index][key]
    return change


DATA_CASES = {
    "ascend-devices-a-string": ("ascend.json", _set(3, "devices", "npu"),
                                "malformed catalog entry #3 ('cumsum[npu]'): field 'devices' must be an array, "
                                "got a string ('npu')"),
    "ascend-unknown-key": ("ascend.json", _set(0, "colour", "red"), "catalog entry #0 ('batch_norm[npu]'): "
                                                                    "unknown field 'colour'"),
    "ascend-promise": ("ascend.json", _set(1, "promise", "maybe"), "field 'promise' is 'maybe', expected one of"),
    "ascend-position-text": ("ascend.json", _set(2, "position", "2"), "field 'position' must be an integer, got a "
                                                                      "string ('2')"),
    "ascend-position-negative": ("ascend.json", _set(2, "position", -1), "field 'position' is -1, expected at least 0"),
    "ascend-backward-text": ("ascend.json", _set(0, "backward", "yes"), "field 'backward' must be a boolean"),
    "ascend-cases-object": ("ascend.json", _set(0, "cases", {}), "field 'cases' must be an array, got an object"),
    "ascend-cases-empty": ("ascend.json", _set(0, "cases", []), "field 'cases' must not be empty"),
    "ascend-device-name": ("ascend.json", _set(0, "devices", ["NPU"]), "field 'devices[0]' is 'NPU', expected a "
                                                                       "device type"),
    "ascend-other-source": ("ascend.json", _set(0, "source", "flag-api"), "has source 'flag-api', expected 'ascend'"),
    "ascend-duplicate-id": ("ascend.json", _set(1, "entry_id", "batch_norm[npu]"), "duplicate entry id "
                                                                                   "'batch_norm[npu]'"),
    "ascend-truncated": ("ascend.json", "[\n  {\n", "ascend.json:3: malformed JSON"),
    "ascend-duplicate-key": ("ascend.json", '[{"entry_id": "a", "entry_id": "b"}]', "key 'entry_id' appears twice"),
    "ascend-not-a-list": ("ascend.json", '{"entries": []}', "expected a JSON list of catalog entry objects, got an "
                                                            "object"),
    "flag-api-doc-version-number": ("flag_api.json", _set(0, "doc_version", 2.13),
                                    "field 'doc_version' must be a string or null, got a number (2.13)"),
    "flag-api-missing-op": ("flag_api.json", _drop(4, "op"), "catalog entry #4 ("),
    "flag-api-wrong-promise": ("flag_api.json", _set(0, "promise", "raises"), "has promise 'raises', expected "
                                                                              "'behaves'"),
    "repro-notes-dtype": ("repro_notes.json", _set(1, "dtypes", ["float"]), "field 'dtypes[0]' is 'float', expected "
                                                                            "one of 'floating', 'complex', 'integer'"),
    "repro-notes-nan": ("repro_notes.json", '[{"position": NaN}]', "NaN is not a JSON value"),
    "repro-notes-torch-bare-version": ("repro_notes.json", _set(21, "torch", "2.10"),
                                       "malformed catalog entry #21 ('CUBLAS_WORKSPACE_CONFIG=unset:mm'): field "
                                       "'torch' is '2.10' (Invalid specifier: '2.10'), expected a PEP 440 version "
                                       "specifier"),
    "repro-notes-missing": ("repro_notes.json", None, "repro_notes.json: cannot read: No such file or directory"),
    "findings-bare-version": ("known-findings.json", _set(0, "torch", "2.13"),
                              "known finding #0 ('set_deterministic_debug_mode->inductor.config.deterministic'): "
                              "field 'torch' is '2.13'"),
    "findings-trailing-comma": ("known-findings.json", _set(0, "torch", ">=2.13,"), "(empty clause)"),
    # K01: a range no release is in never waives anything: said, not silently loaded.
    "findings-empty-range": ("known-findings.json", _set(0, "torch", ">=2.11,<2.0"),
                             "field 'torch' is '>=2.11,<2.0' (matches no torch release)"),
    # K03: the same finding twice with another reason: the second is dead.
    "findings-repeated": ("known-findings.json", lambda items: items.insert(1, dict(items[0], why="another reason")),
                          "known finding #1 ('set_deterministic_debug_mode->inductor.config.deterministic') repeats "
                          "known finding #0"),
    "findings-passing-verdict": ("known-findings.json", _set(0, "verdict", "conforms"),
                                 "field 'verdict' is 'conforms', expected one of 'nondeterministic'"),
    "findings-unknown-key": ("known-findings.json", _set(0, "versions", ">=2.11"), "unknown field 'versions'"),
    "findings-mode": ("known-findings.json", _set(0, "modes", ["warn"]), "field 'modes[0]' is 'warn'"),
    "findings-devices-a-string": ("known-findings.json", _set(0, "devices", "cuda"),
                                  "field 'devices' must be an array, got a string ('cuda')"),
    "findings-source": ("known-findings.json", _set(0, "source", "repro_notes"), "field 'source' is 'repro_notes'"),
    "findings-not-a-list": ("known-findings.json", "{}", "expected a JSON list of known finding objects"),
}


@pytest.mark.parametrize("case", DATA_CASES)
def test_bad_data_file_is_a_one_line_usage_error_naming_file_entry_and_field(case, tmp_path):
    name, change, needle = DATA_CASES[case]
    data = tmp_path / "data"
    data.mkdir()
    for shipped in SOURCE_OF:
        shutil.copy(DATA / shipped, data / shipped)
    if change is None:
        (data / name).unlink()
    elif isinstance(change, str):
        (data / name).write_text(change)
    else:
        items = json.loads((data / name).read_text(encoding="utf-8"))
        change(items)
        (data / name).write_text(json.dumps(items, indent=2, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "detconf_test_data.py").write_text(PLUGIN)
    out = run_pytest("-p", "detconf_test_data", "--source", SOURCE_OF[name], *TINY,
                     "--results", str(tmp_path / "r.jsonl"),
                     env={"PYTHONPATH": str(tmp_path), "DETCONF_TEST_DATA": str(data)})
    line = assert_usage_error(out, needle)
    assert str(data / name) in line
    assert not (tmp_path / "r.jsonl").exists()


# ----------------------------------------------------------------------------- runs that share a file
def test_a_rerun_appends_a_second_run_and_keeps_the_first(tmp_path):
    results = tmp_path / "r.jsonl"
    first = run_pytest(*ONE_ENTRY, "--no-report-build", "--results", str(results))
    assert first.returncode == 0, first.stdout[-2000:]
    before = results.read_bytes()
    second = run_pytest(*ONE_ENTRY[:-1], f"{ENTRY} and not error", "--no-report-build", "--results", str(results))
    assert second.returncode == 0, second.stdout[-2000:]
    assert results.read_bytes().startswith(before), "appended, never rewritten"
    one, two = runs_in(results)
    assert one["run"]["run_id"] != two["run"]["run_id"]
    assert [r["mode"] for r in one["rows"]] == ["error", "warn_only"] and [r["mode"] for r in two["rows"]] == ["warn_only"]
    assert (one["run"]["planned"], one["end"]["planned"], one["end"]["written"]) == (2, 2, 2)
    assert (two["run"]["planned"], two["end"]["planned"], two["end"]["written"]) == (1, 1, 1)
    assert two["end"]["exitstatus"] == 0 and two["end"]["schema"] == 3 and two["end"]["ended"]
    assert "the file holds 2 runs" in second.stdout


def test_fresh_results_empties_a_results_file_first(tmp_path):
    """A file this suite cannot append to (an older schema, ending in a torn line) is started afresh."""
    results = tmp_path / "r.jsonl"
    results.write_text(run_record(schema=2) + '{"record": "res')
    out = run_pytest(*ONE_ENTRY, "--mode", "error", "--no-report-build", "--fresh-results", "--results", str(results))
    assert out.returncode == 0, out.stdout[-2000:]
    [run] = runs_in(results)
    assert run["run"]["run_id"] != "earlier" and len(run["rows"]) == 1 and run["end"]["written"] == 1


# ----------------------------------------------------------------------------- the matrix's folder
def test_the_matrix_never_overwrites_what_it_did_not_write(tmp_path):
    results, report = tmp_path / "r.jsonl", tmp_path / "r-report"
    report.mkdir()
    (report / "notes.txt").write_text("mine\n")
    (report / "matrix.md").write_text("mine too\n")
    out = run_pytest(*ONE_ENTRY, "--mode", "error", "--results", str(results))
    assert out.returncode == 0, out.stdout[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("matrix not built: ")]
    assert lines == [f"matrix not built: {report} holds files the report builder did not write (matrix.md, "
                     "notes.txt); move them or give another --results"], out.stdout[-2000:]
    assert sorted(p.name for p in report.iterdir()) == ["matrix.md", "notes.txt"]
    assert (report / "matrix.md").read_text() == "mine too\n" and (report / "notes.txt").read_text() == "mine\n"
    assert len(runs_in(results)[0]["rows"]) == 1


def _plugin_module():
    """The plugin's module that owns the results file and its report folder (plugin.results)."""
    from detconf.plugin import results

    return results


def _with_link(report: Path) -> None:
    (report.parent / "elsewhere").mkdir()
    report.symlink_to(report.parent / "elsewhere")


def _built_earlier(report: Path, name: str = "matrix.png", results: str = "results.jsonl") -> None:
    """``name`` in ``report`` as an earlier build left it: listed in the builder's manifest."""
    from detconf.reports import manifest

    report.mkdir(exist_ok=True)
    (report / name).write_bytes(b"png")
    manifest.write(report, {name: manifest.identity(report / name)}, [report.parent / results])


@pytest.mark.parametrize("state,problem", [
    (lambda report: None, None),
    (lambda report: report.mkdir(), None),
    (_built_earlier, None),
    (lambda report: (report.mkdir(), (report / "matrix.png").write_bytes(b"png")), "did not write (matrix.png)"),
    (lambda report: (_built_earlier(report), (report / "matrix.png").write_bytes(b"edited")),
     "did not write (matrix.png)"),
    (lambda report: _built_earlier(report, results="results.json"), "holds the report of"),
    (lambda report: (report.mkdir(), (report / "notes.txt").write_text("x")), "did not write (notes.txt)"),
    (lambda report: (report.mkdir(), (report / "summary.json").mkdir()), "did not write (summary.json)"),
    (lambda report: (report.mkdir(), *((report / f"n{i}").write_text("x") for i in range(5))),
     "did not write (n0, n1, n2 and 2 more)"),
    (lambda report: report.write_text("x"), "exists and is not a folder"),
    (_with_link, "is a symbolic link"),
], ids=["absent", "empty", "builder-files", "builder-names-without-manifest", "builder-file-edited",
        "report-of-another-file", "foreign-file", "folder-named-like-output", "many", "a-file", "a-link"])
def test_which_report_folders_the_builder_may_write_into(state, problem, tmp_path):
    plugin = _plugin_module()
    report = plugin.report_dir(tmp_path / "results.jsonl")
    assert report == tmp_path / "results-report"
    state(report)
    found = plugin._report_dir_problem(report, tmp_path / "results.jsonl")
    assert (found is None) if problem is None else (problem in found and "\n" not in found)


def test_the_matrix_goes_to_its_own_folder_beside_a_results_csv(tmp_path):
    """``--results DIR/results.csv`` once lost the rows to the builder's results.csv."""
    results = tmp_path / "results.csv"
    report = tmp_path / "results-report"
    _built_earlier(report, "matrix.md", "results.csv")
    (report / "matrix.md").write_text("stale\n")  # the builder's own file from an earlier run
    from detconf.reports import manifest

    manifest.write(report, {"matrix.md": manifest.identity(report / "matrix.md")}, [results])
    out = run_pytest(*ONE_ENTRY, "--mode", "error", "--results", str(results))
    assert out.returncode == 0, out.stdout[-2000:]
    [run] = runs_in(results)  # still the JSON lines of the run
    assert len(run["rows"]) == 1 and run["end"]["written"] == 1
    long_form = (report / "results.csv").read_text().splitlines()
    assert long_form[0].startswith("source,") and ENTRY in long_form[1]
    assert (report / "matrix.md").read_text() != "stale\n"
    assert f"matrix: {report / 'matrix.md'}" in out.stdout


# ----------------------------------------------------------------------------- crashes
STOP_AT_START = '''
import pytest
@pytest.hookimpl({order}=True)
def pytest_sessionstart(session):
    raise {error}
'''


@pytest.mark.parametrize("order,error,status", [
    ("trylast", "KeyboardInterrupt()", 2),
    ("trylast", "pytest.UsageError('late')", 4),
    ("trylast", "pytest.exit('asked to stop', returncode=0)", 1),  # planned cases, none run: never 0
    ("tryfirst", "KeyboardInterrupt()", None),  # before the suite's plugin saw the session: no exit status
])
def test_a_run_stopped_while_its_session_starts_still_ends_its_results(order, error, status, tmp_path):
    """An interrupt (what gpu-run sends a step its budget or a signal stops), a usage error or a
    plugin's pytest.exit while the session starts: pytest finishes no session, and the results
    file still ends with the run's end record, incomplete, every planned case missing (a file
    without one was killed); a run that planned cases and ran none never exits 0."""
    (tmp_path / "stop_at_start.py").write_text(STOP_AT_START.format(order=order, error=error))
    results = tmp_path / "r.jsonl"
    out = run_pytest(*SIXTEEN, "-p", "stop_at_start", "--no-report-build", "--results", str(results),
                     env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == (status or 2), out.stdout[-2000:] + out.stderr[-2000:]
    [run] = runs_in(results)
    end, planned = run["end"], run["run"]["whole_plan"]
    assert end is not None, "no end record"
    assert {k: end.get(k) for k in ("exitstatus", "planned", "written", "missing", "outcome")} == {
        "exitstatus": status, "planned": planned, "written": 0, "missing": planned, "outcome": "incomplete"}
    assert run["rows"] == [] and planned > 0


CRASH_IN_WORKERS = '''
import os
def pytest_runtest_call(item):
    if os.environ.get("PYTEST_XDIST_WORKER") and "-cpu-error" in item.nodeid:
        os._exit(3)
'''


def test_a_crash_storm_is_visibly_incomplete(tmp_path):
    """The worker dies on every error-mode case; xdist gives up after one restart."""
    (tmp_path / "crash_workers.py").write_text(CRASH_IN_WORKERS)
    results = tmp_path / "r.jsonl"
    out = run_pytest(*SIXTEEN, "-n", "1", "--max-worker-restart", "1", "-p", "crash_workers", "--no-report-build",
                     "--results", str(results), env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode != 0
    assert "Traceback" not in out.stdout + out.stderr
    [run] = runs_in(results)
    end = run["end"]
    assert end["planned"] == run["run"]["planned"] == 16 and end["written"] == len(run["rows"]) < 16
    assert end["exitstatus"] == out.returncode
    assert f"incomplete: {16 - end['written']} of 16 planned cases have no row" in out.stdout
    assert all(r["verdict"] == "harness-error" for r in run["rows"] if r["mode"] == "error")
    # The run record lists the 16 planned cases, so the reports show each lost one as missing.
    assert end["outcome"] == "incomplete" and end["missing"] == 16 - end["written"]
    assert len(run["run"]["planned_cases"]) == 16
    built = warm.reports("build", results, "--out", tmp_path / "m", timeout=120)
    assert built.returncode == 0, built.stderr
    assert f"{16 - end['written']} of 16 planned cases have no row (shown as missing)" in built.stdout
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["totals"]["missing"] == summary["missing"] == 16 - end["written"]
    assert summary["failing"] >= 16 - end["written"]


def test_a_controller_that_dies_leaves_its_plan_and_rows(tmp_path):
    (tmp_path / "crash_main.py").write_text(
        "import os\n"
        "def pytest_runtest_call(item):\n"
        "    if '-cpu-warn_only' in item.nodeid:\n"
        "        os._exit(3)\n")
    results = tmp_path / "r.jsonl"
    out = run_pytest(*ONE_ENTRY, "-p", "crash_main", "--no-report-build", "--results", str(results),
                     env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 3
    [run] = runs_in(results)
    assert run["run"]["planned"] == 2 and len(run["rows"]) == 1 and run["end"] is None


def test_a_results_file_that_fills_up_mid_run_stops_the_run_without_a_broken_line(tmp_path):
    results = tmp_path / "r.jsonl"
    # room for the run record (about 11 KiB: it lists the planned cases and what the run loaded)
    # and a few rows, not for all 16 (about 1.7 KiB each)
    out = run_pytest(*SIXTEEN, "--no-report-build", "--results", str(results), fsize=24576)
    assert out.returncode != 0 and "Traceback" not in out.stdout + out.stderr
    assert f"results incomplete: cannot write results file {results}: File too large" in out.stdout
    [run] = runs_in(results)  # every line is whole JSON
    assert run["end"] is None and 0 < len(run["rows"]) < 16
    assert f"incomplete: {16 - len(run['rows'])} of 16 planned cases have no row" in out.stdout


# ----------------------------------------------------------------------------- the rerun hint
PLANTED = '''
def pytest_configure(config):
    # The suite's conftest is loaded by now (so ``conformance`` imports from any folder).
    import detconf.conformance.harness as harness

    real = harness.judge

    def judge(case, backend, **kwargs):
        row = real(case, backend, **kwargs)
        return dict(row, verdict="violated") if case.mode == "warn_only" else row

    harness.judge = judge
'''


def _outside_the_summary(stdout: str) -> list[str]:
    """pytest's output without the end-of-run summary's section ("detconf conformance"), which
    names each failing cell's command of its own."""
    kept, inside = [], False
    for line in stdout.splitlines():
        if line.startswith("="):
            inside = " detconf conformance " in line
        if not inside:
            kept.append(line)
    return kept


def _hint(stdout: str) -> list[str]:
    # Under CI=true pytest repeats the whole failure message in its short summary: the same hint
    # may appear twice, but there is one hint.
    hints = sorted({line.split("rerun: ", 1)[1].strip() for line in _outside_the_summary(stdout)
                    if "  rerun: " in line})
    assert len(hints) == 1, stdout[-3000:]
    return shlex.split(hints[0])


def test_the_rerun_hint_reproduces_the_case_from_any_folder_and_under_last_failed(tmp_path):
    (tmp_path / "planted_violation.py").write_text(PLANTED)
    results = tmp_path / "r.jsonl"
    env = {"PYTHONPATH": str(tmp_path)}
    common = [*ONE_ENTRY, "--runs", "3", "--no-complements", "--no-report-build", "-p", "planted_violation",
              "-o", f"cache_dir={tmp_path / 'cache'}", "--results", str(results)]
    first = run_pytest(*common, cache=True, env=env)
    assert first.returncode == 1 and "1 failed, 1 passed" in first.stdout, first.stdout[-2000:]
    last_failed = run_pytest(*common, "--lf", cache=True, env=env)
    assert last_failed.returncode == 1 and "1 failed" in last_failed.stdout, last_failed.stdout[-2000:]
    hint = _hint(last_failed.stdout)
    assert hint == _hint(first.stdout), "--lf changes nothing in the hint"
    test_file = ROOT / "conformance" / "test_documented.py"
    assert hint[:4] == [sys.executable, "-m", "pytest",
                        f"{test_file}::test_documented[flag-api:use_deterministic_algorithms(warn_only)->{ENTRY}-cpu-warn_only]"]
    text = " ".join(hint)
    for option in (f"--rootdir {ROOT}", "--source flag-api", "--no-complements", "--device cpu", "--mode error",
                   "--mode warn_only", "--runs 3", "--hypothesis-profile ci", f"--results {results}"):
        assert option in text, option
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = warm.run([*hint, "-p", "no:cacheprovider", "-p", "planted_violation", "--no-report-build"],
                     cwd=elsewhere, capture_output=True, text=True, timeout=240, env=_env(env))
    assert again.returncode == 1 and "1 failed" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]
    runs = runs_in(results)
    assert len(runs) == 3
    # The same node id in every run, though the results file (outside the suite) existed only
    # from the second run on: pytest's rootdir stays the suite's folder.
    assert {r["nodeid"] for run in runs for r in run["rows"] if r["mode"] == "warn_only"} == {
        f"conformance/test_documented.py::{hint[3].split('::', 1)[1]}"}
    run = runs[-1]
    assert run["run"]["env"]["runs"] == 3 and run["run"]["env"]["hypothesis_profile"] == "ci"
    assert [(r["entry_id"], r["mode"], r["verdict"]) for r in run["rows"]] == [
        (f"use_deterministic_algorithms(warn_only)->{ENTRY}", "warn_only", "violated")]


@pytest.mark.parametrize("profile", ["stress", "stress-with-verbose-verbosity"])
def test_more_runs_than_the_stress_tier_can_afford_is_a_usage_error(profile, tmp_path):
    """S06: --runs 1000 in the stress tier ran for days without a word."""
    results = tmp_path / "r.jsonl"
    args = ["--device", "cpu", "--source", "flag-api", "-n", "0", "-p", "no:cacheprovider", "--runs", "1000",
            "--results", str(results), "--hypothesis-profile", "stress"]
    if profile != "stress":
        args += ["--hypothesis-verbosity", "verbose"]
    assert_usage_error(run_pytest(*args), "--runs 1000 with the stress profile")
    assert not results.exists()
