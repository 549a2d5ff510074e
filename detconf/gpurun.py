"""``detconf gpu-run``: the whole suite on a GPU machine in one command, offline, inside a budget.

A GPU runner usually has its own torch, many other packages and no network; a lent GPU has a few
minutes. This command

1. checks the suite's requirements (``requirements-base.txt``; the distributions they need in
   turn) against the installed distributions (:mod:`detconf.wheels`; torch only as a
   distribution, never imported here) and says exactly which wheels to bring; with ``--wheels
   DIR`` it installs them from that folder into the running interpreter, offline;
2. describes the machine (a child python imports torch) and refuses a device torch cannot see:
   ``--device cuda`` on a machine whose torch sees no GPU is one line naming torch's CUDA build
   and the driver, before any step spends the window;
3. runs the steps in this order, each a subprocess from the suite's root, with a progress line at
   each start and end (step, time, wall seconds, exit status):

   ``probes``      independent plain-torch checks (``scripts/gpu_probes.py``) on the GPU: quick,
                   and what the suite's CUDA verdicts rest on, so they run first
   ``documented``  the default sources in modes error, warn_only and off
   ``compiled``    torch-docs under Inductor, modes error and warn_only
   ``sweep``       torch's OpInfo database, mode error
   ``stress``      the stress tier (Hypothesis profile ``stress``) over torch-docs, three modes
   ``speed``       ``benchmarks/bench_alert_tests.py``: torch-docs at ``-n 0`` against PyTorch's
                   own alert tests (``--alert-tests``, a ``test_torch.py`` of the installed release)
   ``tests``       the harness's own tests

   With ``--budget SECONDS`` the whole command ends within that time (plus the few seconds a
   stopped step and the last archive take): a step starts only when at least its minimum is left
   (else it is skipped with a line saying what was left and what it needs), and a running step is
   interrupted when the budget runs out (its pytest gets SIGINT and writes its end record, then the
   process group is killed) and recorded as ``cut``;
4. writes everything under ``--out``: ``results/`` (one results file per step, each with its
   ``<name>-report/`` matrix), ``logs/`` (each step's output), ``console.log`` (every line this
   command printed), ``requirements.json`` (what was checked, installed or is missing, and the
   ``pip download`` that fetches it), ``machine.json`` (GPU model, driver, CUDA, cuDNN, torch,
   math modes, CPUs, Python, platform, the suite's revision), ``steps.json`` and ``COMMAND.md``,
   and one archive of all of it (``--archive``; default ``<out>/<out name>.tar.gz``). The records
   and the archive are rewritten after every step and when a SIGTERM, SIGINT or SIGHUP arrives,
   so a run stopped at any point leaves them complete. The folder is held by a lock file
   (:data:`LOCK`) for the run's life: a second gpu-run into it refuses; an ``--archive`` that
   exists is refused. A step's own pytest arguments may not name ``--results`` or ``--junitxml``
   (:data:`OWN_OPTIONS`). With ``--scratch DIR`` (the pack's run script: the unpacked suite and
   ``--out`` in DIR, the archive outside) DIR is removed when the run ends, once the archive holds
   every file of ``--out`` (:class:`Scratch`).

Exit status: 0 every step passed (or was skipped); 1 a step failed, was cut by the budget or
tested nothing (a pytest step without a complete results file, or the tests step with no test
run in its JUnit report: ``-- --help``, ``-- --co``), requirements are missing or conflict with
the machine's torch, or the output cannot be written (one line: a full disk); 2 bad input (one
line on stderr); 128+N when stopped by signal N.

This module imports neither torch nor the suite's engine: what it needs to know about torch and
the devices it asks a child ``python -c`` (:data:`PROBE`).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from detconf import wheels as _wheels
from detconf.child import pid_alive
from detconf.revision import revision
from detconf.wheels import (
    BadInput, check, interpreter_tag, python_tag, read_requirements, regular_file, suite_requirements,
)

PROG = "detconf gpu-run"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
#: Environment variables of an enclosing pytest (xdist) that must not reach the steps' pytest.
_ENCLOSING_PYTEST = ("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")
#: Seconds of a budget kept for the end: the last records and the archive.
RESERVE_S = 5.0
#: Seconds a step cut by the budget gets to write its end record before its process group is killed.
GRACE_S = 3.0
#: Seconds a step stopped by a signal gets for the same (pytest's own Ctrl-C handling: its end
#: record, its summary); a second signal ends the wait at once.
STOP_GRACE_S = 10.0
#: The file that marks an output folder as taken by a running gpu-run (removed when it ends).
LOCK = ".gpu-run.lock"
#: The file the pack's run script puts into the folder it unpacks the suite into: only a folder
#: holding it may be named by ``--scratch`` (removed when the run ends).
SCRATCH_MARK = ".detconf-gpu-scratch"
#: pytest options the steps' own arguments (after ``--``, or in PYTEST_ADDOPTS) may not carry:
#: gpu-run names each step's results file (and the tests step's JUnit report) inside --out, so
#: that nothing goes elsewhere and each step is judged by what it wrote.
OWN_OPTIONS = ("--results", "--junitxml", "--junit-xml")
#: The smallest budget that can do anything (the machine's description alone imports torch).
MIN_BUDGET_S = 20
#: The signals that stop a run with its records written.
STOP_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGINT", "SIGHUP")) if s is not None)


class Stopped(BaseException):
    """A stop signal arrived (raised by the handler in the main thread)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class OutputError(Exception):
    """The output folder (or the archive) cannot be written: a full disk, a quota. One line."""


#: Set by a second stop signal: the stopped step's grace ends at once.
HURRY = threading.Event()


# ----------------------------------------------------------------------------- console


class Console:
    """Where :func:`say` writes: the terminal, and ``console.log`` once the output folder exists.
    A write that fails (a full disk, a closed terminal) ends that sink, never the command."""

    sink = None  # an open text file
    failed: str | None = None  # why console.log stopped

    @classmethod
    def open(cls, path: Path) -> None:
        try:
            cls.sink = open(path, "a", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"{path}: {exc.strerror or exc}") from None

    @classmethod
    def log(cls, text: str) -> None:
        if cls.sink is None:
            return
        try:
            cls.sink.write(text)
            cls.sink.flush()
        except (OSError, ValueError) as exc:
            cls.failed = getattr(exc, "strerror", None) or str(exc)
            cls.close()

    @classmethod
    def close(cls) -> None:
        sink, cls.sink = cls.sink, None
        if sink is not None:
            try:
                sink.close()
            except OSError:
                pass


def _stdout_gone() -> None:
    """Our standard output is a closed pipe (``| head``): the rest goes to console.log only."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def show(line: str) -> None:
    try:
        print(line, flush=True)
    except (OSError, ValueError):
        _stdout_gone()
    Console.log(line + "\n")


def say(message: str) -> None:
    show(f"gpu-run: {message}")


class Clock:
    """The command's budget: seconds left until its end, less what the end needs."""

    def __init__(self, budget: float | None, start: float | None = None):
        self.budget = budget
        self.start = time.monotonic() if start is None else start

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float | None:
        """Seconds a step may still use (``None``: no budget)."""
        if self.budget is None:
            return None
        return max(0.0, self.budget - RESERVE_S - self.elapsed())


# ----------------------------------------------------------------------------- machine


