"""``detconf gpu-run``: the whole suite on a GPU machine in one command, offline.

A GPU runner usually has its own torch, many other packages and no network. This command

1. checks the suite's requirements (``requirements-base.txt``; the distributions they need in
   turn) against the installed distributions (``importlib.metadata``; torch only as a
   distribution, never imported here) and says exactly which wheels to bring: names, version
   specifiers, and this interpreter's tags (``cp312``, the platform). With ``--wheels DIR`` it
   installs them from that folder into the running interpreter
   (``python -m pip install --no-index --no-deps --find-links DIR ...``), reading each wheel's
   own requirements first so that nothing is left out;
2. runs the steps, each a ``python -m pytest ...`` subprocess from the suite's root, with a
   progress line at each start and end (step, time, wall seconds, exit status):

   ``documented``  the default sources in modes error, warn_only and off
   ``compiled``    torch-docs under Inductor, modes error and warn_only
   ``sweep``       torch's OpInfo database, mode error
   ``stress``      the stress tier (Hypothesis profile ``stress``) over torch-docs, where the suite has
                   that profile (else a line says it has not)
   ``tests``       the harness's own tests

3. writes everything under ``--out`` (default ``reports/out/gpu-run-<UTC time>/``): ``results/``
   (one results file per step, each with its ``<name>-report/`` matrix), ``logs/`` (each
   step's output), ``machine.json`` (GPU model, driver, CUDA, cuDNN, torch and its git hash,
   math-mode settings, CPUs, Python, platform, distributions), ``steps.json`` (each step's
   command, start, wall time and exit status), ``COMMAND.md`` (the command line, the machine,
   the suite's commit, the date), and one archive of all of it, ``<out name>.tar.gz``.

Exit status: 0 every step passed (or was skipped); 1 a step failed (the last line names each
one), or requirements are missing or could not be installed; 2 bad input (one line on stderr:
an unknown step or device, a missing wheel folder, an output folder that is not empty).

This module imports neither torch nor the suite's engine: what it needs to know about torch and
the devices it asks a child ``python -c`` (:data:`PROBE`).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import email.parser
import importlib.metadata as metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NoReturn, Sequence

try:  # the suite requires packaging; pip's own copy answers where it is missing (it may be a wheel to bring)
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - exercised only where packaging is absent
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.tags import sys_tags  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import (  # type: ignore[no-redef]
        InvalidWheelFilename, canonicalize_name, parse_wheel_filename,
    )
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

PROG = "detconf gpu-run"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
#: The distribution the suite tests: it must be installed (the machine's own build); never
#: installed, upgraded or imported by this command.
TORCH = "torch"
#: Environment variables of an enclosing pytest (xdist) that must not reach the steps' pytest.
_ENCLOSING_PYTEST = ("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")


class BadInput(Exception):
    """A problem with the command line or its paths: one line, exit status 2."""


# ----------------------------------------------------------------------------- requirements


@dataclass(frozen=True)
class Need:
    """A distribution the suite needs that is absent, or present in a version that does not do."""

    requirement: str  # e.g. "jsonschema>=4.18"
    why: str  # who requires it: "requirements-base.txt", "jsonschema 4.23.0"
    installed: str | None = None  # the version installed, when it is the wrong one

    def line(self) -> str:
        have = f"; {self.installed} is installed" if self.installed else ""
        return f"{self.requirement}  (required by {self.why}{have})"


@dataclass
class Check:
    """What the requirements walk found."""

    needs: list[Need] = field(default_factory=list)  # to bring (not in the wheel folder, or no folder)
    install: list[tuple[str, str, Path]] = field(default_factory=list)  # (name, version, wheel) from --wheels
    notes: list[str] = field(default_factory=list)  # problems of installed packages that do not block
    torch: str | None = None  # the installed torch's version
    checked: dict[str, str] = field(default_factory=dict)  # name -> installed version, every one walked

    @property
    def satisfied(self) -> bool:
        return not self.needs and not self.install and self.torch is not None


def python_tag() -> str:
    """This interpreter's wheel tag, e.g. ``cp312`` (``pp310`` for PyPy)."""
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name[:2])
    return f"{impl}{sys.version_info.major}{sys.version_info.minor}"


