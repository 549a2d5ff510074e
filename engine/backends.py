"""Loading backends: the built-in ones and those installed distributions declare.

A distribution adds a backend with an entry point in the group ``detconf.backends``::

    [project.entry-points."detconf.backends"]
    mydev = "mydev_detconf:backend"

The backend contract lives here (:class:`Backend`, :class:`VendorProfile`): what the suite needs
to know about a device type, every device fact as a field, so that no other module asks for a
device by name. :mod:`engine.devices` builds the built-in backends and resolves names.

The object an entry point names is a :class:`Backend`, or a callable (no
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

import contextlib
import importlib.util
import re
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable

import torch

from detconf.engine import mathmode

class UnknownDevice(ValueError):
    """A device name that no backend knows (one-line message)."""


@dataclass(frozen=True)
class VendorProfile:
    """A vendor's own catalog, run as source ``vendor`` on every selected device: ``data`` is an
    entries file in the Ascend list's format (conformance/data/schemas/), a path or
    ``package:relative/path`` (a file inside an installed package), ``recipes`` the modules whose
    ``@recipe`` functions cover those entries (imported before the cases run).

    ``source`` is ``vendor`` for every distribution's profile; the built-in NPU backend's profile,
    the Ascend list that ships with detconf, keeps its own source name, ``ascend``."""

    data: str
    recipes: tuple[str, ...] = ()
    source: str = "vendor"

    def data_path(self) -> Path:
        """The entries file (a ``package:relative/path`` is found without importing the package)."""
        package, sep, rest = self.data.partition(":")
        if sep and rest and package.replace(".", "").replace("_", "").isalnum() and len(package) > 1:
            spec = importlib.util.find_spec(package)
            folders = list(spec.submodule_search_locations or ()) if spec is not None else []
            if not folders:
                raise FileNotFoundError(f"vendor profile data {self.data!r}: no package {package!r}")
            return Path(folders[0]) / rest
        return Path(self.data)


@dataclass(frozen=True)
class Backend:
    """What a backend provides. Only ``name`` and ``available`` are required."""

    name: str
    available: Callable[[], bool]
    synchronize: Callable[[], None] = lambda: None
    device_name: Callable[[], str] = lambda: ""
    versions: Callable[[], dict] = dict
    isolate_modes: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: How many devices of this type this process sees (after CUDA_VISIBLE_DEVICES and the like).
    device_count: Callable[[], int] = lambda: 1
    #: The model of device ``i`` (two devices of one model are compared with each other); default:
    #: ``device_name()`` for every device.
    device_model: Callable[[int], str] | None = None
    #: Bytes free on device ``i`` now (None: unknown); with ``worker_memory`` it caps the workers.
    free_memory: Callable[[int], int | None] | None = None
    #: Bytes one test worker needs on a device (None: no cap); ``--worker-memory`` overrides it.
    worker_memory: int | None = None
    #: The ``torch.device`` of device ``i`` (default ``torch.device(name, i)``).
    torch_device_for: Callable[[int], torch.device] | None = None
    #: A context around each case on device ``i`` (e.g. make it the current device).
    activate: Callable[[int], ContextManager] | None = None
    profile: VendorProfile | None = None
    #: The device this process uses (set by :meth:`on`); None: the backend's default device.
    index: int | None = None
    #: Where the backend came from: ``built-in`` or the distribution that provides it.
    origin: str = "built-in"
    #: A built-in fallback that yields to a backend of the same name from a distribution.
    fallback: bool = False
    #: Is the device the host (the CPU)? Its results need no CPU reference. None: ``name == HOST``.
    host: bool | None = None
    #: The effective float32 precision (``ieee``, ``tf32``, ``bf16``) of an operator family
    #: (``conv``, ``matmul``) on this device now. None: :func:`engine.mathmode.float32_precision`
    #: reads torch's settings for the device type.
    math_precision: Callable[[str], str] | None = None
    #: A context in which the harness computes a host (CPU) reference while a case runs on this
    #: device: a device emulated on the host leaves its emulation there. None: nothing to leave.
    host_context: Callable[[], ContextManager] | None = None
    #: Why the backend is not available on this machine, in one line (None: a sentence naming
    #: ``torch.<name>.is_available()``); see :func:`engine.devices.unavailable_reason`.
    why_unavailable: Callable[[], str] | None = None
    #: (qualifier, variable) pairs: an entry with the qualifier needs the environment variable
    #: unset, and the backend's runtime reads it once per process, so each of its cases runs in
    #: a fresh process without it (cuBLAS reads ``CUBLAS_WORKSPACE_CONFIG`` when CUDA starts).
    unset_for_qualifier: tuple[tuple[str, str], ...] = ()
    #: What Inductor generates this device's code with (``cpp``: a C++ compiler must be found;
    #: ``triton``: Triton must be installed); None: nothing to check before compiling.
    inductor_codegen: str | None = None
    #: (dtype, (rtol, atol)) pairs that replace :data:`engine.comparison.TOLERANCES` for a
    #: result on this device compared with a reference; none: the defaults.
    tolerances: tuple[tuple[torch.dtype, tuple[float, float]], ...] = ()
    #: (variable, value) pairs the backend's runtime needs in its environment, set before it
    #: starts, for deterministic results (CUDA: ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, per the
    #: reproducibility notes); a fresh child process that uses the device gets them.
    environment: tuple[tuple[str, str], ...] = ()

    def on(self, index: int | None) -> "Backend":
        """This backend bound to device ``index``."""
        return replace(self, index=index)

    def torch_device(self) -> torch.device:
        if self.torch_device_for is not None:
            return self.torch_device_for(self.index or 0)
        return torch.device(self.name) if self.index is None else torch.device(self.name, self.index)

    def count(self) -> int:
        """``device_count()``, at least 1 for an available backend; 0 when it cannot say."""
        try:
            return max(0, int(self.device_count()))
        except Exception:  # noqa: BLE001 - a broken driver counts no devices
            return 0

    @property
    def is_host(self) -> bool:
        return self.name == HOST if self.host is None else bool(self.host)

    def float32_precision(self, family: str) -> str:
        """The effective float32 precision of ``family`` operators on this device."""
        if self.math_precision is not None:
            return str(self.math_precision(family))
        return mathmode.float32_precision(self.name, family)

    def on_host(self) -> ContextManager:
        """The context of a host reference computed while a case runs here."""
        return self.host_context() if self.host_context is not None else contextlib.nullcontext()

    def env_to_unset(self, qualifiers: Iterable[str]) -> tuple[str, ...]:
        """The variables a case of an entry with ``qualifiers`` must run without, in a fresh
        process (:attr:`unset_for_qualifier`)."""
        held = set(qualifiers)
        return tuple(dict.fromkeys(var for qualifier, var in self.unset_for_qualifier if qualifier in held))

    def model(self, index: int) -> str:
        fn = self.device_model or (lambda i: self.device_name())
        return str(fn(index))

    def active(self) -> ContextManager:
        """The context a case runs in on this backend's device."""
        if self.activate is None or self.index is None:
            return contextlib.nullcontext()
        return self.activate(self.index)

    def describe(self) -> dict:
        """JSON-safe description for the report header and the run record."""
        info = {"device": self.name, "available": False, "device_name": "", "versions": {},
                "isolate_modes": self.isolate_modes, "origin": self.origin}
        try:
            info["available"] = bool(self.available())
            if info["available"]:
                info["device_name"] = self.device_name()
                info["versions"] = self.versions()
                info["device_count"] = self.count()
                if self.index is not None:
                    info["device_index"] = self.index
        except Exception as exc:  # noqa: BLE001 - a broken driver is reported, not fatal
            info["error"] = f"{type(exc).__name__}: {exc}"
        return info


