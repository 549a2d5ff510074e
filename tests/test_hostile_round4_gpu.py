"""Hostile inputs of round 4 (../shared/hostile-2026-11-27.md) against ``detconf gpu-run``, the
pack's session script (``gpu-pack``'s ``run``, what replaced ``scripts/gpu-session.sh``) and
the wheels check: one test per entry, named after its id. No GPU, no network, no root."""
from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from detconf import gpupack, gpurun, wheels
from tests.test_gpu_runner import CANNED, ROOT, collecting_only, make_wheel
from tests import warm
from tests.test_gpu_session import PYTHON_ENV, cli, members

PKG = "detconf-h4-notinstalled"  # the entries' notinstalledpkg: a name no index or interpreter has
ONE_CASE = "are_deterministic_algorithms_enabled and cpu and error"  # one documented case, ~1 s


def one_line_error(done: subprocess.CompletedProcess, needle: str = "") -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("detconf gpu-run: error: ") and needle in line, line
    return line


def steps_of(out: Path) -> dict[str, dict]:
    return {s["step"]: s for s in json.loads((out / "steps.json").read_text())}


def running(pid: int) -> bool:
    """Is ``pid`` a live process (a zombie is not)?"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


# --- the pack's session script (gpu-session.sh's successor) ---------------------------------------


FAKE_PYTHON = r'''#!{python}
# stands for the lent machine's python: records how the session script called gpu-run, and writes
# the archive gpu-run would write
import json, os, sys
args = sys.argv[1:]
with open(os.environ["H4_CALLS"], "a") as fh:
    fh.write(json.dumps({{"cwd": os.getcwd(), "args": args}}) + "\n")
archive = args[args.index("--archive") + 1]
with open(archive, "w") as fh:
    fh.write(os.environ.get("H4_CALL", "call"))
'''


@pytest.fixture
def session(tmp_path):
    """A pack made by hand (its run script, a tree of one file, no wheels) and a stand-in for the
    lent machine's python; ``run(OUT, cwd=..., call=...)`` runs ``sh PACK/run OUT``."""
    pack = tmp_path / "pack"
    (pack / "wheels").mkdir(parents=True)
    (pack / "run").write_text(gpupack.RUN.replace("@BUDGET@", "300"))
    (tmp_path / "t.txt").write_text("tree\n")
    with tarfile.open(pack / "tree.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "t.txt", arcname="t.txt")
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    bin_ = tmp_path / "bin"  # a date that always says the same second: two calls in one second
    bin_.mkdir()
    (bin_ / "date").write_text("#!/bin/sh\necho 20261127T000000Z\n")
    (bin_ / "date").chmod(0o755)
    calls = tmp_path / "calls.jsonl"

    def run(out: str, *, cwd: Path = tmp_path, call: str = "call") -> subprocess.CompletedProcess:
        env = {**PYTHON_ENV, "DETCONF_PYTHON": str(fake), "H4_CALLS": str(calls), "H4_CALL": call,
               "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}", "TMPDIR": str(tmp_path)}
        return subprocess.run(["sh", str(pack / "run"), out], capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=60)

    def recorded() -> list[dict]:
        return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    run.calls = recorded
    return run


def _arg(call: dict, option: str) -> str:
    return call["args"][call["args"].index(option) + 1]


def test_G31_a_quote_in_OUT_is_a_name_never_shell_code(session, tmp_path):
    out = f"{tmp_path}/inj'; touch {tmp_path}/PWNED; echo '"
    done = session(out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "PWNED").exists()
    [call] = session.calls()
    archive = Path(_arg(call, "--archive"))
    assert archive.parent == Path(out) and archive.name == "gpu-run-20261127T000000Z.tar.gz"
    assert archive.read_text() == "call" and Path(out).is_dir()


def test_G35_a_second_session_into_the_same_OUT_keeps_the_first_ones_files(session, tmp_path):
    out = tmp_path / "sess2"
    (out / "gpu-run").mkdir(parents=True)  # what a first session leaves
    (out / "session.txt").write_text("FIRST-SESSION\n")
    (out / "probes.txt").write_text("FIRST-PROBES\n")
    (out / "gpu-run" / "steps.json").write_text("keep\n")
    first = session(str(out), call="first")
    second = session(str(out), call="second")  # the same second (date stands still)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert (out / "session.txt").read_text() == "FIRST-SESSION\n" and (out / "probes.txt").read_text() == "FIRST-PROBES\n"
    assert (out / "gpu-run" / "steps.json").read_text() == "keep\n"
    one, two = session.calls()
    assert Path(_arg(one, "--archive")) == out / "gpu-run-20261127T000000Z.tar.gz"
    assert Path(_arg(two, "--archive")) == out / "gpu-run-20261127T000000Z-2.tar.gz"
    assert (out / "gpu-run-20261127T000000Z.tar.gz").read_text() == "first"
    assert (out / "gpu-run-20261127T000000Z-2.tar.gz").read_text() == "second"
    for call in (one, two):  # gpu-run's own folder is a fresh one of each call, outside OUT
        assert not Path(_arg(call, "--out")).is_relative_to(out)
    assert _arg(one, "--out") != _arg(two, "--out")
    # gpu-run itself never writes over an archive it did not make
    existing = tmp_path / "keep.tar.gz"
    existing.write_text("an earlier archive")
    done = cli("gpu-run", "--steps", "documented", "--out", str(tmp_path / "new"), "--archive", str(existing))
    one_line_error(done, f"--archive {existing}: exists")
    assert existing.read_text() == "an earlier archive" and not (tmp_path / "new").exists()


def test_G33_an_OUT_that_is_a_file_is_one_line_and_nothing_runs(session, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    done = session(str(afile))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"run: {afile} exists and is not a folder"]
    assert session.calls() == [] and afile.read_text() == "x\n"
    one_line_error(cli("gpu-run", "--out", str(afile)), f"--out {afile}: exists and is not a folder")


def test_G34_a_relative_OUT_is_the_callers_folder(session, tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    done = session("relout", cwd=caller)
    assert done.returncode == 0, done.stdout + done.stderr
    [call] = session.calls()
    assert Path(_arg(call, "--archive")).parent == caller / "relout"
    assert (caller / "relout" / "gpu-run-20261127T000000Z.tar.gz").is_file()
    assert not (Path(call["cwd"]) / "relout").exists()  # not in the unpacked suite
    # and one named like an option
    dash = session("-n", cwd=caller)
    assert dash.returncode == 0 and (caller / "-n").is_dir(), dash.stderr


# --- gpu-run: stop signals -----------------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("DETCONF_H4_PIDFILE"), reason="the target of G27's tests step")
def test_G27_sleep_target():
    Path(os.environ["DETCONF_H4_PIDFILE"]).write_text(str(os.getpid()))
    time.sleep(120)


def pytest_runtest_call(item):
    """Loaded into a step's pytest with ``-p tests.test_hostile_round4_gpu`` (G28): each case
    sleeps, so that a signal finds the step running a case."""
    mark = os.environ.get("DETCONF_H4_SLOW_CALL")
    if mark:
        Path(mark).write_text(str(os.getpid()))
        time.sleep(120)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 150) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"gpu-run ended early ({proc.returncode}): {out[-2000:]} {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} never came")
        time.sleep(0.2)
    time.sleep(0.5)


