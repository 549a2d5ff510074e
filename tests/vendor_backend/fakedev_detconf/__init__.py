"""detconf backends for "fakedev": two devices of one model whose tensors live on the CPU.

``fakedev`` comes with a vendor profile: its own deterministic list (``deterministic.json``,
run as source ``vendor``) and the recipes for the operations detconf has none for (``recipes.py``).

``fakedev`` is honest. ``fakedev_skewed`` is the same except that its device 1 adds 1 to
every floating-point result: each device is deterministic on its own, but the two disagree,
which is what detconf's device-to-device check is there to see.

Environment (optional): ``FAKEDEV_SYNC_LOG`` a file that gets one line per synchronize call;
``FAKEDEV_FREE_GIB`` free memory per device in GiB, comma-separated (default 64 each).
"""
import contextlib
import os
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from detconf.engine.devices import Backend, VendorProfile

MODEL = "Fakedev FD-2 (CPU-backed)"
COUNT = 2


def synchronize():
    log = os.environ.get("FAKEDEV_SYNC_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")


def free_memory(index):
    text = os.environ.get("FAKEDEV_FREE_GIB", "")
    sizes = [float(x) for x in text.split(",")] if text else [64.0] * COUNT
    return int(sizes[index] * 2**30)


class _Skew(TorchDispatchMode):
    """Adds 1 to the floating-point result of every operator that returns a new tensor."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        fresh = len(returns) == 1 and returns[0].alias_info is None and not func._schema.is_mutable
        if fresh and isinstance(out, torch.Tensor) and out.is_floating_point() and not out.is_quantized:
            return out + 1
        return out


PROFILE = VendorProfile(data=str(Path(__file__).with_name("deterministic.json")), recipes=("fakedev_detconf.recipes",))


def _make(name, activate, profile=None):
    return Backend(
        name=name,
        available=lambda: True,
        synchronize=synchronize,
        device_name=lambda: MODEL,
        versions=lambda: {"fakedev": "1.0", "torch": str(torch.__version__)},
        device_count=lambda: COUNT,
        device_model=lambda index: MODEL,
        free_memory=free_memory,
        worker_memory=2**30,
        torch_device_for=lambda index: torch.device("cpu"),
        activate=activate,
        profile=profile,
    )


def backend():
    return _make("fakedev", lambda index: contextlib.nullcontext(), PROFILE)


def skewed_backend():
    return _make("fakedev_skewed", lambda index: _Skew() if index == 1 else contextlib.nullcontext())
