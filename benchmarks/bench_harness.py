"""Harness overhead per example: what judging an entry costs beyond the op itself, and what the
dispatch trace (reach) adds.

    python benchmarks/bench_harness.py [--device cpu] [--examples 6] [--runs 2] [--filter TEXT] [--suite]

For each documented entry (mode ``error``) the benchmark times, in this process:

- ``harness``: :func:`conformance.harness.judge` of the case, Hypothesis included;
- ``raw``: the op (and backward, where the entry documents one) called ``runs`` times on fresh
  clones of each of the same examples (same seed, same call forms), exactly the calls the harness
  makes for the verdict, without drawing, tracing, comparing, capturing or the differential run;
- ``trace``: for the same examples, one traced run minus one untraced run (interleaved, median of
  5), times ``runs``: what reach costs.

It prints, per entry, both times and the ratio; then the median over entries of the per-example
overhead (``(harness - raw) / examples``), of the ratio harness / raw, and of the trace's share of
the harness time, and the totals. ``--suite`` adds the wall time of the whole documented CPU suite
(``-n 0``). Asserts nothing; figures depend on the machine: quote them with it and the load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

from detconf.conformance.harness import drawn_programs, judge  # noqa: E402
from detconf.conformance.plan import plan  # noqa: E402
from detconf.engine import docspec, program  # noqa: E402
from detconf.engine.determinism import deterministic_mode  # noqa: E402
from detconf.engine.devices import resolve_devices  # noqa: E402
from detconf.engine.runner import _fresh_inputs, _run_once, _seeded_like, flatten_tensors  # noqa: E402


def raw_seconds(progs: list[program.Program], runs: int, synchronize) -> float:
    total = 0.0
    for prog in progs:
        for _ in range(runs):
            inputs = _fresh_inputs(prog)
            start = time.perf_counter()
            try:
                outputs = flatten_tensors(prog.fn(**inputs))
                if prog.grad_inputs:
                    roots = [t for _, t in outputs if t.requires_grad and (t.is_floating_point() or t.is_complex())]
                    torch.autograd.backward(roots, [_seeded_like(t, i) for i, t in enumerate(roots)])
                synchronize()
            except RuntimeError:
                pass  # a documented raise costs what it costs
            total += time.perf_counter() - start
    return total


def trace_seconds(progs: list[program.Program], runs: int, mode: str, synchronize) -> float:
    """What tracing adds to ``runs`` runs of each program: median over 5 of (traced - untraced)."""
    total = 0.0
    with deterministic_mode(mode, rng=True):
        for prog in progs:
            diffs = []
            for _ in range(5):
                t0 = time.perf_counter()
                _run_once(prog, synchronize, trace=False)
                t1 = time.perf_counter()
                _run_once(prog, synchronize)
                t2 = time.perf_counter()
                diffs.append((t2 - t1) - (t1 - t0))
            total += max(0.0, statistics.median(diffs)) * runs
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--examples", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--filter", default="", help="only entries whose id contains this text")
    parser.add_argument("--suite", action="store_true", help="also time the whole documented suite (-n 0)")
    args = parser.parse_args()

    backend = resolve_devices([args.device])[0]
    device = backend.torch_device()
    cases = [c for c in plan(docspec.installed_entries(), [args.device], ["error"]) if args.filter in c.entry.id]
    prof = settings(max_examples=args.examples, derandomize=True, database=None, deadline=None)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, device {args.device} ({backend.describe()['device_name']}), "
          f"{args.examples} examples x {args.runs} runs, mode error, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')} (PASSIVE slows the raw op), load {load}")
    print(f"{'entry':58} {'harness s':>10} {'raw s':>8} {'ratio':>6} {'trace %':>8}")
    totals = {"harness": 0.0, "raw": 0.0, "trace": 0.0, "examples": 0}
    per_example, ratios, trace_shares = [], [], []
    with torch.random.fork_rng():
        for case in cases:
            start = time.perf_counter()
            row = judge(case, backend, runs=args.runs, hypothesis_settings=prof)
            harness = time.perf_counter() - start
            examples = max(1, int(row.get("examples") or 0))
            progs = drawn_programs(case, device, prof, examples)
            with deterministic_mode("error"):
                raw = raw_seconds(progs, args.runs, backend.synchronize)
            trace = trace_seconds(progs, args.runs, "error", backend.synchronize)
            totals["harness"] += harness
            totals["raw"] += raw
            totals["trace"] += trace
            totals["examples"] += examples
            per_example.append((harness - raw) / examples)
            ratios.append(harness / max(raw, 1e-9))
            trace_shares.append(trace / harness)
            print(f"{case.entry.id[:58]:58} {harness:10.4f} {raw:8.4f} {ratios[-1]:6.1f} {100 * trace_shares[-1]:7.1f}%")
    print(f"{'TOTAL':58} {totals['harness']:10.3f} {totals['raw']:8.3f} "
          f"{totals['harness'] / max(totals['raw'], 1e-9):6.1f} {100 * totals['trace'] / totals['harness']:7.1f}%")
    print(f"per example, median over {len(cases)} entries: harness overhead {1e3 * statistics.median(per_example):.2f} ms, "
          f"harness / raw {statistics.median(ratios):.1f}x, trace {100 * statistics.median(trace_shares):.1f} % of "
          f"the harness time; {totals['examples']} examples")

    if args.suite:
        with tempfile.TemporaryDirectory(prefix="detconf-bench-") as tmp:
            cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--source",
                   "torch-docs", "--device", args.device, "--hypothesis-profile", "ci", "-n", "0",
                   "--results", str(Path(tmp) / "results.jsonl")]
            start = time.perf_counter()
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - start
            last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-200:]
            print(f"suite -n 0: {wall:7.2f} s wall (start-up and matrix build included) — {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
