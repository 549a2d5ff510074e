"""The catalog record: one documented promise.

An ``Entry`` is plain data. It knows nothing about devices being present,
pytest or Hypothesis; recipes and the runner read its condition fields.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterable

from detconf.findings_rule import torch_in, torch_range
from detconf.vocabulary import PROMISES as _PROMISE_MEANINGS

# "behaves": a documented behaviour of the flag API or the reproducibility notes holds.
PROMISES = tuple(_PROMISE_MEANINGS)

class CatalogError(ValueError):
    """A malformed or inconsistent catalog entry (one-line message)."""


@dataclass(frozen=True)
class Entry:
    """One documented entry, e.g. ``torch.Tensor.put_`` when ``accumulate=False``.

    - ``id``: unique, readable id, see :func:`make_entry_id`.
    - ``op``: fully qualified name as the docs spell it (``torch.Tensor.put_``).
    - ``sentence``: the bullet text, verbatim (lines joined with single spaces).
    - ``promise``: ``"deterministic"``, ``"raises"`` or ``"behaves"`` (flag API and
      reproducibility-note entries, judged by a check rather than an op recipe).
    - ``devices``: device types the sentence names, sorted; ``()`` means every device.
    - ``backward``: the promise is about differentiation ("attempting to differentiate",
      "requires grad", "backward").
    - ``cases``: alternative keyword-argument sets, each a tuple of ``(name, value)``
      pairs with Python values; ``((),)`` when the sentence names none. The four
      ``interpolate`` modes are four cases of one entry.
    - ``dtypes``: dtype classes the sentence restricts to (``"floating"``, ``"complex"``,
      ``"integer"``); ``()`` means any.
    - ``indices_output`` / ``weights_given`` / ``quantized`` / ``sparse_dense``: flags.
    - ``qualifiers``: other conditions in words, slugged (``"tensor-list-index"``,
      ``"src-tensor"``, ``"1d-input"``).
    - ``source``: ``"torch-docs"``, ``"ascend"``, ``"flag-api"``, ``"repro-notes"``...
    - ``doc_version``: the release whose text this came from, ``None`` if unknown.
    - ``list_name``: the list the bullet sits in (``"deterministic"``, ``"raises"``,
      ``"cublas"``...), for grouping in the matrix.
    - ``position``: index in its list, for stable ordering.
    - ``torch``: the torch releases whose docs make the promise, a PEP 440 specifier with an
      operator in every clause (``"<2.10"``: the cuBLAS sentence torch 2.10 removed;
      ``">=2.2"``); ``None``: every release. A case of an entry whose range leaves out the
      torch under test is not run (``conformance.plan``). The torch-docs entries need none:
      they are read from the docstring of the release under test.
    - ``contradicts``: where another entry of the same docstring promises the opposite for
      calls this entry covers (a *contradiction*, :func:`engine.docspec.find_contradictions`),
      which entry that is, its sentence, and which of the two judges those calls; ``""``: none.
    """

    id: str
    op: str
    sentence: str
    promise: str
    devices: tuple[str, ...] = ()
    backward: bool = False
    cases: tuple[tuple[tuple[str, Any], ...], ...] = ((),)
    dtypes: tuple[str, ...] = ()
    indices_output: bool = False
    weights_given: bool = False
    quantized: bool = False
    sparse_dense: bool = False
    qualifiers: tuple[str, ...] = ()
    source: str = "torch-docs"
    doc_version: str | None = None
    list_name: str = ""
    position: int = 0
    torch: str | None = None
    contradicts: str = ""

    def __post_init__(self) -> None:
        if self.promise not in PROMISES:
            raise CatalogError(f"entry {self.id!r}: promise must be one of {PROMISES}, got {self.promise!r}")
        if not self.id or not self.op:
            raise CatalogError(f"entry {self.id!r}: id and op must be non-empty")
        if not self.cases:
            raise CatalogError(f"entry {self.id!r}: cases must hold at least one (possibly empty) case")
        if self.torch is not None:
            try:
                torch_range(self.torch)
            except (TypeError, AttributeError, ValueError) as exc:
                raise CatalogError(f"entry {self.id!r}: field 'torch' is {self.torch!r} ({exc}), expected a PEP 440 "
                                   "version specifier with an operator, e.g. '<2.10' or '>=2.2'") from None

    @property
    def short_op(self) -> str:
        return self.op.rsplit(".", 1)[-1]

    def applies_to(self, device_type: str) -> bool:
        """Does the sentence name this device type (or no device at all)?"""
        return not self.devices or device_type in self.devices

    def applies_to_torch(self, version: str) -> bool:
        """Do the docs of torch ``version`` (``2.11.0``, ``2.13.0+cpu``, ``2.16.0a0+git…``: local
        labels and pre-releases count as their release) make this promise?"""
        return self.torch is None or torch_in(version, torch_range(self.torch))

    def case_kwargs(self) -> list[dict[str, Any]]:
        return [dict(case) for case in self.cases]

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict; ``cases`` become a list of dicts; ``torch`` only when set."""
        d = dataclasses.asdict(self)
        d["entry_id"] = d.pop("id")
        d["cases"] = self.case_kwargs()
        d["devices"] = list(self.devices)
        d["dtypes"] = list(self.dtypes)
        d["qualifiers"] = list(self.qualifiers)
        if self.torch is None:
            del d["torch"]  # every release: the catalog files leave the field out
        if not self.contradicts:
            del d["contradicts"]  # the common case: no other entry says the opposite
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Entry":
        try:
            d = dict(d)
            d["id"] = d.pop("entry_id")
            d["cases"] = tuple(tuple(sorted(c.items())) for c in d.get("cases") or [{}])
            for key in ("devices", "dtypes", "qualifiers"):
                d[key] = tuple(d.get(key) or ())
            return cls(**d)
        except CatalogError:
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise CatalogError(f"malformed catalog entry {d.get('id', d)!r}: {exc}") from None


