"""Several devices of one type: which device a test worker uses, how many workers fit, and
which device a case's examples are compared with.

- Worker *i* (pytest-xdist's ``gw<i>``; the only process without xdist is worker 0) uses
  device ``i mod count`` of each backend. ``count`` is what the backend sees, so
  ``CUDA_VISIBLE_DEVICES`` (and the like) decides which physical devices take part.
- The per-device worker cap: a device with ``free`` bytes free takes ``free // need`` workers
  (``need``: the backend's ``worker_memory`` or ``--worker-memory``); the cap is the largest
  number of workers that, dealt out ``i mod count``, puts no device over its share.
- The device-to-device check compares a case's examples on the worker's device with the same
  examples on its *peer*: the next device of the same model.
"""
from __future__ import annotations

import re
from typing import Sequence

from detconf.engine.devices import Backend

#: A worker that could run on no device at all: a cap is never below this.
MIN_WORKERS = 1


def worker_number(workerid: str | None) -> int:
    """``gw3`` -> 3; the controller or a run without xdist -> 0."""
    match = re.fullmatch(r"gw(\d+)", workerid or "")
    return int(match.group(1)) if match else 0


def device_index(worker: int, count: int) -> int:
    """The device worker ``worker`` uses among ``count`` devices."""
    return worker % count if count > 0 else 0


def workers_per_device(workers: int, count: int) -> list[int]:
    """How many of ``workers`` workers land on each of ``count`` devices (``i mod count``)."""
    return [len(range(d, workers, count)) for d in range(count)]


def cap_from_room(room: Sequence[int]) -> int:
    """The most workers such that device ``d`` gets at most ``room[d]`` of them (``i mod count``)."""
    if not room:
        return MIN_WORKERS
    count = len(room)
    n = 0
    while all(w <= r for w, r in zip(workers_per_device(n + 1, count), room)):
        n += 1
    return max(n, MIN_WORKERS)


def worker_room(backend: Backend, need: int | None, processes: int = 1) -> list[int] | None:
    """Workers each device of ``backend`` has memory for; None where there is no cap (no
    per-worker need, or the backend cannot say how much memory is free). ``processes``: the
    processes each worker judges a case in at once, each needing that memory (the perturbation
    tier's forked processes)."""
    need = need if need is not None else backend.worker_memory
    if not need or backend.free_memory is None:
        return None
    need = int(need) * max(1, int(processes))
    room = []
    for index in range(backend.count()):
        free = backend.free_memory(index)
        if free is None:
            return None
        room.append(int(free) // int(need))
    return room or None


def worker_cap(backends: Sequence[Backend], need: int | None = None, processes: int = 1) -> tuple[int, str] | None:
    """The most workers every backend has memory for, and why (one line); None: no cap.
    ``processes``: as in :func:`worker_room`."""
    best: tuple[int, str] | None = None
    for backend in backends:
        room = worker_room(backend, need, processes)
        if room is None:
            continue
        cap = cap_from_room(room)
        per = need if need is not None else backend.worker_memory
        each = f"{per / 2**30:.2f} GiB each" + (f" in each of its {processes} processes" if processes > 1 else "")
        why = f"{backend.name}: {len(room)} device(s) with room for {', '.join(map(str, room))} worker(s) of {each}"
        if best is None or cap < best[0]:
            best = (cap, why)
    return best


def peer(backend: Backend, index: int) -> int | None:
    """The device a case on device ``index`` is compared with: the next one of the same model
    (wrapping round); None when no other device of that model exists."""
    count = backend.count()
    if count < 2:
        return None
    mine = backend.model(index)
    for step in range(1, count):
        other = (index + step) % count
        if backend.model(other) == mine:
            return other
    return None


def bind(backends: Sequence[Backend], workerid: str | None) -> list[Backend]:
    """Each available backend bound to the device this worker uses (``i mod count``)."""
    worker = worker_number(workerid)
    out = []
    for backend in backends:
        try:
            available = bool(backend.available())
        except Exception:  # noqa: BLE001 - described (and skipped) elsewhere
            available = False
        count = backend.count() if available else 0
        out.append(backend.on(device_index(worker, count)) if count > 0 else backend)
    return out