#: Run as ``python -c`` from the suite's root: describes torch, the GPUs and the suite's view of
#: every device (``engine.devices``), and the math modes (``engine.mathmode.describe``) where
#: the suite has them; prints one line, ``DETCONF_PROBE <json>``. Each part that fails is
#: recorded as an error, never fatal.
PROBE = r'''
import json, subprocess, sys
info = {"errors": {}}
def part(name, fn):
    try:
        info[name] = fn()
    except BaseException as exc:
        info["errors"][name] = f"{type(exc).__name__}: {exc}"
def describe_torch():
    import torch
    cudnn = torch.backends.cudnn
    return {"version": torch.__version__, "git": getattr(torch.version, "git_version", None),
            "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
            "cudnn": cudnn.version() if cudnn.is_available() else None,
            "cuda_available": bool(torch.cuda.is_available()), "file": torch.__file__}
def gpus():
    import torch
    out = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                        "memory_gib": round(p.total_memory / 2**30, 1),
                        "multiprocessors": getattr(p, "multi_processor_count", None)})
    return out
def nvidia_smi():
    import shutil
    if shutil.which("nvidia-smi") is None:
        return None
    run = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    return run.stdout.strip().splitlines() if run.returncode == 0 else None
def driver():
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            return fh.readline().strip() or None
    except OSError:
        return None
def backends():
    from detconf.engine.devices import backends
    return {name: b.describe() for name, b in sorted(backends().items())}
part("torch", describe_torch)
part("gpus", gpus)
part("nvidia_smi", nvidia_smi)
part("driver", driver)
part("backends", backends)
def math_mode():
    from detconf.engine import mathmode
    available = [n for n, d in (info.get("backends") or {}).items() if d.get("available")] or ["cpu"]
    return {"describe": {n: mathmode.describe(n) for n in available}, "settings": mathmode.capture()}
part("math_mode", math_mode)
if "math_mode" not in info:
    def legacy():
        import torch
        return {"settings": {"cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                             "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                             "float32_matmul_precision": torch.get_float32_matmul_precision()}}
    part("math_mode_fallback", legacy)
sys.stdout.write("\nDETCONF_PROBE " + json.dumps(info, default=str, sort_keys=True) + "\n")
'''


def probe(root: Path, env: dict, timeout: float | None = None) -> dict:
    """The machine as the child sees it (:data:`PROBE`)."""
    try:
        run = subprocess.run([sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True,
                             env=env, timeout=600 if timeout is None else max(1.0, timeout))
    except (OSError, subprocess.SubprocessError) as exc:
        return {"errors": {"probe": f"{type(exc).__name__}: {exc}"}}
    for line in reversed(run.stdout.splitlines()):
        if line.startswith("DETCONF_PROBE "):
            return json.loads(line[len("DETCONF_PROBE "):])
    tail = " ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
    return {"errors": {"probe": f"exit status {run.returncode}: {tail[-500:]}"}}


def host() -> dict:
    """What the parent knows without torch: CPUs, Python, platform."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {"cpu_count": os.cpu_count(), "cpus_usable": usable, "cpu_model": _cpu_model(),
            "python": platform.python_version(), "python_implementation": platform.python_implementation(),
            "python_tag": python_tag(), "interpreter_tag": interpreter_tag(), "executable": sys.executable,
            "platform": platform.platform(), "machine": platform.machine()}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_line(machine: dict) -> str:
    """One line: GPUs, driver, CUDA, cuDNN, torch, Python, CPUs, platform."""
    torch = machine.get("torch") or {}
    gpus = machine.get("gpus") or []
    names = sorted({g["name"] for g in gpus})
    gpu = ", ".join(f"{n} ×{sum(g['name'] == n for g in gpus)}" for n in names) or "no CUDA GPU"
    cuda = (machine.get("backends") or {}).get("cuda") or {}
    versions = cuda.get("versions") or {}
    parts = [gpu]
    if versions.get("driver"):
        parts.append(f"driver {versions['driver']}")
    if torch.get("cuda"):
        parts.append(f"CUDA {torch['cuda']}")
    if torch.get("cudnn"):
        parts.append(f"cuDNN {torch['cudnn']}")
    if torch.get("version"):
        parts.append(f"torch {torch['version']}" + (f" (git {str(torch.get('git'))[:12]})" if torch.get("git") else ""))
    h = machine.get("host") or {}
    parts.append(f"Python {h.get('python')} ({h.get('python_tag')})")
    parts.append(f"{h.get('cpus_usable') or h.get('cpu_count')} CPUs")
    parts.append(str(h.get("platform")))
    return ", ".join(parts)


def no_gpu_line(name: str, machine: dict) -> str:
    """Why ``name`` cannot run here, in one line naming torch's build and the driver."""
    torch = machine.get("torch") or {}
    if not torch:
        error = (machine.get("errors") or {}).get("torch", "unknown error")
        return f"device {name!r} is not available here: torch cannot be imported ({' '.join(str(error).split())[:200]})"
    version = torch.get("version")
    if name == "cuda":
        build = (f"a CUDA {torch['cuda']} build" if torch.get("cuda") else
                 f"a ROCm {torch['hip']} build" if torch.get("hip") else "a CPU-only build (torch.version.cuda is None)")
        smi = machine.get("nvidia_smi") or []
        driver = machine.get("driver")
        if smi:
            seen = f"nvidia-smi sees {'; '.join(smi)[:200]}"
        elif driver:
            seen = f"driver: {driver[:160]}"
        else:
            seen = "no NVIDIA driver found (no /proc/driver/nvidia/version, no working nvidia-smi)"
        return f"device 'cuda' is not available here: torch {version} is {build} and sees no GPU; {seen}"
    return f"device {name!r} is not available here (torch {version})"


# ----------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Step:
    name: str
    letter: str
    what: str
    args: Callable[["Plan"], list[str]]  # the command after the interpreter (a pytest's arguments, or a script's)
    kind: str = "pytest"  # "pytest": python -m pytest ARGS; "script": python ARGS
    results: bool = True  # writes a results file results/<name>.jsonl
    min_s: float = 30.0  # not started with less left of the budget
    # Wall seconds of the whole step on an H100 (16 cores, -n auto: the first run, 9552a5d, and the
    # session of 2026-11-27), for the skip line; None where no GPU run has timed the whole step.
    typical_s: float | None = None
    needs: Callable[["Plan"], str | None] = lambda plan: None  # why it cannot run here (None: it can)


def _conformance(*extra: str, profile: str = "ci", with_cpu: bool = False) -> Callable[["Plan"], list[str]]:
    """A conformance step's pytest arguments; ``with_cpu``: the CPU too, beside a GPU (the
    documented step: the machine's CPU rows are the positive control of the same run)."""
    def args(plan: "Plan") -> list[str]:
        chosen = list(plan.devices) + (["cpu"] if with_cpu and "cpu" not in plan.devices else [])
        devices = [a for d in chosen for a in ("--device", d)]
        return ["conformance", "-n", plan.workers, "--hypothesis-profile", profile, *devices, *extra]
    return args


def _gpu(plan: "Plan") -> str | None:
    """The device the GPU-only steps use: the first one asked for that is not the CPU."""
    return next((d for d in plan.devices if d != "cpu"), None)


def _needs_probes(plan: "Plan") -> str | None:
    if _gpu(plan) is None:
        return "the probes are for a GPU: no device but the CPU here"
    if not (plan.root / "scripts" / "gpu_probes.py").is_file():
        return "scripts/gpu_probes.py is not here (an installed suite; run from a checkout or a pack)"
    return None


def _needs_stress(plan: "Plan") -> str | None:
    return None if has_stress(plan) else "not available: no Hypothesis profile 'stress'"


def _needs_speed(plan: "Plan") -> str | None:
    if _gpu(plan) is None:
        return "the speed comparison is for a GPU: no device but the CPU here"
    if plan.alert_tests is None:
        return "no --alert-tests FILE (PyTorch's test_torch.py of the installed release)"
    if not (plan.root / "benchmarks" / "bench_alert_tests.py").is_file():
        return "benchmarks/bench_alert_tests.py is not here (an installed suite)"
    return None


def _needs_tests(plan: "Plan") -> str | None:
    return None if (plan.root / "tests").is_dir() else "no tests folder (an installed suite; run it from a checkout)"


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("probes", "p", "independent plain-torch checks on the GPU (scripts/gpu_probes.py)",
         lambda plan: [str(plan.root / "scripts" / "gpu_probes.py"), "--device", _gpu(plan) or "cuda",
                       "--json", str(plan.out / "probes.json")],
         kind="script", results=False, min_s=10, typical_s=30, needs=_needs_probes),
    Step("documented", "a", "the documented sources in modes error, warn_only and off, on the devices and the CPU",
         _conformance("--mode", "error", "--mode", "warn_only", "--mode", "off", with_cpu=True), min_s=45,
         typical_s=130),
    Step("compiled", "b", "torch-docs compiled with Inductor, modes error and warn_only",
         _conformance("--compile", "inductor", "--source", "torch-docs", "--mode", "error", "--mode", "warn_only"),
         min_s=30, typical_s=52),
    Step("sweep", "c", "the OpInfo sweep, mode error", _conformance("--source", "sweep", "--mode", "error"),
         min_s=30, typical_s=58),
    # The H100's stress steps were cut (61 of 214 cells in 81 s; 54 of its 56 mode-off cells in 97 s).
    Step("stress", "d", "the stress tier over torch-docs, modes off (its cases first), error and warn_only",
         _conformance("--source", "torch-docs", "--mode", "error", "--mode", "warn_only", "--mode", "off",
                      profile="stress"), min_s=30, needs=_needs_stress),
    Step("speed", "s", "torch-docs at -n 0 against PyTorch's own alert tests, same machine "
         "(benchmarks/bench_alert_tests.py)",
         lambda plan: [str(plan.root / "benchmarks" / "bench_alert_tests.py"), str(plan.alert_tests),
                       "--device", _gpu(plan) or "cuda", "--repeat", "1"],
         kind="script", results=False, min_s=45, typical_s=70, needs=_needs_speed),
    Step("tests", "e", "the harness's own tests",
         lambda plan: ["tests", "-n", plan.workers, "-p", "no:cacheprovider"], results=False, min_s=60,
         typical_s=225, needs=_needs_tests),
    Step("beyond", "f", "the promises beyond the docstring that need a GPU's compiled code: batch invariance "
         "(Triton reads batch_invariant) and flex attention, eager and Inductor, modes error and off",
         _conformance("--source", "batch-invariance", "--source", "flex-attention", "--compile", "eager",
                      "--compile", "inductor", "--mode", "error", "--mode", "off"),
         min_s=45),
    Step("perturb", "r", "the perturbation tier over torch-docs on the devices, modes error, warn_only and off: "
         "each case in 2 fresh processes, memory scribbled before every run, a competing load on a GPU "
         "(docs/perturbation.md)",
         _conformance("--perturb", "--source", "torch-docs", "--mode", "error", "--mode", "warn_only", "--mode", "off"),
         min_s=45),
)}


