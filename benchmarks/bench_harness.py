"""Harness overhead: per entry, the time the harness spends judging it vs the
raw time of the same examples' op calls; and the wall time of the whole
documented CPU suite with ``-n 0`` and ``-n auto``.

    python benchmarks/bench_harness.py [--device cpu] [--examples 6] [--no-suite]

Prints figures; asserts nothing. "raw" is the op (and backward, where the
entry documents one) called ``runs`` times on fresh clones of each example,
exactly the calls the harness makes, without drawing, comparing or capturing.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conformance.plan import plan  # noqa: E402
from conformance.harness import judge  # noqa: E402
from engine import docspec, program  # noqa: E402
from engine.devices import resolve_devices  # noqa: E402
from engine.runner import _fresh_inputs, _seeded_like, flatten_tensors  # noqa: E402


def raw_seconds(progs: list[program.Program], runs: int) -> float:
    total = 0.0
    for prog in progs:
        for _ in range(runs):
            inputs = _fresh_inputs(prog)
            start = time.perf_counter()
            try:
                outputs = flatten_tensors(prog.fn(**inputs))
                if prog.grad_inputs:
                    roots = [t for _, t in outputs if t.requires_grad]
                    torch.autograd.backward(roots, [_seeded_like(t, i) for i, t in enumerate(roots)])
            except RuntimeError:
                pass  # a documented raise costs what it costs
            total += time.perf_counter() - start
    return total


def drawn_programs(case, device, examples: int) -> list[program.Program]:
    progs: list[program.Program] = []
    recipe = program.recipe_for(case.entry.op)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data):
        for kwargs in case.entry.case_kwargs():
            progs.append(recipe(data.draw, case.entry, kwargs, device))

    draw()
    return progs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--examples", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--no-suite", action="store_true", help="skip the -n 0 / -n auto wall-time runs")
    args = parser.parse_args()

    backend = resolve_devices([args.device])[0]
    device = backend.torch_device()
    cases = [c for c in plan(docspec.installed_entries(), [args.device], ["error"])]
    prof = settings(max_examples=args.examples, derandomize=True, database=None, deadline=None)
    print(f"torch {torch.__version__}, device {args.device} ({backend.describe()['device_name']}), "
          f"{args.examples} examples x {args.runs} runs, mode error, {torch.get_num_threads()} threads")
    print(f"{'entry':58} {'harness s':>10} {'raw s':>8} {'ratio':>6}")
    totals = [0.0, 0.0]
    with torch.random.fork_rng():
        for case in cases:
            start = time.perf_counter()
            judge(case, backend, runs=args.runs, hypothesis_settings=prof)
            harness = time.perf_counter() - start
            torch.use_deterministic_algorithms(True)
            try:
                raw = raw_seconds(drawn_programs(case, device, args.examples), args.runs)
            finally:
                torch.use_deterministic_algorithms(False)
            totals[0] += harness
            totals[1] += raw
            print(f"{case.entry.id[:58]:58} {harness:10.4f} {raw:8.4f} {harness / max(raw, 1e-9):6.1f}")
    print(f"{'TOTAL':58} {totals[0]:10.3f} {totals[1]:8.3f} {totals[0] / max(totals[1], 1e-9):6.1f}")

    if not args.no_suite:
        for workers in ("0", "auto"):
            cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--source",
                   "torch-docs", "--device", args.device, "--hypothesis-profile", "ci", "-n", workers,
                   "--results", str(ROOT / "reports" / "out" / f"bench-n{workers}.jsonl"),
                   "--no-report-build"]
            start = time.perf_counter()
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - start
            last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-200:]
            print(f"suite -n {workers:4}: {wall:7.2f} s wall (pytest start-up included) — {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
