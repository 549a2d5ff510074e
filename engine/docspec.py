"""Turn the text of ``torch.use_deterministic_algorithms.__doc__`` into catalog entries.

The docstring holds two bullet lists (ops that "will act deterministically" and
ops that "will throw a RuntimeError"); releases 1.8 to 2.9 add a third list of
cuBLAS ops that raise unless ``CUBLAS_WORKSPACE_CONFIG`` is set. Each bullet
names one or more ops in a Sphinx role (``:func:`torch.bmm```) followed by a
condition in words; the condition is read by matching a small vocabulary of
phrases that the releases 1.8 to 2.15 actually use.

Parsing policy for text we do not fully understand:

- a bullet that does not start with an op role raises :class:`CatalogError`
  naming the bullet (an entry must never disappear silently);
- a bullet whose op is recognised but whose wording is new keeps its entry with
  the conditions that were understood; the verbatim ``sentence`` is always kept,
  so a reviewer sees the full text next to the parsed fields;
- a docstring without the deterministic or the raises list raises CatalogError.

Fields beyond the plain phrases: ``qualifiers`` hold ``tensor-list-index``,
``src-tensor``, ``1d-input`` / ``nd-input`` ("``input`` dimension is one" / "is
larger than one", 1.9-1.12), ``some-cases``, ``not-quantized`` and
``fills-uninitialized`` (2.1.0's resize_/empty bullets about filling memory) and,
for the cuBLAS list, ``no-cublas-workspace-config``. ``position`` is the index of
the bullet in its list, so the entries of a multi-op bullet share it.
No release from 1.8 to 2.15 maps two bullets to one id (tests check all of them);
a release that does is rejected by ``check_unique`` until the vocabulary gains the
qualifier that tells the two bullets apart.

Two bullets may also contradict each other: 2.15 lists ``Tensor.scatter_reduce`` "when called
on CUDA or MPS tensor" as raising while ``reduce='sum'`` or ``'mean'`` on CUDA stays
deterministic. :func:`find_contradictions` finds such pairs (the catalog then judges the shared
calls once, against the more specific sentence: :mod:`conformance.catalog`).

Snapshots are read from a folder the caller names, laid out as
``<folder>/<version>/use_deterministic_algorithms.txt`` (the project's copies of
every release since 1.8 are ``conformance/data/torch-docs``, see
:mod:`conformance.catalog`).
"""
from __future__ import annotations

import inspect
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detconf.engine.entry import CatalogError, Entry, check_unique, make_entry_id

SNAPSHOT_FILE = "use_deterministic_algorithms.txt"


class UnknownDocVersion(ValueError):
    """A ``--doc-version`` with no snapshot; the message lists the known versions."""


# --- list headings -----------------------------------------------------------
# (list_name, promise, predicate on the whitespace-normalised heading paragraph)
_LISTS = (
    ("deterministic", "deterministic", lambda p: "operations will act deterministically" in p),
    ("raises", "raises", lambda p: "operations will throw a" in p and "RuntimeError" in p),
    ("cublas", "raises", lambda p: "RuntimeError" in p and "will be raised from these operations" in p),
)
# Defaults a whole list adds to each of its bullets (the cuBLAS bullets are bare op names).
_LIST_DEFAULTS = {"cublas": {"devices": ("cuda",), "qualifiers": ("no-cublas-workspace-config",)}}

# --- bullet vocabulary -------------------------------------------------------
_ROLE = r":(?:class|func|meth|attr):`~?([\w.]+)`"
_OPS_AT_START = re.compile(rf"^{_ROLE}(?:\s*,?\s*(?:and\s+)?{_ROLE})*")
_ROLE_RE = re.compile(_ROLE)
_DEVICE_RE = re.compile(r"\b(CUDA|CPU|MPS)\b")
_KWARG_RE = re.compile(r"``(\w+)=([^`]+)``")
_BACKWARD_RE = re.compile(r"differentiate|requires grad|\bbackward\b")
_FLOATING_COMPLEX_RE = re.compile(r"dtype is floating point or complex|with floating or complex dtype")

# Conditions kept as slugs in ``qualifiers``: (pattern, slug), in id order.
_QUALIFIERS = (
    (re.compile(r"(?:index|``indices``) is a list of tensors"), "tensor-list-index"),
    (re.compile(r"`src` type is Tensor"), "src-tensor"),
    (re.compile(r"dimension is one\b"), "1d-input"),
    (re.compile(r"dimension is larger than one"), "nd-input"),
    (re.compile(r"\bin some cases\b"), "some-cases"),
    (re.compile(r"tensor that is not quantized"), "not-quantized"),
    (re.compile(r"known value"), "fills-uninitialized"),
)