@dataclass
class Plan:
    root: Path
    out: Path
    devices: list[str]
    workers: str
    steps: list[str]
    pytest_args: list[str]
    quiet: bool
    env: dict
    checkout: bool
    clock: Clock = field(default_factory=lambda: Clock(None))
    alert_tests: Path | None = None


@dataclass
class StepResult:
    step: str
    status: str  # passed, failed, skipped, cut (by the budget), interrupted (a signal), tested-nothing
    exit_status: int | None = None
    started: str | None = None
    wall_s: float | None = None
    command: list[str] | None = None
    log: str | None = None
    results: str | None = None
    report: str | None = None
    end_record: dict | None = None
    reason: str | None = None
    junit: dict | None = None  # a pytest step without a results file: its JUnit report's counts (tests, skipped, ...)


#: Statuses that make the command fail.
FAILING = ("failed", "cut", "interrupted", "tested-nothing")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pytest_command(plan: Plan, args: list[str]) -> list[str]:
    """``python -m pytest args`` as run from the suite's root; an installed suite (no checkout)
    gets absolute paths, its root as ``--rootdir`` and pytest's cache in the output folder."""
    if plan.checkout:
        return [sys.executable, "-m", "pytest", *args]
    first, rest = args[0], args[1:]
    return [sys.executable, "-m", "pytest", str(plan.root / first), "--rootdir", str(plan.root),
            "-o", f"cache_dir={plan.out / '.pytest_cache'}", *rest]


def has_stress(plan) -> bool:
    """Does the suite define the Hypothesis profile ``stress``? Its profiles are data in
    ``detconf/vocabulary.py`` (``HYPOTHESIS_PROFILES``; ``vocabulary.py`` beside ``conformance/``
    in an installed suite), or, in older suites, in ``conformance/profiles.py``."""
    for where in (("detconf", "vocabulary.py"), ("vocabulary.py",), ("conformance", "profiles.py")):
        try:
            text = plan.root.joinpath(*where).read_text(encoding="utf-8")
        except OSError:
            continue
        if re.search(r"""^\s*["']stress["']\s*:""", text, re.MULTILINE) is not None:
            return True
    return False


def _pump(stream, log: Path, quiet: bool) -> None:
    """A step's output to its log and (unless quiet) to ours, drained to the end whatever fails:
    a log that cannot be written (a full disk) or a closed terminal stops that copy only."""
    try:
        sink = open(log, "ab")
    except OSError:
        sink = None
    try:
        for line in iter(stream.readline, b""):
            if sink is not None:
                try:
                    sink.write(line)
                    sink.flush()
                except OSError:
                    sink = None
            if not quiet:
                try:
                    sys.stdout.buffer.write(line)
                    sys.stdout.flush()
                except (OSError, ValueError):
                    quiet = True
                    _stdout_gone()
    finally:
        if sink is not None:
            try:
                sink.close()
            except OSError:
                pass


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_child(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """Interrupt a step's process group (pytest writes its end record and its summary on SIGINT),
    give it ``grace`` seconds (less if :data:`HURRY` is set: a second stop signal), then kill
    what is left of the group."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGINT)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline and not HURRY.is_set():
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
    _signal_group(proc, signal.SIGKILL)  # what is left of the group: workers, their children
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL does not end
        pass


def run_bounded(command: list[str], cwd: Path, env: dict, log: Path, quiet: bool,
                timeout: float | None) -> tuple[int, bool]:
    """Run ``command`` in a process group of its own, its output (stdout and stderr together) to
    ``log`` and, unless quiet, to ours; stopped after ``timeout`` seconds. (exit status, cut?)"""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_child_setup)
    pump = threading.Thread(target=_pump, args=(proc.stdout, log, quiet), daemon=True)
    pump.start()
    cut = False
    try:
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            cut = True
            stop_child(proc)
            code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    except BaseException:  # a stop signal or an interrupt: the step's group goes with us, its records written
        stop_child(proc, STOP_GRACE_S)
        raise
    finally:
        pump.join(timeout=GRACE_S)
    if not cut:
        _signal_group(proc, signal.SIGKILL)  # workers a step left behind hold the GPU
    return code, cut


def _child_setup() -> None:
    """In a step's process, before its program: a process group of its own (stopped and killed
    as one), and SIGINT at its default, so that the SIGINT that stops it reaches pytest's own
    handling (its end record) even when this command was started with SIGINT ignored (``&`` in
    a script, nohup)."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _end_record(results: Path) -> dict | None:
    """The last end record of a results file (planned, written, outcome, exit status)."""
    end = None
    try:
        with open(results, "rb") as f:
            for line in f:
                if b'"record": "end"' in line or b'"record":"end"' in line:
                    try:
                        end = json.loads(line)
                    except ValueError:
                        pass
    except OSError:
        return None
    if not isinstance(end, dict):
        return None
    return {k: end.get(k) for k in ("planned", "written", "missing", "outcome", "exitstatus")}


