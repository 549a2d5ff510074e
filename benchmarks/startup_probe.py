"""pytest plugin for the benchmarks: writes the wall-clock time at which the first test's call
starts to the file named by ``DETCONF_BENCH_FIRST_TEST`` (``-p startup_probe`` with this folder
on ``PYTHONPATH``)."""
import os
import time

_written = False


def pytest_runtest_call(item):
    global _written
    path = os.environ.get("DETCONF_BENCH_FIRST_TEST")
    if path and not _written:
        _written = True
        with open(path, "w", encoding="utf-8") as f:
            f.write(repr(time.time()))
