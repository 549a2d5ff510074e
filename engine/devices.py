"""The built-in backends, and device names resolved to backends.

The contract itself (:class:`~engine.backends.Backend`, :class:`~engine.backends.VendorProfile`)
is :mod:`engine.backends`'s, re-exported here. This is the one module that knows devices by
name: each built-in backend carries its device's facts as fields (available or why not, host
or not, the environment it reads once, what Inductor compiles it with, its math mode, its
comparison tolerances, its vendor profile), and the rest of the suite reads those fields.

Every backend, built-in or not, is loaded by :mod:`engine.backends` from the
``detconf.backends`` entry point group; the built-in ones are the functions
``cpu_backend`` ... ``privateuse1_backends`` below. docs/backends.md is the
contract in full.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import functools
from dataclasses import replace
from typing import Callable

import torch

from detconf.engine.backends import BUILTIN_DEVICES, Backend, BackendError, UnknownDevice, VendorProfile, load_backends

__all__ = ["Backend", "BackendError", "UnknownDevice", "VendorProfile", "available_devices", "backends",
           "backend_for", "inductor_codegen", "resolve_devices", "unavailable_reason"]


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


@functools.lru_cache(maxsize=1)
def _nvidia_smi_driver() -> str | None:
    """The driver version as ``nvidia-smi`` says it, asked once per process: torch releases
    without ``torch.cuda.driver_version`` would otherwise start it for every case's
    description (319 times, 7.8 s, in one run of the documented sources on an H100)."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return None


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
        driver = _nvidia_smi_driver()
        if driver:
            versions["driver"] = driver
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
    return None if name == "privateuseone" or name in BUILTIN_DEVICES else name


# Runtimes that can describe a PrivateUse1 device its own module does not describe: the
# device's index → {"device_name": ..., "versions": {...}} or {"error": ...}.
def _opencl_runtime(index: int) -> dict:
    from detconf.engine import opencl_runtime

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
    """The device memory this process can still use: the driver's free memory, plus what this
    process's caching allocator holds without using (which the driver counts as used). Without
    it the stress tier's sizes shrank as a worker's cache grew over its run, and a case's
    mode-off control and its deterministic modes could draw different sizes."""
    free = int(torch.cuda.mem_get_info(index)[0])
    return free + max(0, int(torch.cuda.memory_reserved(index)) - int(torch.cuda.memory_allocated(index)))


def _cuda_unavailable() -> str:
    if not torch.version.cuda and not getattr(torch.version, "hip", None):
        return f"this torch ({torch.__version__}) is built without CUDA"
    return "torch.cuda.is_available() is False (no GPU visible, or no driver)"


def _npu_unavailable() -> str:
    if importlib.util.find_spec("torch_npu") is None:
        return "torch_npu is not installed"
    return "torch.npu.is_available() is False"


def unavailable_reason(backend: Backend | str, info: dict) -> str:
    """Why a backend (or the backend of that name) is not available, in one line: the error its
    description met (``info``: :meth:`Backend.describe`), else its own reason
    (:attr:`Backend.why_unavailable`), else that ``torch.<name>.is_available()`` is False."""
    if info.get("error"):
        return info["error"]
    if isinstance(backend, str):
        name = backend
        try:
            backend = backends().get(name)
        except UnknownDevice:  # a broken entry point: the generic sentence
            backend = None
    else:
        name = backend.name
    if backend is not None and backend.why_unavailable is not None:
        return backend.why_unavailable()
    return f"torch.{name}.is_available() is False"


def backend_for(device_type: str) -> Backend | None:
    """The backend of ``device_type`` (a built-in one without scanning the entry points; None for
    a name no backend has), for code that holds a ``torch.device`` rather than a backend."""
    maker = _BUILT_IN.get(device_type)
    return maker() if maker is not None else backends().get(device_type)


def inductor_codegen(device_type: str) -> str | None:
    """What Inductor generates code with on ``device_type`` (:attr:`Backend.inductor_codegen`)."""
    backend = backend_for(device_type)
    return None if backend is None else backend.inductor_codegen


def cpu_backend() -> Backend:
    return Backend("cpu", available=lambda: True, device_name=_cpu_name, versions=_cpu_versions,
                   torch_device_for=lambda index: torch.device("cpu"), inductor_codegen="cpp")


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
        why_unavailable=_cuda_unavailable,
        # The reproducibility notes' old cuBLAS promise: a raise *without* the variable, which
        # cuBLAS reads once per process (the plugin sets it for everything else).
        unset_for_qualifier=(("no-cublas-workspace-config", "CUBLAS_WORKSPACE_CONFIG"),),
        environment=(("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),),
        inductor_codegen="triton",
    )


def mps_backend() -> Backend:
    return Backend(
        "mps",
        available=_mps_available,
        synchronize=lambda: torch.mps.synchronize(),
        device_name=lambda: "Apple MPS",
        versions=lambda: {"macos": platform.mac_ver()[0]},
        torch_device_for=lambda index: torch.device("mps"),
        why_unavailable=lambda: "torch.backends.mps.is_available() is False (needs Apple silicon with macOS 12.3 or later)",
    )


#: The Ascend NPU deterministic-computation list: the built-in NPU backend's vendor profile, read
#: like any vendor's (source ``ascend``); the list and its recipes ship with detconf.
ASCEND_PROFILE = VendorProfile(data="detconf.conformance:data/ascend.json", recipes=("detconf.conformance.recipes_ascend",),
                               source="ascend")


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
        why_unavailable=_npu_unavailable,
        profile=ASCEND_PROFILE,
    )


#: The built-in backends of fixed names (:func:`backend_for`).
_BUILT_IN: dict[str, Callable[[], Backend]] = {"cpu": cpu_backend, "cuda": cuda_backend, "mps": mps_backend,
                                               "npu": npu_backend}


def privateuse1_backends() -> list[Backend]:
    """The generic PrivateUse1 backend under its registered name (none when nothing renamed it);
    a distribution's backend of the same name takes its place."""
    extra = _privateuse1_name()
    if not extra:
        return []
    return [replace(_privateuse1_backend(extra), fallback=True)]


def backends() -> dict[str, Backend]:
    """Every backend this process knows, available or not: the built-in ones and those that
    installed distributions declare (entry point group ``detconf.backends``). A broken or
    conflicting entry point raises :class:`engine.backends.BackendError` (one line)."""
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
