"""The planned cases a run record lists (docs/results-schema.md): enough of each case to name
its cell, so that a reader can tell a planned case that got no row (``missing``).

``planned_entries`` holds each entry once (what the matrix shows of it); ``planned_cases``
one object per case: its test id, its entry (an index into ``planned_entries``), phase,
device, mode, compile setting and expected outcome.

The plan itself comes from the options only (:func:`suite_plan_for`); :func:`suite_plan` computes
it again in a fresh process, where no conftest.py or pytest plugin of the run can change it, for
the run's end record (``suite_plan``) and a certification to compare with what the run planned.
"""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class SuitePlan:
    """The cases the suite plans for a run's options (sorted; after ``--shard``), the catalog's
    ``(source, entry id)`` pairs and how many cases the plan held before the shard was taken."""

    cases: list[Case]
    catalog_ids: frozenset
    unsharded: int


def suite_plan_for(*, sources: list[str], modes: list[str], compilers: list[str], devices: list[str],
                   doc_version: str | None, complements: bool, shard: tuple[int, int] | None,
                   torch_version: str) -> SuitePlan:
    """The plan, from the options only: the one function the plugin plans with
    (:func:`detconf.plugin.plan.case_plan`) and the fresh process that checks it does
    (:func:`suite_plan`)."""
    from detconf.conformance.catalog import load_catalog
    from detconf.conformance.plan import plan

    catalog = load_catalog(sources, doc_version=doc_version)
    if "torch-docs" in sources and complements:
        from detconf.conformance.complements import complements as complements_of

        catalog = catalog + complements_of(catalog)
    compiles = None
    if any(c != "eager" for c in compilers):
        import detconf.conformance.registry  # noqa: F401  (the checks say which of them compile what they observe)
        from detconf.engine.checks import compiles as check_compiles

        def compiles(entry):
            return check_compiles(entry.source, entry.id)
    # A promise limited to some releases (an entry's ``torch`` range) is planned as not
    # applicable to the torch under test: --doc-version's release, else the installed one.
    cases = plan(catalog, devices, list(dict.fromkeys(modes)), compilers, compiles=compiles,
                 torch_version=torch_version, doc_version=doc_version)
    unsharded = len(cases)
    if shard is not None:
        from detconf.conformance.shard import select

        cases = select(cases, *shard)
    return SuitePlan(cases, frozenset((e.source, e.id) for e in catalog), unsharded)


#: The fresh process that plans a run's options again (:func:`suite_plan`), by
#: :mod:`detconf.child`: no pytest, so no conftest.py and no pytest plugin takes part.
SUITE_PLAN_TARGET = "detconf.conformance.planned:suite_plan"


def suite_plan(payload: dict[str, Any]) -> dict[str, Any]:
    """The suite's own plan for a run's options, computed where nothing the run loaded can
    change it: ``{"cases": N, "digest": ...}``, the digest of :func:`planned_fields` of the
    plan (:func:`detconf.revision.plan_digest`), which a certification compares with the
    planned cases the run record lists. ``payload``: the options (``sources``, ``modes``,
    ``compilers``, ``devices`` as given to ``--device`` or None for every available one,
    ``doc_version``, ``complements``, ``shard``)."""
    import torch

    from detconf.engine.devices import resolve_devices
    from detconf.revision import plan_digest

    shard = payload.get("shard")
    found = suite_plan_for(sources=list(payload["sources"]), modes=list(payload["modes"]),
                           compilers=list(payload["compilers"]),
                           devices=[b.name for b in resolve_devices(payload.get("devices"))],
                           doc_version=payload.get("doc_version"), complements=bool(payload["complements"]),
                           shard=tuple(shard) if shard else None, torch_version=str(torch.__version__))
    return {"cases": len(found.cases), "digest": plan_digest(planned_fields(found.cases))}
