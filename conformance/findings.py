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
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from detconf.findings_rule import covers

FINDINGS_FILE = Path(__file__).resolve().parent / "data" / "known-findings.json"


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

    def matches(self, row: dict[str, Any]) -> bool:
        return covers(row, source=self.source, entry_id=self.entry_id, torch=self.torch, devices=self.devices,
                      modes=self.modes, compile=self.compile, phases=self.phases)


def load_findings(path: str | Path | None = None) -> list[Finding]:
    """The findings of ``path`` (default :data:`FINDINGS_FILE`; a file that is truly absent
    means none).

    Malformed JSON or a schema violation (wrong type, unknown verdict, a ``torch`` that is
    not a version specifier, an unknown key) raises :class:`engine.entry.CatalogError` with
    one line naming the file, the finding and the field; so does a path that is there but
    cannot be read: a symbolic link to nothing, a loop of links, a folder.
    """
    import os

    from detconf.conformance.datafiles import read_json
    from detconf.engine.entry import CatalogError

    path = Path(path) if path is not None else FINDINGS_FILE
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
