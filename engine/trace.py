"""Reach: which ATen operators a run dispatched, and whether they include a target.

A documented sentence is about a kernel (``index_add_cuda_``,
``adaptive_avg_pool2d_backward``); a verdict about that sentence is only true
when the example reached it. :class:`DispatchTrace` is a ``TorchDispatchMode``
that counts every operator overload dispatched below autograd, forward and
backward (autograd hands the mode to its worker threads), and calls it
unchanged: the trace never alters what runs. An operator is counted when it is
*called*, so a kernel that raises the determinism alert counts as reached.

Targets are ATen names: ``"aten.index_add_"`` matches every overload of the
operator, ``"aten.index_add_.default"`` only that overload.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from detconf.engine.backends import HOST

__all__ = ["DispatchTrace", "OpFailure", "Targets", "TargetError", "is_mixed_devices", "is_out_of_memory", "matches", "not_a_gap", "reached", "top_ops"]


class TargetError(ValueError):
    """A malformed target declaration (one-line message)."""


@dataclass(frozen=True)
class OpFailure:
    """An operator that raised while traced: which one, on which devices, and whether the same
    call runs on the CPU (``cpu_replay``: ``"ok"``, or what went wrong there; None when every
    tensor was on the CPU already, so there is nothing to compare)."""

    op: str
    devices: tuple[str, ...]
    exc: BaseException
    cpu_replay: str | None

    @property
    def off_cpu(self) -> bool:
        return any(d != HOST for d in self.devices)


def _devices_of(args, kwargs) -> tuple[str, ...]:
    import torch

    found = set()

    def visit(value):
        if isinstance(value, torch.Tensor):
            found.add(value.device.type)
        elif isinstance(value, torch.device):
            found.add(value.type)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(args)
    visit(kwargs)
    return tuple(sorted(found))


def _on_cpu(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu") if value.device.type != HOST else value.detach().clone()
    if isinstance(value, torch.device):
        return torch.device("cpu")
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    return value


_OUT_OF_MEMORY = re.compile(r"out of memory", re.IGNORECASE)
#: torch's words for a call whose tensors are on different devices: the caller's fault, which a
#: replay with every tensor on the CPU would hide.
_MIXED_DEVICES = re.compile(r"Expected all tensors to be on the same device|is not on the expected device")


def is_out_of_memory(exc: BaseException) -> bool:
    """Did a device run out of memory (``torch.OutOfMemoryError``, CUDA's, or a backend's error
    that says so)? Never a missing kernel: the same call fits on the CPU's larger memory, and the
    device still has the kernel."""
    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                              getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if isinstance(k, type))
    return (bool(kinds) and isinstance(exc, kinds)) or bool(_OUT_OF_MEMORY.search(str(exc)))


def is_mixed_devices(exc: BaseException) -> bool:
    """Was a call given tensors on different devices? Never a device's missing kernel: the same
    call with every tensor moved to the CPU runs, but the program, not the device, is wrong."""
    return bool(_MIXED_DEVICES.search(str(exc)))


def not_a_gap(exc: BaseException) -> str | None:
    """Why ``exc`` can never be a device's missing kernel, or None: the device ran out of memory,
    or the call was given tensors on different devices (a replay on the CPU would run either)."""
    if is_out_of_memory(exc):
        return "the device ran out of memory"
    if is_mixed_devices(exc):
        return "tensors on different devices"
    return None


def _replay_on_cpu(func, args, kwargs) -> str:
    """Call ``func`` again with every tensor (and device argument) moved to the CPU, on copies.

    The replay is not part of the run: it goes with determinism off (the CPU kernel's own
    alert must not count as the op's), its warnings are dropped, and every global setting
    and the RNG states are put back afterwards."""
    import warnings

    from detconf.engine.determinism import deterministic_mode

    with deterministic_mode("off", cudnn_benchmark=None, rng=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cpu_args, cpu_kwargs = _on_cpu(args), _on_cpu(kwargs)
        except Exception as exc:  # noqa: BLE001 - the backend cannot even hand its tensors over
            return f"copy to cpu failed: {_first_line(exc)}"
        try:
            func(*cpu_args, **cpu_kwargs)
        except Exception as exc:  # noqa: BLE001
            return f"fails on cpu too: {_first_line(exc)}"
    return "ok"


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:2 * 10**2] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


class DispatchTrace(TorchDispatchMode):
    """Count the operator overloads dispatched while the mode is active.

    ``ops`` maps ``"aten.name.overload"`` to a call count. Names are built once
    per overload (the dispatch path only increments a counter keyed by the
    overload object). ``failure`` is the last operator that raised (:class:`OpFailure`);
    a call off the CPU that raised is replayed once on CPU copies of its arguments, so the
    runner can tell a backend's gap (runs on the CPU) from a bad call (fails there too).
    """

    def __init__(self) -> None:
        super().__init__()
        self._counts: dict = {}
        self.failure: OpFailure | None = None

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in a Dynamo "disable" (two eval-frame switches
        # per dispatched operator) unless the class says no. This mode never runs under
        # torch.compile (compiled runs read reach from their graphs), so the wrapper would be
        # pure cost on every operator of every traced run.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        counts = self._counts
        counts[func] = counts.get(func, 0) + 1
        if kwargs is None:
            kwargs = {}
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            devices = _devices_of(args, kwargs)
            off_host = any(d != HOST for d in devices)
            # What can never be a missing kernel is not replayed: no replay makes it one.
            reason = not_a_gap(exc) if off_host else None
            replay = (None if not off_host else f"not replayed: {reason}" if reason
                      else _replay_on_cpu(func, args, kwargs))
            self.failure = OpFailure(str(func), devices, exc, replay)
            raise

    @property
    def ops(self) -> Counter:
        named: Counter = Counter()
        for func, n in self._counts.items():
            name = _NAMES.get(func)
            if name is None:
                name = _NAMES[func] = str(func)
            named[name] += n
        return named


# ``str`` of an operator overload, once per overload (it is built from its schema every time).
_NAMES: dict = {}


def _split(name: str) -> tuple[str, str | None]:
    """``"aten.add_.Tensor"`` → (``"aten.add_"``, ``"Tensor"``); ``"aten.add_"`` → (``"aten.add_"``, None)."""
    parts = name.split(".")
    if len(parts) == 2:
        return name, None
    if len(parts) == 3:
        return f"{parts[0]}.{parts[1]}", parts[2]
    raise TargetError(f"target {name!r}: expected 'namespace.operator' or 'namespace.operator.overload'")


def matches(target: str, dispatched: str) -> bool:
    """Does the dispatched overload name ``dispatched`` satisfy ``target``?"""
    t_op, t_overload = _split(target)
    d_op, d_overload = _split(dispatched)
    return t_op == d_op and (t_overload is None or t_overload == d_overload)


def reached(targets: Iterable[str], dispatched: Iterable[str]) -> bool:
    dispatched = list(dispatched)
    return any(matches(t, d) for t in targets for d in dispatched)


def top_ops(counts: Mapping[str, int], n: int = 8) -> dict[str, int]:
    """The ``n`` most frequent operators, most frequent first (ties by name)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return dict(ranked[:n])


@dataclass(frozen=True)
class Targets:
    """The operators an entry's sentence is about, per device type.

    - ``ops``: what reaching the sentence's code means on any device.
    - ``per_device``: device type → operators that stand instead of ``ops``
      there, where a backend library takes over (cuDNN on CUDA, an NPU kernel).

    Any one of the operators dispatched is enough: they are alternative
    spellings of the same kernel (``index_add`` / ``index_add_``) or the
    backends that implement it.
    """

    ops: tuple[str, ...]
    per_device: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Device type → the kernels a sentence covers there, each of which some example of a case
    #: must reach (each a group of alternative spellings): ``grid_sample``'s backward on CUDA is
    #: the native 2-D kernel, the native 3-D kernel and cuDNN's. Absent: any one operator will do.
    required: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ops:
            raise TargetError("a target declaration needs at least one operator")
        for name in list(self.ops) + [n for ops in self.per_device.values() for n in ops] + \
                [n for groups in self.required.values() for group in groups for n in group]:
            _split(name)
        if any(not group for groups in self.required.values() for group in groups):
            raise TargetError("a required kernel needs at least one operator")

    def for_device(self, device_type: str) -> tuple[str, ...]:
        ops = tuple(self.per_device.get(device_type, self.ops))
        extra = tuple(n for group in self.required.get(device_type, ()) for n in group if n not in ops)
        return ops + extra

    def kernels_for(self, device_type: str) -> tuple[tuple[str, ...], ...]:
        """The kernels every case on ``device_type`` must reach (empty: any target will do)."""
        return tuple(tuple(group) for group in self.required.get(device_type, ()))

    @classmethod
    def of(cls, spec: "str | Iterable[str] | Targets", **per_device: "str | Iterable[str]") -> "Targets":
        if isinstance(spec, Targets):
            return spec
        ops = (spec,) if isinstance(spec, str) else tuple(spec)
        devices = {d: ((v,) if isinstance(v, str) else tuple(v)) for d, v in per_device.items()}
        return cls(ops, devices)
