"""The catalog: documented entries from every selected source.

The catalog knows entries, not devices: planning (entry, device, mode) cases is
:mod:`conformance.plan`'s job. Nothing here draws random numbers, so the
catalog is the same in every process.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from detconf.vocabulary import CHECK_SOURCES, DEFAULT_SOURCES, OP_SOURCES, OPT_IN_SOURCES, SOURCE_NAMES
from engine import docspec
from engine.entry import Entry, check_unique, load_entries_file

__all__ = ["CHECK_SOURCES", "DATA", "DEFAULT_SOURCES", "OPT_IN_SOURCES", "OP_SOURCES", "SOURCES", "TORCH_DOCS",
           "UnknownSource", "doc_versions", "load_catalog", "load_entries", "snapshot_entries", "snapshot_of_release",
           "snapshot_text"]

DATA = Path(__file__).resolve().parent / "data"
#: The project's copy of every release's ``use_deterministic_algorithms`` docstring (1.8.0 ...).
TORCH_DOCS = DATA / "torch-docs"
SOURCES = SOURCE_NAMES


class UnknownSource(ValueError):
    pass


def load_entries(source: str, *, doc_version: str | None = None) -> list[Entry]:
    """Entries of one source. ``doc_version`` picks a docs snapshot for torch-docs."""
    if source == "torch-docs":
        entries = snapshot_entries(doc_version) if doc_version else docspec.installed_entries()
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


def doc_versions() -> list[str]:
    """Releases whose docstring the project keeps, oldest first."""
    return docspec.known_doc_versions(TORCH_DOCS)


def snapshot_text(version: str) -> str:
    return docspec.snapshot_text(version, TORCH_DOCS)


def snapshot_entries(version: str) -> list[Entry]:
    """The promises of release ``version``'s docstring (``UnknownDocVersion`` for a release the project lacks)."""
    return docspec.snapshot_entries(version, TORCH_DOCS)


def snapshot_of_release(torch_version: str) -> str | None:
    """The snapshot that documents ``torch_version``'s release line (``2.14.1+cu130`` -> ``2.14.0``), if kept."""
    parts = torch_version.split("+")[0].split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    line = f"{int(parts[0])}.{int(parts[1])}.0"
    return line if line in doc_versions() else None


def load_catalog(sources: Iterable[str], *, doc_version: str | None = None) -> list[Entry]:
    catalog: list[Entry] = []
    for source in sources:
        catalog.extend(load_entries(source, doc_version=doc_version))
    return check_unique(catalog)
