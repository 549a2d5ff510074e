"""The catalog: documented entries from every selected source.

The catalog knows entries, not devices: planning (entry, device, mode) cases is
:mod:`conformance.plan`'s job. Nothing here draws random numbers, so the
catalog is the same in every process.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from detconf.vocabulary import CHECK_SOURCES, DEFAULT_SOURCES, DOC_DEVICES, OP_SOURCES, OPT_IN_SOURCES, SOURCE_NAMES
from detconf.engine import docspec
from detconf.conformance.findings import fact_entries
from detconf.conformance.sweep import sweep_entries
from detconf.engine.entry import CatalogError, Entry, check_unique, entries_from_json, make_entry_id

__all__ = ["CHECK_SOURCES", "DATA", "DATA_FILES", "DEFAULT_SOURCES", "OPT_IN_SOURCES", "OP_SOURCES", "SOURCES",
           "PROFILE_SOURCES", "TORCH_DOCS", "UnknownSource", "data_file", "doc_versions", "load_catalog",
           "load_check_entries", "load_entries", "profile_entries", "profiles",
           "read_entries_file", "resolve_contradictions", "snapshot_entries", "snapshot_of_release", "snapshot_text"]

DATA = Path(__file__).resolve().parent / "data"
#: The project's copy of every release's ``use_deterministic_algorithms`` docstring (1.8.0 ...).
TORCH_DOCS = DATA / "torch-docs"
SOURCES = SOURCE_NAMES
#: The catalog file of each source that has one (under :data:`DATA`), validated against
#: ``data/schemas/catalog-entries.schema.json`` when read (torch-free, before the run starts; the
#: Ascend list is read for the run through the NPU backend's profile, which names this file).
DATA_FILES = {"ascend": "ascend.json", "flag-api": "flag_api.json", "repro-notes": "repro_notes.json",
              "sdpa": "sdpa.json", "flex-attention": "flex_attention.json",
              "batch-invariance": "batch_invariance_catalog.json"}
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
        entries = snapshot_entries(doc_version) if doc_version else resolve_contradictions(docspec.installed_entries())
        entries = entries + fact_entries(doc_version)  # version-ranged facts: data/version-facts.json
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
    """The promises of release ``version``'s docstring (``UnknownDocVersion`` for a release the project lacks),
    its contradictions resolved (:func:`resolve_contradictions`)."""
    return resolve_contradictions(docspec.snapshot_entries(version, TORCH_DOCS))


_DTYPE_CLASSES = ("floating", "complex", "integer")


def resolve_contradictions(entries: list[Entry]) -> list[Entry]:
    """``entries`` with every contradiction (:func:`engine.docspec.find_contradictions`) judged once,
    against the more specific sentence.

    The specific entry keeps its id and says which entry contradicts it (``contradicts``); the
    general entry is replaced by the part of its calls that the specific one does not cover: the
    devices it names beyond the specific one's (a sentence that names none: the documented devices),
    and on the shared devices the keyword values (``conformance.complements.KWARG_DOMAINS``) or
    dtype classes the specific sentence leaves out. Each part keeps the general sentence, an id
    made from its conditions, and names the specific entry. A narrowing this cannot spell (a
    keyword with no known domain, a qualifier) is a :class:`CatalogError`.
    """
    found = docspec.find_contradictions(entries)
    if not found:
        return entries
    notes: dict[str, list[str]] = {}
    parts: dict[str, list[Entry]] = {}
    for c in found:
        notes.setdefault(c.specific.id, []).append(c.note_for_specific())
        current = parts.get(c.general.id, [c.general])
        parts[c.general.id] = [rest for part in current for rest in _outside(part, c.specific, c.note_for_general())]
    out: list[Entry] = []
    for e in entries:
        if e.id in parts:
            out.extend(parts[e.id])
        elif e.id in notes:
            out.append(dataclasses.replace(e, contradicts="; ".join(notes[e.id])))
        else:
            out.append(e)
    return check_unique(out)


def _outside(general: Entry, specific: Entry, note: str) -> list[Entry]:
    """The parts of ``general``'s calls that ``specific`` does not cover, each an entry."""
    from detconf.conformance.complements import KWARG_DOMAINS

    own = set(general.devices or DOC_DEVICES)
    shared = set(specific.devices or own) & own
    if not specific.devices and not general.devices:
        shared = own
    pieces: list[dict] = []
    if own - shared:
        pieces.append({"devices": tuple(sorted(own - shared))})
    general_names = {n for case in general.cases for n, _ in case}
    narrowed = sorted({n for case in specific.cases for n, _ in case} - general_names)
    extra_qualifiers = set(specific.qualifiers) - set(general.qualifiers)
    if extra_qualifiers:
        raise CatalogError(f"{general.id!r} contradicts {specific.id!r}, which narrows it by {sorted(extra_qualifiers)}: "
                           "the calls outside that condition cannot be spelt as an entry")
    if len(narrowed) > 1:
        raise CatalogError(f"{general.id!r} contradicts {specific.id!r}, which narrows it by several keywords "
                           f"({narrowed}): the calls outside cannot be spelt as one entry")
    if narrowed:
        name = narrowed[0]
        domain = KWARG_DOMAINS.get((general.op, name))
        if domain is None:
            raise CatalogError(f"{general.id!r} contradicts {specific.id!r}, which narrows it by {name!r}: the values "
                               f"of {name!r} for {general.op} are not known (conformance/complements.py, KWARG_DOMAINS)")
        taken = {v for case in specific.cases for n, v in case if n == name}
        rest = [v for v in domain if v not in taken]
        if rest:
            pieces.append({"devices": tuple(sorted(shared)),
                           "cases": tuple(tuple(sorted(case + ((name, v),))) for case in general.cases for v in rest)})
    elif specific.dtypes and set(specific.dtypes) != set(general.dtypes or _DTYPE_CLASSES):
        rest = tuple(c for c in (general.dtypes or _DTYPE_CLASSES) if c not in specific.dtypes)
        pieces.append({"devices": tuple(sorted(shared)), "dtypes": rest})
    out = []
    for piece in pieces:
        fields = {k: piece.get(k, getattr(general, k)) for k in ("devices", "cases", "dtypes")}
        new_id = make_entry_id(general.op, backward=general.backward, indices_output=general.indices_output,
                               weights_given=general.weights_given, quantized=general.quantized,
                               sparse_dense=general.sparse_dense, qualifiers=general.qualifiers, **fields)
        out.append(dataclasses.replace(general, id=new_id, contradicts=note, **fields))
    return out


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
