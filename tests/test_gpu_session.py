"""A GPU session that cannot waste its window, on the CPU: the pack (tree, wheels, revision, the
run script), the budget (a step skipped when it cannot fit, a running step cut, the command ended
in time with its records whole), a stop signal in any phase, a step that tested nothing, and the
refusal of a GPU that torch cannot see. No GPU, no network (wheels are made by hand)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from detconf import gpurun, revision, wheels
from tests import warm
from tests.test_gpu_runner import CANNED, ROOT, collecting_only, make_wheel

PYTHON_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def cli(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return warm.run([sys.executable, "-m", "detconf", *args], cwd=cwd, capture_output=True, text=True,
                    env=env or warm.base_env(), timeout=timeout)


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


# --- the revision --------------------------------------------------------------------------------


def test_a_packed_tree_names_its_commit_and_an_edit_there_makes_it_dirty(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.txt").write_text("b\n")
    record = {"commit": "ab" * 20, "describe": "abababa", "changed": [],
              "files": {"a.py": revision.file_digest(tmp_path / "a.py"), "b.txt": revision.file_digest(tmp_path / "b.txt")}}
    (tmp_path / revision.REVISION_FILE).write_text(json.dumps(record))
    clean = revision.revision(tmp_path)
    assert (clean.commit, clean.describe, clean.dirty, clean.source) == ("ab" * 20, "abababa", False, "pack")
    (tmp_path / "a.py").write_text("x = 2\n")
    (tmp_path / "b.txt").unlink()
    dirty = revision.revision(tmp_path)
    assert dirty.dirty is True and dirty.changed == ("a.py", "b.txt") and dirty.describe == "abababa-dirty"


def test_without_git_or_a_revision_file_the_revision_is_unknown(tmp_path):
    rev = revision.revision(tmp_path)
    assert (rev.commit, rev.dirty, rev.source, rev.label) == (None, None, "unknown", "unknown")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_untracked_file_makes_a_checkout_dirty(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    assert revision.revision(tmp_path).dirty is False
    (tmp_path / "conftest.py").write_text("# drops cases\n")
    rev = revision.revision(tmp_path)
    assert rev.dirty is True and rev.changed == ("conftest.py",) and rev.describe.endswith("-dirty")


# --- the wheels' download command ----------------------------------------------------------------


def test_the_download_names_every_platform_tag_since_pip_matches_each_exactly():
    tags = wheels.manylinux_tags("2.28")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64",
                                                               "manylinux1_x86_64"]
    assert "manylinux_2_17_x86_64" in tags  # where rpds-py's wheels are
    hint = wheels.pip_download_hint([wheels.Need("rpds-py>=0.7", "test")])
    platforms = [hint.split()[i + 1] for i, word in enumerate(hint.split()) if word == "--platform"]
    assert platforms == wheels.platform_tags() and len(platforms) >= 1
    if sys.platform == "linux":
        assert any(p.startswith("manylinux_2_17_") for p in platforms), platforms


# --- the pack ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    """A pack of this checkout, offline: its wheels from a folder of hand-made ones."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of the suite")
    folder = tmp_path_factory.mktemp("pack")
    offered = folder / "offered"
    make_wheel(offered, "jsonschema", "4.26.0")
    make_wheel(offered, "attrs", "25.1.0")  # the image has it: dropped
    have = folder / "have.txt"
    names = [n for n in (ROOT / "detconf" / "lent_gpu_image.txt").read_text().split() if not n.startswith("#")]
    have.write_text("\n".join(names + ["expecttest"]) + "\n")
    out = folder / "gpu pack"
    done = cli("gpu-pack", "--out", str(out), "--have", str(have), "--wheels-from", str(offered), "--budget", "300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on the device (carry gpu pack): sh 'gpu pack'/run \"$OUT\" --budget 300" in done.stdout
    return out


def test_the_pack_holds_the_tree_its_revision_and_only_the_wheels_the_target_lacks(pack):
    manifest = json.loads((pack / "PACK.json").read_text())
    assert sorted(p.name for p in (pack / "wheels").iterdir()) == ["jsonschema-4.26.0-py3-none-any.whl"]
    assert manifest["requirements_fetched"] == ["jsonschema>=4.18"]
    with tarfile.open(pack / "tree.tar.gz") as tar:
        names = set(tar.getnames())
        record = json.load(tar.extractfile(revision.REVISION_FILE))
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True).stdout.split()
    assert {n for n in tracked if (ROOT / n).is_file()} <= names
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert record["commit"] == manifest["revision"]["commit"] == head
    assert record["files"]["conformance/test_documented.py"] == revision.file_digest(ROOT / "conformance" / "test_documented.py")
    assert not any(n.startswith((".git/", "reports/out/")) for n in names)
    assert os.access(pack / "run", os.X_OK)


