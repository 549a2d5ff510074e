"""The pytest plugin as a user meets it: usage errors, xdist, crashes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
SUBSET = "put_ or index_copy or MaxUnpool1d"


def pytest_run(*args, env=None, timeout=300):
    cmd = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", *args]
    # A clean environment: when these tests themselves run under xdist, its
    # variables must not leak into the inner pytest.
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    full_env.update(env or {})
    return warm.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env)


def read_rows(path):
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert lines[0]["record"] == "run", "the first line is the run record"
    return lines[0], [line for line in lines[1:] if line["record"] == "result"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--source", "rumours"], "unknown source 'rumours'"),
        (["--doc-version", "0.1.0"], "0.1.0"),
        (["--mode", "sometimes"], "unknown mode 'sometimes'"),
        (["--runs", "1"], "--runs must be at least 2"),
    ],
)
def test_bad_options_are_one_line_usage_errors(args, needle, tmp_path):
    out = pytest_run(*args, "--results", str(tmp_path / "r.jsonl"), "--collect-only")
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    error_lines = [line for line in out.stderr.splitlines() if needle in line]
    assert len(error_lines) == 1, out.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_ids_read_like_the_entry():
    out = pytest_run("--collect-only", "--source", "torch-docs", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    for expected in ("put_(accumulate=False)-cpu-error", "put_(accumulate=False)-cpu-warn_only",
                     "interpolate(mode='linear'|'bilinear'|'bicubic'|'trilinear').backward[cuda]-cpu-error"):
        assert f"test_documented[{expected}]" in out.stdout


def _key(row):
    return (row["entry_id"], row["device"], row["mode"])


def _comparable(row):
    keep = ("entry_id", "op", "sentence", "source", "promise", "device", "mode", "expected", "observed",
            "verdict", "examples", "runs", "torch_version", "nodeid")
    return {k: row[k] for k in keep} | {"fingerprints": row["detail"].get("fingerprints")}


def test_xdist_and_serial_runs_write_the_same_rows(tmp_path):
    serial, parallel = tmp_path / "serial.jsonl", tmp_path / "parallel.jsonl"
    common = ["--source", "torch-docs", "--device", "cpu", "--hypothesis-profile", "ci", "-k", SUBSET,
              "--no-report-build"]
    a = pytest_run(*common, "-n", "0", "--results", str(serial))
    b = pytest_run(*common, "-n", "2", "--results", str(parallel))
    assert a.returncode == 0 and b.returncode == 0, a.stdout[-2000:] + b.stdout[-2000:]
    run_a, rows_a = read_rows(serial)
    run_b, rows_b = read_rows(parallel)
    assert len(rows_a) >= 8
    assert {r["worker"] for r in rows_b} <= {"gw0", "gw1"} and {r["worker"] for r in rows_a} == {"main"}
    assert sorted(map(_comparable, rows_a), key=lambda r: _key(r)) == sorted(map(_comparable, rows_b), key=lambda r: _key(r))
    assert run_a["env"]["hypothesis_profile"] == "ci" and run_a["env"]["devices"][0]["device"] == "cpu"


CRASHER = '''
import os
def pytest_runtest_call(item):
    if os.environ.get("PYTEST_XDIST_WORKER") and "MaxUnpool1d-cpu-error" in item.nodeid:
        os._exit(3)
'''


def test_a_worker_crash_loses_only_the_test_in_flight(tmp_path):
    (tmp_path / "crasher.py").write_text(CRASHER)
    results = tmp_path / "r.jsonl"
    out = pytest_run("--source", "torch-docs", "--device", "cpu", "--hypothesis-profile", "ci", "-k", SUBSET,
                     "-n", "2", "-p", "crasher", "--results", str(results), "--no-report-build",
                     env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert out.returncode != 0
    _, rows = read_rows(results)
    by_key = {_key(r): r for r in rows}
    crashed = by_key[("MaxUnpool1d", "cpu", "error")]
    assert crashed["verdict"] == "harness-error" and crashed["observed"] == "crashed"
    assert by_key[("MaxUnpool1d", "cpu", "warn_only")]["verdict"] == "conforms"
    assert by_key[("put_(accumulate=False)", "cpu", "error")]["verdict"] == "conforms"
    assert len(rows) == len({_key(r) for r in rows}), "one row per case"


FAILS_OUTSIDE = '''
def pytest_runtest_call(item):
    if "put_(accumulate=False)-cpu-error" in item.nodeid:
        raise RuntimeError("planted: the test failed before the harness ran")
'''


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_test_that_fails_without_a_row_gets_the_row_of_the_case_its_item_carries(tmp_path, workers):
    """No row from the harness (an exception outside it): the row comes from the case the test
    item carries, in one process and under xdist alike, and names the test as collected."""
    (tmp_path / "fails_outside.py").write_text(FAILS_OUTSIDE)
    results = tmp_path / "r.jsonl"
    out = pytest_run("--source", "torch-docs", "--device", "cpu", "--mode", "error", "--hypothesis-profile", "ci",
                     "-k", "put_", "-n", workers, "-p", "fails_outside", "--results", str(results),
                     "--no-report-build", env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    run, rows = read_rows(results)
    by_id = {r["entry_id"]: r for r in rows}
    failed = by_id["put_(accumulate=False)"]
    assert (failed["verdict"], failed["observed"]) == ("harness-error", "crashed")
    assert "RuntimeError" in failed["detail"]["error"]
    assert failed["nodeid"] == "conformance/test_documented.py::test_documented[put_(accumulate=False)-cpu-error]"
    assert {r["verdict"] for r in rows if r is not failed} == {"conforms"}
    assert len(rows) == run["planned"] == len({r["nodeid"] for r in rows})
    assert sorted(c["id"] for c in run["planned_cases"]) == sorted(r["nodeid"].split("[", 1)[1][:-1] for r in rows)


def test_isolated_process_path_gives_the_same_rows(tmp_path):
    """The path NPU takes (one fresh process per case), exercised on CPU."""
    inproc, isolated = tmp_path / "inproc.jsonl", tmp_path / "isolated.jsonl"
    common = ["--source", "torch-docs", "--device", "cpu", "--hypothesis-profile", "ci", "-k", "put_",
              "--no-report-build"]
    a = pytest_run(*common, "--results", str(inproc))
    b = pytest_run(*common, "--isolate", "--results", str(isolated))
    assert a.returncode == 0 and b.returncode == 0, b.stdout[-2000:]
    _, rows_a = read_rows(inproc)
    _, rows_b = read_rows(isolated)
    assert all(r["detail"].get("isolated") for r in rows_b)
    assert not any(r["detail"].get("isolated") for r in rows_a)
    assert sorted(map(_comparable, rows_a), key=_key) == sorted(map(_comparable, rows_b), key=_key)


def test_backends_declare_isolation_and_describe_themselves():
    from detconf.engine.devices import backends

    table = backends()
    assert table["npu"].isolate_modes and not table["cpu"].isolate_modes
    cpu = table["cpu"].describe()
    assert cpu["available"] and cpu["device_name"] and "mkldnn" in cpu["versions"]
    assert table["npu"].describe()["available"] is False  # torch_npu is not installed here


GC_PROBE = '''
import gc
import sys
import weakref

seen = {}


class Cycle:
    pass


def pytest_runtest_call(item):
    if "first" in seen:
        return
    gc.disable()  # from here on only the plugin's own collection frees garbage
    seen["first"] = gc.get_freeze_count()
    garbage = Cycle()
    garbage.me = garbage
    seen["garbage"] = weakref.ref(garbage)
    del garbage
    import colorsys  # noqa: F401 - a module this run has not loaded: the case loads one


def pytest_sessionfinish(session):
    gc.enable()
    with open(%r, "w") as f:
        f.write(repr({"grew": gc.get_freeze_count() > seen["first"], "garbage_freed": seen["garbage"]() is None,
                      "colorsys_loaded": "colorsys" in sys.modules}))
'''


def test_modules_a_case_loads_are_frozen_out_of_the_collectors_sight_and_its_garbage_is_not(tmp_path):
    # gc.freeze after collection, and again after a case that loaded modules (the first case
    # loads torch._inductor): the collections of the run and pytest's own at its end look only
    # at what the run makes. A cycle the case dropped is collected first, not kept for good.
    out = tmp_path / "seen.txt"
    (tmp_path / "gc_probe.py").write_text(GC_PROBE % str(out), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "gc_probe",
                          "--source", "torch-docs", "--device", "cpu", "--mode", "error", "-n", "0",
                          "-k", "index_copy", "--no-report-build", "--results", str(tmp_path / "r.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert eval(out.read_text(encoding="utf-8")) == {"grew": True, "garbage_freed": True, "colorsys_loaded": True}


@pytest.mark.parametrize("given,recorded", [(None, None), ("PASSIVE", "PASSIVE")])
def test_the_openmp_wait_policy_is_the_users_and_recorded(tmp_path, given, recorded):
    # The suite leaves OpenMP's wait policy as the user's processes have it (unset: the runtime's
    # own, whose threads spin briefly between parallel regions; PASSIVE made every parallel region
    # wait for its threads to wake: the CPU suite took 0.3 s longer). The run record says which.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    results = tmp_path / "r.jsonl"
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider",
                          "--source", "torch-docs", "--device", "cpu", "--mode", "error", "-n", "0", "-k", "histc",
                          "--no-report-build", "--results", str(results)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = next(json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()
               if json.loads(line).get("record") == "run")
    assert run["env"]["omp_wait_policy"] == recorded


KILL_PROBE = '''
import json
import os
import signal

synced = []
_fsync = os.fsync


def _counting(fd):
    synced.append(fd)
    return _fsync(fd)


os.fsync = _counting
done = []


def pytest_runtest_call(item):
    if len(done) == 4:  # four cases finished and written: kill the run in the fifth
        with open(%r, "w") as f:
            json.dump({"fsyncs": len(synced), "done": done}, f)
        os.kill(os.getpid(), signal.SIGKILL)


def pytest_runtest_teardown(item):
    done.append(item.nodeid)
'''


def test_a_killed_run_keeps_every_row_written_before_it_without_an_fsync_per_row(tmp_path):
    # Rows go to the operating system as they are written: SIGKILL in the fifth case loses that
    # case only. fsync (for the machine going down) runs for the run record and then at most
    # every couple of seconds, not once per row (a millisecond each, as much as a small case).
    seen = tmp_path / "seen.json"
    (tmp_path / "kill_probe.py").write_text(KILL_PROBE % str(seen), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    results = tmp_path / "r.jsonl"
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "kill_probe",
                          "--source", "torch-docs", "--device", "cpu", "--mode", "error", "-n", "0",
                          "-k", "put_ or index_copy or histc", "--no-report-build", "--results", str(results)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == -9, out.stdout[-2000:] + out.stderr[-2000:]
    probe = json.loads(seen.read_text(encoding="utf-8"))
    records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    assert records[0]["record"] == "run" and not any(r["record"] == "end" for r in records)  # visibly incomplete
    rows = [r for r in records if r["record"] == "result"]
    assert sorted(r["nodeid"] for r in rows) == sorted(probe["done"]) and len(rows) == 4
    assert 1 <= probe["fsyncs"] < len(rows)


IMPORT_GC_PROBE = r"""
# Counts the collections (of any generation; full ones apart) that start while one of torch's
# modules runs its body (an import), and says what caused each: the suite's import of torch or of
# Dynamo (what the test is about), an import that other code started (another pytest plugin, a
# .pth file), an explicit gc.collect() (anyone's: a pause cannot stop it), or a collector that
# another package switched back on inside the suite's pause. A pytest plugin (-p), or imported by
# a plain script for the baseline.
import gc
import json
import os
import sys

