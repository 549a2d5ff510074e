"""What the dispatch trace (reach) costs per example run.

For a few documented entries, builds one example per entry and times ``_run_once`` with and
without the trace (same program, same mode), interleaved, median of N runs each.

    python benchmarks/bench_trace.py [--repeat 200]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import detconf.conformance.registry  # noqa: E402,F401
from detconf.conformance.catalog import load_catalog  # noqa: E402
from detconf.engine.determinism import deterministic_mode  # noqa: E402
from detconf.engine.program import recipe_for  # noqa: E402
from detconf.engine.runner import _run_once  # noqa: E402

ENTRIES = ("put_(accumulate=True)[cpu]", "index_add[cuda]", "MaxPool3d.backward[cuda]",
           "interpolate(mode='linear'|'bilinear'|'bicubic'|'trilinear').backward[cuda]", "Conv2d[cuda]",
           "EmbeddingBag(mode='max').backward[cuda]")


def build(entry):
    out = []

    @settings(max_examples=1, derandomize=True, database=None, deadline=None)
    @given(st.data())
    def draw(data):
        out.append(recipe_for(entry.op)(data.draw, entry, entry.case_kwargs()[0], torch.device("cpu")))

    draw()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    entries = {e.id: e for e in load_catalog(["torch-docs"])}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeat} runs each")
    print(f"{'entry':<75} {'plain µs':>9} {'traced µs':>10} {'overhead':>9}")
    for entry_id in ENTRIES:
        if entry_id not in entries:
            continue
        prog = build(entries[entry_id])
        plain, traced = [], []
        with deterministic_mode("warn_only"):
            for _ in range(10):
                _run_once(prog, lambda: None)
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                _run_once(prog, lambda: None, trace=False)
                t1 = time.perf_counter()
                _run_once(prog, lambda: None)
                t2 = time.perf_counter()
                plain.append(t1 - t0)
                traced.append(t2 - t1)
        p, t = statistics.median(plain) * 1e6, statistics.median(traced) * 1e6
        print(f"{entry_id:<75} {p:9.0f} {t:10.0f} {100 * (t - p) / p:8.0f}%")


if __name__ == "__main__":
    main()
