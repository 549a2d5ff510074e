"""The planned cases a run record lists (docs/results-schema.md): enough of each case to name
its cell, so that a reader can tell a planned case that got no row (``missing``).

``planned_entries`` holds each entry once (what the matrix shows of it); ``planned_cases``
one object per case: its test id, its entry (an index into ``planned_entries``), phase,
device, mode, compile setting and expected outcome.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from detconf.conformance.plan import Case
from detconf.engine.checks import check_device
from detconf.engine.program import recipe_device


def planned_fields(cases: Iterable[Case], expected_for: Callable[[Case], str] | None = None) -> dict[str, Any]:
    """``{"planned_entries": [...], "planned_cases": [...]}`` for ``cases`` (in their order);
    a case's expected outcome is the one it carries (:attr:`Case.expected`; ``expected_for``,
    if given, is asked instead)."""
    if expected_for is None:
        expected_for = _carried
    entries: list[dict[str, Any]] = []
    index: dict[tuple, int] = {}
    out_cases: list[dict[str, Any]] = []
    for case in cases:
        e = case.entry
        key = (e.source, e.doc_version, e.id)
        if key not in index:
            index[key] = len(entries)
            entries.append({"source": e.source, "doc_version": e.doc_version, "entry_id": e.id, "op": e.op,
                            "sentence": e.sentence, "list_name": e.list_name, "position": e.position,
                            "promise": e.promise, "needs_device": needs_device(e.source, e.id, e.op),
                            "torch": e.torch})
        out_cases.append({"id": case.id, "entry": index[key], "phase": case.phase, "device": case.device,
                          "mode": case.mode, "compile": case.compile, "expected": expected_for(case)})
    return {"planned_entries": entries, "planned_cases": out_cases}


def _carried(case: Case) -> str:
    return case.expected


def needs_device(source: str, entry_id: str, op: str | None) -> str | None:
    """The only device type an entry's promise is about, as its check or recipe declares it
    (``check(device=)``, ``recipe(device=)``): a row skipped elsewhere for that reason is not
    applicable there, and certification takes the plan's word for it, not the row's."""
    return check_device(source, entry_id) or (recipe_device(op) if op else None)
