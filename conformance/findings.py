"""Known findings: non-conforming verdicts already reported about a torch release.

A known finding keeps its true verdict in the results and the matrix; only the
pytest outcome changes (xfail), so a CI gate stays green on a torch whose
findings are recorded, and turns red on anything new. A finding that no
longer reproduces is reported with a warning, so the list does not rot.

File: ``conformance/data/known-findings.json`` — a list of objects with
``source``, ``entry_id``, ``verdict``, ``torch`` (a PEP 440 version specifier
such as ``">=2.13"`` or ``">=2.5,<2.14"``, evaluated with :mod:`packaging`
against the installed torch's release; local labels such as ``+cpu`` and
pre-releases count as their release), ``why``, and optionally ``devices`` / ``modes`` /
``compile`` (the compile settings it concerns; absent: every setting).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from detconf.vocabulary import VERDICTS
from engine.entry import CatalogError

FINDINGS_FILE = Path(__file__).resolve().parent / "data" / "known-findings.json"
REQUIRED = ("source", "entry_id", "verdict", "torch", "why")


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

    def matches(self, row: dict[str, Any]) -> bool:
        return (
            row.get("source") == self.source
            and row.get("entry_id") == self.entry_id
            and torch_in(str(row.get("torch_version", "")), self.torch)
            and (not self.devices or row.get("device") in self.devices)
            and (not self.modes or row.get("mode") in self.modes)
            and (not self.compile or row.get("compile", "eager") in self.compile)
        )


def torch_in(version: str, specifier: SpecifierSet) -> bool:
    """Is torch ``version`` (``2.13.0+cpu``, ``2.16.0a0+git…``) inside ``specifier``?"""
    try:
        release = Version(version)
    except InvalidVersion:
        return False
    return specifier.contains(Version(release.base_version), prereleases=True)


def load_findings(path: Path = FINDINGS_FILE) -> list[Finding]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        return []
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    findings = []
    for index, item in enumerate(raw if isinstance(raw, list) else [None]):
        if not isinstance(item, dict) or any(key not in item for key in REQUIRED):
            raise CatalogError(f"{path}: finding #{index} needs the fields {', '.join(REQUIRED)}")
        if item["verdict"] not in VERDICTS:
            raise CatalogError(f"{path}: finding #{index}: unknown verdict {item['verdict']!r}")
        try:
            if not isinstance(item["torch"], str) or not item["torch"].strip():
                raise InvalidSpecifier(repr(item["torch"]))
            torch_range = SpecifierSet(item["torch"])
        except InvalidSpecifier:
            raise CatalogError(f"{path}: finding #{index}: 'torch' must be a version specifier such as "
                               f"'>=2.13', got {item['torch']!r}") from None
        findings.append(Finding(
            source=item["source"], entry_id=item["entry_id"], verdict=item["verdict"], torch=torch_range,
            why=item["why"], devices=tuple(item.get("devices", ())), modes=tuple(item.get("modes", ())),
            compile=tuple(item.get("compile", ())),
        ))
    return findings


def known_finding(row: dict[str, Any], findings: list[Finding]) -> Finding | None:
    return next((f for f in findings if f.matches(row)), None)
