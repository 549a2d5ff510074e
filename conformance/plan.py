"""The plan: one :class:`Case` per (entry, device type, mode), sorted.

Collection must be deterministic (xdist compares the collected ids of every
worker): nothing here draws random numbers, and the plan is sorted. A case is
plain data and travels as JSON (:meth:`Case.to_json`), e.g. to an isolated
child process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from detconf.vocabulary import COMPILERS, DETERMINISTIC_MODES, SOURCE_NAMES, UNLISTED_SOURCES
from detconf.engine.entry import CatalogError, Entry
from detconf.engine.verdict import expected_outcome


def same_conditions(a: Entry, b: Entry) -> bool:
    """Do two entries describe the same call (apart from the device)?"""
    return (
        a.op == b.op
        and a.backward == b.backward
        and set(a.cases) & set(b.cases) != set()
        and (a.quantized, a.sparse_dense, a.indices_output, a.weights_given)
        == (b.quantized, b.sparse_dense, b.indices_output, b.weights_given)
    )


def raise_documented_elsewhere(entry: Entry, device_type: str, catalog: Iterable[Entry]) -> str | None:
    """The id of another entry documenting a raise for the same call on ``device_type``."""
    if entry.applies_to(device_type):
        return None
    for other in catalog:
        if (
            other is not entry
            and other.source == entry.source
            and other.promise == "raises"
            and other.devices
            and device_type in other.devices
            and same_conditions(entry, other)
        ):
            return other.id
    return None


def not_applicable(entry: Entry, *, torch_version: str | None, doc_version: str | None = None) -> str | None:
    """Why ``entry``'s promise does not apply to the torch under test, or None when it does.

    The torch under test is ``doc_version`` (``--doc-version X``: the promises of release X)
    if given, else ``torch_version`` (the installed torch). An entry applies to the releases of
    its ``torch`` range (``Entry.torch``; none: every release).
    """
    version = doc_version or torch_version
    if version is None or entry.applies_to_torch(version):
        return None
    this = f"this run judges the promises of torch {version} (--doc-version)" if doc_version else f"this torch is {version}"
    return f"not applicable: the promise is made by the docs of torch {entry.torch} only; {this}"


@dataclass(frozen=True)
class Case:
    """One generated test: an entry on one device type in one mode, in one phase, under one
    compile setting.

    ``phase`` (``detconf.vocabulary.PHASES``): ``program`` runs the whole example
    under the mode; ``backward-only`` runs the forward with determinism off
    and only the backward under the mode.
    ``compile`` (``detconf.vocabulary.COMPILERS``): ``eager``, or the ``torch.compile``
    backend the program runs through.
    ``not_applicable``: why the case is not run, when its entry's ``torch`` range leaves out the
    torch under test (:func:`not_applicable`); it gets a ``skipped`` row saying so.
    ``expected``: what the docs promise for the case (:func:`engine.verdict.expected_outcome`),
    decided once, when the case is made, and carried with it (to an isolated child too).
    """

    entry: Entry
    device: str
    mode: str
    raise_documented_by: str | None = None
    phase: str = "program"
    compile: str = "eager"
    not_applicable: str | None = None
    expected: str = ""

    def __post_init__(self) -> None:
        if self.compile not in COMPILERS:
            raise ValueError(f"compile setting must be one of {COMPILERS}, got {self.compile!r}")
        if not self.expected:
            object.__setattr__(self, "expected", expected_outcome(
                self.entry, self.device, self.mode, raise_documented_elsewhere=self.raise_documented_by is not None))

    @property
    def id(self) -> str:
        """``put_(accumulate=False)-cpu-error``; a compiled case ends in its setting
        (``...-cpu-error-inductor``), so eager ids stay as they always were."""
        prefix = "" if self.entry.source == "torch-docs" else f"{self.entry.source}:"
        suffix = "" if self.phase == "program" else f"-{self.phase}"
        compiled = "" if self.compile == "eager" else f"-{self.compile}"
        return f"{prefix}{self.entry.id}-{self.device}-{self.mode}{suffix}{compiled}"

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry.to_json(), "device": self.device, "mode": self.mode,
                "raise_documented_by": self.raise_documented_by, "phase": self.phase, "compile": self.compile,
                "not_applicable": self.not_applicable, "expected": self.expected}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Case":
        return cls(Entry.from_json(d["entry"]), d["device"], d["mode"], d.get("raise_documented_by"),
                   d.get("phase", "program"), d.get("compile", "eager"), d.get("not_applicable"), d.get("expected", ""))


def phases_for(entry: Entry, mode: str, compile: str = "eager") -> tuple[str, ...]:
    """``program`` always; ``backward-only`` too for a documented op entry about differentiation
    in a deterministic mode (with the mode off both phases run the same thing; the sweep names no
    kernel for the backward-only phase to reach). Compiled programs run the ``program`` phase
    only: torch refuses to run a compiled backward under another determinism setting than the
    one its forward was compiled under."""
    if (entry.backward and entry.promise != "behaves" and mode in DETERMINISTIC_MODES
            and entry.source not in UNLISTED_SOURCES and compile == "eager"):
        return ("program", "backward-only")
    return ("program",)


def plan(catalog: list[Entry], devices: Iterable[str], modes: Iterable[str], compilers: Iterable[str] = ("eager",),
         *, compiles: Callable[[Entry], bool] | None = None, torch_version: str | None = None,
         doc_version: str | None = None) -> list[Case]:
    """Every case of ``catalog`` × ``devices`` × ``modes`` × phases × ``compilers``, sorted.

    Op entries run under every compile setting; a check entry (promise ``behaves``) runs
    compiled only where ``compiles(entry)`` says its check compiles what it observes (the
    ``fill_uninitialized_memory`` promises); the flag API and the other notes are eager only.

    ``torch_version`` (the installed torch) and ``doc_version`` (``--doc-version``) name the
    torch under test: the cases of an entry whose ``torch`` range leaves it out are planned
    with their reason in ``not_applicable`` (neither given: every entry applies).
    """
    compilers = list(dict.fromkeys(compilers))
    unknown = [c for c in compilers if c not in COMPILERS]
    if unknown:
        raise ValueError(f"unknown compile setting {unknown[0]!r}; known: {', '.join(COMPILERS)}")
    cases = []
    reasons = [not_applicable(entry, torch_version=torch_version, doc_version=doc_version) for entry in catalog]
    applicable = [entry for entry, reason in zip(catalog, reasons) if reason is None]
    for entry, reason in zip(catalog, reasons):
        settings = [c for c in compilers
                    if c == "eager" or entry.promise != "behaves" or (compiles is not None and compiles(entry))]
        for device in devices:
            elsewhere = raise_documented_elsewhere(entry, device, applicable)
            for mode in modes:
                for setting in settings:
                    for phase in phases_for(entry, mode, setting):
                        cases.append(Case(entry, device, mode, elsewhere, phase, setting, reason))
    order = {s: i for i, s in enumerate(SOURCE_NAMES)}
    rank = {c: i for i, c in enumerate(COMPILERS)}
    cases.sort(key=lambda c: (order.get(c.entry.source, 99), c.entry.list_name, c.entry.position, c.entry.id,
                              c.phase != "program", c.device, c.mode, rank[c.compile]))
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise CatalogError(f"duplicate test ids: {dup[:5]}")
    return cases


def control_first(cases: list[Case]) -> list[Case]:
    """``cases`` with the eager cases of mode ``off`` before the other eager ones (the order of
    ``cases`` within each; compiled cases keep their places, each compiled entry's modes
    together). The stress tier starts with its positive control: whether its examples make the
    races visible (what the docs' throw list is judged by, in ``reports sensitivity``) is
    known before the deterministic modes run, also when a time budget cuts the run short."""
    return sorted(cases, key=lambda c: c.compile == "eager" and c.mode != "off")


def heaviest_first(cases: list[Case]) -> list[Case]:
    """``cases`` in the order a parallel run should start them: compiled cases of backward
    entries (a forward and a backward graph to compile), then the other compiled cases, then
    eager ones; the plan's order within each. Compiling dominates a compiled run and xdist
    hands out work in collection order, so a heavy entry met last would leave one worker
    compiling while the others have finished (longest first balances the workers). Every
    case of one entry, device and compile setting has the same weight, so an xdist group stays
    together."""
    def weight(case: Case) -> int:
        if case.compile == "eager":
            return 2
        return 0 if case.entry.backward else 1

    return sorted(cases, key=weight)