def test_the_session_refuses_a_machine_without_a_gpu_in_one_line_and_keeps_its_record(pack, tmp_path):
    """The pack's run script as a device call runs it, into an OUT whose name holds a quote and a
    dollar: nothing of it runs as shell code; torch sees no GPU (hidden), so the session stops at
    once with one line naming torch's build and the driver, and the archive in OUT says so. The
    script unpacks the suite under TMPDIR (here, this test's folder), and gpu-run removes that
    folder when it ends, its archive whole."""
    out = tmp_path / "out 'q' $(touch pwned)"
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**PYTHON_ENV, "DETCONF_PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(temp)}
    run = subprocess.run(["sh", str(pack / "run"), str(out)], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith("detconf gpu-run: error: device 'cuda' is not available here: torch ")
    assert "sees no GPU" in line and ("driver" in line or "nvidia-smi" in line)
    assert f"run: suite unpacked in {temp}{os.sep}detconf-gpu." in run.stdout
    [removed] = [l for l in run.stdout.splitlines() if l.startswith("gpu-run: removed ")]
    assert removed.startswith(f"gpu-run: removed {temp}{os.sep}detconf-gpu.") and "the archive holds" in removed
    assert list(temp.iterdir()) == []
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    [archive] = out.glob("gpu-run-*.tar.gz")
    got = members(archive)
    assert "refused: device 'cuda' is not available here" in got["COMMAND.md"].decode()
    machine = json.loads(got["machine.json"])
    assert machine["suite"]["revision_source"] == "pack" and machine["suite"]["commit"] == json.loads(
        (pack / "PACK.json").read_text())["revision"]["commit"]
    assert "--budget 300" in got["COMMAND.md"].decode()  # the pack's default budget
    # A second call into the same OUT adds its own archive and changes nothing of the first (in
    # the same second, a name with "-2" added; later, another time's).
    first = archive.read_bytes()
    again = subprocess.run(["sh", str(pack / "run"), str(out), "--budget", "100"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 2
    [second] = [p for p in out.glob("gpu-run-*.tar.gz") if p != archive]
    assert archive.read_bytes() == first
    assert "--budget 100" in members(second)["COMMAND.md"].decode()
    assert list(temp.iterdir()) == []


def test_the_run_script_needs_its_out_argument(pack):
    run = subprocess.run(["sh", str(pack / "run")], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.startswith("usage: sh ")


@pytest.mark.parametrize("args,needle", [
    (["--python", "three"], "--python 'three': a version like 3.12"),
    (["--budget", "5"], "--budget 5: between 20 and 3600 seconds"),
    (["--alert-tests", "/nowhere/test_torch.py"], "--alert-tests /nowhere/test_torch.py: no such file"),
    (["--out", "{tmp}/full"], "exists and is not a pack"),
])
def test_bad_pack_input_is_one_line(args, needle, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    done = cli("gpu-pack", *[a.format(tmp=tmp_path) for a in args])
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert needle.format(tmp=tmp_path) in done.stderr
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


# --- refusing a GPU that torch does not see --------------------------------------------------------


def _no_gpu(monkeypatch, **torch):
    machine = json.loads(json.dumps(CANNED))
    machine["torch"].update(cuda_available=False, **torch)
    machine["backends"]["cuda"]["available"] = False
    machine["nvidia_smi"] = None
    machine["driver"] = None
    monkeypatch.setattr(gpurun, "probe", lambda root, env, timeout=None: machine)
    return machine


def test_cuda_asked_for_and_not_seen_is_refused_naming_the_build_and_the_driver(tmp_path, monkeypatch, capsys):
    _no_gpu(monkeypatch)
    req = tmp_path / "none.txt"
    req.write_text("")
    code = gpurun.main(["--device", "cuda", "--out", str(tmp_path / "run"), "--requirements", str(req)], root=ROOT)
    assert code == 2
    assert capsys.readouterr().err == (
        "detconf gpu-run: error: device 'cuda' is not available here: torch 2.11.0+cu130 is a CUDA 13.0 build and "
        "sees no GPU; no NVIDIA driver found (no /proc/driver/nvidia/version, no working nvidia-smi)\n")
    assert not (tmp_path / "run" / "results" / "documented.jsonl").exists()


def test_without_a_device_the_fallback_to_the_cpu_is_said(tmp_path, monkeypatch, capsys):
    machine = _no_gpu(monkeypatch, cuda=None)
    machine["driver"] = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04"
    monkeypatch.setattr(gpurun, "pytest_command", lambda plan, args: [sys.executable, "-c", "pass"])
    req = tmp_path / "none.txt"
    req.write_text("")
    gpurun.main(["--steps", "sweep", "--out", str(tmp_path / "run"), "--requirements", str(req)], root=ROOT)
    printed = capsys.readouterr().out
    assert ("gpu-run: no GPU: torch 2.11.0+cu130 is a CPU-only build (torch.version.cuda is None) and sees no GPU; "
            "driver: NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04; running on the CPU") in printed


# --- the budget ------------------------------------------------------------------------------------


@pytest.fixture
def quick(monkeypatch):
    """The machine canned; the steps' minimums small; each step's command given by the test."""
    monkeypatch.setattr(gpurun, "probe", lambda root, env, timeout=None: json.loads(json.dumps(CANNED)))
    for name in ("documented", "sweep", "tests"):
        monkeypatch.setitem(gpurun.STEPS, name, dataclasses.replace(gpurun.STEPS[name], min_s=3))
    commands: dict[str, list[str]] = {}

    def command(plan, args):
        return commands[args[0] if args[0] == "tests" else args[args.index("--source") + 1] if "--source" in args
                        else "documented"]

    monkeypatch.setattr(gpurun, "pytest_command", command)
    return commands


def test_a_step_running_when_the_budget_ends_is_cut_and_the_next_is_skipped(tmp_path, quick, capsys, monkeypatch):
    monkeypatch.setattr(gpurun, "MIN_BUDGET_S", 3)  # a short budget, reserve and minimum keep the test short
    monkeypatch.setattr(gpurun, "RESERVE_S", 1.0)
    for name in ("documented", "sweep"):
        monkeypatch.setitem(gpurun.STEPS, name, dataclasses.replace(gpurun.STEPS[name], min_s=1))
    req = tmp_path / "none.txt"
    req.write_text("")
    quick["documented"] = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(120)"]
    quick["sweep"] = [sys.executable, "-c", "print('never')"]
    start = time.monotonic()
    code = gpurun.main(["--steps", "documented,sweep", "--budget", "3", "--out", str(tmp_path / "run"),
                        "--requirements", str(req), "--quiet"], root=ROOT)
    took = time.monotonic() - start
    printed = capsys.readouterr().out
    assert code == 1, printed
    steps = json.loads((tmp_path / "run" / "steps.json").read_text())
    assert [(s["step"], s["status"]) for s in steps] == [("documented", "cut"), ("sweep", "skipped")]
    assert "of the budget left, the step needs at least 1 s" in steps[1]["reason"]
    assert (tmp_path / "run" / "logs" / "documented.log").read_text().startswith("started\n")  # then SIGINT's traceback
    assert took < 3 + 10, took  # the budget's bound (the benchmark measures it: bench_gpu_budget.py)
    assert "state: finished after" in (tmp_path / "run" / "COMMAND.md").read_text()
    assert "failed steps: documented (cut, exit status" in printed.splitlines()[-1]


def test_a_pytest_step_that_judged_nothing_does_not_pass(tmp_path, quick, capsys):
    req = tmp_path / "none.txt"
    req.write_text("")
    quick["documented"] = [sys.executable, "-c", "print('usage: pytest ...')"]  # exit 0, no results file
    code = gpurun.main(["--steps", "documented", "--out", str(tmp_path / "run"), "--requirements", str(req),
                        "--quiet"], root=ROOT)
    assert code == 1
    [step] = json.loads((tmp_path / "run" / "steps.json").read_text())
    assert step["status"] == "tested-nothing" and "nothing was judged" in step["reason"]


def test_pytest_help_through_the_runner_tested_nothing(tmp_path):
    done = cli("gpu-run", "--steps", "sweep", "--device", "cpu", "--quiet", "--out", str(tmp_path / "run"),
               "--", "--help")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sweep: exit status 0 (tested-nothing)" in done.stdout


# --- a stop signal in any phase ------------------------------------------------------------------


@pytest.mark.parametrize("delay", [0.5, 2.0, "step"])
def test_sigterm_at_any_point_leaves_whole_records_and_the_archive(tmp_path, delay):
    """SIGTERM while requirements are checked, while torch is imported for the machine's
    description, or while a step runs (``step``: once the step's log has its first output, its
    test then sleeps): steps.json, COMMAND.md, machine.json and the archive are whole, the step's
    results end with an end record, and the exit status is 143."""
    scratch = _scratch(tmp_path)  # as the pack's run script runs it: --out inside, removed at the end
    out, archive = scratch / "run", tmp_path / "run.tar.gz"
    narrow = "test_sigterm_target_sleeps"
    env = {**PYTHON_ENV, "DETCONF_SLEEP_TARGET": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "detconf", "gpu-run", "--steps", "tests", "--device", "cpu", "-n", "0",
                             "--quiet", "--out", str(out), "--archive", str(archive), "--scratch", str(scratch),
                             "--", *collecting_only("test_gpu_session.py"), "-k", narrow, "tests/test_gpu_session.py"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if delay == "step":
        log, deadline = out / "logs" / "tests.log", time.monotonic() + 120
        while not (log.exists() and log.stat().st_size) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None and log.exists() and log.stat().st_size, "the step never started"
    else:
        time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stdout + stderr
    if delay == "step":  # stopped while the step ran
        assert "stopped by SIGTERM" in stderr + stdout and archive.exists()
    assert not scratch.exists(), stdout  # removed whatever the phase: nothing of the run is only there
    if not archive.exists():  # stopped before the output folder was made: said, nothing to keep
        assert "stopped" in stderr
        return
    assert f"gpu-run: removed {scratch} (the unpacked suite; the archive holds this run's files)" in stdout
    got = members(archive)
    assert {"steps.json", "COMMAND.md", "machine.json", "console.log", "requirements.json"} <= set(got)
    assert "state: stopped by SIGTERM after" in got["COMMAND.md"].decode()
    steps = json.loads(got["steps.json"])
    assert all(s["status"] in ("interrupted", "passed") for s in steps), steps
    assert "stopped by SIGTERM" in got["console.log"].decode()


@pytest.mark.skipif(not os.environ.get("DETCONF_SLEEP_TARGET"), reason="the target of the SIGTERM test's step")
def test_sigterm_target_sleeps():
    time.sleep(60)


# --- the unpacked folder ------------------------------------------------------------------------


def _scratch(tmp_path: Path) -> Path:
    """A folder as the pack's run script makes it: its mark and an unpacked suite (here, a file)."""
    scratch = tmp_path / "scratch"
    (scratch / "tree").mkdir(parents=True)
    (scratch / gpurun.SCRATCH_MARK).touch()
    (scratch / "tree" / "suite.py").write_text("# the unpacked suite\n")
    return scratch


def test_the_unpacked_folder_goes_once_the_archive_holds_the_run_and_stays_when_it_cannot(tmp_path, quick, capsys,
                                                                                           monkeypatch):
    """The archive is brought up to date at the end (the lines said after the last records are in
    its console.log), then the folder is removed; a disk that fills at that moment keeps it, said
    in a line (the run's files are there and nowhere else)."""
    req = tmp_path / "none.txt"
    req.write_text("")
    quick["documented"] = [sys.executable, "-c", "print('hello')"]  # tested nothing: said after the last step
    scratch = _scratch(tmp_path)
    archive = tmp_path / "keep" / "run.tar.gz"
    archive.parent.mkdir()
    argv = ["--steps", "documented", "--out", str(scratch / "run"), "--archive", str(archive), "--scratch",
            str(scratch), "--requirements", str(req), "--quiet"]
    assert gpurun.main(argv, root=ROOT) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == f"gpu-run: removed {scratch} (the unpacked suite; the archive holds this run's files)"
    assert not scratch.exists()
    console = members(archive)["console.log"].decode()
    assert console.endswith(printed[-2] + "\n") and "tested-nothing" in printed[-2]

    scratch = _scratch(tmp_path)
    archive = tmp_path / "keep" / "again.tar.gz"
    argv[argv.index("--archive") + 1] = str(archive)
    write = gpurun.write_archive

    def full_at_the_end(out, to=None, held=None):
        if gpurun.Console.sink is None:  # the console is closed: the last archive, when the run ends
            raise gpurun.OutputError(f"{to}: No space left on device")
        return write(out, to, held)

    monkeypatch.setattr(gpurun, "write_archive", full_at_the_end)
    assert gpurun.main(argv, root=ROOT) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"gpu-run: kept {scratch}: the archive {archive} could not be brought up to date ({archive}: No space left "
        "on device)")
    assert (scratch / "run" / "steps.json").is_file() and (scratch / "tree" / "suite.py").is_file()


def test_a_file_still_growing_after_the_last_archive_keeps_the_unpacked_folder(tmp_path, quick, capsys, monkeypatch):
    """Something a step left behind still writes into --out after the last archive: the archive
    does not hold the file as it is, so the folder stays, said in a line naming the file."""
    req = tmp_path / "none.txt"
    req.write_text("")
    quick["documented"] = [sys.executable, "-c", "print('hello')"]
    scratch = _scratch(tmp_path)
    archive = tmp_path / "run.tar.gz"
    write = gpurun.write_archive

    def then_a_late_line(out, to=None, held=None):
        done = write(out, to, held)
        if gpurun.Console.sink is None:  # the last archive: a late writer appends to a step's log
            with open(out / "logs" / "documented.log", "a") as log:
                log.write("late\n")
        return done

    monkeypatch.setattr(gpurun, "write_archive", then_a_late_line)
    gpurun.main(["--steps", "documented", "--out", str(scratch / "run"), "--archive", str(archive), "--scratch",
                 str(scratch), "--requirements", str(req), "--quiet"], root=ROOT)
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"gpu-run: kept {scratch}: the archive {archive} lacks logs/documented.log as it is in {scratch / 'run'}")
    assert (scratch / "run" / "logs" / "documented.log").read_text().endswith("late\n")


@pytest.mark.parametrize("case,needle", [
    ("unmarked", "--scratch {scratch}: not a folder the pack's run script made (it holds .detconf-gpu-scratch); "
                 "gpu-run removes only such a folder"),
    ("archive inside", "--scratch {scratch}: give an --archive outside it (the folder is removed when the run ends)"),
    ("no archive", "--scratch {scratch}: give an --archive outside it (the folder is removed when the run ends)"),
    ("abbreviated", "--scratch: write the option in full (--scratch DIR)"),
])
def test_a_scratch_folder_gpu_run_did_not_get_from_the_run_script_is_refused_and_kept(case, needle, tmp_path, capsys):
    """Removed only where the run script's mark is, --out inside it and the archive outside."""
    scratch = _scratch(tmp_path)
    if case == "unmarked":
        (scratch / gpurun.SCRATCH_MARK).unlink()
    out = scratch / "run"
    archive = [] if case == "no archive" else [
        "--archive", str(scratch / "run.tar.gz" if case == "archive inside" else tmp_path / "run.tar.gz")]
    option = "--scr" if case == "abbreviated" else "--scratch"
    code = gpurun.main(["--steps", "sweep", "--out", str(out), *archive, option, str(scratch)], root=ROOT)
    assert code == 2
    assert capsys.readouterr().err == f"detconf gpu-run: error: {needle.format(scratch=scratch)}\n"
    assert (scratch / "tree" / "suite.py").is_file() and not out.exists()


def test_an_out_folder_named_elsewhere_stays_and_the_unpacked_folder_goes(tmp_path, quick, capsys):
    """The pack's run script given another --out: the run's files are there, the unpacked folder
    holds nothing of the run and is removed."""
    req = tmp_path / "none.txt"
    req.write_text("")
    quick["documented"] = [sys.executable, "-c", "print('hello')"]
    scratch = _scratch(tmp_path)
    out = tmp_path / "mine"
    gpurun.main(["--steps", "documented", "--out", str(out), "--archive", str(tmp_path / "run.tar.gz"), "--scratch",
                 str(scratch), "--requirements", str(req), "--quiet"], root=ROOT)
    assert capsys.readouterr().out.splitlines()[-1] == f"gpu-run: removed {scratch} (the unpacked suite)"
    assert not scratch.exists() and (out / "steps.json").is_file() and (tmp_path / "run.tar.gz").is_file()


def test_a_run_refused_for_another_option_still_removes_its_unpacked_folder(tmp_path, capsys):
    """A typo in the options given to the pack's run script: refused in one line, and the
    unpacked suite (nothing of the run in it) does not stay behind."""
    scratch = _scratch(tmp_path)
    code = gpurun.main(["--out", str(scratch / "run"), "--archive", str(tmp_path / "run.tar.gz"), "--scratch",
                        str(scratch), "--budget", "5"], root=ROOT)
    assert code == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not scratch.exists() and not (tmp_path / "run.tar.gz").exists()


def test_missing_wheels_are_written_into_the_output_folder_with_the_download_that_fetches_them(tmp_path):
    req = tmp_path / "req.txt"
    req.write_text("detconf-fake-absent>=1.0\n")
    out = tmp_path / "run"
    done = cli("gpu-run", "--requirements", str(req), "--out", str(out), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    state = json.loads((out / "requirements.json").read_text())
    assert state["needs"] == ["detconf-fake-absent>=1.0  (required by req.txt)"]
    assert state["pip_download"].startswith("python3 -m pip download --only-binary=:all:")
    assert "--platform" in state["pip_download"] and state["pip_download"].endswith("'detconf-fake-absent>=1.0'")
    assert "detconf-fake-absent>=1.0  (required by req.txt)" in (out / "console.log").read_text()
    got = members(out / "run.tar.gz")
    assert "state: requirements missing" in got["COMMAND.md"].decode() and "requirements.json" in got