def parse_docstring(text: str, *, doc_version: str | None = None, source: str = "torch-docs") -> list[Entry]:
    """Entries of every bullet list in ``text``, in document order.

    ``text`` may be the raw, indented ``__doc__`` or a snapshot file. Raises
    :class:`CatalogError` when a list is missing, a bullet names no op, or two
    bullets map to the same id.
    """
    lines = inspect.cleandoc(text).splitlines()
    entries: list[Entry] = []
    found: set[str] = set()
    for heading, body in _paragraphs_with_lists(lines):
        for list_name, promise, matches in _LISTS:
            if heading.endswith(":") and matches(heading):
                break
        else:
            continue
        found.add(list_name)
        bullets = _bullets(body)
        if not bullets:
            raise CatalogError(f"{doc_version or 'docstring'}: the {list_name!r} list has no bullets")
        for position, sentence in enumerate(bullets):
            entries.extend(
                _entries_for_bullet(sentence, promise=promise, list_name=list_name, position=position,
                                    doc_version=doc_version, source=source)
            )
    missing = [name for name in ("deterministic", "raises") if name not in found]
    if missing:
        raise CatalogError(f"{doc_version or 'docstring'}: no {' or '.join(missing)} list found in the text")
    return check_unique(entries)


def _paragraphs_with_lists(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Pairs (top-level paragraph, indented block right after it)."""
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i][0].isspace():
            i += 1
            continue
        paragraph = []
        while i < len(lines) and lines[i].strip() and not lines[i][0].isspace():
            paragraph.append(lines[i].strip())
            i += 1
        body = []
        while i < len(lines) and (not lines[i].strip() or lines[i][0].isspace()):
            body.append(lines[i])
            i += 1
        out.append((" ".join(paragraph), body))
    return out


def _bullets(body: list[str]) -> list[str]:
    """Sentences of the ``*`` bullets in an indented block.

    Continuation lines join with single spaces; a ``-`` sub-list (interpolate's
    modes) is appended as ``item, item, ...``.
    """
    bullets: list[tuple[list[str], list[str]]] = []
    for line in body:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("* "):
            bullets.append(([stripped[2:].strip()], []))
        elif not bullets:
            raise CatalogError(f"text before the first bullet of a list: {stripped!r}")
        elif stripped.startswith("- "):
            bullets[-1][1].append(stripped[2:].strip())
        else:
            bullets[-1][0].append(stripped)
    return [" ".join(main) + (" " + ", ".join(sub) if sub else "") for main, sub in bullets]


def _entries_for_bullet(sentence: str, *, promise: str, list_name: str, position: int,
                        doc_version: str | None, source: str) -> list[Entry]:
    head = _OPS_AT_START.match(sentence)
    if head is None:
        raise CatalogError(f"{doc_version or 'docstring'}: {list_name} bullet {position} names no op: {sentence!r}")
    ops = _ROLE_RE.findall(head.group(0))
    condition = sentence[head.end():]
    defaults = _LIST_DEFAULTS.get(list_name, {})
    fields: dict[str, Any] = dict(
        devices=tuple(sorted({d.lower() for d in _DEVICE_RE.findall(condition)} | set(defaults.get("devices", ())))),
        backward=bool(_BACKWARD_RE.search(condition)),
        cases=_cases(condition),
        dtypes=("floating", "complex") if _FLOATING_COMPLEX_RE.search(condition) else (),
        indices_output="with indices output" in condition,
        weights_given=bool(re.search(r"``weights`` tensor is given", condition)),
        quantized="quantized tensor" in condition,
        sparse_dense="sparse-dense" in condition,
        qualifiers=tuple(defaults.get("qualifiers", ())) + tuple(
            slug for pattern, slug in _QUALIFIERS if pattern.search(condition)
        ),
    )
    return [
        Entry(id=make_entry_id(op, **fields), op=op, sentence=sentence, promise=promise, source=source,
              doc_version=doc_version, list_name=list_name, position=position, **fields)
        for op in ops
    ]


def _cases(condition: str) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """Keyword cases: ``x=1`` or ``x=2`` are two cases; interpolate's mode list is one case per mode."""
    values: dict[str, list[Any]] = {}
    for name, raw in _KWARG_RE.findall(condition):
        for value in _values(raw):
            if value not in values.setdefault(name, []):
                values[name].append(value)
    modes = re.search(r"following modes is used: (.*)$", condition)
    if modes:
        for mode in re.findall(r"`+(\w+)`+", modes.group(1)):
            values.setdefault("mode", []).append(mode)
    if not values:
        return ((),)
    names = list(values)
    return tuple(tuple(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names)))


