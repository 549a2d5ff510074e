"""The devices of a run: which device of each backend this process uses, and how many test
workers the devices' memory holds (why one is absent is a fact of its backend:
:func:`engine.devices.unavailable_reason`)."""
from __future__ import annotations

import pytest

from detconf.plugin.options import is_worker


def use_devices(config: pytest.Config) -> None:
    """Give this process its device of each backend (worker i: device i mod count) and, on the
    controller, lower -n to the number of workers the devices' free memory holds."""
    from detconf.engine.fleet import bind, worker_cap

    workerid = config.workerinput.get("workerid") if is_worker(config) else None
    config._detconf_backends = bind(config._detconf_backends, workerid)
    if is_worker(config):
        return
    wanted = getattr(config.option, "numprocesses", None)
    processes = 1
    if config.getoption("--perturb"):  # each case in several forked processes at once, each with its memory
        from detconf.conformance.perturbed import PROCESSES as processes
    cap = worker_cap([b for b in config._detconf_backends if b.describe()["available"]],
                     config.getoption("--worker-memory"), processes)
    config._detconf_worker_cap = None
    if cap is None or not isinstance(wanted, int) or wanted <= cap[0]:
        return
    config._detconf_worker_cap = f"-n {wanted} lowered to {cap[0]} (the per-device worker cap; {cap[1]})"
    config.option.numprocesses = cap[0]
    if isinstance(getattr(config.option, "tx", None), list) and len(config.option.tx) > cap[0]:
        config.option.tx = config.option.tx[:cap[0]]


def device_lines(config: pytest.Config) -> list[str]:
    lines = []
    for backend in config._detconf_backends:
        count = backend.count() if backend.describe()["available"] else 0
        if count > 1 or backend.origin != "built-in":
            lines.append(f"detconf: device {backend.name}: {count} device(s), from {backend.origin}"
                         + (f"; this process uses {backend.name}:{backend.index}" if backend.index is not None else ""))
    if getattr(config, "_detconf_worker_cap", None):
        lines.append(f"detconf: {config._detconf_worker_cap}")
    return lines
