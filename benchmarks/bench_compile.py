"""Wall time of the compiled torch-docs axis, and where it goes.

Runs ``pytest conformance --source torch-docs --compile SETTING`` (default: inductor, both
deterministic modes, ``-n auto``, profile ``ci``) on the CPU in a fresh process, then reads the
rows it wrote: total wall time, the seconds spent compiling (``compile_s``) against the rest,
the slowest cases, and the verdicts. Usage::

    python benchmarks/bench_compile.py [--compile inductor] [--workers auto] [--device cpu] [-- extra pytest args]

Figures depend on the machine: quote them with the machine and the command.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", default="inductor", choices=("eager", "aot_eager", "inductor"))
    parser.add_argument("--workers", default="auto", help="pytest-xdist -n value (default auto)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--source", default="torch-docs")
    parser.add_argument("extra", nargs="*", help="further pytest arguments (after --)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="detconf-bench-compile-") as tmp:
        results = Path(tmp) / "results.jsonl"
        cmd = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-n", args.workers,
               "--hypothesis-profile", "ci", "--device", args.device, "--source", args.source,
               "--compile", args.compile, "--results", str(results), "--no-report-build", *args.extra]
        print("command:", " ".join(cmd[1:]))
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - started
        rows = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()] if results.exists() else []
    rows = [r for r in rows if r.get("record") == "result"]
    if not rows:
        print(f"no rows (pytest exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return 1
    durations = [r.get("duration_s") or 0.0 for r in rows]
    compiles = [r.get("compile_s") or 0.0 for r in rows]
    print(f"pytest exit {proc.returncode}; {len(rows)} cases; wall {wall:.1f} s")
    print(f"case time (sum over workers): {sum(durations):.1f} s, of which compiling {sum(compiles):.1f} s "
          f"({100 * sum(compiles) / max(sum(durations), 1e-9):.0f} %); running and judging {sum(durations) - sum(compiles):.1f} s")
    print(f"per case: median {statistics.median(durations):.2f} s, median compile {statistics.median(compiles):.2f} s")
    print("slowest cases:")
    for r in sorted(rows, key=lambda r: -(r.get("duration_s") or 0))[:8]:
        print(f"  {r['duration_s']:7.1f} s (compile {r.get('compile_s') or 0:6.1f} s)  {r['entry_id']} [{r['mode']}]")
    print("verdicts:", dict(Counter(r["verdict"] for r in rows).most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