def build_report(plan: Plan, results: Path) -> str | None:
    """The matrix folder beside a results file: the suite's own (``<results>-report/``), else
    built here with ``python -m detconf.reports build`` (bounded by the budget)."""
    folder = results.with_name(results.stem + "-report")
    if folder.is_dir() and any(folder.iterdir()):
        return str(folder.relative_to(plan.out))
    if not results.is_file():
        return None
    left = plan.clock.left()
    if left is not None and left < 5:
        say(f"no report for {results.name}: the budget is spent (build it later: python -m detconf.reports build {results})")
        return None
    try:
        code, cut = run_bounded([sys.executable, "-m", "detconf.reports", "build", str(results), "--out", str(folder), "--quiet"],
                                plan.root, plan.env, plan.out / "logs" / f"{results.stem}-report.log", True, left)
    except OSError as exc:
        say(f"could not build the report of {results.name}: {exc}")
        return None
    if code != 0 or cut:
        say(f"could not build the report of {results.name}" + (" within the budget" if cut else
                                                              f" (exit status {code}; logs/{results.stem}-report.log)"))
        return None
    return str(folder.relative_to(plan.out))


def skip(label: str, step: Step, reason: str) -> StepResult:
    say(f"{label}: skipped: {reason}")
    return StepResult(step.name, "skipped", reason=reason)


def run_step(plan: Plan, step: Step, number: int, total: int, on_start: Callable[[StepResult], None] = lambda r: None) -> StepResult:
    label = f"[{number}/{total}] {step.name}"
    why = step.needs(plan)
    if why is not None:
        return skip(label, step, why)
    left = plan.clock.left()
    if left is not None and left < step.min_s:
        typical = ("not yet timed whole on a GPU" if step.typical_s is None
                   else f"typically {step.typical_s:.0f} s on an H100 with 16 cores")
        return skip(label, step, f"{left:.0f} s of the budget left, the step needs at least {step.min_s:.0f} s "
                                 f"({typical})")
    args = step.args(plan)
    results = junit = None
    env = plan.env
    if step.results:
        results = plan.out / "results" / f"{step.name}.jsonl"
        args += ["--results", str(results)]
    if step.kind == "pytest":
        command = pytest_command(plan, args + plan.pytest_args)
        if not step.results:  # judged by pytest's own JUnit report (given through the environment, so
            # that the command line stays what the step asks for)
            junit = plan.out / "results" / f"{step.name}.xml"
            addopts = " ".join(filter(None, [env.get("PYTEST_ADDOPTS"), shlex.quote(f"--junitxml={junit}")]))
            env = {**env, "PYTEST_ADDOPTS": addopts}
    else:
        command = [sys.executable, *args]
    log = plan.out / "logs" / f"{step.name}.log"
    started = _now()
    budget = f" (at most {left:.0f} s)" if left is not None else ""
    say(f"{label}: start {started}{budget}: {shlex.join(['python', *command[1:]])}")
    result = StepResult(step.name, "running", None, started, None, ["python", *command[1:]],
                        str(log.relative_to(plan.out)))
    on_start(result)
    t0 = time.monotonic()
    try:
        code, cut = run_bounded(command, plan.root if plan.checkout else Path.cwd(), env, log, plan.quiet, left)
    except (Stopped, KeyboardInterrupt) as exc:
        result.status, result.exit_status = "interrupted", 128 + getattr(exc, "signum", signal.SIGINT)
        result.wall_s = round(time.monotonic() - t0, 1)
        _results_of(plan, result, results, report=False)
        say(f"{label}: interrupted after {result.wall_s:.1f} s")
        raise
    result.wall_s = round(time.monotonic() - t0, 1)
    result.exit_status = code
    result.status = "cut" if cut else "passed" if code == 0 else "failed"
    _results_of(plan, result, results, report=True)
    if junit is not None:
        result.junit = _junit_counts(junit)
    if result.status == "passed" and step.kind == "pytest" and step.results and not _tested(result.end_record):
        result.status = "tested-nothing"
        result.reason = "pytest exited 0 without a complete results file (nothing was judged)"
    elif result.status == "passed" and junit is not None and not _ran_tests(result.junit):
        result.status = "tested-nothing"
        result.reason = "pytest exited 0 and ran no test (its JUnit report is missing or counts none that ran)"
    what = {"cut": " (cut: the budget ran out)",
            "tested-nothing": " (tested nothing: " + ("no complete results file)" if results is not None
                                                      else "no test ran)")}
    say(f"{label}: exit status {code} ({result.status}) after {result.wall_s:.1f} s{what.get(result.status, '')}")
    return result


def _tested(end: dict | None) -> bool:
    return bool(end) and end.get("outcome") == "complete" and (end.get("written") or 0) > 0


def _junit_counts(path: Path) -> dict | None:
    """The counts of a JUnit report pytest wrote (``tests``, ``skipped``, ``failures``, ``errors``),
    summed over its test suites; None when there is none (``--help``) or it cannot be read."""
    import xml.etree.ElementTree as ET

    try:
        if path.stat().st_size > 64 << 20:
            return None
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {k: 0 for k in ("tests", "skipped", "failures", "errors")}
    for suite in suites:
        for key in counts:
            try:
                counts[key] += int(suite.get(key) or 0)
            except ValueError:
                return None
    return counts


def _ran_tests(counts: dict | None) -> bool:
    return bool(counts) and counts["tests"] - counts["skipped"] > 0


def _results_of(plan: Plan, result: StepResult, results: Path | None, *, report: bool) -> None:
    if results is None:
        return
    result.results = str(results.relative_to(plan.out)) if results.is_file() else None
    result.end_record = _end_record(results)
    if report:
        result.report = build_report(plan, results)


# ----------------------------------------------------------------------------- outputs


