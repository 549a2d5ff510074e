"""Condition complements: the other side of a documented condition, as entries of their own.

A sentence with a condition ("when weights are given", "with indices output", "when
``reduce='prod'``", "for floating point and complex tensors", "when called with a quantized
tensor", "when ``src`` type is Tensor") says something about the complement too: torch's lists
name the calls that are nondeterministic or raise, so the same call *outside* the condition
promises neither an alert nor nondeterminism. Each complement is an entry with promise
``deterministic`` (list ``complement``), run like any other torch-docs entry with the same
recipe, so that a condition drawn too narrowly in the docs shows up as a finding.

A complement is made only where no other entry of the catalog documents the same call (the
complement of ``put_(accumulate=False)`` is ``put_(accumulate=True)``, which has its own
entries).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from detconf.conformance.plan import same_conditions
from detconf.engine.entry import Entry, check_unique, make_entry_id

__all__ = ["LIST_NAME", "complement_of", "complements"]

LIST_NAME = "complement"
_DTYPE_CLASSES = ("floating", "complex", "integer")
#: Per (op, keyword): the values a call may take. The complement of a case is the values the
#: catalog does not document. Modes that go to another documented kernel are left out
#: (``interpolate(mode='area')`` is adaptive average pooling, which has its own entries).
KWARG_DOMAINS: dict[tuple[str, str], tuple[Any, ...]] = {
    ("torch.Tensor.scatter_reduce", "reduce"): ("sum", "prod", "mean", "amax", "amin"),
    ("torch.nn.functional.interpolate", "mode"): ("linear", "bilinear", "bicubic", "trilinear", "nearest"),
    ("torch.nn.EmbeddingBag", "mode"): ("sum", "mean", "max"),
    ("torch.Tensor.put_", "accumulate"): (False, True),
    ("torch.Tensor.index_put", "accumulate"): (False, True),
}


def _documented_values(catalog: Iterable[Entry], op: str, name: str) -> set:
    return {value for e in catalog if e.op == op and e.source == "torch-docs"
            for case in e.cases for n, value in case if n == name}


def complement_of(entry: Entry, catalog: list[Entry]) -> Entry | None:
    """The complement of ``entry``'s condition, or None when it has none left undocumented."""
    if entry.source != "torch-docs" or entry.promise == "behaves":
        return None
    changes: dict[str, Any] = {}
    qualifiers = [q for q in entry.qualifiers]
    if entry.weights_given:
        changes["weights_given"] = False
    if entry.indices_output:
        changes["indices_output"] = False
    if entry.quantized:
        changes["quantized"] = False
    if entry.dtypes:
        rest = tuple(c for c in _DTYPE_CLASSES if c not in entry.dtypes)
        if rest:
            changes["dtypes"] = rest
    if "src-tensor" in qualifiers:
        qualifiers.remove("src-tensor")
        changes["cases"] = ((("value", 1.5),),)
    names = sorted({n for case in entry.cases for n, _ in case})
    if len(names) == 1 and (entry.op, names[0]) in KWARG_DOMAINS:
        documented = _documented_values(catalog, entry.op, names[0])
        rest = [v for v in KWARG_DOMAINS[(entry.op, names[0])] if v not in documented]
        if rest:
            changes["cases"] = tuple(((names[0], v),) for v in rest)
    if not changes:
        return None
    fields = {f.name: getattr(entry, f.name) for f in dataclasses.fields(entry)}
    fields.update(changes)
    fields["qualifiers"] = tuple(qualifiers) + ("complement",)
    fields["promise"] = "deterministic"
    fields["list_name"] = LIST_NAME
    fields["sentence"] = f"complement of: {entry.sentence}"
    fields["id"] = make_entry_id(entry.op, cases=fields["cases"], backward=entry.backward, devices=entry.devices,
                                 dtypes=fields["dtypes"], indices_output=fields["indices_output"],
                                 weights_given=fields["weights_given"], quantized=fields["quantized"],
                                 sparse_dense=entry.sparse_dense, qualifiers=fields["qualifiers"])
    candidate = Entry(**fields)
    if any(_same_call(candidate, other) for other in catalog if other is not entry and other.source == entry.source):
        return None
    return candidate


def _same_call(a: Entry, b: Entry) -> bool:
    """:func:`conformance.plan.same_conditions`, and the conditions a complement also changes."""
    return (same_conditions(a, b)
            and (not a.dtypes or not b.dtypes or bool(set(a.dtypes) & set(b.dtypes)))
            and ("src-tensor" in a.qualifiers) == ("src-tensor" in b.qualifiers))


def complements(catalog: list[Entry]) -> list[Entry]:
    """One complement per conditional torch-docs entry that leaves part of its call undocumented."""
    out = []
    seen = set()
    for entry in catalog:
        c = complement_of(entry, catalog)
        if c is not None and c.id not in seen:
            seen.add(c.id)
            out.append(c)
    return check_unique(out)