def interpreter_tag() -> str:
    """The most specific tag this interpreter installs, e.g. ``cp312-cp312-manylinux_2_39_x86_64``."""
    return str(next(iter(sys_tags())))


def read_requirements(path: Path, _seen: frozenset = frozenset()) -> list[Requirement]:
    """The requirements of a pip requirements file (``-r`` includes followed; other options
    skipped). A line that is not a requirement is bad input."""
    if path.resolve() in _seen:
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the requirements file ({exc.strerror or exc})") from None
    out: list[Requirement] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            include = line.split(None, 1)[1].strip()
            out += read_requirements(path.parent / include, _seen | {path.resolve()})
            continue
        if line.startswith("-"):
            continue  # an index or other option: nothing to check
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            raise BadInput(f"{path}:{number}: not a requirement ({exc})") from None
    return out


def suite_requirements(root: Path | None) -> tuple[list[Requirement], str]:
    """The suite's requirements but torch, and where they were read: the checkout's
    ``requirements-base.txt``, else the installed detconf distribution's metadata."""
    if root is not None and (root / "requirements-base.txt").is_file():
        path = root / "requirements-base.txt"
        return [r for r in read_requirements(path) if canonicalize_name(r.name) != TORCH], path.name
    try:
        declared = metadata.requires("detconf") or []
    except metadata.PackageNotFoundError:
        raise BadInput("cannot find the suite's requirements (no requirements-base.txt, detconf not installed): "
                       "pass --requirements FILE") from None
    reqs = [Requirement(text) for text in declared]
    return [r for r in reqs if canonicalize_name(r.name) != TORCH and _applies(r, "")], "detconf's metadata"


def _applies(req: Requirement, extra: str) -> bool:
    if req.marker is None:
        return True
    env = dict(default_environment())
    env["extra"] = extra
    return bool(req.marker.evaluate(env))


