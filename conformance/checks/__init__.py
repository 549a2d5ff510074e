"""Entries judged by checks rather than op recipes: the flag API and the
reproducibility notes.

``load_check_entries("flag-api")`` / ``load_check_entries("repro-notes")`` read
the catalog files in ``conformance/data/``; importing this package registers
one ``@check`` per entry (modules below). Where to find a check:

- ``flag_api``: use_deterministic_algorithms, the getters, set/get_deterministic_debug_mode
- ``uninitialized_memory``: fill_uninitialized_memory for empty, empty_like, empty_strided,
  new_empty, resize_
- ``seeds``: manual_seed (in process and across fresh processes), random.seed, np.random.seed
- ``dataloader``: DataLoader with and without worker_init_fn / generator
- ``cuda_env``: CUBLAS_WORKSPACE_CONFIG and cuDNN convolutions (CUDA only)
- ``inductor``: Inductor's deterministic setting and a torch.compile'd function
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.entry import CatalogError, Entry, check_unique

from . import cuda_env, dataloader, flag_api, inductor, seeds, uninitialized_memory  # noqa: F401  (register checks)
from ._support import FLAG_API, REPRO_NOTES

CHECK_SOURCES = (FLAG_API, REPRO_NOTES)

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
CATALOG_FILES = {FLAG_API: DATA_DIR / "flag_api.json", REPRO_NOTES: DATA_DIR / "repro_notes.json"}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_check_entries(source: str, path: str | Path | None = None) -> list[Entry]:
    """The catalog entries of ``source`` (one of :data:`CHECK_SOURCES`), in file order.

    ``path`` overrides the catalog file (for tests). Malformed JSON, a malformed
    entry, an entry of another source or promise, or a duplicate id raises
    :class:`CatalogError` with a one-line message naming the file.
    """
    if source not in CHECK_SOURCES:
        raise ValueError(f"unknown check source {source!r}; expected one of {CHECK_SOURCES}")
    file = Path(path) if path is not None else CATALOG_FILES[source]
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{file}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except OSError as exc:
        raise CatalogError(f"{file}: cannot read catalog: {_one_line(exc)}") from None
    if not isinstance(data, list):
        raise CatalogError(f"{file}: expected a JSON list of entries, got {type(data).__name__}")
    entries = []
    for position, record in enumerate(data):
        if not isinstance(record, dict):
            raise CatalogError(f"{file}: item {position} is a {type(record).__name__}, expected an object")
        try:
            entry = Entry.from_json(record)
        except CatalogError as exc:
            raise CatalogError(f"{file}: item {position}: {_one_line(exc)}") from None
        if entry.source != source:
            raise CatalogError(f"{file}: entry {entry.id!r} has source {entry.source!r}, expected {source!r}")
        if entry.promise != "behaves":
            raise CatalogError(f"{file}: entry {entry.id!r} has promise {entry.promise!r}, expected 'behaves'")
        entries.append(entry)
    try:
        return check_unique(entries)
    except CatalogError as exc:
        raise CatalogError(f"{file}: {_one_line(exc)}") from None
