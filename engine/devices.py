"""The backend contract: what the suite needs to know about a device type.

A backend says whether it is available, how to synchronize, and describes
itself (device name, driver / runtime versions). ``isolate_modes`` is a
capability flag: where the determinism flag sticks per thread (Ascend NPU),
each mode must run in a fresh process. A backend may have several devices
(``device_count``); a worker is given one of them (``index``, see
:mod:`engine.fleet`). ``profile`` optionally names a vendor's own catalog
(:class:`VendorProfile`).

Every backend, built-in or not, is loaded by :mod:`engine.backends` from the
``detconf.backends`` entry point group; the built-in ones are the functions
``cpu_backend`` ... ``privateuse1_backends`` below. docs/backends.md is the
contract in full.
"""
from __future__ import annotations

import importlib
import os
import platform
import contextlib
from dataclasses import dataclass, field, replace
from typing import Callable, ContextManager

import torch

KNOWN_DEVICES = ("cpu", "cuda", "mps", "npu")


class UnknownDevice(ValueError):
    """A device name that no backend knows (one-line message)."""


@dataclass(frozen=True)
class VendorProfile:
    """A vendor's own catalog, run as source ``vendor`` on the backend's devices: ``data`` is an
    entries file in the Ascend list's format (conformance/data/schemas/), ``recipes`` the modules
    whose ``@recipe`` functions cover those entries (imported before the cases run)."""

    data: str
    recipes: tuple[str, ...] = ()


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
    #: Is the device the host (the CPU)? Its results need no CPU reference. None: ``name == "cpu"``.
    host: bool | None = None
    #: The effective float32 precision (``ieee``, ``tf32``, ``bf16``) of an operator family
    #: (``conv``, ``matmul``) on this device now. None: :func:`engine.mathmode.float32_precision`
    #: reads torch's settings for the device type.
    math_precision: Callable[[str], str] | None = None
    #: A context in which the harness computes a host (CPU) reference while a case runs on this
    #: device: a device emulated on the host leaves its emulation there. None: nothing to leave.
    host_context: Callable[[], ContextManager] | None = None

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
        return self.name == "cpu" if self.host is None else bool(self.host)

    def float32_precision(self, family: str) -> str:
        """The effective float32 precision of ``family`` operators on this device."""
        if self.math_precision is not None:
            return str(self.math_precision(family))
        from engine import mathmode

        return mathmode.float32_precision(self.name, family)

    def on_host(self) -> ContextManager:
        """The context of a host reference computed while a case runs here."""
        return self.host_context() if self.host_context is not None else contextlib.nullcontext()

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


def _cpu_name() -> str:
    proc = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    proc = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{proc} ({os.cpu_count()} threads, torch {torch.get_num_threads()} threads)"


def _cpu_versions() -> dict:
    return {"mkldnn": torch.backends.mkldnn.is_available(), "openmp": torch.backends.openmp.is_available()}


def _cuda_versions() -> dict:
    versions = {"cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if getattr(torch.version, "hip", None):
        versions["hip"] = torch.version.hip
    try:
        props = torch.cuda.get_device_properties(0)
        versions["capability"] = f"{props.major}.{props.minor}"
        versions["memory_gib"] = round(props.total_memory / 2**30, 1)
    except Exception:  # noqa: BLE001
        pass
    try:
        driver = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
        if driver:
            versions["driver"] = driver
    except Exception:  # noqa: BLE001
        pass
    if "driver" not in versions:
        try:
            import subprocess

            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10,
            )
            if out.returncode == 0:
                versions["driver"] = out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    return versions


def _npu_module():
    try:
        return importlib.import_module("torch_npu")
    except Exception:  # noqa: BLE001 - absent or broken: not available
        return None


def _npu_available() -> bool:
    return _npu_module() is not None and hasattr(torch, "npu") and torch.npu.is_available()


def _npu_versions() -> dict:
    mod = _npu_module()
    return {"torch_npu": getattr(mod, "__version__", None)}


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def _privateuse1_name() -> str | None:
    try:
        name = torch._C._get_privateuse1_backend_name()
    except Exception:  # noqa: BLE001
        return None
    return None if name in ("privateuseone", "npu") else name


# Runtimes that can describe a PrivateUse1 device its own module does not describe: the
# device's index → {"device_name": ..., "versions": {...}} or {"error": ...}.
def _opencl_runtime(index: int) -> dict:
    from engine import opencl_runtime

    return opencl_runtime.describe(index)


RUNTIME_DESCRIBERS: dict[str, Callable[[int], dict]] = {"opencl": _opencl_runtime}


def _backend_packages(name: str, mod) -> dict:
    """Versions of the distributions that provide the backend: the one whose ``torch.backends``
    entry point (the autoload hook) is named ``name``, and the one owning the device module."""
    from importlib import metadata

    found: dict[str, str] = {}
    try:
        for ep in metadata.entry_points(group="torch.backends"):
            if ep.name == name and ep.dist is not None:
                found[ep.dist.metadata["Name"]] = ep.dist.version
        top = (getattr(mod, "__name__", "") or "").split(".")[0]
        if top and top != "torch":
            for dist in metadata.packages_distributions().get(top, ()):
                found.setdefault(dist, metadata.version(dist))
    except Exception as exc:  # noqa: BLE001 - broken metadata is reported, not fatal
        found["error"] = f"{type(exc).__name__}: {exc}"
    return found


