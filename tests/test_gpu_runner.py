"""``detconf gpu-run`` (detconf/gpurun.py) on the CPU: the requirements check against an offline
wheel folder (hand-made wheels of fake packages, installed by the real pip into a venv that sees
this interpreter's packages), a real run of one narrowed step and its archive, failing steps,
and bad input. No GPU, no network."""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from types import SimpleNamespace
from pathlib import Path

import pytest

from detconf import gpurun
from tests import warm
from tests.by_path import load_script
from tests.environments import see_this_interpreters_packages

ROOT = Path(__file__).resolve().parents[1]
TOOL, DEP = "detconf-fake-tool", "detconf-fake-dep"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def collecting_only(*names: str) -> list[str]:
    """pytest options that keep a ``tests`` step's collection to the harness test files ``names``:
    an ``--ignore`` for each other one. The step still runs ``pytest tests ...`` as on a GPU
    machine, without importing some 70 test modules for the one case it is narrowed to (a fresh
    collection of all of them took 6.5-11 s on the 2-core sandbox). A documented step given the
    same options collects what it did (they name no file of the suite)."""
    return [f"--ignore={path}" for path in sorted((ROOT / "tests").glob("test_*.py")) if path.name not in names]


def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel written by hand: one module, METADATA, WHEEL and RECORD."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: detconf-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


