"""The catalog: documented entries from every selected source, and the plan of
(entry, device, mode) cases the generated tests run.

Collection must be deterministic (xdist compares the collected ids of every
worker): nothing here draws random numbers, and the plan is sorted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pathlib import Path

from engine.entry import CatalogError, Entry, check_unique, load_entries_file

DATA = Path(__file__).resolve().parent / "data"
OP_SOURCES = ("torch-docs", "ascend")
# Sources that are run only when asked for by name (slow, or not a promise).
OPT_IN_SOURCES = ("sweep",)
CHECK_SOURCES = ("flag-api", "repro-notes")
DEFAULT_SOURCES = OP_SOURCES + CHECK_SOURCES
SOURCES = DEFAULT_SOURCES + OPT_IN_SOURCES
DEFAULT_MODES = ("error", "warn_only")
ALL_MODES = ("error", "warn_only", "off")


class UnknownSource(ValueError):
    pass


def load_entries(source: str, *, doc_version: str | None = None) -> list[Entry]:
    """Entries of one source. ``doc_version`` picks a docs snapshot for torch-docs."""
    if source == "torch-docs":
        from engine import docspec

        entries = docspec.snapshot_entries(doc_version) if doc_version else docspec.installed_entries()
    elif source == "ascend":
        entries = load_entries_file(DATA / "ascend.json", source="ascend")
    elif source == "sweep":
        from conformance.sweep import sweep_entries

        entries = sweep_entries()
    elif source in CHECK_SOURCES:
        from conformance.checks import load_check_entries

        entries = load_check_entries(source)
    else:
        raise UnknownSource(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    return check_unique(entries)


def load_catalog(sources: Iterable[str], *, doc_version: str | None = None) -> list[Entry]:
    catalog: list[Entry] = []
    for source in sources:
        catalog.extend(load_entries(source, doc_version=doc_version))
    return check_unique(catalog)


def _same_conditions(a: Entry, b: Entry) -> bool:
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
            and _same_conditions(entry, other)
        ):
            return other.id
    return None


@dataclass(frozen=True)
class Case:
    """One generated test: an entry on one device type in one mode."""

    entry: Entry
    device: str
    mode: str
    raise_documented_by: str | None = None

    @property
    def id(self) -> str:
        prefix = "" if self.entry.source == "torch-docs" else f"{self.entry.source}:"
        return f"{prefix}{self.entry.id}-{self.device}-{self.mode}"


def plan(catalog: list[Entry], devices: Iterable[str], modes: Iterable[str]) -> list[Case]:
    cases = []
    for entry in catalog:
        for device in devices:
            elsewhere = raise_documented_elsewhere(entry, device, catalog)
            for mode in modes:
                cases.append(Case(entry, device, mode, elsewhere))
    order = {s: i for i, s in enumerate(SOURCES)}
    cases.sort(key=lambda c: (order.get(c.entry.source, 99), c.entry.list_name, c.entry.position, c.entry.id, c.device, c.mode))
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise CatalogError(f"duplicate test ids: {dup[:5]}")
    return cases