def command_md(argv: Sequence[str], machine: dict, steps: list[StepResult], installed: list[str],
               *, budget: float | None = None, state: str = "finished") -> str:
    suite = machine.get("suite") or {}
    commit = suite.get("commit") or "unknown"
    if suite.get("dirty"):
        commit += " (with changes: " + ", ".join((suite.get("changed") or [])[:10]) + ")"
    source = {"pack": " (from the pack's revision file)", "git": " (git checkout)"}.get(suite.get("revision_source"), "")
    lines = [
        f"# detconf gpu-run, {machine.get('date')}",
        "",
        f"- Command: `{shlex.join(['detconf', 'gpu-run', *argv])}` (run in `{machine.get('cwd')}`)",
        f"- Machine: {machine_line(machine)}",
        f"- Suite: {suite.get('describe') or 'revision unknown'}, commit {commit}{source}, at `{suite.get('root')}`",
        f"- Date: {machine.get('date')}",
        f"- Devices: {', '.join(machine.get('devices') or [])}",
        f"- Budget: {f'{budget:.0f} s' if budget is not None else 'none'}; state: {state}",
    ]
    if installed:
        lines.append(f"- Installed from the wheel folder: {', '.join(installed)}")
    lines += ["", "| step | command | started | wall | exit status | cases |", "|---|---|---|---|---|---|"]
    for s in steps:
        if s.status == "skipped":
            lines.append(f"| {s.step} | skipped: {s.reason} | | | | |")
            continue
        end = s.end_record or {}
        cases = (f"{end.get('written')} of {end.get('planned')} planned ({end.get('outcome')})"
                 if end.get("planned") is not None else "")
        command = shlex.join(s.command or []).replace("|", "\\|")
        wall = f"{s.wall_s:.1f} s" if s.wall_s is not None else "running"
        lines.append(f"| {s.step} | `{command}` | {s.started} | {wall} | {s.exit_status} ({s.status}) | {cases} |")
    lines += ["", "Files: `machine.json` (the machine in full), `steps.json` (the table above), `console.log` (what "
              "the command printed), `requirements.json`, `results/` (each step's results file and its `-report/` "
              "matrix), `logs/` (each step's output), `probes.json` (the probes' results).", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    """Write a file whole or not at all (a stop during the write leaves the last complete one; a
    full disk leaves no partial file and is an :class:`OutputError`)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        _unlink(partial)
        raise OutputError(f"{path}: {exc.strerror or exc}") from None


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _archived(out: Path, archive: Path) -> list[Path]:
    """What the archive of ``out`` holds: its files and folders but the archive itself, partial
    files, links, the lock and pytest's caches."""
    paths = []
    for path in sorted(out.rglob("*")):
        if path == archive or path.name.endswith(".partial") or path.is_symlink():
            continue
        if path.name == LOCK and path.parent == out:
            continue
        if not (path.is_file() or path.is_dir()) or ".pytest_cache" in path.relative_to(out).parts:
            continue
        paths.append(path)
    return paths


def write_archive(out: Path, archive: Path | None = None, held: dict[str, int] | None = None) -> Path:
    """Everything in the output folder, under the folder's name, as one ``.tar.gz`` (default
    ``<out>/<out name>.tar.gz``), replaced whole; an :class:`OutputError` when it cannot be.
    ``held``: filled with the size each file had as it went in, by its name in the archive."""
    archive = archive or out / f"{out.name}.tar.gz"
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial")
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
            for path in _archived(out, archive):
                tar.add(path, arcname=f"{out.name}/{path.relative_to(out)}", recursive=False)
            if held is not None:
                held.update((m.name, m.size) for m in tar.getmembers() if m.isfile())
        os.replace(partial, archive)
    except OSError as exc:
        _unlink(partial)
        raise OutputError(f"{getattr(exc, 'filename', None) or archive}: {exc.strerror or exc}") from None
    return archive


@dataclass
class Record:
    """What a run has written so far; :meth:`write` rewrites the records and the archive."""

    out: Path
    argv: list[str]
    archive: Path | None
    budget: float | None
    machine: dict = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)
    requirements: dict = field(default_factory=dict)
    state: str = "starting"

    def write(self, state: str | None = None) -> Path:
        if state is not None:
            self.state = state
        _write(self.out / "machine.json", json.dumps(self.machine, indent=2, sort_keys=True, default=str) + "\n")
        _write(self.out / "requirements.json", json.dumps(self.requirements, indent=2, default=str) + "\n")
        _write(self.out / "steps.json", json.dumps([s.__dict__ for s in self.steps], indent=2) + "\n")
        _write(self.out / "COMMAND.md", command_md(self.argv, self.machine, self.steps, self.installed,
                                                   budget=self.budget, state=self.state))
        return write_archive(self.out, self.archive)


# ----------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Run the whole suite on a GPU machine, offline, inside a budget; one archive "
                                       "of it all, rewritten after every step.",
                epilog="Arguments after `--` go to every step's pytest (e.g. -- -k put_). Exit status: 0 all passed, "
                       "1 a step failed, was cut by the budget or tested nothing, or requirements are missing, "
                       "2 bad input, 128+N stopped by signal N.")
    p.add_argument("--wheels", metavar="DIR", help="install what is missing from the wheels in DIR (no network)")
    p.add_argument("--check", action="store_true",
                   help="only check the requirements (and, with --wheels, install them); run no step")
    p.add_argument("--device", action="append", metavar="NAME",
                   help="device to run on (repeatable); refused in one line where torch cannot see it; "
                        "default: cuda where available, else cpu (said in a line)")
    p.add_argument("--steps", metavar="LIST", default=",".join(STEPS),
                   help=f"comma-separated steps out of {', '.join(STEPS)} (or their letters "
                        f"{', '.join(s.letter for s in STEPS.values())}); default: all")
    p.add_argument("--budget", metavar="SECONDS", help="end the whole command within this many seconds: a step "
                   "starts only when its minimum is left, a running step is cut when the time is up")
    p.add_argument("-n", dest="workers", metavar="N", default="auto", help="pytest-xdist workers per step (default auto)")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/out/gpu-run-<UTC time>/); new or empty")
    p.add_argument("--archive", metavar="FILE", help="where the archive goes (default <out>/<out name>.tar.gz)")
    p.add_argument("--alert-tests", metavar="FILE",
                   help="PyTorch's test_torch.py of the installed release, for the speed step")
    p.add_argument("--requirements", metavar="FILE",
                   help="requirements to check instead of the suite's requirements-base.txt")
    p.add_argument("--pip-option", action="append", default=[], metavar="OPT",
                   help="passed to pip install (repeatable), e.g. --pip-option=--user")
    p.add_argument("--quiet", action="store_true", help="steps' output to logs/ only, not to the terminal")
    p.add_argument("--scratch", metavar="DIR",
                   help=f"a folder the pack's run script made (it holds {SCRATCH_MARK}), --archive outside it: "
                        "removed when the run ends, once the archive holds every file of an --out inside it "
                        "(kept, with a line, when it does not)")
    return p


def _steps(text: str) -> list[str]:
    letters = {s.letter: s.name for s in STEPS.values()}
    chosen: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        name = letters.get(word, word)
        if name not in STEPS:
            raise BadInput(f"unknown step {word[:40]!r}; steps: {', '.join(STEPS)} "
                           f"(or {', '.join(s.letter for s in STEPS.values())})")
        if name not in chosen:
            chosen.append(name)
    return [name for name in STEPS if name in chosen]  # always in the documented order


def _workers(text: str) -> str:
    if text in ("auto", "logical") or re.fullmatch(r"\d{1,4}", text):
        return text
    raise BadInput(f"-n {text[:40]!r}: a number of workers, or auto")


def _budget(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"--budget {text[:40]!r}: a number of seconds") from None
    if not value >= MIN_BUDGET_S or value > 7 * 86400:
        raise BadInput(f"--budget {text[:40]!r}: between {MIN_BUDGET_S} seconds and a week")
    return value


