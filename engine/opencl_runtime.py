"""What the OpenCL runtime says about its devices, read through the ICD loader with ``ctypes``.

A PrivateUse1 backend built on OpenCL (the ``torch-opencl`` package registers the device
``opencl``) may not describe its device itself; the runtime can. This module asks the
installed ICD loader (``libOpenCL.so.1``) for every platform and device, in the order the
loader lists them, and returns plain data. It never raises: a missing loader or a runtime
error comes back as ``{"error": ...}``.
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["LIBRARY_NAMES", "describe", "devices"]

LIBRARY_NAMES = ("libOpenCL.so.1", "libOpenCL.so", "OpenCL")
# cl.h constants, written as small-number expressions: Hypothesis seeds its draws with the
# literals of loaded project modules, and this module is loaded during a conformance run.
_CL_SUCCESS = 0
_CL_PLATFORM_NOT_FOUND_KHR = -(10**3 + 1)
_CL_DEVICE_NOT_FOUND = -1
_CL_PLATFORM_VERSION = 0x09 << 8 | 0x01
_CL_PLATFORM_NAME = 0x09 << 8 | 0x02
_CL_PLATFORM_VENDOR = 0x09 << 8 | 0x03
_CL_DEVICE_TYPE_ALL = (1 << 32) - 1
_CL_DEVICE_NAME = 0x10 << 8 | 0x2B
_CL_DEVICE_VENDOR = 0x10 << 8 | 0x2C
_CL_DRIVER_VERSION = 0x10 << 8 | 0x2D
_CL_DEVICE_VERSION = 0x10 << 8 | 0x2F
_MAX_ENTRIES = 64


class OpenCLError(RuntimeError):
    """A failed OpenCL call (one-line message with the function and its status code)."""


def _load(names: tuple[str, ...] = LIBRARY_NAMES) -> ctypes.CDLL:
    tried = []
    for name in names:
        # A bare name ("OpenCL") goes through the linker's search; a file name is opened as given.
        candidate = name if name.startswith("lib") or "/" in name else ctypes.util.find_library(name)
        if not candidate:
            tried.append(name)
            continue
        try:
            return ctypes.CDLL(candidate)
        except OSError:
            tried.append(candidate)
    raise OpenCLError(f"no OpenCL ICD loader found (tried {', '.join(tried)})")


def _check(status: int, what: str) -> None:
    if status != _CL_SUCCESS:
        raise OpenCLError(f"{what} returned {status}")


def _info_string(getter, handle, param: int, what: str) -> str:
    size = ctypes.c_size_t(0)
    _check(getter(handle, ctypes.c_uint(param), ctypes.c_size_t(0), None, ctypes.byref(size)), what)
    buf = ctypes.create_string_buffer(size.value or 1)
    _check(getter(handle, ctypes.c_uint(param), size, buf, None), what)
    return buf.value.decode("utf-8", "replace").strip()


def devices(names: tuple[str, ...] = LIBRARY_NAMES) -> list[dict]:
    """Every OpenCL device, platform by platform, as dicts of strings.

    Raises :class:`OpenCLError` when no loader is found or a call fails; an installed
    loader with no platform (no ICD) gives an empty list.
    """
    lib = _load(names)
    lib.clGetPlatformIDs.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)]
    lib.clGetPlatformInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p,
                                      ctypes.POINTER(ctypes.c_size_t)]
    lib.clGetDeviceIDs.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_uint)]
    lib.clGetDeviceInfo.argtypes = lib.clGetPlatformInfo.argtypes
    count = ctypes.c_uint(0)
    status = lib.clGetPlatformIDs(0, None, ctypes.byref(count))
    if status == _CL_PLATFORM_NOT_FOUND_KHR or count.value == 0:  # a loader without any ICD
        return []
    _check(status, "clGetPlatformIDs")
    platforms = (ctypes.c_void_p * min(count.value, _MAX_ENTRIES))()
    _check(lib.clGetPlatformIDs(len(platforms), platforms, None), "clGetPlatformIDs")
    found = []
    for platform in platforms:
        platform_info = {
            "platform": _info_string(lib.clGetPlatformInfo, platform, _CL_PLATFORM_NAME, "clGetPlatformInfo"),
            "platform_vendor": _info_string(lib.clGetPlatformInfo, platform, _CL_PLATFORM_VENDOR, "clGetPlatformInfo"),
            "platform_version": _info_string(lib.clGetPlatformInfo, platform, _CL_PLATFORM_VERSION, "clGetPlatformInfo"),
        }
        n = ctypes.c_uint(0)
        status = lib.clGetDeviceIDs(platform, _CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n))
        if status == _CL_DEVICE_NOT_FOUND or n.value == 0:
            continue
        _check(status, "clGetDeviceIDs")
        ids = (ctypes.c_void_p * min(n.value, _MAX_ENTRIES))()
        _check(lib.clGetDeviceIDs(platform, _CL_DEVICE_TYPE_ALL, len(ids), ids, None), "clGetDeviceIDs")
        for device in ids:
            info = dict(platform_info)
            for key, param in (("name", _CL_DEVICE_NAME), ("vendor", _CL_DEVICE_VENDOR),
                               ("driver_version", _CL_DRIVER_VERSION), ("device_version", _CL_DEVICE_VERSION)):
                info[key] = _info_string(lib.clGetDeviceInfo, device, param, "clGetDeviceInfo")
            found.append(info)
    return found


def describe(index: int = 0, names: tuple[str, ...] = LIBRARY_NAMES) -> dict:
    """The ``index``-th OpenCL device (loader order) as ``{"device_name": ..., "versions": {...}}``,
    or ``{"error": "..."}`` when the runtime cannot say."""
    try:
        listed = devices(names)
    except (OpenCLError, AttributeError) as exc:  # AttributeError: a library without the entry points
        return {"error": f"OpenCL runtime: {exc}"}
    if not 0 <= index < len(listed):
        return {"error": f"OpenCL runtime: no device #{index} ({len(listed)} listed)"}
    dev = listed[index]
    return {
        "device_name": dev["name"],
        "versions": {
            "opencl_platform": f"{dev['platform']} ({dev['platform_vendor']})",
            "opencl_platform_version": dev["platform_version"],
            "opencl_device_version": dev["device_version"],
            "opencl_driver_version": dev["driver_version"],
            "opencl_devices": len(listed),
        },
    }
