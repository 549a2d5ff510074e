"""Where the harness's own tests spend their time: the README's command 2, timed, with the slowest
tests and the time per test file.

    python benchmarks/bench_tests.py [-n auto] [--slowest 20] [--cold] [--write-weights [PATH]] [-- extra pytest args]

Runs ``python -m pytest tests -n N -p no:cacheprovider -q --durations=0`` in a child process and
prints the wall time, the CPU time of the child tree (processes left running at its end too), the
load average before and after, when the first test started and how long the run went on after the
last one ended, and the machine's idle CPU time before, during and after the tests with the tests
it idled longest beside (``benchmarks/timeline.py``, loaded into the run with ``-p``), the tests that failed or errored (pytest's short summary lines, and
where pytest's whole output is kept then), the ``--slowest`` slowest test phases (setup, call, teardown: pytest's own ``--durations`` lines), the
summed durations per test file, largest first, and the inner runs the tests made (``python -m
pytest``, ``python -m detconf.reports``, ``python -I`` scripts): how many were forked from a warm
interpreter (``tests/warm.py``), per kind, and how many ran cold, and why; how many xdist
workers of forked ``-n`` runs were forked too, how many of ``detconf.child``'s processes, and how
many ``python -c`` and ``python -m pytest`` starts of forked ``python -m detconf`` commands
(``tests/warm_server.py``), and how many ``python -m detconf`` commands a test signals while they
run (``tests/warm.py`` ``popen``) were forked. ``--cold``: every inner run cold
(``DETCONF_TESTS_COLD=1``), as before the warm runner;
``--inner-log PATH``: keep the inner runs' log (the time per test file is printed either way);
``--write-weights``: after a run in which every test passed, write the time per test file into
``tests/module_seconds.json`` (or PATH), the order in which ``tests/schedule.py`` hands the
modules to xdist's workers.
Asserts nothing; quote the figures with the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import timeline  # the plugin the run loads as benchmarks.timeline (its figures read here)
from bench_alert_tests import load, timed_tree  # this folder is the script's sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))  # the repository's tests package, after this folder
from tests.schedule import WEIGHTS  # noqa: E402 - the file tests/schedule.py reads
DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", dest="workers", default="auto")
    p.add_argument("--slowest", type=int, default=20)
    p.add_argument("--cold", action="store_true", help="every inner pytest run in a fresh interpreter")
    p.add_argument("--inner-log", metavar="PATH", help="keep the inner runs' log there (a JSON line per run: "
                   "test, warm, why, flavour, seconds, command, cwd)")
    p.add_argument("--write-weights", metavar="PATH", nargs="?", const=str(WEIGHTS),
                   help="write the seconds per test file there (default: tests/module_seconds.json), the order in which "
                   "tests/schedule.py hands the modules to xdist's workers; only after a run in which every test passed")
    args = p.parse_args(own)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    log = Path(tempfile.mkdtemp(prefix="bench-tests-")) / "inner.jsonl"
    env["DETCONF_TESTS_WARM_LOG"] = str(log)
    if args.cold:
        env["DETCONF_TESTS_COLD"] = "1"
    events = log.parent / "timeline"
    events.mkdir()
    env[timeline.VARIABLE] = str(events)
    command = [sys.executable, "-m", "pytest", "tests", "-n", args.workers, "-p", "no:cacheprovider", "-q",
               "--durations=0", "--durations-min=0", "-rfE", "-p", "benchmarks.timeline", *extra]
    print(f"{os.cpu_count()} CPUs, load {load()}: {' '.join(command[1:])}", flush=True)
    start, idle_start = time.time(), timeline.idle_seconds()
    wall, cpu, out, outlived = timed_tree(command, ROOT, env)
    end, idle_end = start + wall, timeline.idle_seconds()
    seen = timeline.figures(events, start, end, idle_start, idle_end)
    rows = [(float(m.group(1)), m.group(2), m.group(3)) for m in map(DURATION.match, out.stdout.splitlines()) if m]
    summary = next((line.strip("= ") for line in reversed(out.stdout.splitlines()) if " in " in line and "passed" in line),
                   out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()[-200:])
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s, load after {load()}: {summary}")
    if outlived:
        print(f"({outlived} processes outlived the run and were waited for, their CPU counted: the warm servers "
              "its workers share leave once it is over, and processes whose parents a test killed)")
    print(*timeline_lines(seen), sep="\n")
    failing = [line for line in out.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if failing:
        kept = Path(tempfile.mkdtemp(prefix="bench-tests-output-")) / "pytest.txt"
        kept.write_text(out.stdout + ("\n--- standard error\n" + out.stderr if out.stderr else ""), encoding="utf-8")
        print("\nnot passed (pytest's short summary):", *(f"  {line[:300]}" for line in failing),
              f"pytest's whole output, tracebacks included: {kept}", sep="\n")
    warned = warnings_summary(out.stdout)
    if warned:
        print("\npytest's warnings summary:", *(f"  {line[:300]}" for line in warned), sep="\n")
    print(f"\nthe {args.slowest} slowest test phases:")
    for seconds, phase, nodeid in sorted(rows, reverse=True)[:args.slowest]:
        print(f"  {seconds:7.2f} s  {phase:8s} {nodeid}")
    per_file: dict[str, float] = defaultdict(float)
    for seconds, _, nodeid in rows:
        per_file[nodeid.split("::")[0]] += seconds
    print("\nper test file (summed over the workers):")
    for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds:8.1f} s  {name}")
    if args.write_weights:
        if out.returncode != 0 or failing:
            print(f"\nnot written: {args.write_weights} (the run did not pass)")
        else:
            Path(args.write_weights).write_text(weights_json(per_file, command, wall, cpu), encoding="utf-8")
            print(f"\nwritten: {args.write_weights} ({len(per_file)} test files)")
    inner = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.is_file() else []
    if args.inner_log and log.is_file():
        shutil.copyfile(log, args.inner_log)
    shutil.rmtree(log.parent, ignore_errors=True)
    workers = [r for r in inner if r.get("flavour") == "xdist-worker"]  # a line each, when it starts
    children = [r for r in inner if r.get("flavour") == "child"]  # detconf.child's processes, a line each
    # python -c and python -m pytest started by forked detconf commands (gpu-run's probe and steps)
    plain = [r for r in inner if r.get("flavour") in ("python-c", "python-m-pytest")]
    # python -m detconf commands a test signals while they run (tests/warm.py popen), a line each
    popened = [r for r in inner if r.get("flavour") == "popen"]
    inner = [r for r in inner if r.get("flavour") not in ("xdist-worker", "child", "python-c", "python-m-pytest", "popen")]
    forked = [r for r in inner if r["warm"]]
    print(f"\ninner runs: {len(forked)} forked warm ({sum(r['seconds'] for r in forked):.1f} s), "
          f"{len(inner) - len(forked)} cold ({sum(r['seconds'] for r in inner if not r['warm']):.1f} s)")
    kinds: dict[str, list] = defaultdict(list)
    for r in inner:
        kinds[r.get("flavour") or "other"].append(r)
    for kind, runs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        warm = [r for r in runs if r["warm"]]
        print(f"  {kind}: {len(warm)} forked ({sum(r['seconds'] for r in warm):.1f} s), {len(runs) - len(warm)} cold")
    why: dict[str, list] = defaultdict(list)
    for r in inner:
        if not r["warm"]:
            why[r["why"]].append(r)
    for reason, runs in sorted(why.items(), key=lambda kv: -len(kv[1])):
        print(f"  cold, {reason}: {len(runs)} ({sum(r['seconds'] for r in runs):.1f} s)")
    reasons = sorted({r["why"] for r in workers if not r["warm"]})
    print(f"  xdist workers of forked -n runs: {sum(r['warm'] for r in workers)} forked, "
          f"{sum(not r['warm'] for r in workers)} started by execnet{': ' if reasons else ''}{'; '.join(reasons)}")
    started = defaultdict(int)
    for r in children:
        if not r["warm"]:
            started[r["why"]] += 1
    print(f"  detconf.child's processes: {sum(r['warm'] for r in children)} forked, "
          f"{len(children) - sum(r['warm'] for r in children)} started fresh"
          + "".join(f"; {n} {why}" for why, n in sorted(started.items(), key=lambda kv: -kv[1])))
    print(f"  python -m detconf started with warm.popen: {sum(r['warm'] for r in popened)} forked, "
          f"{sum(not r['warm'] for r in popened)} started fresh")
    for kind, label in (("python-c", "python -c"), ("python-m-pytest", "python -m pytest")):
        runs = [r for r in plain if r["flavour"] == kind]
        print(f"  {label} in forked detconf commands: "
              f"{sum(r['warm'] for r in runs)} forked, {sum(not r['warm'] for r in runs)} started fresh")
    files: dict[str, list] = defaultdict(list)
    for r in inner:
        files[r["test"].split("::")[0] or "(outside a test)"].append(r)
    print(f"\ninner runs per test file, the {args.slowest} longest in all:")
    for name, runs in sorted(files.items(), key=lambda kv: -sum(r["seconds"] for r in kv[1]))[:args.slowest]:
        print(f"  {sum(r['seconds'] for r in runs):8.1f} s  {len(runs):4d} runs  {name}")
    return 0 if out.returncode == 0 else 1


def weights_json(per_file: dict[str, float], command: list[str], wall: float, cpu: float) -> str:
    """The seconds per test file as ``tests/schedule.py`` reads them (heaviest first), with the
    command, machine and commit that measured them."""
    import platform

    from detconf.revision import revision  # the suite's own: git describe without rewriting the index

    measured = {
        "command": "python benchmarks/bench_tests.py " + " ".join(command[command.index("-n"):command.index("-n") + 2]),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, torch {_torch()}",
        "commit": revision(ROOT).describe,
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
    }
    seconds = {name: round(s, 2) for name, s in sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0]))}
    return json.dumps({"measured": measured, "seconds": seconds}, indent=1) + "\n"


def _torch() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "none"


def timeline_lines(seen: dict) -> list[str]:
    """The figures of :func:`timeline.figures` as the benchmark prints them."""
    def s(value: float | None) -> str:
        return "not measured" if value is None else f"{value:.1f} s"

    lines = [f"timeline: the first test started {s(seen['first_test_s'])} after the run did, the run ended "
             f"{s(seen['after_last_test_s'])} after the last test; each worker's last test ended at "
             + (", ".join(f"{w} {t:.1f} s" for w, t in seen["worker_last_test_s"].items()) or "(none)")]
    if seen["idle_s"] is None:
        lines.append("idle CPU: not measured here (no /proc/stat)")
    else:
        lines.append(f"idle CPU: {seen['idle_s']:.1f} of {seen['core_s']:.1f} core-seconds "
                     f"({100 * seen['idle_s'] / seen['core_s']:.1f} %): {s(seen['idle_before_tests_s'])} before the "
                     f"first test, {s(seen['idle_during_tests_s'])} while tests ran, {s(seen['idle_after_tests_s'])} "
                     "after the last")
        lines += ["  the machine idled longest while these ran (idle, wall):"] + [
            f"    {waited:6.2f} s {wall:7.2f} s  {name}" for name, wall, waited in seen["idlest"]]
    return lines


def warnings_summary(stdout: str) -> list[str]:
    """The lines of pytest's "warnings summary" section (empty where it printed none)."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("=") and "warnings summary" in line), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return [line for line in lines[start + 1:end] if line.strip() and not line.startswith("-- Docs:")]


if __name__ == "__main__":
    sys.exit(main())
