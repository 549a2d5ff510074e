"""Benchmark: how often a reproducer script sees two runs of a stale read as identical (a script, not a test).

    python benchmarks/bench_stale_read.py [--repeat 4000] [--seed 0]

``empty_like`` with the deterministic mode off returns memory nobody wrote: its sweep cell
(``sweep:empty_like-cpu-off``, a five-float sample) sees the runs differ, and so should the
torch-only script ``python -m detconf.reports upstream`` writes for it. Which bytes the memory
holds is the allocator's; two runs can be handed memory holding the same bytes. The script
overwrites each run's outputs once it has copied them (``scribble_outputs``), so that a block
handed back to the next run holds other bytes.

The cell is run once by the suite (``--source sweep --mode off``, CPU) and its script written;
then, each in a fresh ``python -I`` interpreter, the script as written and the script without
the overwrite make their runs ``--repeat`` times over, the heap disturbed before each time
(a seeded number of small tensors allocated, some written, some kept), and the times the runs
were identical are counted. Printed per script: identical, of how many. Asserts nothing; quote
the figures with the machine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_alert_tests, beside this file

from bench_alert_tests import OneLineParser  # noqa: E402  (this folder is the script's sys.path[0])

ROOT = Path(__file__).resolve().parent.parent
CELL = "conformance/test_documented.py::test_documented[sweep:empty_like-cpu-off]"

# Run inside the fresh interpreter: the script's definitions without its main(), then the runs.
DRIVER = r'''
import random, sys, torch
path, repeat, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
source = open(path, encoding="utf-8").read().replace('if __name__ == "__main__":\n    main()', "")
space = {"__name__": "repro"}
exec(compile(source, path, "exec"), space)
kept, identical = [], 0
for time in range(repeat):
    rng = random.Random(seed * 1_000_003 + time)
    junk = [torch.empty(rng.randint(1, 40)) for _ in range(rng.randint(0, 30))]
    for t in junk[::2]:
        t.fill_(rng.random())
    kept.append(junk[:rng.randint(0, len(junk))])
    del junk
    runs = [space["run_once"](space["program"], space["MODE"]) for _ in range(space["RUNS"])]
    if all(r[1] is None for r in runs) and all(space["same_bytes"](runs[0][0], r[0]) for r in runs[1:]):
        identical += 1
print(identical)
'''


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python benchmarks/bench_stale_read.py", description=__doc__.splitlines()[0],
                      name="bench_stale_read")
    p.add_argument("--repeat", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.repeat < 1 or args.seed < 0:
        p.error("--repeat takes a whole number of at least 1, --seed one of at least 0")
    sys.path.insert(0, str(ROOT))
    from detconf.reports import upstream

    with tempfile.TemporaryDirectory(prefix="bench-stale-read-") as tmp:
        results = Path(tmp) / "results.jsonl"
        suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                                "--hypothesis-profile", "ci", "--device", "cpu", "--no-report-build",
                                "--fresh-results", "--results", str(results), "--source", "sweep", "--mode", "off",
                                CELL], cwd=ROOT, capture_output=True, text=True)
        if suite.returncode != 0:
            print(f"bench_stale_read: error: the suite's run of {CELL} failed: "
                  f"{(suite.stdout + suite.stderr).strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        [row] = upstream.read_rows(upstream._records(results), results)
        script = upstream.repro_script(row)
        if script.count(upstream.SCRIBBLE_LINE) != 1:
            print("bench_stale_read: error: the script does not overwrite its outputs in the one place this "
                  "benchmark takes the overwrite out of", file=sys.stderr)
            return 1
        print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; checkout {ROOT}")
        print(f"cell: {CELL.split('[')[1].rstrip(']')}, verdict {row['verdict']}; {args.repeat} times, seed {args.seed}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        planted = script.replace(upstream.SCRIBBLE_LINE, "")
        for name, text in (("as written", script), ("without the overwrite", planted)):
            path = Path(tmp) / f"{name.replace(' ', '-')}.py"
            path.write_text(text, encoding="utf-8")
            proc = subprocess.run([sys.executable, "-I", "-c", DRIVER, str(path), str(args.repeat), str(args.seed)],
                                  cwd=tmp, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"bench_stale_read: error: the script {name} failed: "
                      f"{proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 1
            print(f"{name:>22}: identical runs {int(proc.stdout.split()[-1]):>5} of {args.repeat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