def _satisfies(req: Requirement, version: str) -> bool:
    if not req.specifier:
        return True
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _installed() -> dict[str, metadata.Distribution]:
    """Installed distributions by canonical name: the first on ``sys.path`` wins, as for imports."""
    out: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and canonicalize_name(name) not in out:
            out[canonicalize_name(name)] = dist
    return out


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str
    version: str
    compatible: bool

    def requires(self) -> list[str]:
        """``Requires-Dist`` of the wheel's METADATA."""
        try:
            with zipfile.ZipFile(self.path) as z:
                meta = next((n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
                if meta is None:
                    return []
                message = email.parser.Parser().parsestr(z.read(meta).decode("utf-8", "replace"))
        except (OSError, zipfile.BadZipFile) as exc:
            raise BadInput(f"{self.path}: not a readable wheel ({exc})") from None
        return message.get_all("Requires-Dist") or []


def wheels_in(folder: Path) -> dict[str, list[Wheel]]:
    """The wheels of a folder by canonical name, best first (compatible, then newest)."""
    supported = set(sys_tags())
    out: dict[str, list[Wheel]] = {}
    for path in sorted(folder.glob("*.whl")):
        try:
            name, version, _, tags = parse_wheel_filename(path.name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        out.setdefault(canonicalize_name(name), []).append(
            Wheel(path, str(name), str(version), compatible=bool(set(tags) & supported)))
    for found in out.values():
        found.sort(key=lambda w: (Version(w.version), w.path.name), reverse=True)  # newest first,
        found.sort(key=lambda w: not w.compatible)  # then (a stable sort) those this interpreter takes
    return out


def check(requirements: Sequence[Requirement], origin: str, wheels: Path | None = None) -> Check:
    """Walk the requirements and what they require in turn (markers evaluated for this
    interpreter): what is installed and does, what the wheel folder provides, what must be
    brought. Installed packages' own dependencies are walked too: one that is absent is needed;
    one whose version is off is only noted (the package works, or pip would have said)."""
    installed = _installed()
    offered = wheels_in(wheels) if wheels is not None else {}
    result = Check()
    torch_dist = installed.get(TORCH)
    result.torch = torch_dist.version if torch_dist is not None else None
    queue: list[tuple[Requirement, str, bool]] = [(r, origin, True) for r in requirements]
    done: set[str] = {TORCH}  # torch's own dependencies are its build's business
    planned: dict[str, str] = {}
    while queue:
        req, why, direct = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in planned:
            if not _satisfies(req, planned[name]):
                result.needs.append(Need(str(req), why, installed=f"{planned[name]} (from the wheel folder)"))
            continue
        dist = installed.get(name)
        if dist is not None and _satisfies(req, dist.version):
            result.checked[name] = dist.version
            if name not in done:
                done.add(name)
                for text in dist.requires or []:
                    sub = _parse(text, dist)
                    if sub is not None and any(_applies(sub, extra) for extra in ("", *sorted(req.extras))):
                        queue.append((sub, f"{dist.metadata['Name']} {dist.version}", False))
            continue
        if dist is not None and not direct and not why.endswith("(from the wheel folder)"):
            result.notes.append(f"{dist.metadata['Name']} {dist.version} is installed; {why} asks for {req}")
            done.add(name)
            continue
        wheel = next((w for w in offered.get(name, []) if w.compatible and _satisfies(req, w.version)), None)
        if wheel is None:
            result.needs.append(Need(str(req), why, installed=dist.version if dist is not None else None))
            done.add(name)
            continue
        planned[name] = wheel.version
        result.install.append((wheel.name, wheel.version, wheel.path))
        for text in wheel.requires():
            sub = _parse(text, None)
            if sub is not None and any(_applies(sub, extra) for extra in ("", *sorted(req.extras))):
                queue.append((sub, f"{wheel.name} {wheel.version} (from the wheel folder)", False))
    return result


def _parse(text: str, dist) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None  # a malformed dependency of an installed package is not the suite's to judge


def why_not_offered(name: str, wheels: Path) -> str:
    """Why the wheel folder has no usable wheel of ``name`` (for the missing list)."""
    found = wheels_in(wheels).get(canonicalize_name(name), [])
    if not found:
        return "no wheel of it in the folder"
    return "; ".join(f"{w.path.name}: " + ("not for this interpreter" if not w.compatible else "version does not do")
                     for w in found)


def pip_download_hint(needs: Sequence[Need]) -> str:
    """The command that fetches the missing wheels (and their dependencies) on a machine with a
    network, for this interpreter."""
    tag = interpreter_tag().split("-")
    v = sys.version_info
    args = ["python3", "-m", "pip", "download", "--only-binary=:all:", "--dest", "wheels",
            "--python-version", f"{v.major}.{v.minor}", "--implementation", tag[0][:2], "--abi", tag[1],
            "--platform", tag[2], *[n.requirement for n in needs]]
    return shlex.join(args)


def externally_managed() -> bool:
    """Does pip refuse to install into this interpreter (PEP 668) unless told otherwise?"""
    if sys.prefix != sys.base_prefix:
        return False
    return (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").is_file()


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
def backends():
    from engine.devices import backends
    return {name: b.describe() for name, b in sorted(backends().items())}
part("torch", describe_torch)
part("gpus", gpus)
part("nvidia_smi", nvidia_smi)
part("backends", backends)
def math_mode():
    from engine import mathmode
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


def probe(root: Path, env: dict) -> dict:
    """The machine as the child sees it (:data:`PROBE`)."""
    try:
        run = subprocess.run([sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True,
                             env=env, timeout=600)
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


def suite_commit(root: Path) -> tuple[str, bool | None]:
    """``git rev-parse HEAD`` of the suite's checkout and whether tracked files changed;
    ``("unknown", None)`` where it is no checkout (or git is absent)."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", head.stdout.strip()):
            return "unknown", None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=60)
        return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


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


# ----------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Step:
    name: str
    letter: str
    what: str
    args: Callable[["Plan"], list[str] | None]  # pytest arguments (None: no results file to keep)
    results: bool = True  # writes a results file results/<name>.jsonl


def _conformance(*extra: str, profile: str = "ci") -> Callable[["Plan"], list[str]]:
    def args(plan: "Plan") -> list[str]:
        devices = [a for d in plan.devices for a in ("--device", d)]
        return ["conformance", "-n", plan.workers, "--hypothesis-profile", profile, *devices, *extra]
    return args


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("documented", "a", "the documented sources in modes error, warn_only and off",
         _conformance("--mode", "error", "--mode", "warn_only", "--mode", "off")),
    Step("compiled", "b", "torch-docs compiled with Inductor, modes error and warn_only",
         _conformance("--compile", "inductor", "--source", "torch-docs", "--mode", "error", "--mode", "warn_only")),
    Step("sweep", "c", "the OpInfo sweep, mode error", _conformance("--source", "sweep", "--mode", "error")),
    Step("stress", "d", "the stress tier over torch-docs, modes error, warn_only and off",
         _conformance("--source", "torch-docs", "--mode", "error", "--mode", "warn_only", "--mode", "off",
                      profile="stress")),
    Step("tests", "e", "the harness's own tests",
         lambda plan: ["tests", "-n", plan.workers, "-p", "no:cacheprovider"], results=False),
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


@dataclass
class StepResult:
    step: str
    status: str  # passed, failed, skipped, interrupted
    exit_status: int | None = None
    started: str | None = None
    wall_s: float | None = None
    command: list[str] | None = None
    log: str | None = None
    results: str | None = None
    report: str | None = None
    end_record: dict | None = None
    reason: str | None = None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def say(message: str) -> None:
    print(f"gpu-run: {message}", flush=True)


def pytest_command(plan: Plan, args: list[str]) -> list[str]:
    """``python -m pytest args`` as run from the suite's root; an installed suite (no checkout)
    gets absolute paths, its root as ``--rootdir`` and pytest's cache in the output folder."""
    if plan.checkout:
        return [sys.executable, "-m", "pytest", *args]
    first, rest = args[0], args[1:]
    return [sys.executable, "-m", "pytest", str(plan.root / first), "--rootdir", str(plan.root),
            "-o", f"cache_dir={plan.out / '.pytest_cache'}", *rest]


def has_stress(plan: Plan) -> bool:
    """Does the suite register the Hypothesis profile ``stress`` (conformance/profiles.py)?"""
    try:
        text = (plan.root / "conformance" / "profiles.py").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r"""^\s*["']stress["']\s*:""", text, re.MULTILINE) is not None


def _stream(command: list[str], cwd: Path, env: dict, log: Path, quiet: bool) -> int:
    """Run ``command``, its output (stdout and stderr together) to ``log`` and, unless quiet, to ours."""
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert proc.stdout is not None
            for line in iter(proc.stdout.readline, b""):
                sink.write(line)
                if not quiet:
                    sys.stdout.buffer.write(line)
                    sys.stdout.flush()
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


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
    built here with ``python -m reports build``."""
    folder = results.with_name(results.stem + "-report")
    if folder.is_dir() and any(folder.iterdir()):
        return str(folder.relative_to(plan.out))
    if not results.is_file():
        return None
    run = subprocess.run([sys.executable, "-m", "reports", "build", str(results), "--out", str(folder), "--quiet"],
                         cwd=plan.root, env=plan.env, capture_output=True, text=True)
    if run.returncode != 0:
        say(f"could not build the report of {results.name}: {' '.join(run.stderr.split())[:300]}")
        return None
    return str(folder.relative_to(plan.out))


def run_step(plan: Plan, step: Step, number: int, total: int) -> StepResult:
    label = f"[{number}/{total}] {step.name}"
    if step.name == "tests" and not (plan.root / "tests").is_dir():
        say(f"{label}: skipped: the suite has no tests folder here (an installed suite; run it from a checkout)")
        return StepResult(step.name, "skipped", reason="no tests folder (an installed suite)")
    if step.name == "stress" and not has_stress(plan):
        say(f"{label}: skipped: this suite has no stress tier (no Hypothesis profile 'stress')")
        return StepResult(step.name, "skipped", reason="not available: no Hypothesis profile 'stress'")
    args = step.args(plan)
    results = None
    if step.results:
        results = plan.out / "results" / f"{step.name}.jsonl"
        args += ["--results", str(results)]
    args += plan.pytest_args
    command = pytest_command(plan, args)
    log = plan.out / "logs" / f"{step.name}.log"
    started = _now()
    say(f"{label}: start {started}: {shlex.join(['python', *command[1:]])}")
    t0 = time.monotonic()
    status = "passed"
    try:
        code = _stream(command, plan.root if plan.checkout else Path.cwd(), plan.env, log, plan.quiet)
    except KeyboardInterrupt:
        code, status = 130, "interrupted"
    wall = round(time.monotonic() - t0, 1)
    if status != "interrupted" and code != 0:
        status = "failed"
    say(f"{label}: exit status {code} ({status}) after {wall:.1f} s")
    result = StepResult(step.name, status, code, started, wall, ["python", *command[1:]],
                        str(log.relative_to(plan.out)))
    if results is not None:
        result.results = str(results.relative_to(plan.out)) if results.is_file() else None
        result.end_record = _end_record(results)
        result.report = build_report(plan, results)
    return result


# ----------------------------------------------------------------------------- outputs


def command_md(argv: Sequence[str], machine: dict, steps: list[StepResult], installed: list[str]) -> str:
    suite = machine.get("suite") or {}
    commit = suite.get("commit", "unknown")
    if suite.get("dirty"):
        commit += " (with uncommitted changes to tracked files)"
    lines = [
        f"# detconf gpu-run, {machine.get('date')}",
        "",
        f"- Command: `{shlex.join(['detconf', 'gpu-run', *argv])}` (run in `{machine.get('cwd')}`)",
        f"- Machine: {machine_line(machine)}",
        f"- Suite: commit {commit}, at `{suite.get('root')}`",
        f"- Date: {machine.get('date')}",
        f"- Devices: {', '.join(machine.get('devices') or [])}",
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
        lines.append(f"| {s.step} | `{command}` | {s.started} | {s.wall_s:.1f} s | "
                     f"{s.exit_status} ({s.status}) | {cases} |")
    lines += ["", "Files: `machine.json` (the machine in full), `steps.json` (the table above), `results/` (each "
              "step's results file and its `-report/` matrix), `logs/` (each step's output).", ""]
    return "\n".join(lines)


def write_archive(out: Path) -> Path:
    """``<out>/<out name>.tar.gz``: everything in the output folder, under the folder's name."""
    archive = out / f"{out.name}.tar.gz"
    partial = out / f".{out.name}.tar.gz.partial"
    with tarfile.open(partial, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path in (archive, partial) or not (path.is_file() or path.is_dir()) or path.is_symlink():
                continue
            if ".pytest_cache" in path.relative_to(out).parts:
                continue
            tar.add(path, arcname=f"{out.name}/{path.relative_to(out)}", recursive=False)
    os.replace(partial, archive)
    return archive


# ----------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Run the whole suite on a GPU machine, offline; one archive of it all.",
                epilog="Arguments after `--` go to every step's pytest (e.g. -- -k put_). "
                       "Exit status: 0 all passed, 1 a step failed or requirements are missing, 2 bad input.")
    p.add_argument("--wheels", metavar="DIR", help="install what is missing from the wheels in DIR (no network)")
    p.add_argument("--check", action="store_true",
                   help="only check the requirements (and, with --wheels, install them); run no step")
    p.add_argument("--device", action="append", metavar="NAME",
                   help="device to run on (repeatable); default: cuda where available, else cpu")
    p.add_argument("--steps", metavar="LIST", default=",".join(STEPS),
                   help=f"comma-separated steps out of {', '.join(STEPS)} (or their letters a-e); default: all")
    p.add_argument("-n", dest="workers", metavar="N", default="auto", help="pytest-xdist workers per step (default auto)")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/out/gpu-run-<UTC time>/); new or empty")
    p.add_argument("--requirements", metavar="FILE",
                   help="requirements to check instead of the suite's requirements-base.txt")
    p.add_argument("--pip-option", action="append", default=[], metavar="OPT",
                   help="passed to pip install (repeatable), e.g. --pip-option=--user")
    p.add_argument("--quiet", action="store_true", help="steps' output to logs/ only, not to the terminal")
    return p


def _steps(text: str) -> list[str]:
    letters = {s.letter: s.name for s in STEPS.values()}
    chosen: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        name = letters.get(word, word)
        if name not in STEPS:
            raise BadInput(f"unknown step {word[:40]!r}; steps: {', '.join(STEPS)} (or a-e)")
        if name not in chosen:
            chosen.append(name)
    return [name for name in STEPS if name in chosen]  # always in the documented order


def _workers(text: str) -> str:
    if text in ("auto", "logical") or re.fullmatch(r"\d{1,4}", text):
        return text
    raise BadInput(f"-n {text[:40]!r}: a number of workers, or auto")


def _out_dir(text: str | None, root: Path, checkout: bool) -> Path:
    if text is None:
        base = (root if checkout else Path.cwd()) / "reports" / "out"
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        return base / f"gpu-run-{stamp}"
    out = Path(text).absolute()
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise BadInput(f"--out {text}: exists and is not a folder")
        if any(out.iterdir()):
            raise BadInput(f"--out {text}: the folder is not empty (each run gets a folder of its own)")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                raise BadInput(f"--out {text}: cannot create the folder in {parent}")
            break
    return out


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


def recheck(requirements: Path | None, root: Path | None, env: dict) -> Check | None:
    """The requirements checked again in a fresh interpreter (what pip just installed, e.g. into a
    user site folder that did not exist at our start, is seen there)."""
    code = ("import json, sys; from pathlib import Path; from detconf import gpurun as g\n"
            "req = sys.argv[1]; root = Path(sys.argv[2]) if sys.argv[2] else None\n"
            "reqs, origin = (g.read_requirements(Path(req)), Path(req).name) if req else g.suite_requirements(root)\n"
            "c = g.check(reqs, origin)\n"
            "print(json.dumps({'needs': [n.line() for n in c.needs], 'torch': c.torch}))\n")
    package_parent = str(Path(__file__).resolve().parent.parent)
    run = subprocess.run([sys.executable, "-c", code, str(requirements or ""), str(root or "")],
                         capture_output=True, text=True, env={**env, "PYTHONPATH": os.pathsep.join(
                             filter(None, [package_parent, env.get("PYTHONPATH")]))}, cwd=package_parent)
    if run.returncode != 0:
        return None
    data = json.loads(run.stdout.strip().splitlines()[-1])
    c = Check(torch=data["torch"])
    c.needs = [Need(line, "") for line in data["needs"]]
    return c


def install(check_result: Check, wheels: Path, pip_options: list[str], env: dict) -> int:
    specs = [f"{name}=={version}" for name, version, _ in check_result.install]
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(wheels),
               "--disable-pip-version-check", *pip_options, *specs]
    say(f"installing {len(specs)} from {wheels}: {shlex.join(['python', *command[1:]])}")
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        tail = " ".join(run.stderr.strip().splitlines()[-4:])
        say(f"pip install failed (exit status {run.returncode}): {tail[-600:]}")
        if "externally-managed" in run.stderr or externally_managed():
            say("this interpreter is externally managed (PEP 668): use a venv made with --system-site-packages "
                "(it sees this torch), or add --pip-option=--user or --pip-option=--break-system-packages")
    return run.returncode


def report_requirements(result: Check, wheels: Path | None) -> None:
    if result.torch is None:
        say("torch is not installed: install this machine's own torch build first (gpu-run never installs torch)")
    else:
        say(f"torch {result.torch} is installed (kept as it is)")
    for note in result.notes:
        say(f"note: {note}")
    if not result.needs:
        return
    where = f" (not usable in {wheels})" if wheels is not None else ""
    say(f"missing {len(result.needs)}{where}; bring wheels for Python {python_tag()} "
        f"({interpreter_tag()}; pure-Python wheels are py3-none-any):")
    for need in result.needs:
        extra = f"  [{why_not_offered(Requirement(need.requirement).name, wheels)}]" if wheels is not None else ""
        print(f"  {need.line()}{extra}", flush=True)
    if wheels is None:
        say("their own dependencies are checked once the wheels are here (run again with --wheels DIR)")
    say(f"on a machine with a network: {pip_download_hint(result.needs)}")


def main(argv: Sequence[str] | None = None, *, root: Path | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv, root)
    except BadInput as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # before or between the steps (a step's own interrupt is recorded)
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str], root: Path | None) -> int:
    own, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser().parse_args(own)
    steps = _steps(args.steps)
    workers = _workers(args.workers)
    wheels = Path(args.wheels) if args.wheels else None
    if wheels is not None and not wheels.is_dir():
        raise BadInput(f"--wheels {args.wheels}: no such folder")
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        raise BadInput("PYTEST_DISABLE_PLUGIN_AUTOLOAD is set: pytest would load neither detconf's plugin nor xdist; unset it")
    if root is None:
        from detconf.suite import suite_root

        root = suite_root()
    if root is None:
        raise BadInput("cannot find the conformance suite (the 'conformance' package): run from a checkout or reinstall detconf")
    checkout = (root / "pytest.ini").is_file()
    out = None if args.check else _out_dir(args.out, root, checkout)
    requirements_file = Path(args.requirements) if args.requirements else None
    if requirements_file is not None:
        if not requirements_file.is_file():
            raise BadInput(f"--requirements {args.requirements}: no such file")
        requirements, origin = read_requirements(requirements_file), requirements_file.name
    else:
        requirements, origin = suite_requirements(root)
    env = _child_env()

    # 1. Requirements.
    say(f"checking {len(requirements)} requirements ({origin}) and what they need, for Python {python_tag()}")
    result = check(requirements, origin, wheels)
    report_requirements(result, wheels)
    if result.needs or result.torch is None:
        return EXIT_FAILED
    installed_now: list[str] = []
    if result.install:
        assert wheels is not None
        if install(result, wheels, args.pip_option, env) != 0:
            return EXIT_FAILED
        installed_now = [f"{name} {version}" for name, version, _ in result.install]
        again = recheck(requirements_file.absolute() if requirements_file else None, root, env)
        if again is None or again.needs:
            if again is not None:
                report_requirements(again, None)
            say("still missing after the install" + ("" if again is not None else " (the check could not run again)"))
            return EXIT_FAILED
        say(f"installed {', '.join(installed_now)}; every requirement is installed now")
    else:
        say("every requirement is installed")
    if args.check:
        return EXIT_OK

    # 2. The machine, and the devices asked for.
    machine = {"date": _now(), "command": ["detconf", "gpu-run", *argv], "cwd": str(Path.cwd())}
    say("describing the machine (a child python imports torch)")
    machine.update(probe(root, env))
    cache, why = bytecode_cache(env)
    machine["bytecode_cache"] = {"path": cache, "why": why}
    if cache is not None:
        say(f"bytecode cache: {cache} ({why})")
    table = machine.get("backends")
    if not isinstance(table, dict):
        raise BadInput(f"cannot ask the suite about devices: {(machine.get('errors') or {}).get('backends', 'unknown error')}")
    devices = args.device or ["cuda" if (table.get("cuda") or {}).get("available") else "cpu"]
    for name in devices:
        if name not in table:
            raise BadInput(f"unknown device {name[:40]!r}; known: {', '.join(sorted(table))}")
        if not table[name].get("available"):
            raise BadInput(f"device {name!r} is not available here")
    commit, dirty = suite_commit(root)
    machine.update({"devices": devices, "host": host(),
                    "suite": {"root": str(root), "commit": commit, "dirty": dirty, "checkout": checkout},
                    "requirements": {"origin": origin, "installed_from_wheels": installed_now,
                                     "versions": dict(sorted(result.checked.items())), "notes": result.notes}})
    assert out is not None
    for sub in ("results", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    (out / "machine.json").write_text(json.dumps(machine, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    say(f"machine: {machine_line(machine)}")
    say(f"suite: {root} at {commit}; output: {out}")

    # 3. The steps.
    plan = Plan(root, out, devices, workers, steps, pytest_args, args.quiet, env, checkout)
    done: list[StepResult] = []
    interrupted = False
    for number, name in enumerate(steps, 1):
        result_step = run_step(plan, STEPS[name], number, len(steps))
        done.append(result_step)
        if result_step.status == "interrupted":
            interrupted = True
            break

    # 4. What it wrote.
    (out / "steps.json").write_text(json.dumps([s.__dict__ for s in done], indent=2) + "\n", encoding="utf-8")
    (out / "COMMAND.md").write_text(command_md(argv, machine, done, installed_now), encoding="utf-8")
    archive = write_archive(out)
    say(f"wrote {archive}")
    failed = [s for s in done if s.status in ("failed", "interrupted")]
    if interrupted:
        say("interrupted: " + ", ".join(f"{s.step} (exit status {s.exit_status})" for s in failed))
        return 130
    if failed:
        say("failed steps: " + ", ".join(f"{s.step} (exit status {s.exit_status})" for s in failed))
        return EXIT_FAILED
    say("every step passed" + (" (skipped: " + ", ".join(s.step for s in done if s.status == "skipped") + ")"
                               if any(s.status == "skipped" for s in done) else ""))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
