"""The plan: one :class:`Case` per (entry, device type, mode), sorted.

Collection must be deterministic (xdist compares the collected ids of every
worker): nothing here draws random numbers, and the plan is sorted. A case is
plain data and travels as JSON (:meth:`Case.to_json`), e.g. to an isolated
child process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from detconf.vocabulary import DETERMINISTIC_MODES, SOURCE_NAMES, UNLISTED_SOURCES
from engine.entry import CatalogError, Entry


def same_conditions(a: Entry, b: Entry) -> bool:
    """Do two entries describe the same call (apart from the device)?"""
    return (
        a.op == b.op
        and a.backward == b.backward
        and set(a.cases) & set(b.cases) != set()
        and (a.quantized, a.sparse_dense, a.indices_output, a.weights_given)
        == (b.quantized, b.sparse_dense, b.indices_output, b.weights_given)
    )


def raise_documented_elsewhere(entry: Entry, device_type: str, catalog: Iterable[Entry]) -> str | None:
    """The id of another entry documenting a raise for the same call on ``device_type``."""
    if entry.applies_to(device_type):
        return None
    for other in catalog:
        if (
            other is not entry
            and other.source == entry.source
            and other.promise == "raises"
            and other.devices
            and device_type in other.devices
            and same_conditions(entry, other)
        ):
            return other.id
    return None


@dataclass(frozen=True)
class Case:
    """One generated test: an entry on one device type in one mode, in one phase.

    ``phase`` (``detconf.vocabulary.PHASES``): ``program`` runs the whole example
    under the mode; ``backward-only`` runs the forward with determinism off
    and only the backward under the mode.
    """

    entry: Entry
    device: str
    mode: str
    raise_documented_by: str | None = None
    phase: str = "program"

    @property
    def id(self) -> str:
        prefix = "" if self.entry.source == "torch-docs" else f"{self.entry.source}:"
        suffix = "" if self.phase == "program" else f"-{self.phase}"
        return f"{prefix}{self.entry.id}-{self.device}-{self.mode}{suffix}"

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry.to_json(), "device": self.device, "mode": self.mode,
                "raise_documented_by": self.raise_documented_by, "phase": self.phase}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Case":
        return cls(Entry.from_json(d["entry"]), d["device"], d["mode"], d.get("raise_documented_by"),
                   d.get("phase", "program"))


def phases_for(entry: Entry, mode: str) -> tuple[str, ...]:
    """``program`` always; ``backward-only`` too for a documented op entry about differentiation
    in a deterministic mode (with the mode off both phases run the same thing; the sweep names no
    kernel for the backward-only phase to reach)."""
    if entry.backward and entry.promise != "behaves" and mode in DETERMINISTIC_MODES and entry.source not in UNLISTED_SOURCES:
        return ("program", "backward-only")
    return ("program",)


def plan(catalog: list[Entry], devices: Iterable[str], modes: Iterable[str]) -> list[Case]:
    cases = []
    for entry in catalog:
        for device in devices:
            elsewhere = raise_documented_elsewhere(entry, device, catalog)
            for mode in modes:
                for phase in phases_for(entry, mode):
                    cases.append(Case(entry, device, mode, elsewhere, phase))
    order = {s: i for i, s in enumerate(SOURCE_NAMES)}
    cases.sort(key=lambda c: (order.get(c.entry.source, 99), c.entry.list_name, c.entry.position, c.entry.id,
                              c.phase != "program", c.device, c.mode))
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise CatalogError(f"duplicate test ids: {dup[:5]}")
    return cases