def test_G27_sigterm_keeps_every_steps_record_and_leaves_no_step_running(tmp_path):
    """SIGTERM (a batch scheduler, ``timeout``) during the later tests step: the finished
    documented step's record, steps.json, COMMAND.md and the archive are there, the exit status
    is 143 with a line saying so, and the step's pytest is not left running."""
    out, pidfile = tmp_path / "gterm", tmp_path / "step.pid"
    env = {**warm.base_env(), "DETCONF_H4_PIDFILE": str(pidfile)}
    proc = warm.popen([sys.executable, "-m", "detconf", "gpu-run", "--steps", "documented,tests", "-n", "0",
                       "--device", "cpu", "--quiet", "--out", str(out), "--",
                       *collecting_only("test_hostile_round4_gpu.py"), "-k",
                       f"({ONE_CASE}) or G27_sleep_target", "--continue-on-collection-errors"],
                      cwd=ROOT, env=env, new_session=True)
    _wait_for(pidfile, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stdout + stderr
    assert "gpu-run: stopped by SIGTERM after" in stdout and "Traceback" not in stdout + stderr
    assert not running(int(pidfile.read_text())), "the tests step's pytest runs on"
    steps = steps_of(out)
    documented, tests = steps["documented"], steps["tests"]
    assert (documented["status"], documented["exit_status"]) == ("passed", 0) and documented["wall_s"] > 0
    assert documented["end_record"]["outcome"] == "complete"
    assert (tests["status"], tests["exit_status"]) == ("interrupted", 143)
    got = members(out / "gterm.tar.gz")
    assert {"steps.json", "COMMAND.md", "machine.json", "results/documented.jsonl", "logs/tests.log"} <= set(got)
    assert "state: stopped by SIGTERM after" in got["COMMAND.md"].decode()


def test_G28_ctrl_c_lets_the_steps_pytest_write_its_end_record_and_summary(tmp_path):
    """Ctrl-C to the process group while the documented step runs a case: pytest's own Ctrl-C
    handling is not cut off: its end record (outcome incomplete) and its summary are written."""
    out, mark = tmp_path / "gint", tmp_path / "case.pid"
    env = {**warm.base_env(), "DETCONF_H4_SLOW_CALL": str(mark)}
    proc = warm.popen([sys.executable, "-m", "detconf", "gpu-run", "--steps", "documented", "-n", "0",
                       "--device", "cpu", "--quiet", "--out", str(out), "--", "-k", ONE_CASE,
                       "-p", "tests.test_hostile_round4_gpu"],
                      cwd=ROOT, env=env, new_session=True)
    _wait_for(mark, proc)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    [step] = steps_of(out).values()
    assert (step["status"], step["exit_status"]) == ("interrupted", 130)
    end = step["end_record"]
    assert end is not None and end["outcome"] == "incomplete" and end["exitstatus"] == 2, end
    log = (out / "logs" / "documented.log").read_text()
    assert "KeyboardInterrupt" in log and re.search(r" in \d+\.\d+s", log), log[-1500:]
    assert not running(int(mark.read_text()))


# --- gpu-run: one output folder, one run -----------------------------------------------------------


def test_G30_a_second_run_into_the_same_OUT_refuses_instead_of_interleaving(tmp_path, monkeypatch, capsys):
    """The entry's race made certain: run B finds --out new, and before B writes anything run A
    (the real command) takes the folder and runs its step, which waits (a plugin of the test's)
    until B has answered: B must refuse in one line, and A's folder and archive hold A's run
    alone. (Without the wait A's one-case run could end before B looked, about 1 time in 10.)"""
    out = tmp_path / "gdup"
    started: list[subprocess.Popen] = []
    found_new = gpurun._out_dir
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "hold_probe.py").write_text(
        "import os, time\n"
        "def pytest_configure(config):\n"
        "    deadline = time.monotonic() + 120\n"
        "    while not os.path.exists(os.environ['HOLD_UNTIL']) and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n")
    released = tmp_path / "released"

    def race(text, root, checkout):
        path = found_new(text, root, checkout)  # B: "new or empty"
        a = warm.popen([sys.executable, "-m", "detconf", "gpu-run", "--steps", "documented", "-n", "0",
                        "--device", "cpu", "--quiet", "--out", str(out), "--", "-p", "hold_probe", "-k", ONE_CASE],
                       cwd=ROOT, env={**warm.base_env(), "PYTHONPATH": str(hold), "HOLD_UNTIL": str(released)})
        started.append(a)
        _wait_for(out / "console.log", a, 120)  # A has taken the folder
        return path

    monkeypatch.setattr(gpurun, "_out_dir", race)
    monkeypatch.setattr(gpurun, "probe", lambda root, env, timeout=None: json.loads(json.dumps(CANNED)))
    monkeypatch.setattr(gpurun, "pytest_command", lambda plan, args: [sys.executable, "-c", "print('B ran')"])
    req = tmp_path / "none.txt"
    req.write_text("")
    code = gpurun.main(["--steps", "documented", "--device", "cpu", "--quiet", "--out", str(out),
                        "--requirements", str(req), "--", "-k", "index_add"], root=ROOT)
    err = capsys.readouterr().err
    released.touch()
    [a] = started
    a_out, a_err = a.communicate(timeout=300)
    assert code == 2, err
    [line] = err.splitlines()
    assert line.startswith(f"detconf gpu-run: error: --out {out}: another gpu-run (pid {a.pid}) is writing into it")
    assert a.returncode == 0, a_out[-2000:] + a_err[-2000:]
    got = members(out / "gdup.tar.gz")
    machine, steps = json.loads(got["machine.json"]), json.loads(got["steps.json"])
    assert machine["command"][-2:] == ["-k", ONE_CASE] and steps[0]["command"][-2:] == ["-k", ONE_CASE]
    assert [(s["step"], s["status"]) for s in steps] == [("documented", "passed")]
    assert "index_add" not in got["console.log"].decode() and "B ran" not in got["logs/documented.log"].decode()
    assert not (out / gpurun.LOCK).exists() and gpurun.LOCK not in "".join(got)


