"""The end-of-run report builder that warms up while the tests run (reports.standby): it answers
as the in-process build would, and the run builds the matrix itself when it cannot answer."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from detconf.reports import standby
from detconf.reports.build import build
from detconf.reports.summary import summary_lines
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "reports" / "published" / "torch-2.13.0" / "cpu" / "results.jsonl"
SUBSET = "put_ or index_copy"


def _serve(request_text: str) -> tuple[int, str]:
    out = io.StringIO()
    code = standby.serve(io.StringIO(request_text), out)
    return code, out.getvalue()


def _results(tmp_path: Path) -> Path:
    """A small results file: the first rows of the published CPU table."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(lines[:40]), encoding="utf-8")
    return path


def test_a_request_is_answered_as_the_in_process_build_would(tmp_path):
    results = _results(tmp_path)
    request = {"summary": str(results), "build": {"paths": [str(results)], "out": str(tmp_path / "standby")}}
    code, out = _serve(json.dumps(request) + "\n")
    assert code == 0
    reply = json.loads(out)
    assert reply == {"lines": summary_lines(results), "built": True}
    build([results], tmp_path / "direct")
    for name in ("matrix.csv", "matrix.md", "results.csv", "summary.json"):
        assert (tmp_path / "standby" / name).read_bytes() == (tmp_path / "direct" / name).read_bytes(), name
    assert (tmp_path / "standby" / "matrix.png").stat().st_size > 0


def test_bad_results_are_an_answer_naming_the_problem(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "result", "schema": 99}\n', encoding="utf-8")
    request = {"summary": str(bad), "build": {"paths": [str(bad)], "out": str(tmp_path / "out")}}
    reply = json.loads(_serve(json.dumps(request) + "\n")[1])
    assert "summary_error" in reply and "lines" not in reply
    assert reply["build_error"].startswith("ResultsError: ") and "bad.jsonl" in reply["build_error"]
    assert not (tmp_path / "out").exists()


def test_the_end_of_input_is_a_quiet_exit():
    assert _serve("") == (0, "")


def _start(monkeypatch):
    """The builder as the plugin starts it (through detconf.child, in the run's working folder),
    in this test process, which holds the report's libraries (other tests import them): the
    plugin would build here, unless one of them were missing, as it is made to be."""
    from detconf.plugin import standby as plugin_standby

    monkeypatch.setattr(plugin_standby, "REPORT_LIBRARIES", (*plugin_standby.REPORT_LIBRARIES, "no_such_library"))
    return plugin_standby.Standby.start()


def test_a_started_standby_that_is_not_asked_exits_without_building(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    started = _start(monkeypatch)
    out, err = started.child.communicate("", timeout=120)
    assert (started.proc.returncode, out, err) == (0, "", "")
    assert list(tmp_path.iterdir()) == []
    # Its warm-up was built in the folder the plugin made, which the plugin removes.
    folder = Path(started.folder)
    assert (folder / "warm.jsonl").is_file() and (folder / "report" / "matrix.md").is_file()
    started.stop()
    assert not folder.exists()


def test_a_standby_stopped_during_its_warm_up_leaves_no_folder_behind(tmp_path, monkeypatch):
    """A run that ends before the standby's warm-up does kills it (``Standby.stop``): the
    warm-up's folder goes with it (the test above: the warm-up is built in that folder)."""
    import time

    monkeypatch.chdir(tmp_path)
    started = _start(monkeypatch)
    folder = Path(started.folder)
    deadline = time.monotonic() + 120
    while not (folder / "warm.jsonl").exists():  # the warm-up has begun
        assert started.proc.poll() is None and time.monotonic() < deadline, started.child.communicate(timeout=10)
        time.sleep(0.02)
    started.stop()
    assert started.proc.returncode is not None and not folder.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_started_standby_answers_a_request_with_paths_relative_to_the_runs_folder(tmp_path, monkeypatch):
    _results(tmp_path)
    monkeypatch.chdir(tmp_path)
    reply = _start(monkeypatch).ask({"summary": "results.jsonl", "build": {"paths": ["results.jsonl"], "out": "report"}})
    assert reply == {"lines": summary_lines("results.jsonl"), "built": True}  # as the run names it
    assert (tmp_path / "report" / "matrix.md").is_file()


# -- in a run -----------------------------------------------------------------------------------

PROBE = '''
import sys
import pytest

if "{preload}" == "preload":  # as a conftest or plugin that uses the report's libraries would
    import matplotlib, pandas, pyarrow  # noqa: E401,F401

STARTED = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    writer = session.config.pluginmanager.get_plugin("detconf-results")
    STARTED.append(writer is not None and writer.standby is not None)
    if STARTED[-1] and "{kill}" == "kill":
        writer.standby.proc.kill()  # planted: the builder dies before the end of the run
        writer.standby.proc.wait()


def pytest_unconfigure(config):
    writer = config.pluginmanager.get_plugin("detconf-results")
    with open("{out}", "w") as f:
        f.write(repr({{"answered": writer.standby_answered if writer else None, "started": STARTED == [True],
                       "pandas": "pandas" in sys.modules, "matplotlib": "matplotlib" in sys.modules}}))
'''


def _run(tmp_path: Path, *args: str, kill: bool = False, preload: bool = False,
         cold: bool = False) -> tuple[subprocess.CompletedProcess, dict]:
    seen = tmp_path / "seen.txt"
    (tmp_path / "standby_probe.py").write_text(
        PROBE.format(kill="kill" if kill else "keep", preload="preload" if preload else "no", out=seen),
        encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-p", "standby_probe",
           "--source", "torch-docs", "--device", "cpu", "--mode", "error", "-n", "0", "-k", SUBSET,
           "--results", str(tmp_path / "out" / "results.jsonl"), *args]
    out = warm.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, cold=cold)
    import ast

    return out, ast.literal_eval(seen.read_text(encoding="utf-8"))