def _out_dir(text: str | None, root: Path, checkout: bool) -> Path:
    if text is None:
        base = (root if checkout else Path.cwd()) / "reports" / "out"
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = base / f"gpu-run-{stamp}"
        number = 1
        while out.exists() or out.is_symlink():  # a run started in the same second: a folder of its own
            number += 1
            out = base / f"gpu-run-{stamp}-{number}"
        _creatable(out, "--out", str(out))
        return out
    out = Path(text).absolute()
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise BadInput(f"--out {text}: exists and is not a folder")
        if any(out.iterdir()):
            holder = _holder(out)
            if holder is not None:
                raise BadInput(f"--out {text}: another gpu-run (pid {holder}) is writing into it; give each run "
                               "a folder of its own")
            raise BadInput(f"--out {text}: the folder is not empty (each run gets a folder of its own: "
                           "give a new one, or leave --out out for reports/out/gpu-run-<UTC time>/)")
    _creatable(out, "--out", text)
    return out


def _creatable(path: Path, option: str, text: str) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                raise BadInput(f"{option} {text}: cannot create it in {parent}")
            return


def _archive_path(text: str | None) -> Path | None:
    if text is None:
        return None
    path = Path(text).absolute()
    if not path.name.endswith((".tar.gz", ".tgz")):
        raise BadInput(f"--archive {text}: name it *.tar.gz")
    if path.exists() or path.is_symlink():
        raise BadInput(f"--archive {text}: exists (each run writes an archive of its own: give a new name)")
    _creatable(path, "--archive", text)
    return path


def _holder(out: Path) -> int | None:
    """The pid of the live gpu-run whose lock is in ``out``, if any."""
    try:
        pid = int((out / LOCK).read_text(encoding="ascii", errors="replace").strip()[:20] or 0)
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and pid != os.getpid() and pid_alive(pid) else None


@dataclass
class Claim:
    """An output folder (and an explicit archive path) taken by this run alone: a lock file made
    with O_EXCL in the folder, the archive's name made the same way, so that a second gpu-run
    into the same --out (or onto the same --archive) refuses instead of interleaving its files
    with this one's."""

    out: Path
    archive: Path | None
    made_out: bool
    holds_archive: bool = False

    @classmethod
    def take(cls, out: Path, archive: Path | None, text: str) -> "Claim":
        made = not (out.exists() or out.is_symlink())
        try:
            out.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise BadInput(f"--out {text}: exists and is not a folder") from None
        except OSError as exc:
            raise BadInput(f"--out {text}: cannot create it ({exc.strerror or exc})") from None
        lock = out / LOCK
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pid = _holder(out)
            if pid is not None:
                raise BadInput(f"--out {text}: another gpu-run (pid {pid}) is writing into it; give each run "
                               "a folder of its own") from None
            raise BadInput(f"--out {text}: the folder is not empty (each run gets a folder of its own)") from None
        except OSError as exc:
            raise BadInput(f"--out {text}: cannot write into it ({exc.strerror or exc})") from None
        claim = cls(out, archive, made)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # an empty lock still holds the folder
        finally:
            os.close(fd)
        if any(p.name != LOCK for p in out.iterdir()):  # another run came and went between the checks
            claim.release()
            raise BadInput(f"--out {text}: the folder is not empty (each run gets a folder of its own)")
        if archive is not None:
            try:
                os.close(os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:
                claim.release()
                raise BadInput(f"--archive {archive}: exists (each run writes an archive of its own: give a new "
                               "name)") from None
            except OSError as exc:
                claim.release()
                raise BadInput(f"--archive {archive}: cannot create it ({exc.strerror or exc})") from None
            claim.holds_archive = True
        return claim

    def release(self) -> None:
        _unlink(self.out / LOCK)
        if self.holds_archive and self.archive is not None:
            try:  # a reservation never written (the run ended before its first archive)
                if self.archive.stat().st_size == 0:
                    self.archive.unlink()
            except OSError:
                pass

    def discard(self) -> None:
        """Remove everything this run wrote (the folder was new or empty at its start)."""
        for path in list(self.out.iterdir()) if self.out.is_dir() else []:
            if path.name == LOCK:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                _unlink(path)
        if self.holds_archive and self.archive is not None:
            _unlink(self.archive)
            self.holds_archive = False
        _unlink(self.out / LOCK)
        if self.made_out:
            try:
                self.out.rmdir()
            except OSError:
                pass


class Scratch:
    """``--scratch DIR``: the folder the pack's run script made for this session (it holds
    :data:`SCRATCH_MARK`, the unpacked suite and, unless the caller named another, ``--out``; the
    archive is written outside it).
    When the run ends the folder is removed if nothing of the run would go with it: ``--out``
    holds nothing of the run, or the archive, brought up to date once more (the lines said after
    the last records), holds every file of ``--out`` at its size. Else it is kept, with a line
    saying where and why (a full disk: the run's files are there and nowhere else)."""

    def __init__(self, folder: Path | None, text: str | None = None):
        self.folder, self.text = folder, text
        self.out: Path | None = None
        self.archive: Path | None = None

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> "Scratch":
        """Read before the other options, so that a run refused for any of them still leaves:
        only the option written in full (``--scratch DIR``, ``--scratch=DIR``)."""
        own = list(argv[:list(argv).index("--")]) if "--" in argv else list(argv)
        text = None
        for i, word in enumerate(own):
            if word == "--scratch":
                if i + 1 >= len(own):
                    raise BadInput("argument --scratch: expected one argument")
                text = own[i + 1]
            elif word.startswith("--scratch="):
                text = word.split("=", 1)[1]
        if text is None:
            return cls(None)
        folder = Path(text).absolute()
        if not folder.is_dir() or folder.is_symlink() or not (folder / SCRATCH_MARK).is_file():
            raise BadInput(f"--scratch {text}: not a folder the pack's run script made (it holds {SCRATCH_MARK}); "
                           "gpu-run removes only such a folder")
        return cls(folder, text)

    def spelled(self, args: argparse.Namespace) -> None:
        """Bad input where the parser took an abbreviation of the option (never removed)."""
        if self.folder is None and args.scratch is not None:
            raise BadInput("--scratch: write the option in full (--scratch DIR)")

    def take(self, out: Path, archive: Path | None) -> None:
        """The run's --out (inside the folder or not) and --archive (outside it, else bad input,
        and the folder is left as it is)."""
        if self.folder is None:
            return
        folder, self.folder = self.folder, None
        if archive is None or archive.resolve().is_relative_to(folder.resolve()):
            raise BadInput(f"--scratch {self.text}: give an --archive outside it (the folder is removed when the "
                           "run ends)")
        self.folder, self.archive = folder, archive
        if out.resolve().is_relative_to(folder.resolve()):
            self.out = out  # else nothing of the run is in the folder

    def leave(self) -> None:
        if self.folder is None or not self.folder.is_dir():
            return
        out = self.out
        ran = out is not None and out.is_dir() and any(p.name != LOCK for p in out.iterdir())
        why = self._why_kept() if ran else None
        if why is not None:
            show(f"gpu-run: kept {self.folder}: {why}")
            return
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.folder.exists():
            show(f"gpu-run: could not remove all of {self.folder}")
        else:
            show(f"gpu-run: removed {self.folder} (the unpacked suite"
                 + ("; the archive holds this run's files)" if ran else ")"))
        self.folder = None

    def _why_kept(self) -> str | None:
        """Why the folder must stay when --out holds this run's files; None once the archive holds them."""
        out = self.out
        archive = self.archive
        try:
            written = archive is not None and archive.is_file() and archive.stat().st_size > 0
        except OSError:
            written = False
        if not written:
            return f"{out} holds this run's files and no archive of them was written"
        held: dict[str, int] = {}
        try:
            write_archive(out, archive, held)
            files = [p for p in _archived(out, archive) if p.is_file()]
            lacking = [p for p in files if held.get(f"{out.name}/{p.relative_to(out)}") != p.stat().st_size]
        except (OutputError, OSError) as exc:
            return f"the archive {archive} could not be brought up to date ({' '.join(str(exc).split())})"
        if lacking:
            return f"the archive {archive} lacks {lacking[0].relative_to(out)} as it is in {out}"
        return None


def check_pytest_args(args: Sequence[str], env: dict) -> None:
    """Bad input: a pytest option of :data:`OWN_OPTIONS` after ``--`` or in PYTEST_ADDOPTS."""
    try:
        addopts = shlex.split(env.get("PYTEST_ADDOPTS") or "")
    except ValueError as exc:
        raise BadInput(f"PYTEST_ADDOPTS: cannot be split into arguments ({exc})") from None
    for where, words in (("--", args), ("PYTEST_ADDOPTS", addopts)):
        for word in words:
            name = word.split("=", 1)[0]
            if name in OWN_OPTIONS:
                raise BadInput(f"{where} {word[:80]}: gpu-run names each step's results file inside --out "
                               f"(results/<step>.jsonl, results/tests.xml); a {name} of your own would send them "
                               "elsewhere and leave the step unjudged: leave it out")


def requested_devices(requested: Sequence[str], machine: dict) -> list[str]:
    """The devices asked for, each known to the suite and available here; else bad input."""
    table = machine.get("backends")
    if not isinstance(table, dict):
        errors = machine.get("errors") or {}
        raise BadInput(f"cannot ask the suite about devices: {errors.get('backends') or errors.get('probe') or 'unknown error'}")
    for name in requested:
        if name not in table:
            raise BadInput(f"unknown device {name[:40]!r}; known: {', '.join(sorted(table))}")
        if not table[name].get("available"):
            raise BadInput(no_gpu_line(name, machine))
    return list(dict.fromkeys(requested))


def bytecode_cache(env: dict, cache_home: Path | None = None) -> tuple[str | None, str]:
    """Where the steps' interpreters keep compiled bytecode, and why.

    An image whose torch was installed without bytecode caches (``__pycache__`` not written or
    not writable) has every process compile the ~1,700 modules it imports: 9.3 s per process on
    the first H100 run, for every pytest worker of every step. Then the steps share one cache
    (``PYTHONPYCACHEPREFIX``) under ``$XDG_CACHE_HOME/detconf/pycache`` (``~/.cache``), so only
    the first process of the first run compiles. Left alone: a prefix or
    ``PYTHONDONTWRITEBYTECODE`` set by the caller, and a torch whose caches are in place.
    """
    if env.get("PYTHONPYCACHEPREFIX"):
        return env["PYTHONPYCACHEPREFIX"], "set by the caller (PYTHONPYCACHEPREFIX)"
    if env.get("PYTHONDONTWRITEBYTECODE"):
        return None, "PYTHONDONTWRITEBYTECODE is set"
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None, "torch's sources not found"
    if Path(importlib.util.cache_from_source(spec.origin)).is_file():
        return None, "torch has its bytecode caches"
    home = cache_home or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = home / "detconf" / "pycache"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return None, f"torch has no bytecode caches and {folder} cannot be made ({exc.strerror or exc})"
    if not os.access(folder, os.W_OK):
        return None, f"torch has no bytecode caches and {folder} is not writable"
    env["PYTHONPYCACHEPREFIX"] = str(folder)
    return str(folder), "torch has no bytecode caches: the steps share this one"


def _child_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(_ENCLOSING_PYTEST)}