def test_G12_a_full_disk_is_one_line_and_the_folder_takes_a_retry(tmp_path, monkeypatch, capsys):
    """No space left while machine.json is written (a 64 KiB tmpfs in the entry; here the write
    fails the same way after 4096 bytes): one line, exit status 1, no traceback, and the folder,
    which this run made, is not left half-written to refuse the retry."""
    monkeypatch.setattr(gpurun, "probe", lambda root, env, timeout=None: json.loads(json.dumps(CANNED)))
    monkeypatch.setattr(gpurun, "pytest_command", lambda plan, args: [sys.executable, "-c", "pass"])
    real = Path.write_text

    def full(self, data, *args, **kwargs):
        if self.name.startswith(".machine.json") and '"backends"' in data:
            real(self, data[:4096], *args, **kwargs)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    req = tmp_path / "none.txt"
    req.write_text("")
    out = tmp_path / "tfs" / "g"
    argv = ["--steps", "sweep", "--device", "cpu", "--quiet", "--out", str(out), "--requirements", str(req)]
    assert gpurun.main(argv, root=ROOT) == 1
    err = capsys.readouterr().err
    [line] = err.splitlines()
    assert line.startswith("detconf gpu-run: error: cannot write the output: ") and "machine.json" in line
    assert "No space left on device" in line and "Traceback" not in err
    assert not out.exists()
    monkeypatch.setattr(Path, "write_text", real)  # room again: the retry into the same folder runs
    gpurun.main(argv, root=ROOT)
    assert "not empty" not in capsys.readouterr().err
    assert [s["step"] for s in json.loads((out / "steps.json").read_text())] == ["sweep"]