def _values(raw: str) -> list[Any]:
    """``False`` -> [False]; ``'sum'`` -> ['sum']; 2.15's ``'prod'\\'mean'`` -> ['prod', 'mean']."""
    if raw in ("True", "False"):
        return [raw == "True"]
    quoted = re.findall(r"'([^']*)'", raw)
    if quoted:
        return quoted
    try:
        return [int(raw)]
    except ValueError:
        return [raw]


# --- sources -------------------------------------------------------------------

def installed_entries() -> list[Entry]:
    """Entries promised by the docstring of the torch that is installed."""
    import torch

    return parse_docstring(torch.use_deterministic_algorithms.__doc__ or "", doc_version=None)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def known_doc_versions(folder: Path) -> list[str]:
    """Releases with a docstring snapshot in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((p.parent.name for p in folder.glob(f"*/{SNAPSHOT_FILE}")), key=_version_key)


def snapshot_text(version: str, folder: Path) -> str:
    known = known_doc_versions(folder)
    if version not in known:
        raise UnknownDocVersion(f"unknown doc version {version!r}; known versions: {', '.join(known)}")
    return (Path(folder) / version / SNAPSHOT_FILE).read_text(encoding="utf-8")


def snapshot_entries(version: str, folder: Path) -> list[Entry]:
    """Entries promised by the docstring of release ``version`` (e.g. ``"2.13.0"``) in ``folder``."""
    return parse_docstring(snapshot_text(version, folder), doc_version=version)


# --- contradictions ------------------------------------------------------------------

@dataclass(frozen=True)
class Contradiction:
    """Two entries of one docstring that promise opposite things for the same calls.

    ``specific`` covers a subset of ``general``'s calls (its devices among the general's, its
    keyword values among the general's, at least one condition more); the shared calls are judged
    against ``specific``, the more specific sentence. ``devices``: the device types both cover
    (``()``: every device); ``cases``: the specific entry's keyword cases, i.e. the shared calls."""

    specific: Entry
    general: Entry
    devices: tuple[str, ...]

    def note_for_specific(self) -> str:
        return (f"contradicted by {self.general.id!r} of the same docstring ({self.general.list_name} list: "
                f"{self.general.sentence!r}), which promises {self.general.promise!r} for these calls; they are "
                "judged against this sentence, the more specific one")

    def note_for_general(self) -> str:
        return (f"contradicts {self.specific.id!r} of the same docstring ({self.specific.list_name} list: "
                f"{self.specific.sentence!r}), which promises {self.specific.promise!r} for some of this sentence's "
                "calls; those calls are judged against that more specific sentence and left out here")


def _case_values(entry: Entry) -> dict[str, set]:
    values: dict[str, set] = {}
    for case in entry.cases:
        for name, value in case:
            values.setdefault(name, set()).add(value)
    return values


def _within(inner: Entry, outer: Entry) -> bool:
    """Are all of ``inner``'s calls among ``outer``'s (devices, keyword values, the other conditions)?"""
    if outer.devices and not (inner.devices and set(inner.devices) <= set(outer.devices)):
        return False
    inner_values, outer_values = _case_values(inner), _case_values(outer)
    if any(name not in inner_values or not inner_values[name] <= values for name, values in outer_values.items()):
        return False
    if outer.dtypes and not (inner.dtypes and set(inner.dtypes) <= set(outer.dtypes)):
        return False
    return (not set(outer.qualifiers) - set(inner.qualifiers)
            and all(not getattr(outer, flag) or getattr(inner, flag)
                    for flag in ("indices_output", "weights_given", "quantized", "sparse_dense")))


def find_contradictions(entries: list[Entry]) -> list[Contradiction]:
    """Every pair of entries of one docstring (source and release) about the same op and
    direction (forward or backward) whose promises are opposite (``deterministic`` against
    ``raises``) while one covers all of the other's calls.

    Two such entries of the same scope (each covers the other's calls) leave no sentence to judge
    by: :class:`CatalogError` naming both bullets, as for two bullets with one id.
    """
    found = []
    for a, b in itertools.combinations(entries, 2):
        if (a.op != b.op or a.source != b.source or a.doc_version != b.doc_version or a.backward != b.backward
                or {a.promise, b.promise} != {"deterministic", "raises"}):
            continue
        a_in_b, b_in_a = _within(a, b), _within(b, a)
        if a_in_b and b_in_a:
            raise CatalogError(f"{a.doc_version or 'docstring'}: {a.list_name} bullet {a.position} ({a.sentence!r}) and "
                               f"{b.list_name} bullet {b.position} ({b.sentence!r}) promise opposite things for the same "
                               "calls, and neither is more specific")
        if a_in_b or b_in_a:
            specific, general = (a, b) if a_in_b else (b, a)
            found.append(Contradiction(specific=specific, general=general, devices=specific.devices))
    return found