def gpu_run(*args: str, python: str = sys.executable, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return warm.run([python, "-m", "detconf", "gpu-run", *args], cwd=ROOT, capture_output=True, text=True,
                    env=env, timeout=timeout)


@pytest.fixture
def requirements(tmp_path: Path) -> Path:
    """A requirement list: one package this interpreter has, and the fake tool it lacks."""
    path = tmp_path / "req.txt"
    path.write_text(f"packaging>=20  # installed here\n{TOOL}>=1.0\n", encoding="utf-8")
    return path


def test_the_check_names_what_to_bring_with_this_interpreters_tag(requirements):
    out = gpu_run("--check", "--requirements", str(requirements))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"  {TOOL}>=1.0  (required by req.txt)" in out.stdout.splitlines()
    assert "packaging" not in "".join(line for line in out.stdout.splitlines() if line.startswith("  "))
    assert f"bring wheels for Python {TAG}" in out.stdout
    assert "pip download --only-binary=:all:" in out.stdout and f"--abi {TAG}" in out.stdout
    assert f"torch {importlib.metadata.version('torch')} is installed (kept as it is)" in out.stdout
    assert out.stderr == ""


def test_a_wheel_folder_without_a_dependency_names_it_and_installs_nothing(tmp_path, requirements):
    wheels = tmp_path / "wheels"
    make_wheel(wheels, TOOL, "1.0", requires=(f"{DEP}>=2",))
    make_wheel(wheels, DEP, "1.0")  # too old
    out = gpu_run("--check", "--requirements", str(requirements), "--wheels", str(wheels))
    assert out.returncode == 1, out.stdout + out.stderr
    assert (f"  {DEP}>=2  (required by {TOOL} 1.0 (from the wheel folder))  "
            "[detconf_fake_dep-1.0-py3-none-any.whl: version does not do]") in out.stdout.splitlines()
    assert "pip install" not in out.stdout
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version(TOOL)


def test_the_wheels_go_into_the_running_interpreter_with_pip_offline(tmp_path, requirements):
    wheels = tmp_path / "wheels"
    make_wheel(wheels, TOOL, "1.0", requires=(f"{DEP}>=2",))
    make_wheel(wheels, DEP, "2.0")
    make_wheel(wheels, DEP, "1.0")
    venv = tmp_path / "venv"  # sees this interpreter's packages (torch, pip): a GPU machine's python
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    see_this_interpreters_packages(python)  # also when these tests run in a virtualenv
    out = gpu_run("--check", "--requirements", str(requirements), "--wheels", str(wheels), python=python)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (f"-m pip install --no-index --no-deps --find-links {wheels} --disable-pip-version-check "
            f"{TOOL}==1.0 {DEP}==2.0") in out.stdout
    assert f"installed {TOOL} 1.0, {DEP} 2.0; every requirement is installed now" in out.stdout
    where = subprocess.run([python, "-c", "import importlib.metadata as m, detconf_fake_tool, detconf_fake_dep; "
                            f"print(m.version('{DEP}'), detconf_fake_tool.__file__)"],
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    version, path = where.stdout.split()
    assert version == "2.0" and Path(path).is_relative_to(venv), where.stdout + where.stderr
    again = gpu_run("--check", "--requirements", str(requirements), "--wheels", str(wheels), python=python)
    assert again.returncode == 0 and "every requirement is installed" in again.stdout and "pip install" not in again.stdout


def test_one_narrowed_step_runs_and_the_archive_holds_the_machine_the_times_and_the_command(tmp_path):
    out_dir = tmp_path / "run"
    narrow = "test_verdicts_are_ordered_worst_first_and_split_into_passing_and_failing"
    only = collecting_only("test_architecture.py")
    out = gpu_run("--steps", "tests", "-n", "0", "--quiet", "--out", str(out_dir), "--", *only, "-k", narrow)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("gpu-run: [1/1] tests: start ") and line.endswith(f"-p no:cacheprovider {' '.join(only)} -k {narrow}")
               for line in lines), lines
    assert any(line.startswith("gpu-run: [1/1] tests: exit status 0 (passed) after ") for line in lines), lines
    archive = out_dir / f"{out_dir.name}.tar.gz"
    assert lines[-2:] == [f"gpu-run: wrote {archive}", "gpu-run: every step passed"]
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        assert {f"run/{n}" for n in ("machine.json", "steps.json", "COMMAND.md", "logs/tests.log")} <= names, names
        machine = json.load(tar.extractfile("run/machine.json"))
        steps = json.load(tar.extractfile("run/steps.json"))
        command = tar.extractfile("run/COMMAND.md").read().decode()
        log = tar.extractfile("run/logs/tests.log").read().decode()
    # torch.__version__, as torch says it: a wheel's metadata may lack the local label that
    # torch.__version__ carries (PyPI's CUDA 2.5.1 wheel: distribution 2.5.1, torch 2.5.1+cu124).
    import torch
    from packaging.version import Version

    assert machine["torch"]["version"] == torch.__version__ and machine["torch"]["git"]
    assert Version(machine["torch"]["version"]).public == Version(importlib.metadata.version("torch")).public
    assert machine["host"]["cpu_count"] == os.cpu_count() and machine["host"]["python_tag"] == TAG
    assert machine["devices"] == ["cuda" if machine["torch"]["cuda_available"] else "cpu"]
    assert "math_mode" in machine or "math_mode_fallback" in machine, machine["errors"]
    assert machine["backends"]["cpu"]["available"] is True
    [step] = steps
    assert (step["step"], step["status"], step["exit_status"]) == ("tests", "passed", 0)
    assert isinstance(step["wall_s"], float) and step["started"].endswith("Z")
    assert "1 passed" in log
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert f"commit {commit.stdout.strip() if commit.returncode == 0 else 'unknown'}" in command
    assert machine["suite"]["commit"] == (commit.stdout.strip() if commit.returncode == 0 else None)
    assert f"`detconf gpu-run --steps tests -n 0 --quiet --out {out_dir} -- {' '.join(only)} -k {narrow}`" in command
    assert f"Date: {machine['date']}" in command and "Machine: " in command
    assert "| tests | `python -m pytest tests -n 0 -p no:cacheprovider" in command


CANNED = {"torch": {"version": "2.11.0+cu130", "git": "70d99e998b49", "cuda": "13.0", "cudnn": 91900,
                    "cuda_available": True},
          "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "memory_gib": 79.2}],
          "backends": {"cpu": {"available": True}, "cuda": {"available": True, "versions": {"driver": "580.159.04"}},
                       "npu": {"available": False}},
          "errors": {}}


@pytest.fixture
def canned(monkeypatch):
    """No child python: the machine as an H100 would describe it; each step's command replaced."""
    monkeypatch.setattr(gpurun, "probe", lambda root, env, timeout=None: json.loads(json.dumps(CANNED)))
    monkeypatch.setattr(gpurun, "has_stress", lambda plan: False)
    commands = []

    def command(plan, args):
        commands.append(args)
        return [sys.executable, "-c", "import sys; print('a failing step'); sys.exit(3)"]

    monkeypatch.setattr(gpurun, "pytest_command", command)
    return commands


def test_failing_steps_are_named_the_stress_tier_skips_and_the_archive_is_written(tmp_path, canned, capsys):
    req = tmp_path / "ok.txt"
    req.write_text("packaging\n", encoding="utf-8")
    out_dir = tmp_path / "run"
    code = gpurun.main(["--steps", "e,a,stress", "--out", str(out_dir), "--quiet", "--requirements", str(req)], root=ROOT)
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert printed.splitlines()[-1] == ("gpu-run: failed steps: documented (failed, exit status 3), "
                                        "tests (failed, exit status 3)")
    assert "gpu-run: [2/3] stress: skipped: not available: no Hypothesis profile 'stress'" in printed
    assert "machine: NVIDIA H100 80GB HBM3 ×1, driver 580.159.04, CUDA 13.0, cuDNN 91900, torch 2.11.0+cu130" in printed
    documented, tests = canned
    assert documented[:11] == ["conformance", "-n", "auto", "--hypothesis-profile", "ci", "--device", "cuda",
                               "--device", "cpu", "--mode", "error"]  # the CPU beside the GPU, documented only
    assert documented[-2:] == ["--results", str(out_dir / "results" / "documented.jsonl")]
    assert tests == ["tests", "-n", "auto", "-p", "no:cacheprovider"]
    steps = json.loads((out_dir / "steps.json").read_text())
    assert [(s["step"], s["status"]) for s in steps] == [("documented", "failed"), ("stress", "skipped"), ("tests", "failed")]
    assert (out_dir / "logs" / "tests.log").read_text() == "a failing step\n"
    assert (out_dir / f"{out_dir.name}.tar.gz").is_file()


def test_a_device_that_is_absent_is_bad_input_recorded_in_the_output_folder(tmp_path, canned, capsys):
    req = tmp_path / "none.txt"
    req.write_text("", encoding="utf-8")
    code = gpurun.main(["--device", "npu", "--out", str(tmp_path / "run"), "--requirements", str(req)], root=ROOT)
    assert code == 2
    line = "device 'npu' is not available here (torch 2.11.0+cu130)"
    assert capsys.readouterr().err == f"detconf gpu-run: error: {line}\n"
    assert f"gpu-run: error: {line}" in (tmp_path / "run" / "console.log").read_text()
    assert f"state: refused: {line}" in (tmp_path / "run" / "COMMAND.md").read_text()
    assert json.loads((tmp_path / "run" / "steps.json").read_text()) == []
    assert (tmp_path / "run" / "run.tar.gz").is_file()


@pytest.mark.parametrize("args,needle", [
    (["--steps", "documented,bogus"], "unknown step 'bogus'; steps: probes, documented, compiled, sweep, stress, "
                                      "speed, tests, beyond, perturb"),
    (["--budget", "5"], "--budget '5': between 20 seconds and a week"),
    (["--budget", "soon"], "--budget 'soon': a number of seconds"),
    (["--archive", "{tmp}/x.zip"], "--archive {tmp}/x.zip: name it *.tar.gz"),
    (["--alert-tests", "{tmp}/nowhere.py"], "--alert-tests {tmp}/nowhere.py: no such file"),
    (["--wheels", "{tmp}/nowhere"], "--wheels {tmp}/nowhere: no such folder"),
    (["--out", "{tmp}/full"], "--out {tmp}/full: the folder is not empty"),
    (["-n", "lots"], "-n 'lots': a number of workers, or auto"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_input_is_one_line_and_exit_status_2(args, needle, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    out = gpu_run(*[a.format(tmp=tmp_path) for a in args])
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("detconf gpu-run: error: "), out.stderr
    assert needle.format(tmp=tmp_path) in out.stderr
    assert not (tmp_path / "run").exists()


def test_an_unknown_device_is_one_line_and_the_refusal_is_recorded(tmp_path):
    out = gpu_run("--device", "tpu", "--out", str(tmp_path / "run"), "--steps", "sweep")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.splitlines() == [out.stderr.strip()] and "unknown device 'tpu'; known: cpu, cuda" in out.stderr
    assert "refused: unknown device 'tpu'" in (tmp_path / "run" / "COMMAND.md").read_text()
    assert not (tmp_path / "run" / "results" / "sweep.jsonl").exists()


def test_the_module_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None\nimport detconf.gpurun, detconf.gpupack, detconf.cli\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_stress_step_runs_the_stress_profile_of_this_suite(tmp_path):
    plan = SimpleNamespace(root=ROOT, devices=["cuda"], workers="auto")
    assert gpurun.has_stress(plan)
    args = gpurun.STEPS["stress"].args(plan)
    assert args[:5] == ["conformance", "-n", "auto", "--hypothesis-profile", "stress"]
    assert ["--source", "torch-docs"] == args[7:9] and args.count("--mode") == 3
    assert not gpurun.has_stress(SimpleNamespace(root=tmp_path))



def test_the_perturb_step_runs_the_perturbation_tier_on_the_devices_only():
    plan = SimpleNamespace(root=ROOT, devices=["cuda"], workers="auto")
    step = gpurun.STEPS["perturb"]
    args = step.args(plan)
    assert args[:7] == ["conformance", "-n", "auto", "--hypothesis-profile", "ci", "--device", "cuda"]
    assert "--perturb" in args and args[args.index("--source") + 1] == "torch-docs"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--mode"] == ["error", "warn_only", "off"]
    assert "cpu" not in args  # the documented step has the CPU's rows; here each process disturbs the GPU
    assert list(gpurun.STEPS)[-1] == "perturb" and step.letter == "r"  # last: only where time is left


def test_a_skipped_step_says_an_h100_time_only_where_a_gpu_timed_the_whole_step():
    plan = SimpleNamespace(root=ROOT, devices=["cuda"], workers="auto", clock=SimpleNamespace(left=lambda: 5.0))
    timed = gpurun.run_step(plan, gpurun.STEPS["sweep"], 1, 2)
    untimed = gpurun.run_step(plan, gpurun.STEPS["perturb"], 2, 2)
    assert (timed.status, untimed.status) == ("skipped", "skipped")
    assert timed.reason == ("5 s of the budget left, the step needs at least 30 s "
                            "(typically 58 s on an H100 with 16 cores)")
    assert untimed.reason == "5 s of the budget left, the step needs at least 45 s (not yet timed whole on a GPU)"
    # stress: the H100's steps were cut; beyond and perturb have not run on a GPU
    assert [n for n, s in gpurun.STEPS.items() if s.typical_s is None] == ["stress", "beyond", "perturb"]


def test_the_perturb_step_judges_each_case_across_fresh_processes(tmp_path):
    out_dir = tmp_path / "run"
    narrow = "index_add and cpu-off"
    out = gpu_run("--steps", "r", "--device", "cpu", "-n", "0", "--quiet", "--out", str(out_dir), "--", "-k", narrow)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    [step] = json.loads((out_dir / "steps.json").read_text())
    assert (step["step"], step["status"]) == ("perturb", "passed"), step
    rows = [json.loads(line) for line in (out_dir / "results" / "perturb.jsonl").read_text().splitlines()]
    judged = [r for r in rows if "verdict" in r]
    assert [(r["entry_id"], r["mode"]) for r in judged] == [("index_add[cuda]", "off")], judged
    assert {"fresh-process", "scribbled-memory"} <= set(judged[0]["detail"]["perturbations"])
    assert judged[0]["detail"]["across_processes"], judged[0]["detail"]

# --- the bytecode cache the steps share ------------------------------------------------


def _fake_torch(tmp_path, monkeypatch, *, cached: bool):
    import importlib.util

    source = tmp_path / "site" / "torch" / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text("")
    if cached:
        pyc = Path(importlib.util.cache_from_source(str(source)))
        pyc.parent.mkdir()
        pyc.write_bytes(b"")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: SimpleNamespace(origin=str(source)) if name == "torch" else real(name, *a))


def test_steps_share_a_bytecode_cache_when_torch_has_none(tmp_path, monkeypatch):
    _fake_torch(tmp_path, monkeypatch, cached=False)
    env = {}
    path, why = gpurun.bytecode_cache(env, cache_home=tmp_path / "cache")
    assert path == str(tmp_path / "cache" / "detconf" / "pycache") == env["PYTHONPYCACHEPREFIX"]
    assert Path(path).is_dir() and "no bytecode caches" in why


def test_torch_with_its_caches_or_a_callers_choice_is_left_alone(tmp_path, monkeypatch):
    _fake_torch(tmp_path, monkeypatch, cached=True)
    env = {}
    assert gpurun.bytecode_cache(env, cache_home=tmp_path / "cache") == (None, "torch has its bytecode caches")
    assert env == {} and not (tmp_path / "cache").exists()
    assert gpurun.bytecode_cache({"PYTHONPYCACHEPREFIX": "/x"})[0] == "/x"
    assert gpurun.bytecode_cache({"PYTHONDONTWRITEBYTECODE": "1"}) == (None, "PYTHONDONTWRITEBYTECODE is set")


def test_an_unusable_cache_folder_is_said_and_not_set(tmp_path, monkeypatch):
    _fake_torch(tmp_path, monkeypatch, cached=False)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the folder would go")
    env = {}
    path, why = gpurun.bytecode_cache(env, cache_home=blocker)
    assert path is None and "cannot be made" in why and "PYTHONPYCACHEPREFIX" not in env


# --- scripts/gpu_probes.py: the independent checks of a GPU session ------------------------------


def _probes():
    return load_script(ROOT / "scripts" / "gpu_probes.py", "gpu_probes")


def test_the_probes_see_a_raise_a_warning_and_runs_that_differ():
    import torch

    probes = _probes()
    alerting = (lambda: (torch.zeros(4),),
                lambda x: x.put_(torch.zeros(2, dtype=torch.long), torch.ones(2), accumulate=False))
    raised = probes.run(*alerting, mode="error", phase="program", grads=False)
    assert raised["raised"] and "does not have a deterministic implementation" in raised["raised"]
    warned = probes.run(*alerting, mode="warn_only", phase="program", grads=False)
    assert warned["raised"] is None and warned["warned"] and warned["distinct"] == 1
    counter = iter(range(100))
    racing = probes.run(lambda: (torch.ones(3, requires_grad=True),), lambda x: x * float(next(counter)),
                        mode="off", phase="program", grads=True)
    assert racing == {"raised": None, "warned": [], "distinct": probes.RUNS, "runs": probes.RUNS}
    assert not torch.are_deterministic_algorithms_enabled()  # each run leaves the mode off


def test_the_probes_need_their_device(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a machine with a GPU
    assert _probes().main(["--device", "cuda"]) == 2
    assert capsys.readouterr().err == "gpu_probes: no CUDA device here\n"