def _matrix_written(tmp_path: Path, out: subprocess.CompletedProcess) -> None:
    folder = tmp_path / "out" / "results-report"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["matrix.csv", "results.csv", "matrix.md", "matrix.html", "matrix.png", "summary.json",
         ".detconf-report.json"])  # the builder's manifest of the files it wrote (reports.manifest)
    assert f"matrix: {folder / 'matrix.md'}" in out.stdout
    assert "put_(accumulate=False)" in (folder / "matrix.md").read_text(encoding="utf-8")
    assert "cpu/error: conforms" in out.stdout  # the summary lines


# The first two run cold: the warm interpreter holds the report's libraries (tests/warm_server.py),
# and a run whose process holds them starts no standby. The third is such a run: forked where it may.
def test_the_run_hands_its_report_to_the_standby_and_loads_no_report_library(tmp_path):
    out, seen = _run(tmp_path, cold=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    _matrix_written(tmp_path, out)
    assert seen == {"answered": True, "started": True, "pandas": False, "matplotlib": False}


def test_when_the_standby_died_the_run_builds_the_matrix_itself(tmp_path):
    out, seen = _run(tmp_path, kill=True, cold=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    _matrix_written(tmp_path, out)
    assert seen["started"] is True  # and killed by the probe
    assert seen["answered"] is False and seen["pandas"] is True  # built here, with the same files


def test_a_run_whose_process_holds_the_report_libraries_starts_no_standby_and_builds_the_matrix_itself(tmp_path):
    out, seen = _run(tmp_path, preload=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    _matrix_written(tmp_path, out)
    assert seen == {"answered": False, "started": False, "pandas": True, "matplotlib": True}


@pytest.mark.parametrize("option,standby", [("--no-report-build", "False"), ("--collect-only", "None")])
def test_no_standby_where_nothing_will_be_built(tmp_path, option, standby):
    # None: a collect-only run writes no results at all (no writer, no standby).
    probe = tmp_path / "started.txt"
    (tmp_path / "noprobe.py").write_text(
        "def pytest_sessionfinish(session):\n"
        "    w = session.config.pluginmanager.get_plugin('detconf-results')\n"
        f"    open({str(probe)!r}, 'w').write(repr(w.standby is not None if w else None))\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(tmp_path)
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-p", "noprobe",
                          "--source", "torch-docs", "--device", "cpu", "--mode", "error", "-n", "0", "-k", "put_",
                          "--results", str(tmp_path / "r.jsonl"), option],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert probe.read_text() == standby
    assert not (tmp_path / "r-report").exists()


def test_the_report_modules_the_plugin_imports_need_no_pandas():
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "import detconf.reports.safe, detconf.reports.standby, detconf.vocabulary\n"
            "print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_warm_up_builds_a_report_of_its_own_and_leaves_nothing_behind(tmp_path, monkeypatch):
    import tempfile

    replies = []
    real = standby.handle
    monkeypatch.setattr(standby, "handle", lambda request: replies.append(real(request)) or replies[-1])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    standby.warm()
    assert len(replies) == 1 and replies[0]["built"] is True
    assert any("nondeterministic" in line for line in replies[0]["lines"])  # its rows were read
    assert list(tmp_path.iterdir()) == []


def test_planted_a_warm_up_the_loader_refuses_is_an_error_not_a_silent_cold_build(monkeypatch):
    good = standby._warm_lines
    monkeypatch.setattr(standby, "_warm_lines", lambda: [line.replace('"verdict": "conforms"', '"verdict": 7')
                                                         for line in good()])
    with pytest.raises(RuntimeError, match="standby warm-up failed"):
        standby.warm()
