"""How the harness's tests are shared between xdist workers: a module at a time, heaviest first.

xdist's default (``--dist load``) deals single tests out in collection order. Two things cost a run
of the harness on two cores with that: a module's tests drawn by both workers build its module
fixtures twice (a browser, a pip-installed copy, a suite run's reproducers); and whichever long
module comes last keeps one worker busy while the other has nothing left (the tail of a run of
2026-11-28 at 2502e66: ``tests/test_warm.py`` last on both workers, one ending 4.2 s after the
other). Here each module goes whole to one worker (xdist's ``loadfile`` scheduling), and the
modules go out in order of the seconds they took in a measured run, heaviest first
(:data:`WEIGHTS`, written by ``python benchmarks/bench_tests.py --write-weights``): each worker takes
the next when it is nearly done with its own, so that the short modules fill in at the end.

A module not in :data:`WEIGHTS` (new since the measurement) counts as the median one. The order
changes no test's outcome: each module's tests keep their own order and run in one process, as
they do under ``-n 0``. Only xdist's default is replaced: ``--dist load`` on the command line cannot
be told from it, so ``--dist worksteal`` (or ``loadscope``, ...) is the way to have another of
xdist's schedulings, and is used as given.
"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Iterable

#: The seconds each test module took in a measured run (summed over its tests' phases), with the
#: command and machine that measured them. ``DETCONF_TESTS_WEIGHTS=PATH``: another such file.
WEIGHTS = Path(__file__).resolve().parent / "module_seconds.json"


def module_of(nodeid: str) -> str:
    """``tests/test_x.py`` for ``tests/test_x.py::test_y[z]`` (a class's tests stay with their module)."""
    return nodeid.split("::", 1)[0]


def load_weights(path: Path | None = None) -> dict[str, float]:
    """The measured seconds per module (``tests/test_x.py``) in ``path`` (default:
    ``$DETCONF_TESTS_WEIGHTS`` or :data:`WEIGHTS`); empty where the file is missing or not such a
    table (the order then is the collection's)."""
    path = path or Path(os.environ.get("DETCONF_TESTS_WEIGHTS") or WEIGHTS)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    seconds = data.get("seconds") if isinstance(data, dict) else None
    if not isinstance(seconds, dict):
        return {}
    return {str(k): float(v) for k, v in seconds.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}


def heaviest_first(modules: Iterable[str], weights: dict[str, float]) -> list[str]:
    """``modules`` (each once, in first-seen order) sorted by weight, heaviest first; a module
    without a weight counts as the median of those with one; equal weights keep their order."""
    seen = list(dict.fromkeys(modules))
    known = [weights[m] for m in seen if m in weights]
    default = statistics.median(known) if known else 0.0
    return sorted(seen, key=lambda m: -weights.get(m, default))


def order_items(items: list, weights: dict[str, float]) -> None:
    """Sort pytest ``items`` in place: modules heaviest first, each module's tests together and in
    their own order."""
    modules = heaviest_first((module_of(item.nodeid) for item in items), weights)
    rank = {m: k for k, m in enumerate(modules)}
    items.sort(key=lambda item: rank[module_of(item.nodeid)])  # stable


def module_scheduling(config, log):
    """xdist's own ``loadfile`` scheduling (a module's tests to one worker), the modules in
    collection order (which :func:`order_items` made heaviest first), or None where this xdist
    has none."""
    try:
        from xdist.scheduler import LoadFileScheduling
    except ImportError:  # an xdist without it: its own default
        return None
    if hasattr(config.option, "loadscopereorder"):
        # xdist >= 3.6 would put the modules with the most tests first (its default): keep ours.
        config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)