# --- gpu-run: what a step's pytest was told --------------------------------------------------------


def test_G37_pytest_help_is_not_a_passed_step(tmp_path):
    out = tmp_path / "gxh"
    done = cli("gpu-run", "--steps", "documented,tests", "-n", "0", "--device", "cpu", "--quiet", "--out", str(out),
               "--", "--help")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "every step passed" not in done.stdout
    steps = steps_of(out)
    assert steps["documented"]["status"] == steps["tests"]["status"] == "tested-nothing", steps
    assert "documented: exit status 0 (tested-nothing)" in done.stdout
    assert "tests: exit status 0 (tested-nothing)" in done.stdout


def test_G38_collect_only_is_not_a_passed_step(tmp_path):
    out = tmp_path / "gxc"
    done = cli("gpu-run", "--steps", "documented,tests", "-n", "0", "--device", "cpu", "--quiet", "--out", str(out),
               "--", *collecting_only("test_hostile_round4_gpu.py"), "-k", ONE_CASE, "--co")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "every step passed" not in done.stdout
    steps = steps_of(out)
    assert steps["documented"]["status"] == "tested-nothing" and steps["documented"]["results"] is None
    assert steps["tests"]["status"] != "passed", steps["tests"]  # tested-nothing (failed where collection fails)
    if steps["tests"]["exit_status"] == 0:
        assert steps["tests"]["status"] == "tested-nothing" and steps["tests"]["junit"]["tests"] == 0


