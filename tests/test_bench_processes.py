"""``benchmarks/bench_processes.py``: CPU time per kind of process. Its accounting run needs root
and switches the machine's process accounting on and off, so the tests here check what it makes
of a trace and of accounting rows, and its one-line refusal; the whole run is measured by hand
(docs/performance.md)."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.by_path import load_script

ROOT = Path(__file__).resolve().parents[1]
bench = load_script(ROOT / "benchmarks" / "bench_processes.py", "bench_processes")

TRACE = """\
100 execve("/usr/bin/python3", ["python3", "-m", "pytest", "tests"], 0x7ffd /* 40 vars */) = 0
101 execve("/usr/bin/python3", ["python3", "-c", "import torch"], 0x7ffd /* 40 vars */) = 0
102 execve("/usr/local/bin/gcc", ["gcc", "x.c"], 0x7ffd /* 40 vars */) = -1 ENOENT (No such file or directory)
102 execve("/usr/bin/gcc", ["gcc", "/tmp/pytest-1/x.c", "-o", "/tmp/pytest-1/x"], 0x7ffd /* 40 vars */) = 0
108 execve("/usr/bin/python3", ["python3", "x.py"], 0x7ffd /* 40 vars */) = 0
108 execve("/nonexistent", ["nonexistent"], 0x7ffd /* 40 vars */) = -1 ENOENT (No such file or directory)
103 execve("/usr/bin/python3", ["python3", "-c", "import sys; sys.path[:0] = ['/r']\\nfrom detconf.child import main\\nsys.exit(main())\\n", "detconf.conformance.isolated:judge_payload", "{}"], 0x7ffd /* 40 vars */) = 0
"""


def test_a_trace_names_each_process_by_its_last_successful_exec(tmp_path):
    trace = tmp_path / "execve.txt"
    trace.write_text(TRACE, encoding="utf-8")
    seen = bench.execs(trace)
    assert seen[100] == ["python3", "-m", "pytest", "tests"]
    assert seen[102] == ["gcc", "/tmp/pytest-1/x.c", "-o", "/tmp/pytest-1/x"]  # not the failed first try
    assert seen[108] == ["python3", "x.py"]  # a failed exec later leaves the process what it was
    assert bench.kind(seen[102]) == "gcc /tmp/… -o /tmp/…"
    assert bench.kind(seen[103]) == "python3 (detconf.child) detconf.conformance.isolated:judge_payload"


def test_forks_count_as_their_parents_command_and_kinds_sum_their_processes(tmp_path):
    trace = tmp_path / "execve.txt"
    trace.write_text(TRACE, encoding="utf-8")
    rows = [("python3", 30.0, 100, 1, ""), ("python3", 2.5, 101, 100, ""), ("python3", 1.0, 104, 100, "F"),
            ("python3", 0.5, 105, 100, "F"), ("python3", 2.0, 106, 101, "F"), ("gcc", 0.25, 102, 100, ""),
            ("sh", 0.1, 107, 1, "")]
    ranked = bench.table(rows, bench.execs(trace))
    assert ranked == [(30.0, 1, "python3 -m pytest tests"), (2.5, 1, "python3 -c import torch"),
                      (2.0, 1, "fork of python3 -c import torch"), (1.5, 2, "fork of python3 -m pytest tests"),
                      (0.25, 1, "gcc /tmp/… -o /tmp/…"), (0.1, 1, "sh (exec not traced)")]


@pytest.mark.parametrize("missing", ["accton", "dump-acct", "strace"])
def test_without_a_tool_it_says_which_in_one_line(missing, monkeypatch, capsys):
    real = bench.shutil.which
    monkeypatch.setattr(bench.shutil, "which", lambda name: None if name == missing else real(name) or f"/bin/{name}")
    assert bench.main(["--top", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bench_processes: error: {missing} is not installed"), err


def test_without_root_it_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(bench.shutil, "which", lambda name: f"/bin/{name}")
    monkeypatch.setattr(bench.os, "geteuid", lambda: 1000)
    assert bench.main([]) == 2
    assert capsys.readouterr().err == "bench_processes: error: process accounting (accton) needs root\n"


# ``benchmarks/bench_warm.py``: the cost of a forked inner run. Its forked figures need a warm
# server of its own (a torch import); here it runs cold (DETCONF_TESTS_COLD=1: fresh interpreters,
# no server), which prints the same lines.

def _bench_warm(*args: str, temp: Path | None = None):
    import subprocess
    import sys

    from tests import warm

    env = {**warm.base_env(), "DETCONF_TESTS_COLD": "1", **({"TMPDIR": str(temp)} if temp else {})}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_warm.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_fork_benchmark_prints_a_line_per_command_and_how_its_runs_went(tmp_path):
    import re

    out = _bench_warm("--runs", "2", "--only", "c", "--only", "version", temp=tmp_path)
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.iterdir()) == []  # its scratch folder went with it
    lines = out.stdout.splitlines()
    assert re.match(r"\d+ CPUs, load .*; 2 runs each$", lines[0]), lines
    assert [line.split()[:4] for line in lines[1:]] == [["c", "cold", "exit", "0"], ["version", "cold", "exit", "0"]]
    assert all(re.search(r"wall +\d+\.\d ms  busy +\d+\.\d ms a run$", line) for line in lines[1:]), lines


def test_the_fork_benchmarks_suite_commands_collect_one_case_and_run_it(tmp_path, monkeypatch):
    """``collect`` and ``case`` are a suite run's commands as written: one case collected, one
    case passed (forked here from the worker's server, as the benchmark forks them)."""
    import sys

    from tests import warm

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its sibling's import; sys.path is put back after
    bench_warm = load_script(ROOT / "benchmarks" / "bench_warm.py", "bench_warm")
    assert set(bench_warm.WRITES_RESULTS) == {"collect", "case"}
    for name, said in (("collect", "1/"), ("case", "1 passed")):
        out = warm.run([sys.executable, *bench_warm.COMMANDS[name], "--results", str(tmp_path / "r.jsonl")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and said in out.stdout.splitlines()[-1], out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("args", [["--runs", "0"], ["--runs", "abc"], ["--only", "nope"], ["--bogus"]])
def test_the_fork_benchmark_refuses_bad_input_in_one_line(args):
    out = _bench_warm(*args)
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("bench_warm: error: ")


TREE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import bench_alert_tests as bench
if sys.argv[2] == "no-subreaper":  # planted: the orphan goes to init, its CPU uncounted
    bench._subreaper = lambda: False
spin = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
left = (f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {spin!r}], stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL)")
wall, cpu, out, outlived = bench.timed_tree([sys.executable, "-c", left], ".")
print(json.dumps({"wall": wall, "cpu": cpu, "outlived": outlived, "code": out.returncode}))
"""


@pytest.mark.parametrize("plant", ["", "no-subreaper"])
def test_the_cpu_of_a_process_the_command_left_running_is_counted(plant):
    """``timed_tree`` (bench_tests' figures): a command that exits leaving a process of its own
    running (its output elsewhere, as a warm server's), which spins 0.6 s of CPU; it is waited for
    and its CPU counted, not in the wall time."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", TREE, str(ROOT / "benchmarks"), plant or "-"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["code"] == 0 and got["wall"] < 0.6
    if plant:
        assert got["outlived"] == 0 and got["cpu"] < 0.6
    else:
        assert got["outlived"] == 1 and got["cpu"] >= 0.6, got


# --- benchmarks/timeline.py: bench_tests' start, end and idle figures --------------------------------

timeline = load_script(ROOT / "benchmarks" / "timeline.py", "bench_timeline")


def _events(folder: Path, worker: str, rows: list) -> None:
    import json

    (folder / f"{worker}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_the_figures_of_a_run_are_its_start_end_workers_and_idle_time(tmp_path):
    """Two workers: the first test starts 7 s into the run, the last ends 3 s before it does; the
    machine idled 2 s before the tests, 10 s while they ran (4 s of it beside ``t::wait``) and
    1.5 s after. A test still open at the end (a crash) counts for no worker and no figure."""
    _events(tmp_path, "main", [["configure", 100.0, "", 500.0], ["sessionfinish", 150.0, "", 513.0]])
    _events(tmp_path, "gw0", [["configure", 101.0, "", 500.5], ["start", 107.0, "t::a", 502.0],
                              ["finish", 110.0, "t::a", 503.0], ["start", 110.0, "t::wait", 503.0],
                              ["finish", 114.0, "t::wait", 507.0]])
    _events(tmp_path, "gw1", [["start", 108.0, "t::b", 502.5], ["finish", 147.0, "t::b", 512.0],
                              ["start", 147.0, "t::crashed", 512.0]])
    seen = timeline.figures(tmp_path, start=100.0, end=150.0, idle_start=500.0, idle_end=513.5, top=2)
    assert seen["tests"] == 3
    assert (seen["first_test_s"], seen["after_last_test_s"]) == (7.0, 3.0)
    assert seen["worker_last_test_s"] == {"gw0": 14.0, "gw1": 47.0}
    assert (seen["idle_s"], seen["idle_before_tests_s"], seen["idle_during_tests_s"], seen["idle_after_tests_s"]) == (
        13.5, 2.0, 10.0, 1.5)
    assert seen["idlest"] == [("t::b", 39.0, 9.5), ("t::wait", 4.0, 4.0)]
    lines = bench_tests_lines(seen)
    assert "the first test started 7.0 s after the run did, the run ended 3.0 s after the last test" in lines[0]
    assert "gw0 14.0 s, gw1 47.0 s" in lines[0]
    assert lines[1].startswith("idle CPU: 13.5 of ") and "2.0 s before the first test, 10.0 s while tests ran, " \
        "1.5 s after the last" in lines[1]
    # where /proc/stat is not there: every idle figure is "not measured", nothing made up
    blind = timeline.figures(tmp_path, start=100.0, end=150.0)
    assert blind["idle_s"] is None and blind["idle_before_tests_s"] is None and blind["idle_after_tests_s"] is None
    assert bench_tests_lines(blind)[1] == "idle CPU: not measured here (no /proc/stat)"


@functools.cache
def _bench_tests():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_tests imports its neighbours as a script does
    try:
        return load_script(ROOT / "benchmarks" / "bench_tests.py", "bench_tests_under_test")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def bench_tests_lines(seen: dict) -> list[str]:
    return _bench_tests().timeline_lines(seen)


@pytest.mark.parametrize("workers", ["0", "1"])
def test_the_plugin_records_every_process_of_a_run_and_nothing_without_its_variable(tmp_path, workers):
    """``-p benchmarks.timeline`` from the repository's root: a line per event, flushed, in a file
    per process, each test's start and end in the process that ran it (an xdist controller, to
    which the workers relay them, writes them no second time); without ``DETCONF_BENCH_TIMELINE``
    it writes nothing."""
    import json
    import os
    import sys

    from tests import warm

    (tmp_path / "test_two.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n", encoding="utf-8")
    events = tmp_path / "events"
    events.mkdir()
    command = [sys.executable, "-m", "pytest", str(tmp_path / "test_two.py"), "-q", "-p", "no:cacheprovider",
               "-p", "benchmarks.timeline", "--rootdir", str(tmp_path), "-n", workers]
    env = {**warm.base_env(), timeline.VARIABLE: str(events)}
    out = warm.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ran = events / ("main.jsonl" if workers == "0" else "gw0.jsonl")
    rows = [json.loads(line) for line in ran.read_text(encoding="utf-8").splitlines()]
    assert [r[0] for r in rows] == ["configure", "collected", "start", "finish", "start", "finish", "sessionfinish"]
    if workers != "0":
        controller = [json.loads(line)[0] for line in (events / "main.jsonl").read_text(encoding="utf-8").splitlines()]
        assert "start" not in controller and "finish" not in controller and controller[0] == "configure", controller
    assert [r[2].split("::")[-1] for r in rows if r[0] == "start"] == ["test_one", "test_two"]
    assert all(a[1] <= b[1] for a, b in zip(rows, rows[1:]))  # in the order they happened
    assert all((r[3] is None) == (not os.path.exists("/proc/stat")) for r in rows)
    quiet = warm.run(command, cwd=ROOT, env={k: v for k, v in env.items() if k != timeline.VARIABLE},
                     capture_output=True, text=True, timeout=120)
    files = {p.name: p.read_text(encoding="utf-8") for p in events.iterdir()}
    assert quiet.returncode == 0 and sorted(files) == sorted({"main.jsonl", ran.name})
    assert len(files[ran.name].splitlines()) == len(rows)
