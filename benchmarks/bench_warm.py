"""What one inner run costs when the harness tests fork it from their warm interpreter
(``tests/warm.py``): the fixed part every forked command pays, and a suite run's start.

    python benchmarks/bench_warm.py [--runs 20] [--only NAME ...]

Each command runs ``--runs`` times through ``tests/warm.py`` ``run`` (forked from a ``pytest``
server, which starts once, before the timing; with ``DETCONF_TESTS_COLD=1`` every run is a fresh
interpreter instead), one after the other. Printed per command: how the runs went (forked or
cold), their exit status, and per run the wall time and the machine's busy CPU time (all cores,
from ``/proc/stat``: the server's child is not this process's child, so ``getrusage`` would miss
it). The commands:

- ``c``: ``python -c pass``, the fork and the exit alone;
- ``version``: ``python -m pytest --version``, pytest's start without a session;
- ``usage``: ``python -m pytest conformance --runs 0``, a suite run up to its usage error
  (options and data files checked, nothing collected);
- ``collect``: one documented case collected (``--collect-only``) of the default sources: options
  and every data file checked, the devices, the plan and the catalog, the suite's modules imported;
- ``case``: that case run (``--hypothesis-profile ci``, six examples), its results written to a
  temporary file, no report built.

The busy time counts everything the machine did meanwhile: run it on an idle machine and
quote the figures with the machine. Asserts nothing.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from bench_alert_tests import OneLineParser, load  # this folder is the script's sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: One documented case, on the CPU, in error mode, of the default sources (every data file read).
ONE_CASE = ["-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-n", "0", "--device", "cpu",
            "--mode", "error", "-k", "index_add", "--hypothesis-profile", "ci", "--no-report-build", "--fresh-results"]
COMMANDS = {
    "c": ["-c", "pass"],
    "version": ["-m", "pytest", "--version"],
    "usage": ["-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--runs", "0", "-k", "none"],
    "collect": [*ONE_CASE, "--collect-only"],
    "case": ONE_CASE,
}
#: The commands that take a results file (a temporary one, given after the command).
WRITES_RESULTS = ("collect", "case")


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy (every core, not idle or waiting), from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python benchmarks/bench_warm.py", description=__doc__.splitlines()[0], name="bench_warm")
    p.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    p.add_argument("--only", action="append", choices=sorted(COMMANDS), help="just this command (repeatable)")
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 10_000:
        p.error(f"--runs must be 1 to 10000, got {args.runs}")
    if not Path("/proc/stat").is_file():
        p.error("needs /proc/stat (Linux) for the machine's busy time")
    from tests import warm

    env = warm.base_env()
    warm.run([sys.executable, "-c", "pass"], cwd=ROOT, env=env, timeout=300)  # the server starts here
    print(f"{os.cpu_count()} CPUs, load {load()}; {args.runs} runs each")
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as scratch:  # the runs' results: not kept
        results = Path(scratch) / "results.jsonl"
        for name in args.only or list(COMMANDS):
            command = [sys.executable, *COMMANDS[name], *(["--results", str(results)] if name in WRITES_RESULTS else [])]
            before = dict(warm.stats)
            busy, start = busy_seconds(), time.perf_counter()
            codes = set()
            for _ in range(args.runs):
                codes.add(warm.run(command, cwd=ROOT, env=env, timeout=300).returncode)
            wall, busy = time.perf_counter() - start, busy_seconds() - busy
            forked = warm.stats["warm"] - before["warm"]
            how = "forked" if forked == args.runs else ("cold" if not forked else f"{forked} forked")
            print(f"{name:8s} {how:10s} exit {','.join(map(str, sorted(codes)))}  "
                  f"wall {1000 * wall / args.runs:6.1f} ms  busy {1000 * busy / args.runs:6.1f} ms a run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