OUT = %(out)r
SUITE = tuple(os.path.join(%(root)r, name).replace("\\", "/")
              for name in ("conftest.py", "plugin/", "conformance/", "engine/", "detconf/", "reports/"))
#: The imports the suite pauses the collector for: torch itself, and Dynamo (through Inductor's
#: configuration, which use_deterministic_algorithms imports).
PAUSED_IMPORTS = ("torch", "torch._inductor.config")

seen = {"suite": 0, "suite_full": 0, "suite_other_torch_module": 0, "other_importer": 0, "explicit": 0,
        "reenabled_by_other": 0, "imported_by_suite": [], "imported_by_other": []}
_state = {"explicit": 0, "paused_by_suite": False, "reenabled_by_other": False}


def _path(frame):
    return frame.f_code.co_filename.replace("\\", "/")


def _is_suite(frame):
    return _path(frame).startswith(SUITE)


def _importer_is_suite():
    frame = sys._getframe(2)
    while frame is not None:
        if _is_suite(frame):
            return True
        frame = frame.f_back
    return False


def _audit(event, args):
    if event == "import" and args[0] in PAUSED_IMPORTS:
        seen["imported_by_suite" if _importer_is_suite() else "imported_by_other"].append(args[0])


_collect, _enable, _disable = gc.collect, gc.enable, gc.disable