class _Handlers:
    """Stop signals raise :class:`Stopped` in the main thread, once: a second signal during the
    last write is ignored, so the records it writes are whole."""

    def __init__(self) -> None:
        self.previous: dict[int, object] = {}
        self.stopping = False

    def _handle(self, signum, frame) -> None:
        if self.stopping:
            HURRY.set()  # a second signal: the stopped step's grace ends now
            return
        self.stopping = True
        raise Stopped(signum)

    def __enter__(self) -> "_Handlers":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None, *, root: Path | None = None) -> int:
    start = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    scratch = Scratch(None)
    try:
        with _Handlers():
            scratch = Scratch.from_argv(argv)
            return _main(argv, root, start, scratch)
    except BadInput as exc:
        line = f"{PROG}: error: {' '.join(str(exc).split())}"
        Console.log(line + "\n")
        _error(line)
        return EXIT_BAD_INPUT
    except OutputError as exc:  # before the records could take it (console.log, the first mkdir)
        _error(f"{PROG}: error: cannot write the output: {' '.join(str(exc).split())}")
        return EXIT_FAILED
    except (KeyboardInterrupt, Stopped) as exc:  # before the output folder exists
        _error(f"{PROG}: stopped")
        return 128 + getattr(exc, "signum", signal.SIGINT)
    finally:
        Console.close()
        HURRY.clear()
        scratch.leave()


