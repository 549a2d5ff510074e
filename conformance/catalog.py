"""The catalog: documented entries from every selected source.

The catalog knows entries, not devices: planning (entry, device, mode) cases is
:mod:`conformance.plan`'s job. Nothing here draws random numbers, so the
catalog is the same in every process.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from detconf.vocabulary import CHECK_SOURCES, DEFAULT_SOURCES, OP_SOURCES, OPT_IN_SOURCES, SOURCE_NAMES
from detconf.engine import docspec
from detconf.conformance.sweep import sweep_entries
from detconf.engine.entry import CatalogError, Entry, check_unique, entries_from_json

__all__ = ["CHECK_SOURCES", "DATA", "DATA_FILES", "DEFAULT_SOURCES", "OPT_IN_SOURCES", "OP_SOURCES", "SOURCES",
           "PROFILE_SOURCES", "TORCH_DOCS", "UnknownSource", "data_file", "doc_versions", "load_catalog",
           "load_check_entries", "load_entries", "profile_entries", "profiles",
           "read_entries_file", "snapshot_entries", "snapshot_of_release", "snapshot_text"]

DATA = Path(__file__).resolve().parent / "data"
#: The project's copy of every release's ``use_deterministic_algorithms`` docstring (1.8.0 ...).
TORCH_DOCS = DATA / "torch-docs"
SOURCES = SOURCE_NAMES
#: The catalog file of each source that has one (under :data:`DATA`), validated against
#: ``data/schemas/catalog-entries.schema.json`` when read (torch-free, before the run starts; the
#: Ascend list is read for the run through the NPU backend's profile, which names this file).
DATA_FILES = {"ascend": "ascend.json", "flag-api": "flag_api.json", "repro-notes": "repro_notes.json"}
#: The promise every entry of a source must make, where the source fixes it.
_SOURCE_PROMISE = {source: "behaves" for source in CHECK_SOURCES}


def data_file(source: str) -> Path:
    """The catalog file of ``source`` (read at call time, so a test can point :data:`DATA` elsewhere)."""
    return DATA / DATA_FILES[source]


def read_entries_file(path: str | Path, *, source: str) -> list[Entry]:
    """The entries of one catalog file, in file order, once the file validates against its schema.

    Raises :class:`engine.entry.CatalogError` (one line naming the file, the entry and the
    field) for malformed JSON, a schema violation, an entry of another source or promise, or
    a duplicate id. Torch-free: the plugin checks the data files before importing torch.
    """
    from detconf.conformance.datafiles import read_json

    entries = entries_from_json(read_json(path, "catalog-entries", item="catalog entry"), path=path, source=source)
    promise = _SOURCE_PROMISE.get(source)
    for entry in entries:
        if promise is not None and entry.promise != promise:
            raise CatalogError(f"{path}: entry {entry.id!r} has promise {entry.promise!r}, expected {promise!r}")
    return entries


class UnknownSource(ValueError):
    pass


def load_check_entries(source: str, path: str | Path | None = None) -> list[Entry]:
    """The catalog entries of check source ``source`` (one of ``CHECK_SOURCES``: the flag API, the
    reproducibility notes), in file order; their checks are :mod:`conformance.checks`'.

    ``path`` overrides the catalog file (for tests; default :func:`data_file`). Malformed JSON,
    a schema violation, an entry of another source or promise, or a duplicate id raises
    :class:`engine.entry.CatalogError` with a one-line message naming the file, the entry and
    the field.
    """
    if source not in CHECK_SOURCES:
        raise ValueError(f"unknown check source {source!r}; expected one of {CHECK_SOURCES}")
    return read_entries_file(Path(path) if path is not None else data_file(source), source=source)


#: Sources read from the backends' vendor profiles (:attr:`engine.backends.VendorProfile.source`):
#: every distribution's profile is ``vendor``; the built-in NPU backend's Ascend list is ``ascend``.
PROFILE_SOURCES = ("ascend", "vendor")


def profiles(source: str | None = None) -> list:
    """(backend, profile) for every backend whose vendor profile is of ``source`` (None: any)."""
    from detconf.engine.devices import backends  # torch: imported when a profile source is loaded, not before

    return [(b, b.profile) for b in backends().values()
            if b.profile is not None and (source is None or b.profile.source == source)]


def vendor_profiles() -> list:
    """(backend, profile) for every backend that comes with a vendor profile of source ``vendor``
    (an installed distribution's)."""
    return profiles("vendor")


def import_vendor_recipes(source: str | None = "vendor") -> None:
    """Import the recipe modules the profiles of ``source`` name (None: every profile's); their
    ``@recipe`` functions register."""
    import importlib

    for backend, profile in profiles(source):
        for module in profile.recipes:
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - the vendor's module: one line naming it
                raise CatalogError(" ".join(f"vendor profile of backend {backend.name!r} ({backend.origin}): recipes "
                                            f"module {module!r} failed: {type(exc).__name__}: {exc}".split())) from None


def profile_entries(source: str) -> list[Entry]:
    """A profile source (:data:`PROFILE_SOURCES`): the entries of every profile of ``source``
    (read like ``ascend.json``), once its recipe modules are imported."""
    import_vendor_recipes(source)
    entries: list[Entry] = []
    for backend, profile in profiles(source):
        entries.extend(read_entries_file(profile.data_path(), source=source))
    return entries


def vendor_entries() -> list[Entry]:
    """Source ``vendor``: the entries of every installed distribution's vendor profile."""
    return profile_entries("vendor")


def load_entries(source: str, *, doc_version: str | None = None) -> list[Entry]:
    """Entries of one source. ``doc_version`` picks a docs snapshot for torch-docs."""
    if source == "torch-docs":
        entries = snapshot_entries(doc_version) if doc_version else docspec.installed_entries()
    elif source in PROFILE_SOURCES:
        entries = profile_entries(source)
    elif source == "sweep":
        entries = sweep_entries()
    elif source in CHECK_SOURCES:
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
    """The entries of ``sources`` (each source once, in the order given). With ``doc_version``
    (``--doc-version X``) the flag-API and reproducibility-notes entries are judged as promises
    of release X's docs (each entry's ``torch`` range says whether X makes it), so they carry X
    as their ``doc_version``, as the torch-docs entries of X's snapshot do."""
    import dataclasses

    catalog: list[Entry] = []
    for source in dict.fromkeys(sources):
        entries = load_entries(source, doc_version=doc_version)
        if doc_version and source in CHECK_SOURCES:
            entries = [dataclasses.replace(e, doc_version=doc_version) for e in entries]
        catalog.extend(entries)
    return check_unique(catalog)