def test_G36_results_sent_outside_OUT_are_refused(tmp_path):
    elsewhere = tmp_path / "gx1" / "elsewhere.jsonl"
    for args, env in ((["--results", str(elsewhere)], PYTHON_ENV),
                      ([f"--results={elsewhere}"], PYTHON_ENV),
                      ([], {**PYTHON_ENV, "PYTEST_ADDOPTS": f"--results {elsewhere}"}),
                      (["--junitxml", str(tmp_path / "gx1" / "j.xml")], PYTHON_ENV)):
        done = cli("gpu-run", "--steps", "documented", "-n", "0", "--device", "cpu", "--out", str(tmp_path / "gxr"),
                   "--", "-k", "are_deterministic_algorithms_enabled", *args, env=env)
        one_line_error(done, "gpu-run names each step's results file inside --out")
        assert not (tmp_path / "gx1").exists() and not (tmp_path / "gxr").exists()


# --- gpu-run: the files it reads ------------------------------------------------------------------


def _limited(seconds: int = 60):
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (2_000_000_000, 2_000_000_000))
    return limit


def test_G41_a_requirements_include_that_is_a_device_a_fifo_or_huge_is_one_line(tmp_path):
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(wheels.MAX_LIST_BYTES + 1)  # sparse: no disk spent
    cases = {"-r /dev/zero\n": "-r include /dev/zero: not a regular file (a character device)",
             f"-r {fifo}\n": f"-r include {fifo}: not a regular file (a FIFO)",
             f"--requirement={big}\n": f"-r include {big}: {wheels.MAX_LIST_BYTES + 1} bytes, more than"}
    for number, (text, needle) in enumerate(cases.items()):
        req = tmp_path / f"req{number}.txt"
        req.write_text(text)
        done = subprocess.run([sys.executable, "-m", "detconf", "gpu-run", "--check", "--requirements", str(req)],
                              cwd=ROOT, env=PYTHON_ENV, capture_output=True, text=True, timeout=60,
                              preexec_fn=_limited())
        one_line_error(done, needle)
    for path, needle in ((Path("/dev/zero"), "a character device"), (fifo, "a FIFO")):  # given directly
        done = subprocess.run([sys.executable, "-m", "detconf", "gpu-run", "--check", "--requirements", str(path)],
                              cwd=ROOT, env=PYTHON_ENV, capture_output=True, text=True, timeout=60,
                              preexec_fn=_limited())
        one_line_error(done, f"requirements file {path}: not a regular file ({needle})")
    # gpu-pack reads its --have list the same way
    done = cli("gpu-pack", "--have", str(fifo), "--out", str(tmp_path / "pack"), timeout=60)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"detconf gpu-pack: error: --have {fifo}: not a regular file (a FIFO)"], done.stderr


def test_G24_a_fifo_in_the_wheel_folder_is_refused_not_waited_on(tmp_path):
    folder = tmp_path / "wh" / "fifo"
    folder.mkdir(parents=True)
    fifo = folder / f"{PKG.replace('-', '_')}-1.0-py3-none-any.whl"
    os.mkfifo(fifo)
    req = tmp_path / "wh" / "req.txt"
    req.write_text(f"{PKG}>=1.0\n")
    done = cli("gpu-run", "--check", "--requirements", str(req), "--wheels", str(folder), timeout=60)
    one_line_error(done, f"--wheels {fifo}: not a regular file (a FIFO)")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# --- gpu-run: what the requirements check says ---------------------------------------------------


