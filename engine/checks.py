"""Checks: how entries that are not a single op are judged.

Flag-API and reproducibility-note entries (promise ``"behaves"``) have no op
to run twice; a *check* observes the documented behaviour once per Hypothesis
example and says whether it held.

A check is ``fn(draw, entry, device, mode) -> CheckObservation`` registered
with ``@check("entry-id", source="flag-api")``. It must leave every global
setting as it found it. It raises :class:`CheckSkipped` when the behaviour
cannot be observed here (no CUDA, no ``torch.compile``), with the reason.
The registry is filled by the modules that define checks (``conformance.registry``
imports them); the engine never looks for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

Check = Callable[..., "CheckObservation"]

_CHECKS: dict[tuple[str, str], Check] = {}


class CheckSkipped(Exception):
    """The behaviour cannot be observed on this machine; the message says why.

    ``needs_device``: the device type the promise is about (``"cuda"`` for a cuBLAS note), when
    that is why: on any other device the case does not apply (rows say so in ``detail``)."""

    def __init__(self, message: str, *, needs_device: str | None = None) -> None:
        super().__init__(message)
        self.needs_device = needs_device


class CheckUnsupported(Exception):
    """The torch under test lacks what the check needs (a dtype, a kernel); the message says what.
    The verdict is ``unsupported``, never a harness error."""


@dataclass
class CheckObservation:
    """What a check saw for one example.

    - ``held``: True when the documented behaviour held, False when it did not,
      None when the promise is informational (e.g. "no fill is promised": record only).
    - ``observed``: a short word for the matrix (``"filled-nan"``, ``"round-trips"``...).
    - ``detail``: JSON-safe evidence (values seen, messages, the example).
    """

    held: bool | None
    observed: str
    detail: dict[str, Any] = field(default_factory=dict)


def check(entry_id: str, *, source: str, max_examples: int | None = None,
          compiles: bool = False, device: str | None = None, shrinks: bool = True) -> Callable[[Check], Check]:
    """Register ``fn`` for an entry. ``max_examples`` caps the Hypothesis examples
    for checks whose every example costs seconds (fresh processes, compilation).
    ``shrinks=False``: a failing example is kept as first seen, without Hypothesis's shrink
    phase, for a check whose draws have no smaller form (a seed and a position in its stream:
    a smaller seed is another example, not a smaller one) and whose every try costs seconds.
    ``compiles=True``: the check can observe its promise inside compiled code; under a compile
    setting it is called with ``compiler=`` (an :class:`engine.compiled.Compiler`).
    ``device``: the only device type the promise is about (``"cuda"`` for a cuBLAS note); the check
    raises :class:`CheckSkipped` with ``needs_device`` of the same name elsewhere."""

    def register(fn: Check) -> Check:
        if max_examples is not None:
            fn.max_examples = max_examples
        fn.compiles = compiles
        fn.device = device
        fn.shrinks = shrinks
        key = (source, entry_id)
        if key in _CHECKS and _CHECKS[key] is not fn:
            raise ValueError(f"two checks registered for {source}:{entry_id}")
        _CHECKS[key] = fn
        return fn

    return register


def check_for(source: str, entry_id: str) -> Check:
    try:
        return _CHECKS[(source, entry_id)]
    except KeyError:
        raise LookupError(f"no check for {source}:{entry_id}: add one with @check in conformance/checks/") from None


def compiles(source: str, entry_id: str) -> bool:
    """Does the entry's check run under a compile setting? (False for an entry without a check.)"""
    fn = _CHECKS.get((source, entry_id))
    return bool(getattr(fn, "compiles", False))


def example_cap(source: str, entry_id: str) -> int | None:
    return getattr(check_for(source, entry_id), "max_examples", None)


def shrinks(source: str, entry_id: str) -> bool:
    """Does Hypothesis shrink a failing example of the entry's check (``check(shrinks=)``)?"""
    return bool(getattr(check_for(source, entry_id), "shrinks", True))


def check_device(source: str, entry_id: str) -> str | None:
    """The only device type a registered check's promise is about (``check(device=)``), or None."""
    fn = _CHECKS.get((source, entry_id))
    return getattr(fn, "device", None) if fn is not None else None


def registered_checks(source: str) -> list[str]:
    return sorted(entry_id for src, entry_id in _CHECKS if src == source)


def has_check(source: str, entry_id: str) -> bool:
    return (source, entry_id) in _CHECKS
