"""Which result rows a known finding covers: one rule for the suite (a matched row is an
xfail, ``conformance/findings.py``) and the reports (a matched row is a certification waiver,
``reports/certify.py``), which read the findings file as data and do not import the suite."""
from __future__ import annotations

from typing import Any, Collection, Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


def torch_in(version: str, specifier: SpecifierSet) -> bool:
    """Is torch ``version`` (``2.13.0+cpu``, ``2.16.0a0+git…``) inside ``specifier``?"""
    try:
        release = Version(version)
    except InvalidVersion:
        return False
    return specifier.contains(Version(release.base_version), prereleases=True)


def covers(row: Mapping[str, Any], *, source: str, entry_id: str, torch: SpecifierSet,
           devices: Collection[str] = (), modes: Collection[str] = (), compile: Collection[str] = ()) -> bool:
    """Does a finding with these fields cover ``row`` (its verdict aside)? Empty ``devices`` /
    ``modes`` / ``compile``: every one; a row without a compile setting is eager."""
    return (
        row.get("source") == source
        and row.get("entry_id") == entry_id
        and torch_in(str(row.get("torch_version", "")), torch)
        and (not devices or row.get("device") in devices)
        and (not modes or row.get("mode") in modes)
        and (not compile or (row.get("compile") or "eager") in compile)
    )
