"""A pytest plugin for ``benchmarks/bench_tests.py``: when each process of a run (the controller,
every xdist worker) configured, finished collecting and finished its session, and when each test
started and ended (in the process that ran it: not again in the xdist controller), with the
machine's idle CPU time at that moment (Linux's ``/proc/stat``: idle and I/O wait, in seconds
summed over the CPUs; None elsewhere).

Loaded with ``-p benchmarks.timeline`` from the repository's root (``bench_tests.py`` loads it into
every run it measures); writes one JSON line per event, ``[kind, unix time, node id or "", idle seconds]``, into
``$DETCONF_BENCH_TIMELINE/<worker or "main">.jsonl``, flushed as it goes. Without that variable
it does nothing. :func:`figures` reads such a folder back."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

VARIABLE = "DETCONF_BENCH_TIMELINE"
_out = None


def idle_seconds() -> float | None:
    """The machine's idle and I/O-wait time since boot, summed over its CPUs (None: not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _write(kind: str, name: str = "") -> None:
    global _out
    folder = os.environ.get(VARIABLE)
    if not folder:
        return
    if _out is None:
        _out = open(Path(folder) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a", encoding="utf-8")
    _out.write(json.dumps([kind, time.time(), name, idle_seconds()]) + "\n")
    _out.flush()


#: Whether this process is an xdist controller, to which the workers relay their tests' events:
#: those are the workers' to write.
_relayed = False


def pytest_configure(config):
    global _relayed
    _relayed = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    _write("configure")


def pytest_collection_finish(session):
    _write("collected")


def pytest_runtest_logstart(nodeid, location):
    if not _relayed:
        _write("start", nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if not _relayed:
        _write("finish", nodeid)


def pytest_sessionfinish(session):
    _write("sessionfinish")


def figures(folder: Path, start: float, end: float, idle_start: float | None = None,
            idle_end: float | None = None, top: int = 5) -> dict:
    """What a folder of events says about a run that started at ``start`` and ended at ``end``
    (unix times; ``idle_start``/``idle_end``: :func:`idle_seconds` then): when the first test
    started and the last ended, each worker's last test end, the machine's idle core-seconds
    before the first test, while tests ran and after the last one (None where not measured), and
    the ``top`` tests during which the machine idled longest (wall and idle seconds each; a
    test's idle time is the machine's, shared with whatever ran beside it)."""
    tests: dict[str, tuple[float, float | None]] = {}
    first = last = None  # (time, idle) of the first test start and of the last test end
    workers: dict[str, float] = {}
    for path in sorted(Path(folder).glob("*.jsonl")):
        opened: dict[str, tuple[float, float | None]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            kind, when, name, idle = json.loads(line)
            if kind == "start":
                opened[name] = (when, idle)
                if first is None or when < first[0]:
                    first = (when, idle)
            elif kind == "finish" and name in opened:
                began, idle_began = opened.pop(name)
                tests[name] = (when - began, idle - idle_began if None not in (idle, idle_began) else None)
                if last is None or when > last[0]:
                    last = (when, idle)
                workers[path.stem] = max(workers.get(path.stem, when), when)

    def between(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else b - a

    ranked = sorted(((v[1], v[0], k) for k, v in tests.items() if v[1] is not None), reverse=True)[:top]
    return {
        "tests": len(tests),
        "first_test_s": None if first is None else first[0] - start,
        "after_last_test_s": None if last is None else end - last[0],
        "worker_last_test_s": {w: t - start for w, t in sorted(workers.items())},
        "core_s": (end - start) * (os.cpu_count() or 1),
        "idle_s": between(idle_start, idle_end),
        "idle_before_tests_s": between(idle_start, first and first[1]),
        "idle_during_tests_s": between(first and first[1], last and last[1]),
        "idle_after_tests_s": between(last and last[1], idle_end),
        "idlest": [(name, wall, waited) for waited, wall, name in ranked],
    }
