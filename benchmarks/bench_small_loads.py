"""Benchmark: reading small results files, one after another, in one process (a script, not a test).

    python benchmarks/bench_small_loads.py [--rows 10 100 1000] [--repeat 50]

The harness's tests, the plugin's summary at the end of a run and the report commands read results
files of a few rows to a few thousand; a fixed cost per file (buffers, set-up of the parsers) shows
there, not in ``bench_reports.py``'s files of a million rows. For each size, one file of that many
rows (``bench_reports.py``'s synthetic ``lean`` rows of one runner: a run record, the rows, an end
record) is read ``--repeat`` times with ``detconf.reports.load.load`` after one read to warm up;
printed: the file's size and the median and smallest CPU time of one read (this process's
``time.process_time``). Asserts nothing; quote the figures with the machine.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_reports, beside this file

from bench_alert_tests import OneLineParser  # noqa: E402  (this folder is the script's sys.path[0])
from bench_reports import ROOT, write_diff_pair  # noqa: E402  (which puts the checkout on sys.path)

from detconf.reports.load import load  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python benchmarks/bench_small_loads.py", description=__doc__.splitlines()[0],
                      name="bench_small_loads")
    p.add_argument("--rows", type=int, nargs="+", default=[10, 100, 1000])
    p.add_argument("--repeat", type=int, default=50)
    args = p.parse_args(argv)
    if args.repeat < 1 or any(n < 1 for n in args.rows):
        p.error("--rows and --repeat take whole numbers of at least 1")
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; checkout {ROOT}")
    print(f"{'rows':>6} {'file':>10} {'median':>10} {'best':>10}")
    with tempfile.TemporaryDirectory(prefix="bench-small-loads-") as tmp:
        for n in args.rows:
            folder = Path(tmp) / str(n)
            folder.mkdir()
            path, _ = write_diff_pair(folder, n, "lean")
            load([path])  # imports and caches warmed up
            times = []
            for _ in range(args.repeat):
                start = time.process_time()
                load([path])
                times.append(time.process_time() - start)
            print(f"{n:>6} {path.stat().st_size / 1000:>8.1f} kB {statistics.median(times) * 1000:>7.1f} ms "
                  f"{min(times) * 1000:>7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