def _explicit_collect(*args, **kwargs):
    _state["explicit"] += 1
    try:
        return _collect(*args, **kwargs)
    finally:
        _state["explicit"] -= 1


def _tracked_enable():
    if _is_suite(sys._getframe(1)):
        _state["paused_by_suite"] = _state["reenabled_by_other"] = False
    elif _state["paused_by_suite"] and not gc.isenabled():
        _state["reenabled_by_other"] = True
    _enable()


def _tracked_disable():
    if _is_suite(sys._getframe(1)):
        _state["paused_by_suite"], _state["reenabled_by_other"] = True, False
    _disable()


def _collection(phase, info):
    if phase != "start":
        return
    frame, outermost, importer = sys._getframe(1), None, None
    while frame is not None:  # the outermost torch module body on the stack, and who imported it
        if frame.f_code.co_name == "<module>" and "/torch/" in _path(frame):
            outermost, importer = frame, None
        elif outermost is not None and importer is None and _is_suite(frame):
            importer = frame
        frame = frame.f_back
    if outermost is None:
        return
    if _state["explicit"]:
        seen["explicit"] += 1
    elif importer is None:
        seen["other_importer"] += 1
    elif _state["reenabled_by_other"]:
        seen["reenabled_by_other"] += 1
    elif any(paused == name or paused.startswith(name + ".") for paused in PAUSED_IMPORTS
             for name in [outermost.f_globals.get("__name__", "")]):  # torch, torch._inductor(.config)
        seen["suite"] += 1
        seen["suite_full"] += info["generation"] == 2
    else:
        seen["suite_other_torch_module"] += 1


