"""Known findings: non-conforming verdicts already reported about a torch release.

A known finding keeps its true verdict in the results and the matrix; only the
pytest outcome changes (xfail), so a CI gate stays green on a torch whose
findings are recorded, and turns red on anything new. A finding that no
longer reproduces is reported with a warning, so the list does not rot.

File: ``conformance/data/known-findings.json`` — a list of objects with
``source``, ``entry_id``, ``verdict`` (a failing one), ``torch`` (a PEP 440 version
specifier such as ``">=2.13"``, ``"==2.13.*"`` or ``">=2.5,<2.14"``, evaluated with
:mod:`packaging` against the installed torch's release; local labels such as ``+cpu`` and
pre-releases count as their release; a bare version such as ``"2.13"`` is an error),
``why``, and optionally ``devices`` / ``modes`` / ``compile`` (the compile settings it concerns;
absent: every setting) / ``phases`` (``program``, ``backward-only``: the phases it concerns;
absent: every phase; a row without a phase is ``program``). The file is validated against
``data/schemas/known-findings.schema.json`` (unknown keys are errors).

Version-ranged facts: ``conformance/data/version-facts.json`` — facts about torch releases from
public threads, each with the torch range it holds for, how the range was checked, the
docstring listings it implies (``listed``: checked against the project's docstring snapshots,
:func:`listing_problems`) and the cells it explains (``cells``: findings that may also name
``docs``, the releases whose docstring the cell was judged against). Its cells come first in
:func:`load_findings`, with the fact's claim and thread as their reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from detconf.findings_rule import covers

FINDINGS_FILE = Path(__file__).resolve().parent / "data" / "known-findings.json"
FACTS_FILE = Path(__file__).resolve().parent / "data" / "version-facts.json"


@dataclass(frozen=True)
class Finding:
    source: str
    entry_id: str
    verdict: str
    torch: SpecifierSet
    why: str
    devices: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    compile: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    docs: SpecifierSet | None = None

    def matches(self, row: dict[str, Any]) -> bool:
        return covers(row, source=self.source, entry_id=self.entry_id, torch=self.torch, devices=self.devices,
                      modes=self.modes, compile=self.compile, phases=self.phases, docs=self.docs)


def load_findings(path: str | Path | None = None) -> list[Finding]:
    """The findings of ``path`` (default: the cells of :data:`FACTS_FILE`, then
    :data:`FINDINGS_FILE`; a file that is truly absent means none).

    Malformed JSON or a schema violation (wrong type, unknown verdict, a ``torch`` that is
    not a version specifier, an unknown key) raises :class:`engine.entry.CatalogError` with
    one line naming the file, the finding and the field; so does a path that is there but
    cannot be read: a symbolic link to nothing, a loop of links, a folder.
    """
    import os

    from detconf.conformance.datafiles import read_json
    from detconf.engine.entry import CatalogError

    if path is None:
        return [f for fact in load_facts() for f in fact.findings()] + load_findings(FINDINGS_FILE)
    path = Path(path)
    try:
        os.lstat(path)
    except FileNotFoundError:
        return []  # no file at all: no findings
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.is_symlink():
        try:
            os.stat(path)
        except FileNotFoundError:
            raise CatalogError(f"{path}: a symbolic link to {os.readlink(path)!r}, which does not exist") from None
        except OSError as exc:  # ELOOP: a loop of links
            raise CatalogError(f"{path}: a symbolic link that cannot be followed ({exc.strerror or exc})") from None
    raw = read_json(path, "known-findings", item="known finding")
    seen: dict[tuple, int] = {}
    for k, item in enumerate(raw):
        key = (item["source"], item["entry_id"], item["verdict"], str(SpecifierSet(item["torch"])),
               *(tuple(sorted(item.get(f, ()))) for f in ("devices", "modes", "compile", "phases")))
        if key in seen:
            raise CatalogError(f"{path}: known finding #{k} ({item['entry_id']!r}) repeats known finding #{seen[key]}: "
                               "the same cases and verdict, so only the first one's reason would ever be used")
        seen[key] = k
    return [
        Finding(source=item["source"], entry_id=item["entry_id"], verdict=item["verdict"],
                torch=SpecifierSet(item["torch"]), why=item["why"], devices=tuple(item.get("devices", ())),
                modes=tuple(item.get("modes", ())), compile=tuple(item.get("compile", ())),
                phases=tuple(item.get("phases", ())))
        for item in raw
    ]


def known_finding(row: dict[str, Any], findings: list[Finding]) -> Finding | None:
    """The finding that covers ``row``: one with the row's verdict if any does (findings of one
    case may differ in verdict only where their other fields differ, but a finding never hides
    another that names the verdict seen), else the first that covers it (its verdict then says
    what was expected), else None."""
    matching = [f for f in findings if f.matches(row)]
    return next((f for f in matching if f.verdict == row.get("verdict")), matching[0] if matching else None)


# --- version-ranged facts ------------------------------------------------------------

_FACT_KEYS = {"id", "claim", "thread", "torch", "checked", "listed", "cells"}
_OPTIONAL_FACT_KEYS = {"adds"}
_ADDS_KEYS = {"docs", "op", "promise", "devices", "dtypes", "backward"}
_LISTED_KEYS = {"docs", "entry_id", "promise"}
_CELL_KEYS = {"source", "entry_id", "verdict", "docs", "devices", "modes", "compile", "phases"}


@dataclass(frozen=True)
class Listing:
    """What the docstrings of releases ``docs`` say of ``entry_id``: ``promise``, or nothing (None)."""

    docs: SpecifierSet
    entry_id: str
    promise: str | None


@dataclass(frozen=True)
class VersionFact:
    """A fact about torch releases ``torch``, from a public thread (None where only this
    project's runs show it), with how its range was ``checked``."""

    id: str
    claim: str
    thread: str | None
    torch: SpecifierSet
    checked: str
    listed: tuple[Listing, ...]
    cells: tuple[dict, ...]
    adds: tuple[dict, ...] = ()

    def why(self) -> str:
        source = f" ({self.thread})" if self.thread else ""
        return f"{self.claim}; torch {self.torch}{source}; checked: {self.checked}"

    def findings(self) -> list[Finding]:
        """The cells this fact explains, as findings with the fact as their reason."""
        return [Finding(source=c["source"], entry_id=c["entry_id"], verdict=c["verdict"], torch=self.torch,
                        why=self.why(), devices=tuple(c.get("devices", ())), modes=tuple(c.get("modes", ())),
                        compile=tuple(c.get("compile", ())), phases=tuple(c.get("phases", ())),
                        docs=SpecifierSet(c["docs"]) if "docs" in c else None)
                for c in self.cells]


def load_facts(path: str | Path | None = None) -> list[VersionFact]:
    """The facts of ``path`` (default :data:`FACTS_FILE`; an absent file means none). Anything
    malformed (an unknown key, a range without an operator, a verdict that passes, a duplicate
    id) raises :class:`engine.entry.CatalogError` with one line naming the file and the fact."""
    import json

    from detconf.engine.entry import CatalogError
    from detconf.findings_rule import torch_range
    from detconf.vocabulary import COMPILERS, FAILING, MODES, PHASES, PROMISES

    path = Path(path) if path is not None else FACTS_FILE
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    if not isinstance(raw, list):
        raise CatalogError(f"{path}: expected a JSON list of facts")

    def fail(k: int, what: str):
        name = raw[k].get("id") if isinstance(raw[k], dict) else None
        raise CatalogError(f"{path}: fact #{k} ({name!r}): {what}")

    def spec(k: int, text: Any, field_name: str) -> SpecifierSet:
        try:
            return torch_range(text)
        except (TypeError, AttributeError, ValueError) as exc:
            fail(k, f"{field_name} is {text!r} ({exc}), expected a version specifier such as '>=2.13'")

    facts: list[VersionFact] = []
    for k, item in enumerate(raw):
        if not isinstance(item, dict):
            fail(k, "expected an object")
        if not _FACT_KEYS <= set(item) <= _FACT_KEYS | _OPTIONAL_FACT_KEYS:
            extra, missing = sorted(set(item) - _FACT_KEYS - _OPTIONAL_FACT_KEYS), sorted(_FACT_KEYS - set(item))
            fail(k, f"unknown field {extra[0]!r}" if extra else f"missing field {missing[0]!r}")
        for key in ("id", "claim", "checked"):
            if not isinstance(item[key], str) or not item[key].strip():
                fail(k, f"field {key!r} must be non-blank text")
        if item["thread"] is not None and not str(item["thread"]).startswith("https://github.com/pytorch/"):
            fail(k, f"thread {item['thread']!r} is not a pytorch GitHub thread (null where there is none)")
        listed = []
        for listing in item["listed"] if isinstance(item["listed"], list) else fail(k, "'listed' must be a list"):
            if not isinstance(listing, dict) or set(listing) != _LISTED_KEYS:
                fail(k, f"a listing needs exactly {sorted(_LISTED_KEYS)}")
            if listing["promise"] is not None and listing["promise"] not in PROMISES:
                fail(k, f"listing promise {listing['promise']!r} is not one of {sorted(PROMISES)} or null")
            listed.append(Listing(spec(k, listing["docs"], "listing docs"), listing["entry_id"], listing["promise"]))
        if not isinstance(item["cells"], list):
            fail(k, "'cells' must be a list")
        for cell in item["cells"]:
            if not isinstance(cell, dict) or set(cell) - _CELL_KEYS or not {"source", "entry_id", "verdict"} <= set(cell):
                fail(k, f"a cell needs source, entry_id and verdict, and only {sorted(_CELL_KEYS)}")
            if cell["verdict"] not in FAILING:
                fail(k, f"cell verdict {cell['verdict']!r} is not a failing verdict")
            for key, allowed in (("devices", None), ("modes", MODES), ("compile", COMPILERS),
                                 ("phases", tuple(PHASES))):
                values = cell.get(key, [])
                if not isinstance(values, list) or not all(isinstance(v, str) and (allowed is None or v in allowed)
                                                           for v in values):
                    fail(k, f"cell {key} must be a list of " + (f"{', '.join(allowed)}" if allowed else "device types"))
            if "docs" in cell:
                spec(k, cell["docs"], "cell docs")
        adds = item.get("adds", [])
        for added in adds if isinstance(adds, list) else fail(k, "'adds' must be a list"):
            if not isinstance(added, dict) or set(added) - _ADDS_KEYS or not {"docs", "op", "promise"} <= set(added):
                fail(k, f"an added entry needs docs, op and promise, and only {sorted(_ADDS_KEYS)}")
            if added["promise"] not in ("deterministic", "raises"):
                fail(k, f"added promise {added['promise']!r} is not 'deterministic' or 'raises'")
            spec(k, added["docs"], "added docs")
        facts.append(VersionFact(id=item["id"], claim=item["claim"], thread=item["thread"],
                                 torch=spec(k, item["torch"], "torch"), checked=item["checked"],
                                 listed=tuple(listed), cells=tuple(item["cells"]), adds=tuple(adds)))
    ids = [f.id for f in facts]
    for fact_id in ids:
        if ids.count(fact_id) > 1:
            raise CatalogError(f"{path}: fact id {fact_id!r} appears {ids.count(fact_id)} times")
    return facts


def listing_problems(fact: VersionFact, snapshots: dict[str, dict[str, str]]) -> list[str]:
    """Where the docstring snapshots (release -> {entry id: promise}) contradict the fact's
    listings: one line per release and listing; empty when every snapshot agrees."""
    from detconf.findings_rule import torch_in

    problems = []
    for listing in fact.listed:
        for release, promises in sorted(snapshots.items()):
            if torch_in(release, listing.docs) and promises.get(listing.entry_id) != listing.promise:
                problems.append(f"{fact.id}: the {release} docstring lists {listing.entry_id!r} as "
                                f"{promises.get(listing.entry_id)!r}, the fact says {listing.promise!r}")
    return problems


def fact_entries(doc_version: str | None, *, torch_version: str | None = None,
                 facts: list[VersionFact] | None = None) -> list:
    """The torch-docs entries the facts add to the catalog of docstring ``doc_version`` (None:
    the installed torch's own) judged on ``torch_version`` (default: the installed torch): a
    promise the facts state where that docstring says nothing (``kthvalue`` on CUDA since 2.10).
    An added entry carries the fact as its sentence, ``list_name`` ``fact`` and the fact's torch
    range; one whose id the docstring also has is a duplicate the catalog rejects (the fact's
    ``docs`` range must then end where the docstring starts to list it)."""
    from detconf.engine.entry import Entry, make_entry_id
    from detconf.findings_rule import torch_in, torch_range

    if torch_version is None:
        import torch

        torch_version = str(torch.__version__)
    docs_release = doc_version or torch_version
    out = []
    for fact in load_facts() if facts is None else facts:
        if not torch_in(torch_version, fact.torch):
            continue
        for position, added in enumerate(fact.adds):
            if not torch_in(docs_release, torch_range(added["docs"])):
                continue
            fields = dict(devices=tuple(sorted(added.get("devices", ()))), dtypes=tuple(added.get("dtypes", ())),
                          backward=bool(added.get("backward", False)))
            out.append(Entry(id=make_entry_id(added["op"], **fields), op=added["op"], promise=added["promise"],
                             sentence=f"{fact.claim} ({fact.thread or 'no public thread'}; torch {fact.torch})",
                             source="torch-docs", doc_version=doc_version, list_name="fact", position=position,
                             torch=str(fact.torch), **fields))
    return out
