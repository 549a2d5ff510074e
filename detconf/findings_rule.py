"""Which result rows a known finding covers: one rule for the suite (a matched row is an
xfail, ``conformance/findings.py``) and the reports (a matched row is a certification waiver,
``reports/certify.py``), which read the findings file as data and do not import the suite.

The same reading of a torch version range serves the catalog entries' ``torch`` field (the
releases whose docs make a promise, ``engine/entry.py``) and certification's check of a cell
skipped as not applicable to the torch under test (``reports/verify.py``)."""
from __future__ import annotations

from typing import Any, Collection, Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


def torch_range(text: str) -> SpecifierSet:
    """``text`` as a PEP 440 specifier in which every clause has an operator (``>=2.13``,
    ``<2.10``, ``>=2.5,<2.14``); a ``ValueError`` naming what is wrong otherwise: a bare
    version such as ``2.13`` (``InvalidSpecifier``) or an empty clause (``>=2.13,``)."""
    from packaging.specifiers import Specifier

    clauses = text.split(",")
    if any(not clause.strip() for clause in clauses):
        raise ValueError("empty clause")
    for clause in clauses:
        Specifier(clause.strip())  # InvalidSpecifier (a ValueError) for a bare version or a typo
    specifier = SpecifierSet(text)
    if not any(specifier.contains(v, prereleases=True) for v in _candidates(specifier)):
        raise ValueError("matches no torch release")
    return specifier


def _candidates(specifier: SpecifierSet) -> list[Version]:
    """Versions on both sides of every bound of ``specifier``: if none is inside it, no version
    is (each clause is a half-line or a point; their intersection, if not empty, holds a bound,
    or a version just above one)."""
    out = [Version("0"), Version("99999")]
    for clause in specifier:
        try:
            v = Version(clause.version.rstrip(".*"))
        except InvalidVersion:
            continue
        release = list(v.release)
        out += [v, Version(".".join(map(str, release + [0, 1]))),
                Version(".".join(map(str, release[:-1] + [max(release[-1] - 1, 0)] + [99999])))]
    return out


def torch_in(version: str, specifier: SpecifierSet) -> bool:
    """Is torch ``version`` (``2.13.0+cpu``, ``2.16.0a0+git…``) inside ``specifier``? A nightly
    counts as its release (``2.16.0a0+git…`` as 2.16.0); a specifier that names a build
    (``==2.13.0+cpu``) is compared with the build."""
    try:
        release = Version(version)
    except InvalidVersion:
        return False
    if any("+" in clause.version for clause in specifier):  # pinned to a build: ==2.13.0+cpu
        return specifier.contains(release, prereleases=True)
    return specifier.contains(Version(release.base_version), prereleases=True)


def covers(row: Mapping[str, Any], *, source: str, entry_id: str, torch: SpecifierSet,
           devices: Collection[str] = (), modes: Collection[str] = (), compile: Collection[str] = (),
           phases: Collection[str] = (), docs: SpecifierSet | None = None) -> bool:
    """Does a finding with these fields cover ``row`` (its verdict aside)? Empty ``devices`` /
    ``modes`` / ``compile`` / ``phases``: every one; a row without a compile setting is eager,
    a row without a phase is ``program``. ``docs``: the releases whose docstring the row was
    judged against (its ``doc_version``; a row without one was judged against the docs of the
    torch it ran, ``2.13.0+cpu`` -> 2.13.0); None: any."""
    return (
        row.get("source") == source
        and row.get("entry_id") == entry_id
        and torch_in(str(row.get("torch_version", "")), torch)
        and (not devices or row.get("device") in devices)
        and (not modes or row.get("mode") in modes)
        and (not compile or (row.get("compile") or "eager") in compile)
        and (not phases or (row.get("phase") or "program") in phases)
        and (docs is None or torch_in(str(row.get("doc_version") or row.get("torch_version", "")), docs))
    )