def write():
    seen["dynamo_loaded"] = "torch._dynamo" in sys.modules
    seen["inductor_config_loaded"] = "torch._inductor.config" in sys.modules
    with open(OUT, "w") as f:
        json.dump(seen, f)


sys.addaudithook(_audit)
gc.collect, gc.enable, gc.disable = _explicit_collect, _tracked_enable, _tracked_disable
gc.callbacks.append(_collection)


def pytest_sessionfinish(session):
    write()
"""


def test_the_imports_of_torch_and_dynamo_run_no_full_collection(tmp_path):
    # torch (when the plugin configures) and Dynamo (the first case's use_deterministic_algorithms
    # imports torch._inductor.config) load with the collector paused, then frozen: their objects
    # live as long as the run, and the full collections they would trigger found nothing to free.
    # Only what the pause can prevent counts: a collection triggered by allocation inside the
    # suite's own import of torch or Dynamo -- of any generation, so that the test keeps its power
    # where a full one would not come (Dynamo alone, after someone else loaded torch, adds too few
    # objects to trigger one). Whatever else the interpreter holds (a plugin or a .pth file that
    # imports torch first, a package calling gc.collect() or gc.enable() while torch loads: an
    # H100 image saw 2 full collections) is named in the message, not counted.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))

    def probe(name: str, command: list[str]) -> dict:
        out = tmp_path / f"{name}.json"
        (tmp_path / f"{name}.py").write_text(IMPORT_GC_PROBE % {"out": str(out), "root": str(ROOT)}, encoding="utf-8")
        run = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        return json.loads(out.read_text(encoding="utf-8"))

    # The same interpreter without the suite: importing torch and Dynamo unpaused must trigger
    # collections here, or a zero below would prove nothing.
    bare = probe("gc_bare", ["-c", "import gc_bare, torch, torch._inductor.config; gc_bare.write()"])
    assert bare["other_importer"] > 0, f"a plain import of torch and Dynamo ran no collection here: {bare}"
    seen = probe("gc_suite", ["-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "gc_suite",
                              "--source", "torch-docs", "--device", "cpu", "--mode", "error", "-n", "0",
                              "-k", "index_copy", "--no-report-build", "--results", str(tmp_path / "r.jsonl")])
    # Inductor's configuration is loaded (use_deterministic_algorithms imports it), and with it
    # Dynamo wherever a plain import of the configuration brings Dynamo (2.5.1's does not).
    assert seen["inductor_config_loaded"] and bare["inductor_config_loaded"], (seen, bare)
    assert seen["dynamo_loaded"] == bare["dynamo_loaded"], (seen, bare)
    if not seen["imported_by_suite"]:
        pytest.skip(f"torch and Dynamo were imported before the suite's plugin ran (nothing to measure): {seen}")
    assert seen["suite"] == 0, f"collections during the suite's import of {seen['imported_by_suite']}: {seen}"


def test_torchs_own_jit_deprecation_does_not_reach_the_summary(tmp_path):
    """The first torch.compile imports torch modules that warn `torch.jit.script_method` is
    deprecated (14 lines in every run's summary, none the suite's): filtered. The warning is
    really raised there: made an error on the command line, it fails the case."""
    args = ("--device", "cpu", "--source", "repro-notes", "-k", "torch.compile", "--mode", "error",
            "--hypothesis-profile", "ci", "--no-report-build")
    out = pytest_run(*args, "--results", str(tmp_path / "a.jsonl"))
    assert out.returncode == 0, out.stdout[-2000:]
    assert "script_method" not in out.stdout + out.stderr
    strict = pytest_run(*args, "--results", str(tmp_path / "b.jsonl"), "-W", "error::DeprecationWarning:torch.jit._script")
    if strict.returncode == 0:  # torch 2.14 and 2.15 import no such module in this case
        pytest.skip("this torch raises no torch.jit.script_method deprecation here (nothing to filter)")
    assert strict.returncode == 1 and "script_method` is deprecated" in strict.stdout, strict.stdout[-2000:]