def _kw(value: Any) -> str:
    return repr(value)


def make_entry_id(
    op: str,
    *,
    cases: Iterable[Iterable[tuple[str, Any]]] = ((),),
    backward: bool = False,
    devices: Iterable[str] = (),
    dtypes: Iterable[str] = (),
    indices_output: bool = False,
    weights_given: bool = False,
    quantized: bool = False,
    sparse_dense: bool = False,
    qualifiers: Iterable[str] = (),
) -> str:
    """Readable unique id: ``short(kwargs).backward[tags,devices]``.

    Examples: ``put_(accumulate=False)``, ``put_(accumulate=True)[cuda]``,
    ``interpolate(mode='linear'|'bilinear').backward[cuda]``, ``resize_[quantized]``.
    """
    short = op.rsplit(".", 1)[-1]
    cases = [tuple(c) for c in cases]
    names: list[str] = []
    for case in cases:
        for name, _ in case:
            if name not in names:
                names.append(name)
    kw = []
    for name in names:
        values = []
        for case in cases:
            for n, v in case:
                if n == name and _kw(v) not in values:
                    values.append(_kw(v))
        kw.append(f"{name}={'|'.join(values)}")
    text = short + (f"({','.join(kw)})" if kw else "")
    if backward:
        text += ".backward"
    tags: list[str] = []
    if sparse_dense:
        tags.append("sparse-dense")
    if quantized:
        tags.append("quantized")
    if indices_output:
        tags.append("indices")
    if weights_given:
        tags.append("weights")
    dtypes = list(dtypes)
    if dtypes:
        tags.append("|".join(dtypes))
    tags.extend(qualifiers)
    devices = sorted(devices)
    if devices:
        tags.append("|".join(devices))
    if tags:
        text += f"[{','.join(tags)}]"
    return text


def check_unique(entries: Iterable[Entry]) -> list[Entry]:
    """Reject duplicate ids with a message naming them."""
    seen: dict[str, Entry] = {}
    out = []
    for e in entries:
        key = (e.source, e.id)
        if key in seen:
            raise CatalogError(
                f"duplicate entry id {e.id!r} in source {e.source!r}: {seen[key].sentence!r} and {e.sentence!r}"
            )
        seen[key] = e
        out.append(e)
    return out


def entries_to_jsonl(entries: Iterable[Entry]) -> str:
    return "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in entries)


def load_entries_file(path, *, source: str) -> list[Entry]:
    """Entries from a JSON file holding a list of ``Entry.to_json()`` objects.

    Malformed JSON, a missing field or a wrong source raises
    :class:`CatalogError` with a one-line message naming the file. (The project's own
    catalog files are read through ``conformance.datafiles``, which also checks each field
    against a JSON Schema.)
    """
    import pathlib

    path = pathlib.Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read catalog: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    return entries_from_json(raw, path=path, source=source)


def entries_from_json(raw: Any, *, path, source: str) -> list[Entry]:
    """Entries from the parsed content of a catalog file (a list of ``Entry.to_json()`` objects);
    ``path`` names the file in messages. Every entry must be of ``source``; ids are unique."""
    if not isinstance(raw, list):
        raise CatalogError(f"{path}: expected a JSON list of entries, got {type(raw).__name__}")
    entries = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise CatalogError(f"{path}: entry #{index} is a {type(item).__name__}, expected an object")
        try:
            entry = Entry.from_json(item)
        except CatalogError as exc:
            raise CatalogError(f"{path}: entry #{index}: {' '.join(str(exc).split())}") from None
        if entry.source != source:
            raise CatalogError(f"{path}: entry {entry.id!r} has source {entry.source!r}, expected {source!r}")
        entries.append(entry)
    try:
        return check_unique(entries)
    except CatalogError as exc:
        raise CatalogError(f"{path}: {exc}") from None
