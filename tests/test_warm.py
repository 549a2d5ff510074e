"""The warm runner of inner ``python -m pytest`` runs (``tests/warm.py``): a forked child is the
process a fresh interpreter would be, and a command the fork could answer differently runs cold."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import warm
from tests.test_hostile_plugin import _env, runs_in

ROOT = Path(__file__).resolve().parents[1]
TWO = ["--source", "flag-api", "--device", "cpu", "--hypothesis-profile", "ci", "-p", "no:randomly", "-n", "0",
       "-k", "are_deterministic", "--no-report-build"]

PROBE = '''
import json, os, resource, sys, warnings
_seen = {
    "argv0": os.path.basename(sys.argv[0]), "path0": sys.path[0], "cwd": os.getcwd(),
    "marker": os.environ.get("WARM_MARKER"), "extra_on_path": os.environ["PROBE_DIR"] in sys.path,
    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
    "repository_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("detconf", "tests", "conformance")),
    "orig_argv_tail": sys.orig_argv[1:3],
    "path": [p.replace(os.environ["PROBE_DIR"], "<probe>") for p in sys.path],
}
def pytest_sessionfinish(session):
    import hypothesis.configuration as hc
    where = hc.storage_directory("x")
    _seen["hypothesis_home"] = str(getattr(where, "home_directory", None) or os.path.dirname(str(where)))
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(_seen, f)
    if os.environ.get("PROBE_KILL"):
        os.kill(os.getpid(), 9)
'''


def _probe(tmp_path: Path, name: str, *, cold: bool, fsize: int | None = None, extra: dict | None = None,
           cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, dict, Path]:
    folder = tmp_path / f"probe-{name}"
    folder.mkdir()
    (folder / "warm_probe.py").write_text(PROBE, encoding="utf-8")
    results = tmp_path / f"{name}.jsonl"
    env = _env({"PYTHONPATH": str(folder), "PROBE_DIR": str(folder), "PROBE_OUT": str(tmp_path / f"{name}.json"),
                "WARM_MARKER": name, **(extra or {})})
    before = dict(warm.stats)
    out = warm.run([sys.executable, "-m", "pytest", str(ROOT / "conformance"), "--rootdir", str(ROOT), "-q",
                    "-p", "no:cacheprovider", "-p", "warm_probe", *TWO, "--results", str(results)],
                   cwd=cwd, env=env, timeout=240, capture_output=True, text=True, fsize=fsize, cold=cold)
    how = "cold" if warm.stats["cold"] > before["cold"] else "warm"
    seen = json.loads((tmp_path / f"{name}.json").read_text()) if (tmp_path / f"{name}.json").exists() else {}
    return out, dict(seen, ran=how), results


def _same_run(out: subprocess.CompletedProcess, results: Path) -> tuple:
    """What a run answered, without what differs between any two runs (ids, times)."""
    [run] = runs_in(results)
    verdicts = sorted((r["entry_id"], r["mode"], r["verdict"], r["observed"]) for r in run["rows"])
    summary = [line for line in out.stdout.splitlines() if line.startswith(("verdicts:", "cpu/", "detconf: "))]
    # Where Triton is installed (CUDA builds of torch 2.15), its nanobind modules report at exit the
    # objects the run froze as leaked, with their addresses: the same report in both, other numbers.
    stderr = [line for line in out.stderr.splitlines()
              if not line.startswith(("nanobind: ", " - leaked ", " - ... skipped", "See https://nanobind"))]
    return out.returncode, verdicts, summary, run["end"]["outcome"], stderr


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_run_answers_as_a_fresh_interpreter_and_sees_the_same_process(tmp_path):
    warm_out, warm_seen, warm_results = _probe(tmp_path, "w", cold=False)
    cold_out, cold_seen, cold_results = _probe(tmp_path, "c", cold=True)
    assert (warm_seen.pop("ran"), cold_seen.pop("ran")) == ("warm", "cold")
    assert warm_out.returncode == 0, warm_out.stdout[-2000:] + warm_out.stderr[-2000:]
    assert _same_run(warm_out, warm_results) == _same_run(cold_out, cold_results)
    assert "warnings summary" not in warm_out.stdout, warm_out.stdout[-2000:]  # none that a fresh run lacks
    for seen, name in ((warm_seen, "w"), (cold_seen, "c")):
        assert seen.pop("marker") == name and seen.pop("extra_on_path") is True
    assert warm_seen == cold_seen  # argv, sys.path[0], folder, limits, no repository module before the plugin
    assert warm_seen["repository_modules"] == [] and warm_seen["path0"] == str(ROOT)


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_the_folder_the_file_size_limit_and_a_kill_are_the_childs_own(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    out, seen, _ = _probe(tmp_path, "k", cold=False, fsize=1 << 30, extra={"PROBE_KILL": "1"}, cwd=other)
    assert seen["ran"] == "warm"
    assert out.returncode == -9  # killed by its own signal, as subprocess.run reports it
    assert seen["cwd"] == str(other) and seen["path0"] == str(other) and seen["fsize"] == 1 << 30
    assert seen["hypothesis_home"] == str(other / ".hypothesis"), seen  # read from the child's folder


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_timeout_kills_the_child_and_raises_as_subprocess_run_does(tmp_path):
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "slow_probe.py").write_text("import time\ndef pytest_configure(config):\n    time.sleep(60)\n")
    before = dict(warm.stats)
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "slow_probe",
                  *TWO], env=_env({"PYTHONPATH": str(folder)}), timeout=3, capture_output=True)
    assert warm.stats["warm"] == before["warm"] + 1


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
@pytest.mark.parametrize("plant", ["OMP_NUM_THREADS", "PYTHONHASHSEED", "dist-info", "pth", "sought-module"])
def test_a_command_whose_imports_could_differ_runs_cold(tmp_path, plant):
    """An environment variable read while torch imports, or a PYTHONPATH folder that could have
    changed those imports (torch loads its backends' entry points, and looks for optional
    modules such as pandas): the fork could answer otherwise, so the command runs cold. A folder
    of plain probe modules stays warm (the control)."""
    folder = tmp_path / "path"
    folder.mkdir()
    (folder / "plain_probe.py").write_text("")
    extra = {"PYTHONPATH": str(folder)}
    if plant in ("OMP_NUM_THREADS", "PYTHONHASHSEED"):
        extra[plant] = "1"
    elif plant == "dist-info":
        (folder / "vendor_backend-1.0.dist-info").mkdir()
    elif plant == "pth":
        (folder / "extra.pth").write_text(str(tmp_path))
    else:  # a name the server's imports looked for and did not find (which names depends on the torch)
        import importlib.util

        sought = warm._server_for(warm.base_env()).sought()
        missing = sorted(n for n in sought if n.isidentifier() and not n.startswith("_") and n not in sys.modules
                         and importlib.util.find_spec(n) is None)
        assert missing, "the server's imports looked for no module they did not find"
        (folder / f"{missing[0]}.py").write_text("")
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--collect-only", *TWO]
    before = dict(warm.stats)
    control = warm.run(cmd, env=_env({"PYTHONPATH": str(tmp_path / "empty")}), timeout=240, capture_output=True)
    assert warm.stats["warm"] == before["warm"] + 1, "the control runs warm"
    planted = warm.run(cmd, env=_env(extra), timeout=240, capture_output=True)
    assert warm.stats["cold"] == before["cold"] + 1, f"{plant}: ran warm"
    assert control.returncode == 0, control.stdout[-2000:] + control.stderr[-2000:]
    if plant != "sought-module":  # an empty stand-in for an optional module may well break torch's import
        assert planted.returncode == 0, planted.stdout[-2000:] + planted.stderr[-2000:]


def test_cold_mode_runs_every_command_as_given(tmp_path):
    """``DETCONF_TESTS_COLD=1``: each command is ``subprocess.run`` as written (the way to check
    that the fork changes no answer: the whole harness passes both ways)."""
    code = ("import os, sys; sys.path.insert(0, %r); os.environ['DETCONF_TESTS_COLD'] = '1'\n"
            "from tests import warm\n"
            "out = warm.run([sys.executable, '-m', 'pytest', '--version'], capture_output=True)\n"
            "print(out.returncode, warm.stats['cold'], warm.stats['warm'], warm._servers == {})\n") % str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=_env())
    assert out.stdout.split() == ["0", "1", "0", "True"], out.stdout + out.stderr