def test_G45_the_recheck_after_an_install_names_requirements_not_display_lines(tmp_path):
    """The wheel installs (pip --target puts it where this Python does not look), so the fresh
    interpreter's re-check still misses it: its report names the requirement as it is (no
    "(required by )"), says it was installed and is not seen, and asks for no --wheels DIR."""
    valid = tmp_path / "wh" / "valid3"
    make_wheel(valid, PKG, "1.0")
    req = tmp_path / "wh" / "req.txt"
    req.write_text(f"{PKG}>=1.0\n")
    target = tmp_path / "wh" / "tgt"
    done = cli("gpu-run", "--check", "--requirements", str(req), "--wheels", str(valid),
               f"--pip-option=--target={target}", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(target.glob("*.dist-info")), "pip did not install"  # the install itself went through
    text = done.stdout
    assert "(required by )" not in text and "run again with --wheels DIR" not in text, text
    assert "not seen by a fresh interpreter" in text and "--target" in text
    assert f"  {PKG}>=1.0  (required by req.txt)" in text.splitlines()
    assert text.splitlines()[-1] == "gpu-run: still missing after the install"
    for line in text.splitlines():
        if "pip download" in line:
            assert "required by" not in line, line


def test_G44_a_wheel_that_needs_another_torch_is_a_conflict_not_a_torch_to_fetch(tmp_path):
    import importlib.metadata

    torch_version = importlib.metadata.version("torch")
    valid = tmp_path / "wh" / "valid2"
    make_wheel(valid, PKG, "1.0", requires=("torch<1.0",))
    req = tmp_path / "wh" / "req.txt"
    req.write_text(f"{PKG}>=1.0\n")
    done = cli("gpu-run", "--check", "--requirements", str(req), "--wheels", str(valid), timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    text = done.stdout
    assert (f"gpu-run: conflict: {PKG} 1.0 (from the wheel folder) requires torch<1.0, but this machine's torch is "
            f"{torch_version} (gpu-run never installs or changes torch)") in text.splitlines(), text
    assert "pip download" not in text and "no wheel of it in the folder" not in text
    assert "  torch<1.0" not in text and "installing" not in text


def test_G25_the_download_hint_asks_for_wheels_that_an_index_has(monkeypatch):
    """packaging 26.4 lists ``cp311-cp311-linux_x86_64`` first; PyPI holds no ``linux_*``
    wheels: the hint asks for the manylinux tags (even where sys_tags() lists none) and never for
    ``linux_x86_64``, and the tag it shows is a manylinux one."""
    import platform

    from packaging.tags import Tag

    libc, version = platform.libc_ver()
    if not (sys.platform == "linux" and platform.machine() == "x86_64" and libc == "glibc"):
        pytest.skip("a glibc x86_64 Linux")
    real = [t for t in wheels.sys_tags()]
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    linux = Tag(cp, cp, "linux_x86_64")
    for tags in ([linux, *[t for t in real if t != linux]],  # linux_x86_64 first (packaging 26.4)
                 [linux, Tag(cp, "abi3", "linux_x86_64"), Tag("py3", "none", "any")]):  # no manylinux at all
        monkeypatch.setattr(wheels, "sys_tags", lambda tags=tags: iter(tags))
        hint = wheels.pip_download_hint([wheels.Need("rpds-py>=0.7", "test")]).split()
        platforms = [hint[i + 1] for i, word in enumerate(hint) if word == "--platform"]
        assert "linux_x86_64" not in platforms, platforms
        assert platforms[0].startswith("manylinux_") and "manylinux_2_17_x86_64" in platforms, platforms
        assert hint[hint.index("--abi") + 1] == cp
        assert not wheels.interpreter_tag().endswith("linux_x86_64")


def test_G10_check_looks_at_the_device(tmp_path):
    for device in ("CPU", "nonsense"):
        one_line_error(cli("gpu-run", "--device", device, "--check", timeout=120),
                       f"unknown device {device!r}; known: cpu")
    done = cli("gpu-run", "--device", "cpu", "--check", timeout=120)
    assert done.returncode == 0 and "gpu-run: available: cpu" in done.stdout, done.stdout + done.stderr
