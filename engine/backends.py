"""Loading backends: the built-in ones and those installed distributions declare.

A distribution adds a backend with an entry point in the group ``detconf.backends``::

    [project.entry-points."detconf.backends"]
    mydev = "mydev_detconf:backend"

The object an entry point names is a :class:`engine.devices.Backend`, or a callable (no
arguments) that returns a ``Backend``, a list of them or None (nothing to offer here). The
built-in backends (cpu, cuda, mps, npu and the generic PrivateUse1 one) are entry points of the
same shape, :data:`BUILTINS`, loaded by the same code; installed, detconf declares them in its
own ``pyproject.toml`` as well.

A third-party entry point that cannot be used stops the run with one line naming the
distribution, never a traceback and never silently: it fails to import, names something that
is not a backend, raises, gives a backend an unusable name, or claims a name another
distribution (or a built-in backend) already has. Only the generic PrivateUse1 fallback yields:
a distribution's backend of the same name takes its place.
"""
from __future__ import annotations

import re
from dataclasses import replace
from importlib import metadata
from typing import Any

from engine.devices import Backend, UnknownDevice

GROUP = "detconf.backends"
BUILTIN_ORIGIN = "built-in"
#: (entry point name, object reference): the same strings detconf's pyproject.toml declares.
BUILTINS = (
    ("cpu", "engine.devices:cpu_backend"),
    ("cuda", "engine.devices:cuda_backend"),
    ("mps", "engine.devices:mps_backend"),
    ("npu", "engine.devices:npu_backend"),
    ("privateuse1", "engine.devices:privateuse1_backends"),
)
#: A device type name as torch spells one (``torch.device("name")``).
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
OWN_DISTRIBUTION = "detconf"


class BackendError(UnknownDevice):
    """A backend entry point that cannot be used (one line, naming its distribution)."""


def _distribution(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or (dist.metadata["Name"] if dist is not None else None)
    return f"{name} {dist.version}" if name else "an unknown distribution"


def _candidates() -> list[tuple[metadata.EntryPoint, str]]:
    """(entry point, origin) for every backend provider: the built-ins first, then the
    installed distributions' entry points (detconf's own declarations of the built-ins are the
    built-ins themselves)."""
    out = [(metadata.EntryPoint(name, value, GROUP), BUILTIN_ORIGIN) for name, value in BUILTINS]
    builtin = set(BUILTINS)
    try:
        installed = metadata.entry_points(group=GROUP)
    except Exception as exc:  # noqa: BLE001 - a broken installation is named, not a traceback
        raise BackendError(f"cannot read the {GROUP!r} entry points: {type(exc).__name__}: {exc}") from None
    seen = set()
    for ep in sorted(installed, key=lambda e: (e.name, e.value, _distribution(e))):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        key = (ep.name, ep.value, _distribution(ep))
        if key in seen:  # the same distribution found twice on sys.path
            continue
        seen.add(key)
        if dist == OWN_DISTRIBUTION and (ep.name, ep.value) in builtin:
            continue
        out.append((ep, _distribution(ep)))
    return out


_LOADED: dict[tuple[str, str, str], Any] = {}


def _load(ep: metadata.EntryPoint, origin: str) -> list[Backend]:
    where = f"backend entry point {ep.name!r} ({ep.value})" + ("" if origin == BUILTIN_ORIGIN else f" of {origin}")
    key = (ep.name, ep.value, origin)
    try:
        if key not in _LOADED:
            _LOADED[key] = ep.load()
        obj = _LOADED[key]
        if callable(obj) and not isinstance(obj, Backend):
            obj = obj()
    except Exception as exc:  # noqa: BLE001 - a vendor's import error is theirs: one line
        first = " ".join(f"{type(exc).__name__}: {exc}".split())[:3 * 10**2]
        raise BackendError(f"{where} failed: {first}") from None
    found = [] if obj is None else [obj] if isinstance(obj, Backend) else obj
    if not isinstance(found, (list, tuple)) or not all(isinstance(b, Backend) for b in found):
        raise BackendError(f"{where} gave {type(obj).__name__}, not an engine.devices.Backend "
                           "(or a list of them); see docs/backends.md")
    out = []
    for backend in found:
        if not isinstance(backend.name, str) or not NAME.fullmatch(backend.name):
            raise BackendError(f"{where} gave a backend named {backend.name!r}: a device name is lower-case "
                               "letters, digits and '_', starting with a letter")
        if not callable(backend.available):
            raise BackendError(f"{where} gave backend {backend.name!r} whose 'available' is not callable")
        out.append(replace(backend, origin=origin) if backend.origin != origin else backend)
    return out


def load_backends() -> dict[str, Backend]:
    """Every backend, by name, in load order (built-ins first)."""
    table: dict[str, Backend] = {}
    for ep, origin in _candidates():
        for backend in _load(ep, origin):
            held = table.get(backend.name)
            if held is None or (held.fallback and not backend.fallback):
                table[backend.name] = backend
                continue
            if backend.fallback:
                continue
            raise BackendError(f"backend entry point {ep.name!r} ({ep.value}) of {origin} declares device "
                               f"{backend.name!r}, which {held.origin if held.origin != BUILTIN_ORIGIN else 'detconf'} "
                               "already provides; uninstall one of them")
    return table
