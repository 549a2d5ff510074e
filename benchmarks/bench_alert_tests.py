"""The documented CPU suite against PyTorch's own hand-written alert tests, whole process.

    python benchmarks/bench_alert_tests.py PATH [--repeat 3] [--device cpu] [-- extra suite args]

``PATH`` is a PyTorch source checkout (or a copy of its ``test/`` folder, or ``test_torch.py``
itself) at the release of the installed torch; it is not shipped with this project. Side A runs
exactly the ``test_nondeterministic_alert_*`` and ``test_deterministic_*`` methods of
``TestTorchDeviceType<DEVICE>`` in ``test_torch.py`` (pytest ``-k``; needs ``expecttest``). Side B is
the documented command, end-of-run matrix build included::

    pytest conformance --source torch-docs -n 0 --hypothesis-profile ci --device DEVICE

A side's failing tests or cells are said with its exit status (on a GPU both sides may have
failures: the figures still compare the work done); a side that did not run stops the benchmark.
The two sides run interleaved (A B A B ...); for each run the benchmark prints wall time and the
CPU time (user + sys) of the whole child process tree, from ``getrusage(RUSAGE_CHILDREN)``, and
for the suite the start-up time (process start to the first test's call, from a probe plugin).
Medians and the ratio B / A come last, with the load average. Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: PyTorch's device-generic test class for a device: TestTorchDeviceTypeCPU, TestTorchDeviceTypeCUDA, ...
SELECT = "TestTorchDeviceType{device} and (test_nondeterministic_alert_ or test_deterministic_)"
MARKERS = ("def test_nondeterministic_alert_", "def test_deterministic_")


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``NAME: error: MESSAGE``, and exit status 2."""

    def __init__(self, *args, name: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = name

    def error(self, message: str):
        print(f"{self.name}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def find_test_file(path: str) -> Path:
    """``test_torch.py`` from a checkout, its ``test/`` folder or the file itself."""
    p = Path(path).expanduser()
    for candidate in (p, p / "test_torch.py", p / "test" / "test_torch.py"):
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise UsageError(f"{candidate}: cannot read: {exc.strerror or exc}") from None
            if not all(marker in text for marker in MARKERS):
                raise UsageError(f"{candidate}: not PyTorch's test_torch.py (no test_nondeterministic_alert_* "
                                 "and test_deterministic_* methods)")
            return candidate
    if not p.exists():
        raise UsageError(f"{path}: no such file or folder (give a PyTorch checkout, its test/ folder or test_torch.py)")
    raise UsageError(f"{path}: no test_torch.py here or under test/")


def load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _subreaper() -> bool:
    """Make this process the one that a descendant left running by its parent is handed to (Linux
    ``PR_SET_CHILD_SUBREAPER``), so that its CPU time is counted when it is reaped; False where
    that cannot be done."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def timed_tree(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
               outlive_s: float = 60.0) -> tuple[float, float, subprocess.CompletedProcess, int]:
    """Wall seconds of one command, and the CPU seconds (user + sys) of it and of every process it
    started, those it left running at its end too (a server that leaves once the run is over):
    they are waited for, up to ``outlive_s`` seconds after the command's end (not in the wall
    time), and how many there were is returned with the rest."""
    reaping = _subreaper()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    outlived, deadline = 0, time.monotonic() + outlive_s
    while reaping and time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            outlived += 1
        else:
            time.sleep(0.1)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out, outlived


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall and CPU seconds of one command, as :func:`timed_tree` counts them."""
    wall, cpu, out, _ = timed_tree(cmd, cwd, env)
    return wall, cpu, out


def last_line(out: subprocess.CompletedProcess) -> str:
    lines = [l for l in out.stdout.strip().splitlines() if l.strip()]
    return lines[-1].strip("= ") if lines else out.stderr.strip()[-200:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="PyTorch checkout, its test/ folder, or test_torch.py")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("extra", nargs="*", help="extra arguments for the suite's pytest (after --)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        print("ERROR: --repeat must be at least 1", file=sys.stderr)
        return 2
    try:
        test_file = find_test_file(args.path)
    except UsageError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2

    import torch  # noqa: F401 - only for the versions line

    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load()}, "
          f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')} (both sides)")
    select = SELECT.format(device=args.device.split(":")[0].upper())
    print(f"A: {test_file} -k '{select}'")
    alert_cmd = [sys.executable, "-m", "pytest", test_file.name, "-q", "-p", "no:cacheprovider", "-k", select]
    walls: dict[str, list[float]] = {"A": [], "B": []}
    cpus: dict[str, list[float]] = {"A": [], "B": []}
    startups: list[float] = []
    with tempfile.TemporaryDirectory(prefix="detconf-bench-") as tmp:
        results = Path(tmp) / "results.jsonl"
        probe_out = Path(tmp) / "first-test"
        suite_cmd = [sys.executable, "-m", "pytest", "conformance", "--source", "torch-docs", "-n", "0",
                     "--hypothesis-profile", "ci", "--device", args.device, "-q", "-p", "no:cacheprovider",
                     "-p", "startup_probe", "--results", str(results), "--fresh-results", *args.extra]
        print(f"B: {' '.join(suite_cmd[1:])}")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "benchmarks"),
                                                                         os.environ.get("PYTHONPATH")])),
                   DETCONF_BENCH_FIRST_TEST=str(probe_out))
        for i in range(args.repeat):
            wall, cpu, out = timed(alert_cmd, test_file.parent)
            walls["A"].append(wall)
            cpus["A"].append(cpu)
            print(f"  A#{i + 1}: {wall:6.2f} s wall {cpu:6.2f} s CPU  load {load()}  — {last_line(out)}")
            if out.returncode not in (0, 1):
                print(f"ERROR: the alert tests did not run (exit {out.returncode}): {last_line(out)}", file=sys.stderr)
                return 1
            probe_out.unlink(missing_ok=True)
            started = time.time()
            wall, cpu, out = timed(suite_cmd, ROOT, env)
            walls["B"].append(wall)
            cpus["B"].append(cpu)
            try:
                startups.append(float(probe_out.read_text()) - started)
            except (OSError, ValueError):
                pass
            shown = f"start-up {startups[-1]:.2f} s  " if len(startups) == i + 1 else ""
            print(f"  B#{i + 1}: {wall:6.2f} s wall {cpu:6.2f} s CPU  {shown}load {load()}  — {last_line(out)}")
            if out.returncode not in (0, 1):
                print(f"ERROR: the suite did not run (exit {out.returncode}): {last_line(out)}", file=sys.stderr)
                return 1
    med = {k: (statistics.median(walls[k]), statistics.median(cpus[k])) for k in walls}
    print(f"median of {args.repeat}: alert tests {med['A'][0]:.2f} s wall / {med['A'][1]:.2f} s CPU; "
          f"suite {med['B'][0]:.2f} s wall / {med['B'][1]:.2f} s CPU")
    print(f"ratio suite / alert tests: {med['B'][0] / med['A'][0]:.2f} wall, {med['B'][1] / med['A'][1]:.2f} CPU"
          + (f"; suite start-up to first test {statistics.median(startups):.2f} s" if startups else "")
          + f"; load {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
