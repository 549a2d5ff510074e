"""Where a command's CPU time goes, process by process: the harness tests by default.

    sudo python benchmarks/bench_processes.py [--top 40] [--keep DIR] [-- COMMAND ...]

The command (default: ``python -m pytest tests -n 2 -p no:cacheprovider -q``, README command 2
with two workers) runs under the kernel's process accounting (``accton``, Debian's ``acct``
package: every process's CPU time, parent and exit, whether or not it ran ``exec``) and under
``strace -f -e trace=execve`` (the arguments of every ``exec``); with ``--keep DIR`` the
command's output is kept there too (``output.txt``). Joined on the process id, each
process is named by the command it ran, and a process that forked without ``exec`` (a pytest run
forked from the harness tests' warm interpreter, a Chromium renderer) by its parent's command.
Printed: the CPU seconds of each kind of process, most first, with how many there were.

``strace`` costs CPU of its own (it is listed); compare kinds within one run, not a run with
and without it. Needs root (``accton``), ``strace`` and ``dump-acct``: without them, one line and
exit status 2. Process accounting is system-wide: the benchmark switches it on into its own file
and off when the command ends (a machine that kept accounting on elsewhere must switch it back).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [sys.executable, "-m", "pytest", "tests", "-n", "2", "-p", "no:cacheprovider", "-q"]
EXECVE = re.compile(r'(\d+)\s+execve\("[^"]*", \[(.*?)\](?:\.\.\.)?, .*\) = 0')
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def execs(trace: Path) -> dict[int, list[str]]:
    """Process id -> the arguments of its last successful ``exec`` (strace's output)."""
    seen: dict[int, list[str]] = {}
    for line in trace.read_text(encoding="utf-8", errors="replace").splitlines():
        m = EXECVE.match(line)
        if m:
            seen[int(m.group(1))] = [a.encode().decode("unicode_escape", errors="replace") for a in ARG.findall(m.group(2))]
    return seen


def accounted(pacct: Path) -> list[tuple[str, float, int, int, str]]:
    """(command name, CPU seconds, pid, parent pid, flags) of every process that ended (dump-acct)."""
    out = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 12:
            continue
        rows.append((f[0], (float(f[2]) + float(f[3])) / 100, int(f[9]), int(f[10]), f[11]))
    return rows


def kind(args: list[str]) -> str:
    """A short name for a command: the program, then its first arguments, temporary paths elided."""
    if not args:
        return "?"
    words = [Path(args[0]).name] + [re.sub(r"/tmp/\S+", "/tmp/…", a) for a in args[1:]]
    text = " ".join(words)
    if "from detconf.child import main" in text:  # the suite's fresh-process targets: name the target
        target = re.search(r"sys\.exit\(main\(\)\)\s+(\S+)", text)
        return f"{words[0]} (detconf.child) {target.group(1) if target else ''}"
    return " ".join(text.split())[:140]


def table(rows, seen: dict[int, list[str]]) -> list[tuple[float, int, str]]:
    groups: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
    for comm, cpu, pid, ppid, flags in rows:
        if "F" in flags:  # forked, no exec: it ran its parent's program
            name = "fork of " + (kind(seen[ppid]) if ppid in seen else f"{comm} (parent not traced)")
        else:
            name = kind(seen[pid]) if pid in seen else f"{comm} (exec not traced)"
        groups[name][0] += cpu
        groups[name][1] += 1
    return sorted(((cpu, n, name) for name, (cpu, n) in groups.items()), reverse=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, command = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=40, help="kinds of process to print (default 40)")
    p.add_argument("--keep", metavar="DIR", help="keep the accounting file and the trace there")
    args = p.parse_args(own)
    if args.top < 1:
        p.error("--top must be at least 1")
    for tool in ("accton", "dump-acct", "strace"):
        if shutil.which(tool) is None:
            print(f"bench_processes: error: {tool} is not installed (Debian: apt-get install acct strace)", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("bench_processes: error: process accounting (accton) needs root", file=sys.stderr)
        return 2
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-processes-"))
    folder.mkdir(parents=True, exist_ok=True)
    pacct, trace = folder / "pacct", folder / "execve.txt"
    pacct.write_bytes(b"")
    command = command or DEFAULT
    on = subprocess.run(["accton", str(pacct)], capture_output=True, text=True)
    if on.returncode != 0:
        print(f"bench_processes: error: accton: {(on.stderr or on.stdout).strip()[:200]}", file=sys.stderr)
        return 2
    try:
        run = subprocess.run(["strace", "-f", "--seccomp-bpf", "-e", "trace=execve", "-e", "signal=none", "-qq",
                              "-s", "400", "-o", str(trace), *command], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        subprocess.run(["accton", "off"], capture_output=True)
    tail = run.stdout.strip().splitlines()[-1:] or [""]
    (folder / "output.txt").write_text(run.stdout, encoding="utf-8")
    rows = accounted(pacct)
    ranked = table(rows, execs(trace))
    total = sum(cpu for cpu, _, _ in ranked)
    print(f"{' '.join(command)}\nexit {run.returncode}: {tail[0][:200]}")
    print(f"{len(rows)} processes, {total:.1f} s of CPU (strace's own included)\n")
    print(f"{'CPU s':>8} {'share':>6} {'count':>6}  process")
    for cpu, n, name in ranked[:args.top]:
        print(f"{cpu:8.1f} {100 * cpu / total if total else 0:5.1f}% {n:6d}  {name}")
    if args.keep:
        print(f"\nthe command's output, the accounting file and the trace: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