def _host_round_trip(name: str) -> None:
    """Wait for the device by reading one value back: a copy to the host returns only once the
    device's queue has run what came before it (in-order queues, as PrivateUse1 backends use)."""
    torch.zeros(1, device=name).cpu()


def _privateuse1_backend(name: str) -> Backend:
    """A PrivateUse1 backend under its registered name.

    It describes itself from its device module (``torch.<name>``) where that offers
    ``get_device_name`` / ``synchronize``; else from a runtime describer
    (:data:`RUNTIME_DESCRIBERS`) and the installed packages. Synchronisation: the module's
    ``synchronize``, else ``torch.accelerator.synchronize``, else a host round trip
    (the choice is made once, at the first call, and named in ``versions``).
    """
    chosen: list[tuple[str, Callable[[], None]]] = []

    def module():
        return getattr(torch, name, None)

    def available() -> bool:
        mod = module()
        return bool(mod is not None and getattr(mod, "is_available", lambda: False)())

    def index() -> int:
        fn = getattr(module(), "current_device", None)
        return int(fn()) if fn else 0

    def choose_sync() -> tuple[str, Callable[[], None]]:
        if not chosen:
            own = getattr(module(), "synchronize", None)
            if own is not None:
                chosen.append((f"torch.{name}.synchronize", own))
            else:
                accel = getattr(torch, "accelerator", None)
                try:
                    current = accel.current_accelerator() if accel is not None else None
                    if current is None or current.type != name:
                        raise RuntimeError("not the current accelerator")
                    accel.synchronize()
                    chosen.append(("torch.accelerator.synchronize", accel.synchronize))
                except Exception:  # noqa: BLE001 - the backend has no event support: read back instead
                    chosen.append(("host round trip (one value copied to the CPU)", lambda: _host_round_trip(name)))
        return chosen[0]

    def sync() -> None:
        choose_sync()[1]()

    def runtime() -> dict:
        describer = RUNTIME_DESCRIBERS.get(name)
        return describer(index()) if describer else {}

    def device_name() -> str:
        fn = getattr(module(), "get_device_name", None)
        if fn:
            return fn()
        return runtime().get("device_name") or name

    def versions() -> dict:
        info: dict = {"privateuse1": name, "packages": _backend_packages(name, module())}
        described = runtime()
        info.update(described.get("versions", {}))
        if "error" in described:
            info["runtime_error"] = described["error"]
        info["synchronize"] = choose_sync()[0]
        return info

    return Backend(name=name, available=available, synchronize=sync, device_name=device_name, versions=versions)


def _cuda_free(index: int) -> int:
    return int(torch.cuda.mem_get_info(index)[0])


def cpu_backend() -> Backend:
    return Backend("cpu", available=lambda: True, device_name=_cpu_name, versions=_cpu_versions,
                   torch_device_for=lambda index: torch.device("cpu"))


def cuda_backend() -> Backend:
    return Backend(
        "cuda",
        available=torch.cuda.is_available,
        synchronize=lambda: torch.cuda.synchronize(),
        device_name=lambda: torch.cuda.get_device_name(0),
        versions=_cuda_versions,
        device_count=torch.cuda.device_count,
        device_model=lambda index: torch.cuda.get_device_name(index),
        free_memory=_cuda_free,
        worker_memory=2 * 2**30,
        activate=lambda index: torch.cuda.device(index),
    )


def mps_backend() -> Backend:
    return Backend(
        "mps",
        available=_mps_available,
        synchronize=lambda: torch.mps.synchronize(),
        device_name=lambda: "Apple MPS",
        versions=lambda: {"macos": platform.mac_ver()[0]},
        torch_device_for=lambda index: torch.device("mps"),
    )


def npu_backend() -> Backend:
    return Backend(
        "npu",
        available=_npu_available,
        synchronize=lambda: torch.npu.synchronize(),
        device_name=lambda: torch.npu.get_device_name(0),
        versions=_npu_versions,
        # The Ascend docs: the deterministic state can be set once per thread;
        # later settings do not take effect. Each mode gets a fresh process.
        isolate_modes=True,
        notes=("determinism flag sticks per thread",),
        device_count=lambda: torch.npu.device_count(),
        device_model=lambda index: torch.npu.get_device_name(index),
        activate=lambda index: torch.npu.device(index),
    )


def privateuse1_backends() -> list[Backend]:
    """The generic PrivateUse1 backend under its registered name (none when nothing renamed it);
    a distribution's backend of the same name takes its place."""
    extra = _privateuse1_name()
    if not extra or extra in ("cpu", "cuda", "mps", "npu"):
        return []
    return [replace(_privateuse1_backend(extra), fallback=True)]


def backends() -> dict[str, Backend]:
    """Every backend this process knows, available or not: the built-in ones and those that
    installed distributions declare (entry point group ``detconf.backends``). A broken or
    conflicting entry point raises :class:`engine.backends.BackendError` (one line)."""
    from engine.backends import load_backends

    return load_backends()


def available_devices() -> list[str]:
    return [name for name, b in backends().items() if b.describe()["available"]]


def resolve_devices(requested: list[str] | None) -> list[Backend]:
    """Backends for the requested names (default: every available one).

    Unknown names raise :class:`UnknownDevice`. Known but absent devices are
    kept: their tests are reported ``skipped`` with the reason.
    """
    table = backends()
    if not requested:
        return [table[name] for name in available_devices()]
    out = []
    for name in requested:
        if name not in table:
            raise UnknownDevice(f"unknown device {name!r}; known: {', '.join(sorted(table))}")
        if table[name] not in out:
            out.append(table[name])
    return out
