"""Benchmark: ``python -m detconf.reports build`` and ``diff`` on synthetic results (a script, not a test).

    python benchmarks/bench_reports.py [--rows 100000 1000000] [--shape lean|suite] [--keep DIR]

The synthetic results look like a fleet of runners: 3 torch versions x 3 devices (one runner
each, one results file each) x 3 modes x 3 compile settings = 81 matrix columns, over entries
of every source (torch-docs lists, ascend, flag-api, repro-notes, sweep). Each runner's file
holds three runs one after another (eager, aot_eager, inductor), each with its run record and
end record; the eager run is written in schema 2 (no compile field), the others in schema 3;
the first runner's file ends with a re-run of 1 % of its cells, whose rows win.

``build`` reads all runner files (N rows). ``diff`` compares two single files of N/2 rows each
(N rows in all; the cells of two torch versions, 27 columns: every device x mode x compile
setting), the second with 2 % of the verdicts changed, 1 % of the fingerprints changed, 1 % of
the cells removed and new entries added.

Each command runs as a child process; its wall time and peak resident memory (``wait4``'s
``ru_maxrss``) are printed in a table. Row shape: ``lean`` rows (about 0.75 kB: the fields of
a row and a small ``detail``) or ``suite`` rows (about 1.9 kB, ``detail`` shaped like the
suite's evidence: the example, six fingerprints, the reproducer).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from detconf.vocabulary import COMPILERS, FAILING, MODES, REPORT_ONLY  # noqa: E402

TORCH_VERSIONS = ("2.12.0", "2.13.0", "2.14.1")
DEVICES = (("cpu", "x86_64 (2 threads)"), ("cuda", "NVIDIA H100 80GB HBM3"), ("npu", "Ascend 910B"))
LISTS = (("torch-docs", "deterministic"), ("torch-docs", "raises"), ("ascend", "deterministic"),
         ("flag-api", "api"), ("repro-notes", "notes"), ("sweep", "sweep"))
PER_ENTRY = len(DEVICES) * len(MODES) * len(COMPILERS)  # cells of one torch version


def run_record(run_id: str, schema: int, torch_version: str, device: str, device_name: str) -> str:
    return json.dumps({
        "record": "run", "schema": schema, "run_id": run_id, "started": "2026-11-21T10:53:00Z",
        "env": {"torch_version": torch_version, "torch_git": "0123456789abcdef", "cuda": None, "cudnn": None,
                "driver": None, "python": "3.11.7", "platform": "Linux-x86_64", "suite_revision": "abc1234",
                "hypothesis_profile": "ci", "hypothesis_seed": 0, "doc_version": None, "argv": [],
                "devices": [{"device": device, "device_name": device_name, "versions": {}}]},
    })


def end_record(run_id: str, written: int) -> str:
    return json.dumps({"record": "end", "schema": 3, "run_id": run_id, "ended": "2026-11-21T11:53:00Z",
                       "exitstatus": 0, "planned": written, "written": written})


def _detail(e: int, device: str, shape: str, fingerprint_seed: int) -> str:
    fps = [f"{(fingerprint_seed * 6 + i) * 2654435761 % (1 << 64):016x}" * 4 for i in range(6)]
    if shape == "lean":
        return json.dumps({"max_abs_diff": 0.0, "example": {"shape": [e % 13, 3]},
                           "fingerprints": {"0": fps[0]}, "verdicts_per_example": {"conforms": 6}})
    return json.dumps({
        "example": f"torch.op_{e} on {device}: x: float32[{e % 97}, 3], index: int64[15]; dim=0",
        "fingerprint": fps[0], "fingerprints": {str(i): fp for i, fp in enumerate(fps)},
        "identical": True, "observed_per_example": ["deterministic"], "raised_runs": 0,
        "repro": "import torch\nfrom engine.strategies import build_indices, build_tensor\n\n"
                 f"x = build_tensor(({e % 97}, 3), torch.float32, {e * 7919 % 65536}, device='{device}', "
                 "low=-10, high=10, contiguous=False)\n"
                 f"index = build_indices((15,), 1, {e * 104729 % 65536}, duplicates=0.5, unique=False, "
                 f"device='{device}', dtype=torch.int64)\n\n"
                 f"def fn(x, index):\n    return torch.op_{e}(x, 0, index)\n\nout = fn(x=x, index=index)",
        "runs": 2, "verdicts_per_example": {"conforms": 6}, "warned_runs": 0,
    })


def result_row(e: int, torch_version: str, device: str, device_name: str, mode: str, compile_: str | None,
               run_id: str, schema: int, verdict: str, shape: str, fingerprint_seed: int) -> str:
    source, list_name = LISTS[e % len(LISTS)]
    promise = "raises" if list_name == "raises" else "deterministic"
    entry_id = f"op_{e}(variant={e % 7})"
    row = {
        "record": "result", "schema": schema, "run_id": run_id, "entry_id": entry_id, "op": f"torch.op_{e}",
        "sentence": f":func:`torch.op_{e}` when called on a CUDA tensor with variant={e % 7} <b>& more</b>",
        "source": source, "list_name": list_name, "position": e, "doc_version": None, "promise": promise,
        "devices": [], "device": device, "device_name": device_name, "mode": mode, "phase": "program",
        "targets": [f"aten.op_{e}"], "reach": 1.0, "dispatched": {f"aten.op_{e}.default": 6},
        "expected": promise, "observed": "deterministic", "verdict": verdict, "examples": 6, "runs": 2,
        "torch_version": torch_version, "nodeid": f"conformance/test_documented.py::test_documented"
                                                  f"[{source}:{entry_id}-{device}-{mode}]",
        "duration_s": 0.01 + (e % 100) / 1000,
    }
    if compile_ is not None:
        row["compile"] = compile_
    text = json.dumps(row)
    return text[:-1] + ', "detail": ' + _detail(e, device, shape, fingerprint_seed) + "}"


#: The failing verdicts a run writes (``missing`` is the reports' own word for a case without a row).
WRITTEN_FAILING = tuple(v for v in FAILING if v not in REPORT_ONLY)


def _verdict(rng: random.Random, mode: str) -> str:
    if mode == "off":
        return rng.choice(("nondeterminism-seen", "no-difference-seen"))
    r = rng.random()
    return "conforms" if r < 0.85 else "unsupported" if r < 0.93 else "skipped" if r < 0.95 else rng.choice(WRITTEN_FAILING)


def write_fleet(directory: Path, n_rows: int, shape: str, seed: int = 0) -> list[Path]:
    """One results file per runner (torch version x device), n_rows result rows in all."""
    rng = random.Random(seed)
    per_runner = -(-n_rows // (len(TORCH_VERSIONS) * len(DEVICES)))
    n_entries = -(-per_runner // (len(MODES) * len(COMPILERS)))
    paths, left = [], n_rows
    for t in TORCH_VERSIONS:
        for device, name in DEVICES:
            path = directory / f"results-{t}-{device}.jsonl"
            rerun = []
            with open(path, "w", encoding="utf-8") as f:
                for compile_ in COMPILERS:
                    run_id = f"run-{t}-{device}-{compile_}"
                    schema = 2 if compile_ == "eager" else 3
                    f.write(run_record(run_id, schema, t, device, name) + "\n")
                    written = 0
                    for e in range(n_entries):
                        for mode in MODES:
                            if left == 0 or written * len(COMPILERS) >= per_runner:
                                break
                            f.write(result_row(e, t, device, name, mode, None if schema == 2 else compile_,
                                               run_id, schema, _verdict(rng, mode), shape, e) + "\n")
                            written += 1
                            left -= 1
                            if not paths and rng.random() < 0.01:
                                rerun.append((e, mode, compile_, None if schema == 2 else compile_))
                    f.write(end_record(run_id, written) + "\n")
                if rerun:  # a re-run of a few cells of this runner, appended
                    run_id = f"rerun-{t}-{device}"
                    f.write(run_record(run_id, 3, t, device, name) + "\n")
                    for e, mode, compile_, _ in rerun:
                        f.write(result_row(e, t, device, name, mode, compile_, run_id, 3, "conforms", shape, e)
                                + "\n")
                    f.write(end_record(run_id, len(rerun)) + "\n")
            paths.append(path)
    return paths


def write_diff_pair(directory: Path, n_rows: int, shape: str, seed: int = 1) -> tuple[Path, Path]:
    """Two files of n_rows rows each: the cells of torch 2.13.0, then of 2.14.1 with changes."""
    rng = random.Random(seed)
    n_entries = -(-n_rows // PER_ENTRY)
    shift = n_entries // 100  # B drops the first 1 % of the entries and adds as many new ones
    out = []
    for side, t, entries in (("a", "2.13.0", range(n_entries)), ("b", "2.14.1", range(shift, n_entries + shift))):
        path = directory / f"diff-{side}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            run_id = f"run-{side}"
            f.write(run_record(run_id, 3, t, "cpu", "x86_64") + "\n")
            written = 0
            for e in entries:
                cell = 0
                for device, name in DEVICES:
                    for mode in MODES:
                        for compile_ in COMPILERS:
                            cell += 1
                            if written == n_rows:
                                continue
                            verdict = _verdict(random.Random(e * 100 + cell), mode)
                            fingerprint_seed = e
                            if side == "b":
                                r = rng.random()
                                if r < 0.01:
                                    continue  # the cell is gone
                                if r < 0.03:
                                    verdict = _verdict(rng, mode)
                                elif r < 0.04:
                                    fingerprint_seed = e + 1
                            f.write(result_row(e, t, device, name, mode, compile_, run_id, 3, verdict, shape,
                                               fingerprint_seed) + "\n")
                            written += 1
            f.write(end_record(run_id, written) + "\n")
        out.append(path)
    return out[0], out[1]


def measure(argv: list[str]) -> tuple[float, float, float, int, str]:
    """Run ``python -m detconf.reports ARGV`` as a child: (wall seconds, CPU seconds, peak RSS in MiB,
    exit status, stderr tail). CPU and peak RSS come from ``wait4`` (the child with the helper
    processes it waited for; the peak is the largest of them)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "detconf.reports", *argv], cwd=ROOT, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode("utf-8", "replace").strip()[-300:]
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--shape", choices=("lean", "suite"), default="lean")
    parser.add_argument("--keep", help="write inputs and outputs under this folder (kept; reused when present)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command (the best is shown)")
    args = parser.parse_args(argv)

    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-reports-"))
    load_before = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, {os.uname().machine}; python {sys.version.split()[0]}; "
          f"row shape {args.shape}")
    table = []
    try:
        for n in args.rows:
            folder = base / f"{args.shape}-{n}"
            stamp = folder / "inputs-complete"
            if not stamp.exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                t0 = time.perf_counter()
                write_fleet(folder, n, args.shape)
                write_diff_pair(folder, n // 2, args.shape)
                stamp.write_text("")
                print(f"{n:,} rows: inputs written in {time.perf_counter() - t0:.0f} s")
            fleet = sorted(str(p) for p in folder.glob("results-*.jsonl"))
            fleet_mb = sum(os.path.getsize(p) for p in fleet) / 1e6
            a, b = folder / "diff-a.jsonl", folder / "diff-b.jsonl"
            diff_mb = (a.stat().st_size + b.stat().st_size) / 1e6
            for what, command, size, rows in (
                    ("build", ["build", *fleet, "--out", str(folder / "out"), "--quiet"], fleet_mb, n),
                    ("diff", ["diff", str(a), str(b)], diff_mb, n)):
                best = None
                for _ in range(args.repeat):
                    wall, cpu, rss, code, tail = measure(command)
                    if code not in (0, 1):
                        raise SystemExit(f"{what} failed ({code}): {tail}")
                    best = (wall, cpu, rss) if best is None or wall < best[0] else best
                table.append((what, n, rows, size, *best))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average at the start: {load_before:.1f}, at the end: {os.getloadavg()[0]:.1f} "
          "(other work on the machine lengthens wall time)")
    print(f"{'command':<8} {'rows read':>10} {'input':>9} {'wall':>8} {'CPU':>8} {'peak RSS':>9}")
    for what, n, rows, size, wall, cpu, rss in table:
        print(f"{what:<8} {rows:>10,} {size:>6.0f} MB {wall:>6.1f} s {cpu:>6.1f} s {rss:>5.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
