"""Benchmark: ``reports.build.build`` on 100,000 synthetic result rows (a script, not a test).

    python benchmarks/bench_reports.py [--rows N] [--lean] [--keep DIR]

The rows mimic a merged CPU run and GPU run over two torch versions: 2 torch versions x
2 devices x 3 modes = 12 matrix columns, so 100,000 rows give about 8,300 entries, written as
two results files (one per device). By default each row is shaped like the suite's own (about
1.8 kB, most of it the ``detail`` evidence); ``--lean`` makes 0.8 kB rows. Prints the time of
each stage (wall and CPU) and the size of each output. Goal: under 5 s on a 2-core machine.
The picture holds at most ``reports.matrix.PNG_MAX_ENTRIES`` rows (failing entries first), so
its cost does not grow with the number of entries.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detconf.vocabulary import FAILING, MODES, SCHEMA_VERSION  # noqa: E402

TORCH_VERSIONS = ("2.12.0", "2.13.0")
DEVICES = (("cpu", "x86_64 (2 threads)"), ("cuda", "NVIDIA H100 80GB HBM3"))
LISTS = (("torch-docs", "deterministic"), ("torch-docs", "raises"), ("ascend", "deterministic"),
         ("flag-api", "api"), ("repro-notes", "notes"), ("sweep", "sweep"))


def header(run_id: str, torch_version: str, device: str, device_name: str) -> dict:
    return {
        "record": "run", "schema": SCHEMA_VERSION, "run_id": run_id, "started": "2026-11-21T10:53:00Z",
        "env": {
            "torch_version": torch_version, "torch_git": "0123456789abcdef", "cuda": None,
            "cudnn": None, "driver": None, "python": "3.11.7", "platform": "Linux-x86_64",
            "suite_revision": "abc1234", "hypothesis_profile": "ci", "hypothesis_seed": 0,
            "doc_version": None, "argv": [],
            "devices": [{"device": device, "device_name": device_name, "versions": {}}],
        },
    }


def evidence(e: int, device: str, rng: random.Random) -> dict:
    """A ``detail`` object shaped like the suite's: example, fingerprints, reproducer (~1.3 kB)."""
    examples = 6
    return {
        "example": f"torch.op_{e} on {device}: x: float32[{e % 97}, 3], index: int64[15]; dim=0",
        "fingerprint": f"{rng.getrandbits(256):064x}",
        "fingerprints": {str(i): f"{rng.getrandbits(256):064x}" for i in range(examples)},
        "identical": True, "observed_per_example": ["deterministic"], "raised_runs": 0,
        "repro": "import torch\nfrom engine.strategies import build_indices, build_tensor\n\n"
                 f"x = build_tensor(({e % 97}, 3), torch.float32, {rng.getrandbits(31)}, "
                 f"device='{device}', low=-10, high=10, contiguous=False)\n"
                 f"index = build_indices((15,), 1, {rng.getrandbits(16)}, duplicates=0.5, unique=False, "
                 f"device='{device}', dtype=torch.int64)\n\n"
                 f"def fn(x, index):\n    return torch.op_{e}(x, 0, index)\n\nout = fn(x=x, index=index)",
        "runs": 2, "verdicts_per_example": {"conforms": examples}, "warned_runs": 0,
    }


def synthetic_rows(n_rows: int, seed: int = 0, lean: bool = False):
    """Yield ``(device, record)`` pairs: ``n_rows`` result records plus one header per run.

    Rows are shaped like the suite's (about 1.8 kB of JSON, most of it ``detail``);
    ``lean=True`` gives a small ``detail`` instead (about 0.8 kB a row)."""
    rng = random.Random(seed)
    per_entry = len(TORCH_VERSIONS) * len(DEVICES) * len(MODES)
    n_entries = -(-n_rows // per_entry)
    runs = {}
    for t in TORCH_VERSIONS:
        for device, name in DEVICES:
            run_id = f"run-{t}-{device}"
            runs[(t, device)] = run_id
            yield device, header(run_id, t, device, name)
    emitted = 0
    for e in range(n_entries):
        source, list_name = LISTS[e % len(LISTS)]
        entry_id = f"op_{e}(variant={e % 7})"
        promise = "raises" if list_name == "raises" else "deterministic"
        for t in TORCH_VERSIONS:
            for device, name in DEVICES:
                for mode in MODES:
                    if emitted == n_rows:
                        return
                    if mode == "off":
                        verdict = rng.choice(("nondeterminism-seen", "no-difference-seen"))
                    else:
                        r = rng.random()
                        verdict = ("conforms" if r < 0.85 else "unsupported" if r < 0.93
                                   else "skipped" if r < 0.95 else rng.choice(FAILING))
                    yield device, {
                        "record": "result", "schema": SCHEMA_VERSION, "run_id": runs[(t, device)],
                        "entry_id": entry_id, "op": f"torch.op_{e}",
                        "sentence": f":func:`torch.op_{e}` when called on a CUDA tensor with "
                                    f"variant={e % 7} <b>& more</b>",
                        "source": source, "list_name": list_name, "position": e,
                        "doc_version": None,
                        "promise": promise, "devices": [], "device": device, "device_name": name,
                        "mode": mode, "expected": promise, "observed": "deterministic",
                        "verdict": verdict, "examples": 20, "runs": 2, "torch_version": t,
                        "detail": ({"max_abs_diff": 0.0, "example": {"shape": [e % 13, 3]},
                                    "fingerprints": {"0": f"{e:064x}"}} if lean
                                   else evidence(e, device, rng)),
                        "nodeid": f"tests/test_conformance.py::test_entry[{entry_id}-{device}-{mode}]",
                        "duration_s": 0.01,
                    }
                    emitted += 1


def write_inputs(directory: Path, n_rows: int, lean: bool = False) -> list[Path]:
    files = {device: open(directory / f"results-{device}.jsonl", "w", encoding="utf-8")
             for device, _ in DEVICES}
    try:
        for device, rec in synthetic_rows(n_rows, lean=lean):
            files[device].write(json.dumps(rec) + "\n")
    finally:
        for f in files.values():
            f.close()
    return [directory / f"results-{device}.jsonl" for device, _ in DEVICES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keep", help="write the outputs here instead of a temp dir")
    parser.add_argument("--lean", action="store_true",
                        help="small rows (0.8 kB) instead of rows shaped like the suite's (1.8 kB)")
    args = parser.parse_args(argv)

    from reports.build import build

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        inputs = write_inputs(tmp, args.rows, lean=args.lean)
        t_gen = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in inputs)
        out = Path(args.keep) if args.keep else tmp / "out"
        t0, c0 = time.perf_counter(), time.process_time()
        result = build(inputs, out)
        total, cpu_total = time.perf_counter() - t0, time.process_time() - c0
        print(f"rows: {args.rows:,} in {len(inputs)} files ({size / 1e6:.1f} MB), "
              f"generated in {t_gen:.2f} s")
        print(f"matrix: {result.summary['entries']:,} entries x {len(result.summary['columns'])} columns")
        print(f"  {'stage':<9} {'wall':>7} {'cpu':>7}")
        for stage, seconds in result.timings.items():
            print(f"  {stage:<9} {seconds:6.2f}s {result.cpu_timings[stage]:6.2f}s")
        print(f"  {'total':<9} {total:6.2f}s {cpu_total:6.2f}s   (goal: under 5 s)")
        for p in result.files:
            print(f"  {p.name:<13} {p.stat().st_size / 1e6:7.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