#: torch's host device type: a tensor of any other type lives on a device, and results there are
#: checked against references computed here.
HOST = "cpu"
GROUP = "detconf.backends"
BUILTIN_ORIGIN = "built-in"
#: (entry point name, object reference): the same strings detconf's pyproject.toml declares.
BUILTINS = (
    ("cpu", "detconf.engine.devices:cpu_backend"),
    ("cuda", "detconf.engine.devices:cuda_backend"),
    ("mps", "detconf.engine.devices:mps_backend"),
    ("npu", "detconf.engine.devices:npu_backend"),
    ("privateuse1", "detconf.engine.devices:privateuse1_backends"),
)
#: The device types the built-in backends name (the PrivateUse1 one takes whatever name torch has).
BUILTIN_DEVICES = tuple(name for name, _ in BUILTINS if name != "privateuse1")
#: A device type name as torch spells one (``torch.device("name")``).
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
OWN_DISTRIBUTION = "detconf"


class BackendError(UnknownDevice):
    """A backend entry point that cannot be used (one line, naming its distribution)."""


def _distribution(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or (dist.metadata["Name"] if dist is not None else None)
    return f"{name} {dist.version}" if name else "an unknown distribution"


def _path_stamp() -> tuple:
    """What the installed distributions :mod:`importlib.metadata` finds depend on: the folders on
    ``sys.path`` and, for each, what changes when a distribution's folder is added to it, removed
    or replaced (as ``pip install`` and ``pip uninstall`` do)."""
    import os
    import sys

    stamp = []
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
        except (OSError, ValueError):
            stamp.append((entry, None))
        else:
            stamp.append((entry, st.st_ino, st.st_mtime_ns, st.st_nlink, st.st_size))
    return tuple(stamp)


#: The last reading of the ``detconf.backends`` entry points: (path stamp, entry points). A run
#: asks for the backends several times (its devices, each profile source); reading every
#: installed distribution's metadata each time cost about 4 ms a time on the 2-core sandbox.
_POINTS: list = []


def _installed_points() -> tuple[metadata.EntryPoint, ...]:
    """The installed distributions' ``detconf.backends`` entry points, read again whenever
    ``sys.path`` or a folder on it has changed since the last reading (:func:`_path_stamp`)."""
    stamp = _path_stamp()
    if _POINTS and _POINTS[0] == stamp:
        return _POINTS[1]
    try:
        points = tuple(metadata.entry_points(group=GROUP))
    except Exception as exc:  # noqa: BLE001 - a broken installation is named, not a traceback
        raise BackendError(f"cannot read the {GROUP!r} entry points: {type(exc).__name__}: {exc}") from None
    _POINTS[:] = [stamp, points]
    return points


def _candidates() -> list[tuple[metadata.EntryPoint, str]]:
    """(entry point, origin) for every backend provider: the built-ins first, then the
    installed distributions' entry points (detconf's own declarations of the built-ins are the
    built-ins themselves)."""
    out = [(metadata.EntryPoint(name, value, GROUP), BUILTIN_ORIGIN) for name, value in BUILTINS]
    builtin = set(BUILTINS)
    installed = _installed_points()
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
        raise BackendError(f"{where} gave {type(obj).__name__}, not a detconf.engine.devices.Backend "
                           "(or a list of them); see docs/backends.md")
    out = []
    for backend in found:
        if not isinstance(backend.name, str) or not NAME.fullmatch(backend.name):
            raise BackendError(f"{where} gave a backend named {backend.name!r}: a device name is lower-case "
                               "letters, digits and '_', starting with a letter")
        if not callable(backend.available):
            raise BackendError(f"{where} gave backend {backend.name!r} whose 'available' is not callable")
        if origin != BUILTIN_ORIGIN and backend.profile is not None and backend.profile.source != "vendor":
            raise BackendError(f"{where} gave backend {backend.name!r} a vendor profile of source "
                               f"{backend.profile.source!r}: a distribution's profile is source 'vendor'")
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