def _error(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _main(argv: list[str], root: Path | None, start: float, scratch: Scratch) -> int:
    own, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser().parse_args(own)
    scratch.spelled(args)
    steps = _steps(args.steps)
    workers = _workers(args.workers)
    clock = Clock(_budget(args.budget), start)
    wheels = Path(args.wheels) if args.wheels else None
    if wheels is not None and not wheels.is_dir():
        raise BadInput(f"--wheels {args.wheels}: no such folder")
    alert_tests = Path(args.alert_tests).absolute() if args.alert_tests else None
    if alert_tests is not None:
        regular_file(alert_tests, "--alert-tests", args.alert_tests)
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        raise BadInput("PYTEST_DISABLE_PLUGIN_AUTOLOAD is set: pytest would load neither detconf's plugin nor xdist; unset it")
    env = _child_env()
    check_pytest_args(pytest_args, env)
    if root is None:
        from detconf.suite import suite_root

        root = suite_root()
    if root is None:
        raise BadInput("cannot find the conformance suite (the 'conformance' package): run from a checkout or reinstall detconf")
    checkout = (root / "pytest.ini").is_file()
    requirements_file = Path(args.requirements) if args.requirements else None
    if requirements_file is not None:
        requirements, origin = read_requirements(requirements_file), requirements_file.name
    else:
        requirements, origin = suite_requirements(root)
    if args.check:
        code = _requirements(requirements, origin, wheels, requirements_file, root, env, args.pip_option, None)
        if args.device:  # --check says whether the run could start: the devices asked for too
            say("checking the devices asked for (a child python imports torch)")
            machine = probe(root, env)
            if not isinstance(machine.get("backends"), dict) and code != EXIT_OK:
                say("the devices asked for are not checked: the suite cannot be asked while requirements are missing")
                return code
            devices = requested_devices(args.device, machine)
            say(f"available: {', '.join(devices)}")
        return code

    out = _out_dir(args.out, root, checkout)
    archive = _archive_path(args.archive)
    scratch.take(out, archive)
    claim = Claim.take(out, archive, args.out or str(out))
    try:
        return _session(claim, argv, args, steps, workers, clock, wheels, alert_tests, root, checkout,
                        requirements, origin, requirements_file, env, pytest_args)
    finally:
        claim.release()


def _session(claim: Claim, argv, args, steps, workers, clock, wheels, alert_tests, root, checkout,
             requirements, origin, requirements_file, env, pytest_args) -> int:
    """The run in its claimed output folder: records written whatever happens, one line when they
    cannot be (a full disk: what this run wrote is removed when no step had started, so the
    folder takes a retry)."""
    out = claim.out
    record = Record(out, argv, claim.archive, clock.budget)
    record.machine = {"date": _now(), "command": ["detconf", "gpu-run", *argv], "cwd": str(Path.cwd())}
    try:
        try:
            for sub in ("results", "logs"):
                try:
                    (out / sub).mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise OutputError(f"{out / sub}: {exc.strerror or exc}") from None
            Console.open(out / "console.log")
            return _run(record, args, steps, workers, clock, wheels, alert_tests, root, checkout,
                        requirements, origin, requirements_file, env, pytest_args)
        except (Stopped, KeyboardInterrupt) as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            name = signal.Signals(signum).name
            for s in record.steps:
                if s.status == "running":
                    s.status, s.exit_status = "interrupted", 128 + signum
            state = f"stopped by {name} after {clock.elapsed():.1f} s"
            say(f"{state}; writing the records and the archive")
            say(f"wrote {record.write(state)}")
            return 128 + signum
        except BadInput as exc:
            say(f"error: {' '.join(str(exc).split())}")
            try:
                record.write(f"refused: {' '.join(str(exc).split())}")
            except OutputError:
                pass  # the refusal is said; the records could not take it
            Console.close()
            raise
        except OutputError:
            raise
        except Exception as exc:  # a fault of this command: said in one line, its traceback kept in console.log
            import traceback

            Console.log(traceback.format_exc())
            say(f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} (traceback in console.log)")
            try:
                say(f"wrote {record.write(f'internal error: {type(exc).__name__}')}")
            except Exception as again:  # noqa: BLE001 - the records themselves cannot be written
                say(f"could not write the records: {type(again).__name__}: {again}")
            return EXIT_FAILED
    except OutputError as exc:
        Console.close()
        line = f"{PROG}: error: cannot write the output: {' '.join(str(exc).split())}"
        if not any(s.status != "skipped" for s in record.steps):
            claim.discard()
            line += f"; no step had started and nothing of this run is kept ({out} takes a retry once there is room)"
        else:
            line += f"; the records in {out} may be behind"
        _error(line)
        return EXIT_FAILED


def _requirements(requirements, origin, wheels, requirements_file, root, env, pip_options, record) -> int | None:
    """Check (and install) the requirements; an exit status when the run cannot go on, else None
    (with --check: 0)."""
    say(f"checking {len(requirements)} requirements ({origin}) and what they need, for Python {python_tag()}")
    result = check(requirements, origin, wheels)
    _wheels.report_requirements(result, wheels, say=say, show=show)
    state = {"origin": origin, "torch": result.torch, "needs": [n.line() for n in result.needs],
             "conflicts": result.conflicts, "notes": result.notes, "versions": dict(sorted(result.checked.items())),
             "to_install": [f"{n} {v}" for n, v, _ in result.install]}
    if result.needs:
        state["pip_download"] = _wheels.pip_download_hint(result.needs)
    if record is not None:
        record.requirements = state
    if result.needs or result.conflicts or result.torch is None:
        if result.conflicts and not result.needs:
            say(f"what asks for another torch does not suit this machine: bring versions of it that work with torch "
                f"{result.torch}")
        return EXIT_FAILED
    if result.install:
        assert wheels is not None
        if _wheels.install(result, wheels, pip_options, env, say=say) != 0:
            return EXIT_FAILED
        installed = [f"{name} {version}" for name, version, _ in result.install]
        again = _wheels.recheck(requirements_file.absolute() if requirements_file else None, root, env)
        if again is None or again.needs or again.conflicts:
            if again is not None:
                _wheels.report_recheck(again, [name for name, _, _ in result.install], wheels, say=say, show=show)
                state["needs"] = [n.line() for n in again.needs]
                state["conflicts"] = again.conflicts
                _, others = _wheels.split_recheck(again, [name for name, _, _ in result.install])
                state.pop("pip_download", None)
                if others:
                    state["pip_download"] = _wheels.pip_download_hint(others)
            say("still missing after the install" + ("" if again is not None else " (the check could not run again)"))
            return EXIT_FAILED
        state["installed"] = installed
        if record is not None:
            record.installed = installed
        say(f"installed {', '.join(installed)}; every requirement is installed now")
    else:
        say("every requirement is installed")
    return EXIT_OK if record is None else None


def _run(record: Record, args, steps, workers, clock, wheels, alert_tests, root, checkout,
         requirements, origin, requirements_file, env, pytest_args) -> int:
    out = record.out
    if clock.budget is not None:
        say(f"budget: {clock.budget:.0f} s (this command ends by then; {RESERVE_S:.0f} s of it kept for the archive)")
    record.write("checking requirements")

    # 1. Requirements.
    code = _requirements(requirements, origin, wheels, requirements_file, root, env, args.pip_option, record)
    if code is not None:
        written = record.write("requirements missing")
        say(f"wrote {written}")
        return code

    # 2. The machine, and the devices asked for.
    say("describing the machine (a child python imports torch)")
    record.machine.update(probe(root, env, timeout=clock.left()))
    cache, why = bytecode_cache(env)
    record.machine["bytecode_cache"] = {"path": cache, "why": why}
    if cache is not None:
        say(f"bytecode cache: {cache} ({why})")
    rev = revision(root)
    record.machine["host"] = host()
    record.machine["suite"] = {"root": str(root), "commit": rev.commit, "describe": rev.describe, "dirty": rev.dirty,
                               "changed": list(rev.changed[:50]), "revision_source": rev.source, "checkout": checkout}
    record.machine["requirements"] = record.requirements
    table = record.machine.get("backends")
    if args.device:
        devices = requested_devices(args.device, record.machine)
    elif not isinstance(table, dict):
        devices = requested_devices([], record.machine)  # says why the suite cannot be asked
    elif (table.get("cuda") or {}).get("available"):
        devices = ["cuda"]
    else:
        devices = ["cpu"]
        say(f"no GPU: {no_gpu_line('cuda', record.machine).split(': ', 1)[1]}; running on the CPU "
            "(--device cuda refuses instead)")
    record.machine["devices"] = devices
    say(f"machine: {machine_line(record.machine)}")
    say(f"suite: {root} at {rev.label} ({rev.source}); output: {out}")
    record.write("running")

    # 3. The steps, the records and the archive rewritten after each.
    plan = Plan(root, out, devices, workers, steps, pytest_args, args.quiet, env, checkout, clock, alert_tests)
    for number, name in enumerate(steps, 1):
        result = run_step(plan, STEPS[name], number, len(steps), on_start=record.steps.append)
        if result not in record.steps:
            record.steps.append(result)
        record.write()

    # 4. The end.
    failed = [s for s in record.steps if s.status in FAILING]
    state = "finished" + (f" after {clock.elapsed():.1f} s of a {clock.budget:.0f} s budget"
                          if clock.budget is not None else f" after {clock.elapsed():.1f} s")
    say(f"{state}; writing the records and the archive")
    say(f"wrote {record.write(state)}")
    if failed:
        say("failed steps: " + ", ".join(f"{s.step} ({s.status}, exit status {s.exit_status})" for s in failed))
        return EXIT_FAILED
    skipped = [s.step for s in record.steps if s.status == "skipped"]
    say("every step passed" + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
