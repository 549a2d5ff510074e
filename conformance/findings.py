"""Known findings: non-conforming verdicts already reported about a torch release.

A known finding keeps its true verdict in the results and the matrix; only the
pytest outcome changes (xfail), so a CI gate stays green on a torch whose
findings are recorded, and turns red on anything new. A finding that no
longer reproduces is reported with a warning, so the list does not rot.

File: ``conformance/data/known-findings.json`` — a list of objects with
``source``, ``entry_id``, ``verdict``, ``torch`` (release prefixes such as
``"2.13"``), ``why``, and optionally ``devices`` / ``modes``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.entry import CatalogError

FINDINGS_FILE = Path(__file__).resolve().parent / "data" / "known-findings.json"
REQUIRED = ("source", "entry_id", "verdict", "torch", "why")


@dataclass(frozen=True)
class Finding:
    source: str
    entry_id: str
    verdict: str
    torch: tuple[str, ...]
    why: str
    devices: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()

    def matches(self, row: dict[str, Any]) -> bool:
        version = str(row.get("torch_version", ""))
        return (
            row.get("source") == self.source
            and row.get("entry_id") == self.entry_id
            and any(version == t or version.startswith(t + ".") for t in self.torch)
            and (not self.devices or row.get("device") in self.devices)
            and (not self.modes or row.get("mode") in self.modes)
        )


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
        findings.append(Finding(
            source=item["source"], entry_id=item["entry_id"], verdict=item["verdict"], torch=tuple(item["torch"]),
            why=item["why"], devices=tuple(item.get("devices", ())), modes=tuple(item.get("modes", ())),
        ))
    return findings


def known_finding(row: dict[str, Any], findings: list[Finding]) -> Finding | None:
    return next((f for f in findings if f.matches(row)), None)
