"""Wall time of the perturbation tier (``--perturb``) against the normal tier, on one source.

Runs ``pytest conformance --source torch-docs -n 2 --hypothesis-profile ci`` twice on the CPU,
without and with ``--perturb``, each in a fresh process writing its own results file; prints the
two wall times, their ratio (target: at most 3), the verdicts of each run, and the perturbation
tier's sensitivity (examples whose bytes changed with one thread; mode-off cells whose processes
differed) and cross-process comparison. Usage::

    python benchmarks/bench_perturb.py [--workers 2] [--source torch-docs] [--repeat N] [--keep DIR] [-- extra pytest args]

``--keep DIR`` keeps both results files there (``normal.jsonl``, ``perturb.jsonl``), for
``python -m detconf.reports sensitivity DIR/perturb.jsonl``. The load average before and after the
runs is printed with the figures: on a shared machine it says how far they can be trusted. The
CPU seconds of each run's process tree are printed beside its wall time (less sensitive to other
users of the machine), and ``--repeat N`` alternates the two runs N times and compares medians.

Figures depend on the machine: quote them with the machine and the command.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The ratio the tier is meant to stay within.
TARGET_RATIO = 3.0


def _cpu_of_children() -> float:
    """User plus system CPU seconds of every descendant reaped so far (pytest, its workers,
    their zygotes and the processes those forked)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(args: argparse.Namespace, results: Path, perturb: bool) -> tuple[float, float, int]:
    cmd = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-n", args.workers,
           "--hypothesis-profile", "ci", "--device", "cpu", "--source", args.source, "--results", str(results),
           "--no-report-build", *(["--perturb"] if perturb else []), *args.extra]
    started, cpu = time.perf_counter(), _cpu_of_children()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall, cpu = time.perf_counter() - started, _cpu_of_children() - cpu
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    print(f"  {'perturb' if perturb else 'normal '}: {wall:7.1f} s wall, {cpu:7.1f} s CPU  "
          f"(pytest exit {proc.returncode}: {tail[0]})")
    return wall, cpu, proc.returncode


def _load() -> str:
    """The 1, 5 and 15 minute load averages (other users of a shared machine count too)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _rows(results: Path) -> list[dict]:
    rows = []
    for line in results.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("record") == "result":
            rows.append(record)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2", help="pytest-xdist -n value (default 2)")
    parser.add_argument("--source", default="torch-docs")
    parser.add_argument("--keep", metavar="DIR", help="keep the two results files in this folder")
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two runs this many times; "
                        "the medians are compared (default 1)")
    parser.add_argument("extra", nargs="*", help="further pytest arguments (after --)")
    args = parser.parse_args(argv)
    problem = (f"--repeat must be at least 1, got {args.repeat}" if args.repeat < 1 else
               f"--keep: {args.keep} exists and is not a folder"
               if args.keep and Path(args.keep).exists() and not Path(args.keep).is_dir() else None)
    if problem:
        print(f"bench_perturb.py: error: {problem}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="detconf-bench-perturb-") as tmp:
        normal_results, perturb_results = Path(tmp) / "normal.jsonl", Path(tmp) / "perturb.jsonl"
        print(f"source {args.source}, -n {args.workers}, profile ci, cpu; load average before: {_load()}")
        walls: dict[bool, list[float]] = {False: [], True: []}
        cpus: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeat):  # alternated, so that a change in the machine's load hits both
            for perturb, path in ((False, normal_results), (True, perturb_results)):
                path.unlink(missing_ok=True)
                wall, cpu, _ = _run(args, path, perturb=perturb)
                walls[perturb].append(wall)
                cpus[perturb].append(cpu)
        normal_s, perturb_s = statistics.median(walls[False]), statistics.median(walls[True])
        cpu_ratio = statistics.median(cpus[True]) / max(statistics.median(cpus[False]), 1e-9)
        print(f"load average after: {_load()}")
        print(f"median of {args.repeat}: normal {normal_s:.1f} s, perturb {perturb_s:.1f} s wall; "
              f"CPU ratio perturb/normal {cpu_ratio:.2f}x")
        normal, perturbed = _rows(normal_results), _rows(perturb_results)
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for path in (normal_results, perturb_results):
                shutil.copyfile(path, Path(args.keep) / path.name)

    ratio = perturb_s / normal_s if normal_s else float("inf")
    print(f"ratio perturb/normal: {ratio:.2f}x (target <= {TARGET_RATIO:g}x): {'within' if ratio <= TARGET_RATIO else 'OVER'}")
    for name, rows in (("normal", normal), ("perturb", perturbed)):
        counts = Counter(r["verdict"] for r in rows)
        print(f"  {name} verdicts ({len(rows)} rows): " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    before = {(r["entry_id"], r["mode"], r["phase"]): r["verdict"] for r in normal}
    changed = [(key, before[key], r["verdict"]) for r in perturbed
               if (key := (r["entry_id"], r["mode"], r["phase"])) in before and before[key] != r["verdict"]]
    print(f"cells whose verdict the perturbation tier changed: {len(changed)}")
    for (entry, mode, phase), was, now in sorted(changed)[:20]:
        print(f"  {entry} [{mode}, {phase}]: {was} -> {now}")
    across = [r["detail"].get("across_processes") or {} for r in perturbed]
    print(f"examples compared across processes: {sum(a.get('compared', 0) for a in across)}, "
          f"differing: {sum(a.get('differing', 0) for a in across)}")
    threads = [(r, (r["detail"].get("sensitivity") or {}).get("threads")) for r in perturbed]
    probed = [(r, t) for r, t in threads if t]
    sensitive = sorted({(r["entry_id"], r["mode"]) for r, t in probed if t["differing"]})
    print(f"thread-count sensitivity (1 thread vs the pool, not a verdict): {len(sensitive)} of {len(probed)} "
          f"probed cells changed bytes" + (": " + ", ".join(f"{e} [{m}]" for e, m in sensitive[:12]) if sensitive else ""))
    off = [r for r in perturbed if (r["detail"].get("sensitivity") or {}).get("across_processes")]
    differs = sorted(r["entry_id"] for r in off if r["detail"]["sensitivity"]["across_processes"] == "differs")
    print(f"mode off across processes (not a verdict): {len(differs)} of {len(off)} cells differed"
          + (": " + ", ".join(differs[:12]) if differs else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
